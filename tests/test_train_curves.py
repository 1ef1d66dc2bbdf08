"""Every training loop that has a RunContext streams its training curves (loss, learning rate, throughput) to the
run's logger, on increasing steps, and a method that trains twice in one run keeps them increasing."""
import pytest

from experiments.run import execute
from experiments.config import compose


class FakeRun:
    """What experiments.run uses of a wandb run."""

    def __init__(self):
        self.logged, self.summary = [], {}

    def log(self, metrics, step=None):
        self.logged.append((step, dict(metrics)))

    def finish(self):
        pass


@pytest.mark.parametrize("overrides", [
    ["debug=smoke"],  # experiments.train.fit, through experiments.finetune
    ["experiment=pema/smoke", "method=pema_scores"],  # two arms in one run
    ["experiment=eat/smoke", "method.variant=eat", "force=true"],  # force: retrain, not the cached checkpoint
    ["experiment=layer_fusion/smoke", "method.fusion=scalar_mix"],
    ["experiment=reverse_probing/smoke"],  # its own coreference loop
    ["experiment=intrinsic_dim/smoke", "method.variant=sft"],  # the LoRA loop
], ids=["finetune", "pema_scores", "eat", "layer_fusion", "reverse_probing", "intrinsic_dim_sft"])
@pytest.mark.slow  # several whole runs: 4-6 s; make test runs it
def test_a_logged_run_has_training_curves(overrides, tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))  # fresh stores and checkpoint caches: it trains
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)
    runs = []
    monkeypatch.setattr(wandb, "init", lambda **kw: runs.append(FakeRun()) or runs[-1])
    cfg = compose(*overrides, "logger=wandb", "hardware.threads=1", f"results_dir={tmp_path / 'results'}")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok", rec.get("error")
    (run,) = runs
    points = [(s, m) for s, m in run.logged if "train/loss" in m]
    assert points, run.logged
    assert all(m["train/lr"] >= 0 and m["train/examples_per_s"] > 0 for _, m in points)
    steps = [s for s, _ in run.logged if s is not None]
    assert steps == sorted(steps) and len(set(s for s, _ in points)) == len(points)
    if "method=pema_scores" in overrides:  # both arms are on the chart, the second after the first
        n = int(rec["metrics"]["train/steps"])
        assert [s for s, _ in points] == list(range(1, 2 * n + 1))
