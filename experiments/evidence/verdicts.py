"""What the run records say about each claim: one row per (claim, scale) with its verdict.

Uncertainty (experiments/evidence/stats.py): the estimate is the mean over groups of the mean over seeds.
- Groups with >= 2 seeds: a Student t interval over seeds; groups that share their seeds are averaged per seed first
  (a seed fixes the sample and the init, so they are resampled together), else combined as independent (Welch df).
- One-run groups: a t interval over the timing rounds behind the metric (`rounds`), the bootstrap replicates the run
  kept (extra.replicates, used as they are), or a paired percentile bootstrap over eval examples (per_example).
- Anything else is one measurement: decided on its value only when the claim declares `exact:`, else inconclusive.
- A correlation needs >= 8 points; a spread is decided only when exact.
Verdicts: holds / does not hold (the whole interval on one side of the claimed bound), inconclusive (it straddles;
with a rough count of the data it would take), partly tested (held on k of m parts: groups an arm left, comparisons
not run), not testable here (every group has an arm not doing its task: its 95 % interval reaches the trivial
baseline, or its estimate is < 2 points above it; the baseline is named: majority class, all-O tagger, ...; "baseline
failed to train" when only the b arm fails), not run (no records). A verdict that changes when the guard moves by 1
point is fragile. Decided statistical rows carry a one-sided p-value, and Holm over the paper's paper/target/premise
rows says which survive. Rows are per (claim, scale); a scale is the hardware plus offline stand-ins vs the paper's
own models and data, never merged.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments import REPO
from experiments.evidence.claims import SEED, Claim, ClaimsError, Comparison, Registry, Test, load_claims
from experiments.evidence.records import (MISSING, SelectError, field_of, metric_name, multiplier, points, raw_value,
                                          select, short, value_of)
from experiments.evidence.signal import SIGNAL_MARGIN_POINTS, Signal, run_name, signal
from experiments.evidence.stats import (BOOT_SEED, MIN_CORRELATION_POINTS, N_BOOT, Interval, bootstrap_examples,
                                        count_examples, example_ci, holm, one_sided_p, per_example,
                                        replicate_interval, resampled_metric, t_from_se, t_interval)
from experiments.results import legacy_reason, outdated_reason

# ---------------------------------------------------------------- evaluating one comparison

@dataclass
class Outcome:
    label: str
    verdict: str
    reason: str = ""
    estimate: float | None = None
    sd: float | None = None
    ci: tuple[float, float] | None = None
    n: str = ""
    records: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unfit: list[str] = field(default_factory=list)  # arms not doing their task (their groups are left out)
    shown: str | None = None  # what "ours" prints before the interval, when not the bare estimate
    statistic: str = ""  # what the estimate is, in words and units: "a - b, accuracy points", "r", "value - paper"
    interval: str = ""  # how the interval was made: "t over 3 seeds (df 2)", "paired bootstrap over 500 examples"
    a_mean: float | None = None  # the a arm's mean (and b's, or the paper's constant), in the statistic's units
    b_mean: float | None = None
    p: float | None = None  # one-sided p-value of the decided direction (None: undecided or exact)
    parts: tuple[int, int] = (0, 0)  # (groups decided, groups the comparison names: run or not)
    baseline: str | None = None  # the trivial predictor an unfit arm was held against ("majority class", ...)
    baseline_failed: bool = False  # only the b arm (the claim's baseline) is not doing its task
    fragile: list[str] = field(default_factory=list)  # checks under which the verdict flips
    alt: dict[float, str] = field(default_factory=dict)  # the verdict at other signal margins (where it was redone)


def _pair(comp: Comparison, claim_id: str, a_runs: list[dict], b_runs: list[dict] | None) -> tuple[list, list]:
    """(key, a record, b record or None) for every pair_by key both sides have, and the keys only a has (a part of
    the comparison whose b was not run); a key twice on one side is an error naming the records (add a
    selector or a pair_by field so each key is one run)."""
    def keyed(runs, side):
        out: dict[tuple, dict] = {}
        for r in runs:
            k = tuple(json.dumps(None if (v := field_of(r, p)) is MISSING else v, default=str)
                      for p in comp.pair_by)
            if k in out:
                raise ClaimsError(
                    f"claim {claim_id!r}{' (' + comp.label + ')' if comp.label else ''}: selector {side} matches two "
                    f"records with the same pair_by {list(comp.pair_by)} = {[json.loads(x) for x in k]}: "
                    f"{out[k].get('run_id')} ({out[k].get('exp_id')}) and {r.get('run_id')} ({r.get('exp_id')}); "
                    f"add a selector or a pair_by field that tells them apart (e.g. method.k, exp_id)")
            out[k] = r
        return out
    a = keyed(a_runs, "a")
    if b_runs is None:
        return [(k, r, None) for k, r in sorted(a.items())], []
    b = keyed(b_runs, "b")
    # only a's keys count as parts not run: a b record with no a partner (a dense run of another model the b
    # selector also matches) is not a part the claim asked for
    return [(k, a[k], b[k]) for k in sorted(a.keys() & b.keys())], sorted(a.keys() - b.keys())


def _expected(comp: Comparison, record: dict) -> float | None:
    if isinstance(comp.expected, (int, float)):
        return float(comp.expected)
    v = field_of(record, comp.expected["by"])
    got = comp.expected["values"].get(v) if v is not MISSING else None
    return None if got is None else float(got)


def _stat(comp: Comparison, va, vb):
    if comp.statistic == "value":
        out = va
    elif comp.statistic == "ratio":
        with np.errstate(divide="ignore", invalid="ignore"):  # over a zero b: undefined, nan (shown as n/a), quietly
            out = np.divide(va, vb)
        if np.ndim(out) == 0 and not np.isfinite(out):
            return math.nan  # not inf: inf - inf in the sd and the bootstrap would warn without naming the claim
    else:
        out = np.subtract(va, vb)
    if isinstance(out, np.ndarray):
        finite = out[np.isfinite(out)]
        if not len(finite):
            return None
        out = {"min": np.min, "max": np.max}.get(comp.reduce, np.mean)(finite)
    return float(out)


@dataclass
class _Group:
    """One group of a comparison (its pair_by fields but the seed): the pair statistic per seed, and the interval
    of a single-run group when its records keep examples, replicates or timing rounds."""
    key: tuple
    pairs: list[tuple[Any, dict, dict | None]]  # (seed, a record, b record or None)
    stats: list[float]
    iv: Interval | None = None  # single-run groups only
    a_values: list[float] = field(default_factory=list)
    b_values: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return float(np.mean(self.stats))


def evaluate_comparison(claim: Claim, comp: Comparison, runs: list[dict],
                        margin: float = SIGNAL_MARGIN_POINTS) -> Outcome:
    if comp.test.kind == "correlation":
        return _correlation(claim, comp, runs)
    if comp.test.kind == "spread":
        return _spread(claim, comp, runs)
    a_runs = select(runs, comp.a)
    b_runs = select(runs, comp.b) if comp.b is not None else (a_runs if comp.b_metric else None)
    if comp.expected is not None and comp.b is None:
        a_runs = [r for r in a_runs if _expected(comp, r) is not None]
    out = Outcome(label=comp.label, verdict="not run", statistic=_statistic_text(comp))
    if not a_runs or (b_runs is not None and not b_runs):
        out.reason = "no records: " + _wanted(comp, a_runs, b_runs)
        return out
    need = claim.requires
    if need is not None:
        side = a_runs if need.side == "a" else b_runs or []
        failing = [r for r in side if need.fails(raw_value(r, need.metric))]
        if failing:
            if len(failing) == len(side):
                out.verdict, out.records = "not testable here", a_runs + (b_runs or [])
                out.reason = f"{need.why} (every {need.side} record: {short(need.metric)} outside the requirement)"
                return out
            out.notes.append(f"{len(failing)} of {len(side)} {need.side} records left out: {need.why}")
            gone = {id(r) for r in failing}
            a_runs = [r for r in a_runs if id(r) not in gone]
            b_runs = None if b_runs is None else [r for r in b_runs if id(r) not in gone]
    same = comp.b_metric and comp.b is None
    pairs, unpaired = _pair(comp, claim.id, a_runs, None if same else b_runs)
    if same:
        pairs = [(k, r, r) for k, r, _ in pairs]
    out.verdict = "not testable here"
    out.records = a_runs + (b_runs or []) if not pairs else \
        list({id(r): r for _, ra, rb in pairs for r in (ra, rb) if r is not None}.values())
    if not pairs:
        out.reason = f"no a/b pairs share {list(comp.pair_by)}"
        return out
    seed_i = comp.pair_by.index(SEED) if SEED in comp.pair_by else None
    by_group: dict[tuple, list] = {}
    for k, ra, rb in pairs:
        g = tuple(x for i, x in enumerate(k) if i != seed_i)
        by_group.setdefault(g, []).append((k[seed_i] if seed_i is not None else None, ra, rb))
    groups = []
    for g in sorted(by_group):
        group = _Group(g, by_group[g], [])
        for _, ra, rb in group.pairs:
            why = _pair_stat(comp, ra, rb, group)
            if why:
                out.reason = why
                return out
        groups.append(group)
    named = len(groups) + len({tuple(x for i, x in enumerate(k) if i != seed_i) for k in unpaired}
                              - {g.key for g in groups})
    # the arms' signal: which groups may speak at this margin, and at the margins one point either side
    signals = {g.key: _group_signals(comp, g) for g in groups} if claim.needs_signal else {}

    def kept(m: float) -> list[_Group]:
        return [g for g in groups if not any(s.why(m) for _, s in signals.get(g.key, ()))]
    rng = np.random.default_rng(BOOT_SEED)
    for g in groups:
        if len(g.stats) == 1:
            g.iv = _single_run_interval(comp, g, rng)
    chosen = kept(margin)
    _decide(claim, comp, chosen or groups, out)
    out.parts = (len(chosen) if out.verdict in ("holds", "does not hold") else 0, named)
    if claim.needs_signal:
        whys = [(w, s) for g in groups for _, s in signals[g.key] for w in [s.why(margin)] if w]
        out.unfit = list(dict.fromkeys(w for w, _ in whys))
        out.baseline = next((s.baseline_name for _, s in whys if s.baseline_name), None)
        if not chosen:  # every group out: the numbers stay for orientation, the verdict does not
            b_only = [all(side == "b" for side, s in signals[g.key] if s.why(margin)) for g in groups]
            out.baseline_failed = all(b_only) and comp.b is not None
            out.verdict, out.p, out.notes = "not testable here", None, []
            out.reason = "baseline failed to train" if out.baseline_failed else \
                "every group has an arm not doing its task" + (
                    f" (the baseline arm b alone in {sum(b_only)} of {len(groups)} groups: it failed to train there)"
                    if any(b_only) and comp.b is not None else "")
            out.parts = (0, named)
        for m in (margin - 1, margin + 1):
            alt = kept(m)
            if {g.key for g in alt} != {g.key for g in chosen}:
                trial = Outcome(label=out.label, verdict="")
                if alt:
                    _decide(claim, comp, alt, trial)
                out.alt[m] = trial.verdict if alt else "not testable here"
                if out.alt[m] != out.verdict:
                    out.fragile.append(f"the signal guard at {m:g} points: {out.alt[m]}")
        if not chosen:
            return out
    if out.verdict in ("holds", "does not hold") and out.parts[0] < named:
        out.notes.append(f"decided on {out.parts[0]} of {named} groups")
    return out


def _b_value(comp: Comparison, ra: dict, rb: dict | None):
    """The b side of a pair: the b record's metric (or b_metric), the paper's constant, or None for a value."""
    if comp.statistic == "value":
        return None
    if comp.b_metric is not None or comp.b is not None:
        return value_of(rb, comp, comp.b_metric or comp.metric)[0]
    return _expected(comp, ra)


def _pair_stat(comp: Comparison, ra: dict, rb: dict | None, group: _Group) -> str | None:
    """Append the pair's statistic to the group; the reason when it cannot be computed."""
    va, key = value_of(ra, comp, comp.metric)
    vb = _b_value(comp, ra, rb)
    if va is None or (comp.statistic != "value" and vb is None):
        missing = key if va is None else (comp.b_metric or metric_name(rb, comp.metric))
        return f"{run_name(ra if va is None else rb)} has no {missing}"
    s = _stat(comp, va, vb)
    if s is None:
        return f"{run_name(ra)}: {key} has no finite values"
    group.stats.append(s)
    if np.ndim(va) == 0:
        group.a_values.append(float(va))
    if vb is not None and np.ndim(vb) == 0:
        group.b_values.append(float(vb))
    return None


