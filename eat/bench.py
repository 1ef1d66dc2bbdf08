"""method=eat_bench: what EAT's three ideas are worth in time, measured side by side in one process.

  latency  Every contender runs on each timed eval example in turn (A B C ... per example, after warm-up examples), at
           batch 1 without padding: p50/p90/p99 per contender, and the speed-up of each over the faster of the two
           dense paths (our layer loop, the Hugging Face forward) with a bootstrap interval over the timed examples.
           Then throughput at `batch_size`, interleaved passes. The paper averages 3 timing runs with different
           seeds [P §6]: each of `timing_seeds` draws its own random timed examples and order (and warm-up), the
           percentiles and intervals pool the seeds' examples, the mean latency and throughput are the mean of the
           per-seed values (each seed's in extra.per_seed). Contenders: dense, every subset of {prune, window, exit}
           on the trained EAT weights (the ablation the paper lacks), the paper-code mode (zero-masking, dense window
           mask, batch exit) and the shallower baseline model. Accuracy of each contender on the whole eval split,
           with a paired bootstrap interval of its difference to the dense arm.
  length   The same at length (zero-shot long documents), each timing seed timing its own random share of them.
  scaling  Forward time of one sequence of T real tokens (English Wikipedia) for T = 512 ... 4,096 on a random-init
           encoder of `scaling_shape`: dense vs window only vs EAT (pruning + banded window) vs paper-code; log-log
           slopes, with bootstrap intervals over the timed repeats.
"""
from __future__ import annotations

import itertools
import logging
import statistics
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from eat import config
from eat.inference import layer_stats, predict, shape_of
from eat.model import EatModel, Settings
from eat.training import load_data, prepare, settings_of
from experiments import data
from experiments.config import ModelConfig, TaskConfig, load_group
from experiments.context import RunContext
from experiments.models import load_tokenizer
from experiments.timing import Clock, interleaved

log = logging.getLogger(__name__)
COMPONENTS = ("prune", "window", "exit")
FULL = "eat:prune+window+exit"  # the contender whose per-layer statistics are extra.layers
LONG_BATCH = 8  # length: documents of up to 512 tokens per scoring batch


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


@dataclass(frozen=True)
class Arm:
    """A contender: `model` under `settings` (our layer loop), or with settings None the Hugging Face forward."""
    model: EatModel
    settings: Settings | None = None

    def __call__(self, b):
        if self.settings is None:
            return _hf_dense(self.model)(**b)
        with self.model.using(self.settings):
            return self.model(**b)


def _contenders(dense: EatModel, eat: EatModel, base: EatModel | None) -> dict[str, Arm]:
    """name -> Arm, in timing order."""
    out = {"dense_hf": Arm(dense), "dense": Arm(dense, dense.settings)}
    s = eat.settings
    out.update({name: Arm(eat, t) for name, t in ablation(s).items()})
    out["paper_code"] = Arm(eat, replace(s, prune_rule="repo", prune_mode="mask", kernel="masked", exit_mode="batch"))
    if base is not None:
        out["baseline"] = Arm(base, base.settings)
    return out


def _rows(feats, n: int, seed: int) -> list[dict]:
    rows = data.rows_of(feats)
    order = np.random.default_rng(seed).permutation(len(rows))[:n]
    return [rows[i] for i in order]


def _batch(rows: list[dict], pad: int, device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in data.collate(rows, pad).items() if k != "labels"}


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


def _trained(cfg: DictConfig, ctx: RunContext, tok, splits, baseline: bool = True):
    """The arms method=eat trains (reused from its checkpoint cache when the same training exists), in eval mode; on a
    GPU in the hardware's half precision (the paper times fp16 at batch 1 [P §6])."""
    eat, _, sel = prepare(config.arm(cfg, "eat"), ctx, tok, splits)
    dense, _, _ = prepare(config.arm(cfg, "dense"), ctx, tok, splits)
    base = None
    if baseline and cfg.method.baseline_model:
        shallower = load_group("model", cfg.method.baseline_model, ModelConfig, "method.baseline_model")
        base, _, _ = prepare(config.arm(cfg, "dense", shallower), ctx)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.hardware.precision)
    for model in (dense, eat, base):
        if model is not None:
            model.eval()
            if half is not None and ctx.device.type == "cuda":
                model.to(half)
    return dense, eat, base, sel


