"""method=reverse_probing_cossim (Fig. 3): how close each source's token embeddings are to the CorefTarget encoder's,
before any aggregation: the cosine per word between the two models' vectors at the same layer, averaged over every
real word of a document (padding never enters) and then over the documents of one split."""
from __future__ import annotations

import torch
from omegaconf import DictConfig
from torch.nn import functional

from experiments.config import ConfigError, ModelConfig, load_group
from experiments.context import RunContext
from reverse_probing import supplied
from reverse_probing.config import check
from reverse_probing.features import load_docs, load_source, prepared, source_states


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    if m.gold_mentions:
        raise ConfigError("method=reverse_probing_cossim averages over every word of a document: set "
                          "method.gold_mentions=false (gold-mention mode reads the mentions' words only)")
    models, _, extras = check(cfg)
    ref = load_group("model", m.reference, ModelConfig, "method.reference")
    supplied.ready(cfg, models + [ref], extras)
    everyone = models + [ref]
    toks = [load_source(x)[0] for x in everyone]
    rows = load_docs(cfg.task, cfg.data, (m.split,))[m.split]
    docs = prepared(cfg, rows, toks)
    sims = {}
    layer = lambda x: m.layer if m.layer is not None else x.num_layers  # noqa: E731
    target = [s[layer(ref)].float() for s in source_states(cfg, ctx, ref, rows, docs)]
    for x in models:
        states = source_states(cfg, ctx, x, rows, docs)
        per_doc = [functional.cosine_similarity(s[layer(x)].float(), t, dim=-1).mean() for s, t in zip(states, target)]
        sims[f"cossim/{x.name}"] = float(torch.stack(per_doc).mean())
    ctx.n_samples.update(docs=len(docs), words=sum(d.n_words for d in docs))
    ctx.extra.update(reference=ref.name, split=m.split)
    return sims
