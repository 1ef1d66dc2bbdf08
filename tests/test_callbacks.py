"""The end-of-sweep summary (experiments/callbacks.py): this launch's jobs only, swept keys as columns."""
import logging
import os
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from experiments import REPO
from experiments.callbacks import SweepSummary
from experiments.files import write_json

BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def _record(lr, seed, acc, status="ok"):
    return {"run_id": f"rt-polarity--tiny-bert--finetune-full--seed{seed}--train.lr={lr}", "status": status,
            "config": {"task": {"name": "rt-polarity", "objective": "eval/accuracy"}, "model": {"name": "tiny-bert"},
                       "method": {"name": "finetune", "variant": "full"}},
            "metrics": {"eval/accuracy": acc} if status == "ok" else {},
            "overrides": [f"train.lr={lr}", f"seed={seed}", "data.limit_train=20"]}


def _hydra(sweep, output_dir=None):
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}, "launcher": {"_target_": BASIC},
                                       "runtime": {"output_dir": str(output_dir)}}})


def _summary(caplog, cb, sweep) -> str:
    with caplog.at_level(logging.INFO, logger="strata"):
        cb.on_multirun_end(config=_hydra(sweep))
    return "\n".join(r.getMessage() for r in caplog.records)


def test_the_summary_covers_only_this_launchs_jobs_with_swept_keys_as_columns(tmp_path, caplog):
    sweep = tmp_path / "adhoc"
    write_json(sweep / "cpu" / "earlier" / "result.json", _record("9e-9", 0, 0.1, status="failed"))  # another sweep's
    cb = SweepSummary()
    cb.on_multirun_start(config=_hydra(sweep))
    for lr, seed, acc in (("1e-3", 0, 0.6), ("1e-3", 1, 0.8), ("2e-3", 0, 0.5), ("2e-3", 1, 0.5)):
        job = sweep / "cpu" / f"{lr}-{seed}"
        write_json(job / "result.json", _record(lr, seed, acc))
        cb.on_job_end(config=_hydra(sweep, job), job_return=None)
    text = _summary(caplog, cb, sweep)
    assert "4 runs, 0 failed (this launch's jobs: 4 ran, 0 skipped" in text
    assert "9e-9" not in text and "failed runs" not in text
    assert "| task | model | method | train.lr | metric | value | ± | n | failed |" in text  # seed and the fixed
    assert "| rt-polarity | tiny-bert | finetune-full | 1e-3 | eval/accuracy | 0.7000 | 0.1414 | 2 | 0 |" in text
    assert "| rt-polarity | tiny-bert | finetune-full | 2e-3 | eval/accuracy | 0.5000 | 0.0000 | 2 | 0 |" in text


def test_jobs_run_elsewhere_are_found_by_when_their_folder_was_written(tmp_path, caplog):
    """Under submitit each job's callbacks live in its own process: the launcher's summary falls back to the job
    folders Hydra wrote since the launch began, and says so."""
    sweep, old = tmp_path / "adhoc", time.time() - 3600
    cb = SweepSummary()
    cb.on_multirun_start(config=_hydra(sweep))
    for name, lr, seed, acc, status, started, finished in (("earlier", "9e-9", 0, 0.1, "failed", old, old),
                                                            ("skipped", "1e-3", 0, 0.6, "ok", None, old),
                                                            ("ran", "1e-3", 1, 0.8, "ok", None, None),
                                                            ("broke", "1e-3", 2, 0.0, "failed", None, None)):
        job = sweep / "cpu" / name
        write_json(job / "result.json", _record(lr, seed, acc, status))
        (job / ".hydra").mkdir()
        (job / ".hydra" / "overrides.yaml").write_text("[]")
        for path, t in ((job / ".hydra" / "overrides.yaml", started), (job / "result.json", finished)):
            if t is not None:
                os.utime(path, (t, t))
    text = _summary(caplog, cb, sweep)
    assert "3 runs, 1 failed (this launch's jobs: 2 ran, 1 skipped as finished; the jobs ran in other processes" in text
    assert "9e-9" not in text and "failed runs (see their result.json for the traceback): rt-polarity" in text
    assert "| rt-polarity | tiny-bert | finetune-full | eval/accuracy | 0.7000 | 0.1414 | 2 | 1 |" in text


@pytest.mark.slow
def test_a_second_sweep_into_the_same_folder_summarises_only_its_own_jobs(tmp_path):
    """Hydra's basic launcher calls on_job_end in the launching process: seed 1 is skipped, seed 0 not shown."""
    def sweep(seeds):
        proc = subprocess.run([sys.executable, "-m", "experiments.run", "-m", "debug=smoke", f"seed={seeds}",
                               f"hydra.sweep.dir={tmp_path / 'adhoc'}", f"results_dir={tmp_path / 'results'}"],
                              cwd=REPO, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr + proc.stdout
    sweep("0,1")
    text = sweep("1,2")
    assert "2 runs, 0 failed (this launch's jobs: 1 ran, 1 skipped as finished)" in text
    row = [line for line in text.splitlines() if line.startswith("| rt-polarity | tiny-bert | finetune-full |")]
    assert len(row) == 1 and row[0].endswith(" | 2 | 0 |"), text[-2000:]
