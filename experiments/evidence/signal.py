"""Is an arm doing its task? What a trivial predictor scores on the same eval split (the majority class, an all-O
tagger, the empty answer), and whether an arm clears it."""
from __future__ import annotations

import json
import logging
from collections import Counter

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


def majority_baseline(record: dict, key: str) -> tuple[float, str] | None:
    """(what a constant predictor scores on `key`, where that number comes from), or None when unknown."""
    split, name = (key.split("/", 1) + [""])[:2] if "/" in key else ("eval", key)
    stored = record.get("metrics", {}).get(f"{split}/majority_{name}")
    if stored is not None:
        return float(stored), "the record"
    if name in ZERO_BASELINE:
        return 0.0, ZERO_BASELINE[name]
    if name == "accuracy" and _majority_from_extra(record) is not None:
        return _majority_from_extra(record), "the record"
    if name in MAJORITY_METRICS:
        from_data = _majority_from_data(record)
        if from_data and f"majority_{name}" in from_data:
            return from_data[f"majority_{name}"], "the eval split"
    return None


def not_doing_task(record: dict, metric: str | None) -> str | None:
    """Why this arm is not doing its task (None when it is): constant predictions, or a score less than 2 points
    above the majority-class score. The score is the compared metric when it is a task metric, else the task's
    objective (an ID AUC says nothing about whether the model answers)."""
    counts = _pred_counts(record)
    name = run_name(record)
    if counts is not None and sum(1 for c in counts if c > 0) <= 1:
        return f"{name}: constant predictions"
    pe = (record.get("per_example") or {}).get("eval") or {}
    if "tp" in pe and "fp" in pe and sum(pe["tp"]) + sum(pe["fp"]) == 0:
        return f"{name}: predicts no entity at all"
    key = metric_name(record, metric)
    if short(key) not in TASK_METRICS:
        key = metric_name(record, None)
    value = raw_value(record, key)
    if value is None:
        return f"{name}: no {key} to check it against the majority class"
    base = majority_baseline(record, key)
    if base is None:
        return f"{name}: majority baseline unknown for {key}"
    margin = SIGNAL_MARGIN_POINTS * points(key)
    if float(value) < base[0] + margin:
        what = base[1] if base[1] in ZERO_BASELINE.values() else "majority class"
        return f"{name}: {short(key)} {float(value):.3f} vs {what} {base[0]:.3f}"
    return None


def run_name(record: dict) -> str:
    parts = [field_of(record, p) for p in ("task.name", "model.name", "method.variant")]
    return "/".join(str(p) for p in parts if p is not MISSING and p is not None) or record.get("run_id", "?")

