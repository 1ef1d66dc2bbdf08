"""method=reverse_probing: frozen source encoders → extraction variant → token-wise aggregation → coref-hoi head.

Every layer of every source is computed once per document segment and kept in the activation store; a probing run
reads the layer(s) its variant needs, pools sub-tokens to words and trains only the aggregator and the head
(reverse_probing.training). In gold-mention mode (WinoGrande, WSC) only the mentions' words are read: the aggregator
is position-wise and the head reads nothing else, so this is the whole-document computation at those words. The
stand-in QA target (Quoref) trains the suite's QA head instead (reverse_probing.qa).
"""
from __future__ import annotations

import time

import torch
from omegaconf import DictConfig

from experiments.context import RunContext
from reverse_probing import qa, supplied
from reverse_probing.config import check
from reverse_probing.extract import width
from reverse_probing.features import coref_data, load_source, read_layer, units_used
from reverse_probing.model import parameter_counts
from reverse_probing.training import build, train


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    models, layers, extras = check(cfg)
    supplied.ready(cfg, models, extras)
    if cfg.task.type == "qa":
        return qa.run(cfg, ctx, models, layers)
    m = cfg.method
    ctx.extra.update(units_used([load_source(x)[0] for x in models]))
    t0 = time.perf_counter()
    data = {s: (docs, feats) for s, (docs, feats, _) in coref_data(cfg, ctx, models, layers, extras).items()}
    features_s = time.perf_counter() - t0
    widths = [width(m.variant, x.hidden_size, m.concat_n) for x in models]
    torch.manual_seed(cfg.seed)
    probe = build(cfg, widths, models[0].hidden_size)
    ctx.n_samples.update({f"{s}_docs": len(d[0]) for s, d in data.items()})
    out = train(cfg, ctx, probe, data, {p: data[p] for p in extras})
    return {**out, **read_layer(cfg, models, layers), **parameter_counts(probe), "time/features_s": features_s}
