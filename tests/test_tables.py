"""The report kit: one table object written as markdown and CSV, number formatting, labels, legacy footnotes and
figure files with their data."""
import math

import pytest

from experiments.evidence.tables import (GENERATED, Summary, Table, arrow, delta, fmt, label, legacy_note, pyplot,
                                         save_figure, scale, summary)


def _rec(schema=2, dirty=False):
    return {"schema_version": schema, "provenance": {"git_dirty": dirty}}


def _table(runs=()):
    t = Table("demo", "Demo: two rows", ["task", "ours (mean ± sd, n)", "paper", "Δ", "note"], runs=list(runs))
    s = summary([0.78 * 100, 0.80 * 100, 0.82 * 100])
    t.add("rt-polarity (stand-in for sst2)", s, 91.0, delta(s.mean, 91.0), "a | b")
    t.add(task="wnut16", **{"ours (mean ± sd, n)": summary([]), "paper": None, "Δ": delta(None, 1.0), "note": "x"})
    return t


GOLDEN_MD = """\
| task | ours (mean ± sd, n) | paper | Δ | note |
|---|---|---|---|---|
| rt-polarity (stand-in for sst2) | 80.00 ± 2.00 (n=3) | 91.00 | -11.00 | a \\| b |
| wnut16 | — | — | — | x |
"""
GOLDEN_CSV = """\
task,ours mean,ours sd,ours n,paper,Δ,note
rt-polarity (stand-in for sst2),80,2,3,91,-11.00,a | b
wnut16,,,0,,,x
"""


def test_golden_markdown_and_csv():
    t = _table()
    assert t.markdown() == GOLDEN_MD
    assert t.csv() == GOLDEN_CSV


def test_write_files_and_readme_lines(tmp_path):
    t = _table()
    t.notes = ["A note."]
    lines = t.write(tmp_path)
    md = (tmp_path / "tables" / "demo.md").read_text()
    assert md.startswith(GENERATED + "\n# Demo: two rows\n\n" + GOLDEN_MD) and md.endswith("A note.\n")
    assert (tmp_path / "tables" / "demo.csv").read_text() == GOLDEN_CSV
    assert lines[0] == "### Demo: two rows" and "[tables/demo.md](tables/demo.md)" in lines[2]
    assert Table("empty", "Empty", ["a"]).write(tmp_path) == [] and not (tmp_path / "tables" / "empty.md").exists()


def test_rows_must_fit_the_columns():
    t = Table("t", "T", ["a", "b"])
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        t.add(1)
    with pytest.raises(ValueError, match=r"unknown columns \['c'\]"):
        t.add(a=1, c=2)


def test_legacy_records_are_footnoted_never_silent(tmp_path):
    clean = _table([_rec(), _rec()])
    assert clean.all_notes() == []
    mixed = _table([_rec(), _rec(schema=1, dirty=True), _rec(dirty=True)])
    (note,) = mixed.all_notes()
    assert note.startswith("**Legacy:** 2 of the 3 records") and "schema 1" in note and "dirty tree (1)" in note
    mixed.write(tmp_path)
    assert "**Legacy:** 2 of the 3" in (tmp_path / "tables" / "demo.md").read_text()
    assert legacy_note([_rec()], "these checks") == []


def test_numbers_and_labels():
    assert fmt(None) == fmt(math.nan) == "—" and fmt(1.005, 1) == "1.0" and fmt(2.0, sign=True) == "+2.00"
    assert fmt(28996, thousands=True) == "28,996" and fmt(1329.2, 1, thousands=True) == "1,329.2"
    assert scale("eval/accuracy") == scale("eval/f1_binary") == 100.0 and scale("eval/f1") == scale("time/x") == 1.0
    assert label("rt-polarity", "sst2") == "rt-polarity (stand-in for sst2)" and label("sst2", None) == "sst2"
    s = summary([1.0])
    assert (s.mean, s.sd, s.n, str(s)) == (1.0, 0.0, 1, "1.00 ± 0.00 (n=1)")
    assert str(Summary(())) == "—" and delta(3.0, "text cell") == "—"


