"""Synthetic run records in, known tables out: grouping by every differing config field, legacy marking, only
existing figures linked, every committed metric key with a declared direction."""
import json
import re
from types import SimpleNamespace

import pytest

from experiments import REPO
from experiments.evidence import report
from experiments.metrics import declared, higher_is_better
from experiments.evidence.paper_values import PaperValues, parse
from experiments.files import write_json


def _run(seed, acc, task="rt-polarity", variant="full", exp="demo/default_cpu", wall=10.0, k=None, schema=2,
         method="finetune", metrics=None):
    return {"schema_version": schema, "run_id": f"{task}--minilm-l6--{method}-{variant}--seed{seed}", "paper": "demo",
            "exp_id": exp, "status": "ok",
            "metrics": metrics if metrics is not None else {"eval/accuracy": acc, "params/total": 5.0},
            "config": {"task": {"name": task, "stand_in_for": "sst2", "objective": "eval/accuracy"},
                       "model": {"name": "minilm-l6", "stand_in_for": None},
                       "method": {"name": method, "variant": variant, "k": k}, "seed": seed, "publish": True,
                       "hardware": {"name": "cpu"}, "train": {"epochs": 1.0, "max_steps": -1}},
            "n_samples": {"train_examples": 2000, "eval_examples": 1000, "max_length": 64},
            "provenance": {"wall_s": wall, "hardware": "cpu", "device": "cpu: test, 2 threads", "git_dirty": False}}


PV = parse({"cells": [{"model": None, "task": "sst2", "column": "full", "metric": "accuracy", "value": 91.0,
                       "where": "Table 1"}]}, "demo/paper_values.yaml")

GOLDEN = """\
| task | model | method | metric | ours (mean ± sd, n) | paper | Δ | hardware | seeds | legacy |
|---|---|---|---|---|---|---|---|---|---|
| rt-polarity (stand-in for sst2) | minilm-l6 | finetune-full | eval/accuracy ↑ | 80.00 ± 2.00 (n=3) | — | — | cpu | 0,1,2 | no |
| rt-polarity (stand-in for sst2) | minilm-l6 | finetune-full | time/wall_s ↓ | 11.00 ± 1.00 (n=3) | — | — | cpu | 0,1,2 | no |
"""


def test_golden_generic_table_over_seeds():
    runs = [_run(0, 0.78, wall=10), _run(1, 0.80, wall=11), _run(2, 0.82, wall=12)]
    t = report.generic_table(runs, "demo/default_cpu", PaperValues())
    assert t.markdown() == GOLDEN  # params/total (a size, no direction) is not an accuracy-style row
    assert t.name == "demo__default_cpu" and t.all_notes()[0].startswith("Caps and devices:\n- rt-polarity: 2000 train")


def test_paper_value_needs_the_same_column_and_a_labelled_mapping():
    pv = parse({"twins": {"models": {"minilm-l6": {"paper": "M", "why": "twin"}}},
                "cells": [{"model": "M", "task": "sst2", "column": "full", "metric": "accuracy", "value": 91.0,
                           "where": "Table 1"}]}, "demo/paper_values.yaml")
    t = report.generic_table([_run(0, 0.8), _run(0, 0.5, variant="reduced")], "demo/x", pv)
    rows = {(r[2], r[3]): r for r in t.rows}
    assert rows[("finetune-full", "eval/accuracy ↑")][5:7] == [91.0, "-11.00"]
    assert rows[("finetune-reduced", "eval/accuracy ↑")][5:7] == [None, "—"]
    assert "minilm-l6 → M: twin" in t.all_notes()[-1]
    assert report.generic_table([_run(0, 0.8)], "demo/x", PV).rows[0][5] is None  # no mapping for minilm-l6: none


def test_k2_and_k4_are_never_averaged_and_k_is_a_column():
    runs = [_run(0, 0.70, variant="reduced", k=2), _run(0, 0.75, variant="reduced", k=4),
            _run(1, 0.72, variant="reduced", k=2)]
    assert report.varying_columns(runs) == ["method.k"]
    assert sorted(len(g) for g in report.groups(runs).values()) == [1, 2]
    t = report.generic_table(runs, "demo/depth", PaperValues())
    assert t.columns[:4] == ["task", "model", "method", "method.k"]
    acc = [r for r in t.rows if r[4] == "eval/accuracy ↑"]
    assert [(r[3], str(r[5])) for r in acc] == [("2", "71.00 ± 1.41 (n=2)"), ("4", "75.00 ± 0.00 (n=1)")]


