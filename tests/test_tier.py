"""scripts.tier: which experiment files a tier runs, in what order, the progress lines, stopping at a failure, and a
summary file that is whole after every experiment (a killed tier says how far it got); a tier is what publishes (no
experiment file does); make help's and make list's lines; make smoke's overall line."""
import json
import os
import re

import pytest

from scripts import tier
from tests.conftest import CONF, compose


@pytest.fixture
def conf(tmp_path):
    d = tmp_path / "recycling"
    d.mkdir()
    for name in ("table1", "table1_cpu", "cost_cpu", "smoke", "offline_gpu", "depth_cpu", "bench", "smoke_x"):
        (d / f"{name}.yaml").write_text("# @package _global_\n")
    return tmp_path


def test_cpu_tier_runs_the_cpu_files_sorted_and_gpu_the_rest_without_smoke_or_benchmarks(conf):
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
    assert code == 0 and calls == [["experiment=pema/a_cpu", "publish=true"], ["experiment=pema/b_cpu", "publish=true"]]
    assert lines[0].startswith("== [pema-cpu 1/2] pema/a_cpu  (tier elapsed 00:00)")
    assert "[pema-cpu 2/2] pema/b_cpu done in" in lines[3] and "2 experiments in" in lines[-1]
    summary = json.loads(out.read_text())
    assert summary["complete"] and [e["experiment"] for e in summary["experiments"]] == ["pema/a_cpu", "pema/b_cpu"]


def test_a_failure_stops_the_tier_with_its_code_and_the_summary_says_incomplete(tmp_path):
    out = tmp_path / "s.json"
    calls = []
    code = tier.run_tier("pema", "gpu", ["a", "b"], lambda o: calls.append(o) or 3, out=out, say=lambda s: None)
    assert code == 3 and calls == [["experiment=pema/a", "publish=true", "hardware=gpu"]]  # b never started
    summary = json.loads(out.read_text())
    assert not summary["complete"] and summary["experiments"][0]["exit_code"] == 3


def test_clock():
    assert tier.clock(65) == "01:05" and tier.clock(3725) == "1:02:05"


def test_no_experiment_file_publishes_so_a_users_sweep_of_one_does_not():
    """publish=true comes from the tier's command line only: a user's `-m experiment=...` with debugging overrides
    must not write into the committed results/."""
    setting = re.compile(r"^[^#]*\bpublish\s*:", re.M)
    files = sorted((CONF / "experiment").rglob("*.yaml")) + sorted((CONF / "debug").rglob("*.yaml"))
    assert len(files) > 100
    assert [str(f.relative_to(CONF)) for f in files if setting.search(f.read_text())] == []
    assert compose("experiment=finetune/default_cpu").publish is False
    assert compose("experiment=recycling/table1_cpu", "publish=true").publish is True  # what the tier passes


def test_kinds():
    assert [tier.kind(n) for n in ("smoke_p32", "bench", "table1_cpu", "offline_gpu_ft", "table1")] == \
        ["smoke", "bench", "cpu", "offline", "hub"]


def test_help_lists_benchmarks_apart_from_the_paper_scale_tier():
    lines = tier.targets(["intrinsic_dim", "finetune"], "gpu")
    scale = next(line for line in lines if line.startswith("  intrinsic_dim ") and "paper scale" in line)
    assert "bench" not in scale and "icl_vs_sft" in scale and "smoke" not in scale
    assert any("benchmarks, outside the tiers" in line and line.endswith(": bench") for line in lines)
    assert not any("benchmarks" in line for line in tier.targets(["finetune"], "gpu"))  # no bench file: no line


def test_list_says_which_commands_publish_and_maps_no_smoke_file_to_results():
    lines = tier.listing(["finetune", "layer_fusion", "store"], "gpu")
    assert "only with publish=true" in lines[0]
    row = {line.split()[0]: line.split(None, 1)[1] for line in lines[1:]}
    assert row["conf/experiment/finetune/default_cpu.yaml"] == \
        "make finetune-cpu publishes -> results/finetune/runs/default_cpu/cpu/"
    assert row["conf/experiment/finetune/smoke.yaml"].startswith("make smoke; never publishes")
    assert "results/" not in row["conf/experiment/layer_fusion/smoke_p32.yaml"]
    assert "only with publish=true" in row["conf/experiment/layer_fusion/bench.yaml"]
    # a benchmark keeps its numbers in its record, published like any other run: nothing else of its own in results/
    assert row["conf/experiment/store/bench.yaml"] == \
        "benchmark, in no tier; publishes -> results/store/runs/bench/<hardware>/ only with publish=true"


def test_smoke_files_name_their_sweep_folder_as_make_smoke_reads_it():
    for f in sorted((CONF / "experiment").glob("*/smoke*.yaml")):
        assert f"\nexp_id: {f.parent.name}/{f.stem}\n" in f.read_text(), f


def test_smoke_reruns_every_job_and_ends_with_one_overall_line(tmp_path):
    conf, sweeps = tmp_path / "conf", tmp_path / "sweeps"
    for paper, names in {"a": ("smoke", "table1_cpu"), "b": ("smoke", "smoke_p32")}.items():
        (conf / paper).mkdir(parents=True)
        for n in names:
            (conf / paper / f"{n}.yaml").write_text("# @package _global_\n")
    stale = sweeps / "a" / "smoke" / "cpu" / "old" / "result.json"  # an earlier make smoke's run: not this one's
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"run_id": "old", "status": "failed"}))
    os.utime(stale, (0, 0))
    jobs = {"a/smoke": ["ok", "ok"], "b/smoke": ["ok", "failed"], "b/smoke_p32": []}

    def launch(overrides):
        calls.append(overrides)
        exp = overrides[0].split("=", 1)[1]
        for i, status in enumerate(jobs[exp]):
            rec = sweeps / exp / "cpu" / f"r{i}" / "result.json"
            rec.parent.mkdir(parents=True, exist_ok=True)
            rec.write_text(json.dumps({"run_id": f"r{i}", "status": status}))
        return 1 if exp == "b/smoke_p32" else 0  # died before any job

    calls, lines = [], []
    code = tier.smoke(["a", "b"], launch, sweeps=sweeps, conf=conf, say=lines.append)
    assert calls == [[f"experiment={e}", "force=true", "on_error=record"] for e in jobs]
    assert code == 1 and lines[-1].startswith("== make smoke: 3 sweeps, 4 runs, 2 failed in ")
    assert "failed: b/smoke: r1" in lines[-1] and "failed: b/smoke_p32: the sweep exited with code 1" in lines[-1]
    for rec in sweeps.rglob("result.json"):  # the next make smoke, later
        os.utime(rec, (0, 0))
    jobs["b/smoke"], jobs["b/smoke_p32"] = ["ok"], ["ok"]
    lines.clear()

    def launch_ok(overrides):
        launch(overrides)
        return 0
    assert tier.smoke(["a", "b"], launch_ok, sweeps=sweeps, conf=conf, say=lines.append) == 0
    assert lines[-1].startswith("== make smoke: 3 sweeps, 4 runs, 0 failed in ")
