"""Run one paper's tier, experiment after experiment, with a progress line per experiment and a timing summary.

    python -m scripts.tier recycling                  # CPU tier: conf/experiment/recycling/*_cpu.yaml
    python -m scripts.tier recycling --hardware gpu   # GPU tier: offline_* files (packaged models, full data);
    HF_HUB_OFFLINE=0 python -m scripts.tier recycling --hardware gpu   # + the paper-scale files (hub ids)

    python -m scripts.tier --list                     # every experiment: which command runs it, where records go
    python -m scripts.tier --smoke finetune eat       # make smoke: every smoke* file, then one overall line

Each experiment is `python -m experiments.run -m experiment=<paper>/<name> publish=true` (finished runs skip, so a
killed tier resumes where it stopped): a tier is what publishes into results/; no experiment file sets publish, so a
user's own run or sweep of the same file writes only under outputs/. Benchmarks (`bench*`) and `smoke*` files belong
to no tier. The wall time of each experiment and of the tier goes to outputs/tiers/<paper>-<hardware>.json beside the
commit it ran from: the figures the README's tier times quote."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[1]


CONF = REPO / "conf" / "experiment"


def kind(name: str) -> str:
    """What an experiment file is, from its name: `smoke` (make smoke), `bench` (a benchmark, timed alone on a quiet
    machine, so in no tier), `cpu` (the CPU tier), `offline` (the GPU tier, packaged assets) or `hub` (the GPU tier
    with hub models and data)."""
    for prefix in ("smoke", "bench"):
        if name.startswith(prefix):
            return prefix
    return "cpu" if name.endswith("_cpu") else "offline" if name.startswith("offline") else "hub"


def experiment_names(paper: str, conf: Path = CONF) -> list[str]:
    folder = conf / paper
    if not folder.is_dir():
        known = sorted(p.name for p in conf.iterdir() if p.is_dir())
        raise SystemExit(f"scripts.tier: no experiments for paper {paper!r} ({folder} missing); papers: "
                         f"{', '.join(known)}")
    return sorted(p.stem for p in folder.glob("*.yaml"))


def experiments(paper: str, hardware: str, conf: Path = CONF, hub: bool = True) -> list[str]:
    """The tier's experiment files in run order (sorted names): `*_cpu` on CPU, the offline and hub ones otherwise;
    without the hub (`hub=False`) only the `offline_*` ones, which need nothing but the packaged assets."""
    wanted = {"cpu"} if hardware == "cpu" else {"offline", "hub"} if hub else {"offline"}
    return [n for n in experiment_names(paper, conf) if kind(n) in wanted]


def targets(papers: Sequence[str], hardware: str, conf: Path = CONF) -> list[str]:
    """`make help`'s lines for each paper: what `make <paper>-cpu` and `make <paper>` run, and its benchmarks."""
    lines = []
    for paper in papers:
        rows = [(f"{paper}-cpu", "CPU tier", experiments(paper, "cpu", conf)),
                (paper, f"paper scale (hardware={hardware}; hub ids need HF_HUB_OFFLINE=0)",
                 experiments(paper, hardware, conf)),
                ("", "benchmarks, outside the tiers (run alone on a quiet machine)",
                 [n for n in experiment_names(paper, conf) if kind(n) == "bench"])]
        lines += [f"  {target:<22} {what}: {', '.join(found)}" for target, what, found in rows if found]
    return lines


def listing(papers: Sequence[str], hardware: str, conf: Path = CONF) -> list[str]:
    """`make list`: each experiment file, the command that runs it and where its records go. Only a tier publishes
    into results/; any other run does only when given publish=true."""
    rows = []
    for paper in papers:
        for name in experiment_names(paper, conf):
            k = kind(name)
            dest = f"results/{paper}/runs/{name}/{dict(cpu='cpu', bench='<hardware>').get(k, hardware)}/"
            where = {"smoke": f"make smoke; never publishes (outputs/sweeps/{paper}/{name}/)",
                     "bench": f"benchmark, in no tier; publishes -> {dest} only with publish=true",
                     "cpu": f"make {paper}-cpu publishes -> {dest}",
                     "offline": f"make {paper} publishes -> {dest}",
                     "hub": f"make {paper} with HF_HUB_OFFLINE=0 publishes -> {dest}"}[k]
            rows.append((f"conf/experiment/{paper}/{name}.yaml", where))
    width = max((len(f) for f, _ in rows), default=0)
    return (["Every run writes under outputs/; a record goes to results/<paper>/runs/<experiment>/<hardware>/ "
             "(committed) only with publish=true, which make <paper>-cpu and make <paper> pass."]
            + [f"{f:<{width}}  {where}" for f, where in rows])


def clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m:02d}:{s:02d}"


def git_sha() -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or None


