"""method=eat_bench: what EAT's three ideas are worth in time, measured side by side in one process.

  latency  Every contender runs on each timed eval example in turn (A B C ... per example, after warm-up examples), at
           batch 1 without padding: p50/p90/p99 per contender, and the speed-up of each over the faster of the two
           dense paths (our layer loop, the Hugging Face forward) with a bootstrap interval over the timed examples.
           Then throughput at `batch_size`, interleaved passes. Contenders: dense, every subset of {prune, window,
           exit} on the trained EAT weights (the ablation the paper lacks), the paper-code mode (zero-masking, dense
           window mask, batch exit) and the shallower baseline model. Accuracy of each contender on the whole eval
           split, with a paired bootstrap interval of its difference to the dense arm.
  scaling  Forward time of one sequence of T real tokens (English Wikipedia) for T = 512 ... 4,096 on a random-init
           encoder of `scaling_shape`: dense vs window only vs EAT (pruning + banded window) vs paper-code; log-log
           slopes, with bootstrap intervals over the timed repeats.
"""
from __future__ import annotations

import itertools
import logging
import statistics
import time
from dataclasses import replace

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from eat import run as R
from eat.model import EatModel, Settings
from experiments import data as D
from experiments.config import ModelConfig, TaskConfig, load_group
from experiments.context import RunContext
from experiments.models import load_tokenizer, tokenizer_fingerprint
from experiments.timing import sync

log = logging.getLogger(__name__)
COMPONENTS = ("prune", "window", "exit")
BATCH_EXIT = ("paper_code",)  # contenders whose exit rule reads the whole batch
LONG_BATCH = 8  # length: documents of up to 512 tokens per scoring batch


def _arm(cfg: DictConfig, variant: str, model: DictConfig | None = None) -> DictConfig:
    over = {"method": {"variant": variant, "name": "eat"}}
    out = OmegaConf.merge(cfg, over)
    if model is not None:
        out.model = model
    return out


def ablation(s: Settings) -> dict[str, Settings]:
    """Every subset of the three components on top of the EAT weights' chosen settings `s`."""
    out = {}
    for k in range(len(COMPONENTS) + 1):
        for on in itertools.combinations(COMPONENTS, k):
            t = replace(s, prune_ratio=s.prune_ratio if "prune" in on else 0.0,
                        window=s.window if "window" in on else None, tau=s.tau if "exit" in on else None)
            out["eat:" + ("+".join(on) or "none")] = t
    return out


def _hf_dense(model: EatModel):
    """The dense arm through the Hugging Face encoder's own forward (+ the same head)."""
    def forward(input_ids, attention_mask, token_type_ids=None):
        h = model.encoder(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
        return model.classifier(model.pool(h, attention_mask.bool()))
    return forward


def _contenders(dense: EatModel, eat: EatModel, base: EatModel | None) -> dict[str, tuple]:
    """name -> (callable(batch) -> logits, depth, retention) in timing order."""
    def ours(model: EatModel, s: Settings):
        def forward(b):
            with model.using(s):
                o = model(**b)
            return o.logits, o.depth, o.retention
        return forward

    hf = _hf_dense(dense)
    out = {"dense_hf": lambda b: (hf(**b), None, None), "dense": ours(dense, dense.settings)}
    s = eat.settings
    out.update({name: ours(eat, t) for name, t in ablation(s).items()})
    paper = replace(s, prune_rule="repo", prune_mode="mask", kernel="masked", exit_mode="batch")
    out["paper_code"] = ours(eat, paper)
    if base is not None:
        out["baseline"] = ours(base, base.settings)
    return out


def _rows(feats, n: int, seed: int) -> list[dict]:
    rows = D.rows_of(feats)
    order = np.random.default_rng(seed).permutation(len(rows))[:n]
    return [rows[i] for i in order]


def _batch(rows: list[dict], pad: int, device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in D.collate(rows, pad).items() if k != "labels"}


def _boot_ratio(base: np.ndarray, other: np.ndarray, n_boot: int, seed: int, q: float = 50) -> list[float]:
    """Replicates of percentile_q(base) / percentile_q(other) over the same resampled examples (paired)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(base), (n_boot, len(base)))
    return (np.percentile(base[idx], q, axis=1) / np.percentile(other[idx], q, axis=1)).tolist()


def _boot_diff(a: np.ndarray, b: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Replicates of the paired accuracy difference a - b in points over the same resampled examples."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), (n_boot, len(a)))
    return 100 * (a[idx].mean(1) - b[idx].mean(1))


def _trained(cfg: DictConfig, ctx: RunContext, data: R.Data, baseline: bool = True):
    """The arms method=eat trains (reused from its checkpoint cache when the same training exists), in eval mode; on a
    GPU in the hardware's half precision (the paper times fp16 at batch 1 [P §6])."""
    _, eat, _, sel = R.prepare(_arm(cfg, "eat"), ctx, data)
    _, dense, _, _ = R.prepare(_arm(cfg, "dense"), ctx, data)
    base = None
    if baseline and cfg.method.baseline_model:
        bcfg = _arm(cfg, "dense", load_group("model", cfg.method.baseline_model, ModelConfig, "method.baseline_model"))
        _, base, _, _ = R.prepare(bcfg, ctx)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.hardware.precision)
    for model in (dense, eat, base):
        if model is not None:
            model.eval()
            if half is not None and ctx.device.type == "cuda":
                model.to(half)
    return dense, eat, base, sel


