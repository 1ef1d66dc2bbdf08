"""The run record: one self-describing result.json per run (metrics, resolved config, its hash, provenance,
status), written atomically so a killed run never leaves a half-written result."""
from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from experiments import REPO, assets
from experiments.files import config_key

log = logging.getLogger(__name__)
# 2: provenance (overrides, asset manifests, tokenizer fingerprint, method version, clean-tree flag); 1: legacy
SCHEMA_VERSION = 2
# a record's bookkeeping: where or how a run is recorded, not what it computes. Declared once: the config hash, the
# run's name (experiments.identity) and the report's groups (experiments.evidence) all leave these out
BOOKKEEPING = ("publish", "force", "on_error", "logger", "exp_id", "results_dir", "paper", "experiment", "debug",
               "allow_dirty", "run_id")
BOOKKEEPING_NESTED = ("store.dir",)  # the same content wherever the store lives
NOT_HASHED = BOOKKEEPING
NOT_HASHED_NESTED = tuple(tuple(k.split(".")) for k in BOOKKEEPING_NESTED)
NOT_GROUPED = frozenset({"seed", *BOOKKEEPING, *BOOKKEEPING_NESTED})  # the replicate and the bookkeeping
# keys added to the schema after records were made: null in a config now means what their absence meant then, so
# leaving them out of the hash while null keeps every earlier record's hash (a record pinning one hashes it)
NULL_AS_ABSENT = (("model", "local_dir"), ("model", "revision"), ("task", "hf", "revision"),
                  ("task", "hf", "data_dir"), ("task", "hf", "data_files"), ("task", "hf", "builder"),
                  ("method", "extract_token_budget"), ("method", "sft_precision"),
                  ("method", "sft_gradient_checkpointing"))


def config_hash(config: dict) -> str:
    semantic = {k: v for k, v in config.items() if k not in NOT_HASHED}
    for *parents, key in NULL_AS_ABSENT:
        node = semantic
        for name in parents:  # copy the path down, never the caller's dicts
            if not isinstance(node.get(name), dict):
                break
            node[name] = dict(node[name])
            node = node[name]
        else:
            if key in node and node[key] is None:
                del node[key]
    for group, key in NOT_HASHED_NESTED:
        if isinstance(semantic.get(group), dict):
            semantic[group] = {k: v for k, v in semantic[group].items() if k != key}
    return config_key(semantic)


def legacy_reason(record: dict) -> str | None:
    """Why a record cannot be traced to clean code (None when it can): written before provenance was recorded, from
    a tree with uncommitted changes, or by an older version of its method (outdated_reason)."""
    if record.get("schema_version", 1) < 2:
        return "legacy: written before provenance was recorded (schema 1), from a dirty tree"
    prov = record.get("provenance", {})
    if prov.get("git_dirty"):
        return "dirty tree (allow_dirty=true)" if prov.get("allow_dirty") else "dirty tree"
    return outdated_reason(record)


def outdated_reason(record: dict) -> str | None:
    """Why a record no longer measures its method (None when it does): it was made by an older version of the method,
    whose semantics have changed since (experiments.registry's version). A record without a method_version (a
    hand-built one) is taken as it is."""
    from experiments import registry  # lazy: the registry names every package
    name = ((record.get("config") or {}).get("method") or {}).get("name")
    if "method_version" not in record or name not in registry.METHODS:
        return None
    now = registry.version_of(name)
    if record["method_version"] != now:
        return f"made by version {record['method_version']} of its method, now {now}"
    return None


def read_json(path: Path) -> dict | None:
    """A run record, or None when absent or unreadable (an unreadable one is reported, never trusted)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        # true for every reader: the runner (finished) recomputes the run, a report or sweep summary leaves it out
        log.warning("ignoring unreadable record %s (%s): it counts as missing (a run of its config computes it "
                    "again; a report leaves it out)", path, e)
        return None


def finished(path: Path, chash: str, version: int | None = None) -> dict | None:
    """The record at `path` if it finished ok with this exact config hash, by this `version` of its method, and every
    asset it read is unchanged in the current cache (provenance.assets: manifest shas, which cover the tokenizer and
    weights files, and hub revisions); a changed asset or method version is logged and the run is redone. A
    schema-1 record names no assets: redone."""
    r = read_json(path)
    if not (r and r.get("status") == "ok" and r.get("config_hash") == chash):
        return None
    recorded = r.get("provenance", {}).get("assets")
    why = "the record (schema 1) names no assets to check" if recorded is None else assets.changed(recorded)
    if not why and version is not None and r.get("method_version") != version:
        why = f"made by version {r.get('method_version')} of its method, now {version}"
    if why:
        log.warning("redoing %s: %s", path, why)
        return None
    return r


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_dirty() -> bool:
    """Uncommitted changes to tracked code or config; results/ is left out (a sweep publishing its records must not
    make its own later jobs dirty)."""
    return bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"))


def provenance(device: str, dirty: bool) -> dict:
    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None
    return {
        # a copy of a clean checkout without .git (a lent GPU machine) names its commit in STRATA_GIT_SHA
        "git_sha": _git("rev-parse", "HEAD") or os.environ.get("STRATA_GIT_SHA"),
        "git_dirty": dirty,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        **{pkg: ver(pkg) for pkg in ("torch", "transformers", "datasets", "peft", "hydra-core")},
        "device": device,
        "host": platform.node(),
    }


def load_runs(results_dir: Path, paper: str) -> list[dict]:
    """Every record under results/<paper>/runs/ (runs/<artifact>/<hardware>/<run_id>.json)."""
    runs = []
    for p in sorted((Path(results_dir) / paper / "runs").rglob("*.json")):
        r = read_json(p)
        if r is not None:
            runs.append(r)
    return runs
