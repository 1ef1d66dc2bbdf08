"""Rerun a sample of the committed run records from the current checkout and compare their metrics (make verify).

    python -m scripts.verify                               # one record per paper, seed 0
    python -m scripts.verify --n 2 --seed 3 --paper eat pema
    python -m scripts.verify --record results/eat/runs/table1_cpu/cpu/<run_id>.json

Sample. Per paper, a seeded draw (numpy default_rng([seed, crc32(paper)]), so one paper's draw does not depend on
which others are named) among its records that this machine can rerun offline: status ok; hardware cpu (a GPU record
only where CUDA is available); model, task and data from the packaged assets, a fixture or a random config (never the
hub), every cache asset it names present (an encoder another experiment builds may not be); not a benchmark
(`bench*`: timings, run alone on a quiet machine); and provenance wall_s <= --max-wall-s (120 s by default, so that
`make verify` stays within minutes; a rerun with a cold activation store can take several times its record's wall_s).
What was left out is counted by reason. `--record` reruns exactly the files named, whatever their wall time.

Rerun. `python -m experiments.run <the record's overrides> force=true publish=false results_dir=<tmp>
hydra.run.dir=<tmp>`, one record at a time, the command printed first: same exp_id, overrides and seed; nothing is
written under results/. Its STRATA_CACHE is a temporary one whose models/ and data/ link to the real assets and
whose method caches (activation store, EAT and LoRA checkpoints, PEMA counts) start empty: a record may have read
its model or counts from a cache filled by older code, so the rerun recomputes them, and it leaves the real caches
as they were. Threads: --threads, else $OMP_NUM_THREADS, else the record's own count (the one setting that can make
an identical computation differ). Before it, the overrides are composed again and hashed: a config hash that
differs from the record's means the composition changed (the differing keys are listed) and counts as drift.

Comparison, metric by metric, committed vs now:
  - measurements (shown, "measurement: not compared"): keys under time/, speedup/, throughput/, latency/, scaling/,
    cost/, mem/ or bench/ (also after a long/ prefix), and any key ending _s, _ms or _per_s or holding _ms@ (a
    timing wherever it is). Exceptions, compared: mem/analytic_* (arithmetic on parameter counts) and bench/dev_gap
    (a difference of dev scores).
  - every other metric: |now - committed| <= rel * max(1, |committed|), where rel is
      1e-9   when torch, transformers, datasets, peft (and numpy, if recorded), the device model and the thread count
             all equal the record's: the same computation, so the same numbers;
      1e-6   when only the thread count differs: CPU kernels split reductions by thread, so sums round differently;
      5e-3   when a library version or the device model differs: 0.5 percentage points on a score in [0, 1] (0.5 %
             of larger values), a change of about one example in a few hundred.
    What differs is named in the output. Assets whose manifest sha differs from the record's are listed but loosen
    nothing: an asset whose content changed makes the committed numbers stale, which is drift. A metric missing from
    the rerun drifts; one only the rerun has is shown, not compared.

Exit 0 with "verify: k records rerun, m metrics compared, all within tolerance"; 1 when any metric drifts, a config
composes differently, a rerun fails or a record named with --record cannot be rerun here, with a last line naming
those records."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence

import numpy as np

from experiments import REPO

CONF = REPO / "conf"
MAX_WALL_S = 120.0
EXACT, THREADS_ONLY, LOOSE = 1e-9, 1e-6, 5e-3
VERSION_KEYS = ("torch", "transformers", "datasets", "peft", "numpy")
MEASURED_NAMESPACES = ("time", "speedup", "throughput", "latency", "scaling", "cost", "mem", "bench")
COMPARED_ANYWAY = re.compile(r"^(long/)?(mem/analytic_|bench/dev_gap$)")
TIMING_NAME = re.compile(r"(_s|_ms|_per_s)$|_ms@")
# overrides the rerun sets itself: where it writes and whether it reruns, never what it computes (not hashed)
REPLACED = {"publish", "force", "results_dir"}
NOT_CACHED = ", not in the asset cache"


def is_measurement(key: str) -> bool:
    """A clock or allocator reading: noisy by nature, shown but never compared (module docstring)."""
    if COMPARED_ANYWAY.search(key):
        return False
    parts = key.split("/")
    if parts[0] == "long":
        parts = parts[1:]
    return (len(parts) > 1 and parts[0] in MEASURED_NAMESPACES) or bool(TIMING_NAME.search(parts[-1]))


def why_not_rerunnable(record: dict, cuda: bool = False) -> str | None:
    """Why this machine cannot rerun a record offline (None when it can)."""
    if record.get("status") != "ok":
        return f"status {record.get('status')}"
    config, prov = record.get("config") or {}, record.get("provenance") or {}
    hardware = prov.get("hardware") or (config.get("hardware") or {}).get("name")
    device = str((config.get("hardware") or {}).get("device", "cpu"))
    if device.startswith("cuda") and not cuda:
        return f"hardware {hardware} (needs CUDA)"
    if hardware != "cpu" and not device.startswith("cuda"):
        return f"hardware {hardware}"
    if (config.get("model") or {}).get("source") == "hub":
        return "hub model (needs the network)"
    task, data = config.get("task") or {}, config.get("data") or {}
    if (data.get("source") or task.get("source")) == "hub":
        return "hub data (needs the network)"
    if any(k.startswith("hub/") for k in prov.get("assets") or {}):
        return "reads the Hugging Face hub"
    if not record.get("exp_id") or record.get("overrides") is None:
        return "no exp_id or overrides to rerun"
    from experiments.results import outdated_reason  # today's code cannot reproduce an older method's numbers
    if why := outdated_reason(record):
        return why
    if missing := missing_assets(record):
        return f"needs {', '.join(missing)}{NOT_CACHED}"
    return None


@lru_cache(maxsize=1)
def _offline_models() -> dict[str, str]:
    """conf/model name -> its directory in the asset cache, for every model loaded from there."""
    import yaml
    out = {}
    for path in (CONF / "model").glob("*.yaml"):
        node = yaml.safe_load(path.read_text()) or {}
        if node.get("source", "offline") == "offline":
            out[node.get("name", path.stem)] = node.get("offline") or node.get("name", path.stem)
    return out


def _strings(node) -> set[str]:
    if isinstance(node, dict):
        return set().union(*map(_strings, node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*map(_strings, node)) if node else set()
    return {node} if isinstance(node, str) else set()


def missing_assets(record: dict) -> list[str]:
    """Cache assets the record read or names that are not in this cache: beside what `make assets` builds, encoders
    one experiment saves for another (reverse probing's sources, named in method.sources) live there, and a record
    whose features came from the activation store does not list those in provenance.assets."""
    from experiments.assets import MANIFEST, cache_dir
    config = record.get("config") or {}
    wanted = {k for k in (record.get("provenance") or {}).get("assets") or {} if not k.startswith("hub/")}
    models = _offline_models()
    wanted |= {f"models/{models[s]}" for s in _strings(config) if s in models}
    task, data = config.get("task") or {}, config.get("data") or {}
    if (data.get("source") or task.get("source")) == "offline" and task.get("offline"):
        wanted.add(f"data/{task['offline']}")
    return sorted(w for w in wanted if not (cache_dir() / w / MANIFEST).is_file())


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def artifact_of(path: Path) -> str:
    """results/<paper>/runs/<artifact>/<hardware>/<run_id>.json -> <artifact>."""
    return path.parent.parent.name


def candidates(results_dir: Path, paper: str, max_wall_s: float | None = MAX_WALL_S,
               cuda: bool = False) -> tuple[list[Path], Counter]:
    """A paper's rerunnable records (sorted paths) and, by reason, how many were left out."""
    eligible, skipped, absent, n_absent = [], Counter(), set(), 0
    for path in sorted((results_dir / paper / "runs").rglob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            skipped["unreadable"] += 1
            continue
        why = why_not_rerunnable(record, cuda)
        if why and why.endswith(NOT_CACHED):  # one reason for all, naming every missing asset once
            absent.update(missing_assets(record))
            n_absent += 1
            continue
        if why is None and artifact_of(path).startswith("bench"):
            why = "benchmark (timings for a quiet machine)"
        wall = (record.get("provenance") or {}).get("wall_s")
        if why is None and max_wall_s is not None and (wall is None or wall > max_wall_s):
            why = f"took > {max_wall_s:g} s"
        if why:
            skipped[why] += 1
        else:
            eligible.append(path)
    if n_absent:
        skipped[f"need {', '.join(sorted(absent))}{NOT_CACHED}"] = n_absent
    return eligible, skipped


def draw(paths: Sequence[Path], n: int, seed: int, paper: str) -> list[Path]:
    """n of `paths` (all when fewer), the same for a given seed and paper whichever other papers are drawn."""
    if not paths:
        return []
    rng = np.random.default_rng([seed, zlib.crc32(paper.encode())])
    picked = rng.choice(len(paths), size=min(n, len(paths)), replace=False)
    return [paths[i] for i in sorted(picked)]


def rerun_overrides(record: dict) -> list[str]:
    """The record's overrides without those the rerun replaces (REPLACED and hydra.*)."""
    from experiments.identity import override_key
    return [o for o in record["overrides"]
            if override_key(o) not in REPLACED and not override_key(o).startswith("hydra.")]


def composed(overrides: Sequence[str]) -> dict:
    """The resolved config `python -m experiments.run <overrides>` gets now (without the hydra node)."""
    from omegaconf import OmegaConf

    from experiments.config import compose
    return OmegaConf.to_container(compose(*overrides), resolve=True)


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_diff(old: dict, new: dict) -> list[str]:
    """`key: old -> new` for every hashed key whose value differs."""
    from experiments.results import NOT_HASHED
    a = flat({k: v for k, v in old.items() if k not in NOT_HASHED})
    b = flat({k: v for k, v in new.items() if k not in NOT_HASHED})
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}" for k in sorted(a.keys() | b.keys())
            if a.get(k, "(absent)") != b.get(k, "(absent)")]


