"""method=reverse_probing_bench: what the activation store buys a probing run. One epoch of head-only training (the
aggregator and the coreference head on stored features, through the suite's loop) against one forward pass of the
frozen source encoders over the same training documents (what every epoch would cost on top without the store),
interleaved in one process: warm-up, then `repeats` rounds, medians and the ratio per round."""
from __future__ import annotations

import statistics

import numpy as np
import torch
from omegaconf import DictConfig

from experiments.config import ConfigError, TrainConfig
from experiments.context import RunContext
from experiments.store import batched_hidden_states
from experiments.timing import interleaved
from experiments.train import fit
from reverse_probing import supplied
from reverse_probing.config import check
from reverse_probing.documents import words_of
from reverse_probing.extract import width
from reverse_probing.features import coref_data, load_source, safe_words
from reverse_probing.training import build, optimizers, training_batches


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    models, layers, extras = check(cfg)
    supplied.ready(cfg, models, extras)
    if cfg.task.type != "coref":
        raise ConfigError(f"method=reverse_probing_bench times the coreference probe; task={cfg.task.name} is "
                          f"{cfg.task.type}")
    m = cfg.method
    data = coref_data(cfg, ctx, models, layers, {})
    docs, feats, raw = data["train"]
    widths = [width(m.variant, x.hidden_size, m.concat_n) for x in models]
    torch.manual_seed(cfg.seed)
    probe = build(cfg, widths, models[0].hidden_size).to(ctx.device)
    # one optimizer state, schedule and document order across the rounds, as epochs of one run would have
    batches, per_epoch = training_batches(cfg, docs, feats, np.random.default_rng(cfg.seed))
    opts = optimizers(cfg, probe, m.max_epochs * per_epoch)
    one_epoch = TrainConfig(epochs=1, progress=False)

    # the encoders' side: every segment of every training document through every source (inference, batched)
    segments = []
    for x in models:
        tok, enc, _ = load_source(x)
        rows = []
        for doc, d in zip(raw, docs):
            words = safe_words(tok, words_of(doc)[0])
            rows += [{"input_ids": tok(words[a:b], is_split_into_words=True)["input_ids"]} for a, b in d.segments]
        segments.append((enc, rows))

    def forward():
        for enc, rows in segments:
            for _ in batched_hidden_states(enc, rows, range(len(rows)), m.feature_batch, ctx.device):
                pass

    def epoch():
        fit(probe, batches, per_epoch, one_epoch, evaluate=None, objective=None, higher_is_better=True,
            device=ctx.device, optimizers=opts)

    times = interleaved({"head_epoch": epoch, "encoder_forward": forward}, repeats=m.repeats, warmup=m.warmup,
                        device=ctx.device)
    ratios = [f / e for f, e in zip(times["encoder_forward"], times["head_epoch"])]
    ctx.extra.update(device=ctx.device_name, threads=torch.get_num_threads(), times=times)
    ctx.n_samples.update(train_docs=len(docs), segments=len(segments[0][1]), sources=len(models))
    return {"bench/ratio": statistics.median(ratios), "bench/ratio_lo": min(ratios), "bench/ratio_hi": max(ratios),
            "bench/head_epoch_s": statistics.median(times["head_epoch"]),
            "bench/encoder_forward_s": statistics.median(times["encoder_forward"])}
