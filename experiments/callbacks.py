"""Hydra callbacks: after a -m sweep, one summary of the jobs this launch ran or skipped, never of the other records in
its folder (every ad-hoc sweep shares outputs/sweeps/adhoc): a row per configuration with the swept keys as columns,
the objective as mean ± sd over seeds with n, and the failures."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from statistics import mean, stdev

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.identity import override_key
from experiments.results import read_json
from experiments.evidence.tables import natural

log = logging.getLogger("strata")
OWN_COLUMN = {"task", "model", "method", "method.name", "method.variant", "seed"}  # a column of their own, or averaged
SLACK_S = 2.0  # file systems that store whole seconds


def overrides_of(record: dict) -> dict[str, str]:
    """key -> value of the job's overrides (a deletion `~key=v` reads `~v`)."""
    return {override_key(o): ("~" if o.startswith("~") else "") + o.partition("=")[2]
            for o in record.get("overrides") or ()}


def swept_keys(records: list[dict]) -> list[str]:
    """The override keys whose value differs between the jobs, seed aside (seeds are averaged)."""
    values = [overrides_of(r) for r in records]
    keys = sorted({k for v in values for k in v} - OWN_COLUMN, key=natural)
    return [k for k in keys if len({v.get(k) for v in values}) > 1]


def summary_table(records: list[dict]) -> str:
    """task | model | method | <swept keys> | metric | value | ± | n | failed: the objective's mean ± sd over the ok
    runs of a configuration (its seeds), n of them, and how many of its runs failed."""
    cols = swept_keys(records)
    rows: dict[tuple, list[dict]] = {}
    for r in records:
        c, swept = r.get("config") or {}, overrides_of(r)
        method = c.get("method") or {}
        key = ((c.get("task") or {}).get("name"), (c.get("model") or {}).get("name"),
               f"{method.get('name')}-{method.get('variant')}", *(swept.get(k, "—") for k in cols))
        rows.setdefault(tuple(str(x) for x in key), []).append(r)
    lines = ["| " + " | ".join(["task", "model", "method", *cols, "metric", "value", "±", "n", "failed"]) + " |",
             "|---" * (len(cols) + 8) + "|"]
    for key, rs in sorted(rows.items(), key=lambda kv: natural(kv[0])):
        objective = ((rs[0].get("config") or {}).get("task") or {}).get("objective", "")
        xs = [float(v) for r in rs if r.get("status") == "ok"
              if isinstance(v := (r.get("metrics") or {}).get(objective), (int, float))]
        value = f"{mean(xs):.4f}" if xs else "—"
        sd = f"{stdev(xs):.4f}" if len(xs) > 1 else "—"
        failed = sum(r.get("status") != "ok" for r in rs)
        lines.append("| " + " | ".join([*key, objective, value, sd, str(len(xs)), str(failed)]) + " |")
    return "\n".join(lines)


def written_since(sweep: Path, started: float) -> list[Path]:
    """Job folders whose .hydra/overrides.yaml, which Hydra rewrites for every job it starts (a skipped one too), is
    newer than `started`."""
    return sorted(p.parent.parent for p in Path(sweep).glob("**/.hydra/overrides.yaml")
                  if p.stat().st_mtime >= started - SLACK_S)


class SweepSummary(Callback):
    def __init__(self) -> None:
        self.job_dirs: list[Path] = []
        self.started = time.time()

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self.job_dirs, self.started = [], time.time()

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        # runs in the process that ran the job: the launching one for Hydra's basic launcher
        self.job_dirs.append(Path(config.hydra.runtime.output_dir))

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep = Path(config.hydra.sweep.dir)
        dirs, how = list(dict.fromkeys(self.job_dirs)), ""
        if not dirs:  # the jobs ran in other processes (submitit, SLURM): their job lists stayed there
            dirs = written_since(sweep, self.started)
            how = (f"; the jobs ran in other processes ({config.hydra.launcher.get('_target_', '?')}), so these are "
                   "the job folders written since this launch began: a sweep writing there at the same time, or a "
                   "node whose clock is off, would change the count")
        if not dirs:
            return
        found = [(d, read_json(d / "result.json")) for d in dirs]
        records = [r for _, r in found if r]
        missing = [str(d) for d, r in found if not r]
        failed = [r["run_id"] for r in records if r.get("status") != "ok"]
        skipped = sum((d / "result.json").stat().st_mtime < self.started - SLACK_S for d, r in found if r)
        log.info("sweep %s: %d runs, %d failed (this launch's jobs: %d ran, %d skipped as finished%s)\n"
                 "records: %s/<hardware>/<run_id>/result.json; `python -m experiments.report --runs %s` renders "
                 "every record there, earlier sweeps' included\n%s", sweep, len(dirs), len(failed) + len(missing),
                 len(dirs) - skipped, skipped, how, sweep, sweep, summary_table(records))
        if failed:
            log.warning("failed runs (see their result.json for the traceback): %s", ", ".join(failed))
        if missing:
            log.warning("jobs without a result.json (killed before writing one; rerun the sweep): %s",
                        ", ".join(missing))
