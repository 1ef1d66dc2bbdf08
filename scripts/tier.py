"""Run a paper's tier, experiment after experiment, with a progress line per experiment, an ETA on a GPU tier, and a
failure table at the end.

    python -m scripts.tier recycling                  # CPU tier: the files that declare experiment.tier: cpu
    python -m scripts.tier recycling --hardware gpu   # GPU tier: tier offline (packaged models, full data);
    STRATA_HUB=1 python -m scripts.tier recycling --hardware gpu   # + tier hub (paper-scale hub models and data)
    python -m scripts.tier --hardware gpu recycling pema ...       # make reproduce-gpu: several papers, one ETA

    python -m scripts.tier --list                     # every experiment: which command runs it, where records go
    python -m scripts.tier --smoke finetune eat       # make smoke: every smoke file, then one overall line

Each experiment file declares its tier (`experiment: {tier: ...}`): cpu, offline, hub, manual (a CPU run outside
every tier, run by hand), bench (a benchmark, timed alone) or smoke. A GPU tier runs the `build_*` files first (they
save models later files read) and never a CPU-intended one. Each experiment is
`python -m experiments.run -m experiment=<paper>/<name> publish=true` (finished runs skip, so a killed tier resumes
where it stopped): a tier is what publishes into results/; no experiment file sets publish. Every experiment runs to
its end (its runs record failures and the sweep goes on); the tier then counts the failed records per experiment,
prints a failure table and exits 1 if any run failed. A GPU tier is checked first by scripts.preflight; a refusal
(its reasons printed, nothing run) exits 2. The wall time and failures of each experiment go to
outputs/tiers/<paper>-<hardware>.json beside the commit it ran from."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import yaml

from experiments import REPO
from experiments.files import write_json

CONF = REPO / "conf" / "experiment"
SWEEPS = REPO / "outputs" / "sweeps"
REFUSED = 2  # the exit code of a tier refused before any run (1: a run failed)
TIERS = {"cpu": "the CPU tier (make <paper>-cpu)", "offline": "the GPU tier, packaged models (make <paper>)",
         "hub": "the GPU tier with hub models and data (STRATA_HUB=1 make <paper>)",
         "manual": "a CPU run outside every tier, run by hand", "bench": "a benchmark, timed alone, in no tier",
         "smoke": "make smoke"}


def kind(paper: str, name: str, conf: Path = CONF) -> str:
    """The tier an experiment file declares (`experiment: {tier: <kind>}`, one of TIERS)."""
    path = conf / paper / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text()) or {}
    value = (doc.get("experiment") or {}).get("tier") if isinstance(doc.get("experiment"), dict) else None
    if value not in TIERS:
        raise SystemExit(f"scripts.tier: {path} declares experiment.tier={value!r}: add `experiment: {{tier: <kind>}}` "
                         f"with kind one of {', '.join(TIERS)}")
    return value


def experiment_names(paper: str, conf: Path = CONF) -> list[str]:
    folder = conf / paper
    if not folder.is_dir():
        known = sorted(p.name for p in conf.iterdir() if p.is_dir())
        raise SystemExit(f"scripts.tier: no experiments for paper {paper!r} ({folder} missing); papers: "
                         f"{', '.join(known)}")
    return sorted(p.stem for p in folder.glob("*.yaml"))


def is_build(name: str) -> bool:
    return "build" in name.split("_")


def experiments(paper: str, hardware: str, conf: Path = CONF, hub: bool = True) -> list[str]:
    """The tier's experiment files in run order: on CPU the `cpu` ones, otherwise the `offline` ones and (with the
    hub, `hub=True`) the `hub` ones; the `build_*` files first, then by name."""
    wanted = {"cpu"} if hardware == "cpu" else {"offline", "hub"} if hub else {"offline"}
    names = [n for n in experiment_names(paper, conf) if kind(paper, n, conf) in wanted]
    return sorted(names, key=lambda n: (not is_build(n), n))


def hub_online() -> bool:
    """The one hub switch (STRATA_HUB=1; experiments.hub.online)."""
    from experiments.hub import online
    return online()


def targets(papers: Sequence[str], hardware: str, conf: Path = CONF) -> list[str]:
    """`make help`'s lines for each paper: what `make <paper>-cpu` and `make <paper>` run, and its benchmarks."""
    lines = []
    for paper in papers:
        rows = [(f"{paper}-cpu", "CPU tier", experiments(paper, "cpu", conf)),
                (paper, f"paper scale (hardware={hardware}; the hub ones need STRATA_HUB=1)",
                 experiments(paper, hardware, conf)),
                ("", "benchmarks, outside the tiers (run alone on a quiet machine)",
                 [n for n in experiment_names(paper, conf) if kind(paper, n, conf) == "bench"]),
                ("", "CPU runs outside the tiers (by hand)",
                 [n for n in experiment_names(paper, conf) if kind(paper, n, conf) == "manual"])]
        lines += [f"  {target:<22} {what}: {', '.join(found)}" for target, what, found in rows if found]
    return lines


