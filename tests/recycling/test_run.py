"""method=recycling and method=recycling_bench through the suite's runner, on tiny-bert and the fixtures."""
import statistics

import pytest

from experiments.models import build, tokenizer_fingerprint
from experiments.run import execute

VARIANTS = ("full", "frozen", "reduced", "half_adapters", "full_adapters")


def run(smoke_cfg, tmp_path, *overrides):
    cfg = smoke_cfg("method=recycling", f"store.dir={tmp_path / 'store'}", *overrides)
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    return rec


@pytest.mark.slow  # several whole runs: 4-6 s; make test runs it
@pytest.mark.parametrize("task", ["wnut16", "squad-dev"])
def test_every_variant_runs_and_reports_its_trainable_share(task, smoke_cfg, tmp_path):
    m = {v: run(smoke_cfg, tmp_path, f"task={task}", f"method.variant={v}")["metrics"] for v in VARIANTS}
    pct = {v: m[v]["params/trainable_pct"] for v in VARIANTS}
    assert pct["full"] == 100.0 and pct["reduced"] == pct["frozen"] < 100.0
    assert all(m[v]["recycling/k"] == 2 for v in VARIANTS)  # N/2 of tiny-bert's 4 layers
    assert m["reduced"]["cache/train_computed"] > 0 and m["half_adapters"]["cache/train_computed"] == 0  # shared
    # each on its own scale: SQuAD F1 in percent, seqeval's entity F1 a fraction (a percent here would be a bug)
    key, top = ("eval/f1", 100.0) if task == "squad-dev" else ("eval/entity_f1", 1.0)
    assert all(0.0 <= m[v][key] <= top for v in VARIANTS)


def test_a_shuffled_second_epoch_reads_only_from_the_cache(smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, "train.max_steps=-1", "train.epochs=2", "train.patience=0", "method.variant=reduced")
    epochs = rec["extra"]["cache_epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert epochs[1]["hits"] == epochs[1]["examples"] == rec["n_samples"]["train_features"]
    assert epochs[1]["misses"] == epochs[1]["computed"] == 0 and rec["metrics"]["cache/last_epoch_hit_rate"] == 1.0


def test_frozen_bottom_and_cache_fed_training_agree_without_dropout(smoke_cfg, tmp_path):
    """With dropout off and an fp32 cache, training layers k+1..N from the cache is the same computation as
    training them above a frozen bottom (the paper's F): the same evaluations at every step."""
    no_dropout = ("+model.from_config.hidden_dropout_prob=0.0", "+model.from_config.attention_probs_dropout_prob=0.0",
                  "store.dtype=fp32", "task=wnut16")
    hist = {v: run(smoke_cfg, tmp_path, f"method.variant={v}", *no_dropout)["extra"]["history"]
            for v in ("frozen", "reduced")}
    assert len(hist["frozen"]) == len(hist["reduced"]) >= 2
    for a, b in zip(hist["frozen"], hist["reduced"]):
        assert a.keys() == b.keys()
        assert all(abs(a[k] - b[k]) <= 1e-6 for k in a)


def test_adapter_variants_use_the_adapter_learning_rate(smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, "method.variant=half_adapters", "method.adapter_lr=0.0")
    first, last = rec["extra"]["history"][0], rec["extra"]["history"][-1]
    assert first == {**last, "step": first["step"]}  # lr 0: nothing moves
    # the record keeps the config asked for (train.lr) and says the lr the adapters trained at
    assert rec["config"]["train"]["lr"] == smoke_cfg().train.lr > 0 and rec["metrics"]["train/lr"] == 0.0


def test_the_record_names_the_models_tokenizer(smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, "task=rt-polarity", "method.variant=reduced")
    cfg = smoke_cfg("method=recycling", "task=rt-polarity")
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(build(cfg.model, cfg.task)[0])


def bench(smoke_cfg, tmp_path, variant, *overrides):
    cfg = smoke_cfg("method=recycling_bench", f"method.variant={variant}", f"store.dir={tmp_path / 'store'}",
                    "method.n_batches=2", "method.batch_size=4", "method.seq_len=24", "method.steps=2",
                    "method.repeats=1", *overrides)
    rec = execute(cfg, tmp_path / variant)
    assert rec["status"] == "ok", rec.get("error")
    return rec


def test_training_benchmark_reports_the_papers_columns(smoke_cfg, tmp_path):
    rec = bench(smoke_cfg, tmp_path, "training", "method.repeats=3")
    m, rounds = rec["metrics"], rec["extra"]["rounds_ms"]
    for name in ("NR", "F", "R", "R_ram", "save", "SR"):
        assert m[f"time/{name}_ms"] > 0
    for name in ("NR", "F", "R", "R_ram", "save"):  # the median of the timed rounds, warm-up dropped
        assert len(rounds[name]) == 3 and m[f"time/{name}_ms"] == statistics.median(rounds[name])
    assert m["recycling/k"] == 2 and "k" not in rec["n_samples"]  # k is a setting, not a sample count
    # SR amortizes one cache-building epoch over sr_epochs = 6
    assert m["time/SR_ms"] == pytest.approx((m["time/save_ms"] + 6 * m["time/R_ms"]) / 6)
    assert m["speedup/NR_vs_R_pct"] == pytest.approx(100 * (m["time/NR_ms"] / m["time/R_ms"] - 1))


def test_inference_benchmark_is_faithful_to_the_full_model(smoke_cfg, tmp_path):
    rec = bench(smoke_cfg, tmp_path, "inference", "method.repeats=3")
    m, rounds = rec["metrics"], rec["extra"]["rounds_ms_per_batch"]
    assert m["time/baseline_ms"] == pytest.approx(statistics.median(rounds["baseline"]))  # ms per batch
    assert m["speedup/fp16_disk_pct"] == pytest.approx(100 * (m["time/baseline_ms"] / m["time/fp16_disk_ms"] - 1))
    assert {"time/baseline_ms", "time/fp16_disk_prefetch_ms", "time/fp32_ram_ms"} <= m.keys()
    assert m["fidelity/fp32_max_abs_logit"] <= 1e-5
    assert 0 < m["fidelity/fp16_max_abs_score"] <= 1e-3


def test_storage_is_tokens_times_d_times_bytes_and_epoch2_hits_everything(smoke_cfg, tmp_path):
    m = bench(smoke_cfg, tmp_path, "storage")["metrics"]
    d, tokens = m["storage/d"], m["storage/unique_tokens"]  # repeated examples are stored once
    assert m["storage/fp16_raw_bytes"] == m["storage/fp16_disk_bytes"] == tokens * d * 2
    assert m["storage/fp32_raw_bytes"] == m["storage/fp32_disk_bytes"] == tokens * d * 4
    assert m["storage/epoch2_hit_rate"] == 1.0 and m["storage/epoch2_computed"] == 0
