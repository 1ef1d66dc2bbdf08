"""Every job of every EAT experiment grid passes the method's own refusals (the runner's are tests/test_identity.py):
a child experiment that inherits its parent's sweep over training arms must override it with its own variant."""
import pytest
from omegaconf import OmegaConf

from eat import bench as B
from eat import run as R
from tests.conftest import CONF
from tests.test_identity import GROUPS, compose_experiment, grid_jobs

EAT = sorted(f"eat/{p.stem}" for p in (CONF / "experiment" / "eat").glob("*.yaml"))


@pytest.mark.parametrize("exp", EAT)
def test_every_job_passes_the_methods_checks(exp):
    base, params = compose_experiment(exp)
    jobs = grid_jobs(params)
    for job in jobs:
        cfg = base.copy()
        for k, v in (o.split("=", 1) for o in job):
            OmegaConf.update(cfg, f"{k}.name" if k in GROUPS else k, v, force_add=True)
        (B.check if cfg.method.name == "eat_bench" else R.check)(cfg)


def test_a_bench_given_a_training_arm_is_refused():
    cfg, _ = compose_experiment("eat/ablation_cpu", "method.variant=dense")
    with pytest.raises(ValueError, match="training arms"):
        B.check(cfg)


@pytest.mark.parametrize("exp", EAT)
def test_every_experiment_chooses_tau_on_the_papers_grid(exp):
    # [P]: tau in {0.80, 0.85, 0.90, 0.95}; anything else is a labelled extension (method.extension_taus)
    cfg, _ = compose_experiment(exp)
    assert list(cfg.method.taus) == [0.8, 0.85, 0.9, 0.95]
    assert not set(cfg.method.get("extension_taus") or []) & {0.8, 0.85, 0.9, 0.95}
