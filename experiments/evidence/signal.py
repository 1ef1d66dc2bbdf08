"""Is an arm doing its task? What a trivial predictor scores on the same eval split (the majority class, an all-O
tagger, the empty answer), and whether an arm clears it."""
from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass

from experiments import metrics as M
from experiments.evidence.records import (MAJORITY_METRICS, MISSING, TASK_METRICS, ZERO_BASELINE, field_of,
                                          metric_name, points, raw_value, short)

log = logging.getLogger(__name__)
SIGNAL_MARGIN_POINTS = 2.0  # an arm within this many points of the majority-class score is not doing its task

_MAJORITY_CACHE: dict[str, dict[str, float] | None] = {}


def _pred_counts(record: dict) -> list[int] | None:
    """Predictions per label: per-example predictions, or intrinsic_dim's counts (top level or last eval checkpoint)."""
    pe = (record.get("per_example") or {}).get("eval") or {}
    if pe.get("pred"):
        return list(Counter(pe["pred"]).values())
    extra = record.get("extra") or {}
    if isinstance(extra.get("pred_counts"), list):
        return extra["pred_counts"]
    evals = [c for c in extra.get("checkpoints") or [] if isinstance(c, dict) and c.get("split") == "eval"]
    if evals and isinstance(evals[-1].get("pred_counts"), list):
        return evals[-1]["pred_counts"]
    return None


def _majority_from_extra(record: dict) -> float | None:
    extra = record.get("extra") or {}
    if isinstance(extra.get("majority_rate"), (int, float)):
        return float(extra["majority_rate"])
    evals = [c for c in extra.get("checkpoints") or [] if isinstance(c, dict) and c.get("split") == "eval"]
    if evals and isinstance(evals[-1].get("majority_rate"), (int, float)):
        return float(evals[-1]["majority_rate"])
    return None


def _majority_from_data(record: dict) -> dict[str, float] | None:
    """Majority baselines of the eval split the record's config names (offline assets; cached per task/limits)."""
    task, data = record.get("config", {}).get("task"), record.get("config", {}).get("data")
    if not isinstance(task, dict) or not isinstance(data, dict) or task.get("type") not in ("cls", "pair"):
        return None
    key = json.dumps([task, data], sort_keys=True, default=str)
    if key not in _MAJORITY_CACHE:
        try:
            import datasets
            from omegaconf import OmegaConf

            from experiments.data import load_splits
            datasets.disable_progress_bars()
            labels = load_splits(OmegaConf.create(task), OmegaConf.create(data))["eval"][task["label_field"]]
            _MAJORITY_CACHE[key] = M.majority_baselines(labels, sorted(MAJORITY_METRICS)) or None
        except Exception as e:  # no asset, no hub: the baseline is unknown, and the claim says so
            log.info("majority baseline of %s not computable: %s", task.get("name"), e)
            _MAJORITY_CACHE[key] = None
    return _MAJORITY_CACHE[key]


# what a stored `<split>/majority_<metric>` is, by metric: the record names the number, this names the predictor
_STORED = {**dict.fromkeys(("accuracy", "f1_macro", "f1_micro"), "majority class"),
           **dict.fromkeys(("em", "f1"), "a question-blind answerer"),
           "conll_f1": "the best constant answer"}


def majority_baseline(record: dict, key: str) -> tuple[float, str] | None:
    """(what a trivial predictor scores on `key`, its name: majority class, all-O tagger, ...), or None when
    unknown."""
    split, name = (key.split("/", 1) + [""])[:2] if "/" in key else ("eval", key)
    stored = record.get("metrics", {}).get(f"{split}/majority_{name}")
    if stored is not None:
        return float(stored), _STORED.get(name, "a constant predictor")
    if name in ZERO_BASELINE:
        return 0.0, ZERO_BASELINE[name]
    if name == "accuracy" and _majority_from_extra(record) is not None:
        return _majority_from_extra(record), "majority class"
    if name in MAJORITY_METRICS:
        from_data = _majority_from_data(record)
        if from_data and f"majority_{name}" in from_data:
            return from_data[f"majority_{name}"], "majority class"
    return None


@dataclass(frozen=True)
class Signal:
    """How far one arm's score is above its trivial baseline. `broken`: why it cannot be doing its task at any
    margin (constant predictions, no baseline); otherwise `headroom` in points above the baseline and whether its
    interval (`lo`, when the caller had one) stays above the baseline."""
    name: str
    key: str
    value: float | None = None
    baseline: float | None = None
    baseline_name: str | None = None
    headroom: float | None = None
    lo: float | None = None
    broken: str | None = None

    def why(self, margin: float = SIGNAL_MARGIN_POINTS) -> str | None:
        """Why the arm is not doing its task at this margin (None: it is)."""
        if self.broken:
            return f"{self.name}: {self.broken}"
        s = f"{self.name}: {short(self.key)} {self.value:.3f} vs {self.baseline_name} {self.baseline:.3f}"
        if self.headroom < margin:
            return s + f" (< {margin:g} points above it)"
        if self.lo is not None and self.lo <= self.baseline:
            return s + f" (its 95 % interval reaches the baseline: lower end {self.lo:.3f})"
        return None


def signal(record: dict, metric: str | None, lo: float | None = None) -> Signal:
    """The arm's score against its trivial baseline. The score is the compared metric when it is a task metric, else
    the task's objective (an ID AUC says nothing about whether the model answers). `lo`: the lower end of the arm's
    interval on that score, when the caller has one."""
    name = run_name(record)
    key = metric_name(record, metric)
    if short(key) not in TASK_METRICS:
        key = metric_name(record, None)
    counts = _pred_counts(record)
    if counts is not None and sum(1 for c in counts if c > 0) <= 1:
        return Signal(name, key, broken="constant predictions")
    pe = (record.get("per_example") or {}).get("eval") or {}
    if "tp" in pe and "fp" in pe and sum(pe["tp"]) + sum(pe["fp"]) == 0:
        return Signal(name, key, broken="predicts no entity at all")
    value = raw_value(record, key)
    if value is None:
        return Signal(name, key, broken=f"no {key} to check it against a trivial baseline")
    base = majority_baseline(record, key)
    if base is None:
        return Signal(name, key, broken=f"majority baseline unknown for {key}")
    return Signal(name, key, float(value), base[0], base[1], (float(value) - base[0]) / points(key), lo)


def not_doing_task(record: dict, metric: str | None, margin: float = SIGNAL_MARGIN_POINTS) -> str | None:
    """Why this arm is not doing its task (None when it is): constant predictions, or a score less than `margin`
    points above its trivial baseline."""
    return signal(record, metric).why(margin)


def run_name(record: dict) -> str:
    parts = [field_of(record, p) for p in ("task.name", "model.name", "method.variant")]
    return "/".join(str(p) for p in parts if p is not MISSING and p is not None) or record.get("run_id", "?")

