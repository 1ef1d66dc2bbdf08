"""method=reverse_probing: frozen source encoders → extraction variant → token-wise aggregation → coref-hoi head.

Every layer of every source is computed once per document segment and kept in the activation store; a probing run
reads the layer(s) its variant needs, pools sub-tokens to words and trains only the aggregator and the head. In
gold-mention mode (WinoGrande, WSC) only the mentions' words are read: the aggregator is position-wise and the head
reads nothing else, so this is the whole-document computation at those words (tests/reverse_probing).

Optimisation as the official code [R]: the head with Adam (1e-4, no decay, linear decay to 0 over max_epochs x
steps), the aggregator in the encoder group (AdamW 1e-5, wd 0.01, 10% warm-up), clipping 1.0 each, early stopping on
dev CoNLL F1; eval (and the extra evaluation sets) scored once at the best dev epoch. The stand-in QA target (Quoref)
trains with the suite's trainer, its aggregator at method.aggregator_lr too (qa_probe).
"""
from __future__ import annotations

import copy
import hashlib
import logging
import re
import statistics
import time
from collections import Counter

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from experiments import data as D
from experiments.config import ConfigError, ModelConfig, TaskConfig, load_group
from experiments.context import RunContext
from experiments.memo import Memo
from experiments.metrics import coref_scores, squad_em_f1
from experiments.models import load_encoder, tokenizer_fingerprint
from experiments.optim import linear_schedule, param_groups, warmup_steps
from experiments.store import model_fingerprint
from experiments.train import TrainLog
from reverse_probing import supplied
from reverse_probing.aggregate import MODES, Aggregator
from reverse_probing.byte_memo import ByteMemo
from reverse_probing.coref import CorefHead
from reverse_probing.documents import Doc, collate, prepare, window, words_of
from reverse_probing.extract import check_variant, extract, positions, read_variant, width
from reverse_probing.model import ReverseProbe

log = logging.getLogger(__name__)
_memo = Memo(24)  # a sweep in one process loads each frozen source and prepares each split's documents once
_states = ByteMemo()  # and reads each source's states of a split once, while they fit half the host's memory


# ---- checks, before any work ------------------------------------------------------------------------------------
def sources_of(cfg: DictConfig) -> list[DictConfig]:
    if not cfg.method.sources:
        raise ConfigError("method.sources is empty: name at least one source model (conf/model), e.g. [minilm-l6]")
    return [load_group("model", name, ModelConfig, "method.sources") for name in cfg.method.sources]


def extra_tasks(cfg: DictConfig) -> dict[str, DictConfig]:
    tasks = {p: load_group("task", name, TaskConfig, f"method.extra_eval.{p}") for p, name in cfg.method.extra_eval.items()}
    for p, t in tasks.items():
        if t.type != "coref":
            raise ConfigError(f"method.extra_eval.{p}={t.name} is a {t.type} task; extra evaluations are coref tasks")
    return tasks


def layers_of(cfg: DictConfig, models: list[DictConfig]) -> list[int | None]:
    m = cfg.method
    if m.variant != "trunc":
        if m.trunc is not None:
            raise ConfigError(f"method.trunc={list(m.trunc)} applies to variant=trunc only (variant={m.variant}); "
                              "set method.trunc=null")
        return [None] * len(models)
    if m.trunc is None or len(m.trunc) != len(models):
        raise ConfigError(f"method.variant=trunc needs one layer per source: method.trunc={m.trunc} for "
                          f"{len(models)} source(s) {list(m.sources)}")
    return list(m.trunc)