def _scores(contenders: dict[str, Arm], feats, batch_size, pad, dev, layers: int) -> tuple[dict, dict, dict]:
    """Accuracy (percent), depth and retention of every contender over `feats`, each contender's per-example
    correctness, and our loop's predictions (eat.inference.predict: per-layer counts too). A batch-exit contender is
    scored at batch 1, as it is timed (eat.inference.predict: at batch 1 the official batch rule is a per-example exit;
    at batch 32 it rarely exits, as the paper's bs = 32 rows show)."""
    rows, labels = data.rows_of(feats), np.asarray(feats["labels"])
    correct, out, preds = {}, {}, {}
    for name, arm in contenders.items():
        if arm.settings is None:
            lg = torch.cat([arm(_batch(rows[i:i + batch_size], pad, dev)).float().cpu()
                            for i in range(0, len(rows), batch_size)])
            p = {"logits": lg.numpy(), "depth": np.full(len(rows), layers), "retention": np.ones(len(rows))}
        else:
            p = preds[name] = predict(arm.model, feats, pad, batch_size, dev, arm.settings)
        correct[name] = (p["logits"].argmax(-1) == labels).astype(float)
        out[f"acc/{name}"] = 100 * float(correct[name].mean())
        out[f"depth/{name}"] = float(np.mean(p["depth"]))
        out[f"retention/{name}"] = float(np.mean(p["retention"]))
    return out, correct, preds


def _batch1(contenders, rows, warmup: int, pad, dev, clock: Clock = time.perf_counter) -> dict[str, np.ndarray]:
    """ms per example at batch 1, each example through every contender in turn (after `warmup` untimed examples)."""
    lat = {name: [] for name in contenders}
    for j, row in enumerate(rows):
        b = _batch([row], pad, dev)
        calls = {name: (lambda fn=fn: fn(b)) for name, fn in contenders.items()}
        timed = j >= warmup
        for name, ts in interleaved(calls, repeats=int(timed), warmup=int(not timed), device=dev, clock=clock).items():
            lat[name] += [1e3 * t for t in ts]
    return {k: np.asarray(v) for k, v in lat.items()}


def _throughput(contenders, rows, batch_size: int, rounds: int, pad, dev,
                clock: Clock = time.perf_counter) -> dict[str, float]:
    """Examples per second at `batch_size`: the median of `rounds` interleaved passes over `rows` (after one more)."""
    batches = [_batch(rows[i:i + batch_size], pad, dev) for i in range(0, len(rows), batch_size)]

    def passing(fn):
        def one_pass():
            for b in batches:
                fn(b)
        return one_pass
    passes = interleaved({name: passing(fn) for name, fn in contenders.items()}, repeats=rounds, warmup=1, device=dev,
                         clock=clock)
    return {name: len(rows) / statistics.median(ts) for name, ts in passes.items()}


def _seeded(rows: list[dict], warmup: int, n: int, seeds) -> list[tuple[int, list[dict]]]:
    """Per timing seed: its own `warmup` + `n` rows in its own random order."""
    return [(sd, [rows[i] for i in np.random.default_rng(sd).permutation(len(rows))[:warmup + n]]) for sd in seeds]


