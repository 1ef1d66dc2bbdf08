"""Every job of every layer_fusion experiment grid passes the method's own refusals before any work (the runner's
are tests/test_identity.py), and the CPU tier is the *_cpu files."""
import pytest
from omegaconf import OmegaConf

from layer_fusion import run as R
from scripts.tier import experiments
from tests.conftest import CONF
from tests.test_identity import GROUPS, compose_experiment, grid_jobs

EXPERIMENTS = sorted(f"layer_fusion/{p.stem}" for p in (CONF / "experiment" / "layer_fusion").glob("*.yaml"))


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_job_passes_the_methods_checks(exp):
    base, params = compose_experiment(exp)
    for job in grid_jobs(params):
        cfg = base.copy()
        for k, v in (o.split("=", 1) for o in job):
            OmegaConf.update(cfg, f"{k}.name" if k in GROUPS else k, v, force_add=True)
        if cfg.method.name != "layer_fusion_params":
            R.check(cfg)


def test_the_cpu_tier_and_the_gpu_tier():
    cpu = experiments("layer_fusion", "cpu")
    assert "fewshot_cpu" in cpu and "p32_cpu" in cpu and all(n.endswith("_cpu") for n in cpu)
    gpu = experiments("layer_fusion", "gpu", hub=False)
    assert gpu == ["offline_gpu_fewshot", "offline_gpu_ft", "offline_gpu_p32"]
    assert not any(n.startswith("smoke") for n in experiments("layer_fusion", "gpu"))


@pytest.mark.parametrize("exp", ["layer_fusion/fewshot_grid", "layer_fusion/fe_vs_ft", "layer_fusion/learning_curves",
                                 "layer_fusion/base_vs_large"])
def test_conll03_grids_choose_on_validation_and_report_test(exp):
    """DWAtt's CoNLL-03 grids report the best dev F1 (dev = validation, as the paper) and score test once; a config
    with no dev split is refused by the method's checks before any work."""
    cfg, _ = compose_experiment(exp)
    assert cfg.task.name == "conll2003"
    assert dict(cfg.task.splits) == {"train": "train", "dev": "validation", "eval": "test"}
    R.check(cfg)
    cfg.task.splits = {"train": "train", "eval": "validation"}
    with pytest.raises(ValueError, match=r"task=conll2003 has no dev split .*dev: validation"):
        R.check(cfg)