def check(cfg: DictConfig) -> tuple[list[DictConfig], list[int | None], dict[str, DictConfig]]:
    m = cfg.method
    if cfg.task.type not in ("coref", "qa"):
        raise ConfigError(f"method=reverse_probing trains a coreference head (or, on the stand-in target quoref, the "
                          f"suite's QA head): task={cfg.task.name} is {cfg.task.type}; use task=winogrande-coref "
                          "(offline), conll2012 (paper scale) or quoref")
    if cfg.task.type == "qa" and m.extra_eval:
        raise ConfigError(f"method.extra_eval={dict(m.extra_eval)} scores coref tasks; a qa target has none: set "
                          "method.extra_eval={}")
    models = sources_of(cfg)
    layers = layers_of(cfg, models)
    if m.aggregate not in MODES:
        raise ConfigError(f"method.aggregate={m.aggregate!r} is not one of {', '.join(MODES)}")
    for model, layer in zip(models, layers):
        try:
            check_variant(m.variant, model.num_layers, layer, m.concat_n)
        except ValueError as e:
            raise ConfigError(f"{e} (source {model.name})") from None
    if m.variant == "concat" and m.aggregate != "attention":
        raise ConfigError(f"method.variant=concat is combined with aggregate=attention only [P Table 1] (its value "
                          f"projections map n·d back to d); got aggregate={m.aggregate}")
    if m.concat_n is not None and m.variant != "concat":
        raise ConfigError(f"method.concat_n={m.concat_n} applies to variant=concat only; set method.concat_n=null")
    if m.aggregate != "attention" and len({x.hidden_size for x in models}) > 1:
        raise ConfigError(f"aggregate={m.aggregate} adds vectors of sources of widths "
                          f"{[x.hidden_size for x in models]}: use aggregate=attention")
    if m.word_pooling not in ("mean", "first"):
        raise ConfigError(f"method.word_pooling={m.word_pooling!r}: use mean or first")
    return models, layers, extra_tasks(cfg)


def ready(cfg: DictConfig, models: list[DictConfig], extras: dict[str, DictConfig]) -> None:
    """Everything the run reads that `make assets` does not build is in the asset cache, or a refusal naming what
    saves it (before any work)."""
    supplied.check_models(models)
    for task in [cfg.task, *extras.values()]:
        supplied.check_task(task, cfg.data)


# ---- frozen sources and their stored states ---------------------------------------------------------------------
def load_source(model: DictConfig):
    """(tokenizer, frozen encoder in eval mode, weights fingerprint), once per process."""
    def load():
        tok, enc = load_encoder(model)
        enc.eval().requires_grad_(False)
        return tok, enc, model_fingerprint(enc)
    return _memo(("source", OmegaConf.to_yaml(model)), load)


def piece_counts(tok, words: list[str]) -> list[int]:
    ids = tok(words, is_split_into_words=True, add_special_tokens=False).word_ids()
    counts = [0] * len(words)
    for w in ids:
        if w is not None:
            counts[w] += 1
    return counts


def safe_words(tok, words: list[str]) -> list[str]:
    """A word the tokenizer turns into nothing (a control character) becomes its unknown token: every word needs a
    sub-token to be pooled from."""
    counts = piece_counts(tok, words)
    return [w if c else tok.unk_token for w, c in zip(words, counts)]


def load_docs(task: DictConfig, data: DictConfig, splits=("train", "dev", "eval")) -> dict[str, list[dict]]:
    """The documents of `splits` only (an extra evaluation set has no train split: its task's schema default
    {train, eval} would make the loader look for one)."""
    missing = [s for s in splits if s not in task.splits]
    if missing:
        raise ConfigError(f"task={task.name} has no {', '.join(missing)} split (task.splits: {dict(task.splits)})")
    task = copy.deepcopy(task)
    task.splits = {s: task.splits[s] for s in splits}
    raw = D.load_splits(task, data)
    return {s: raw[s].to_list() for s in splits}


def span_unit(toks: list) -> str:
    """The head's positions: sub-tokens where every source shares one tokenizer (the paper's bert-base-cased sources:
    coref-hoi's spans, widths, head attention and k = 0.4 x sub-tokens), words where tokenizers differ (they share no
    sub-tokens: each source's are pooled to words)."""
    return "subtoken" if len({tokenizer_fingerprint(t) for t in toks}) == 1 else "word"


def units_used(toks: list) -> dict[str, str]:
    """The record's extra: the unit of spans (their width, head attention) and of pruning's count."""
    unit = span_unit(toks)
    return {"span_unit": unit, "prune_unit": unit}


