"""The run record: one self-describing result.json per run (metrics, resolved config, its hash, provenance,
status), written atomically so a killed run never leaves a half-written result."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
# keys that change where or how a run is recorded, not what it computes
NOT_HASHED = ("publish", "force", "on_error", "logger", "exp_id", "results_dir", "paper", "experiment", "debug")
REPO = Path(__file__).resolve().parent.parent


def config_hash(config: dict) -> str:
    semantic = {k: v for k, v in config.items() if k not in NOT_HASHED}
    return hashlib.sha256(json.dumps(semantic, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_json(path: Path, obj: dict) -> None:
    """Atomic: write a sibling temp file, fsync, rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    """A run record, or None when absent or unreadable (an unreadable one is reported, never trusted)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        log.warning("ignoring unreadable result %s (%s); the run will be redone", path, e)
        return None


def finished(path: Path, chash: str) -> dict | None:
    """The record at `path` if it finished ok with this exact config hash."""
    r = read_json(path)
    return r if r and r.get("status") == "ok" and r.get("config_hash") == chash else None


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device: str) -> dict:
    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None
    return {
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        **{pkg: ver(pkg) for pkg in ("torch", "transformers", "datasets", "peft", "hydra-core")},
        "device": device,
        "host": platform.node(),
    }


def load_runs(results_dir: Path, paper: str) -> list[dict]:
    runs = []
    for p in sorted((Path(results_dir) / paper / "runs").glob("*.json")):
        r = read_json(p)
        if r is not None:
            runs.append(r)
    return runs
