"""The statistics of the evidence layer, in one place. Every interval the reports print comes from here:

- over seeds (or timing rounds): a Student t interval, mean +- t(n-1) * sd / sqrt(n). A percentile bootstrap over
  three values returns their min and max, a ~75 % interval that calls itself 95 %; t says what three seeds can show.
- over evaluated examples of one run: a paired percentile bootstrap (per-example scores, the same resampled examples
  in both arms); it covers test-set noise only, not the training seed.
- over replicates a run kept (record["extra"]["replicates"]): those replicates, as they are, never redrawn.

`one_sided_p` turns either kind into the p-value of a decided direction, for the Holm correction across a paper."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy_stats

from experiments.evidence.records import short

N_BOOT = 2000
BOOT_SEED = 0
LEVEL = 0.95
MIN_CORRELATION_POINTS = 8  # below this a bootstrap r is +-1 or the point itself: no interval worth printing


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval and how it was made. `how`: "t" (over `n` seeds or rounds, df n-1),
    "examples" (paired bootstrap over n examples), "replicates" (n kept replicates), "exact" (no noise: lo == hi)."""
    estimate: float
    lo: float
    hi: float
    how: str
    n: int
    se: float | None = None  # t intervals: the standard error; bootstraps: None (their replicates carry it)
    reps: np.ndarray | None = None  # bootstrap intervals: the replicates (for p-values and group averages)

    @property
    def ci(self) -> tuple[float, float]:
        return self.lo, self.hi


def t_interval(values, level: float = LEVEL) -> Interval | None:
    """Mean of `values` (one per seed or timing round) with a Student t interval; None below 2 finite values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return None
    m, se = float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v)))
    h = float(_scipy_stats.t.ppf(0.5 + level / 2, len(v) - 1)) * se
    return Interval(m, m - h, m + h, "t", len(v), se=se)


def t_from_se(estimate: float, se: float, df: float, n: int, level: float = LEVEL) -> Interval:
    """A t interval from a standard error already combined over groups (df: its degrees of freedom)."""
    h = float(_scipy_stats.t.ppf(0.5 + level / 2, max(df, 1))) * se
    return Interval(estimate, estimate - h, estimate + h, "t", n, se=se)


def replicate_interval(estimate: float, reps, how: str, level: float = LEVEL) -> Interval:
    """A percentile interval from bootstrap replicates (examples resampled here, or replicates a run kept)."""
    reps = np.asarray(reps, dtype=float)
    lo, hi = percentile_ci(reps, level)
    return Interval(estimate, lo, hi, how, len(reps), reps=reps)


def one_sided_p(iv: Interval, bound: float, above: bool, df: float | None = None) -> float:
    """p-value that the true statistic lies on the other side of `bound` than the interval says (above: the claim
    is "statistic > bound"). t intervals: Student t with `df` (default n-1); bootstraps: the share of replicates on
    the wrong side (never below 1 / (replicates + 1)); exact values: 0 or 1."""
    if iv.how == "exact" or (iv.se is not None and iv.se == 0):
        return 0.0 if (iv.estimate > bound if above else iv.estimate < bound) else 1.0
    if iv.se is not None:
        t = (iv.estimate - bound) / iv.se
        d = df if df is not None else iv.n - 1
        return float(_scipy_stats.t.sf(t, d) if above else _scipy_stats.t.cdf(t, d))
    reps = iv.reps
    wrong = np.sum(reps <= bound) if above else np.sum(reps >= bound)
    return float((wrong + 1) / (len(reps) + 1))


def holm(pvalues: list[float], alpha: float = 0.025) -> list[bool]:
    """Which of the tests survive Holm's step-down correction at family-wise `alpha` (one-sided 0.025: the same per
    test level as a two-sided 95 % interval)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    keep = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        keep[i] = True
    return keep


def per_example(record: dict) -> dict | None:
    pe = (record.get("per_example") or {}).get("eval")
    return pe if isinstance(pe, dict) and pe else None