def prepared(cfg: DictConfig, raw: list[dict], toks: list) -> list[Doc]:
    m = cfg.method
    unit = span_unit(toks)
    out = []
    for doc in raw:
        words, _ = words_of(doc)
        # a word a tokenizer drops becomes its unknown token (safe_words): one piece
        pieces = np.max([[c or 1 for c in piece_counts(t, words)] for t in toks], axis=0).tolist() if words else []
        out.append(prepare(doc, pieces, m.max_segment_len, m.gold_mentions, m.max_span_width, unit))
    return out


def source_states(cfg: DictConfig, ctx: RunContext, model: DictConfig, raw: list[dict], docs: list[Doc]) -> list[torch.Tensor]:
    """Per document, the source's hidden states at every layer at the kept positions (its sub-tokens, or its words,
    pooled: the documents' unit): (L+1, len(keep), d) in the store's dtype. Each segment of each document is one
    store entry (all layers)."""
    tok, enc, fp = load_source(model)
    rows, owner = [], []
    for i, (doc, d) in enumerate(zip(raw, docs)):
        words = safe_words(tok, words_of(doc)[0])
        for a, b in d.segments:
            enc_ = tok(words[a:b], is_split_into_words=True)
            rows.append({"input_ids": enc_["input_ids"], "word_ids": enc_.word_ids(), "n": b - a})
            owner.append(i)
    store = ctx.store()
    states = store.hidden_states(enc, [{"input_ids": r["input_ids"]} for r in rows], "all",
                                 tokenizer_key=tokenizer_fingerprint(tok), max_length=cfg.method.max_segment_len,
                                 select="all", batch_size=cfg.method.feature_batch, device=ctx.device, model_key=fp)
    per_doc: list[list[torch.Tensor]] = [[] for _ in docs]
    for r, (row, i) in enumerate(zip(rows, owner)):
        per_doc[i].append(positions(states[r], row["word_ids"], row["n"], unit_of(docs[i]),
                                    cfg.method.word_pooling))
    return [at_positions(torch.cat(parts, 1), d, 1) for parts, d in zip(per_doc, docs)]


def unit_of(doc: Doc) -> str:
    return "subtoken" if doc.word_of else "word"


def at_positions(x: torch.Tensor, doc: Doc, dim: int) -> torch.Tensor:
    """A document's per-position features (along `dim`) at its kept positions; refused when the source's pieces are
    not the document's (another tokenizer than the one its sub-token positions come from)."""
    n = len(doc.word_of) if doc.word_of else doc.n_words
    if x.shape[dim] != n:
        raise ValueError(f"document {doc.key}: the source gives {x.shape[dim]} {unit_of(doc)}s, the document has {n}")
    return x.index_select(dim, torch.tensor(doc.keep, dtype=torch.long, device=x.device)).contiguous()


def layout(docs: list[Doc]) -> str:
    """What a source's states at the documents' kept positions depend on besides the source: segments, kept
    positions and their unit. Sources that share a tokenizer give the same layout alone and in any set."""
    parts = [(d.key, d.segments, d.keep, len(d.word_of)) for d in docs]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def split_states(cfg, ctx, models, split: str, raw, docs, task: DictConfig) -> list[list[torch.Tensor]]:
    """Per source, per document: its stored states, memoised across the runs of a sweep within a byte budget and
    keyed on the source and the documents' layout, so a pair reuses each member's single-source states."""
    ident = OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["data"])) + OmegaConf.to_yaml(task) + str(
        [cfg.method.max_segment_len, cfg.method.word_pooling, layout(docs)])
    return [_states(("states", OmegaConf.to_yaml(m), split, ident), lambda m=m: source_states(cfg, ctx, m, raw, docs))
            for m in models]


def features(cfg, states: list[list[torch.Tensor]], layers) -> list[list[torch.Tensor]]:
    m = cfg.method
    return [[extract(s, m.variant, layer, m.concat_n) for s in per_doc] for per_doc, layer in zip(states, layers)]