def _device_model(device: str | None) -> str | None:
    return re.sub(r", \d+ threads?$", "", device) if device else device


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def tolerance(committed: dict, now: dict) -> tuple[float, list[str]]:
    """rel for comparing metrics (module docstring) and what differs between the two provenances, in words."""
    diffs, threads = [], []
    for key in VERSION_KEYS:
        if key not in committed:
            continue  # numpy: older records do not name it
        current = now.get(key, _version(key))
        if committed[key] != current:
            diffs.append(f"{key} {committed[key]} -> {current}")
    if _device_model(committed.get("device")) != _device_model(now.get("device")):
        diffs.append(f"device {_device_model(committed.get('device'))} -> {_device_model(now.get('device'))}")
    if committed.get("threads") != now.get("threads"):
        threads.append(f"threads {committed.get('threads')} -> {now.get('threads')}")
    return (LOOSE if diffs else THREADS_ONLY if threads else EXACT), diffs + threads


def asset_notes(committed: dict, now: dict) -> list[str]:
    """Assets whose manifest sha differs from the record's. Not a reason for a looser tolerance: a manifest sha also
    changes when only its bookkeeping does, and an asset whose content changed shows as drift, which it is."""
    old, new = committed.get("assets") or {}, now.get("assets") or {}
    notes = [f"{k} {str(old[k])[:12]} -> {str(new.get(k))[:12]}" for k in sorted(old) if old[k] != new.get(k)]
    notes += [f"{k} read now, not named by the record" for k in sorted(new.keys() - old.keys())]
    return notes