def test_fields_implied_by_the_row_are_not_columns():
    runs = [_run(0, 0.7, task="rt-polarity"), _run(0, 0.6, task="vitaminc")]
    runs[1]["config"]["task"]["objective"] = "eval/f1_macro"  # differs, but task.name already says which
    assert report.varying_columns(runs) == []


def test_rows_order_numbers_inside_names_by_value():
    runs = [_run(0, 0.5, variant=v) for v in ("icl-10", "icl-2", "icl-1")]
    for r, ks in zip(runs, ((100, 15), (50,), (5,))):
        r["metrics"].update({f"time/k{k}_ms": 1.0 for k in ks})
    rows = report.generic_table(runs, "demo/x", PaperValues()).rows
    assert list(dict.fromkeys(r[2] for r in rows)) == ["finetune-icl-1", "finetune-icl-2", "finetune-icl-10"]
    assert [r[3] for r in rows if r[2] == "finetune-icl-10"][1:3] == ["time/k15_ms ↓", "time/k100_ms ↓"]


def test_legacy_records_are_marked_in_the_row_and_under_the_table():
    runs = [_run(0, 0.7, schema=1), _run(1, 0.8)]
    t = report.generic_table(runs, "demo/x", PaperValues())
    assert {r[-1] for r in t.rows} == {"1 of 2"}
    assert any(n.startswith("**Legacy:** 1 of the 2 records") for n in t.all_notes())


def _links(md: str) -> list[str]:
    return [m for m in re.findall(r"\]\(([^)#]+)\)", md) if not m.startswith("http")]


def test_report_writes_only_asked_tables_links_only_existing_files(tmp_path, monkeypatch):
    runs_dir = tmp_path / "demo" / "runs"
    for s, acc in enumerate((0.7, 0.9)):
        write_json(runs_dir / "default_cpu" / "cpu" / f"r{s}.json", _run(s, acc, exp="demo/default_cpu"))
    timing = _run(0, None, exp="demo/timing_cpu", method="bench", metrics={"time/NR_ms": 3.0, "speedup/x_pct": 9.0})
    write_json(runs_dir / "timing_cpu" / "cpu" / "t.json", timing)  # no eval metric: no figure to link
    bad = _run(5, 0.1)
    bad["status"] = "failed"
    write_json(runs_dir / "default_cpu" / "cpu" / "failed.json", bad)  # failed runs never enter a table
    (runs_dir / "torn.json").write_text("{")  # unreadable files are skipped, not fatal
    stale = tmp_path / "demo" / "tables" / "gone.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier build")
    built = {}

    def build(runs, out):
        built["n"] = len(runs)
        return ["### own table", ""]
    pkg = SimpleNamespace(GENERIC_TABLES=("demo/default*",), build=build)
    monkeypatch.setattr(report, "_package_report", lambda paper: pkg)

    def figure(table, runs, out):  # matplotlib's import alone would take a second; test_tables draws real ones
        (out / "figures").mkdir(exist_ok=True)
        for ext in ("png", "csv"):
            (out / "figures" / f"{table.name}.{ext}").write_text("x")
        return f"figures/{table.name}.png"
    monkeypatch.setattr(report, "generic_figure", figure)
    report.main(["--results-dir", str(tmp_path)])
    out = tmp_path / "demo"
    assert built["n"] == 3 and not stale.exists()
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["demo__default_cpu.csv", "demo__default_cpu.md"]
    md = (out / "tables" / "demo__default_cpu.md").read_text()
    assert "80.00 ± 14.14 (n=2)" in md and "2000 train / 1000 eval examples, max length 64" in md
    readme = (out / "README.md").read_text()
    assert "### own table" in readme and "timing_cpu" not in readme and "None train" not in readme
    index = (tmp_path / "REPORT.md").read_text()
    assert "[demo](demo/README.md): 1 table" in index
    for doc in [out / "README.md", tmp_path / "REPORT.md", *(out / "tables").glob("*.md")]:
        for link in _links(doc.read_text()):
            assert (doc.parent / link).exists(), f"{doc.name} links {link}, which was never written"
    assert (out / "figures" / "demo__default_cpu.png").exists() and (out / "figures" / "demo__default_cpu.csv").exists()


