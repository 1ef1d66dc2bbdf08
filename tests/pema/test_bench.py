"""pema.bench (method=pema_bench): preparation time, interleaved step times and the memory of both arms."""
import copy

import numpy as np
import pytest
import torch

from experiments import recipe, registry
from experiments.config import compose
from experiments.context import RunContext
from experiments.models import byte_tokenizer, tokenizer_fingerprint
from experiments.run import execute
from experiments.train import fit
from pema import bench


def test_pema_bench_is_its_own_entry_point():
    assert registry.resolve("pema_bench") is bench.run


def test_first_batches_run_on_over_epochs(tmp_path):
    cfg = compose("debug=smoke", "method=pema_bench")  # 46 training rows in batches of 8: 6 a epoch
    ctx = RunContext(tmp_path, torch.device("cpu"), "cpu")
    tok, _, splits = recipe.prepare(cfg)
    epoch0, n = recipe.token_batches(cfg, ctx, splits.train, tok.pad_token_id)
    out = bench.first_batches(cfg, ctx, splits.train, tok.pad_token_id, n + 2)
    assert len(out) == n + 2 and n == 6
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(out, epoch0(0)))  # the run's order
    assert torch.equal(out[n]["input_ids"], next(iter(epoch0(1)))["input_ids"])  # then the next epoch's


def test_an_optimizer_step_is_the_shared_loops_step(tmp_path):
    """The benchmark steps as experiments.train.fit does (its AdamW, its clipping): one step from the same weights,
    batch and dropout masks gives the same weights (fit's first step runs at the base rate, before its schedule
    moves it)."""
    cfg = compose("debug=smoke", "train.max_steps=1", "train.warmup_ratio=0", "train.max_grad_norm=0.01",
                  "train.lr=1e-2", "train.eval_every=1000")
    ctx = RunContext(tmp_path, torch.device("cpu"), "cpu")
    tok, ours, splits = recipe.prepare(cfg)
    theirs, start = copy.deepcopy(ours), copy.deepcopy(ours)
    batch = bench.first_batches(cfg, ctx, splits.train, tok.pad_token_id, 1)
    torch.manual_seed(0)
    steps, _ = bench.optimizer_steps(ours, cfg.train, torch.device("cpu"))
    steps(batch)
    torch.manual_seed(0)
    fit(theirs, lambda epoch: batch, 1, cfg.train, evaluate=lambda m: {"eval/none": 0.0}, objective="eval/none",
        higher_is_better=True, device=torch.device("cpu"))
    assert not all(torch.equal(p, q) for p, q in zip(ours.parameters(), start.parameters()))
    assert all(torch.equal(p, q) for p, q in zip(ours.parameters(), theirs.parameters()))


def test_memory_savings_pair_each_rounds_arms():
    mem = bench.Memory("probe", state={"full": [10.0, 30.0, 13.0], "pema": [4.0, 1.0, 12.0]})
    assert mem.paired_median(mem.state) == 6.0  # rounds save 6, 29, 1; not median(full) - median(pema) = 9


@pytest.mark.slow
def test_bench_run_records_memory_and_timing(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("method=pema_bench", "method.steps=2", "method.repeats=2", "method.prepare_repeats=1",
                            "method.memory_rounds=1", "method.memory_steps=1"), tmp_path / "b")
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    removed = (m["pema/vocab_rows"] - m["pema/vocab_used"]) * 32
    assert m["mem/analytic_saving_mb"] * 2**20 == pytest.approx(removed * 4 * 4)  # weights, grads, 2 moments, fp32
    assert m["pema/vocab_used"] == 25  # V' of the rt-polarity fixture's train + eval
    assert m["time/step_ratio"] > 0 and m["time/pema_prepare_s"] > 0 and np.isfinite(m["mem/measured_saving_mb"])
    assert rec["extra"]["probe"].startswith("cpu peak RSS")
    assert [len(rec["extra"]["step_times_s"][arm]) for arm in ("full", "pema")] == [2, 2]
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(byte_tokenizer())
    assert not list((tmp_path / "b").glob("pema-bench-*"))  # the offloaded matrices are gone