def _f1(tp, fp, fn):
    denom = 2 * tp + fp + fn
    return np.divide(2 * tp, denom, out=np.zeros_like(denom, dtype=float), where=denom > 0)


def resampled_metric(key: str, pe: dict, weights: np.ndarray) -> np.ndarray | None:
    """The metric `key` recomputed from per-example scores under each row of example weights (B, n): a resample
    is a row of multiplicities. None when `key` cannot be recomputed from what the record kept."""
    name = short(key)
    w = np.asarray(weights, dtype=float)
    n = w.sum(1)

    def s(col):
        return w @ np.asarray(pe[col], dtype=float)
    try:
        if name in ("accuracy", "f1_micro") and "pred" in pe:
            return w @ (np.asarray(pe["pred"]) == np.asarray(pe["label"])).astype(float) / n
        if name == "f1_macro" and "pred" in pe:
            p, y = np.asarray(pe["pred"]), np.asarray(pe["label"])
            total = np.zeros(len(w))
            present = np.zeros(len(w))
            for c in np.union1d(p, y):
                tp, fp, fn = w @ ((p == c) & (y == c)), w @ ((p == c) & (y != c)), w @ ((p != c) & (y == c))
                total += _f1(tp, fp, fn)
                present += (tp + fp + fn) > 0  # sklearn averages over the labels present in the sample
            return total / np.maximum(present, 1)
        if name == "entity_f1" and "tp" in pe:
            return _f1(s("tp"), s("fp"), s("fn"))
        if name == "entity_precision" and "tp" in pe:
            tp, fp = s("tp"), s("fp")
            return np.divide(tp, tp + fp, out=np.zeros_like(tp), where=tp + fp > 0)
        if name == "entity_recall" and "tp" in pe:
            tp, fn = s("tp"), s("fn")
            return np.divide(tp, tp + fn, out=np.zeros_like(tp), where=tp + fn > 0)
        if name == "token_f1" and "token_tp" in pe:
            return _f1(s("token_tp"), s("token_fp"), s("token_fn"))
        if name in ("em", "f1") and name in pe:
            return s(name) / n
    except (KeyError, ValueError):
        return None
    return None


def count_examples(pe: dict) -> int:
    return len(next(iter(pe.values())))


def resample_weights(rng: np.random.Generator, n: int, n_boot: int, chunk: int = 250):
    """Yield (b, n) multiplicity matrices: row i counts how often each example is drawn in resample i, drawn as
    rng.integers(0, n, size=(b, n)) chunk after chunk (the same stream as one index row per resample)."""
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        idx = rng.integers(0, n, size=(b, n))
        flat = (idx + np.arange(b)[:, None] * n).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n)


def bootstrap_seeds(values: np.ndarray, rng: np.random.Generator, n_boot: int = N_BOOT) -> np.ndarray:
    """Means of `values` (one per seed) over resampled seeds."""
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    return values[idx].mean(1)


def bootstrap_examples(stat, n: int, rng: np.random.Generator, n_boot: int = N_BOOT) -> np.ndarray:
    """`stat(weights) -> (b,)` over resampled examples; paired when `stat` applies the same weights to both arms."""
    return np.concatenate([stat(w) for w in resample_weights(rng, n, n_boot)])


def percentile_ci(reps: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(reps, [tail, 100 - tail])
    return float(lo), float(hi)


def example_ci(record: dict, key: str, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile CI of one run's `key` over resampled eval examples (what a one-seed table cell can show), or
    None when the record kept no per-example scores that reproduce its metric (the check guards against a scale or
    definition mismatch between the metric and its per-example form)."""
    pe, value = per_example(record), (record.get("metrics") or {}).get(key)
    if pe is None or value is None or not key.startswith("eval/"):
        return None
    n = count_examples(pe)
    whole = resampled_metric(key, pe, np.ones((1, n)))
    if whole is None or not math.isclose(float(whole[0]), float(value), rel_tol=1e-6, abs_tol=1e-9):
        return None
    rng = np.random.default_rng(seed)
    return percentile_ci(bootstrap_examples(lambda w: resampled_metric(key, pe, w), n, rng, n_boot))

