"""method=store_bench through the runner on tiny-bert and the rt-polarity fixture: the run record, the benchmark
files it writes, and its known answers (byte ratios, every shuffled read a hit, entries per pass)."""
import json

from experiments.run import execute
from tests.conftest import compose


def test_store_bench_writes_its_benchmark_and_a_run_record(tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)  # publish=true from a developer's dirty tree
    cfg = compose("experiment=store/bench", "debug=smoke", "method.n=20", "method.repeats=1", "method.max_length=12",
                  f"results_dir={tmp_path / 'results'}", f"store.dir={tmp_path / 'store'}", "publish=true")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok", rec.get("error")
    assert json.loads((tmp_path / "run" / "result.json").read_text())["metrics"] == rec["metrics"]
    out = tmp_path / "results" / "store"
    r = json.loads((out / "benchmark.json").read_text())
    assert r == rec["extra"]["benchmark"] and r["config"]["n"] == 20 and r["source"]["data"].startswith("rt-polarity")
    assert (out / "benchmark.md").read_text().startswith("# Activation store benchmark")
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


def test_without_publish_the_benchmark_stays_in_its_run_directory(tmp_path):
    """A quick check never rewrites the committed results/store/benchmark.md."""
    cfg = compose("experiment=store/bench", "debug=smoke", "method.n=8", "method.repeats=1", "method.max_length=8",
                  f"results_dir={tmp_path / 'results'}", f"store.dir={tmp_path / 'store'}")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok", rec.get("error")
    assert json.loads((tmp_path / "run" / "benchmark.json").read_text()) == rec["extra"]["benchmark"]
    assert (tmp_path / "run" / "benchmark.md").is_file() and not (tmp_path / "results").exists()
