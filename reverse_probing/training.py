"""The coreference probe: built, trained through the suite's loop (experiments.train.fit) with the official code's
optimisation, and scored.

Optimisation as the official code [R]: the head with Adam (1e-4, no decay, linear decay to 0 over max_epochs x
steps), the aggregator in the encoder group (AdamW 1e-5, wd 0.01, 10% warm-up), clipping 1.0 each, early stopping on
dev CoNLL F1 (patience, not before min_epochs); eval (and the extra evaluation sets) scored once at the best dev
epoch."""
from __future__ import annotations

import statistics

import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

from experiments.config import TrainConfig
from experiments.context import RunContext
from experiments.metrics import coref_scores
from experiments.optim import linear_schedule, param_groups, warmup_steps
from experiments.train import Optimization, fit
from reverse_probing.aggregate import Aggregator
from reverse_probing.coref import CorefHead
from reverse_probing.documents import Doc, collate, window
from reverse_probing.model import ReverseProbe


def build(cfg: DictConfig, widths: list[int], d: int) -> ReverseProbe:
    m = cfg.method
    head = CorefHead(d, m.ffnn_size, m.feature_size, m.max_span_width, m.dropout, max_segments=m.max_training_segments,
                     top_span_ratio=m.top_span_ratio, max_antecedents=m.max_top_antecedents)
    return ReverseProbe(Aggregator(m.aggregate, widths, d, m.key_size), head)


def optimizers(cfg: DictConfig, probe: ReverseProbe, total: int,
               encoder: nn.Module | None = None) -> list[Optimization]:
    """[R] two optimisers: the head (Adam, no decay, linear decay to 0) and the aggregator in the encoder group
    (AdamW with decay off biases and norms, warm-up then linear decay; a training encoder joins it at its own lr);
    both schedules span `total` steps, each clips its own parameters."""
    m = cfg.method
    head = torch.optim.Adam(probe.head.parameters(), lr=m.head_lr, eps=1e-6)
    out = [Optimization(head, linear_schedule(head, 0, total), list(probe.head.parameters()), m.grad_clip)]
    has_parameters = any(True for _ in probe.aggregator.parameters())  # mean and sum have none
    groups = param_groups(probe.aggregator, m.aggregator_weight_decay) if has_parameters else []
    if encoder is not None:
        groups += [{**g, "lr": m.encoder_lr} for g in param_groups(encoder, m.aggregator_weight_decay)]
    groups = [g for g in groups if g["params"]]
    if groups:
        opt = torch.optim.AdamW(groups, lr=m.aggregator_lr, eps=1e-6)
        params = [p for g in groups for p in g["params"]]
        out.append(Optimization(opt, linear_schedule(opt, warmup_steps(m.aggregator_warmup, total), total), params,
                                m.grad_clip))
    return out


class WithEncoder(nn.Module):
    """The probe and a source encoder that trains with it (the CorefTarget): one module to train, switch between
    training and evaluation, and checkpoint. The encoder's features reach the probe through the batches."""

    def __init__(self, probe: ReverseProbe, encoder: nn.Module):
        super().__init__()
        self.probe, self.encoder = probe, encoder

    def forward(self, **batch):
        return self.probe(**batch)


def take(feats, idx: list[int], rows: list[list[int]] | None = None) -> list[list[torch.Tensor]]:
    """Per source, the features of documents `idx` (optionally only rows `rows[b]` of each): from the cached lists,
    or computed now by a callable (a source that trains: the CorefTarget)."""
    per = feats(idx) if callable(feats) else [[f[i] for i in idx] for f in feats]
    return per if rows is None else [[x[r] for x, r in zip(f, rows)] for f in per]


def on(batch: dict, device: torch.device) -> dict:
    """A collated batch with every tensor (each source's features too) on `device`, the probe's."""
    return {k: [x.to(device) for x in v] if k == "sources" else v.to(device) for k, v in batch.items()}


def device_of(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def batches(n: int, size: int, rng: np.random.Generator | None = None):
    order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i:i + size].tolist() for i in range(0, n, size)]