def _group_signals(comp: Comparison, g: _Group) -> list[tuple[str, Signal]]:
    """Each arm of the group against its trivial baseline, with the arm's interval: over its seeds (t) when the
    group has several, else over its eval examples when the record keeps them. Each is named by its side and group
    (records of different arms can share task/model/variant)."""
    out = []
    where = ", ".join(str(json.loads(k)) for k in g.key)
    for side, idx in (("a", 1), ("b", 2)):
        recs = [p[idx] for p in g.pairs if p[idx] is not None]
        if not recs or (side == "b" and g.pairs[0][2] is g.pairs[0][1]):
            continue
        first = signal(recs[0], comp.metric)
        label = f"{side} arm [{where}]" if where else f"{side} arm"
        if first.broken or len(recs) == 1:
            s = _one_run_signal(recs[0], comp.metric)
            out.append((side, dataclasses.replace(s, name=f"{label} {s.name}")))
            continue
        sigs = [signal(r, comp.metric) for r in recs]
        broken = next((s for s in sigs if s.broken), None)
        if broken:
            out.append((side, dataclasses.replace(broken, name=f"{label} {broken.name}")))
            continue
        iv = t_interval([s.value for s in sigs])
        mean = Signal(f"{label} {sigs[0].name} ({len(sigs)} seeds)", first.key, iv.estimate, first.baseline,
                      first.baseline_name, (iv.estimate - first.baseline) / points(first.key), iv.lo)
        out.append((side, mean))
    return out


