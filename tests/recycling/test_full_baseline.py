"""Full is computed once: recycling's tier runs no variant=full, and its Full arm (tables and claims) resolves to the
finetune tier's records, trained with an identical model, task, dev split, caps, schedule, lr grid and seeds."""
import pytest
from omegaconf import OmegaConf

from experiments.evidence import claims, records, selection
from tests.helpers.grids import compose_experiment, grid_jobs

# (recycling experiment, the finetune experiment its Full arm comes from)
PAIRS = [("recycling/table1_cpu", "finetune/default_cpu"), ("recycling/table2_cpu", "finetune/default_cpu"),
         ("recycling/table2_full_adapters_cpu", "finetune/default_cpu"),
         ("recycling/depth_cpu", "finetune/default_cpu"), ("recycling/offline_gpu", "finetune/offline_gpu")]
SAME_GRID = ("recycling/table1_cpu", "recycling/offline_gpu")


def _jobs(exp):
    cfg, params = compose_experiment(exp)
    return {tuple(job): job for job in grid_jobs(params)}, params


def _record(exp, job):
    cfg, _ = compose_experiment(exp, *job)
    return {"config": OmegaConf.to_container(cfg, resolve=True), "metrics": {}}


@pytest.mark.parametrize("rec_exp,ft_exp", PAIRS)
def test_recycling_tier_runs_no_full_and_shares_the_full_grid(rec_exp, ft_exp):
    _, rparams = compose_experiment(rec_exp)
    _, fparams = compose_experiment(ft_exp)
    assert "full" not in str(rparams.get("method.variant", "")).split(",")
    # tasks, models and seeds of ours are among Full's; the lr grid of the fully trained variants is Full's
    for key in ("task", "model", "seed"):
        if key in rparams:
            assert set(str(rparams[key]).split(",")) <= set(str(fparams.get(key, "")).split(",")), key
    if rec_exp in SAME_GRID:  # Rdc (k = N/2) and Full are selected from one grid
        assert rparams["train.lr"] == fparams["train.lr"]
    cfg, _ = compose_experiment(rec_exp)
    assert cfg.method.variant != "full" and cfg.store.dtype == "fp32"  # accuracy runs: the paper's fp32 cache


@pytest.mark.slow  # several whole runs: 4-6 s; make test runs it
@pytest.mark.parametrize("rec_exp,ft_exp", PAIRS)
def test_full_arm_resolves_to_finetune_records_with_identical_train_and_data(rec_exp, ft_exp):
    rjobs, _ = _jobs(rec_exp)
    fjobs, _ = _jobs(ft_exp)
    registry = claims.load_claims("recycling")
    assert "finetune" in registry.baselines_from
    b_full = next(c for c in registry.claims if c.id == "half-adapters-close-to-full").comparisons[0].b
    checked = 0
    for job in list(rjobs)[:4]:  # a few jobs of ours: each finds its Full among the finetune jobs (at any lr)
        mine = _record(rec_exp, job)
        c = mine["config"]
        same = {"task": c["task"]["name"], "model": c["model"]["name"], "seed": str(c["seed"])}
        fulls = [j for j in fjobs if all(f"{k}={v}" in j for k, v in same.items()
                                         if any(x.startswith(f"{k}=") for x in j))]
        assert fulls, (rec_exp, job)
        full = _record(ft_exp, fulls[0])
        assert (full["config"]["task"]["name"], full["config"]["model"]["name"], full["config"]["seed"]) == \
            (c["task"]["name"], c["model"]["name"], c["seed"])
        assert full["config"]["data"] == c["data"] and full["config"]["task"] == c["task"]
        assert {k: v for k, v in full["config"]["train"].items() if k != "lr"} == \
            {k: v for k, v in c["train"].items() if k != "lr"}
        assert full["config"]["model"] == c["model"] and full["config"]["hardware"] == c["hardware"]
        assert selection.same_training(full, mine)
        assert records.matches(full, b_full)  # the claims' Full arm selects the finetune record
        checked += 1
    assert checked


def test_same_training_refuses_other_caps():
    a = {"config": {"model": {"name": "m"}, "task": {"name": "t", "dev_from_train": 0.1}, "data": {"limit_train": 10},
                    "train": {"lr": 1e-4, "epochs": 2}, "method": {"name": "finetune"}, "seed": 0}}
    b = {"config": {**a["config"], "train": {"lr": 2e-4, "epochs": 2}, "method": {"name": "recycling"}, "seed": 1}}
    assert selection.same_training(a, b)
    b["config"]["data"] = {"limit_train": 20}
    assert not selection.same_training(a, b)