def read_layer(cfg: DictConfig, models, layers) -> dict[str, float]:
    """extract/layer: the hidden_states index a single-source run reads (the last for full, norm and concat)."""
    if len(models) != 1:
        return {}
    return {"extract/layer": layers[0] if cfg.method.variant == "trunc" else models[0].num_layers}


# ---- the probe and its training ---------------------------------------------------------------------------------
def build(cfg: DictConfig, widths: list[int], d: int) -> ReverseProbe:
    m = cfg.method
    head = CorefHead(d, m.ffnn_size, m.feature_size, m.max_span_width, m.dropout, max_segments=m.max_training_segments,
                     top_span_ratio=m.top_span_ratio, max_antecedents=m.max_top_antecedents)
    return ReverseProbe(Aggregator(m.aggregate, widths, d, m.key_size), head)


def optimizers(cfg: DictConfig, probe: ReverseProbe, total: int, encoder: torch.nn.Module | None = None):
    """[R] two optimisers: the head (Adam, no decay, linear decay to 0) and the aggregator in the encoder group
    (AdamW with decay off biases and norms, warm-up then linear decay; a training encoder joins it at its own lr);
    both schedules span max_epochs."""
    m = cfg.method
    head = torch.optim.Adam(probe.head.parameters(), lr=m.head_lr, eps=1e-6)
    out = [(head, linear_schedule(head, 0, total), list(probe.head.parameters()))]
    groups = param_groups(probe.aggregator, m.aggregator_weight_decay) if any(True for _ in probe.aggregator.parameters()) else []
    if encoder is not None:
        groups += [{**g, "lr": m.encoder_lr} for g in param_groups(encoder, m.aggregator_weight_decay)]
    groups = [g for g in groups if g["params"]]
    if groups:
        opt = torch.optim.AdamW(groups, lr=m.aggregator_lr, eps=1e-6)
        params = [p for g in groups for p in g["params"]]
        out.append((opt, linear_schedule(opt, warmup_steps(m.aggregator_warmup, total), total), params))
    return out


def take(feats, idx: list[int], rows: list[list[int]] | None = None) -> list[list[torch.Tensor]]:
    """Per source, the features of documents `idx` (optionally only rows `rows[b]` of each): from the cached lists,
    or computed now by a callable (a source that trains: the CorefTarget)."""
    per = feats(idx) if callable(feats) else [[f[i] for i in idx] for f in feats]
    return per if rows is None else [[x[r] for x, r in zip(f, rows)] for f in per]


def on(batch: dict, device: torch.device) -> dict:
    """A collated batch with every tensor (each source's features too) on `device`, the probe's."""
    return {k: [x.to(device) for x in v] if k == "sources" else v.to(device) for k, v in batch.items()}


def device_of(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


def batches(n: int, size: int, rng: np.random.Generator | None = None):
    order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i:i + size].tolist() for i in range(0, n, size)]


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


def train_epoch(cfg: DictConfig, probe: ReverseProbe, opts, docs: list[Doc], feats, rng, curve: TrainLog | None = None,
                step: int = 0) -> list[float]:
    """One pass over the training documents in a random order, `docs_per_step` documents a step. `curve`: the run's
    training curves (loss, learning rates, documents/s), `step` the optimizer steps taken before this epoch."""
    m = cfg.method
    losses = []
    for idx in batches(len(docs), m.docs_per_step, rng):
        cut = [window(docs[i], m.max_training_segments, rng) for i in idx]
        batch = on(collate([d for d, _ in cut], take(feats, idx, [rows for _, rows in cut])), device_of(probe))
        out = probe(batch.pop("sources"), **batch, gold_mentions=m.gold_mentions)
        for opt, _, _ in opts:
            opt.zero_grad(set_to_none=True)
        out.loss.backward()
        lrs = TrainLog.rates(*(opt for opt, _, _ in opts))
        for opt, sched, params in opts:
            torch.nn.utils.clip_grad_norm_(params, m.grad_clip)
            opt.step()
            sched.step()
        losses.append(out.loss.item())
        step += 1
        if curve is not None:
            curve.batch({"documents": idx})
            curve.step(step, losses[-1], lrs)
    return losses


