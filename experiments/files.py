"""Files a run leaves behind: written whole or not at all, and caches keyed by what made them.

A killed run must never leave a half-written file where a reader would trust it, so every writer goes through
`replacing`: the bytes land in a sibling temporary file, are flushed to disk, and are renamed over the target (a
rename within one directory is atomic). A cache entry is named by `config_key` of everything that determined it,
under `cache_root`, so a changed input is a new entry, never a stale hit."""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary sibling of `path` to write; on a clean exit it replaces `path`, on an error it is removed and
    `path` is left as it was. For writers that take a file name (`safetensors.save_file`, `torch.save`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: str | Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, obj: Any, indent: int | None = 1) -> None:
    write_text(path, json.dumps(obj, indent=indent, default=str))


def config_key(what: Any, chars: int = 16) -> str:
    """A stable name for `what` (JSON-able; other values by `str`): the first `chars` hex digits of the sha256 of its
    canonical JSON. 16 digits make a collision among a cache's entries a 2^-64 event per pair."""
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:chars]


def cache_root(kind: str, override: str | Path | None = None) -> Path:
    """Where entries of one kind live: `override` when the config names a directory, else `<asset cache>/<kind>`
    (the STRATA_CACHE root, beside models/ and data/)."""
    from experiments.assets import cache_dir  # lazy: assets reads the environment at call time
    return Path(override) if override else cache_dir() / kind
