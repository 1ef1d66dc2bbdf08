"""The claims registry: each paper package's `claims.yaml` lists what its paper claims and which comparison of run
records decides it; this module validates those files, evaluates every claim from the records with its
uncertainty into rows (one per claim and scale) that experiments/evidence/report.py renders.

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

Claim keys beside compare: kind (paper | target | implementation | by-construction | premise: only `paper` rows say
whether the paper holds, the rest are counted apart), why (by-construction: why the row is still shown), exact (a
reason: the quantity is deterministic, so its value decides without an interval), registered (the commit that set the
definition; experiments/evidence/registration.py), needs_signal, not_testable, evidence. A comparison may name the
timing rounds behind its metric: rounds: {a: <path>, b: <path or [paths, {path, times}]>, as: value|ratio|pct|...}.

The verdicts these comparisons get from the records: experiments/evidence/verdicts.py.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from experiments import REPO
from experiments.evidence import selection
from experiments.evidence.records import _OPS
from experiments.results import load_runs

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
_CLAIM_KEYS = {"id", "kind", "why", "exact", "registered", "claim", "paper", "compare", "needs_signal",
               "not_testable", "evidence", "requires"}
_COMPARE_KEYS = {"label", "metric", "b_metric", "per", "scale", "units", "reduce", "a", "b", "expected", "pair_by",
                 "test", "x", "y", "across", "rounds"}
ROUNDS_AS = ("value", "ratio", "pct", "difference")


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
    rounds: dict | None = None  # timing rounds behind the metric: {a: path, b: path or [paths], as: value|ratio|...}

    @property
    def statistic(self) -> str:
        """What is computed per pair: difference (a - b), ratio (a / b) or value (a alone)."""
        if self.b is None and self.b_metric is None and self.expected is None:
            return "value"
        return "ratio" if self.test.kind == "ratio" or self.test.of == "ratio" else "difference"


@dataclass(frozen=True)
class Requirement:
    """A precondition on one arm's records, without which the comparison cannot see the effect at all (e.g. P-32's
    weights must have left uniform, or P-32 *is* the average it is compared with): a record failing it is left out
    and its row says `why`; when every record fails, the row is not testable."""
    side: str  # a or b
    metric: str
    why: str
    at_least: float | None = None
    at_most: float | None = None

    def fails(self, value: Any) -> bool:
        if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
            return True
        return (self.at_least is not None and value < self.at_least) or \
            (self.at_most is not None and value > self.at_most)


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
    requires: Requirement | None = None


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
    for key in ("id", "kind", "claim", "paper", "needs_signal"):
        if key not in raw:
            fail(key, "missing (every claim has id, kind, claim, paper {where, values}, compare and needs_signal)")
    if raw["kind"] not in KINDS:
        fail("kind", f"{raw['kind']!r} is not one of {', '.join(KINDS)} (paper: the paper claims it; target: ours; "
                     "implementation: an exact check of the code; by-construction: true by arithmetic; premise: a "
                     "precondition of the experiment)")
    for key in ("why", "exact", "registered"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            fail(key, f"{raw[key]!r} must be a one-line string")
    if raw["kind"] == "by-construction" and "why" not in raw:
        fail("why", "missing: a by-construction claim cannot fail short of a bug; say why the row is worth showing")
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
                 not_testable=nt.strip() if nt else None, evidence=tuple(evidence), kind=raw["kind"],
                 why=raw.get("why"), exact=raw.get("exact"), registered=raw.get("registered"),
                 requires=_parse_requires(raw.get("requires"), lambda k, m: fail(f"requires.{k}", m)))


def _parse_requires(r: Any, fail) -> Requirement | None:
    if r is None:
        return None
    form = "{side: a|b, metric: <key>, at_least and/or at_most: <number>, why: <what failing it means>}"
    if not isinstance(r, dict) or set(r) - {"side", "metric", "at_least", "at_most", "why"}:
        fail("", f"{r!r} must be {form}")
    if r.get("side") not in ("a", "b"):
        fail("side", f"{r.get('side')!r}: valid: a, b")
    for key in ("metric", "why"):
        if not isinstance(r.get(key), str) or not r[key].strip():
            fail(key, f"missing or empty; the form is {form}")
    bounds = [r.get(k) for k in ("at_least", "at_most")]
    if all(b is None for b in bounds) or any(b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)))
                                             for b in bounds):
        fail("at_least", f"at_least and/or at_most must be numbers; the form is {form}")
    return Requirement(side=r["side"], metric=r["metric"], why=r["why"].strip(), at_least=r.get("at_least"),
                       at_most=r.get("at_most"))


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
    rounds = c.get("rounds")
    if rounds is not None and (not isinstance(rounds, dict) or "a" not in rounds or set(rounds) - {"a", "b", "as"}
                               or rounds.get("as", "value") not in ROUNDS_AS):
        fail("rounds", f"{rounds!r} must be {{a: <path to a per-round list>, b: <path or list of paths, optional>, "
                       f"as: {' | '.join(ROUNDS_AS)}}}")
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
                                  x=c.get("x"), y=c.get("y"), across=c.get("across"), rounds=rounds))
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


def baseline_runs(paper: str, results_dir: Path) -> list[dict]:
    """The records of the papers a registry's `baselines_from` names (a Full baseline computed once, read by every
    paper whose arm selects it)."""
    return [r for p in load_claims(paper).baselines_from for r in load_runs(Path(results_dir), p)]
