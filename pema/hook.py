"""`pema.enabled=true` as an option of any fine-tuning method: attach after the model and its features exist (before
the optimizer is built), finish after training. Registered as the training option `pema` (experiments.registry.OPTIONS):
every method that lists it (method=finetune) attaches it through experiments.hooks.

    pema = attach(cfg.pema, model, tok, {"train": train, "eval": evals}, ctx.output_dir)   # E' in place of E
    ... fit(model, ...) ...
    metrics.update(pema.finish(model, device))                                            # merged back
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn

from pema import vocab
from pema.partial import PartialEmbedding, PemaError, VocabMap, find_owner, input_embedding


def keep_ids(tok, keep_special: bool) -> list[int]:
    """Ids V' always holds: the pad id, and (keep_special) every special token of the tokenizer."""
    ids = [tok.pad_token_id] if tok.pad_token_id is not None else []
    if keep_special:
        ids += list(tok.all_special_ids)
    return sorted({int(i) for i in ids})


def read_splits(named, has_dev: bool) -> list[str]:
    """The splits V' counts: those named, and the dev split wherever train is named and the run has one (carved from
    train by task.dev_from_train, or the task's own): the fine-tuned model reads dev to choose its checkpoint, so its
    ids must be in V' as much as train's."""
    named = list(named)
    return named + ["dev"] if has_dev and "train" in named and "dev" not in named else named


def sub_vocabulary(features: dict, splits, rows: int, keep=()) -> tuple[VocabMap, vocab.Usage]:
    """V' (as an id map) from the token ids of the named tokenized splits (and dev with train: read_splits)."""
    splits = read_splits(splits, "dev" in features)
    missing = [s for s in splits if s not in features]
    if missing:
        raise PemaError(f"pema.splits names {missing}, but this run has the splits {sorted(features)}; "
                        f"set pema.splits to a subset of them")
    counts = vocab.count((vocab.flat_ids(features[s]) for s in splits), rows)
    return VocabMap.from_selected(vocab.select(counts, keep), rows), vocab.usage(counts)


class Attached:
    """A model fine-tuning with E'; `finish` merges it back and returns the run's pema/* metrics."""

    def __init__(self, partial: PartialEmbedding, usage: vocab.Usage, n_params_full: int, prepare_s: float,
                 check_inputs: dict[str, torch.Tensor] | None):
        self.partial, self.usage, self.n_params_full, self.prepare_s = partial, usage, n_params_full, prepare_s
        self.check_inputs = check_inputs
        self.trainable_partial = 0

    def finish(self, model: nn.Module, device: torch.device | str = "cpu") -> dict[str, float]:
        p = self.partial
        self.trainable_partial = sum(t.numel() for t in model.parameters() if t.requires_grad)
        n_partial = sum(t.numel() for t in model.parameters())
        before = self._logits(model, device)
        t0 = time.perf_counter()
        p.merge()
        merge_s = time.perf_counter() - t0
        after = self._logits(model, device)
        full = sum(t.numel() for t in model.parameters())
        red = vocab.Reduction(rows=p.rows, used=p.vmap.used, d=p.d, n_params=self.n_params_full)
        out = {"pema/vocab_rows": p.rows, "pema/vocab_used": p.vmap.used, "pema/tokens_total": self.usage.total,
               "pema/embedding_reduction_pct": red.embedding_pct, "pema/model_reduction_pct": red.model_pct,
               "pema/params_removed": red.removed, "pema/params_total_partial": n_partial,
               "pema/params_trainable_partial": self.trainable_partial,
               "time/pema_prepare_s": self.prepare_s, "time/pema_merge_s": merge_s,
               # after the merge the model is the full one again (what the baseline reports)
               "params/total": full, "params/trainable": sum(t.numel() for t in model.parameters() if t.requires_grad)}
        if before is not None:
            out["pema/merge_max_abs_diff"] = float((before - after).abs().max())
        return out

    def _logits(self, model, device):
        if self.check_inputs is None:
            return None
        was = model.training
        model.eval()
        with torch.inference_mode():
            out = model(**{k: v.to(device) for k, v in self.check_inputs.items()}).logits.float().cpu()
        model.train(was)
        return out


def attach(pema_cfg, model: nn.Module, tok, features: dict, output_dir: str | Path | None = None,
           check_batch: int = 8) -> Attached:
    """Count V' over `pema_cfg.splits` of `features` (tokenized exactly as the run feeds them), then put E' in place of
    E inside `model`. Call before building the optimizer."""
    t0 = time.perf_counter()
    owner = find_owner(model)
    rows = input_embedding(owner).weight.shape[0]
    n_full = sum(t.numel() for t in model.parameters())
    vmap, usage = sub_vocabulary(features, list(pema_cfg.splits), rows, keep_ids(tok, pema_cfg.keep_special))
    partial = PartialEmbedding(owner, vmap, tied=pema_cfg.tied,
                               offload_dir=output_dir if pema_cfg.offload else None, pad_id=tok.pad_token_id)
    prepare_s = time.perf_counter() - t0
    check = None
    if pema_cfg.check_merge and "eval" in features and len(features["eval"]):
        from experiments.evaluate import token_inputs
        check = token_inputs(features["eval"], tok.pad_token_id)(0, min(check_batch, len(features["eval"])))
    return Attached(partial, usage, n_full, prepare_s, check)


def hook(cfg, ctx, model: nn.Module, tok, features: dict) -> Attached | None:
    """`pema.enabled=true` as a training option (registered in experiments.registry.OPTIONS, called through
    experiments.hooks): `attach` with the full matrix offloaded to the run's output dir."""
    if not cfg.pema.enabled:
        return None
    return attach(cfg.pema, model, tok, features, ctx.output_dir)
