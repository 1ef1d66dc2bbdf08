"""method=eat and method=eat_bench through the suite's runner on tiny-bert and the rt-polarity fixture (EAT's heads one
layer shallower: conf/debug/method/smoke_eat*.yaml): every arm and benchmark runs, the record names the model's
tokenizer, trained weights are cached and reused (a corrupt cache is retrained, never read), and bad configs are
refused before any work."""
import json

import numpy as np
import pytest

from experiments.models import load_tokenizer, tokenizer_fingerprint
from experiments.run import execute


def run(smoke_cfg, tmp_path, *overrides, method="eat", out=None):
    """One run; `out` gives it an output directory of its own, so a finished run is not skipped."""
    cfg = smoke_cfg(f"method={method}", f"method.checkpoint_dir={tmp_path / 'ckpt'}", *overrides)
    rec = execute(cfg, tmp_path / "out" / (out or cfg.run_id))
    assert rec["status"] == "ok", rec.get("error")
    return rec


@pytest.mark.parametrize("variant", ["dense", "eat", "paper_code"])
def test_every_arm_runs_and_reports_the_papers_columns(variant, smoke_cfg, tmp_path):
    m = run(smoke_cfg, tmp_path, f"method.variant={variant}")
    rec = m["metrics"]
    assert 0 <= rec["eval/accuracy"] <= 1 and 1 <= rec["eval/avg_depth"] <= 4
    if variant == "dense":
        assert rec["eval/avg_retention"] == 1.0 and rec["eval/avg_depth"] == 4
    else:
        assert rec["eval/avg_retention"] < 1.0  # pruned after layers 1 and 2
        assert {f["tau"] for f in m["extra"]["frontier"]} == {0.8, 0.85, 0.9, 0.95}
        assert "calib/ece_eval_before" in rec and rec["calib/temperature"] > 0
    pe = m["per_example"]["eval"]
    assert np.mean(np.asarray(pe["pred"]) == np.asarray(pe["label"])) == pytest.approx(rec["eval/accuracy"])
    ex = m["extra"]
    assert [d["layer"] for d in ex["layers"]] == [1, 2, 3, 4] and ex["layers"][0]["running"] == 1.0
    assert ex["model_dims"]["layers"] == 4 and ex["seq_len_mean"] > 0 and isinstance(ex["tau_choice"], str)
    assert np.mean([d["running"] for d in ex["layers"]]) == pytest.approx(rec["eval/avg_depth"] / 4)
    # noted where the arm's data was tokenized, not set by the method
    assert m["provenance"]["tokenizer"] == tokenizer_fingerprint(load_tokenizer(smoke_cfg("method=eat").model))


def test_trained_weights_are_cached_and_a_corrupt_cache_is_retrained(smoke_cfg, tmp_path):
    first = run(smoke_cfg, tmp_path, out="first")
    again = run(smoke_cfg, tmp_path, out="again")
    assert not first["extra"]["checkpoint_cached"] and again["extra"]["checkpoint_cached"]
    assert again["metrics"]["eval/accuracy"] == first["metrics"]["eval/accuracy"]
    assert again["per_example"] == first["per_example"]
    (weights,) = (tmp_path / "ckpt").glob("eat-*/weights.safetensors")
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    healed = run(smoke_cfg, tmp_path, out="healed")
    assert not healed["extra"]["checkpoint_cached"]
    assert healed["per_example"] == first["per_example"]  # retrained from the same seed: the same model


