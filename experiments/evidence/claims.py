"""The claims registry: each paper package's `claims.yaml` lists what its paper claims and which comparison of run
records decides it; this module validates those files, evaluates every claim from the records with its
uncertainty, and renders the claims table that opens results/REPORT.md.

A claim holds one comparison or a list of them (all must hold). A comparison selects records by their resolved
config (`a`, and `b` or `expected` constants), pairs them on `pair_by`, and tests a statistic of the pairs:

    compare:
      metric: objective          # a metrics key, `objective` (each record's task.objective), or extra.<path>
      units: points              # optional: fractions (accuracy, F1) x 100, so thresholds read in points
      a: {method.variant: reduced, method.k: null}       # selectors: value, list (any of), glob, {gt|ge|lt|le|not: v}
      b: {method.variant: full}                          # or a list of selectors (one comparison each)
      #   `select: best_dev` in an arm keeps only the records at each group's lr chosen on dev (selection.py);
      #   `select: best_dev:method.trunc` the same for another field (a layer); a list field (method.sources) matches
      #   a list selector holding the same items in any order, globs allowed ([minilm-l6, "*"]: any pair with it)
      pair_by: [model.name, task.name, seed]             # `seed` is the replicate; the rest form groups
      test: {kind: difference, at_least: -1.0}

Other keys: b_metric (b reads another metric, of the same record when `b` is absent), expected (paper constants in
place of b: a number or {by: <config field>, values: {...}}), per (divide by another metric), scale, reduce (min /
mean / max of an array-valued statistic, e.g. a per-layer curve), label. Test kinds: difference | ratio (at_least /
at_most), equal_within (tolerance around target), direction (sign + or -), exact (deterministic quantities: every
pair within tolerance of target), correlation (Pearson r of two per-record arrays x, y pooled over the a records)
and spread (max - min over `across` within each group). A registry's top-level `baselines_from: [finetune]` adds
those papers' records to its own (a Full baseline computed once, read by every paper that compares with it).

Uncertainty: the estimate is the mean over groups of the mean over seeds. Each group is bootstrapped over its seeds
when it has >= 2, else over its evaluated examples when both arms carry per-example scores of the same eval set
(record["per_example"]["eval"], experiments.evaluate.Scores), paired (the same resampled examples in both arms),
else over bootstrap replicates the method kept (record["extra"]["replicates"][<metric>]). With none of these, a
comparison that pairs on seed is inconclusive (no interval); one that does not (a deterministic quantity, one
measurement) is decided by its value.
Percentile 95 % interval, fixed seed. Verdicts: holds (the whole interval on the claimed side), does not hold (the
whole interval on the other side), inconclusive (it straddles; with a rough count of the data it would take),
not testable here (no records, or an arm not doing its task: its score less than 2 points above what always
answering the majority class scores, or constant predictions). Rows are per (claim, scale); a scale is the
hardware plus offline stand-ins vs the paper's own models and data, never merged.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from experiments.evidence import selection
from experiments.evidence.records import (_OPS, MISSING, SelectError, field_of, metric_name, multiplier,
                                          raw_value, select, value_of)
from experiments.evidence.signal import SIGNAL_MARGIN_POINTS, not_doing_task, run_name
from experiments.evidence.stats import (BOOT_SEED, LEVEL, N_BOOT, bootstrap_examples, bootstrap_seeds,
                                        count_examples, per_example, percentile_ci, resampled_metric)
from experiments.results import legacy_reason, load_runs

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
VERDICTS = ("holds", "does not hold", "inconclusive", "partly tested", "not testable here", "not run")
# what a claim is: only `paper` claims say whether the paper holds; the rest are counted apart
KINDS = ("paper", "target", "implementation", "by-construction", "premise")
SEED = "seed"

TEST_KINDS = ("difference", "ratio", "equal_within", "direction", "exact", "correlation", "spread")
_TEST_KEYS = {
    "difference": {"at_least", "at_most"},
    "ratio": {"at_least", "at_most"},
    "equal_within": {"tolerance", "target", "of"},
    "direction": {"sign", "of"},
    "exact": {"tolerance", "target", "of"},
    "correlation": {"at_least", "at_most"},
    "spread": {"at_least", "at_most"},
}
_CLAIM_KEYS = {"id", "claim", "paper", "compare", "needs_signal", "not_testable", "evidence"}
_COMPARE_KEYS = {"label", "metric", "b_metric", "per", "scale", "units", "reduce", "a", "b", "expected", "pair_by",
                 "test", "x", "y", "across"}


class ClaimsError(ValueError):
    """A claims.yaml that cannot be used as written, or records that cannot be paired as it asks."""


# ---------------------------------------------------------------- the registry file

@dataclass(frozen=True)
class Test:
    kind: str
    at_least: float | None = None
    at_most: float | None = None
    target: float = 0.0
    tolerance: float | None = None
    sign: str | None = None
    of: str = "difference"

    def bounds(self) -> tuple[float | None, float | None]:
        """The claimed side as an interval [lo, hi] of the statistic (None: unbounded)."""
        if self.kind in ("equal_within", "exact"):
            return self.target - self.tolerance, self.target + self.tolerance
        return self.at_least, self.at_most


@dataclass(frozen=True)
class Comparison:
    label: str
    metric: str | None
    test: Test
    a: dict
    b: dict | None = None
    b_metric: str | None = None
    expected: Any = None
    pair_by: tuple[str, ...] = ()
    per: str | None = None
    scale: float = 1.0
    units: str | None = None
    reduce: str | None = None
    x: str | None = None
    y: str | None = None
    across: str | None = None

    @property
    def statistic(self) -> str:
        """What is computed per pair: difference (a - b), ratio (a / b) or value (a alone)."""
        if self.b is None and self.b_metric is None and self.expected is None:
            return "value"
        return "ratio" if self.test.kind == "ratio" or self.test.of == "ratio" else "difference"


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    where: str
    values: Any
    comparisons: tuple[Comparison, ...]
    needs_signal: bool
    not_testable: str | None = None
    evidence: tuple[str, ...] = ()
    kind: str = "paper"
    why: str | None = None  # by-construction claims: why the row is still worth showing
    exact: str | None = None  # deterministic quantities: decided on the value, no interval (the reason why)
    registered: str | None = None  # the commit at which this definition (compare, exact, needs_signal) was set


@dataclass(frozen=True)
class Registry:
    paper: str
    path: Path
    claims: tuple[Claim, ...]
    stand_ins: dict = field(default_factory=dict)
    baselines_from: tuple[str, ...] = ()  # other papers whose records an arm may take (finetune: the Full baseline)


def claims_path(paper: str) -> Path:
    return REPO / paper / "claims.yaml"


def load_claims(source: str | Path) -> Registry:
    """A paper's registry (`source`: a paper name or a claims.yaml path), validated; ClaimsError names the file,
    the claim and the key at fault."""
    path = Path(source) if str(source).endswith((".yaml", ".yml")) else claims_path(str(source))
    if not path.exists():
        raise ClaimsError(f"{path}: no claims file; every paper package has one (see experiments/evidence/claims.py)")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ClaimsError(f"{path}: not valid YAML: {e}") from e
    return parse_claims(doc, path)


def parse_claims(doc: Any, path: Path | str = "<claims>") -> Registry:
    def fail(where: str, msg: str):
        raise ClaimsError(f"{path}: {where}: {msg}")

    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list):
        fail("top level", "expected a mapping with `paper: <name>` and `claims: [...]`")
    unknown = set(doc) - {"paper", "claims", "stand_ins", "baselines_from"}
    if unknown:
        fail("top level", f"unknown key(s) {sorted(unknown)}; valid: paper, claims, stand_ins, baselines_from")
    baselines = doc.get("baselines_from") or []
    if not isinstance(baselines, list) or not all(isinstance(b, str) for b in baselines):
        fail("top level", "key 'baselines_from' must list papers whose records the claims may read (e.g. [finetune])")
    if not isinstance(doc.get("paper"), str):
        fail("top level", "key 'paper' must name the paper package (e.g. paper: recycling)")
    stand_ins = doc.get("stand_ins") or {}
    if not isinstance(stand_ins, dict):
        fail("top level", "key 'stand_ins' must map our model/task names to the paper's (e.g. rt-polarity: SST-2)")
    claims, seen = [], set()
    for i, raw in enumerate(doc["claims"]):
        cid = raw.get("id") if isinstance(raw, dict) else None
        where = f"claim {cid!r}" if cid else f"claims[{i}]"
        if not isinstance(raw, dict):
            fail(where, "each claim must be a mapping")
        claims.append(_parse_claim(raw, lambda k, m, w=where: fail(f"{w}: key {k!r}", m)))
        if claims[-1].id in seen:
            fail(where, f"key 'id': duplicate id {cid!r}; ids must be unique within a paper")
        seen.add(claims[-1].id)
    return Registry(paper=doc["paper"], path=Path(path), claims=tuple(claims), stand_ins=dict(stand_ins),
                    baselines_from=tuple(baselines))


def _parse_claim(raw: dict, fail) -> Claim:
    unknown = set(raw) - _CLAIM_KEYS
    if unknown:
        fail(sorted(unknown)[0], f"unknown key; valid: {', '.join(sorted(_CLAIM_KEYS))}")
    for key in ("id", "claim", "paper", "needs_signal"):
        if key not in raw:
            fail(key, "missing (every claim has id, claim, paper {where, values}, compare and needs_signal)")
    if not isinstance(raw["id"], str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", raw["id"]):
        fail("id", f"{raw['id']!r} must be a lower-case slug (letters, digits, '-'), stable for links")
    if not isinstance(raw["claim"], str) or not raw["claim"].strip():
        fail("claim", "must be one sentence saying what the paper claims")
    paper = raw["paper"]
    if not isinstance(paper, dict) or not isinstance(paper.get("where"), str):
        fail("paper", "must be a mapping with `where` (table/figure/section) and optional `values`")
    if set(paper) - {"where", "values"}:
        fail("paper", f"unknown key(s) {sorted(set(paper) - {'where', 'values'})}; valid: where, values")
    if not isinstance(raw["needs_signal"], bool):
        fail("needs_signal", f"{raw['needs_signal']!r} must be true or false")
    nt = raw.get("not_testable")
    if nt is not None and (not isinstance(nt, str) or not nt.strip()):
        fail("not_testable", "must be one line saying what was tried and why no offline run can decide it")
    compare = raw.get("compare")
    if compare is None and nt is None:
        fail("compare", "missing; a claim without a comparison must say why in `not_testable`")
    comparisons: list[Comparison] = []
    for j, c in enumerate([] if compare is None else compare if isinstance(compare, list) else [compare]):
        comparisons.extend(_parse_compare(c, lambda k, m, j=j: fail(f"compare[{j}].{k}", m)))
    evidence = raw.get("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        fail("evidence", "must be a list of paths under results/<paper>/ (e.g. tables/table1_standard.md)")
    return Claim(id=raw["id"], claim=raw["claim"].strip(), where=paper["where"], values=paper.get("values"),
                 comparisons=tuple(comparisons), needs_signal=raw["needs_signal"],
                 not_testable=nt.strip() if nt else None, evidence=tuple(evidence))


def _parse_compare(c: Any, fail) -> list[Comparison]:
    if not isinstance(c, dict):
        fail("", "each comparison must be a mapping (metric, a, b, pair_by, test)")
    unknown = set(c) - _COMPARE_KEYS
    if unknown:
        fail(sorted(unknown)[0], f"unknown key; valid: {', '.join(sorted(_COMPARE_KEYS))}")
    test = _parse_test(c.get("test"), lambda k, m: fail(f"test.{k}", m))
    if "a" not in c:
        fail("a", "missing: the selector of the records the claim is about, e.g. {method.variant: reduced}")
    a_list = _selectors(c["a"], lambda m: fail("a", m))
    b_list = _selectors(c["b"], lambda m: fail("b", m)) if c.get("b") is not None else [None]
    a_names, b_names = _distinct(a_list), _distinct(b_list) if c.get("b") is not None else [""]
    pair_by = c.get("pair_by", [])
    if not isinstance(pair_by, list) or not all(isinstance(p, str) for p in pair_by):
        fail("pair_by", f"{pair_by!r} must be a list of config fields, e.g. [model.name, task.name, seed]")
    if test.kind in ("correlation", "spread"):
        if c.get("b") is not None or c.get("expected") is not None:
            fail("b", f"a {test.kind} test reads the `a` records only")
    if test.kind == "correlation" and not (isinstance(c.get("x"), str) and isinstance(c.get("y"), str)):
        fail("x", "a correlation test needs `x` and `y`: paths of per-record arrays (e.g. extra.curves.twonn)")
    if test.kind == "spread" and not isinstance(c.get("across"), str):
        fail("across", "a spread test needs `across`: the config field whose values are spread (e.g. task.name)")
    if test.kind not in ("correlation",) and c.get("metric") is not None and not isinstance(c["metric"], str):
        fail("metric", f"{c['metric']!r} must be a metrics key, 'objective', or extra.<path>")
    if c.get("units") not in (None, "points"):
        fail("units", f"{c['units']!r}: the only unit is 'points' (fractions x 100)")
    if c.get("reduce") not in (None, "min", "mean", "max"):
        fail("reduce", f"{c['reduce']!r}: valid: min, mean, max (how an array-valued statistic becomes one number)")
    scale = c.get("scale", 1.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        fail("scale", f"{scale!r} must be a number")
    expected = c.get("expected")
    if expected is not None and not isinstance(expected, (int, float)) and not (
            isinstance(expected, dict) and set(expected) == {"by", "values"} and isinstance(expected["values"], dict)):
        fail("expected", "must be a number or {by: <config field>, values: {<value of that field>: number}}")
    if test.of == "ratio" and c.get("b") is None and expected is None and c.get("b_metric") is None:
        fail("test.of", "a ratio needs a `b` side (b, b_metric or expected)")
    out = []
    for a, a_name in zip(a_list, a_names):
        for b, b_name in zip(b_list, b_names):
            label = c.get("label") or " vs ".join(x for x in (a_name, b_name and f"{b_name}") if x)
            out.append(Comparison(label=label, metric=c.get("metric"), test=test, a=a, b=b,
                                  b_metric=c.get("b_metric"), expected=expected, pair_by=tuple(pair_by),
                                  per=c.get("per"), scale=float(scale), units=c.get("units"), reduce=c.get("reduce"),
                                  x=c.get("x"), y=c.get("y"), across=c.get("across")))
    return out


def _parse_test(t: Any, fail) -> Test:
    if not isinstance(t, dict) or "kind" not in t:
        fail("kind", f"missing; valid kinds: {', '.join(TEST_KINDS)}")
    kind = t["kind"]
    if kind not in TEST_KINDS:
        fail("kind", f"{kind!r} is not one of {', '.join(TEST_KINDS)}")
    unknown = set(t) - _TEST_KEYS[kind] - {"kind"}
    if unknown:
        fail(sorted(unknown)[0], f"not a key of a {kind} test; valid: {', '.join(sorted(_TEST_KEYS[kind]))}")
    for k in ("at_least", "at_most", "target", "tolerance"):
        if k in t and (not isinstance(t[k], (int, float)) or isinstance(t[k], bool)):
            fail(k, f"{t[k]!r} must be a number")
    if kind in ("difference", "ratio", "correlation", "spread") and "at_least" not in t and "at_most" not in t:
        fail("at_least", f"a {kind} test needs at_least and/or at_most (the claimed side)")
    if kind == "equal_within" and "tolerance" not in t:
        fail("tolerance", "an equal_within test needs a tolerance (|statistic - target| <= tolerance)")
    if kind == "direction" and t.get("sign") not in ("+", "-"):
        fail("sign", f"{t.get('sign')!r}: a direction test needs sign '+' (a > b) or '-' (a < b)")
    if t.get("of", "difference") not in ("difference", "ratio"):
        fail("of", f"{t['of']!r}: valid: difference, ratio")
    of = t.get("of", "ratio" if kind == "ratio" else "difference")
    target = t.get("target", 1.0 if of == "ratio" else 0.0)
    tol = t.get("tolerance", 1e-9 if kind == "exact" else None)
    return Test(kind=kind, at_least=t.get("at_least"), at_most=t.get("at_most"), target=float(target),
                tolerance=None if tol is None else float(tol), sign=t.get("sign"), of=of)


def _selectors(v: Any, fail) -> list[dict]:
    items = v if isinstance(v, list) else [v]
    for s in items:
        if not isinstance(s, dict) or not s:
            fail(f"{s!r} must be a non-empty mapping of config field -> value, e.g. {{method.variant: reduced}}")
        if "select" in s and not selection.valid(s["select"]):
            fail(f"select: {s['select']!r} is not a selection; valid: {', '.join(selection.SELECTIONS)}")
        for key, want in s.items():
            if isinstance(want, dict) and (len(want) != 1 or next(iter(want)) not in (*_OPS, "not")):
                fail(f"{key}: {want!r}: an operator selector has one key among {', '.join([*_OPS, 'not'])}")
    return list(items)


def _distinct(selectors: list[dict]) -> list[str]:
    """A name per selector from the fields whose values differ among them ('' for a single selector)."""
    if len(selectors) < 2:
        return [""] * len(selectors)
    keys = [k for k in dict.fromkeys(k for s in selectors for k in s)
            if len({json.dumps(s.get(k), default=str) for s in selectors}) > 1]
    return [", ".join(str(s.get(k)) for k in keys) for s in selectors]


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


def _pair(comp: Comparison, claim_id: str, a_runs: list[dict], b_runs: list[dict] | None) -> list[tuple]:
    """(key, a record, b record or None) for every pair_by key both sides have; a key twice on one side is an
    error naming the records (add a selector or a pair_by field so each key is one run)."""
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
        return [(k, r, None) for k, r in sorted(a.items())]
    b = keyed(b_runs, "b")
    return [(k, a[k], b[k]) for k in sorted(a.keys() & b.keys())]


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


def evaluate_comparison(claim: Claim, comp: Comparison, runs: list[dict]) -> Outcome:
    if comp.test.kind == "correlation":
        return _correlation(claim, comp, runs)
    if comp.test.kind == "spread":
        return _spread(claim, comp, runs)
    a_runs = select(runs, comp.a)
    b_runs = select(runs, comp.b) if comp.b is not None else (a_runs if comp.b_metric else None)
    if comp.expected is not None and comp.b is None:
        a_runs = [r for r in a_runs if _expected(comp, r) is not None]
    out = Outcome(label=comp.label, verdict="not testable here", records=a_runs + (b_runs or []))
    if not a_runs or (b_runs is not None and not b_runs):
        out.records = []
        return out
    pairs = _pair(comp, claim.id, a_runs, None if comp.b_metric and comp.b is None else b_runs)
    if comp.b_metric and comp.b is None:
        pairs = [(k, r, r) for k, r, _ in pairs]
    if not pairs:
        out.reason = f"no a/b pairs share {list(comp.pair_by)}"
        return out
    out.records = list({id(r): r for _, ra, rb in pairs for r in (ra, rb) if r is not None}.values())
    seed_i = comp.pair_by.index(SEED) if SEED in comp.pair_by else None
    groups: dict[tuple, list] = {}
    for k, ra, rb in pairs:
        groups.setdefault(tuple(x for i, x in enumerate(k) if i != seed_i), []).append((ra, rb))
    kept: dict[tuple, list] = {}
    if claim.needs_signal:
        for g, members in groups.items():
            why = [w for ra, rb in members for r in (ra, rb) if r is not None
                   for w in [not_doing_task(r, comp.metric)] if w]
            out.unfit.extend(w for w in why if w not in out.unfit)
            if not why:
                kept[g] = members
        # with every group out the estimate is still shown, for orientation, under a "not testable" verdict
        groups = kept or groups
    rng = np.random.default_rng(BOOT_SEED)
    means, reps_by_group, within_var, how = [], [], [], set()
    per_pair: list[float] = []
    n_seeds, n_examples, a_values = [], [], []
    for g in sorted(groups):
        stats = []
        for ra, rb in groups[g]:
            va, key = value_of(ra, comp, comp.metric)
            if comp.statistic == "value":
                vb = None
            elif comp.b_metric is not None or comp.b is not None:
                vb, _ = value_of(rb, comp, comp.b_metric or comp.metric)
            else:
                vb = _expected(comp, ra)
            if va is None or (comp.statistic != "value" and vb is None):
                missing = key if va is None else (comp.b_metric or metric_name(rb, comp.metric))
                out.reason = f"{run_name(ra if va is None else rb)} has no {missing}"
                return out
            if np.ndim(va) == 0:
                a_values.append(float(va))
            s = _stat(comp, va, vb)
            if s is None:
                out.reason = f"{run_name(ra)}: {key} has no finite values"
                return out
            stats.append(s)
        stats_arr = np.asarray(stats)
        per_pair.extend(stats)
        means.append(stats_arr.mean())
        if len(stats) >= 2:
            reps_by_group.append(bootstrap_seeds(stats_arr, rng))
            within_var.append(stats_arr.var(ddof=1))
            how.add("seeds")
            n_seeds.append(len(stats))
            continue
        ra, rb = groups[g][0]
        reps = _example_reps(comp, ra, rb, rng)
        if reps is not None and reps[2] == "replicates":
            reps_by_group.append(rng.choice(reps[0], N_BOOT) if len(reps[0]) != N_BOOT else reps[0])
            how.add("replicates")
        elif reps is not None:
            reps_by_group.append(reps[0])
            how.add("examples")
            n_examples.append(reps[1])
        else:
            reps_by_group.append(None)
            how.add("single")
    out.estimate = float(np.mean(means))
    out.sd = float(np.sqrt(np.mean(within_var))) if within_var else None
    unfit_all = bool(out.unfit) and not kept
    if isinstance(comp.expected, (int, float)) and a_values:
        out.shown = f"{_fmt(float(np.mean(a_values)))} vs paper {_fmt(float(comp.expected))}: Δ {_fmt(out.estimate)}"
    out.n = _describe_n(len(groups), n_seeds, n_examples, how)
    if comp.test.kind == "exact":
        worst = max(abs(s - comp.test.target) for s in per_pair)
        out.ci = None
        out.verdict = "holds" if worst <= comp.test.tolerance else "does not hold"
        if out.verdict == "does not hold":
            out.reason = (f"largest |{comp.statistic} - {_fmt(comp.test.target)}| = {_fmt(worst)} > "
                          f"{comp.test.tolerance:g}")
        return _unfit(out) if unfit_all else out
    if all(r is None for r in reps_by_group):
        if seed_i is not None:
            out.verdict = "inconclusive"
            out.reason = ("one run per arm and no per-example scores: no interval; needs >= 2 seeds or records that "
                          "keep per-example scores")
            return _unfit(out) if unfit_all else out
        out.ci = (out.estimate, out.estimate)  # a deterministic quantity or one measurement: the point decides
        out.notes.append("one measurement, no interval")
    else:
        total = np.mean([r if r is not None else np.full(N_BOOT, m) for r, m in zip(reps_by_group, means)], axis=0)
        out.ci = percentile_ci(total)
    out.verdict, advice = decide(comp.test, out.estimate, out.ci)
    if out.verdict == "inconclusive":
        out.reason = advice + _more_data(how, n_seeds, n_examples, out.estimate, out.ci, comp.test)
    return _unfit(out) if unfit_all else out


def _unfit(out: Outcome) -> Outcome:
    """Every group had an arm not doing its task: the numbers stay for orientation, the verdict does not."""
    out.verdict, out.reason, out.notes = "not testable here", "", []
    return out


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


def _describe_n(groups: int, n_seeds: list[int], n_examples: list[int], how: set[str]) -> str:
    parts = []
    if n_seeds:
        parts.append(f"{min(n_seeds)}" + (f"-{max(n_seeds)}" if max(n_seeds) != min(n_seeds) else "") + " seeds")
    if n_examples:
        parts.append(f"1 seed x {min(n_examples)}" + (f"-{max(n_examples)}" if max(n_examples) != min(n_examples)
                                                         else "") + " examples")
    if "replicates" in how:
        parts.append("1 seed, the run's bootstrap replicates")
    if "single" in how:
        parts.append("1 run")
    return f"n={' / '.join(parts)}" + (f", {groups} groups" if groups > 1 else "")


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


def _more_data(how: set[str], n_seeds: list[int], n_examples: list[int], est: float, ci: tuple[float, float],
               test: Test) -> str:
    """Roughly how much more data would shrink the interval past the nearest crossed threshold (width ~ 1/sqrt n)."""
    lo, hi = ci
    bounds = [test.target] if test.kind == "direction" else [b for b in test.bounds() if b is not None]
    crossed = [b for b in bounds if lo < b < hi] or bounds
    b = min(crossed, key=lambda b: abs(est - b))
    margin = abs(est - b)
    half = (hi - est) if b >= est else (est - lo)  # the interval's reach toward the threshold (it can be skewed)
    if margin < 1e-12 * max(1.0, abs(est)):
        return "; the estimate sits on the threshold, so more data alone will not decide it"
    factor = max(1.0, (half / margin) ** 2)
    if "seeds" in how:
        return f"; roughly {factor:.1f}x the seeds (~{math.ceil(max(n_seeds) * factor)} per group) would decide it"
    if "examples" in how:
        return f"; roughly {factor:.1f}x the eval examples (~{math.ceil(max(n_examples) * factor)}) would decide it"
    return ""


def _correlation(claim: Claim, comp: Comparison, runs: list[dict]) -> Outcome:
    recs = select(runs, comp.a)
    out = Outcome(label=comp.label, verdict="not testable here", records=recs)
    if not recs:
        return out
    if claim.needs_signal:
        out.unfit = [w for r in recs for w in [not_doing_task(r, None)] if w]
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
    if len(x) < 3:
        out.reason = f"{len(x)} finite points; a correlation needs >= 3"
        return out
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        out.reason = f"{comp.x if np.ptp(x) == 0 else comp.y} is the same at all {len(x)} points: no correlation"
        return out
    out.estimate = float(np.corrcoef(x, y)[0, 1])
    rng = np.random.default_rng(BOOT_SEED)
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample that repeats one x (or y) has no correlation:
        reps = np.array([np.corrcoef(x[i], y[i])[0, 1]  # nan, dropped next (and counted) instead of a bare warning
                         for i in rng.integers(0, len(x), size=(N_BOOT, len(x)))])
    reps = reps[np.isfinite(reps)]
    if len(reps) < N_BOOT // 2:
        out.reason = f"only {len(reps)} of {N_BOOT} resamples have spread: too few distinct points"
        return out
    out.ci = percentile_ci(reps)
    out.n = f"n={len(x)} points from {len(recs)} records"
    out.verdict, advice = decide(comp.test, out.estimate, out.ci)
    if out.verdict == "inconclusive":
        out.reason = advice
    return out


def _spread(claim: Claim, comp: Comparison, runs: list[dict]) -> Outcome:
    recs = select(runs, comp.a)
    out = Outcome(label=comp.label, verdict="not testable here", records=recs)
    if not recs:
        return out
    groups: dict[tuple, dict] = {}
    for r in recs:
        if claim.needs_signal and (why := not_doing_task(r, comp.metric)):
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
    out.ci = (out.estimate, out.estimate)
    out.n = f"n={len(spreads)} groups"
    out.notes.append("largest spread over groups; deterministic, no interval")
    out.verdict = decide(comp.test, out.estimate, out.ci)[0]
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


def _combine(outcomes: list[Outcome]) -> str:
    """All comparisons must hold; one that does not hold decides; otherwise any open one keeps it open. A comparison
    that cannot be tested here (an arm not doing its task) is left out when others were decided: the row then rests
    on those, and `_partly` names what it leaves out."""
    verdicts = [o.verdict for o in outcomes if o.verdict != "not testable here"] or ["not testable here"]
    if "does not hold" in verdicts:
        return "does not hold"
    if all(v == "holds" for v in verdicts):
        return "holds"
    return "inconclusive" if "inconclusive" in verdicts else "not testable here"


def _partly(outcomes: list[Outcome]) -> str:
    """The row's note when only some of its comparisons could be decided."""
    left = [o.label or "a comparison" for o in outcomes if o.verdict == "not testable here"]
    if not left or len(left) == len(outcomes):
        return ""
    return f"partly tested: decided on {len(outcomes) - len(left)} of {len(outcomes)} comparisons; not testable: " + \
        ", ".join(left)


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
    scales: dict[tuple, list[dict]] = {}
    for r in ok:
        scales.setdefault(scale_key(r), []).append(r)
    rows = []
    for claim in registry.claims:
        claim_rows = []
        for key in sorted(scales):
            try:
                outcomes = [o for o in (evaluate_comparison(claim, c, scales[key]) for c in claim.comparisons)
                            if o.records]
            except (ClaimsError, SelectError) as e:  # e.g. two records for one pair: say so in the row, keep the report going
                claim_rows.append(Row(claim, f"{key[0]}, {key[1]}", "not testable here", str(e), [], []))
                continue
            if not outcomes:
                continue
            recs = list({id(r): r for o in outcomes for r in o.records}.values())
            claim_rows.append(Row(claim, _scale_label(registry, key, recs), _combine(outcomes), _partly(outcomes),
                                  outcomes,
                                  _evidence(registry, claim, recs, results_dir),
                                  legacy=any(legacy_reason(r) for r in recs)))
        if not claim_rows:
            reason = claim.not_testable or ("no records: " + "; ".join(_wanted(c) for c in claim.comparisons))
            claim_rows.append(Row(claim, "-", "not testable here", reason, [],
                                  [Path(results_dir) / registry.paper / e for e in claim.evidence
                                   if (Path(results_dir) / registry.paper / e).is_file()]))
        rows.extend(claim_rows)
    return rows


