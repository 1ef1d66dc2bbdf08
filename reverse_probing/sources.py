"""method=reverse_probing_source: build a frozen source encoder into the asset cache (models/<method.save_as>).

kind=finetune: the suite's Full fine-tune of `model=` on `task=` (the shared trainer; dev-selected where the task
has a dev split). Its own task score is the record's metrics: evidence that the source learned the task it stands
for. kind=coref_target: the CorefTarget upper bound [P §4]: the encoder trained together with the coreference head on
the target task (`task=`, a coref task), then saved and probed frozen like every other source. kind=data: the coref
task's own offline data (data/<task.offline>: CoNLL-2012 from the hub's copy or a local one, reverse_probing.conll2012).

The directory gets a MANIFEST (files, hashes, the run that made it) last and is renamed into place, so a killed build
is never used; conf/model/<save_as>.yaml points at it like at any packaged model.
"""
from __future__ import annotations

import json

import torch
from omegaconf import DictConfig, OmegaConf

from experiments import recipe
from experiments.assets import cache_dir, staged, write_manifest
from experiments.config import ConfigError
from experiments.context import RunContext
from experiments.models import load_encoder
from experiments.results import provenance
from reverse_probing import conll2012, supplied
from reverse_probing.documents import words_of
from reverse_probing.extract import positions
from reverse_probing.features import at_positions, load_docs, prepared, safe_words, unit_of, units_used
from reverse_probing.training import build, train

KINDS = ("finetune", "coref_target", "data")


def save(encoder: torch.nn.Module, tok, name: str, facts: dict) -> str:
    """models/<name> in the asset cache, replaced atomically; returns its path."""
    final = cache_dir() / "models" / name
    with staged(final) as stage:
        encoder.save_pretrained(stage)
        tok.save_pretrained(stage)
        write_manifest(stage, {"asset": f"models/{name}", "built_by": facts})
    return str(final)


def finetune(cfg: DictConfig, ctx: RunContext):
    """The suite's fine-tuning recipe, unchanged: the source is the fine-tuned model's encoder."""
    tok, model, splits = recipe.prepare(cfg)
    return recipe.finetune(cfg, ctx, tok, model, splits), model.encoder, tok


def live_features(cfg: DictConfig, tok, encoder: torch.nn.Module, raw: list[dict], docs, device):
    """A callable idx -> [[per-document last-layer features at the kept positions]]: the training encoder run on the
    documents' segments now (the same segments, positions and pooling as the stored path)."""
    pad = tok.pad_token_id or 0

    def feats(idx: list[int]) -> list[list[torch.Tensor]]:
        rows, owner = [], []
        for i in idx:
            words = safe_words(tok, words_of(raw[i])[0])
            for a, b in docs[i].segments:
                e = tok(words[a:b], is_split_into_words=True)
                rows.append((e["input_ids"], e.word_ids(), b - a))
                owner.append(i)
        longest = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), longest), pad, dtype=torch.long)
        mask = torch.zeros(len(rows), longest, dtype=torch.long)
        for r, (x, _, _) in enumerate(rows):
            ids[r, :len(x)], mask[r, :len(x)] = torch.tensor(x), 1
        hidden = encoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        per: dict[int, list[torch.Tensor]] = {i: [] for i in idx}
        for r, ((x, wids, n), i) in enumerate(zip(rows, owner)):
            per[i].append(positions(hidden[r, :len(x)], wids, n, unit_of(docs[i]), cfg.method.word_pooling))
        return [[at_positions(torch.cat(per[i], 0), docs[i], 0) for i in idx]]
    return feats


def coref_target(cfg: DictConfig, ctx: RunContext):
    """The encoder + identity aggregator + head trained on the target (early stopping on dev), encoder kept."""
    m = cfg.method
    if cfg.task.type != "coref":
        raise ConfigError(f"method.kind=coref_target trains on a coref task; task={cfg.task.name} is {cfg.task.type}")
    if m.aggregate != "mean" or m.variant != "full":
        raise ConfigError("method.kind=coref_target trains one encoder's last layer: set method.aggregate=mean and "
                          f"method.variant=full (got {m.aggregate}, {m.variant})")
    tok, encoder = load_encoder(cfg.model)
    encoder.to(ctx.device).train()
    ctx.extra.update(units_used([tok]))
    raw = load_docs(cfg.task, cfg.data)
    data = {}
    for split, rows in raw.items():
        docs = prepared(cfg, rows, [tok])
        data[split] = (docs, live_features(cfg, tok, encoder, rows, docs, ctx.device))
    torch.manual_seed(cfg.seed)
    model = build(cfg, [cfg.model.hidden_size], cfg.model.hidden_size).to(ctx.device)
    ctx.n_samples.update({f"{s}_docs": len(d[0]) for s, d in data.items()})
    return train(cfg, ctx, model, data, encoder=encoder), encoder, tok


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    if m.kind not in KINDS:
        raise ConfigError(f"method.kind={m.kind!r} is not one of {', '.join(KINDS)}")
    if m.kind == "data":
        metrics, ctx.extra["saved_to"] = conll2012.build(cfg.task, cfg.data)
        return metrics
    supplied.check_task(cfg.task, cfg.data)
    supplied.check_models([cfg.model], "model")
    if not m.save_as or m.save_as == cfg.model.name:
        raise ConfigError(f"method.save_as={m.save_as!r}: name the new encoder (not the base model's own name), e.g. "
                          f"{cfg.model.name}-ner; conf/model/<save_as>.yaml then loads it")
    metrics, encoder, tok = (finetune if m.kind == "finetune" else coref_target)(cfg, ctx)
    encoder.eval()
    facts = {"method": m.kind, "base_model": cfg.model.name, "task": cfg.task.name, "seed": cfg.seed,
             "git_sha": provenance(str(ctx.device), False)["git_sha"],
             "config": json.loads(json.dumps(OmegaConf.to_container(cfg.method, resolve=True))),
             "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}}
    ctx.extra["saved_to"] = save(encoder, tok, m.save_as, facts)
    return metrics