def test_arrows_say_direction_or_that_none_was_declared():
    assert arrow("eval/accuracy") == " ↑" and arrow("time/step_ms") == " ↓" and arrow("mem/peak_full_mb") == " ↓"
    assert arrow("speedup/NR_vs_R_pct") == " ↑" and arrow("storage/fp16_disk_bytes") == " ↓"
    assert arrow("params/total") == ""        # declared: a size has no better side
    assert arrow("eval/bleurt_score") == " ?"  # nobody declared it: shown, and marked


def test_save_figure_writes_the_plotted_numbers_beside_the_png(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3.0, 4.5])
    rel = save_figure(fig, tmp_path, "fig", [{"x": 1, "y": 3.0}, {"x": 2, "y": 4.5, "series": "a"}])
    assert rel == "figures/fig.png" and (tmp_path / rel).stat().st_size > 1000
    assert (tmp_path / "figures" / "fig.csv").read_text() == "x,y,series\n1,3,\n2,4.5,a\n"


def test_caps_state_the_dev_split_and_the_early_stopping():
    from experiments.evidence.tables import caps
    run = {"n_samples": {"train_examples": 1000, "dev_examples": 347, "eval_examples": 1244, "max_length": 64},
           "config": {"task": {"name": "rt-polarity"}, "train": {"epochs": 4.0, "patience": 2, "eval_every": 32}},
           "provenance": {"device": "cpu"}}
    (text,) = caps([run])
    assert "1000 train / 347 dev (from train) / 1244 eval examples" in text
    assert "at most 4 epochs" in text and "after 2 dev evaluations without improvement (every 32 steps)" in text
    run["config"]["train"] = {"epochs": 2.0, "patience": 0}
    assert "at most" not in caps([run])[0] and "early stopping" not in caps([run])[0]


def test_a_one_seed_summary_shows_its_example_ci_instead_of_a_zero_sd():
    assert str(summary([80.871], ci=(78.7, 82.96))) == "80.87 [78.70, 82.96] (n=1, 95% CI over examples)"
    assert str(summary([1.0, 3.0], ci=(0.0, 4.0))).startswith("2.00 ± 1.41 (n=2)")  # seeds: the sd, not the CI


def test_an_estimate_cell_shows_its_interval_its_sd_or_the_value_alone():
    from experiments.evidence.tables import Estimate
    assert str(Estimate(1.234, 1.0, 1.5, n=3)) == "1.23 [1.00, 1.50] (n=3)"
    assert str(Estimate(-0.5, -1.0, 0.25, n=1, sign=True)) == "-0.50 [-1.00, +0.25] (n=1)"
    assert str(Estimate(2.0, sd=0.5, n=4, digits=1)) == "2.0 ± 0.5 (n=4)" and str(Estimate(1.5, suffix="x")) == "1.50x"
    assert str(Estimate(3.0, 2.0, 4.0, suffix="x")) == "3.00x [2.00, 4.00]" and str(Estimate(None, 1, 2)) == "—"
    assert str(Estimate(80.0, 78.0, 82.0, n=1, named="95% CI over examples")) == \
        "80.00 [78.00, 82.00] (n=1, 95% CI over examples)"


def test_seeds_get_a_t_interval_not_their_min_and_max():
    from experiments.evidence.tables import seed_interval, seed_sd
    e = seed_interval([1.0, 2.0, None, 3.0])  # None: a seed without the metric
    h = 4.302652729911275 / math.sqrt(3)  # t(0.975, df=2) · sd 1 / sqrt(3)
    assert (e.value, e.n, e.how) == (2.0, 3, "t") and e.lo == pytest.approx(2 - h) and e.hi == pytest.approx(2 + h)
    assert str(e) == "2.00 [-0.48, 4.48] (n=3)" and str(seed_interval([1.0, 3.0], sign=True)).startswith("+2.00 [")
    assert str(seed_interval([5.0])) == "5.00 (n=1)" and str(seed_interval([])) == "—"
    assert str(seed_sd([1.0, 3.0])) == "2.00 ± 1.41 (n=2)" and str(seed_sd([1.0])) == "1.00" and str(seed_sd([])) == "—"