@dataclass
class Row:
    metric: str
    committed: float | None
    now: float | None
    tol: float | None  # None: not compared
    note: str = ""

    @property
    def ok(self) -> bool:
        if self.tol is None:
            return True
        if self.now is None or self.committed is None:
            return False
        if self.now == self.committed:  # inf included
            return True
        if math.isnan(self.committed) or math.isnan(self.now):
            return math.isnan(self.committed) and math.isnan(self.now)
        return abs(self.now - self.committed) <= self.tol


def compare(committed: dict, now: dict, rel: float) -> list[Row]:
    rows = []
    for key, old in committed.items():
        new = now.get(key)
        if is_measurement(key) or old is None:
            rows.append(Row(key, old, new, None, "measurement: not compared" if old is not None else "no value"))
        else:
            rows.append(Row(key, float(old), None if new is None else float(new),
                            rel * max(1.0, abs(float(old))) if math.isfinite(float(old)) else 0.0,
                            "" if new is not None else "missing from the rerun"))
    rows += [Row(k, None, v, None, "new: not in the record") for k, v in now.items() if k not in committed]
    return rows


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.10g}"


def table(rows: list[Row]) -> list[str]:
    cells = [("metric", "committed", "now", "drift", "tolerance", "")]
    for r in rows:
        same = r.committed is not None and r.now is not None and (r.now == r.committed or r.ok and r.tol == 0)
        drift = "-" if r.committed is None or r.now is None else "0" if same else f"{r.now - r.committed:+.3g}"
        verdict = r.note if r.tol is None else ("ok" if r.ok else "DRIFT") + (f" ({r.note})" if r.note else "")
        cells.append((r.metric, _num(r.committed), _num(r.now), drift, "-" if r.tol is None else f"{r.tol:.2g}",
                      verdict))
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    return ["   " + "  ".join(c[i].ljust(widths[i]) for i in range(5)) + "  " + c[5] for c in cells]