def _one_run_signal(record: dict, metric: str | None) -> Signal:
    """One run against its trivial baseline, with its interval over eval examples when the record keeps them."""
    first = signal(record, metric)
    lo = None if first.broken else example_ci(record, first.key)
    return first if lo is None else signal(record, metric, lo[0])


def _single_run_interval(comp: Comparison, g: _Group, rng) -> Interval | None:
    """A one-run group's interval: timing rounds (t), the run's kept replicates, or its eval examples (paired
    bootstrap); None when the records keep none of these."""
    _, ra, rb = g.pairs[0]
    if comp.rounds:
        return _rounds_interval(comp, ra, rb, g.stats[0])
    reps = _example_reps(comp, ra, rb, rng)
    if reps is None:
        return None
    values, n, how = reps
    iv = replicate_interval(g.stats[0], values, how)
    return Interval(iv.estimate, iv.lo, iv.hi, how, n, reps=values)


def _rounds_interval(comp: Comparison, ra: dict, rb: dict | None, recorded: float) -> Interval | None:
    """A t interval over the timing rounds behind the compared metric (rounds interleave the arms, so round i of a
    and of b were measured together), centred on the recorded statistic; None unless the recorded metric lies
    within its per-round values (else these rounds are not the measurement behind it). Paths in a list are summed
    round by round; an item {path: p, times: w} is weighted (a per-epoch share of a one-off cost)."""
    def rounds(record, paths):
        if record is None:
            return None
        items = [p if isinstance(p, dict) else {"path": p} for p in (paths if isinstance(paths, list) else [paths])]
        parts = [(raw_value(record, i["path"]), float(i.get("times", 1.0))) for i in items]
        if any(not isinstance(v, list) or len(v) != len(parts[0][0]) for v, _ in parts):
            return None
        return np.sum([np.asarray(v, dtype=float) * w for v, w in parts], axis=0)
    a = rounds(ra, comp.rounds["a"])
    b = rounds(ra, comp.rounds["b"]) if "b" in comp.rounds else None
    if a is None or len(a) < 2 or ("b" in comp.rounds and (b is None or len(b) != len(a))):
        return None
    va, key = value_of(ra, comp, comp.metric)
    per = {"value": lambda: a, "ratio": lambda: a / b, "pct": lambda: (a / b - 1) * 100,
           "difference": lambda: a - b}[comp.rounds.get("as", "value")]() * multiplier(comp, key)
    tol = 1e-9 * max(1.0, abs(va))
    if va is None or not (per.min() - tol <= va <= per.max() + tol):
        return None
    vb = _b_value(comp, ra, rb)
    stats_per_round = np.array([_stat(comp, m, vb) for m in per], dtype=float)
    iv = t_interval(stats_per_round)
    return None if iv is None else t_from_se(recorded, iv.se, len(per) - 1, len(per))