def _scored(pred, label=(1, 0, 1, 1, 0, 1, 0, 0), data=None):
    return {"metrics": {"eval/accuracy": sum(p == y for p, y in zip(pred, label)) / len(label)},
            "per_example": {"eval": {"pred": list(pred), "label": list(label)}}, "config": {"data": data}}


def test_a_paired_difference_resamples_the_same_examples_in_both_arms():
    from experiments.evidence.tables import example_replicates, paired_diff
    a, b = _scored([1, 0, 1, 1, 0, 1, 1, 1]), _scored([1, 0, 1, 0, 0, 0, 1, 1])  # 6/8 vs 4/8: b errs where a does
    e = paired_diff(a, b, n=1, sign=True)
    assert e.value == 25.0 and e.how == "examples" and 0 <= e.lo < 25.0 < e.hi and str(e).endswith("(n=1)")
    reps = example_replicates("eval/accuracy", [a["per_example"]["eval"], b["per_example"]["eval"]])
    assert reps.shape == (2, 2000) and (reps[0] >= reps[1]).all()  # paired: a never below b on a resample
    other = _scored([1, 0, 1, 0, 0, 0, 1, 1], data={"limit_eval": 8})  # other data: no pairing, no interval
    assert paired_diff(a, other).lo is None and str(paired_diff(a, other)) == "25.00"
    assert example_replicates("eval/accuracy", [{"x": [1]}]) is None  # nothing it can recompute


def test_intervals_a_run_recorded_or_kept_as_replicates():
    from experiments.evidence.tables import metric_cell, replicate_cell
    m = {"bench/ratio": 2.0, "bench/ratio_lo": 1.5, "bench/ratio_hi": 2.5, "time/s": 1.0}
    assert str(metric_cell(m, "bench/ratio")) == "2.00 [1.50, 2.50]" and str(metric_cell(m, "time/s")) == "1.00"
    run = {"metrics": {"speedup/x": 2.0}, "extra": {"replicates": {"speedup/x": list(range(1, 42))}}}
    assert str(replicate_cell(run, "speedup/x", suffix="x")) == "2.00x [2.00, 40.00]"
    assert str(replicate_cell({"metrics": {}}, "speedup/x")) == "—"


def test_runs_of_picks_records_by_config_and_labels_them():
    from experiments.evidence.paper_values import PaperValues, Twin
    from experiments.evidence.tables import config_value, devices, hardware_label, model_label, runs_of

    def rec(method, variant, exp_id, hw=None):
        return {"exp_id": exp_id, "provenance": {"hardware": hw, "device": f"{hw or 'gpu'}: x"},
                "config": {"exp_id": exp_id, "hardware": {"name": "cpu"},
                           "method": {"name": method, "variant": variant},
                           "model": {"name": "minilm-l6", "stand_in_for": "bert-base-uncased"}}}
    runs = [rec("eat", "dense", "eat/table1_cpu", "cpu"), rec("eat_bench", "latency", "eat/bench"),
            rec("eat", "eat", "eat/ablation_cpu")]
    assert runs_of(runs, method="eat") == [runs[0], runs[2]] and runs_of(runs, variant="latency") == [runs[1]]
    assert runs_of(runs, exp_id="eat/table*") == [runs[0]] and runs_of(runs, {"method.variant": ["eat", "dense"]},
                                                                       method="eat") == [runs[0], runs[2]]
    assert config_value(runs[0], "method.variant") == "dense" and config_value(runs[0], "method.none.x") is None
    assert hardware_label(runs[0]) == "cpu" and hardware_label(runs[1]) == "cpu"  # provenance first, then config
    assert devices(runs) == "cpu: x, gpu: x"
    pv = PaperValues(twins={"models": {"minilm-l6": Twin("BERT-base", "why")}, "tasks": {}})
    assert model_label(runs[0], pv) == "minilm-l6 (for BERT-base)"
    assert model_label(runs[0]) == "minilm-l6 (stand-in for bert-base-uncased)"
