"""scripts.verify: which records it draws, which metrics it compares and how strictly, and (slow) a real rerun of a
smoke record that passes untouched, passes with a timing edited by hand and fails with a score edited by hand."""
import json
import math

import pytest

from experiments.config import compose
from experiments.results import config_hash
from experiments.run import execute
from scripts import verify


@pytest.mark.parametrize("key", ["time/train_s", "speedup/NR_vs_R_pct", "long/latency/dense_p50_ms", "mem/peak_full_mb",
                                 "throughput/dense_per_s", "scaling/eat_ms@512", "cost/cloud_months", "bench/ratio",
                                 "bench/encoder_forward_s", "mem/measured_over_analytic"])
def test_clock_and_allocator_readings_are_measurements(key):
    assert verify.is_measurement(key)


@pytest.mark.parametrize("key", ["eval/accuracy", "dev/f1_macro", "train/steps", "params/total", "eat/tau",
                                 "vocab/total", "mem/analytic_full_mb", "bench/dev_gap", "long/acc/dense",
                                 "id/n_prompts", "cache/last_epoch_hit_rate", "train/to90_frac"])
def test_scores_counts_and_sizes_are_compared(key):
    assert not verify.is_measurement(key)


PROV = {"torch": "2.13.0+cpu", "transformers": "5.23.0", "datasets": "5.2.0", "peft": "0.21.2",
        "device": "cpu: AMD EPYC, 2 threads", "threads": 2, "assets": {"data/x": "a" * 64}}


def test_tolerance_is_exact_in_the_same_environment_and_looser_only_for_what_differs():
    assert verify.tolerance(PROV, dict(PROV)) == (verify.EXACT, [])
    rel, why = verify.tolerance(PROV, {**PROV, "threads": 1, "device": "cpu: AMD EPYC, 1 thread"})
    assert rel == verify.THREADS_ONLY and why == ["threads 2 -> 1"]
    rel, why = verify.tolerance(PROV, {**PROV, "threads": 1, "transformers": "5.24.0"})
    assert rel == verify.LOOSE and "transformers 5.23.0 -> 5.24.0" in why and "threads 2 -> 1" in why
    assert verify.tolerance(PROV, {**PROV, "device": "cpu: Intel Xeon, 2 threads"})[0] == verify.LOOSE
    # numpy counts only when the record names it; an asset's manifest sha loosens nothing (it is listed apart)
    assert verify.tolerance(PROV, {**PROV, "numpy": "9.9", "assets": {"data/x": "b" * 64}})[0] == verify.EXACT
    assert verify.tolerance({**PROV, "numpy": "0.0.1"}, dict(PROV))[0] == verify.LOOSE
    assert verify.asset_notes(PROV, {**PROV, "assets": {"data/x": "b" * 64, "models/y": "c"}}) == \
        ["data/x aaaaaaaaaaaa -> bbbbbbbbbbbb", "models/y read now, not named by the record"]


def test_compare_flags_any_score_change_beyond_tolerance_but_never_a_timing():
    old = {"eval/accuracy": 0.8, "params/total": 1e6, "time/train_s": 10.0, "gone": 1.0, "both_nan": math.nan}
    new = {"eval/accuracy": 0.8 + 1e-12, "params/total": 1e6 + 2e-3, "time/train_s": 99.0, "both_nan": math.nan,
           "extra": 3.0}
    rows = {r.metric: r for r in verify.compare(old, new, verify.EXACT)}
    assert rows["eval/accuracy"].ok and rows["both_nan"].ok
    assert rows["params/total"].tol == pytest.approx(1e-3) and not rows["params/total"].ok  # relative above 1
    assert rows["time/train_s"].ok and rows["time/train_s"].tol is None
    assert not rows["gone"].ok and rows["extra"].ok and rows["extra"].tol is None
    rows = {r.metric: r for r in verify.compare(old, {**new, "eval/accuracy": 0.81}, verify.LOOSE)}
    assert not rows["eval/accuracy"].ok  # 0.01 > 0.5 percentage points
    assert any("DRIFT" in line and "eval/accuracy" in line for line in verify.table(list(rows.values())))