def _decide(claim: Claim, comp: Comparison, groups: list[_Group], out: Outcome) -> None:
    """Estimate, interval and verdict of a comparison over `groups` (the mean over groups of the mean over seeds)."""
    out.estimate = float(np.mean([g.mean for g in groups]))
    a_vals = [v for g in groups for v in g.a_values]
    b_vals = [v for g in groups for v in g.b_values]
    out.a_mean = float(np.mean(a_vals)) if a_vals else None
    out.b_mean = float(np.mean(b_vals)) if b_vals else None
    multi = [g for g in groups if len(g.stats) >= 2]
    out.sd = float(np.sqrt(np.mean([np.var(g.stats, ddof=1) for g in multi]))) if multi else None
    if isinstance(comp.expected, (int, float)) and out.a_mean is not None:
        out.shown = f"{_fmt(out.a_mean)} vs paper {_fmt(float(comp.expected))}: Δ {_fmt(out.estimate)}"
    exact = claim.exact is not None
    if comp.test.kind == "exact" and exact:
        worst = max(abs(s - comp.test.target) for g in groups for s in g.stats)
        out.ci, out.interval, out.n = None, "exact", _n_text(groups, "exact")
        out.verdict = "holds" if worst <= comp.test.tolerance else "does not hold"
        if out.verdict == "does not hold":
            out.reason = (f"largest |{comp.statistic} - {_fmt(comp.test.target)}| = {_fmt(worst)} > "
                          f"{comp.test.tolerance:g}")
        return
    if exact:
        out.ci, out.interval, out.n = (out.estimate, out.estimate), "exact", _n_text(groups, "exact")
        out.notes.append(f"exact: {claim.exact}")
        out.verdict = decide(comp.test, out.estimate, out.ci)[0]
        return
    iv, df, how = _combined_interval(groups)
    out.n = _n_text(groups, how)
    if iv is None:
        out.verdict = "inconclusive"
        out.reason = ("no interval: " + how + "; a noisy measurement is decided only with one (more seeds, "
                      "per-example scores, kept replicates or timing rounds), or declared `exact:` when it is "
                      "deterministic")
        return
    out.ci, out.interval = iv.ci, how
    out.verdict, advice = decide(comp.test, out.estimate, out.ci)
    out.p = _p_value(comp.test, iv, df, out.verdict)
    if out.verdict == "inconclusive":
        out.reason = advice + _more_data(groups, iv, comp.test)


def _combined_interval(groups: list[_Group]) -> tuple[Interval | None, float | None, str]:
    """The interval of the mean over groups, and how it was made (or why there is none).
    - every group has seeds, the same ones: the per-seed means over groups, t over seeds (groups that share a seed
      share its few-shot sample or init, so they are resampled together, never as independent draws);
    - every group has seeds, not the same ones: groups independent, Welch-Satterthwaite df;
    - every group is one run with bootstrap replicates of one kind: replicates averaged index by index;
    - otherwise each group's standard error, combined as independent (normal approximation, Welch df)."""
    if any(len(g.stats) == 1 and g.iv is None for g in groups):
        bare = [g for g in groups if len(g.stats) == 1 and g.iv is None]
        return None, None, f"{len(bare)} of {len(groups)} group(s) are one run with no examples, replicates or rounds"
    est = float(np.mean([g.mean for g in groups]))
    if all(len(g.stats) >= 2 for g in groups):
        seed_sets = [[s for s, _, _ in g.pairs] for g in groups]
        if all(sorted(map(str, s)) == sorted(map(str, seed_sets[0])) for s in seed_sets) and \
                all(s is not None for s in seed_sets[0]):
            per_seed: dict[str, list[float]] = {}
            for g in groups:
                for (seed, _, _), v in zip(g.pairs, g.stats):
                    per_seed.setdefault(str(seed), []).append(v)
            iv = t_interval([np.mean(v) for v in per_seed.values()])
            if iv is None:
                return None, None, "the statistic is not finite on enough seeds"
            n = iv.n
            return iv, n - 1, f"t over {n} seeds (df {n - 1})" + (", groups averaged per seed" if len(groups) > 1
                                                                   else "")
        v = [np.var(g.stats, ddof=1) / len(g.stats) for g in groups]
        se = math.sqrt(sum(v)) / len(groups)
        df = _welch_df(v, [len(g.stats) - 1 for g in groups])
        n = sum(len(g.stats) for g in groups)
        return t_from_se(est, se, df, n), df, f"t over seeds, {len(groups)} groups as independent (df {df:.1f})"
    kinds = {g.iv.how if g.iv is not None else "seeds" for g in groups}
    if all(g.iv is not None and g.iv.reps is not None for g in groups) and len(kinds) == 1:
        size = min(len(g.iv.reps) for g in groups)
        reps = np.mean([g.iv.reps[:size] for g in groups], axis=0)
        iv = replicate_interval(est, reps, kinds.pop())
        what = ("paired bootstrap over eval examples" if iv.how == "examples"
                else "the runs' kept bootstrap replicates, as they are")
        return iv, None, what + f" ({size} resamples)"
    if all(g.iv is not None and g.iv.how == "t" for g in groups):
        v = [g.iv.se ** 2 for g in groups]
        df = _welch_df(v, [g.iv.n - 1 for g in groups])
        se = math.sqrt(sum(v)) / len(groups)
        n = groups[0].iv.n
        return t_from_se(est, se, df, n), df, f"t over {n} timing rounds (df {df:.1f})"
    v, dfs = [], []
    for g in groups:
        if len(g.stats) >= 2:
            v.append(np.var(g.stats, ddof=1) / len(g.stats))
            dfs.append(len(g.stats) - 1)
        elif g.iv.se is not None:
            v.append(g.iv.se ** 2)
            dfs.append(g.iv.n - 1)
        else:
            v.append(float(np.var(g.iv.reps, ddof=1)))
            dfs.append(math.inf)
    se = math.sqrt(sum(v)) / len(groups)
    df = _welch_df(v, dfs)
    return t_from_se(est, se, df, len(groups)), df, f"mixed sources, standard errors combined (df {df:.1f})"