def _pooled(runs: dict[int, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The seeds' batch-1 latencies one after another (still paired across contenders: the same examples)."""
    names = next(iter(runs.values()))
    return {k: np.concatenate([lat[k] for lat in runs.values()]) for k in names}


def _seed_means(out: dict, runs: dict[int, dict[str, np.ndarray]]) -> dict:
    """The mean latency as the paper reports it, the average of the timing runs' means [P §6] (and their sd over
    seeds); -> each seed's mean and p50 per contender (extra.per_seed)."""
    names = next(iter(runs.values()))
    per_seed = {k: {"seeds": list(runs), "mean_ms": [float(lat[k].mean()) for lat in runs.values()],
                    "p50_ms": [float(np.median(lat[k])) for lat in runs.values()]} for k in names}
    for k, d in per_seed.items():
        out[f"latency/{k}_mean_ms"] = float(np.mean(d["mean_ms"]))
        if len(runs) > 1:
            out[f"latency/{k}_mean_ms_seed_sd"] = float(np.std(d["mean_ms"], ddof=1))
    return per_seed


def _speed(out: dict, lat: dict, correct: dict, n_boot: int, seed: int) -> tuple[dict, str]:
    """Percentiles, speed-up over the faster dense path (with bootstrap replicates) and Δ accuracy [CI] per
    contender."""
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


def _best_on_dev(cfg, splits, contenders, pad, dev, layers: int) -> tuple[str | None, dict]:
    """The EAT setting a user would deploy, chosen on dev: of the component subsets whose dev accuracy stays within
    method.tau_tolerance points of dense, the one with the lowest batch-1 p50 on `n_dev_latency` dev examples."""
    m = cfg.method
    if splits.dev is None:
        return None, {}
    subsets = {k: v for k, v in contenders.items() if k.startswith("eat:") or k == "dense"}
    acc, _, _ = _scores(subsets, splits.dev, cfg.hardware.eval_batch_size, pad, dev, layers)
    n = min(len(splits.dev), m.n_dev_latency)
    lat = _batch1(subsets, _rows(splits.dev, n, cfg.seed + 1), min(m.warmup, n // 4), pad, dev)
    table = {k: {"acc": acc[f"acc/{k}"], "p50_ms": float(np.median(lat[k]))} for k in subsets}
    ok = [k for k in subsets if k != "dense" and table[k]["acc"] - table["dense"]["acc"] >= -m.tau_tolerance]
    best = min(ok, key=lambda k: table[k]["p50_ms"]) if ok else None
    log.info("best EAT setting on dev: %s (%s)", best, table)
    return best, table


def _layers(preds: dict, contenders: dict[str, Arm], name: str = FULL) -> dict:
    """extra.layers (of contender `name`, the one the paper's Fig. 2 shows), extra.layers_by_contender (every
    contender through our loop), extra.seq_len_mean and extra.model_dims."""
    if name not in preds:
        return {}
    arm = contenders[name]
    return {**shape_of(preds[name], arm.model, arm.settings), "layers_of": name,
            "layers_by_contender": {k: layer_stats(p, contenders[k].settings) for k, p in preds.items()}}


def latency(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m, dev = cfg.method, ctx.device
    tok, splits = load_data(cfg)
    rows = data.rows_of(splits.evals)
    if m.warmup + m.n_latency > len(rows):
        raise ValueError(f"method.warmup + method.n_latency = {m.warmup + m.n_latency} but task={cfg.task.name} has "
                         f"{len(rows)} eval examples: lower method.n_latency")
    dense, eat, base, sel = _trained(cfg, ctx, tok, splits)
    pad = tok.pad_token_id
    contenders = _contenders(dense, eat, base)
    with torch.inference_mode():
        best, on_dev = _best_on_dev(cfg, splits, contenders, pad, dev, dense.num_layers)
        out, correct, preds = _scores(contenders, splits.evals, cfg.hardware.eval_batch_size, pad, dev,
                                      dense.num_layers)
        if best is not None:  # timed and scored on eval as a contender of its own (its scores are best's)
            contenders["eat:best"] = contenders[best]
            correct["eat:best"] = correct[best]
            out.update({f"{k}/eat:best": out[f"{k}/{best}"] for k in ("acc", "depth", "retention")})
        runs, throughput = {}, {}
        for sd, timed in _seeded(rows, m.warmup, m.n_latency, m.timing_seeds):
            runs[sd] = _batch1(contenders, timed, m.warmup, pad, dev)
            throughput[sd] = _throughput(contenders, timed[m.warmup:], m.batch_size, m.throughput_rounds, pad, dev)
    lat = _pooled(runs)
    reps, ref = _speed(out, lat, correct, m.bootstrap, cfg.seed)
    per_seed = _seed_means(out, runs)  # replaces _speed's pooled mean
    for name in contenders:
        per_seed[name]["throughput_per_s"] = [throughput[sd][name] for sd in runs]
        out[f"throughput/{name}_per_s"] = float(np.mean(per_seed[name]["throughput_per_s"]))
    out["eat/tau"] = eat.settings.tau if eat.settings.tau is not None else float("nan")
    out["calib/temperature"] = float(eat.temperature)
    ctx.extra.update(replicates=reps, reference=ref, contenders=list(contenders), tau_dev_accs=sel["dev_accs"],
                     tau_choice=sel["tau_choice"], best_setting=best, best_on_dev=on_dev, timing_seeds=list(runs),
                     per_seed=per_seed, latency_ms={k: v.round(4).tolist() for k, v in lat.items()},
                     **_layers(preds, contenders))
    ctx.n_samples.update(timed=m.n_latency * len(runs), timed_per_seed=m.n_latency, timing_seeds=len(runs),
                         warmup=m.warmup, eval_examples=len(rows), batch_size=m.batch_size)
    return out


def length(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    """Accuracy and batch-1 speed at length: the arms trained on `task` (short snippets) read `method.long_task`'s
    eval documents (full movie reviews, up to its max_length) zero-shot; the same labels, another length regime.
    Each timing seed times its own random share of the documents (1/len(timing_seeds) of them after its warm-up:
    three seeds cost about what one pass over every document did)."""
    m, dev = cfg.method, ctx.device
    long_task = load_group("task", m.long_task, TaskConfig, "method.long_task")  # eat.config.check read it already
    tok, splits = load_data(cfg)
    dense, eat, _, _ = _trained(cfg, ctx, tok, splits, baseline=False)
    raw = data.load_splits(long_task, OmegaConf.merge(cfg.data, {"limit_eval": m.n_long, "max_length": None}))
    feats = data.encode(raw["eval"], tok, long_task, long_task.max_length, train=False)
    pad = tok.pad_token_id
    contenders = {k: v for k, v in _contenders(dense, eat, None).items()
                  if k in ("dense", "dense_hf", "eat:window", "eat:prune+window", FULL, "paper_code")}
    rows = data.rows_of(feats)
    warmup = min(m.warmup, len(rows) // 4)
    share = max(1, (len(rows) - warmup) // len(m.timing_seeds))
    with torch.inference_mode():
        out, correct, preds = _scores(contenders, feats, LONG_BATCH, pad, dev, dense.num_layers)
        runs = {sd: _batch1(contenders, timed, warmup, pad, dev)
                for sd, timed in _seeded(rows, warmup, share, m.timing_seeds)}
    lat = _pooled(runs)
    reps, ref = _speed(out, lat, correct, m.bootstrap, cfg.seed)
    per_seed = _seed_means(out, runs)  # replaces _speed's pooled mean
    detail = preds[FULL]
    out["long/tokens_mean"] = float(np.mean([len(r["input_ids"]) for r in rows]))
    out = {f"long/{k}" if not k.startswith("long/") else k: v for k, v in out.items()}
    ctx.extra.update(replicates={f"long/{k}": v for k, v in reps.items()}, reference=ref, contenders=list(contenders),
                     timing_seeds=list(runs), per_seed=per_seed,
                     detail={"length": detail["length"].tolist(), "retention": detail["retention"].round(4).tolist(),
                             "depth": detail["depth"].tolist()}, **_layers(preds, contenders))
    ctx.n_samples.update(long_examples=len(rows), max_length=long_task.max_length, timed=share * len(runs),
                         timed_per_seed=share, timing_seeds=len(runs))
    return out


def _long_sequences(tok, lengths: list[int], n: int) -> dict[int, list[list[int]]]:
    """n sequences of exactly T real tokens per T: [CLS] + running English Wikipedia text (wiki-long)."""
    texts = data.long_texts(min_words=0)
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
    shape = dict(m.scaling_shape)
    torch.manual_seed(cfg.seed)
    enc = BertModel(BertConfig(vocab_size=len(tok), max_position_embeddings=max(m.lengths), **shape),
                    add_pooling_layer=False)
    n = shape["num_hidden_layers"]
    after = tuple(l for l in m.prune_after if l < n)
    model = EatModel(enc, 2, exit_layer=None, settings=Settings(prune_after=after)).to(dev).eval()
    s = replace(settings_of(OmegaConf.merge(cfg.method, {"variant": "eat"})), prune_after=after, tau=None)
    arms = {"dense": s.dense(), "window": replace(s, prune_ratio=0.0), "eat": s,
            "paper_code": replace(s, prune_rule="repo", prune_mode="mask", kernel="masked")}
    seqs = _long_sequences(tok, list(m.lengths), 1)
    out, per = {}, {name: {} for name in arms}

    def forward(st: Settings, b: dict):
        def call():
            with model.using(st):
                model(**b)
        return call
    for T in m.lengths:
        ids = torch.tensor(seqs[T], device=dev)
        b = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        # one untimed round first, then m.repeats rounds of every arm in turn
        calls = {name: forward(st, b) for name, st in arms.items()}
        times = {name: [1e3 * t for t in ts]
                 for name, ts in interleaved(calls, repeats=m.repeats, warmup=1, device=dev).items()}
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


BENCHMARKS = {"latency": latency, "scaling": scaling, "length": length}  # method.variant -> its benchmark


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    config.check(cfg)
    return BENCHMARKS[cfg.method.variant](cfg, ctx)
