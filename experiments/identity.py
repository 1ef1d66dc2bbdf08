"""A run's identity: where its record lives. Two runs whose configs differ never share a directory or a published
record, whatever key a sweep varies:

    outputs/runs/<exp_id>/<hardware>/<run_id>/result.json         (a single run)
    outputs/sweeps/<exp_id>/<hardware>/<run_id>/result.json       (a job of a -m sweep)
    results/<paper>/runs/<artifact>/<hardware>/<run_id>.json       (published; artifact = exp_id without "<paper>/")

run_id = the readable base `<task>--<model>--<method>-<variant>--seed<N>` plus `--key=value` for every other override
the job got (a sweep's parameters and the command line), sorted by key. Keys fixed inside an experiment file are the
same for all its jobs, and the experiment itself is in the path, so they need no place in the name. A name that could
be ambiguous (characters a file name cannot take, replaced by `_`, or a `--` inside a value) or longer than
MAX_NAME bytes ends in `~` and a hash of the exact base and overrides: `~` appears in no plain name, so two different
override sets never share a name, and the record holds the whole config anyway."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from experiments.results import BOOKKEEPING, BOOKKEEPING_NESTED

# overrides already in the base name or the path, and the bookkeeping (where/how a run is recorded, not what it computes)
NOT_IN_NAME = frozenset({"task", "model", "method", "method.name", "method.variant", "seed", "hardware", "hardware.name",
                         *BOOKKEEPING, *BOOKKEEPING_NESTED})
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+\-]")
# well under the 255-byte limit of a file name: the published file adds ".json", its temporary twin ~20 bytes more
MAX_NAME = 200
HASH_CHARS = 12


def override_key(override: str) -> str:
    """`+train.lr=1` -> `train.lr`; `~data.limit_train` -> `data.limit_train`; `budget@_global_=x` -> `budget`."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.split("@", 1)[0]


def _plain(override: str) -> str | None:
    """The override as it reads in a name when that reading is unambiguous, else None. A list `[a,b]` reads `_a,b_`
    (the form published records have), so a literal value `_..._` is not plain; nor is a deletion `~key`, a `--`
    inside (the separator) or a `-` at either end."""
    key, eq, value = override.partition("=")
    if not eq:
        return None
    if value[:1] == "[" and value[-1:] == "]":
        value = f"_{value[1:-1]}_"
    elif value[:1] == "_" and value[-1:] == "_":
        return None
    part = f"{key}={value}"
    return part if not _UNSAFE.search(part) and "--" not in part and "-" not in (part[0], part[-1]) else None


def run_name(base: str, overrides) -> str:
    """The base name plus every override that is not already part of the identity (sorted, file-name safe); a hash of
    the exact strings is appended when the readable name could be shared or is too long (module docstring)."""
    extra = sorted(o.lstrip("+") for o in overrides or () if override_key(o) not in NOT_IN_NAME)  # +k=v sets k=v
    parts = [_plain(o) for o in extra]
    name = "--".join([base, *(p or _UNSAFE.sub("_", o) for p, o in zip(parts, extra))])
    if None not in parts and not _UNSAFE.search(base) and "=" not in base and len(name.encode()) <= MAX_NAME:
        return name
    digest = hashlib.sha256(json.dumps([base, *extra]).encode()).hexdigest()[:HASH_CHARS]
    readable = _UNSAFE.sub("_", name)[:MAX_NAME - HASH_CHARS - 1]
    return f"{readable}~{digest}"


def artifact(exp_id: str, paper: str) -> str:
    """`recycling/table1_cpu` -> `table1_cpu` under results/recycling/; an ad-hoc id keeps its whole name."""
    prefix = f"{paper}/"
    return exp_id[len(prefix):] if exp_id.startswith(prefix) else exp_id.replace("/", "__")


def published_path(results_dir: str | Path, paper: str, exp_id: str, hardware: str, run_id: str) -> Path:
    return Path(results_dir) / paper / "runs" / artifact(exp_id, paper) / hardware / f"{run_id}.json"
