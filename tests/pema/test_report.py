"""pema.report: the paper's tables from run records (the records of tiny-bert + fixtures runs)."""
import json

from experiments.run import execute
from pema import report


def test_report_builds_the_tables_from_records(smoke_cfg, tmp_path):
    runs = []
    for i, over in enumerate([("method=pema_sizes",), ("method=pema_vocab",),
                              ("method=pema_scores", "train.weight_decay=0", "seed=0"),
                              ("method=pema_scores", "train.weight_decay=0", "seed=1")]):
        rec = execute(smoke_cfg(*over), tmp_path / f"r{i}")
        runs.append(json.loads(json.dumps(rec, default=str)))
    runs[0]["exp_id"], runs[1]["exp_id"] = "pema/table5_cpu", "pema/table2_cpu"
    runs[2]["exp_id"] = runs[3]["exp_id"] = "pema/scores_cpu"
    lines = report.build(runs, tmp_path / "out")
    text = "\n".join(lines)
    assert "could not be built" not in text
    for name in ("table5_6_sizes", "table2_cpu", "table9_runtime", "table10_scores"):
        assert all((tmp_path / "out" / "tables" / f"{name}.{ext}").exists() for ext in ("md", "csv"))
    row = next(x for x in (tmp_path / "out" / "tables" / "table10_scores.md").read_text().splitlines()
               if x.startswith("| tiny-bert"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "2" and cells[7:10] == ["0", "0", "yes"]  # 2 seeds, max |Δ logit|, max |Δ weight|, identical
    without, with_pema = cells[4], cells[5]
    assert without == with_pema and "[" in without  # one score, one interval, for both arms


def test_arm_intervals_resample_examples_and_bracket_the_mean():
    pe = {"pred": [1, 1, 0, 0, 1, 0, 1, 1], "label": [1, 0, 0, 0, 1, 1, 1, 1]}  # 6 of 8 right
    rec = {"per_example": {"eval": pe, "eval_full": {**pe, "pred": [1] * 8}}}  # always 1: 6 of 8 right too
    ci = report.arm_intervals([rec], "eval/accuracy", n_boot=400)
    assert ci["eval"][0] < 75.0 < ci["eval"][1] and ci["eval_full"][0] < 75.0 < ci["eval_full"][1]
    assert report.arm_intervals([{"per_example": {"eval": pe}}], "eval/accuracy") is None  # no full arm kept