def run_tier(paper: str, hardware: str, names: Sequence[str], launch: Callable[[list[str]], int],
             out: Path | None = None, say: Callable[[str], None] = print) -> int:
    """Launch each experiment in turn; stop at the first failure (its exit code is returned). The summary file is
    written after every experiment, so a killed tier still says how far it got."""
    tier = f"{paper}-{hardware}"
    start, done = time.perf_counter(), []
    summary = {"tier": tier, "git_sha": git_sha(), "threads": os.environ.get("OMP_NUM_THREADS"),
               "experiments": done, "complete": False}
    for i, name in enumerate(names, 1):
        say(f"== [{tier} {i}/{len(names)}] {paper}/{name}  (tier elapsed {clock(time.perf_counter() - start)})")
        t0 = time.perf_counter()
        # publish=true here, never in the experiment files: a tier writes results/, a user's sweep does not
        cmd = [f"experiment={paper}/{name}", "publish=true"] + ([] if hardware == "cpu" else [f"hardware={hardware}"])
        code = launch(cmd)
        took = time.perf_counter() - t0
        done.append({"experiment": f"{paper}/{name}", "wall_s": round(took, 1), "exit_code": code})
        summary["wall_s"] = round(time.perf_counter() - start, 1)
        if out is not None:
            _write(out, summary)
        say(f"== [{tier} {i}/{len(names)}] {paper}/{name} {'done' if code == 0 else f'FAILED (exit {code})'} in "
            f"{clock(took)}  (tier elapsed {clock(time.perf_counter() - start)})")
        if code != 0:
            return code
    summary["complete"] = True
    if out is not None:
        _write(out, summary)
    say(f"== [{tier}] {len(names)} experiments in {clock(time.perf_counter() - start)}")
    return 0


def smoke(papers: Sequence[str], launch: Callable[[list[str]], int], sweeps: Path = REPO / "outputs" / "sweeps",
          conf: Path = CONF, say: Callable[[str], None] = print) -> int:
    """make smoke: each paper's smoke* files, one sweep each, then one overall line (sweeps, runs, failed). Every job
    reruns (force=true: the finished-run skip keys on the config, not the code, so a skip would check nothing) and
    every job runs to its end (on_error=record: all failures are listed, not the first). A sweep's jobs are the
    result.json files written under outputs/sweeps/<exp_id> since it started (a smoke file's exp_id is
    <paper>/<name>); a sweep that exits non-zero with no failed record (it died before a job) counts one failure.
    Returns 1 if anything failed."""
    files = [(paper, name) for paper in papers for name in experiment_names(paper, conf) if kind(name) == "smoke"]
    start, runs, failed = time.perf_counter(), 0, []
    for i, (paper, name) in enumerate(files, 1):
        say(f"== [smoke {i}/{len(files)}] {paper}/{name}  (elapsed {clock(time.perf_counter() - start)})")
        t0 = time.time() - 1  # file times are coarser than time.time(); an earlier smoke run is older than 1 s
        code = launch([f"experiment={paper}/{name}", "force=true", "on_error=record"])
        records = [json.loads(p.read_text()) for p in sorted((sweeps / paper / name).rglob("result.json"))
                   if p.stat().st_mtime >= t0]
        runs += len(records)
        bad = [f"{paper}/{name}: {r.get('run_id')}" for r in records if r.get("status") != "ok"]
        failed += bad or ([f"{paper}/{name}: the sweep exited with code {code}"] if code else [])
    say(f"== make smoke: {len(files)} sweeps, {runs} runs, {len(failed)} failed in {clock(time.perf_counter() - start)}"
        + "".join(f"\n   failed: {f}" for f in failed))
    return 1 if failed else 0


def _write(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)  # atomic: a killed tier never leaves half a summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paper", nargs="*", help="one paper to run; with --list or --targets, the papers to describe "
                    "(default: every folder of conf/experiment)")
    ap.add_argument("--hardware", default="cpu", help="cpu (the *_cpu experiments) or a hardware config (gpu)")
    ap.add_argument("--list", action="store_true", help="print each experiment, its command and where its records "
                    "go (make list); runs nothing")
    ap.add_argument("--targets", action="store_true", help="print make help's lines for each paper; runs nothing")
    ap.add_argument("--smoke", action="store_true", help="run the papers' smoke* files (make smoke)")
    args = ap.parse_args(argv)
    if args.list or args.targets:
        papers = args.paper or sorted(p.name for p in CONF.iterdir() if p.is_dir())
        print("\n".join((listing if args.list else targets)(papers, args.hardware)))
        return 0

    def launch(overrides: list[str]) -> int:
        return subprocess.run([sys.executable, "-m", "experiments.run", "-m", *overrides], cwd=REPO).returncode

    if args.smoke:
        return smoke(args.paper or sorted(p.name for p in CONF.iterdir() if p.is_dir()), launch)
    if len(args.paper) != 1:
        ap.error("name one paper to run")
    args.paper = args.paper[0]
    hub = os.environ.get("HF_HUB_OFFLINE", "1") == "0"
    names = experiments(args.paper, args.hardware, hub=hub)
    if args.hardware != "cpu" and not hub:
        skipped = sorted(set(experiments(args.paper, args.hardware)) - set(names))
        print(f"scripts.tier: offline (HF_HUB_OFFLINE != 0): the packaged-model experiments only; skipped "
              f"{', '.join(skipped) or 'none'} (hub models and data: HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0)")
    if not names:
        raise SystemExit(f"scripts.tier: paper {args.paper!r} has no {args.hardware} experiments")
    return run_tier(args.paper, args.hardware, names, launch,
                    out=REPO / "outputs" / "tiers" / f"{args.paper}-{args.hardware}.json")


if __name__ == "__main__":
    sys.exit(main())
