"""scripts.tier: which experiment files a tier runs, in what order, the progress lines, stopping at a failure, and a
summary file that is whole after every experiment (a killed tier says how far it got)."""
import json

import pytest

from scripts import tier


@pytest.fixture
def conf(tmp_path):
    d = tmp_path / "recycling"
    d.mkdir()
    for name in ("table1", "table1_cpu", "cost_cpu", "smoke", "offline_gpu", "depth_cpu"):
        (d / f"{name}.yaml").write_text("# @package _global_\n")
    return tmp_path


def test_cpu_tier_runs_the_cpu_files_sorted_and_gpu_the_rest_without_smoke(conf):
    assert tier.experiments("recycling", "cpu", conf) == ["cost_cpu", "depth_cpu", "table1_cpu"]
    assert tier.experiments("recycling", "gpu", conf) == ["offline_gpu", "table1"]
    assert tier.experiments("recycling", "gpu", conf, hub=False) == ["offline_gpu"]  # packaged models only
    assert tier.experiments("recycling", "cpu", conf, hub=False) == ["cost_cpu", "depth_cpu", "table1_cpu"]


def test_unknown_paper_names_the_known_ones(conf):
    with pytest.raises(SystemExit, match="papers: recycling"):
        tier.experiments("recyclng", "cpu", conf)


def test_progress_lines_name_position_and_elapsed_and_summary_is_written(tmp_path):
    lines, calls = [], []
    out = tmp_path / "tiers" / "pema-cpu.json"
    code = tier.run_tier("pema", "cpu", ["a_cpu", "b_cpu"], lambda o: calls.append(o) or 0, out=out, say=lines.append)
    assert code == 0 and calls == [["experiment=pema/a_cpu"], ["experiment=pema/b_cpu"]]
    assert lines[0].startswith("== [pema-cpu 1/2] pema/a_cpu  (tier elapsed 00:00)")
    assert "[pema-cpu 2/2] pema/b_cpu done in" in lines[3] and "2 experiments in" in lines[-1]
    summary = json.loads(out.read_text())
    assert summary["complete"] and [e["experiment"] for e in summary["experiments"]] == ["pema/a_cpu", "pema/b_cpu"]


def test_a_failure_stops_the_tier_with_its_code_and_the_summary_says_incomplete(tmp_path):
    out = tmp_path / "s.json"
    calls = []
    code = tier.run_tier("pema", "gpu", ["a", "b"], lambda o: calls.append(o) or 3, out=out, say=lambda s: None)
    assert code == 3 and calls == [["experiment=pema/a", "hardware=gpu"]]  # b never started
    summary = json.loads(out.read_text())
    assert not summary["complete"] and summary["experiments"][0]["exit_code"] == 3


def test_clock():
    assert tier.clock(65) == "01:05" and tier.clock(3725) == "1:02:05"