def _welch_df(variances: list[float], dfs: list[float]) -> float:
    num = sum(variances) ** 2
    den = sum(v * v / d for v, d in zip(variances, dfs) if d and math.isfinite(d))
    return num / den if den > 0 else 1e6


def _p_value(test: Test, iv: Interval, df: float | None, verdict: str) -> float | None:
    """One-sided p-value of the decided direction (the largest over the bounds a holding verdict must clear)."""
    if verdict not in ("holds", "does not hold"):
        return None
    if test.kind == "direction":
        bounds = [(test.target, test.sign == "+")]
    else:
        low, high = test.bounds()
        bounds = [(b, up) for b, up in ((low, True), (high, False)) if b is not None]
    if verdict == "holds":
        return max(one_sided_p(iv, b, up, df) for b, up in bounds)
    lo, hi = iv.ci
    crossed = [(b, up) for b, up in bounds if (hi < b if up else lo > b)] or bounds
    return min(one_sided_p(iv, b, not up, df) for b, up in crossed)


def _n_text(groups: list[_Group], how: str) -> str:
    seeds = sorted({len(g.stats) for g in groups})
    parts = []
    if seeds != [1]:
        parts.append(f"{seeds[0]}" + (f"-{seeds[-1]}" if len(seeds) > 1 else "") + " seeds")
    one = [g for g in groups if len(g.stats) == 1]
    if one:
        ex = sorted({g.iv.n for g in one if g.iv is not None and g.iv.how == "examples"})
        if ex:
            parts.append(f"1 seed x {ex[0]}" + (f"-{ex[-1]}" if len(ex) > 1 else "") + " examples")
        if any(g.iv is not None and g.iv.how == "replicates" for g in one):
            parts.append("1 seed, the run's bootstrap replicates")
        if any(g.iv is not None and g.iv.how == "t" for g in one):
            parts.append(f"1 run x {max(g.iv.n for g in one if g.iv is not None and g.iv.how == 't')} rounds")
        if any(g.iv is None for g in one):
            parts.append("1 run")
    return f"n={' / '.join(parts)}" + (f", {len(groups)} groups" if len(groups) > 1 else "")


def _example_reps(comp: Comparison, ra: dict, rb: dict | None, rng) -> tuple[np.ndarray, int, str] | None:
    """Bootstrap replicates of the pair statistic over examples, or None when the records cannot support one."""
    if comp.per or (comp.b_metric and comp.b_metric != comp.metric and comp.b is None):
        return None
    key = metric_name(ra, comp.metric)
    reps = _replicate_reps(comp, key, ra, rb)
    if reps is not None:
        return (*reps, "replicates")
    if comp.reduce:
        return None
    pa = per_example(ra)
    if pa is None:
        return None
    mult = multiplier(comp, key)
    two = comp.statistic != "value" and comp.expected is None
    pb = per_example(rb) if two else None
    if two and (pb is None or count_examples(pa) != count_examples(pb) or metric_name(rb, comp.metric) != key
                or ra["config"].get("data") != rb["config"].get("data")
                or field_of(ra, "task.name") != field_of(rb, "task.name")):
        return None  # not the same eval examples: no paired resample
    n = count_examples(pa)
    ones = np.ones((1, n))
    ma, mb = resampled_metric(key, pa, ones), resampled_metric(key, pb, ones) if two else None
    if ma is None or (two and mb is None):
        return None
    # the per-example scores must reproduce the record's metric, or they are not the examples behind it
    if not math.isclose(ma[0] * mult, value_of(ra, comp, comp.metric)[0], rel_tol=1e-6, abs_tol=1e-9):
        return None
    const = None if two or comp.statistic == "value" else _expected(comp, ra)

    def stat(w):
        va = resampled_metric(key, pa, w) * mult
        if comp.statistic == "value":
            return va
        vb = resampled_metric(key, pb, w) * mult if two else const
        return va / vb if comp.statistic == "ratio" else va - vb
    return bootstrap_examples(stat, n, rng), n, "examples"


def _replicates(record: dict, key: str) -> np.ndarray | None:
    reps = ((record.get("extra") or {}).get("replicates") or {}).get(key)
    return np.asarray(reps, dtype=float) if isinstance(reps, list) and len(reps) >= 2 else None


def _replicate_reps(comp: Comparison, key: str, ra: dict, rb: dict | None) -> tuple[np.ndarray, int] | None:
    """A method that cannot keep per-example scores (an ID estimate over all prompts) may keep bootstrap
    replicates of a metric in record["extra"]["replicates"][<metric key>], drawn with a fixed seed over its eval
    items; two arms over the same items are paired replicate by replicate."""
    if comp.per:
        return None
    if comp.reduce:
        return _reduced_replicate_reps(comp, key, ra, rb)
    a = _replicates(ra, key)
    if a is None:
        return None
    mult = multiplier(comp, key)
    if comp.statistic == "value":
        return a * mult, len(a)
    if comp.expected is not None:
        e = _expected(comp, ra)
        return (a * mult / e if comp.statistic == "ratio" else a * mult - e), len(a)
    b = _replicates(rb, comp.b_metric or key) if rb is not None else None
    if b is None or len(b) != len(a) or ra["config"].get("data") != rb["config"].get("data"):
        return None
    return (a / b if comp.statistic == "ratio" else (a - b) * mult), len(a)