def _write(path, paper="p", status="ok", hardware="cpu", model_source="offline", wall=5.0):
    record = {"status": status, "exp_id": f"{paper}/x", "overrides": [f"experiment={paper}/x"],
              "config": {"hardware": {"name": hardware, "device": "cuda" if hardware == "gpu" else "cpu"},
                         "model": {"source": model_source}, "task": {"source": "offline"}, "data": {"source": None}},
              "provenance": {"hardware": hardware, "wall_s": wall, "assets": {}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_the_draw_is_seeded_per_paper_and_leaves_out_what_cannot_rerun_here(tmp_path):
    runs = tmp_path / "p" / "runs"
    for i in range(6):
        _write(runs / "table_cpu" / "cpu" / f"ok{i}.json")
    _write(runs / "table_cpu" / "cpu" / "failed.json", status="failed")
    _write(runs / "gpu_run" / "gpu" / "g.json", hardware="gpu")
    _write(runs / "table_cpu" / "cpu" / "hub.json", model_source="hub")
    _write(runs / "bench" / "cpu" / "b.json")
    _write(runs / "table_cpu" / "cpu" / "slow.json", wall=500.0)
    eligible, skipped = verify.candidates(tmp_path, "p", max_wall_s=120)
    assert [p.stem for p in eligible] == [f"ok{i}" for i in range(6)]
    assert skipped == {"status failed": 1, "hardware gpu (needs CUDA)": 1, "hub model (needs the network)": 1,
                       "benchmark (timings for a quiet machine)": 1, "took > 120 s": 1}
    assert len(verify.candidates(tmp_path, "p", max_wall_s=None)[0]) == 7  # no limit: the slow one too
    assert len(verify.candidates(tmp_path, "p", max_wall_s=120, cuda=True)[0]) == 7  # a GPU record where CUDA is
    first = verify.draw(eligible, 2, 0, "p")
    assert first == verify.draw(eligible, 2, 0, "p") and len(set(first)) == 2
    assert {tuple(verify.draw(eligible, 2, s, "p")) for s in range(10)} != {tuple(first)}  # the seed matters
    assert verify.draw(eligible, 99, 0, "p") == eligible and verify.draw([], 1, 0, "p") == []


def test_a_record_of_an_older_method_version_is_left_out(tmp_path):
    from experiments import registry
    _write(tmp_path / "r.json")
    record = json.loads((tmp_path / "r.json").read_text())
    now = registry.version_of("eat")
    record["config"]["method"] = {"name": "eat"}
    record["method_version"] = now
    assert verify.why_not_rerunnable(record) is None
    record["method_version"] = now - 1
    assert verify.why_not_rerunnable(record) == f"made by version {now - 1} of its method, now {now}"


def test_a_record_that_needs_an_encoder_missing_from_the_cache_is_left_out(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    _write(tmp_path / "r.json")
    record = json.loads((tmp_path / "r.json").read_text())
    assert verify.why_not_rerunnable(record) is None
    record["config"]["method"] = {"sources": ["minilm-l6-nli"]}  # built by reverse_probing/build_nli_cpu
    assert verify.why_not_rerunnable(record) == "needs models/minilm-l6-nli, not in the asset cache"
    (tmp_path / "cache" / "models" / "minilm-l6-nli").mkdir(parents=True)
    (tmp_path / "cache" / "models" / "minilm-l6-nli" / "MANIFEST.json").write_text("{}")
    assert verify.why_not_rerunnable(record) is None


def test_each_rerun_links_the_real_assets_and_starts_with_empty_method_caches(tmp_path, monkeypatch):
    real = tmp_path / "real"
    for d in ("models/minilm-l6", "models/minilm-l6-nli", "data/rt-polarity", "eat-checkpoints/dense-x"):
        (real / d).mkdir(parents=True)
    monkeypatch.setenv("STRATA_CACHE", str(real))
    root = verify.isolated_cache(tmp_path / "iso", {"config": {"method": {"save_as": "minilm-l6-nli"}}})
    assert (root / "models" / "minilm-l6").resolve() == real / "models" / "minilm-l6"
    assert (root / "data" / "rt-polarity").is_symlink()
    assert not (root / "models" / "minilm-l6-nli").exists()  # the record builds it: its rerun saves a new one here
    assert not (root / "eat-checkpoints").exists()


def test_rerun_overrides_drop_only_where_and_whether_it_writes():
    record = {"overrides": ["task=rt-polarity", "publish=True", "force=false", "results_dir=/x", "seed=1",
                            "hydra.run.dir=/y", "allow_dirty=true", "+train.lr=0.1"]}
    assert verify.rerun_overrides(record) == ["task=rt-polarity", "seed=1", "allow_dirty=true", "+train.lr=0.1"]


@pytest.mark.slow  # one smoke run and two reruns through the runner, ~25 s
def test_a_smoke_record_reproduces_and_a_hand_edited_score_does_not(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))  # tiny-bert and fixtures: no asset needed
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)
    results = tmp_path / "results"
    rec = execute(compose("experiment=finetune/smoke", "task=rt-polarity", "publish=true", f"results_dir={results}"),
                  tmp_path / "run", overrides=["experiment=finetune/smoke", "task=rt-polarity", "publish=true",
                                               f"results_dir={results}"])
    assert rec["status"] == "ok"
    (published,) = results.rglob("*.json")
    committed = published.read_text()
    assert config_hash(verify.composed(verify.rerun_overrides(rec))) == rec["config_hash"]

    # a timing edited by hand in the committed file is shown, not compared: the record still reproduces
    edited = json.loads(committed)
    edited["metrics"]["time/train_s"] = 1e6
    published.write_text(json.dumps(edited))
    assert verify.main(["--record", str(published)]) == 0
    out = capsys.readouterr().out
    assert "measurement: not compared" in out and "DRIFT" not in out
    assert out.strip().splitlines()[-1].startswith("verify: 1 records rerun, ")
    assert "all within tolerance" in out.strip().splitlines()[-1]
    assert "identical to the record: compared to 1e-09 relative" in out  # threads fixed by debug=smoke
    assert json.loads(published.read_text()) == edited and list(results.rglob("*.json")) == [published]  # unpublished

    score = tmp_path / "edited" / "score.json"
    score.parent.mkdir()
    edited = json.loads(committed)
    edited["metrics"]["eval/accuracy"] += 0.01
    score.write_text(json.dumps(edited))
    assert verify.main(["--record", str(score)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.split()[:1] == ["eval/accuracy"] and line.rstrip().endswith("DRIFT") for line in lines)
    assert lines[-1].startswith("verify: DRIFT in 1 of 1 records") and "score.json" in lines[-1]
    assert "eval/accuracy" in lines[-1]
