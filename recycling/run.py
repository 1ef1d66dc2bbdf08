"""method=recycling (accuracy of the five variants) and method=recycling_bench (the efficiency tables)."""
from __future__ import annotations

import logging

from omegaconf import DictConfig, OmegaConf

from experiments import batches as B
from experiments import data as D
from experiments.context import RunContext
from experiments.finetune import encode_dev, fit_and_score, prepare, record_samples
from experiments.models import count_parameters, tokenizer_fingerprint
from recycling import cache as C
from recycling.config import CACHED, VARIANTS
from recycling.model import apply_variant, blocks, lower_model, resolve_k

log = logging.getLogger(__name__)


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    if m.variant not in VARIANTS:
        raise ValueError(f"unknown recycling variant {m.variant!r}; valid: {', '.join(VARIANTS)}")
    tok, model, raw, train, evals = prepare(cfg)
    dev = encode_dev(cfg, tok, raw)  # None unless the task selects its checkpoint on a dev split
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(tok)
    record_samples(cfg, ctx, raw, train, evals)
    k = resolve_k(m.k, len(blocks(model.encoder)))
    total = count_parameters(model)["params/total"]  # the full model's size: trainable % is relative to it
    lower = lower_model(model.encoder, k) if m.variant in CACHED else None
    trained = apply_variant(model, m.variant, k, m.bottleneck, m.adapter_act)
    if "adapters" in m.variant and m.adapter_lr is not None:
        cfg = OmegaConf.merge(cfg, {"train": {"lr": m.adapter_lr}})
    hw, pad = cfg.hardware, tok.pad_token_id
    # train/lr: the lr this variant trained at (method.adapter_lr or train.lr): what an lr selection compares
    extra = {"recycling/k": k, "recycling/layers_reduced_pct": 100.0 * k / len(blocks(model.encoder)),
             "train/lr": float(cfg.train.lr)}
    if lower is None:
        batches, n_batches = B.train_batches(train, hw.batch_size, pad, cfg.seed, cfg.train.group_by_length,
                                             **B.loading(hw, ctx.device))
        metrics = fit_and_score(cfg, ctx, trained, raw, evals, batches, n_batches, pad, dev=dev)
    else:
        store = ctx.store()
        n = D.max_length(cfg.task, cfg.data)
        caches = {}
        for split, feats in (("train", train), ("eval", evals), ("dev", dev)):
            if feats is None:
                continue
            rows = D.rows_of(feats)
            before = store.stats.computed
            states = C.build(store, lower, rows, k, tokenizer_key=ctx.tokenizer_fingerprint, max_length=n,
                             batch_size=hw.eval_batch_size, device=ctx.device)
            caches[split] = C.LayerCache(states, k, rows, pad, in_ram=m.cache_in_ram)
            extra[f"cache/{split}_computed"] = store.stats.computed - before
            extra[f"cache/{split}_bytes"] = sum(states.lengths) * cfg.model.hidden_size * store.np_dtype.itemsize
        del lower
        hits = _HitCounter(store)
        batches, n_batches = caches["train"].batches(hw.batch_size, cfg.seed, cfg.train.group_by_length)
        metrics = fit_and_score(cfg, ctx, trained, raw, evals, hits.per_epoch(batches), n_batches, pad,
                                eval_inputs=caches["eval"].eval_inputs(), dev=dev,
                                dev_inputs=caches["dev"].eval_inputs() if dev is not None else None)
        ctx.extra["cache_epochs"] = hits.epochs
        if hits.epochs:
            last = hits.epochs[-1]
            extra["cache/last_epoch"] = last["epoch"]
            extra["cache/last_epoch_hit_rate"] = last["hit_rate"]
    trainable = sum(p.numel() for p in trained.parameters() if p.requires_grad)
    return {**metrics, **extra, "params/total": total, "params/trainable": trainable,
            "params/trainable_pct": 100.0 * trainable / total}


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