def train(cfg: DictConfig, ctx: RunContext, probe: ReverseProbe, data: dict, extra: dict | None = None,
          encoder: torch.nn.Module | None = None) -> dict:
    """Train on data['train'] = (docs, feats), early-stop on dev; returns the records' metrics. `encoder`: a source
    that trains with the head (the CorefTarget; its features a callable), in the encoder group at method.encoder_lr."""
    m = cfg.method
    probe.to(ctx.device)  # the stored features stay on the host; each batch follows the probe (`on`)
    train_docs, train_feats = data["train"]
    rng = np.random.default_rng(cfg.seed)
    per_epoch = -(-len(train_docs) // m.docs_per_step)
    opts = optimizers(cfg, probe, m.max_epochs * per_epoch, encoder)
    kept = torch.nn.ModuleList([probe] + ([encoder] if encoder is not None else []))  # checkpointed together
    best, best_state, best_epoch, bad, curve, alphas, epoch_s = None, None, 0, 0, [], [], []
    steps = TrainLog(ctx.sink, m.max_epochs * per_epoch)
    for epoch in range(1, m.max_epochs + 1):
        kept.train()
        t0 = time.perf_counter()
        losses = train_epoch(cfg, probe, opts, train_docs, train_feats, rng, steps, (epoch - 1) * per_epoch)
        epoch_s.append(time.perf_counter() - t0)
        kept.eval()  # a training encoder too (dropout off while scoring)
        with steps.paused():
            dev = score(probe, *data["dev"], m.gold_mentions)
        curve.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "dev_conll_f1": dev["conll_f1"],
                      **({"dev_accuracy": dev["accuracy"]} if "accuracy" in dev else {})})
        if "alpha" in dev and m.log_alpha:
            alphas.append(dev["alpha"])
        ctx.log_metrics({"dev/conll_f1": dev["conll_f1"], "train/epoch_loss": curve[-1]["train_loss"],
                         "train/epoch": epoch}, epoch * per_epoch)  # optimizer steps: the per-step curves' axis
        if best is None or dev["conll_f1"] > best["conll_f1"]:
            best, best_state, best_epoch, bad = dev, copy.deepcopy(kept.state_dict()), epoch, 0
        else:
            bad += 1
        if epoch >= m.min_epochs and bad >= m.patience:
            break
    kept.load_state_dict(best_state)
    kept.eval()
    results = {"eval": score(probe, *data["eval"], m.gold_mentions)}
    for prefix, split in (extra or {}).items():
        results[prefix] = score(probe, *split, m.gold_mentions)
    ctx.extra.update(curve=curve, **({"alpha": alphas} if alphas else {}))
    metrics = {f"dev/{k}": v for k, v in best.items() if k != "alpha"}
    for prefix, r in results.items():
        metrics.update({f"{prefix}/{k}": v for k, v in r.items() if k != "alpha"})
    metrics.update({f"eval/majority_{k}": v for k, v in majority(data["eval"][0]).items()})
    metrics.update({"train/epochs": epoch, "train/best_epoch": best_epoch,
                    "time/epoch_s": statistics.median(epoch_s), "time/train_s": sum(epoch_s)})
    return metrics


