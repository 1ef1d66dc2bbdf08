"""method=intrinsic_dim_bench through the runner at toy shapes, on tiny-llama and the rt-polarity fixture; its tables
rendered from the record by intrinsic_dim/report.py."""
import pytest

from experiments.models import byte_tokenizer, tokenizer_fingerprint
from experiments.run import execute
from intrinsic_dim.report import build
from experiments.config import compose

pytestmark = pytest.mark.slow  # importing scikit-dimension (the reference TwoNN) alone takes ~7 s
TOY = ("method.est_layers=2", "method.est_points=120", "method.est_dim=16", "method.est_repeats=1",
       "method.extract_prompts=6", "method.extract_batch_size=4", "method.extract_repeats=1", "method.gpu=false")


def _run(tmp_path, *overrides):
    cfg = compose("experiment=intrinsic_dim/bench", "model=tiny-llama", "data.source=fixture", "hardware.threads=1",
                  f"results_dir={tmp_path / 'results'}", f"store.dir={tmp_path / 'store'}", *TOY, *overrides)
    return execute(cfg, tmp_path / "run")


def test_bench_keeps_its_numbers_in_the_run_record_and_the_report_renders_them(tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)  # publish=true from a developer's dirty tree
    rec = _run(tmp_path, "publish=true")
    assert rec["status"] == "ok", rec.get("error")
    out = tmp_path / "results" / "intrinsic_dim"
    assert [p.name for p in out.iterdir()] == ["runs"]  # the published record only: tables are the report's
    res = rec["extra"]["benchmark"]
    assert res["gpu"] is None and res["estimator"]["shape"] == "2 layers x 120 points x d=16, float64"
    build([rec], out)
    twonn, extraction = ((out / "tables" / f"benchmark_{n}.md").read_text() for n in ("twonn", "extraction"))
    assert "| 2 layers x 120 points x d=16, float64 | ours twonn |" in twonn and "no CUDA device" in twonn
    assert "| tiny-llama | 6 | rt-polarity |" in extraction and "benchmark.json" not in extraction  # a record
    m = rec["metrics"]
    assert m["id/max_rel_diff_vs_skdim"] < 1e-9  # our TwoNN is scikit-dimension's estimate
    # x is the unit of every speedup/<a>_vs_<b> ratio: the key does not spell it
    assert m["speedup/twonn_vs_skdim"] == m["time/twonn_skdim_s"] / m["time/twonn_ours_s"]
    assert not any(k.startswith("speedup/twonn") and k.endswith("_x") for k in m)
    x = res["extraction"]
    assert rec["n_samples"] == {"prompts": 6, "tokens": x["real_tokens"]} and x["bf16_prompts"] == 6
    assert 0 < m["bf16/weights_rel_l2_diff_max"] < 0.1  # bf16 moves the states, by a little
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(byte_tokenizer())  # the run record names it


def test_too_few_rows_for_the_prompts_names_the_fix(tmp_path):
    rec = _run(tmp_path, "method.extract_prompts=48", "on_error=record")  # the fixture's train split has 48 rows
    assert rec["status"] == "failed" and "lower method.extract_prompts" in rec["error"]


def test_estimator_only_loads_no_model(tmp_path):
    rec = _run(tmp_path, "method.extraction=false", "model=tiny-bert")  # an encoder: a causal LM is never asked for
    assert rec["status"] == "ok" and "time/extract_ours_s" not in rec["metrics"]
    assert "extraction" not in rec["extra"]["benchmark"] and not (tmp_path / "results").exists()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["result.json"]  # nothing beside the record