def _scores(contenders, rows, labels, batch_size, pad, dev, layers: int) -> tuple[dict, dict]:
    """Accuracy (percent), depth and retention of every contender over `rows`, and each contender's per-example
    correctness: batched, except the batch-exit contenders, scored at batch 1 as they are timed (at batch 1 the
    official batch rule is a per-example exit; at batch 32 it rarely exits, as the paper's bs = 32 rows show)."""
    correct, out = {}, {}
    for name, fn in contenders.items():
        preds, depth, ret = [], [], []
        bs = 1 if name in BATCH_EXIT else batch_size  # batch exit: what it computes depends on the batch
        for i in range(0, len(rows), bs):
            lg, d, r = fn(_batch(rows[i:i + bs], pad, dev))
            preds.append(lg.argmax(-1).cpu())
            depth.append(d.cpu() if d is not None else torch.full((len(lg),), layers))
            ret.append(r.float().cpu() if r is not None else torch.ones(len(lg)))
        correct[name] = (torch.cat(preds).numpy() == labels).astype(float)
        out[f"acc/{name}"] = 100 * float(correct[name].mean())
        out[f"depth/{name}"] = float(torch.cat(depth).float().mean())
        out[f"retention/{name}"] = float(torch.cat(ret).mean())
    return out, correct


def _batch1(contenders, rows, warmup: int, pad, dev) -> dict[str, np.ndarray]:
    """ms per example at batch 1, each example through every contender in turn (after `warmup` untimed examples)."""
    lat = {name: [] for name in contenders}
    for j, row in enumerate(rows):
        b = _batch([row], pad, dev)
        for name, fn in contenders.items():
            sync(dev)
            t0 = time.perf_counter()
            fn(b)
            sync(dev)
            if j >= warmup:
                lat[name].append(1e3 * (time.perf_counter() - t0))
    return {k: np.asarray(v) for k, v in lat.items()}


def _speed(out: dict, lat: dict, correct: dict, n_boot: int, seed: int) -> tuple[dict, str]:
    """Percentiles, speed-up over the faster dense path (with bootstrap replicates) and Δ accuracy [CI] per contender."""
    ref = min(("dense", "dense_hf"), key=lambda k: np.median(lat[k]))
    reps = {}
    for name, v in lat.items():
        for q in (50, 90, 99):
            out[f"latency/{name}_p{q}_ms"] = float(np.percentile(v, q))
        out[f"latency/{name}_mean_ms"] = float(v.mean())
        out[f"speedup/{name}_p50"] = float(np.median(lat[ref]) / np.median(v))
        out[f"delta_acc/{name}"] = out[f"acc/{name}"] - out["acc/dense"]
        reps[f"speedup/{name}_p50"] = _boot_ratio(lat[ref], v, n_boot, seed)
        diff = _boot_diff(correct[name], correct["dense"], n_boot, seed)
        reps[f"delta_acc/{name}"] = diff.round(4).tolist()
        out[f"delta_acc/{name}_lo"], out[f"delta_acc/{name}_hi"] = np.percentile(diff, [2.5, 97.5]).tolist()
    return reps, ref