def listing(papers: Sequence[str], hardware: str, conf: Path = CONF) -> list[str]:
    """`make list`: each experiment file, the command that runs it and where its records go. Only a tier publishes
    into results/; any other run does only when given publish=true."""
    rows = []
    for paper in papers:
        for name in experiment_names(paper, conf):
            k = kind(paper, name, conf)
            dest = f"results/{paper}/runs/{name}/{dict(cpu='cpu', manual='cpu', bench='<hardware>').get(k, hardware)}/"
            where = {"smoke": f"make smoke; never publishes (outputs/sweeps/{paper}/{name}/)",
                     "bench": f"benchmark, in no tier; publishes -> {dest} only with publish=true",
                     "cpu": f"make {paper}-cpu publishes -> {dest}",
                     "manual": f"CPU, outside the tiers (by hand); publishes -> {dest} only with publish=true",
                     "offline": f"make {paper} publishes -> {dest}",
                     "hub": f"make {paper} with STRATA_HUB=1 publishes -> {dest}"}[k]
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


def sweep_jobs(folder: Path, started: float) -> list[dict]:
    """The jobs an experiment's sweep (outputs/sweeps/<paper>/<name>) started since `started`: Hydra rewrites a job's
    .hydra/overrides.yaml for every job it starts, a skipped one too. Each: run, record (path), status (ok, failed,
    or none: the job died before writing its record), error (first line), ran (its record is newer than `started`;
    a finished run skipped is not)."""
    from experiments.callbacks import written_since
    jobs = []
    for d in written_since(folder, started):
        path = d / "result.json"
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            r = {}
        error = str(r.get("error") or ("" if r.get("status") == "ok" else "no record: the job died before writing it"))
        jobs.append({"run": d.name, "record": str(path), "status": r.get("status", "none"),
                     "error": error.strip().splitlines()[0] if error.strip() else "",
                     "ran": path.exists() and path.stat().st_mtime >= started - 2})
    return jobs


def failure_table(failed: Sequence[dict]) -> list[str]:
    """experiment | run | error (first line) | record, one row per failed run."""
    rows = [("experiment", "run", "error", "record")] + [(f["experiment"], f["run"], f["error"][:160], f["record"])
                                                         for f in failed]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [" | ".join([*(c.ljust(w) for c, w in zip(r[:3], widths)), r[3]]).rstrip() for r in rows]


def eta_s(remaining_h: float, spent_s: float, spent_h: float) -> float:
    """Seconds left: the remaining estimate, scaled by how the measured wall time of what ran so far compared with its
    estimate (once at least 10 estimated minutes ran; skipped runs count neither way)."""
    return remaining_h * 3600 * (spent_s / (spent_h * 3600) if spent_h * 60 >= 10 else 1.0)


