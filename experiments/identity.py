"""A run's identity: where its record lives. Two runs whose configs differ never share a directory or a published
record, whatever key a sweep varies:

    outputs/runs/<exp_id>/<hardware>/<run_id>/result.json         (a single run)
    outputs/sweeps/<exp_id>/<hardware>/<run_id>/result.json       (a job of a -m sweep)
    results/<paper>/runs/<artifact>/<hardware>/<run_id>.json       (published; artifact = exp_id without "<paper>/")

run_id = the readable base `<task>--<model>--<method>-<variant>--seed<N>` plus `--key=value` for every other override
the job got (a sweep's parameters and the command line), sorted by key. Keys fixed inside an experiment file are the
same for all its jobs, and the experiment itself is in the path, so they need no place in the name."""
from __future__ import annotations

import re
from pathlib import Path

# overrides already in the base name or the path, or that change where/how a run is recorded, not what it computes
NOT_IN_NAME = frozenset({
    "task", "model", "method", "method.name", "method.variant", "seed", "hardware", "hardware.name", "experiment",
    "debug", "exp_id", "paper", "publish", "force", "on_error", "allow_dirty", "results_dir", "logger", "store.dir",
    "run_id"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+\-]")


def override_key(override: str) -> str:
    """`+train.lr=1` -> `train.lr`; `~data.limit_train` -> `data.limit_train`; `budget@_global_=x` -> `budget`."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.split("@", 1)[0]


def run_name(base: str, overrides) -> str:
    """The base name plus every override that is not already part of the identity (sorted, file-name safe)."""
    extra = sorted(o.lstrip("+~") for o in overrides or () if override_key(o) not in NOT_IN_NAME)
    return "--".join([base, *(_UNSAFE.sub("_", o) for o in extra)])


def artifact(exp_id: str, paper: str) -> str:
    """`recycling/table1_cpu` -> `table1_cpu` under results/recycling/; an ad-hoc id keeps its whole name."""
    prefix = f"{paper}/"
    return exp_id[len(prefix):] if exp_id.startswith(prefix) else exp_id.replace("/", "__")


def published_path(results_dir: str | Path, paper: str, exp_id: str, hardware: str, run_id: str) -> Path:
    return Path(results_dir) / paper / "runs" / artifact(exp_id, paper) / hardware / f"{run_id}.json"