def _reduced_replicate_reps(comp: Comparison, key: str, ra: dict, rb: dict | None) -> tuple[np.ndarray, int] | None:
    """Replicates of an array-valued metric (e.g. extra.curves.twonn: one curve per replicate, kept under that key
    in record["extra"]["replicates"]): the pair statistic reduced (min / mean / max) replicate by replicate."""
    def curves(r):
        reps = ((r.get("extra") or {}).get("replicates") or {}).get(key) if r is not None else None
        arr = np.asarray(reps, dtype=float) if isinstance(reps, list) else None
        return arr if arr is not None and arr.ndim == 2 and len(arr) >= 2 else None
    a = curves(ra)
    if a is None:
        return None
    mult = multiplier(comp, key)
    if comp.statistic == "value" or comp.expected is not None:
        e = None if comp.statistic == "value" else _expected(comp, ra)
        b = None if comp.statistic == "value" else np.full_like(a, np.nan if e is None else e)
    else:
        b = curves(rb)
        if b is None or b.shape != a.shape or ra["config"].get("data") != rb["config"].get("data"):
            return None
    out = []
    for i in range(len(a)):
        s = _stat(comp, a[i] * mult, None if b is None else b[i] * mult)
        if s is not None:
            out.append(s)
    return (np.asarray(out), len(a)) if len(out) >= 2 else None


def decide(test: Test, est: float, ci: tuple[float, float]) -> tuple[str, str]:
    """(verdict, what the interval does) from the interval and the test's claimed side."""
    lo, hi = ci
    if test.kind == "direction":  # strictly above (+) or below (-) the target: 0 for a difference, 1 for a ratio
        t = test.target
        crosses = ("inconclusive", f"CI crosses {_fmt(t)}")
        if test.sign == "+":
            return ("holds", "") if lo > t else ("does not hold", "") if hi <= t else crosses
        return ("holds", "") if hi < t else ("does not hold", "") if lo >= t else crosses
    low, high = test.bounds()
    if (low is None or lo >= low) and (high is None or hi <= high):
        return "holds", ""
    if (low is not None and hi < low) or (high is not None and lo > high):
        return "does not hold", ""
    crossed = [b for b in (low, high) if b is not None and lo < b < hi] or [b for b in (low, high) if b is not None]
    return "inconclusive", "CI crosses " + " and ".join(_fmt(b) for b in crossed)


def _more_data(groups: list[_Group], iv: Interval, test: Test) -> str:
    """Roughly how much more data would shrink the interval past the nearest crossed threshold (width ~ 1/sqrt n)."""
    lo, hi, est = iv.lo, iv.hi, iv.estimate
    bounds = [test.target] if test.kind == "direction" else [b for b in test.bounds() if b is not None]
    crossed = [b for b in bounds if lo < b < hi] or bounds
    b = min(crossed, key=lambda b: abs(est - b))
    margin = abs(est - b)
    half = (hi - est) if b >= est else (est - lo)  # the interval's reach toward the threshold (it can be skewed)
    if margin < 1e-12 * max(1.0, abs(est)) or margin < 0.1 * half:
        return "; the estimate sits at the threshold, so more data alone is unlikely to decide it"
    factor = max(1.0, (half / margin) ** 2)
    seeds = max(len(g.stats) for g in groups)
    if seeds >= 2:
        return f"; roughly {factor:.1f}x the seeds (~{math.ceil(seeds * factor)} per group) would decide it"
    if iv.how == "examples":
        n = max(g.iv.n for g in groups if g.iv is not None)
        return f"; roughly {factor:.1f}x the eval examples (~{math.ceil(n * factor)}) would decide it"
    return ""


def _a_only(comp: Comparison, runs: list[dict], statistic: str) -> tuple[list[dict], Outcome]:
    """The `a` records of a test that reads no b side, and its outcome so far: not run without records, else not
    testable until decided."""
    recs = select(runs, comp.a)
    out = Outcome(label=comp.label, verdict="not testable here" if recs else "not run", records=recs,
                  statistic=statistic, reason="" if recs else "no records: " + _wanted(comp, recs, None))
    return recs, out


def _correlation(claim: Claim, comp: Comparison, runs: list[dict]) -> Outcome:
    recs, out = _a_only(comp, runs, f"r ({comp.x} vs {comp.y})")
    if not recs:
        return out
    if claim.needs_signal:
        out.unfit = [w for r in recs for w in [_one_run_signal(r, None).why()] if w]
        if out.unfit:
            return out
    xs, ys = [], []
    for r in recs:
        x, y = raw_value(r, comp.x), raw_value(r, comp.y)
        if x is None or y is None:
            out.reason = f"{run_name(r)} has no {comp.x if x is None else comp.y}"
            return out
        x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
        if x.shape != y.shape:
            out.reason = f"{run_name(r)}: {comp.x} and {comp.y} differ in length"
            return out
        keep = np.isfinite(x) & np.isfinite(y)
        xs.append(x[keep])
        ys.append(y[keep])
    x, y = np.concatenate(xs), np.concatenate(ys)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        out.reason = f"{comp.x if np.ptp(x) == 0 else comp.y} is the same at all {len(x)} points: no correlation"
        return out
    out.estimate = float(np.corrcoef(x, y)[0, 1])
    out.n = f"n={len(x)} points from {len(recs)} records"
    if len(x) < MIN_CORRELATION_POINTS:  # a bootstrap over so few points returns +-1 or r itself: no interval
        out.reason = f"r over {len(x)} points; a correlation needs >= {MIN_CORRELATION_POINTS}"
        return out
    rng = np.random.default_rng(BOOT_SEED)
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample that repeats one x (or y) has no correlation:
        reps = np.array([np.corrcoef(x[i], y[i])[0, 1]  # nan, dropped next (and counted) instead of a bare warning
                         for i in rng.integers(0, len(x), size=(N_BOOT, len(x)))])
    reps = reps[np.isfinite(reps)]
    if len(reps) < N_BOOT // 2:
        out.reason = f"only {len(reps)} of {N_BOOT} resamples have spread: too few distinct points"
        return out
    iv = replicate_interval(out.estimate, reps, "points")
    out.ci, out.interval = iv.ci, f"bootstrap over {len(x)} points"
    out.verdict, advice = decide(comp.test, out.estimate, out.ci)
    out.p = _p_value(comp.test, iv, None, out.verdict)
    out.parts = (1 if out.verdict in ("holds", "does not hold") else 0, 1)
    if out.verdict == "inconclusive":
        out.reason = advice
    return out