def test_no_figure_without_an_objective_to_plot(tmp_path):
    timing = _run(0, None, exp="demo/timing_cpu", metrics={"time/NR_ms": 3.0})
    t = report.generic_table([timing], "demo/timing_cpu", PaperValues())
    assert report.generic_figure(t, [timing], tmp_path) is None and not (tmp_path / "figures").exists()


def test_a_paper_without_a_package_gets_every_generic_table(monkeypatch):
    monkeypatch.setattr(report, "_package_report", lambda paper: None)
    assert report.generic_experiments("finetune", ["finetune/a", "finetune/b"]) == ["finetune/a", "finetune/b"]
    assert report.generic_experiments("recycling", ["recycling/table1_cpu"]) == ["recycling/table1_cpu"]
    monkeypatch.undo()
    assert report.generic_experiments("recycling", ["recycling/table1_cpu", "recycling/timing_training_cpu"]) == \
        ["recycling/table1_cpu"]


def test_index_is_a_list_of_sections(tmp_path):
    (tmp_path / "demo" / "tables").mkdir(parents=True)
    (tmp_path / "demo" / "tables" / "benchmark_passes.md").write_text("x")  # a benchmark table, generated
    sections = report.index_sections(tmp_path, {"demo": ["a.md"]})
    assert [s[0] for s in sections if s] == ["## Papers", "## Benchmarks"]  # no claims.yaml for "demo": no claims
    text = report.write_index(tmp_path, {"demo": ["a.md"]}).read_text()
    assert text.index("## Papers") < text.index("## Benchmarks") and "[demo](demo/README.md): 1 table" in text


def test_report_opens_with_the_claims_of_each_paper(tmp_path):
    import shutil
    shutil.copytree(REPO / "results" / "pema" / "runs", tmp_path / "pema" / "runs")
    text = report.write_index(tmp_path, {"pema": []}).read_text()
    assert text.index("**Scale.**") < text.index("## Claims by paper") < text.index("## Claims index") \
        < text.index("## Papers")
    assert "| [pema](pema/CLAIMS.md) |" in text and "[pema · merge-exact](pema/CLAIMS.md#merge-exact)" in text
    page = (tmp_path / "pema" / "CLAIMS.md").read_text()
    assert '| <a id="merge-exact"></a>merge-exact |' in page
    assert [link for link in _links(page) if not (tmp_path / "pema" / link).exists()] == []


def test_every_committed_metric_key_declares_its_direction():
    keys = set()
    for p in (REPO / "results").glob("*/runs/**/*.json"):
        keys |= set(json.loads(p.read_text()).get("metrics", {}))
    assert keys, "no committed records found"
    assert sorted(k for k in keys if not declared(k)) == []
    # measurements that are better one way say which: times, speedups, memory, bytes, task scores
    # (an interval's bounds, `_lo`/`_hi`, are declared with no better side: they travel with their estimate)
    scored = [k for k in keys if (re.match(r"(time|speedup|mem|cost|fidelity)/|.*bytes", k) or
              (k.startswith("eval/") and "auc_" not in k and "/majority_" not in k)) and not re.search(r"_(lo|hi)$", k)]
    assert scored and [k for k in scored if k != "mem/measured_over_analytic" and higher_is_better(k) is None] == []
    # the majority-class baselines are declared, with no better side
    assert all(higher_is_better(k) is None for k in keys if "/majority_" in k)


def test_committed_reports_link_only_files_that_exist():
    docs = [REPO / "results" / "REPORT.md", *(REPO / "results").glob("*/README.md"),
            *(REPO / "results").glob("*/tables/*.md")]
    dead = [f"{d.relative_to(REPO)} -> {link}" for d in docs for link in _links(d.read_text())
            if not (d.parent / link).exists()]
    assert dead == []


def test_a_users_own_runs_render_without_publishing(smoke_cfg, tmp_path):
    from experiments.run import execute
    for seed in (0, 1):
        execute(smoke_cfg(f"seed={seed}"), tmp_path / "outputs" / "sweeps" / "smoke" / "cpu" / f"s{seed}")
    index = report.report_runs(tmp_path / "outputs", tmp_path / "mine")
    table = (tmp_path / "mine" / "finetune" / "tables" / "smoke.md").read_text()
    assert index.exists() and "(n=2)" in table and "eval/accuracy" in table
    assert not (tmp_path / "results").exists()  # nothing published


