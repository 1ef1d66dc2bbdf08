"""Hydra callbacks: after a -m sweep, one markdown summary of every job (status, objective, wall time)."""
from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.results import read_json

log = logging.getLogger("strata")


def summary_table(records: list[dict]) -> str:
    lines = ["| run | status | objective | value | wall s |", "|---|---|---|---|---|"]
    for r in records:
        objective = r.get("config", {}).get("task", {}).get("objective", "")
        value = r.get("metrics", {}).get(objective)
        shown = f"{value:.4f}" if isinstance(value, float) else "—"
        wall = r.get("provenance", {}).get("wall_s", "—")
        lines.append(f"| {r.get('run_id')} | {r.get('status')} | {objective} | {shown} | {wall} |")
    return "\n".join(lines)


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep = Path(config.hydra.sweep.dir)
        records = [r for p in sorted(sweep.rglob("result.json")) if (r := read_json(p))]
        if not records:
            return
        failed = [r["run_id"] for r in records if r.get("status") != "ok"]
        log.info("sweep %s: %d runs, %d failed (records: %s/<hardware>/<run_id>/result.json; "
                 "`python -m experiments.report --runs %s` renders them)\n%s", sweep, len(records), len(failed), sweep,
                 sweep, summary_table(records))
        if failed:
            log.warning("failed runs (see their result.json for the traceback): %s", ", ".join(failed))