def _spread(claim: Claim, comp: Comparison, runs: list[dict]) -> Outcome:
    recs, out = _a_only(comp, runs, f"max - min over {comp.across}")
    if not recs:
        return out
    groups: dict[tuple, dict] = {}
    for r in recs:
        if claim.needs_signal and (why := _one_run_signal(r, comp.metric).why()):
            out.unfit.append(why)
            continue
        v, key = value_of(r, comp, comp.metric)
        if v is None:
            out.reason = f"{run_name(r)} has no {key}"
            return out
        g = tuple(json.dumps(field_of(r, p), default=str) for p in comp.pair_by if p != comp.across)
        groups.setdefault(g, {})[json.dumps(field_of(r, comp.across), default=str)] = float(v)
    spreads = [max(vals.values()) - min(vals.values()) for vals in groups.values() if len(vals) >= 2]
    if not spreads:
        most = max((len(v) for v in groups.values()), default=0)
        out.reason = f"needs >= 2 values of {comp.across} per group (have {most})"
        return out
    out.estimate = float(max(spreads))
    out.n = f"n={len(spreads)} groups"
    if claim.exact is None:
        out.verdict = "inconclusive"
        out.reason = ("no interval: a spread of measured values; decided only with one, or declared `exact:` when "
                      "the values are deterministic")
        return out
    out.ci, out.interval = (out.estimate, out.estimate), "exact"
    out.notes.append(f"largest spread over groups; exact: {claim.exact}")
    out.verdict = decide(comp.test, out.estimate, out.ci)[0]
    out.parts = (1, 1)
    return out


# ---------------------------------------------------------------- scales, rows, the table

def scale_key(record: dict) -> tuple[str, str]:
    """(hardware, 'offline stand-ins' | 'paper scale'): rows of different scales are never merged."""
    hw = record.get("provenance", {}).get("hardware") or field_of(record, "hardware.name")
    hw = "?" if hw is MISSING or hw is None else str(hw)
    sources = {field_of(record, p) for p in ("model.source", "task.source", "data.source")}
    offline = bool(sources & {"offline", "fixture"}) or field_of(record, "model.from_config") not in (MISSING, None)
    return hw, "offline stand-ins" if offline else "paper scale"


@dataclass
class Row:
    claim: Claim
    scale: str
    verdict: str
    reason: str
    outcomes: list[Outcome]
    evidence: list[Path]
    legacy: bool = False
    parts: tuple[int, int] = (0, 0)  # (groups decided, groups named) over all comparisons
    fragile: list[str] = field(default_factory=list)
    post_hoc: str | None = None  # why the records predate the claim's registration (None: registered first)
    holm: bool | None = None  # survives Holm across the paper's decided statistical tests (None: not such a test)


def _combine(verdicts: list[str]) -> str:
    """A row's verdict from its comparisons': all must hold, and one decided failure decides (a universal claim
    fails on any part); an open one keeps the row open; holds on some parts with others untested or not run is
    "partly tested", never "holds"."""
    if "does not hold" in verdicts:
        return "does not hold"
    if "inconclusive" in verdicts:
        return "inconclusive"
    if "holds" in verdicts:
        return "holds" if all(v == "holds" for v in verdicts) else "partly tested"
    return "not testable here" if "not testable here" in verdicts else "not run"


def _row_verdict(outcomes: list[Outcome]) -> tuple[str, str, tuple[int, int], list[str]]:
    """(verdict, reason, (parts decided, parts named), fragility) of a row: a part is a group of a comparison (a
    task, a model, an N); a comparison with no records counts as one part not run."""
    k = sum(o.parts[0] for o in outcomes)
    m = sum(max(o.parts[1], 1) for o in outcomes)
    verdict = _combine([o.verdict for o in outcomes])
    if verdict == "holds" and k < m:
        verdict = "partly tested"
    reason = ""
    if verdict in ("partly tested", "does not hold", "holds") and k < m:
        left = [f"{o.label or 'a comparison'}: {o.verdict}" for o in outcomes
                if o.verdict in ("not testable here", "not run")]
        reason = f"decided on {k} of {m} parts" + ("; " + ", ".join(left) if left else "")
    fragile = []
    for margin in sorted({m for o in outcomes for m in o.alt}):
        flipped = _combine([o.alt.get(margin, o.verdict) for o in outcomes])
        if flipped != _combine([o.verdict for o in outcomes]):
            fragile.append(f"the signal guard at {margin:g} points instead of {SIGNAL_MARGIN_POINTS:g}: {flipped}")
    return verdict, reason, (k, m), fragile


def _scale_label(registry: Registry, key: tuple[str, str], records: list[dict]) -> str:
    def named(kind: str) -> list[str]:
        out = []
        for r in records:
            name = field_of(r, f"{kind}.name")
            if name is MISSING or name is None:
                continue
            paper = registry.stand_ins.get(name) or field_of(r, f"{kind}.stand_in_for")
            out.append(f"{name} for {paper}" if paper not in (MISSING, None, "") else str(name))
        return sorted(dict.fromkeys(out))
    parts = [f"{key[0]}, {key[1]}"]
    names = named("task") + named("model")
    if names:
        parts.append(", ".join(names))
    sizes = {(r.get("n_samples") or {}).get("train_examples") for r in records} - {None}
    evals = {(r.get("n_samples") or {}).get("eval_examples") for r in records} - {None}
    if evals:
        def span(v):
            return str(min(v)) if len(v) == 1 else f"{min(v)}-{max(v)}"
        parts.append((f"{span(sizes)} train / " if sizes else "") + f"{span(evals)} eval examples")
    if any(legacy_reason(r) for r in records):
        parts.append("legacy records")
    return "; ".join(parts)