def training_batches(cfg: DictConfig, docs: list[Doc], feats, rng: np.random.Generator):
    """(epoch -> batches, batches per epoch): each epoch the documents in a new random order, `docs_per_step` a step,
    a longer one cut to max_training_segments consecutive segments at a random offset [R]; a batch is the probe's
    keyword arguments."""
    m = cfg.method

    def epoch_batches(epoch: int):
        for idx in batches(len(docs), m.docs_per_step, rng):
            cut = [window(docs[i], m.max_training_segments, rng) for i in idx]
            yield {**collate([d for d, _ in cut], take(feats, idx, [rows for _, rows in cut])),
                   "gold_mentions": m.gold_mentions}
    return epoch_batches, -(-len(docs) // m.docs_per_step)


@torch.no_grad()
def score(probe: ReverseProbe, docs: list[Doc], feats, gold_mentions: bool, batch_size: int = 64) -> dict:
    """CoNLL metrics (each accumulated over the documents), forced-choice accuracy where a document names a blank
    and two candidates (the blank resolved to the answer: its score against the answer above the other's), and the
    mean attention weight per source over the mentions' words."""
    probe.eval()
    pairs, right, asked, alpha_sum, alpha_n = [], 0, 0, None, 0
    for idx in batches(len(docs), batch_size):
        batch = on(collate([docs[i] for i in idx], take(feats, idx)), device_of(probe))
        sources = batch.pop("sources")
        batch.pop("cluster_ids")
        out = probe(sources, **batch, gold_mentions=gold_mentions)
        predicted = out.clusters(singletons=gold_mentions)
        for b, i in enumerate(idx):
            d = docs[i]
            to_doc = lambda c: tuple((d.keep[s], d.keep[e]) for s, e in c)  # noqa: E731  document positions
            pairs.append(([to_doc(c) for c in predicted[b]], d.gold_positions()))
            if d.choice is not None and gold_mentions:
                blank, answer, other = d.choice
                s = lambda j: out.pair_score(b, max(blank, j), min(blank, j))  # noqa: E731
                right += s(answer) > s(other)
                asked += 1
        if probe.last_alpha is not None:
            words = torch.zeros(probe.last_alpha.shape[:2], dtype=torch.bool, device=probe.last_alpha.device)
            for b, i in enumerate(idx):
                words[b, :len(docs[i].keep)] = True
            a = probe.last_alpha[words]
            alpha_sum = a.sum(0) if alpha_sum is None else alpha_sum + a.sum(0)
            alpha_n += a.shape[0]
    out = {k: v for k, v in coref_scores(pairs).items()}
    if asked:
        out["accuracy"] = right / asked
    if alpha_sum is not None:
        out["alpha"] = (alpha_sum / max(1, alpha_n)).tolist()
    return out


def majority(docs: list[Doc]) -> dict[str, float]:
    """The trivial responses' scores, the majority class of a coreference target: every document answered the same
    way, by the better of `no link` and `the blank (or pronoun) joins candidate 1` / `... candidate 2` (chosen on
    these documents: an upper bound on any constant answer). On gold-mention documents with a blank only."""
    if not docs or any(d.choice is None for d in docs):
        return {}
    best: dict[str, float] = {}
    for which in (None, 0, 1):
        pairs, right = [], 0
        for d in docs:
            blank, answer, other = d.choice
            spans = [(d.keep[s], d.keep[e]) for s, e in d.spans]
            cands = sorted([answer, other])
            clusters = [(spans[i],) for i in range(len(spans))]
            if which is not None:
                pick = cands[which]
                clusters = [c for c in clusters if c[0] not in (spans[pick], spans[blank])]
                clusters.append(tuple(sorted((spans[pick], spans[blank]))))
                right += pick == answer
            pairs.append((clusters, d.gold_positions()))
        scores = coref_scores(pairs)
        if scores["conll_f1"] > best.get("conll_f1", -1):
            best["conll_f1"] = scores["conll_f1"]
        if which is not None:
            best["accuracy"] = max(best.get("accuracy", 0.0), right / len(docs))
    return best


def train(cfg: DictConfig, ctx: RunContext, probe: ReverseProbe, data: dict, extra: dict | None = None,
          encoder: nn.Module | None = None) -> dict:
    """Train on data['train'] = (docs, feats), early-stop on dev; returns the records' metrics. `encoder`: a source
    that trains with the head (the CorefTarget; its features a callable), in the encoder group at method.encoder_lr.
    The stored features stay on the host; each batch follows the probe to the run's device."""
    m = cfg.method
    train_docs, train_feats = data["train"]
    rng = np.random.default_rng(cfg.seed)  # the documents' order and windows, epoch after epoch
    epoch_batches, per_epoch = training_batches(cfg, train_docs, train_feats, rng)
    model = (probe if encoder is None else WithEncoder(probe, encoder)).to(ctx.device)
    opts = optimizers(cfg, probe, m.max_epochs * per_epoch, encoder)
    losses, curve, alphas = [], [], []

    def dev_score(_) -> dict[str, float]:
        dev = score(probe, *data["dev"], m.gold_mentions)
        if "alpha" in dev and m.log_alpha:
            alphas.append(dev["alpha"])
        return {f"dev/{k}": v for k, v in dev.items() if k != "alpha"}

    def epoch_end(step: int, dev: dict[str, float]) -> None:
        epoch, loss = step // per_epoch, float(np.mean(losses))
        losses.clear()
        curve.append({"epoch": epoch, "train_loss": loss, "dev_conll_f1": dev["dev/conll_f1"],
                      **({"dev_accuracy": dev["dev/accuracy"]} if "dev/accuracy" in dev else {})})
        ctx.log_metrics({"dev/conll_f1": dev["dev/conll_f1"], "train/epoch_loss": loss, "train/epoch": epoch}, step)

    def test(_) -> dict[str, float]:
        out = {}
        for prefix in ("eval", *(extra or {})):
            split = data["eval"] if prefix == "eval" else extra[prefix]
            out.update({f"{prefix}/{k}": v for k, v in score(probe, *split, m.gold_mentions).items() if k != "alpha"})
        return out

    # an evaluation after every epoch [R]; fit's default precision: the probe trains in fp32 on every hardware (it
    # upcasts the stored features), the optimizers above replace fit's AdamW and its clipping
    schedule = TrainConfig(epochs=m.max_epochs, eval_every=per_epoch, patience=m.patience, progress=cfg.train.progress)
    result = fit(model, epoch_batches, per_epoch, schedule, evaluate=dev_score, objective="dev/conll_f1",
                 higher_is_better=True, device=ctx.device, test=test, log_metrics=ctx.sink, optimizers=opts,
                 min_steps=m.min_epochs * per_epoch, on_eval=epoch_end,
                 on_step=lambda step, loss: losses.append(float(loss)))
    ctx.extra.update(curve=curve, **({"alpha": alphas} if alphas else {}))
    return {**result.best, **result.test, **{f"eval/majority_{k}": v for k, v in majority(data["eval"][0]).items()},
            "train/epochs": result.steps // per_epoch, "train/best_epoch": result.best_step // per_epoch,
            "time/epoch_s": statistics.median(result.intervals_s), "time/train_s": sum(result.intervals_s)}
