"""method=reverse_probing_bench: what the activation store buys a probing run. One epoch of head-only training (the
aggregator and the coreference head on stored features) against one forward pass of the frozen source encoders over
the same training documents (what every epoch would cost on top without the store), interleaved in one process:
warm-up, then `repeats` rounds, medians and the ratio per round."""
from __future__ import annotations

import statistics

import numpy as np
import torch
from omegaconf import DictConfig

from experiments.context import RunContext
from experiments.store import batched_hidden_states
from experiments.timing import interleaved
from reverse_probing import run as R
from reverse_probing.documents import words_of


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    models, layers, extras = R.check(cfg)
    R.ready(cfg, models, extras)
    if cfg.task.type != "coref":
        raise R.ConfigError(f"method=reverse_probing_bench times the coreference probe; task={cfg.task.name} is "
                            f"{cfg.task.type}")
    m = cfg.method
    data = R.coref_data(cfg, ctx, models, layers, {})
    docs, feats, raw = data["train"]
    widths = [R.width(m.variant, x.hidden_size, m.concat_n) for x in models]
    torch.manual_seed(cfg.seed)
    probe = R.build(cfg, widths, models[0].hidden_size).to(ctx.device)
    opts = R.optimizers(cfg, probe, m.max_epochs * -(-len(docs) // m.docs_per_step))
    rng = np.random.default_rng(cfg.seed)

    # the encoders' side: every segment of every training document through every source (inference, batched)
    segments = []
    for x in models:
        tok, enc, _ = R.load_source(x)
        rows = []
        for doc, d in zip(raw, docs):
            words = R.safe_words(tok, words_of(doc)[0])
            rows += [{"input_ids": tok(words[a:b], is_split_into_words=True)["input_ids"]} for a, b in d.segments]
        segments.append((enc, rows))

    def forward():
        for enc, rows in segments:
            for _ in batched_hidden_states(enc, rows, range(len(rows)), m.feature_batch, ctx.device):
                pass

    def epoch():
        probe.train()
        R.train_epoch(cfg, probe, opts, docs, feats, rng)

    times = interleaved({"head_epoch": epoch, "encoder_forward": forward}, repeats=m.repeats, warmup=m.warmup,
                        device=ctx.device)
    ratios = [f / e for f, e in zip(times["encoder_forward"], times["head_epoch"])]
    ctx.extra.update(device=ctx.device_name, threads=torch.get_num_threads(), times=times)
    ctx.n_samples.update(train_docs=len(docs), segments=len(segments[0][1]), sources=len(models))
    return {"bench/ratio": statistics.median(ratios), "bench/ratio_lo": min(ratios), "bench/ratio_hi": max(ratios),
            "bench/head_epoch_s": statistics.median(times["head_epoch"]),
            "bench/encoder_forward_s": statistics.median(times["encoder_forward"])}