def _evidence(registry: Registry, claim: Claim, records: list[dict], results_dir: Path) -> list[Path]:
    base = Path(results_dir) / registry.paper
    cands = [base / e for e in claim.evidence]
    arts = sorted({str(r.get("exp_id") or "").split("/", 1)[-1] for r in records} - {""})
    for art in arts:
        cands += [base / "tables" / f"{art}.md", base / "tables" / f"{registry.paper}__{art}.md",
                  base / "figures" / f"{art}.png", base / "figures" / f"{registry.paper}__{art}.png"]
    found = [p for p in dict.fromkeys(cands) if p.is_file()]
    if not found:
        found = [p for p in (base / "runs" / a for a in arts) if p.is_dir()]
    return found


def evaluate_claims(paper: str, runs: list[dict], results_dir: Path | None = None,
                    registry: Registry | None = None) -> list[Row]:
    """One row per (claim, scale) from `runs` (a paper's records, e.g. experiments.results.load_runs)."""
    registry = registry or load_claims(paper)
    results_dir = Path(results_dir) if results_dir is not None else REPO / "results"
    ok = [r for r in runs if r.get("status", "ok") == "ok"]
    # a record of an older version of its method measured code that no longer exists: it decides nothing
    outdated = [r for r in ok if outdated_reason(r)]
    ok = [r for r in ok if not outdated_reason(r)]
    scales: dict[tuple, list[dict]] = {}
    for r in ok:
        scales.setdefault(scale_key(r), []).append(r)
    rows = []
    for claim in registry.claims:
        claim_rows = []
        for key in sorted(scales):
            try:
                outcomes = [evaluate_comparison(claim, c, scales[key]) for c in claim.comparisons]
            except (ClaimsError, SelectError) as e:  # e.g. two records for one pair: say so, keep the report going
                claim_rows.append(Row(claim, f"{key[0]}, {key[1]}", "not testable here", str(e), [], []))
                continue
            if not any(o.records for o in outcomes):
                continue
            recs = list({id(r): r for o in outcomes for r in o.records}.values())
            verdict, reason, parts, fragile = _row_verdict(outcomes)
            claim_rows.append(Row(claim, _scale_label(registry, key, recs), verdict, reason, outcomes,
                                  _evidence(registry, claim, recs, results_dir),
                                  legacy=any(legacy_reason(r) for r in recs), parts=parts, fragile=fragile,
                                  post_hoc=_post_hoc(claim, recs)))
        if not claim_rows:
            verdict = "not testable here" if claim.not_testable else "not run"
            reason = claim.not_testable or ("no records: " + "; ".join(_wanted(c) for c in claim.comparisons))
            old = {id(r): r for c in claim.comparisons for side in (c.a, c.b) if side for r in select(outdated, side)}
            if old and not claim.not_testable:
                reason += (f" ({len(old)} records made by an older version of the method are left out: "
                           f"{outdated_reason(next(iter(old.values())))}; rerun them)")
            claim_rows.append(Row(claim, "-", verdict, reason, [],
                                  [Path(results_dir) / registry.paper / e for e in claim.evidence
                                   if (Path(results_dir) / registry.paper / e).is_file()]))
        rows.extend(claim_rows)
    _holm(rows)
    return rows


TESTED_KINDS = ("paper", "target", "premise")  # the family Holm corrects over: tests of the method, not of our code


def _holm(rows: list[Row]) -> None:
    """Mark each row whose decided statistical comparisons all survive Holm's correction over the paper's family."""
    tests = [(r, o) for r in rows if r.claim.kind in TESTED_KINDS for o in r.outcomes
             if o.p is not None and o.verdict in ("holds", "does not hold")]
    keep = holm([o.p for _, o in tests])
    for r in rows:
        mine = [k for (row, _), k in zip(tests, keep) if row is r]
        r.holm = all(mine) if mine else None


def _post_hoc(claim: Claim, records: list[dict]) -> str | None:
    from experiments.evidence import registration
    if claim.registered is None:
        return "the claim carries no registration commit"
    return registration.post_hoc(records, claim.registered)


def _wanted(c: Comparison, a_runs: list | None = None, b_runs: list | None = None) -> str:
    """The selectors that found nothing (both when the caller does not say)."""
    def sel(s):
        return ", ".join(f"{k}={v}" for k, v in s.items())
    parts = []
    if not a_runs:
        parts.append(f"a: {sel(c.a)}")
    if c.b and not b_runs:
        parts.append(f"b: {sel(c.b)}")
    return "; ".join(parts)


def _statistic_text(c: Comparison) -> str:
    """What a comparison's estimate is, in words and units."""
    metric = c.metric or "objective"
    units = " points" if c.units == "points" else ""
    per = f" per {c.per}" if c.per else ""
    if c.statistic == "value":
        return f"{metric}{per}{units}"
    op = " / " if c.statistic == "ratio" else " − "
    b = "paper" if c.expected is not None and c.b is None else c.b_metric if c.b is None and c.b_metric else "b"
    a = metric if b not in ("b",) and c.b is None and c.b_metric else "a"
    return f"{a}{op}{b} ({metric}{per}{units})" if a == "a" else f"{a}{op}{b}{units}"


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 0.01:
        return f"{x:.2f}"
    return f"{x:.2g}"