@pytest.mark.slow  # several whole runs: 4-6 s; make test runs it
def test_changed_weights_or_data_or_force_never_reuse_a_checkpoint(smoke_cfg, tiny_assets, tmp_path):
    on = (*tiny_assets.model(seed=0), *tiny_assets.data(40))

    def fresh(*overrides, out):
        rec = run(smoke_cfg, tmp_path, *on, *overrides, out=out)
        return rec["extra"]["checkpoint_cached"], rec["per_example"]
    assert fresh(out="a")[0] is False and fresh(out="b")[0] is True
    tiny_assets.model(seed=1)  # the model's weights rebuilt
    assert fresh(out="c")[0] is False
    tiny_assets.data(32)  # the data asset rebuilt
    assert fresh(out="d")[0] is False
    assert len(list((tmp_path / "ckpt").glob("eat-*"))) == 3
    forced, preds = fresh("force=true", out="e")  # retrained and replaced in place
    assert forced is False and len(list((tmp_path / "ckpt").glob("eat-*"))) == 3
    assert fresh(out="f") == (True, preds)


def test_a_different_training_gets_its_own_checkpoint(smoke_cfg, tmp_path):
    run(smoke_cfg, tmp_path)
    run(smoke_cfg, tmp_path, "method.prune_ratio=0.5")
    run(smoke_cfg, tmp_path, "method.taus=[0.9]")  # inference-only: no new training
    assert len(list((tmp_path / "ckpt").glob("eat-*"))) == 2