def _best_on_dev(cfg, data, contenders, pad, dev, layers: int) -> tuple[str | None, dict]:
    """The EAT setting a user would deploy, chosen on dev: of the component subsets whose dev accuracy stays within
    method.tau_tolerance points of dense, the one with the lowest batch-1 p50 on `n_dev_latency` dev examples."""
    m = cfg.method
    if data.dev is None:
        return None, {}
    subsets = {k: v for k, v in contenders.items() if k.startswith("eat:") or k == "dense"}
    rows = D.rows_of(data.dev)
    acc, _ = _scores(subsets, rows, np.asarray(data.dev["labels"]), cfg.hardware.eval_batch_size, pad, dev, layers)
    n = min(len(rows), m.n_dev_latency)
    lat = _batch1(subsets, _rows(data.dev, n, cfg.seed + 1), min(m.warmup, n // 4), pad, dev)
    table = {k: {"acc": acc[f"acc/{k}"], "p50_ms": float(np.median(lat[k]))} for k in subsets}
    ok = [k for k in subsets if k != "dense" and table[k]["acc"] - table["dense"]["acc"] >= -m.tau_tolerance]
    best = min(ok, key=lambda k: table[k]["p50_ms"]) if ok else None
    log.info("best EAT setting on dev: %s (%s)", best, table)
    return best, table


def latency(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m, dev = cfg.method, ctx.device
    data = R.load_data(cfg)
    rows = D.rows_of(data.evals)
    if m.warmup + m.n_latency > len(rows):
        raise ValueError(f"method.warmup + method.n_latency = {m.warmup + m.n_latency} but task={cfg.task.name} has "
                         f"{len(rows)} eval examples: lower method.n_latency")
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(data.tok)
    dense, eat, base, sel = _trained(cfg, ctx, data)
    pad = data.tok.pad_token_id
    contenders = _contenders(dense, eat, base)
    timed = _rows(data.evals, m.warmup + m.n_latency, cfg.seed)
    with torch.inference_mode():
        best, on_dev = _best_on_dev(cfg, data, contenders, pad, dev, dense.num_layers)
        if best is not None:
            contenders["eat:best"] = contenders[best]  # timed and scored on eval as a contender of its own
        out, correct = _scores(contenders, rows, np.asarray(data.evals["labels"]), cfg.hardware.eval_batch_size,
                               pad, dev, dense.num_layers)
        lat = _batch1(contenders, timed, m.warmup, pad, dev)
        reps, ref = _speed(out, lat, correct, m.bootstrap, cfg.seed)
        # throughput at batch_size: interleaved passes over the timed examples (round 0 warms up)
        batches = [_batch(timed[m.warmup:][i:i + m.batch_size], pad, dev) for i in range(0, m.n_latency, m.batch_size)]
        passes = {name: [] for name in contenders}
        for r in range(m.throughput_rounds + 1):
            for name, fn in contenders.items():
                sync(dev)
                t0 = time.perf_counter()
                for b in batches:
                    fn(b)
                sync(dev)
                if r:
                    passes[name].append(time.perf_counter() - t0)
    for name, ts in passes.items():
        out[f"throughput/{name}_per_s"] = m.n_latency / statistics.median(ts)
    out["eat/tau"] = eat.settings.tau if eat.settings.tau is not None else float("nan")
    out["calib/temperature"] = float(eat.temperature)
    ctx.extra.update(replicates=reps, reference=ref, contenders=list(contenders), tau_dev_accs=sel["dev_accs"],
                     best_setting=best, best_on_dev=on_dev,
                     latency_ms={k: v.round(4).tolist() for k, v in lat.items()})
    ctx.n_samples.update(timed=m.n_latency, warmup=m.warmup, eval_examples=len(rows), batch_size=m.batch_size)
    return out


def length(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    """Accuracy and batch-1 speed at length: the arms trained on `task` (short snippets) read `method.long_task`'s
    eval documents (full movie reviews, up to its max_length) zero-shot; the same labels, another length regime."""
    m, dev = cfg.method, ctx.device
    long_task = load_group("task", m.long_task, TaskConfig, "method.long_task")  # refused before any training
    if len(long_task.label_names) != len(cfg.task.label_names):
        raise ValueError(f"method.long_task={m.long_task} has {len(long_task.label_names)} labels, task="
                         f"{cfg.task.name} {len(cfg.task.label_names)}: the arms cannot read it")
    data = R.load_data(cfg)
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(data.tok)
    dense, eat, _, _ = _trained(cfg, ctx, data, baseline=False)
    raw = D.load_splits(long_task, OmegaConf.merge(cfg.data, {"limit_eval": m.n_long, "max_length": None}))
    feats = D.encode(raw["eval"], data.tok, long_task, long_task.max_length, train=False)
    pad = data.tok.pad_token_id
    s = eat.settings
    contenders = {k: v for k, v in _contenders(dense, eat, None).items()
                  if k in ("dense", "dense_hf", "eat:window", "eat:prune+window", "eat:prune+window+exit",
                           "paper_code")}
    rows = D.rows_of(feats)
    with torch.inference_mode():
        out, correct = _scores(contenders, rows, np.asarray(feats["labels"]), LONG_BATCH, pad, dev,
                               dense.num_layers)
        lat = _batch1(contenders, rows, min(m.warmup, len(rows) // 4), pad, dev)
        reps, ref = _speed(out, lat, correct, m.bootstrap, cfg.seed)
        detail = R.predict(eat, feats, pad, LONG_BATCH, dev, s)
    out["long/tokens_mean"] = float(np.mean([len(r["input_ids"]) for r in rows]))
    out = {f"long/{k}" if not k.startswith("long/") else k: v for k, v in out.items()}
    ctx.extra.update(replicates={f"long/{k}": v for k, v in reps.items()}, reference=ref, contenders=list(contenders),
                     detail={"length": detail["length"].tolist(), "retention": detail["retention"].round(4).tolist(),
                             "depth": detail["depth"].tolist()})
    ctx.n_samples.update(long_examples=len(rows), max_length=long_task.max_length)
    return out


def _long_sequences(tok, lengths: list[int], n: int) -> dict[int, list[list[int]]]:
    """n sequences of exactly T real tokens per T: [CLS] + running English Wikipedia text (wiki-long)."""
    texts = D.long_texts(min_words=0)
    stream = []
    for t in texts:
        stream += tok(t, add_special_tokens=False)["input_ids"]
        if len(stream) >= n * max(lengths):
            break
    if len(stream) < n * max(lengths):
        raise ValueError(f"wiki-long holds {len(stream)} tokens; the scaling benchmark needs {n * max(lengths)}")
    cls = tok.cls_token_id
    return {T: [[cls, *stream[i * T:(i + 1) * T - 1]] for i in range(n)] for T in lengths}


@torch.inference_mode()
def scaling(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    from transformers import BertConfig, BertModel
    m, dev = cfg.method, ctx.device
    tok = load_tokenizer(cfg.model)
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(tok)
    shape = dict(m.scaling_shape)
    torch.manual_seed(cfg.seed)
    enc = BertModel(BertConfig(vocab_size=len(tok), max_position_embeddings=max(m.lengths), **shape),
                    add_pooling_layer=False)
    n = shape["num_hidden_layers"]
    after = tuple(l for l in m.prune_after if l < n)
    model = EatModel(enc, 2, exit_layer=None, settings=Settings(prune_after=after)).to(dev).eval()
    s = replace(R.settings_of(OmegaConf.merge(cfg.method, {"variant": "eat"})), prune_after=after, tau=None)
    arms = {"dense": s.dense(), "window": replace(s, prune_ratio=0.0), "eat": s,
            "paper_code": replace(s, prune_rule="repo", prune_mode="mask", kernel="masked")}
    seqs = _long_sequences(tok, list(m.lengths), 1)
    out, per = {}, {name: {} for name in arms}
    for T in m.lengths:
        ids = torch.tensor(seqs[T], device=dev)
        b = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        times = {name: [] for name in arms}
        for r in range(m.repeats + 1):
            for name, st in arms.items():
                sync(dev)
                t0 = time.perf_counter()
                with model.using(st):
                    model(**b)
                sync(dev)
                if r:
                    times[name].append(1e3 * (time.perf_counter() - t0))
        for name, ts in times.items():
            per[name][T] = np.asarray(ts)
            out[f"scaling/{name}_ms@{T}"] = float(np.median(ts))
        log.info("scaling T=%d: %s", T, "  ".join(f"{k} {np.median(v):.1f} ms" for k, v in times.items()))
    logT = np.log(np.asarray(m.lengths, dtype=float))
    rng = np.random.default_rng(cfg.seed)
    reps = {}
    for name, by_t in per.items():
        med = np.asarray([np.median(by_t[T]) for T in m.lengths])
        out[f"scaling/{name}_slope"] = float(np.polyfit(logT, np.log(med), 1)[0])
        boots = []
        for _ in range(m.bootstrap):
            med_b = [np.median(rng.choice(by_t[T], len(by_t[T]))) for T in m.lengths]
            boots.append(float(np.polyfit(logT, np.log(med_b), 1)[0]))
        reps[f"scaling/{name}_slope"] = boots
    ctx.extra.update(replicates=reps, scaling_ms={k: {str(T): v.round(4).tolist() for T, v in d.items()}
                                                  for k, d in per.items()}, shape=shape, prune_after=list(after))
    ctx.n_samples.update(lengths=len(m.lengths), repeats=m.repeats)
    return out


VARIANTS = {"latency": latency, "scaling": scaling, "length": length}


def check(cfg: DictConfig) -> None:
    """Refusals before any work: the bench variant, and the arms it trains (eat.run.check)."""
    if cfg.method.variant not in VARIANTS:
        raise ValueError(f"method.variant={cfg.method.variant!r} is not one of {', '.join(VARIANTS)} for "
                         "method=eat_bench (the training arms dense | eat | paper_code are method=eat's)")
    if cfg.method.variant != "scaling":
        R.check(_arm(cfg, "eat"))


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    return VARIANTS[cfg.method.variant](cfg, ctx)
