"""method=recycling: one of the paper's five variants trained and scored with the suite's fine-tuning recipe; the
cached variants train on layer-k states read from the activation store instead of token batches."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from experiments import data, recipe
from experiments.context import RunContext
from experiments.models import count_parameters, tokenizer_fingerprint
from recycling import cache
from recycling.config import ADAPTERS, CACHED, check
from recycling.model import apply_variant, blocks, lower_model, resolve_k

def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    m = cfg.method
    tok, model, splits = recipe.prepare(cfg)
    recipe.record_samples(cfg, ctx, splits)
    k = resolve_k(m.k, len(blocks(model.encoder)))
    total = count_parameters(model)["params/total"]  # the full model's size: trainable % is relative to it
    lower = lower_model(model.encoder, k) if m.variant in CACHED else None
    trained = apply_variant(model, m.variant, k, m.bottleneck, m.adapter_act)
    # the adapter variants train at method.adapter_lr: a copy of the training settings, so the record's config
    # stays the one that was asked for (method.adapter_lr says the rest)
    train_cfg = cfg.train
    if m.variant in ADAPTERS and m.adapter_lr is not None:
        train_cfg = OmegaConf.merge(cfg.train, {"lr": m.adapter_lr})
    pad = tok.pad_token_id
    # train/lr: the lr this variant trained at (method.adapter_lr or train.lr): what an lr selection compares
    extra = {"recycling/k": k, "recycling/layers_reduced_pct": 100.0 * k / len(blocks(model.encoder)),
             "train/lr": float(train_cfg.lr)}
    if lower is None:
        batches, n_batches = recipe.token_batches(cfg, ctx, splits.train, pad)
        metrics = recipe.fit_and_score(cfg, ctx, trained, splits, batches, n_batches, pad, train_cfg=train_cfg)
    else:
        store = ctx.store()
        caches = _caches(cfg, ctx, store, lower, splits, tokenizer_fingerprint(tok), k, pad, extra)
        del lower
        hits = _HitCounter(store)
        batches, n_batches = caches["train"].batches(cfg.hardware.batch_size, cfg.seed, cfg.train.group_by_length)
        metrics = recipe.fit_and_score(cfg, ctx, trained, splits, hits.per_epoch(batches), n_batches, pad,
                                       eval_inputs=caches["eval"].eval_inputs(),
                                       dev_inputs=caches["dev"].eval_inputs() if "dev" in caches else None,
                                       train_cfg=train_cfg)
        ctx.extra["cache_epochs"] = hits.epochs
        if hits.epochs:
            last = hits.epochs[-1]
            extra["cache/last_epoch"] = last["epoch"]
            extra["cache/last_epoch_hit_rate"] = last["hit_rate"]
    trainable = sum(p.numel() for p in trained.parameters() if p.requires_grad)
    return {**metrics, **extra, "params/total": total, "params/trainable": trainable,
            "params/trainable_pct": 100.0 * trainable / total}


def _caches(cfg: DictConfig, ctx: RunContext, store, lower, splits: recipe.Splits, tok_key: str, k: int, pad: int,
            extra: dict) -> dict[str, cache.LayerCache]:
    """The layer-k cache of every split, built through `store` (an example cached before is read, not computed);
    `extra` gets each split's computed examples and bytes."""
    n = data.max_length(cfg.task, cfg.data)
    out = {}
    for split, feats in (("train", splits.train), ("eval", splits.evals), ("dev", splits.dev)):
        if feats is None:
            continue
        rows = data.rows_of(feats)
        before = store.stats.computed
        states = cache.build(store, lower, rows, k, tokenizer_key=tok_key, max_length=n,
                             batch_size=cfg.hardware.eval_batch_size, device=ctx.device)
        out[split] = cache.LayerCache(states, k, rows, pad, in_ram=cfg.method.cache_in_ram)
        extra[f"cache/{split}_computed"] = store.stats.computed - before
        extra[f"cache/{split}_bytes"] = sum(states.lengths) * cfg.model.hidden_size * store.np_dtype.itemsize
    return out


class _HitCounter:
    """Counts cache hits and misses of each training epoch (a shuffled epoch > 1 must read only from the cache)."""

    def __init__(self, store):
        self.store, self.epochs = store, []

    def per_epoch(self, batches):
        def wrapped(epoch: int):
            # updated per batch: the trainer may stop mid-epoch and never exhaust this generator
            e = {"epoch": epoch + 1, "examples": 0, "hits": 0, "misses": 0, "computed": 0, "hit_rate": 0.0}
            self.epochs.append(e)
            s = self.store.stats
            it = iter(batches(epoch))
            while True:
                h0, m0, c0 = s.hits, s.misses, s.computed
                b = next(it, None)
                if b is None:
                    return
                e["examples"] += len(b["hidden"])
                e["hits"] += s.hits - h0
                e["misses"] += s.misses - m0
                e["computed"] += s.computed - c0
                e["hit_rate"] = e["hits"] / max(1, e["hits"] + e["misses"])
                yield b
        return wrapped
