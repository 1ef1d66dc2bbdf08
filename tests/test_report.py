"""Synthetic run records in, a known table out."""
import json

import pytest
import yaml

from experiments import report
from experiments.results import write_json


def _run(seed, acc, task="rt-polarity", method="finetune", variant="full", exp="finetune/default_cpu", wall=10.0):
    return {"schema_version": 1, "run_id": f"{task}--minilm-l6--{method}-{variant}--seed{seed}", "paper": "demo",
            "exp_id": exp, "status": "ok", "metrics": {"eval/accuracy": acc, "params/total": 5.0},
            "config": {"task": {"name": task, "stand_in_for": "sst2"}, "model": {"name": "minilm-l6", "stand_in_for": None},
                       "method": {"name": method, "variant": variant}, "seed": seed,
                       "train": {"epochs": 1.0, "max_steps": -1}},
            "n_samples": {"train_examples": 2000, "eval_examples": 1000, "max_length": 64},
            "provenance": {"wall_s": wall, "hardware": "cpu", "device": "cpu: test, 2 threads"}}


GOLDEN = """\
| task | model | method | metric | ours (mean ± sd, n) | paper | Δ | hardware |
|---|---|---|---|---|---|---|---|
| rt-polarity (stand-in for sst2) | minilm-l6 | finetune-full | eval/accuracy ↑ | 80.00 ± 2.00 (n=3) | 91.00 | -11.00 | cpu |
| rt-polarity (stand-in for sst2) | minilm-l6 | finetune-full | time/wall_s | 11.00 ± 1.00 (n=3) | — | — | cpu |
"""


def test_golden_table_with_paper_value_delta_and_stand_in_label():
    runs = [_run(0, 0.78, wall=10), _run(1, 0.80, wall=11), _run(2, 0.82, wall=12)]
    values = [{"task": "sst2", "metric": "accuracy", "method": "finetune-full", "value": 91.0}]
    rows = report.table(runs, values, "finetune/default_cpu")
    assert report.markdown(rows) == GOLDEN


def test_rows_order_numbers_inside_names_by_value():
    runs = [_run(0, 0.5, variant=v) for v in ("icl-10", "icl-2", "icl-1")]
    for r, ks in zip(runs, ((100, 15), (50,), (5,))):
        r["metrics"].update({f"eval/auc_mle_k{k}": 1.0 for k in ks})
    rows = report.table(runs, [], "demo/x")
    assert list(dict.fromkeys(r["method"] for r in rows)) == ["finetune-icl-1", "finetune-icl-2", "finetune-icl-10"]
    mle = [r["metric"] for r in rows if r["method"] == "finetune-icl-10" and "mle" in r["metric"]]
    assert mle == ["eval/auc_mle_k15", "eval/auc_mle_k100"]


def test_paper_value_must_match_method_and_artifact():
    runs = [_run(0, 0.5, variant="reduced")]
    values = [{"task": "sst2", "metric": "accuracy", "method": "finetune-full", "value": 91.0},
              {"artifact": "other", "task": "sst2", "metric": "accuracy", "value": 1.0}]
    (row,) = [r for r in report.table(runs, values, "finetune/default_cpu") if r["metric"].startswith("eval/")]
    assert row["paper"] is None and row["delta"] is None and row["sd"] == 0.0 and row["n"] == 1


def test_report_writes_tables_figures_and_index(tmp_path, monkeypatch):
    runs_dir = tmp_path / "demo" / "runs"
    for s, acc in enumerate((0.7, 0.9)):
        write_json(runs_dir / f"r{s}.json", _run(s, acc))
    bad = _run(5, 0.1)
    bad["status"] = "failed"
    write_json(runs_dir / "failed.json", bad)  # failed runs never enter a table
    (runs_dir / "torn.json").write_text("{")  # unreadable files are skipped, not fatal
    report.main(["--results-dir", str(tmp_path)])
    md = (tmp_path / "demo" / "tables" / "finetune__default_cpu.md").read_text()
    assert "80.00 ± 14.14 (n=2)" in md and "2000 train / 1000 eval examples, max length 64" in md
    assert report.GENERATED in md
    assert (tmp_path / "demo" / "figures" / "finetune__default_cpu.png").stat().st_size > 1000
    csv = (tmp_path / "demo" / "tables" / "finetune__default_cpu.csv").read_text()
    assert csv.splitlines()[0].startswith("task,model,method,metric,mean,sd,n,paper,delta,hardware")
    index = (tmp_path / "REPORT.md").read_text()
    assert "[demo](demo/README.md)" in index and "finetune__default_cpu.md" in index


def test_paper_values_files_are_well_formed():
    from tests.conftest import REPO
    for path in REPO.glob("*/paper_values.yaml"):
        for v in yaml.safe_load(path.read_text())["values"]:
            assert {"task", "metric", "value"} <= v.keys(), (path, v)
