"""experiments/finetune.py: with a dev split the checkpoint is chosen on dev and eval is scored once, at the chosen
weights (the bio-NER tasks report test after selecting on validation, as the paper does)."""
from types import SimpleNamespace

import pytest
import torch

from experiments.run import execute
from experiments import REPO


def test_dev_split_selects_the_checkpoint_and_eval_never_does(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("task.dev_from_train=0.25"), tmp_path / "run")
    m, n = rec["metrics"], rec["n_samples"]
    assert rec["status"] == "ok" and {"dev/accuracy", "eval/accuracy"} <= set(m)
    history = rec["extra"]["history"]
    assert len(history) == 2 and all(k.startswith("dev/") for h in history for k in h if k != "step")
    assert m["dev/accuracy"] == max(h["dev/accuracy"] for h in history)  # the restored checkpoint's
    fixture_train = sum('"split": "train"' in line for line in (REPO / "tests/fixtures/rt-polarity.jsonl").open())
    assert n["dev_examples"] == round(0.25 * fixture_train) and n["dev_examples"] + n["train_examples"] == fixture_train
    assert len(rec["per_example"]["eval"]["pred"]) == n["eval_examples"]  # per-example scores are eval's


def test_without_dev_the_eval_split_selects_as_before(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("task.dev_from_train=null"), tmp_path / "run")  # the CPU budget files set one
    assert not any(k.startswith("dev/") for k in rec["metrics"]) and "dev_examples" not in rec["n_samples"]


def test_the_recipe_encodes_dev_and_refuses_to_feed_it_token_ids_beside_custom_eval_inputs(smoke_cfg, tmp_path):
    """A cache-fed model reads eval through its own inputs; choosing its checkpoint on dev through token ids would
    score a different model, so the recipe refuses before any training."""
    from experiments import recipe
    cfg = smoke_cfg("task.dev_from_train=0.25")
    tok, model, splits = recipe.prepare(cfg)
    assert splits.dev is not None and len(splits.dev) == len(splits.raw["dev"]) > 0
    with pytest.raises(ValueError, match="pass dev_inputs"):
        recipe.fit_and_score(cfg, None, model, splits, None, 0, tok.pad_token_id, eval_inputs=object())


def test_cpu_budgets_carve_a_dev_split_from_train_for_every_offline_task():
    from experiments.config import compose
    for task in ("rt-polarity", "vitaminc", "wnut16", "squad-dev"):
        cfg = compose(f"task={task}")
        assert 0 < cfg.task.dev_from_train < 0.2 and cfg.train.patience >= 0 and cfg.data.limit_train


def test_dataloader_workers_change_no_result(smoke_cfg, tmp_path):
    """Workers pad the batches in other processes; the run's metrics and per-example predictions stay the same."""
    recs = [execute(smoke_cfg("task.dev_from_train=0.25", f"hardware.num_workers={w}"), tmp_path / f"run{w}")
            for w in (0, 2)]
    assert [r["status"] for r in recs] == ["ok", "ok"]
    metrics = [{k: v for k, v in r["metrics"].items() if not k.startswith("time/")} for r in recs]
    assert metrics[0] == metrics[1] and recs[0]["per_example"] == recs[1]["per_example"]
    assert recs[0]["extra"]["history"] == recs[1]["extra"]["history"]


@pytest.mark.slow
def test_trainer_bench_walks_at_tiny_size_and_records_both_arms(tmp_path, monkeypatch):
    """method=finetune_bench on tiny-bert: every timed step of both arms is in the record (no timing asserted)."""
    from experiments.config import compose
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)
    cfg = compose("experiment=finetune/bench_trainer", "debug=smoke", "method.steps=2", "method.repeats=2",
                  "method.warmup=1", "train.grad_accum=2", f"results_dir={tmp_path / 'results'}")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok", rec.get("error")
    t = rec["extra"]["benchmark"]["timing"]
    assert {k: len(v) for k, v in t["step_times_s"].items()} == {"ours": 4, "trainer": 4}  # warm-up steps dropped
    assert {k: len(v) for k, v in t["call_times_s"].items()} == {"ours": 2, "trainer": 2}
    med = t["step_median_s"]
    assert rec["metrics"]["time/step_ratio"] == pytest.approx(med["ours"] / med["trainer"])
    assert rec["extra"]["benchmark"]["data"]["batches"] == 4  # 2 steps x 2 micro-batches, the same for both arms
    assert not [p for p in (tmp_path / "run").rglob("bench-finetune-*")]  # Trainer's output_dir is removed
    with pytest.raises(ValueError, match="method.steps=500"):
        from experiments.bench_finetune import measure
        ctx = SimpleNamespace(device=torch.device("cpu"), n_samples={}, output_dir=str(tmp_path / "x"))
        measure(compose("experiment=finetune/bench_trainer", "debug=smoke", "method.steps=500"), ctx)
