"""Feature extraction (regime fe): the frozen backbone's block outputs z_1..z_n from the activation store, as the
inputs a FusionModel without its backbone trains and is scored on. Every block 1..L of an example is computed once
per model and shared by every fusion, budget and trial; a token task keeps only its labelled positions, where every
fusion but `deeper` gives the same logits as on the whole sentence (each is position-wise)."""
from __future__ import annotations

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from experiments import data
from experiments.cached import Cached
from experiments.context import RunContext
from experiments.memo import Memo
from experiments.models import pool
from experiments.store import model_fingerprint
from layer_fusion.assemble import blocks_of
from layer_fusion.fusion import final_norm_of
from layer_fusion.model import renorm_last

# a sweep in one process hashes its frozen backbone's weights and reads each split's cached blocks once
_memo = Memo(8)


def cached_blocks(cfg: DictConfig, ctx: RunContext, store, backbone: nn.Module, feats, tok_key: str,
                  select: str) -> list[torch.Tensor]:
    """Per example, its block outputs z_1..z_n as one (T_i or 1, n, d) tensor in the store's dtype, from the store
    (every block 1..L is stored once per example and model, whatever n this run reads)."""
    L, n = cfg.model.num_layers, blocks_of(cfg)
    rows = data.rows_of(feats)
    # the frozen backbone's weights are hashed once per process (0.2 s per 100 MB), not once per run
    key = _memo(("fingerprint", id(backbone), OmegaConf.to_yaml(cfg.model)), lambda: model_fingerprint(backbone))
    states = store.hidden_states(backbone, rows, list(range(1, L + 1)), tokenizer_key=tok_key,
                                 max_length=data.max_length(cfg.task, cfg.data), select=select,
                                 batch_size=cfg.method.feature_batch, device=ctx.device, model_key=key)
    norm = final_norm_of(backbone)
    out = []
    for i in range(len(rows)):
        z = states[i][:n].transpose(0, 1)  # (T_i, n, d)
        if norm is not None and n < L:
            with torch.no_grad():
                z = renorm_last(z.float(), norm).to(z.dtype)
        out.append(z.contiguous())
    return out


def labelled_positions(feats) -> list[list[int]]:
    """Per sentence, the positions a token head is scored at (the first piece of each word)."""
    return [[p for p, lab in enumerate(labels) if lab != -100] for labels in feats["labels"]]


def fe_inputs(cfg, ctx, backbone, feats, tok_key, pooled):
    """(train batches, batches per epoch, eval inputs per split, the features evaluation aligns with) from cached
    block outputs. Token tasks keep only the labelled positions unless the extra blocks need the whole sentence."""
    m = cfg.method
    store = ctx.store()
    select = "last" if pooled and cfg.model.pooling == "last" else "all"
    cached, score_feats = {}, {}
    for split in feats:
        key = (split, select, pooled, m.fusion == "deeper", blocks_of(cfg), tok_key,
               OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["model", "task", "data"])),
               tuple(ctx.extra.get("sample", ())) if split == "train" else ())
        cached[split], score_feats[split] = _memo(key, lambda: split_inputs(cfg, ctx, store, backbone, feats[split],
                                                                            tok_key, select, pooled))
    batches, n_batches = cached["train"].batches(cfg.hardware.batch_size, cfg.seed)
    return batches, n_batches, {s: cached[s].inputs for s in feats if s != "train"}, score_feats


def split_inputs(cfg, ctx, store, backbone, f, tok_key, select, pooled):
    """One split's cached block outputs as model inputs, and the features evaluation aligns with."""
    z = cached_blocks(cfg, ctx, store, backbone, f, tok_key, select)
    labels = list(f["labels"])
    if pooled:  # one state per example: the head's pooling applied to each block (pooling and fusion commute)
        if select == "all":
            z = [pool(s.float().transpose(0, 1), torch.ones(s.shape[1], s.shape[0], dtype=torch.long),
                      cfg.model.pooling).unsqueeze(0).to(s.dtype) for s in z]
    elif cfg.task.type == "ner" and cfg.method.fusion != "deeper":
        keep = labelled_positions(f)
        z = [s[k] for s, k in zip(z, keep)]
        labels = [[lab[p] for p in k] for lab, k in zip(labels, keep)]
        if "word_index" in f.column_names:
            f = f.map(lambda ex: {"word_index": [w for w in ex["word_index"] if w >= 0]})
    return Cached(z, {"labels": labels}), f