def test_a_misspelt_paper_fails_in_one_line_naming_the_valid_ones_before_any_work(tmp_path, monkeypatch):
    write_json(tmp_path / "demo" / "runs" / "x" / "cpu" / "r.json", _run(0, 0.7))
    monkeypatch.setattr(report, "report", lambda *a: pytest.fail("no work may start"))
    with pytest.raises(SystemExit) as e:
        report.main(["nonexistent_paper", "--results-dir", str(tmp_path)])
    assert str(e.value) == f"report: no paper nonexistent_paper with runs under {tmp_path}; valid: demo"


def test_an_empty_results_dir_says_no_runs_found(tmp_path):
    for args in ([], ["demo"]):
        with pytest.raises(SystemExit, match=f"no runs found under {tmp_path} "):
            report.main([*args, "--results-dir", str(tmp_path)])
    assert not (tmp_path / "REPORT.md").exists()


def test_a_runs_report_names_its_folders_shows_every_swept_lr_and_its_own_rebuild(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "generic_figure", lambda table, runs, out: None)  # matplotlib: test_tables draws
    for sweep, lr, seed, dev in (("adhoc", 1e-4, 0, 0.70), ("adhoc", 1e-4, 1, 0.72), ("adhoc", 3e-4, 0, 0.80),
                                 ("older", 3e-4, 1, 0.78)):
        r = _run(seed, dev - 0.1, exp="adhoc", metrics={"eval/accuracy": dev - 0.1, "dev/accuracy": dev})
        r["run_id"] += f"--train.lr={lr}"
        r["config"]["train"]["lr"] = lr
        write_json(tmp_path / "sweeps" / sweep / "cpu" / r["run_id"] / "result.json", r)
    report.main(["--runs", str(tmp_path / "sweeps"), "--out", str(tmp_path / "mine")])
    printed = capsys.readouterr().out
    assert f"Built from 4 run records (result.json) under {tmp_path / 'sweeps'}" in printed
    sweeps = tmp_path / "sweeps"
    assert f"- {sweeps / 'adhoc' / 'cpu'}: 3 records\n- {sweeps / 'older' / 'cpu'}: 1 record" in printed
    index = (tmp_path / "mine" / "REPORT.md").read_text()
    assert f"Rebuild with `python -m experiments.report --runs {sweeps} --out {tmp_path / 'mine'}`" in index
    assert f"- `{tmp_path / 'sweeps' / 'older' / 'cpu'}`: 1 record" in index
    table = (tmp_path / "mine" / "demo" / "tables" / "adhoc.md").read_text()
    rows = [line for line in table.splitlines() if "eval/accuracy" in line]
    assert [row.split(" | ")[3] for row in rows] == ["0.0001", "0.0003"]  # both arms, lr a column of its own
    assert "Every swept lr has its own rows here" in table and "lr 3e-04 (dev/accuracy 0.79; 1e-04: 0.71)" in table


def test_claims_over_the_committed_records_print_no_bare_numpy_warnings():
    """A ratio over a zero arm and a bootstrap resample without spread are undefined: n/a in the table, quietly."""
    import warnings

    from experiments.evidence.verdicts import evaluate_claims
    from experiments.results import load_runs
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for paper in ("eat", "layer_fusion"):
            rows = evaluate_claims(paper, load_runs(REPO / "results", paper), REPO / "results")
            assert report.claims_page(paper, rows, {}, REPO / "results" / paper)
            assert report.claims_summary({paper: rows})


def test_an_unreadable_record_is_said_to_be_left_out_not_redone(tmp_path, caplog):
    write_json(tmp_path / "demo" / "runs" / "x" / "cpu" / "ok.json", _run(0, 0.7))
    (tmp_path / "demo" / "runs" / "x" / "cpu" / "torn.json").write_text("{")
    assert [r["run_id"] for r in report.load_runs(tmp_path, "demo")] == [_run(0, 0.7)["run_id"]]
    (message,) = [r.getMessage() for r in caplog.records if "torn.json" in r.getMessage()]
    assert "a report leaves it out" in message and "counts as missing" in message