@dataclass
class Outcome:
    path: Path
    problems: list[str] = field(default_factory=list)
    compared: int = 0
    ran: bool = False


def isolated_cache(root: Path, record: dict) -> Path:
    """A STRATA_CACHE for one rerun: its models/ and data/ link to the real cache's assets, one link per asset, and
    the method caches (activation store, EAT and LoRA checkpoints, PEMA counts) start empty. The rerun recomputes
    what the record may have read from a cache, and force=true replaces nothing in the real one. An encoder the
    record builds (method.save_as) is not linked: its rerun saves a new one here."""
    from experiments.assets import cache_dir
    real = cache_dir()
    save_as = ((record.get("config") or {}).get("method") or {}).get("save_as")
    for kind in ("models", "data"):
        (root / kind).mkdir(parents=True)
        for entry in sorted((real / kind).iterdir()) if (real / kind).is_dir() else ():
            if not entry.name.startswith(".") and not (kind == "models" and entry.name == save_as):
                (root / kind / entry.name).symlink_to(entry.resolve())
    return root


def _threads(record: dict, requested: int | None) -> tuple[str | None, str]:
    if requested:
        return str(requested), "--threads"
    if os.environ.get("OMP_NUM_THREADS"):
        return os.environ["OMP_NUM_THREADS"], "$OMP_NUM_THREADS"
    recorded = (record.get("provenance") or {}).get("threads")
    return (str(recorded), "the record's") if recorded else (None, "this machine's cores")