def _wanted(c: Comparison) -> str:
    def sel(s):
        return ", ".join(f"{k}={v}" for k, v in s.items())
    return f"a: {sel(c.a)}" + (f"; b: {sel(c.b)}" if c.b else "")


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


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _values_text(values: Any, limit: int = 110) -> str:
    flat: list[str] = []

    def walk(v, prefix):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{prefix} {k}".strip())
        elif isinstance(v, list):
            flat.append(f"{prefix} " + "/".join(str(x) for x in v))
        else:
            flat.append(f"{prefix} {v}".strip())
    if values is not None:
        walk(values, "")
    text = ", ".join(flat)
    return text if len(text) <= limit else text[:limit - 1].rstrip(", ") + "…"


def _ours(o: Outcome) -> str:
    if o.estimate is None:
        return f"{o.label}: -" if o.label else "-"
    s = (o.shown or _fmt(o.estimate)) + (f" ± {_fmt(o.sd)}" if o.sd is not None else "")
    if o.ci is not None and o.ci[0] != o.ci[1]:
        s += f" [{_fmt(o.ci[0])}, {_fmt(o.ci[1])}]"
    s += f" ({o.n})" if o.n else ""
    return f"{o.label}: {s}" if o.label else s


def _verdict_text(row: Row) -> str:
    bits = []
    unfit = list(dict.fromkeys(w for o in row.outcomes for w in o.unfit))
    if unfit:
        lead = ("an arm is not doing its task" if row.verdict == "not testable here"
                else "left out, an arm not doing its task")
        bits.append(f"{lead} (< {SIGNAL_MARGIN_POINTS:g} points above the baseline, or constant): " + "; ".join(unfit))
    for o in row.outcomes:
        why = "; ".join([o.reason] * bool(o.reason) + o.notes)
        if why and (len(row.outcomes) == 1 or o.verdict != "holds" or o.notes):
            bits.append(f"{o.label + ': ' if o.label and len(row.outcomes) > 1 else ''}{why}")
    if row.reason:
        bits.insert(0, row.reason)
    text = f"**{row.verdict}**"
    return text + (": " + " · ".join(bits) if bits else "")


