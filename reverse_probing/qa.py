"""The stand-in QA target (Quoref): the sources' sub-token features from the activation store, the aggregator, then
the suite's extractive-QA head, trained by the suite's loop. The aggregator trains at method.aggregator_lr, as the
coreference target's aggregator group does ([R]: the aggregator sits in the encoder group)."""
from __future__ import annotations

import re
import time
from collections import Counter

import torch
from omegaconf import DictConfig, OmegaConf

from experiments import data
from experiments.cached import Cached
from experiments.config import ConfigError
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.metrics import squad_em_f1
from experiments.models import SpanHead, tokenizer_fingerprint
from experiments.optim import own_lr
from experiments.train import fit
from reverse_probing.aggregate import Aggregator
from reverse_probing.extract import read_variant, width
from reverse_probing.features import load_source, memo, read_layer
from reverse_probing.model import SpanProbe, parameter_counts


def qa_states(cfg, ctx, model: DictConfig, feats, split: str, layer) -> list[torch.Tensor]:
    """Per window, the source's extracted features (T, d_i) from the store (every layer stored once)."""
    tok, enc, fp = load_source(model)

    def view():  # lazy: a run reads only the layers its variant needs (all of them would be GBs per source)
        return ctx.store().hidden_states(enc, data.rows_of(feats), "all", tokenizer_key=tokenizer_fingerprint(tok),
                                         max_length=data.max_length(cfg.task, cfg.data), select="all",
                                         batch_size=cfg.method.feature_batch, device=ctx.device, model_key=fp)
    ident = OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["data", "task"]))
    states = memo(("qa-states", model.name, split, ident), view)
    layers = {k: states.layer(k) for k in range(model.num_layers + 1)}
    return [read_variant(lambda k, i=i: layers[k][i], model.num_layers, cfg.method.variant, layer, cfg.method.concat_n)
            for i in range(len(feats))]


def majority_qa(rows) -> dict[str, float]:
    """A trivial answerer's scores (the needs-signal baseline of a span-QA target with no classes): the passage's most
    frequent capitalised word, a name for most Quoref questions (whose answers are mostly people)."""
    def guess(context: str) -> str:
        names = Counter(re.findall(r"\b[A-Z][a-z]+\b", context))
        return names.most_common(1)[0][0] if names else ""
    refs = [list(r["answers"]["text"]) for r in rows]
    return squad_em_f1([guess(r["context"]) for r in rows], refs)


@torch.no_grad()
def mean_alpha(probe, cached, n: int = 256) -> list[float]:
    """The attention weight of each source, averaged over the real tokens of the first n dev windows (Fig. 9)."""
    b = cached.batch(list(range(min(n, len(cached.states)))))
    _, alpha = probe.aggregator(list(b["states"].float().unbind(2)))
    return alpha[b["attention_mask"].bool()].mean(0).tolist()


def qa_probe(cfg: DictConfig, models) -> torch.nn.Module:
    """The stand-in target's probe: the aggregator, then the suite's QA head. The head trains at train.lr; the
    aggregator's parameters at method.aggregator_lr, the rate the coref target's aggregator group has ([R]: the
    aggregator sits in the encoder group), so that attention vs mean compares the same aggregator on both targets.
    Within the suite's trainer (one AdamW, one schedule) that group shares the head's warm-up and decay and is not
    weight-decayed (experiments.optim.own_lr)."""
    m = cfg.method
    d = models[0].hidden_size
    aggregator = Aggregator(m.aggregate, [width(m.variant, x.hidden_size, m.concat_n) for x in models], d, m.key_size)
    for p in aggregator.parameters():
        own_lr(p, m.aggregator_lr)
    return SpanProbe(aggregator, SpanHead(d))


def run(cfg: DictConfig, ctx: RunContext, models, layers) -> dict[str, float]:
    m, task = cfg.method, cfg.task
    toks = [load_source(x)[0] for x in models]
    if len({tokenizer_fingerprint(t) for t in toks}) > 1:
        raise ConfigError(f"method.sources={list(m.sources)}: a qa target aggregates sub-tokens, so every source needs "
                          "the same tokenizer (minilm-l6-pii's trimmed vocabulary differs: leave it out)")
    tok = toks[0]
    raw = data.load_splits(task, cfg.data)
    n = data.max_length(task, cfg.data)
    t0 = time.perf_counter()
    feats, cached = {}, {}
    for split in ("train", "dev", "eval"):
        feats[split] = memo(("qa-feats", split, OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["data", "task"]))),
                            lambda split=split: data.encode(raw[split], tok, task, n, train=(split == "train")))
        per = [qa_states(cfg, ctx, x, feats[split], split, layer) for x, layer in zip(models, layers)]
        stacked = [torch.stack(cols, 1) for cols in zip(*per)]  # (T, k, d_in) per window
        targets = {k: list(feats[split][k]) for k in ("start_positions", "end_positions")} if split == "train" else {}
        cached[split] = Cached(stacked, targets)
    features_s = time.perf_counter() - t0
    torch.manual_seed(cfg.seed)
    probe = qa_probe(cfg, models)
    batches, n_batches = cached["train"].batches(cfg.hardware.batch_size, cfg.seed)
    alphas = []

    def scorer(split):
        def score_(model):
            out = evaluate(model, feats[split], raw[split], task, cfg.hardware.eval_batch_size, ctx.device,
                           tok.pad_token_id, cached[split].inputs).as_split(split)
            if split == "dev" and m.aggregate.startswith("attention") and m.log_alpha:
                alphas.append(mean_alpha(model, cached["dev"]))
            return out
        return score_
    result = fit(probe, batches, n_batches, cfg.train, evaluate=scorer("dev"), objective="dev/f1",
                 higher_is_better=True, device=ctx.device, precision=cfg.hardware.precision,
                 on_eval=lambda s, mt: ctx.log_metrics(mt, s), test=scorer("eval"), log_metrics=ctx.sink)
    if getattr(result.test, "per_example", None):
        ctx.per_example["eval"] = result.test.per_example
    ctx.extra.update(curve=[{"step": h["step"], "dev/f1": h["dev/f1"]} for h in result.history],
                     **({"alpha": alphas} if alphas else {}))
    ctx.n_samples.update({f"{s}_examples": len(raw[s]) for s in raw} | {f"{s}_windows": len(feats[s]) for s in feats})
    baseline = {f"eval/majority_{k}": v for k, v in majority_qa(raw["eval"]).items()}
    return {**result.best, **result.test, **baseline, "train/steps": result.steps, "train/best_step": result.best_step,
            "train/epochs": result.epochs, "time/train_s": result.train_s, "time/step_ms": result.step_ms,
            "time/features_s": features_s, **read_layer(cfg, models, layers), **parameter_counts(probe)}