def verify_one(path: Path, work: Path, index: int = 0, threads: int | None = None, say=print) -> Outcome:
    """Check the composition, rerun, compare; every problem is reported in the Outcome, never raised."""
    from experiments.results import config_hash
    out = Outcome(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        out.problems.append("unreadable record")
        say(f"   cannot read the record: {e}")
        return out
    prov = record.get("provenance") or {}
    if why := why_not_rerunnable(record, _cuda()):
        out.problems.append(f"cannot be rerun here: {why}")
        say(f"   cannot be rerun here: {why}")
        return out
    say(f"   recorded at {str(prov.get('git_sha'))[:7]}: " + ", ".join(
        f"{k} {prov[k]}" for k in VERSION_KEYS if k in prov) + f", {_device_model(prov.get('device'))}, "
        f"{prov.get('threads')} thread(s), wall {prov.get('wall_s')} s")
    overrides = rerun_overrides(record)
    try:
        chash = config_hash(composed(overrides))
        if chash == record.get("config_hash"):
            say(f"   config: the overrides compose to the recorded hash {chash}")
        else:
            changed = config_diff(record.get("config") or {}, composed(overrides))
            out.problems.append("config composes differently")
            say(f"   config DRIFT: the overrides compose to hash {chash}, the record has {record.get('config_hash')}; "
                f"{len(changed)} key(s) differ:")
            for line in changed[:12]:
                say(f"     {line}")
            if len(changed) > 12:
                say(f"     ... and {len(changed) - 12} more")
    except Exception as e:  # a composition that fails now is drift of its own, reported like the others
        out.problems.append("config does not compose")
        say(f"   config DRIFT: the overrides no longer compose: {type(e).__name__}: {e}")
    run_dir = work / f"run-{index}"
    cmd = [sys.executable, "-m", "experiments.run", *overrides, "force=true", "publish=false",
           f"results_dir={work / 'results'}", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "STRATA_CACHE": str(isolated_cache(work / f"cache-{index}", record))}
    n_threads, source = _threads(record, threads)
    if n_threads:
        env["OMP_NUM_THREADS"] = n_threads
    shown = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    say(f"   $ {f'OMP_NUM_THREADS={n_threads} ' if n_threads else ''}{shlex.join([shown, *cmd[1:]])}"
        f"    (threads: {source})")
    log = work / f"{run_dir.name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    took = time.perf_counter() - t0
    try:
        new = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        new = {}
    if code != 0 or new.get("status") != "ok":
        out.problems.append("rerun failed")
        say(f"   rerun FAILED after {took:.1f} s (exit {code}, status {new.get('status')}): "
            f"{new.get('error', 'no record written')}")
        say("\n".join("     | " + line for line in log.read_text().splitlines()[-15:]))
        return out
    out.ran = True
    say(f"   rerun done in {took:.1f} s")
    if new.get("config_hash") != record.get("config_hash") and "config composes differently" not in out.problems:
        out.problems.append("config composes differently")
        say(f"   config DRIFT: the rerun's hash is {new.get('config_hash')}, the record's {record.get('config_hash')}")
    if new.get("run_id") != record.get("run_id"):
        say(f"   note: the rerun is named {new.get('run_id')}, the record {record.get('run_id')}")
    rel, diffs = tolerance(prov, new.get("provenance") or {})
    say(f"   environment: {'; '.join(diffs) if diffs else 'identical to the record'}: compared to {rel:g} relative")
    if notes := asset_notes(prov, new.get("provenance") or {}):
        say(f"   assets differing from the record's manifests: {'; '.join(notes)}")
    rows = compare(record.get("metrics") or {}, new.get("metrics") or {}, rel)
    for line in table(rows):
        say(line)
    out.compared = sum(r.tol is not None for r in rows)
    drifted = [r.metric for r in rows if not r.ok]
    if drifted:
        out.problems.append(", ".join(drifted))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1, help="records drawn per paper (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    ap.add_argument("--paper", nargs="+", help="papers to draw from (default: every registered paper under "
                    "--results-dir)")
    ap.add_argument("--results-dir", type=Path, default=REPO / "results", help="committed records (default results)")
    ap.add_argument("--record", nargs="+", type=Path, help="rerun exactly these record files (no draw)")
    ap.add_argument("--max-wall-s", type=float, default=MAX_WALL_S,
                    help=f"draw among records whose provenance wall_s is at most this (default {MAX_WALL_S:g}; "
                    "0: no limit)")
    ap.add_argument("--threads", type=int, help="threads of each rerun (default $OMP_NUM_THREADS, else the record's)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory of the reruns")
    ap.add_argument("--dry-run", action="store_true", help="print the records drawn and stop")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    start = time.perf_counter()

    if args.record:
        picked = [p.resolve() for p in args.record]
        missing = [str(p) for p in picked if not p.is_file()]
        if missing:
            print(f"verify: no such record: {', '.join(missing)}")
            return 1
    else:
        cuda = _cuda()
        results = args.results_dir
        from experiments.registry import PAPERS
        papers = args.paper or sorted(p for p in PAPERS if (results / p).is_dir())
        unknown = [p for p in papers if not (results / p).is_dir()]
        if unknown:
            print(f"verify: no paper {', '.join(unknown)} under {results}; papers: "
                  f"{', '.join(sorted(p.name for p in results.iterdir() if p.is_dir()))}")
            return 1
        wall = args.max_wall_s or None
        print(f"verify: {args.n} record(s) per paper, seed {args.seed}"
              + (f", drawn among records that took <= {wall:g} s" if wall else ""))
        picked = []
        for paper in papers:
            eligible, skipped = candidates(results, paper, wall, cuda)
            chosen = draw(eligible, args.n, args.seed, paper)
            left = "; ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
            print(f"  {paper}: {len(chosen)} of {len(eligible)} rerunnable" + (f" (left out: {left})" if left else "")
                  if eligible or skipped else f"  {paper}: no committed records")
            picked += chosen

    if args.dry_run:
        print("\n".join(f"  {os.path.relpath(p, REPO) if p.is_relative_to(REPO) else p}" for p in picked))
        return 0
    from experiments.results import git_dirty, _git
    print(f"verify: rerunning {len(picked)} record(s) from {(_git('rev-parse', '--short', 'HEAD') or '?')}"
          + (" with uncommitted changes to tracked files (the reruns use them)" if git_dirty() else ""))
    work = Path(tempfile.mkdtemp(prefix="strata-verify-"))
    outcomes = []
    try:
        for i, path in enumerate(picked, 1):
            shown = os.path.relpath(path, REPO) if path.is_relative_to(REPO) else str(path)
            print(f"== [{i}/{len(picked)}] {shown}", flush=True)
            outcomes.append(verify_one(path, work, i, args.threads, say=lambda s: print(s, flush=True)))
    finally:
        if args.keep:
            print(f"verify: reruns kept in {work}")
        else:
            import shutil
            shutil.rmtree(work, ignore_errors=True)
    took = time.perf_counter() - start
    ran = sum(o.ran for o in outcomes)
    compared = sum(o.compared for o in outcomes)
    bad = [o for o in outcomes if o.problems]
    if not picked:
        print("verify: nothing to rerun")
        return 1
    if bad:
        names = "; ".join(f"{os.path.relpath(o.path, REPO) if o.path.is_relative_to(REPO) else o.path} "
                          f"({'; '.join(o.problems)})" for o in bad)
        print(f"verify: DRIFT in {len(bad)} of {len(outcomes)} records ({took / 60:.1f} min): {names}")
        return 1
    print(f"verify: {ran} records rerun, {compared} metrics compared, all within tolerance ({took / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
