"""intrinsic_dim/report.py from constructed records: verdicts on the paper's claims are left to CLAIMS.md, and the
benchmark's tables come from its run record (or, with none, from the benchmark.json an older run wrote)."""
import json

from intrinsic_dim.report import build


def _record(variant: str, acc: float, auc: float) -> dict:
    res = {"accuracy": acc, "majority_rate": 0.5, "auc": {"twonn": {"L": auc, "L_minus_1": auc}}, "n_prompts": 8,
           "n_duplicates": [0, 0], "mean_prompt_tokens": 20.0, "curves": {"twonn": [float("nan"), 3.0, 4.0]}}
    extra = ({"paradigm": "sft", "checkpoints": [dict(res, split="eval", epoch=2, step=4)]} if variant == "sft"
             else {"paradigm": "icl", **res})
    method = {"name": "intrinsic_dim", "variant": variant, "sft_epochs": 2, "auc_norm": "L",
              "auc_include_embedding": False}
    return {"exp_id": "intrinsic_dim/icl_vs_sft_cpu", "status": "ok", "extra": extra, "schema_version": 2,
            "provenance": {"device": "cpu"},
            "config": {"exp_id": "intrinsic_dim/icl_vs_sft_cpu", "model": {"name": "m"}, "task": {"name": "t"},
                       "method": method}}


BENCH = {"device": "cpu: test", "estimator": {
    "shape": "2 layers x 120 points x d=16, float64", "max_rel_diff_vs_skdim": 1e-16,
    "max_rel_diff_vs_skdim_float32_input": 1e-8,
    "timing": {"skdim TwoNN": {"median_s": 2.0, "speedup_vs_baseline": 1.0},
               "ours twonn": {"median_s": 1.0, "speedup_vs_baseline": 2.0}}}, "gpu": None}


def test_no_verdicts_here_and_the_benchmark_from_its_record(tmp_path):
    runs = [_record(v, a, u) for v, a, u in zip(("icl-0", "icl-5", "sft"), (0.6, 0.7, 0.9), (10.0, 14.0, 11.0))]
    bench = {"exp_id": "intrinsic_dim/bench", "status": "ok", "schema_version": 2, "provenance": {"device": "cpu"},
             "config": {"method": {"name": "intrinsic_dim_bench"}}, "extra": {"benchmark": BENCH}}
    (tmp_path / "benchmark.json").write_text(json.dumps({**BENCH, "device": "an older run"}))
    text = "\n".join(build([*runs, bench], tmp_path))
    assert "[CLAIMS.md](CLAIMS.md)" in text and "holds" not in text and "does not hold" not in text
    twonn = (tmp_path / "tables" / "benchmark_twonn.md").read_text()
    assert "| 2 layers x 120 points x d=16, float64 | ours twonn | 1.000 | 2.00x | cpu: test |" in twonn
    assert "an older run" not in twonn and not (tmp_path / "tables" / "benchmark_extraction.md").exists()


def test_an_older_benchmark_json_without_a_record_is_shown_and_says_so(tmp_path):
    (tmp_path / "benchmark.json").write_text(json.dumps(BENCH))
    lines = build([], tmp_path)
    assert lines[0].startswith("### Benchmark: TwoNN") and "no record backs these numbers" in "\n".join(lines)
    assert build([], tmp_path / "elsewhere") == []  # no record, no file: nothing