def run_tiers(tiers: Sequence[tuple[str, Sequence[str]]], hardware: str, launch: Callable[[list[str]], int],
              out_dir: Path | None = None, say: Callable[[str], None] = print, sweeps: Path = SWEEPS,
              hours: dict[str, float] | None = None, extra: Sequence[str] = ()) -> int:
    """Run each paper's experiments in turn, every one to its end, then print the failure table; returns 1 if any
    run failed (or a sweep exited non-zero without a failed record: it died before a job), else 0. Each paper's
    summary (outputs/tiers/<paper>-<hardware>.json: per experiment its wall time, exit code, runs, runs that ran and
    failed; the failed runs; complete) is rewritten after every experiment, so a killed tier says how far it got.
    `hours`: the estimated GPU-hours per <paper>/<name>, for the ETA."""
    items = [(paper, name) for paper, names in tiers for name in names]
    label = tiers[0][0] if len(tiers) == 1 else f"{len(tiers)} papers"
    start = time.perf_counter()
    spent_s = spent_h = 0.0
    remaining_h = sum((hours or {}).get(f"{p}/{n}", 0.0) for p, n in items)
    sha = git_sha()
    summaries = {paper: {"tier": f"{paper}-{hardware}", "git_sha": sha, "threads": os.environ.get("OMP_NUM_THREADS"),
                         "experiments": [], "failed": [], "complete": False} for paper, _ in tiers}
    all_failed: list[dict] = []

    def eta() -> str:
        return f", ETA {clock(eta_s(remaining_h, spent_s, spent_h))}" if hours else ""

    for i, (paper, name) in enumerate(items, 1):
        head = f"== [{paper}-{hardware} {i}/{len(items)}] {paper}/{name}"
        say(f"{head}  (elapsed {clock(time.perf_counter() - start)}{eta()})")
        t0, wall0 = time.perf_counter(), time.time()
        # publish=true here, never in the experiment files: a tier writes results/, a user's sweep does not
        cmd = [f"experiment={paper}/{name}", "publish=true", *([] if hardware == "cpu" else [f"hardware={hardware}"]),
               *extra]
        code = launch(cmd)
        took = time.perf_counter() - t0
        jobs = sweep_jobs(sweeps / paper / name, wall0)
        failed = [{"experiment": f"{paper}/{name}", **{k: j[k] for k in ("run", "error", "record")}}
                  for j in jobs if j["status"] != "ok"]
        if code and not failed:
            failed = [{"experiment": f"{paper}/{name}", "run": "-", "error": f"the sweep exited with code {code}",
                       "record": "-"}]
        ran = sum(j["ran"] for j in jobs)
        est = (hours or {}).get(f"{paper}/{name}", 0.0)
        remaining_h -= est
        spent_s, spent_h = spent_s + took, spent_h + (est * ran / len(jobs) if jobs else 0.0)
        summary = summaries[paper]
        summary["experiments"].append({"experiment": f"{paper}/{name}", "wall_s": round(took, 1), "exit_code": code,
                                       "runs": len(jobs), "ran": ran, "failed": len(failed)})
        summary["failed"] += failed
        summary["wall_s"] = round(sum(e["wall_s"] for e in summary["experiments"]), 1)
        all_failed += failed
        if out_dir is not None:
            write_json(out_dir / f"{paper}-{hardware}.json", summary)
        state = f"{len(failed)} FAILED" if failed else "done"
        say(f"{head} {state}: {len(jobs)} runs ({ran} ran, {len(jobs) - ran} finished before) in {clock(took)}  "
            f"(elapsed {clock(time.perf_counter() - start)}{eta()})")
    for paper, summary in summaries.items():
        summary["complete"] = not summary["failed"]
        if out_dir is not None:
            write_json(out_dir / f"{paper}-{hardware}.json", summary)
    runs = sum(e["runs"] for s in summaries.values() for e in s["experiments"])
    say(f"== [{label}] {len(items)} experiments, {runs} runs, {len(all_failed)} failed in "
        f"{clock(time.perf_counter() - start)}")
    if all_failed:
        say("== failed runs (each record keeps its traceback; rerun the same command: finished runs are skipped)\n"
            + "\n".join(failure_table(all_failed)))
    return 1 if all_failed else 0


def run_tier(paper: str, hardware: str, names: Sequence[str], launch: Callable[[list[str]], int],
             out_dir: Path | None = None, say: Callable[[str], None] = print, sweeps: Path = SWEEPS,
             hours: dict[str, float] | None = None, extra: Sequence[str] = ()) -> int:
    """One paper's tier: run_tiers."""
    return run_tiers([(paper, names)], hardware, launch, out_dir, say, sweeps, hours, extra)