@pytest.mark.parametrize("override,match", [
    ("task=wnut16", "cls/pair task"),
    ("method.exit_layer=4", "below the last"),
    ("method.variant=sparse", "dense, eat, paper_code"),
    ("method.taus=[0.0]", "thresholds in"),
])
def test_bad_configs_are_refused_before_training(override, match, smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat", f"method.checkpoint_dir={tmp_path / 'ckpt'}", override)
    with pytest.raises(ValueError, match=match):
        execute(cfg, tmp_path / "out")
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.slow  # several whole runs: 4-6 s; make test runs it
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_latency_bench_times_every_contender(pooling, smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, f"method.pooling={pooling}", "method.n_latency=6", "method.warmup=2",
              "method.batch_size=4", "method.throughput_rounds=1", "method.bootstrap=50", "method.baseline_model=tiny-bert",
              method="eat_bench")
    m = rec["metrics"]
    names = rec["extra"]["contenders"]
    assert {"dense", "dense_hf", "paper_code", "baseline", "eat:none", "eat:prune+window+exit"} <= set(names)
    for name in names:
        assert m[f"latency/{name}_p50_ms"] <= m[f"latency/{name}_p99_ms"]
        assert len(rec["extra"]["replicates"][f"speedup/{name}_p50"]) == 50
        assert m[f"throughput/{name}_per_s"] > 0
    best = rec["extra"]["best_setting"]  # chosen on dev among the component subsets (None: none within tolerance)
    assert best is None or (best.startswith("eat:") and m["acc/eat:best"] == m[f"acc/{best}"])
    assert len(rec["extra"]["replicates"]["delta_acc/dense"]) == 50
    # three timing seeds of 6 examples each; the mean latency is the mean of the seeds' means
    ex = rec["extra"]
    assert ex["timing_seeds"] == [0, 1, 2] and rec["n_samples"]["timed"] == 18
    assert len(ex["latency_ms"]["dense"]) == 18 and len(ex["per_seed"]["dense"]["mean_ms"]) == 3
    for name in names:
        assert m[f"latency/{name}_mean_ms"] == pytest.approx(np.mean(ex["per_seed"][name]["mean_ms"]))
        assert m[f"throughput/{name}_per_s"] == pytest.approx(np.mean(ex["per_seed"][name]["throughput_per_s"]))
    assert ex["layers_of"] == "eat:prune+window+exit" and [d["layer"] for d in ex["layers"]] == [1, 2, 3, 4]
    assert ex["layers_by_contender"]["eat:none"][3]["retention_observed"] == 1.0
    # the dense paths compute the same predictions, whatever the heads pool
    assert m["acc/dense"] == m["acc/dense_hf"]
    assert m["delta_acc/dense"] == 0.0 and m["retention/eat:none"] == 1.0 and m["depth/eat:none"] == 4


def test_scaling_bench_fits_slopes(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.data.long_texts", lambda min_words=0: ["word " * 400] * 5)
    rec = run(smoke_cfg, tmp_path, "method.variant=scaling", "method.lengths=[64,128]", "method.repeats=2",
              "method.bootstrap=20",
              "method.scaling_shape={hidden_size:32,num_hidden_layers:4,num_attention_heads:2,intermediate_size:64}",
              method="eat_bench")
    m = rec["metrics"]
    for arm in ("dense", "window", "eat", "paper_code"):
        assert m[f"scaling/{arm}_ms@64"] > 0 and np.isfinite(m[f"scaling/{arm}_slope"])
    json.dumps(rec["extra"]["scaling_ms"])
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(load_tokenizer(smoke_cfg("method=eat").model))


def test_length_bench_reads_the_long_task_with_the_short_task_arms(smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, "method.variant=length", "method.n_long=4", "method.warmup=1",
              "method.bootstrap=20", method="eat_bench")
    m = rec["metrics"]
    assert rec["n_samples"]["long_examples"] == 4 and m["long/acc/dense"] == m["long/acc/dense_hf"]
    assert m["long/retention/eat:prune+window"] < 1.0 and m["long/latency/paper_code_p50_ms"] > 0
    assert len(rec["extra"]["detail"]["length"]) == 4


def test_length_bench_refuses_an_unknown_long_task(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat_bench", "method.variant=length", "method.long_task=imdb",
                    f"method.checkpoint_dir={tmp_path / 'ckpt'}")
    with pytest.raises(ValueError, match="method.long_task='imdb' names no conf/task/imdb.yaml"):
        execute(cfg, tmp_path / "out")
    assert not (tmp_path / "ckpt").exists()  # refused before any training


def test_latency_bench_refuses_more_timed_examples_than_the_eval_split(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat_bench", "method.n_latency=1000", f"method.checkpoint_dir={tmp_path / 'ckpt'}")
    with pytest.raises(ValueError, match="lower method.n_latency"):
        execute(cfg, tmp_path / "out")
    assert not (tmp_path / "ckpt").exists()


def test_calibration_off_keeps_the_temperature_at_one(smoke_cfg, tmp_path):
    m = run(smoke_cfg, tmp_path, "method.calibrate=false")["metrics"]
    assert m["calib/temperature"] == 1.0 and m["calib/fitted_temperature"] > 0
    assert m["calib/ece_eval_after"] == m["calib/ece_eval_before"]
    assert m["calib/ece_dev_after"] == m["calib/ece_dev_before"]


def test_an_arm_trained_inside_the_benchmark_is_the_arm_a_standalone_run_trains(smoke_cfg, tmp_path):
    # the benchmark trains eat, then dense, then the baseline in one process; a cached dense checkpoint must hold the
    # weights a run of its own would train, or a record that reads it cannot be reproduced
    alone = run(smoke_cfg, tmp_path, "method.variant=dense", f"method.checkpoint_dir={tmp_path / 'a'}", out="alone")
    run(smoke_cfg, tmp_path, "method.n_latency=2", "method.warmup=1", "method.batch_size=4",
        "method.throughput_rounds=1", "method.bootstrap=20", "method.baseline_model=tiny-bert",
        f"method.checkpoint_dir={tmp_path / 'b'}", method="eat_bench", out="bench")
    cached = run(smoke_cfg, tmp_path, "method.variant=dense", f"method.checkpoint_dir={tmp_path / 'b'}", out="cached")
    assert cached["extra"]["checkpoint_cached"] and not alone["extra"]["checkpoint_cached"]
    assert cached["per_example"] == alone["per_example"]
    assert cached["extra"]["history"] == alone["extra"]["history"]


def test_the_bench_refuses_no_timing_seeds(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat_bench", "method.timing_seeds=[]", f"method.checkpoint_dir={tmp_path / 'ckpt'}")
    with pytest.raises(ValueError, match="method.timing_seeds"):
        execute(cfg, tmp_path / "out")