def coref_data(cfg: DictConfig, ctx: RunContext, models, layers, extras) -> dict:
    """split (and extra-evaluation prefix) -> (documents, per-source features), read from the activation store."""
    m = cfg.method
    toks = [load_source(x)[0] for x in models]
    raw = load_docs(cfg.task, cfg.data)
    for prefix, task in extras.items():
        raw[prefix] = load_docs(task, cfg.data, ("eval",))["eval"]
    data = {}
    for split, rows in raw.items():
        docs = _memo(("docs", split, OmegaConf.to_yaml(cfg.task), OmegaConf.to_yaml(cfg.data), str(sorted(m.sources)),
                      m.gold_mentions, m.max_segment_len, m.max_span_width), lambda rows=rows: prepared(cfg, rows, toks))
        task = cfg.task if split in ("train", "dev", "eval") else extras[split]
        data[split] = (docs, features(cfg, split_states(cfg, ctx, models, split, rows, docs, task), layers), rows)
    return data


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    models, layers, extras = check(cfg)
    ready(cfg, models, extras)
    if cfg.task.type == "qa":
        return run_qa(cfg, ctx, models, layers)
    m = cfg.method
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(load_source(models[0])[0])
    ctx.extra.update(units_used([load_source(x)[0] for x in models]))
    t0 = time.perf_counter()
    data = {s: (docs, feats) for s, (docs, feats, _) in coref_data(cfg, ctx, models, layers, extras).items()}
    features_s = time.perf_counter() - t0
    widths = [width(m.variant, x.hidden_size, m.concat_n) for x in models]
    torch.manual_seed(cfg.seed)
    probe = build(cfg, widths, models[0].hidden_size)
    ctx.n_samples.update({f"{s}_docs": len(d[0]) for s, d in data.items()})
    out = train(cfg, ctx, probe, data, {p: data[p] for p in extras})
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    return {**out, **read_layer(cfg, models, layers), "params/aggregator": count(probe.aggregator),
            "params/head": count(probe.head), "time/features_s": features_s}


# ---- the stand-in QA target (Quoref): sub-token features, the suite's QA head and trainer ------------------------
def qa_states(cfg, ctx, model: DictConfig, feats, split: str, layer) -> list[torch.Tensor]:
    """Per window, the source's extracted features (T, d_i) from the store (every layer stored once)."""
    tok, enc, fp = load_source(model)

    def view():  # lazy: a run reads only the layers its variant needs (all of them would be GBs per source)
        return ctx.store().hidden_states(enc, D.rows_of(feats), "all", tokenizer_key=tokenizer_fingerprint(tok),
                                         max_length=D.max_length(cfg.task, cfg.data), select="all",
                                         batch_size=cfg.method.feature_batch, device=ctx.device, model_key=fp)
    ident = OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["data", "task"]))
    states = _memo(("qa-states", model.name, split, ident), view)
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
    from experiments.models import SpanHead
    from experiments.optim import own_lr
    from reverse_probing.model import SpanProbe
    m = cfg.method
    d = models[0].hidden_size
    aggregator = Aggregator(m.aggregate, [width(m.variant, x.hidden_size, m.concat_n) for x in models], d, m.key_size)
    for p in aggregator.parameters():
        own_lr(p, m.aggregator_lr)
    return SpanProbe(aggregator, SpanHead(d))


def run_qa(cfg: DictConfig, ctx: RunContext, models, layers) -> dict[str, float]:
    from experiments.cached import Cached
    from experiments.evaluate import evaluate
    from experiments.train import fit
    m, task = cfg.method, cfg.task
    toks = [load_source(x)[0] for x in models]
    keys = {tokenizer_fingerprint(t) for t in toks}
    if len(keys) > 1:
        raise ConfigError(f"method.sources={list(m.sources)}: a qa target aggregates sub-tokens, so every source needs "
                          "the same tokenizer (minilm-l6-pii's trimmed vocabulary differs: leave it out)")
    tok = toks[0]
    ctx.tokenizer_fingerprint = keys.pop()
    raw = D.load_splits(task, cfg.data)
    n = D.max_length(task, cfg.data)
    t0 = time.perf_counter()
    feats, cached = {}, {}
    for split in ("train", "dev", "eval"):
        feats[split] = _memo(("qa-feats", split, OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["data", "task"]))),
                             lambda split=split: D.encode(raw[split], tok, task, n, train=(split == "train")))
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
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    return {**result.best, **result.test, **baseline, "train/steps": result.steps, "train/best_step": result.best_step,
            "train/epochs": result.epochs, "time/train_s": result.train_s, "time/step_ms": result.step_ms,
            "time/features_s": features_s, **read_layer(cfg, models, layers),
            "params/aggregator": count(probe.aggregator), "params/head": count(probe.head)}
