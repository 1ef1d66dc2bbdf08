"""Reading run records: a config field by dotted path, selectors (value, list, glob, operator), the metric a
comparison reads and its units. No statistics and no verdicts here."""
from __future__ import annotations

import fnmatch
import itertools
from typing import Any

import numpy as np

from experiments.evidence import selection

_OPS = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}
# task metrics: scores a constant predictor can be compared with (0-100 ones are marked)
PERCENT_METRICS = {"em", "f1"}
ZERO_BASELINE = {**dict.fromkeys(("entity_f1", "entity_precision", "entity_recall", "token_f1"), "an all-O tagger"),
                 **dict.fromkeys(("em", "f1"), "the empty answer"),
                 **dict.fromkeys(("mcc", "pearson", "spearman"), "a constant predictor")}
MAJORITY_METRICS = {"accuracy", "f1_macro", "f1_micro"}
TASK_METRICS = MAJORITY_METRICS | set(ZERO_BASELINE)


class SelectError(ValueError):
    """Records that cannot be selected as a selector asks."""


MISSING = object()


def field_of(record: dict, path: str) -> Any:
    """A dotted config field of a record (`seed`, `model.name`, `exp_id`); MISSING when absent."""
    node: Any = record.get("config", {})
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def matches(record: dict, selector: dict) -> bool:
    for path, want in selector.items():
        if path == "select":  # not a config field: how to choose among the matching records (`select`)
            continue
        have = field_of(record, path)
        have = None if have is MISSING else have
        if not _match_value(have, want):
            return False
    return True


def _match_value(have: Any, want: Any) -> bool:
    if isinstance(want, list):
        return _same_items(have, want) or any(_match_value(have, w) for w in want)
    if isinstance(want, dict):
        (op, arg), = want.items()
        if op == "not":
            return not _match_value(have, arg)
        return have is not None and not isinstance(have, (str, bool)) and bool(_OPS[op](have, arg))
    if isinstance(want, str) and isinstance(have, str) and any(ch in want for ch in "*?["):
        return fnmatch.fnmatchcase(have, want)
    if isinstance(want, bool) or isinstance(have, bool):
        return have is want
    if isinstance(want, (int, float)) and isinstance(have, (int, float)):
        return float(have) == float(want)
    return have == want


def _same_items(have: Any, want: list) -> bool:
    """A list-valued field (method.sources) against a list selector: the same items in any order, each a value or a
    glob (["*"]: any one item); otherwise a list selector means any of its values."""
    if not isinstance(have, list) or len(have) != len(want) or len(have) > 8:
        return False
    return any(all(_match_value(h, w) for h, w in zip(p, want)) for p in itertools.permutations(have))


def select(runs: list[dict], selector: dict) -> list[dict]:
    """The records a selector names, one per computation (deduplicated after selecting, so a selector on exp_id finds
    its experiment's copy of a run that another experiment also published); with `select: best_dev`, only those at
    each group's lr chosen on dev."""
    chosen = selection.dedupe([r for r in runs if matches(r, selector)])
    try:
        return selection.apply(selector.get("select"), chosen)
    except selection.SelectionError as e:
        raise SelectError(str(e)) from e


def metric_name(record: dict, metric: str | None) -> str:
    """The metrics key a comparison reads from this record (`objective`/None: the record's task objective)."""
    if metric in (None, "objective"):
        obj = field_of(record, "task.objective")
        return "eval/accuracy" if obj is MISSING or obj is None else obj
    return metric


def raw_value(record: dict, key: str) -> Any:
    """A metrics key, or extra.<path> into record["extra"] (falling back to the last eval checkpoint of a record
    that keeps checkpoints: its final evaluation); None when absent."""
    if key.startswith("extra."):
        extra = record.get("extra") or {}
        evals = [c for c in extra.get("checkpoints") or [] if isinstance(c, dict) and c.get("split") == "eval"]
        for node in (extra, evals[-1] if evals else None):
            for part in key[len("extra."):].split("."):
                if not isinstance(node, dict) or part not in node:
                    node = None
                    break
                node = node[part]
            if node is not None:
                return node
        return None
    return record.get("metrics", {}).get(key)


def short(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def points(key: str) -> float:
    """The size of one point in this metric's units (fractions: 0.01; 0-100 scores: 1)."""
    return 1.0 if short(key) in PERCENT_METRICS else 0.01


def multiplier(comp, key: str) -> float:
    m = comp.scale
    if comp.units == "points" and short(key) in TASK_METRICS and short(key) not in PERCENT_METRICS:
        m *= 100.0
    return m


def value_of(record: dict, comp, metric: str | None) -> tuple[Any, str]:
    """(value or None, the key it came from): the metric, divided by `per`, times scale/units."""
    key = metric_name(record, metric)
    v = raw_value(record, key)
    if v is None:
        return None, key
    v = np.asarray(v, dtype=float) if isinstance(v, list) else float(v)
    if comp.per:
        d = raw_value(record, comp.per)
        if d is None or float(d) == 0:
            return None, key
        v = v / float(d)
    return v * multiplier(comp, key), key