def claims_table(rows: list[Row], link_root: Path) -> list[str]:
    counts = Counter(r.verdict for r in rows)
    out = [" · ".join(f"{v}: {counts.get(v, 0)}" for v in VERDICTS) + f" (rows: {len(rows)}, one per claim and scale)",
           "",
           "| claim | paper | ours (± CI, n) | scale and stand-ins | verdict | evidence |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        paper = r.claim.where + (f": {_values_text(r.claim.values)}" if r.claim.values is not None else "")
        ours = "; ".join(_ours(o) for o in r.outcomes) or "-"
        links = ", ".join(f"[{p.name}]({Path(os.path.relpath(p, link_root)).as_posix()})" for p in r.evidence) or "-"
        out.append("| " + " | ".join(_cell(c) for c in (f"**{r.claim.id}**: {r.claim.claim}", paper, ours, r.scale,
                                                          _verdict_text(r), links)) + " |")
    return out


def baseline_runs(paper: str, results_dir: Path) -> list[dict]:
    """The records of the papers a registry's `baselines_from` names (a Full baseline computed once, read by every
    paper whose arm selects it)."""
    return [r for p in load_claims(paper).baselines_from for r in load_runs(Path(results_dir), p)]


def claims_section(paper: str, runs: list[dict], results_dir: Path | None = None,
                   link_root: Path | None = None) -> list[str]:
    """Markdown lines: counts per verdict, then one table row per (claim, scale). Links are relative to
    `link_root` (default results_dir, where REPORT.md lives)."""
    results_dir = Path(results_dir) if results_dir is not None else REPO / "results"
    link_root = Path(link_root) if link_root is not None else results_dir
    rows = evaluate_claims(paper, runs + baseline_runs(paper, results_dir), results_dir)
    registry_link = Path(os.path.relpath(claims_path(paper), link_root)).as_posix()
    return [f"### {paper}: claims", "",
            *claims_table(rows, link_root), "",
            f"ours = estimate ± sd over seeds [{LEVEL:.0%} paired bootstrap CI over seeds, or over examples when one "
            f"seed keeps per-example scores; {N_BOOT} resamples, seed {BOOT_SEED}]; an arm less than "
            f"{SIGNAL_MARGIN_POINTS:g} points above the majority class, or predicting a constant, makes its claim "
            f"not testable. Claims: [{paper}/claims.yaml]({registry_link}).", ""]


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Print each paper's claims table from its run records.")
    p.add_argument("papers", nargs="*", default=["recycling", "pema", "intrinsic_dim"])
    p.add_argument("--results-dir", default=str(REPO / "results"))
    args = p.parse_args(argv)
    for paper in args.papers:
        print("\n".join(claims_section(paper, load_runs(Path(args.results_dir), paper), Path(args.results_dir))))


if __name__ == "__main__":
    main()