def smoke(papers: Sequence[str], launch: Callable[[list[str]], int], sweeps: Path = REPO / "outputs" / "sweeps",
          conf: Path = CONF, say: Callable[[str], None] = print) -> int:
    """make smoke: each paper's smoke* files, one sweep each, then one overall line (sweeps, runs, failed). Every job
    reruns (force=true: the finished-run skip keys on the config, not the code, so a skip would check nothing) and
    every job runs to its end (on_error=record: all failures are listed, not the first). A sweep's jobs are the
    result.json files written under outputs/sweeps/<exp_id> since it started (a smoke file's exp_id is
    <paper>/<name>); a sweep that exits non-zero with no failed record (it died before a job) counts one failure.
    Returns 1 if anything failed."""
    files = [(paper, name) for paper in papers for name in experiment_names(paper, conf)
             if kind(paper, name, conf) == "smoke"]
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


def estimates(path: Path = REPO / "conf" / "tier_costs.yaml") -> dict[str, float]:
    """<paper>/<name> -> the middle of its estimated GPU-hours (conf/tier_costs.yaml), for the ETA."""
    table = (yaml.safe_load(path.read_text()) or {}).get("gpu_hours") or {}
    return {k: (float(v[0]) + float(v[-1])) / 2 for k, v in table.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paper", nargs="*", help="the papers to run, in order; with --list or --targets, the papers to "
                    "describe (default: every registered paper)")
    ap.add_argument("--hardware", default="cpu", help="cpu (the cpu experiments) or a hardware config (gpu)")
    ap.add_argument("--list", action="store_true", help="print each experiment, its command and where its records "
                    "go (make list); runs nothing")
    ap.add_argument("--targets", action="store_true", help="print make help's lines for each paper; runs nothing")
    ap.add_argument("--smoke", action="store_true", help="run the papers' smoke files (make smoke)")
    ap.add_argument("--force", action="store_true", help="GPU tier: start although the pre-flight's disk estimate "
                    "exceeds the free disk")
    ap.add_argument("--allow-dirty", action="store_true", help="publish from a tree with uncommitted changes (each "
                    "record says so); without it such a tree is refused before any run")
    args = ap.parse_args(argv)
    if not args.paper and (args.list or args.targets or args.smoke):
        from experiments.registry import PAPERS  # lazy: make help and make list name the papers, on any python
        args.paper = list(PAPERS)
    if args.list or args.targets:
        print("\n".join((listing if args.list else targets)(args.paper, args.hardware)))
        return 0

    def launch(overrides: list[str]) -> int:
        return subprocess.run([sys.executable, "-m", "experiments.run", "-m", *overrides], cwd=REPO).returncode

    if args.smoke:
        return smoke(args.paper, launch)
    if not args.paper:
        ap.error("name the papers to run")
    hub = hub_online()
    tiers = [(paper, experiments(paper, args.hardware, hub=hub)) for paper in args.paper]
    if args.hardware != "cpu" and not hub:
        for paper, names in tiers:
            skipped = sorted(set(experiments(paper, args.hardware)) - set(names))
            print(f"scripts.tier: {paper}: the hub is off: the packaged-model experiments only; skipped "
                  f"{', '.join(skipped) or 'none'} (STRATA_HUB=1 turns the hub on for models and datasets)")
    for paper, names in tiers:
        if not names:
            raise SystemExit(f"scripts.tier: paper {paper!r} has no {args.hardware} experiments")
    if args.hardware == "cpu":
        from experiments.results import git_dirty
        if git_dirty() and not args.allow_dirty:
            print("scripts.tier: refused: the tree has uncommitted changes and a tier publishes (publish=true), "
                  "which every run would refuse: commit first, or pass --allow-dirty (make <paper>-cpu "
                  "ALLOW_DIRTY=1; the records say so)", file=sys.stderr)
            return REFUSED
    else:
        from scripts import preflight
        if preflight.check(args.paper, args.hardware, force=args.force, allow_dirty=args.allow_dirty):
            return REFUSED
    return run_tiers(tiers, args.hardware, launch, out_dir=REPO / "outputs" / "tiers",
                     hours=None if args.hardware == "cpu" else estimates(),
                     extra=["allow_dirty=true"] if args.allow_dirty else [])


if __name__ == "__main__":
    sys.exit(main())
