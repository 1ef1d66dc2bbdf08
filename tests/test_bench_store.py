"""method=store_bench through the runner on tiny-bert and the rt-polarity fixture: the run record and its known answers
(byte ratios, every shuffled read a hit, entries per pass), the tables bench_store.build renders from it."""
import json
import shutil

from experiments import REPO
from experiments.bench_store import build
from experiments.config import compose
from experiments.run import execute


def test_store_bench_keeps_its_numbers_in_the_run_record_and_the_report_renders_them(tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)  # publish=true from a developer's dirty tree
    cfg = compose("experiment=store/bench", "debug=smoke", "method.n=20", "method.repeats=1", "method.max_length=12",
                  f"results_dir={tmp_path / 'results'}", f"store.dir={tmp_path / 'store'}", "publish=true")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok", rec.get("error")
    assert json.loads((tmp_path / "run" / "result.json").read_text())["metrics"] == rec["metrics"]
    out = tmp_path / "results" / "store"
    assert [p.name for p in out.iterdir()] == ["runs"]  # the published record only: tables are the report's
    r = rec["extra"]["benchmark"]
    assert r["config"]["n"] == 20 and r["source"]["data"].startswith("rt-polarity")
    assert r["storage"]["fp16_over_fp32_bin"] == 0.5 and r["shuffled_pass"]["hit_rate"] == 1.0
    assert r["shuffled_pass"]["computed"] == 0 and r["timing"]["rebuilt_during_timing"] == 0
    n_states = cfg.model.num_layers + 1  # tiny-bert: 4 blocks + the embedding output
    assert r["data"]["n_examples"] == 20 and r["data"]["n_layers_stored"] == n_states
    assert r["timing"]["entries_read_per_pass"] == {"fp32": 20 * n_states, "fp16": 20 * n_states}
    assert r["fidelity"]["fp32_store_vs_forward_max_abs"] < 1e-5  # fp32 entries are the forward's own states
    m = rec["metrics"]
    assert m["storage/fp16_over_fp32_bin"] == 0.5 and m["store/shuffled_hit_rate"] == 1.0
    assert m["speedup/read_fp16_x"] == m["time/compute_s"] / m["time/read_fp16_s"]
    assert not list((tmp_path / "tmp").iterdir())  # the temporary stores are removed
    lines = build([rec], out)
    assert lines[0].startswith("### Activation store") and "no record backs" not in "\n".join(lines)
    passes = (out / "tables" / "benchmark_passes.md").read_text()
    assert "| read_fp16 |" in passes and "20 examples" in passes and "hit rate 100.0%" in passes
    assert "| shard .bin bytes |" in (out / "tables" / "benchmark_storage.md").read_text()


def test_without_publish_nothing_but_the_record(tmp_path):
    """A quick check writes its record into its run directory, nothing else, and never into results/."""
    cfg = compose("experiment=store/bench", "debug=smoke", "method.n=8", "method.repeats=1", "method.max_length=8",
                  f"results_dir={tmp_path / 'results'}", f"store.dir={tmp_path / 'store'}")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok", rec.get("error")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["result.json"]
    assert not (tmp_path / "results").exists()


def test_a_benchmark_json_without_a_record_is_shown_and_says_so(tmp_path):
    rec = {"exp_id": "store/bench", "config": {"method": {"name": "store_bench"}}, "extra": {}}
    assert build([], tmp_path) == build([rec], tmp_path) == []  # no numbers anywhere: nothing to show
    shutil.copy(REPO / "results" / "store" / "benchmark.json", tmp_path)  # written by an older version of the run
    text = "\n".join(build([], tmp_path))
    assert "| read_fp32 | 0.0861 | 0.0852 | 0.0958 | 45.88× |" in text and "no record backs these numbers" in text
