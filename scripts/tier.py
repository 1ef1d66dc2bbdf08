"""Run one paper's tier, experiment after experiment, with a progress line per experiment and a timing summary.

    python -m scripts.tier recycling                  # CPU tier: conf/experiment/recycling/*_cpu.yaml
    python -m scripts.tier recycling --hardware gpu   # GPU tier: offline_* files (packaged models, full data);
    HF_HUB_OFFLINE=0 python -m scripts.tier recycling --hardware gpu   # + the paper-scale files (hub ids)

Each experiment is `python -m experiments.run -m experiment=<paper>/<name>` (finished runs skip, so a killed tier
resumes where it stopped). The wall time of each experiment and of the tier goes to
outputs/tiers/<paper>-<hardware>.json beside the commit it ran from: the figures the README's tier times quote."""
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


def experiments(paper: str, hardware: str, conf: Path = REPO / "conf" / "experiment", hub: bool = True) -> list[str]:
    """The tier's experiment files in run order (sorted names): `*_cpu` on CPU, the others (smoke* aside) otherwise;
    without the hub (`hub=False`) only the `offline_*` ones, which need nothing but the packaged assets."""
    folder = conf / paper
    if not folder.is_dir():
        known = sorted(p.name for p in conf.iterdir() if p.is_dir())
        raise SystemExit(f"scripts.tier: no experiments for paper {paper!r} ({folder} missing); papers: "
                         f"{', '.join(known)}")
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    cpu = hardware == "cpu"
    return [n for n in names
            if n.endswith("_cpu") == cpu and not n.startswith("smoke") and (hub or cpu or n.startswith("offline"))]


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
        cmd = [f"experiment={paper}/{name}"] + ([] if hardware == "cpu" else [f"hardware={hardware}"])
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


def _write(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)  # atomic: a killed tier never leaves half a summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paper")
    ap.add_argument("--hardware", default="cpu", help="cpu (the *_cpu experiments) or a hardware config (gpu)")
    args = ap.parse_args(argv)
    hub = os.environ.get("HF_HUB_OFFLINE", "1") == "0"
    names = experiments(args.paper, args.hardware, hub=hub)
    if args.hardware != "cpu" and not hub:
        skipped = sorted(set(experiments(args.paper, args.hardware)) - set(names))
        print(f"scripts.tier: offline (HF_HUB_OFFLINE != 0): the packaged-model experiments only; skipped "
              f"{', '.join(skipped) or 'none'} (hub models and data: HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0)")
    if not names:
        raise SystemExit(f"scripts.tier: paper {args.paper!r} has no {args.hardware} experiments")

    def launch(overrides: list[str]) -> int:
        return subprocess.run([sys.executable, "-m", "experiments.run", "-m", *overrides], cwd=REPO).returncode

    return run_tier(args.paper, args.hardware, names, launch,
                    out=REPO / "outputs" / "tiers" / f"{args.paper}-{args.hardware}.json")


if __name__ == "__main__":
    sys.exit(main())
