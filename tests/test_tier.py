"""scripts.tier: which experiment files a tier runs (their declared tier), in what order, the progress lines and ETA,
a failure table and a non-zero exit when any run failed, a summary file that is whole after every experiment (a
killed tier says how far it got, and its rerun completes the rest); a tier is what publishes (no experiment file
does); make help's and make list's lines; make smoke's overall line."""
import json
import os
import re
from pathlib import Path

import pytest

from experiments.config import CONF, compose
from experiments.results import NOT_HASHED
from scripts import tier


PAPERS = sorted(p.name for p in (CONF / "experiment").iterdir() if p.is_dir())
DECLARED = {"table1": "hub", "table1_cpu": "cpu", "cost_cpu": "cpu", "smoke": "smoke", "offline_gpu": "offline",
            "depth_cpu": "cpu", "bench": "bench", "smoke_x": "smoke", "probe_cpu_by_hand": "manual",
            "build_sources": "hub", "offline_gpu_build_target": "offline", "a_table": "hub"}


def declare(folder, tiers):
    folder.mkdir(parents=True, exist_ok=True)
    for name, kind in tiers.items():
        (folder / f"{name}.yaml").write_text(f"# @package _global_\nexp_id: {folder.name}/{name}\n"
                                             f"experiment: {{tier: {kind}}}\n")


@pytest.fixture
def conf(tmp_path):
    declare(tmp_path / "recycling", DECLARED)
    return tmp_path


def test_cpu_tier_runs_the_cpu_files_sorted_and_gpu_the_builds_first_then_the_rest(conf):
    assert tier.experiments("recycling", "cpu", conf) == ["cost_cpu", "depth_cpu", "table1_cpu"]
    assert tier.experiments("recycling", "gpu", conf) == ["build_sources", "offline_gpu_build_target", "a_table",
                                                          "offline_gpu", "table1"]
    assert tier.experiments("recycling", "gpu", conf, hub=False) == ["offline_gpu_build_target", "offline_gpu"]
    assert tier.experiments("recycling", "cpu", conf, hub=False) == ["cost_cpu", "depth_cpu", "table1_cpu"]


def test_a_file_without_a_declared_tier_is_refused_naming_it_and_the_kinds(conf):
    (conf / "recycling" / "table4.yaml").write_text("# @package _global_\nexp_id: recycling/table4\n")
    with pytest.raises(SystemExit, match=r"table4.yaml declares experiment.tier=None: add `experiment: "
                                         r"\{tier: <kind>\}` with kind one of cpu, offline, hub, manual"):
        tier.experiments("recycling", "gpu", conf)


def test_every_experiment_file_declares_its_tier_and_the_tier_stays_out_of_the_run_identity():
    for paper in PAPERS:
        for name in tier.experiment_names(paper):
            tier.kind(paper, name)  # raises for a missing or unknown tier
    cfg = compose("experiment=layer_fusion/p32_nli")
    assert cfg.experiment.tier == "manual" and "experiment" in NOT_HASHED  # declaring it changed no config hash


@pytest.mark.parametrize("paper", PAPERS)
def test_a_gpu_tier_runs_no_cpu_intended_experiment_and_its_builds_first(paper):
    """The CPU runs kept outside every tier (their files say so) never run on the GPU machine."""
    by_hand = {"layer_fusion": {"p32_encoder_ft", "p32_lambda_lr", "p32_nli"},
               "reverse_probing": {p.stem for p in (CONF / "experiment" / "reverse_probing").glob("quoref_*")}}
    names = tier.experiments(paper, "gpu")
    assert not set(names) & by_hand.get(paper, set())
    assert not [n for n in names if n.endswith("_cpu") or n.startswith(("smoke", "bench"))]
    assert all(tier.kind(paper, n) in ("offline", "hub") for n in names)
    builds = [n for n in names if tier.is_build(n)]
    assert names[:len(builds)] == builds
    if paper == "reverse_probing":
        assert "offline_gpu_build_quoref" in builds and len(by_hand[paper]) == 11
    assert all(tier.kind(paper, n) == "manual" for n in by_hand.get(paper, ()))


def test_layer_fusions_cpu_tier_is_its_cpu_files_and_its_gpu_tier_the_offline_ones():
    cpu = tier.experiments("layer_fusion", "cpu")
    assert "fewshot_cpu" in cpu and "p32_cpu" in cpu and all(n.endswith("_cpu") for n in cpu)
    assert tier.experiments("layer_fusion", "gpu", hub=False) == ["offline_gpu_fewshot", "offline_gpu_ft",
                                                                  "offline_gpu_p32"]
    assert not any(n.startswith("smoke") for n in tier.experiments("layer_fusion", "gpu"))


def test_unknown_paper_names_the_known_ones(conf):
    with pytest.raises(SystemExit, match="papers: recycling"):
        tier.experiments("recyclng", "cpu", conf)


def sweep(sweeps, jobs, codes=None):
    """A launch that leaves each job's folder as Hydra and the runner do: .hydra/overrides.yaml for every job it
    starts, result.json for a job that ran (a finished ok record is skipped and stays as it was; None: the job died
    before writing one). jobs: experiment -> {run: status}."""
    calls = []

    def launch(overrides):
        calls.append(overrides)
        exp = overrides[0].split("=", 1)[1]
        for run, status in jobs[exp].items():
            d = sweeps / exp / "gpu" / run
            (d / ".hydra").mkdir(parents=True, exist_ok=True)
            (d / ".hydra" / "overrides.yaml").write_text("[]\n")
            rec = d / "result.json"
            if status is None or rec.exists() and json.loads(rec.read_text())["status"] == "ok":
                continue
            error = {"error": f"OSError: {run} could not load its model\nsecond line"} if status == "failed" else {}
            rec.write_text(json.dumps({"run_id": run, "status": status, **error}))
        return (codes or {}).get(exp, 0)
    return launch, calls


def age(folder):
    """Make every file look written long ago (a later tier's start is then clearly after them)."""
    for p in folder.rglob("*"):
        os.utime(p, (0, 0))


def test_progress_lines_name_position_elapsed_and_runs_and_summary_is_written(tmp_path):
    lines, sweeps = [], tmp_path / "sweeps"
    launch, calls = sweep(sweeps, {"pema/a_cpu": {"r0": "ok"}, "pema/b_cpu": {"r0": "ok", "r1": "ok"}})
    code = tier.run_tier("pema", "cpu", ["a_cpu", "b_cpu"], launch, out_dir=tmp_path / "tiers", say=lines.append,
                         sweeps=sweeps)
    assert code == 0 and calls == [["experiment=pema/a_cpu", "publish=true"], ["experiment=pema/b_cpu", "publish=true"]]
    assert lines[0] == "== [pema-cpu 1/2] pema/a_cpu  (elapsed 00:00)"  # no ETA without estimates
    assert lines[3].startswith("== [pema-cpu 2/2] pema/b_cpu done: 2 runs (2 ran, 0 finished before) in ")
    assert lines[-1].startswith("== [pema] 2 experiments, 3 runs, 0 failed in ")
    summary = json.loads((tmp_path / "tiers" / "pema-cpu.json").read_text())
    assert summary["complete"] and summary["failed"] == []
    assert [(e["experiment"], e["runs"], e["failed"]) for e in summary["experiments"]] == \
        [("pema/a_cpu", 1, 0), ("pema/b_cpu", 2, 0)]


def test_a_sweep_whose_runs_failed_exits_0_but_the_tier_counts_them_and_exits_1_with_a_failure_table(tmp_path):
    """experiments.run with on_error=record exits 0 when its runs fail; the tier reads the records. Every experiment
    still runs (a long GPU tier does not stop at one failed run); a sweep that died before a job counts too."""
    lines, sweeps = [], tmp_path / "sweeps"
    launch, calls = sweep(sweeps, {"pema/a": {"r0": "ok", "r1": "failed", "r2": None}, "pema/b": {"r0": "ok"},
                                   "pema/c": {}}, codes={"pema/c": 2})
    code = tier.run_tier("pema", "gpu", ["a", "b", "c"], launch, out_dir=tmp_path, say=lines.append, sweeps=sweeps)
    assert code == 1 and [c[0] for c in calls] == ["experiment=pema/a", "experiment=pema/b", "experiment=pema/c"]
    assert calls[0] == ["experiment=pema/a", "publish=true", "hardware=gpu"]
    assert "pema/a 2 FAILED: 3 runs" in lines[1] and " done: 1 runs" in lines[3]
    out = "\n".join(lines)
    assert "3 experiments, 4 runs, 3 failed" in out
    table = lines[-1].splitlines()
    assert table[1].split(" | ")[:3] == ["experiment", "run", "error".ljust(len(table[2].split(" | ")[2]))]
    rows = [[c.strip() for c in row.split(" | ")] for row in table[2:]]
    assert rows == [["pema/a", "r1", "OSError: r1 could not load its model", str(sweeps / "pema/a/gpu/r1/result.json")],
                    ["pema/a", "r2", "no record: the job died before writing it",
                     str(sweeps / "pema/a/gpu/r2/result.json")],
                    ["pema/c", "-", "the sweep exited with code 2", "-"]]
    summary = json.loads((tmp_path / "pema-gpu.json").read_text())
    assert summary["complete"] is False and [f["run"] for f in summary["failed"]] == ["r1", "r2", "-"]
    assert [e["failed"] for e in summary["experiments"]] == [2, 0, 1]


def test_a_killed_tier_rerun_skips_what_finished_and_completes_the_rest(tmp_path):
    sweeps, out = tmp_path / "sweeps", tmp_path / "tiers"
    jobs = {"pema/a": {"r0": "ok", "r1": "failed"}, "pema/b": {"r0": "ok"}}
    launch, _ = sweep(sweeps, jobs)

    def killed(overrides):
        if overrides[0] == "experiment=pema/b":
            raise KeyboardInterrupt  # the machine went away during b
        return launch(overrides)
    with pytest.raises(KeyboardInterrupt):
        tier.run_tier("pema", "gpu", ["a", "b"], killed, out_dir=out, say=lambda s: None, sweeps=sweeps)
    summary = json.loads((out / "pema-gpu.json").read_text())  # whole, and it says how far the tier got
    assert not summary["complete"] and [e["experiment"] for e in summary["experiments"]] == ["pema/a"]
    age(sweeps)
    jobs["pema/a"]["r1"] = "ok"  # the rerun: r0 is skipped, r1 reruns and now passes, b runs
    lines = []
    assert tier.run_tier("pema", "gpu", ["a", "b"], launch, out_dir=out, say=lines.append, sweeps=sweeps) == 0
    assert "pema/a done: 2 runs (1 ran, 1 finished before)" in lines[1]
    summary = json.loads((out / "pema-gpu.json").read_text())
    assert summary["complete"] and [e["runs"] for e in summary["experiments"]] == [2, 1]


def test_eta_starts_from_the_estimates_and_follows_the_measured_pace():
    assert tier.eta_s(10, 0, 0) == 36000
    assert tier.eta_s(10, 1800, 1.0) == 18000  # half the estimated time so far: half the rest
    assert tier.eta_s(10, 5, 0.1) == 36000  # 6 estimated minutes ran: too little to rescale by
    lines = []
    tier.run_tiers([("p", ["a"]), ("q", ["b"])], "gpu", lambda o: 0, say=lines.append, sweeps=Path("/nonexistent"),
                   hours={"p/a": 1.0, "q/b": 2.5})
    assert lines[0] == "== [p-gpu 1/2] p/a  (elapsed 00:00, ETA 3:30:00)"
    assert re.fullmatch(r"== \[q-gpu 2/2\] q/b  \(elapsed 00:\d\d, ETA 2:30:00\)", lines[2])  # nothing ran in a
    assert lines[-1].startswith("== [2 papers] 2 experiments, 0 runs, 0 failed")


def test_the_estimates_cover_every_gpu_tier_file_and_name_no_other_kind():
    hours = tier.estimates()
    gpu = {f"{p}/{n}" for p in PAPERS for n in tier.experiments(p, "gpu")}
    assert sorted(gpu - set(hours)) == [] and all(v >= 0 for v in hours.values())
    named = [k.split("/") for k in hours if (CONF / "experiment" / f"{k}.yaml").exists()]
    assert len(named) > 60 and all(tier.kind(p, n) in ("offline", "hub") for p, n in named)


def test_a_dirty_tree_is_refused_before_any_run(monkeypatch, capsys):
    from experiments import results
    monkeypatch.setenv("STRATA_HUB", "0")
    monkeypatch.setattr(results, "git_dirty", lambda: True)
    monkeypatch.setattr(tier.subprocess, "run", lambda *a, **k: pytest.fail("a run was launched"))
    assert tier.main(["pema"]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    from scripts import preflight
    monkeypatch.setattr(preflight, "check", lambda *a, **k: 1)  # the GPU tier's pre-flight refused
    assert tier.main(["pema", "--hardware", "gpu"]) == 2


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


def test_help_lists_benchmarks_apart_from_the_paper_scale_tier():
    lines = tier.targets(["intrinsic_dim", "pema"], "gpu")
    scale = next(line for line in lines if line.startswith("  intrinsic_dim ") and "paper scale" in line)
    assert "bench" not in scale and "icl_vs_sft" in scale and "smoke" not in scale
    assert any("benchmarks, outside the tiers" in line and line.endswith(": bench") for line in lines)
    assert not any("benchmarks" in line for line in tier.targets(["pema"], "gpu"))  # no bench file: no line


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
        declare(conf / paper, {n: "cpu" if n.endswith("_cpu") else "smoke" for n in names})
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


@pytest.mark.slow  # two runner processes: about 15 s on 2 shared cores
def test_the_runner_exits_0_with_every_run_failed_and_the_tier_still_exits_1(tmp_path):
    """The real runner: two jobs on a model whose weights are not in the asset cache, on_error=record."""
    import subprocess
    import sys

    def launch(overrides):
        return subprocess.run([sys.executable, "-m", "experiments.run", "-m", *overrides], cwd=tier.REPO,
                              capture_output=True).returncode
    lines, codes = [], []
    sweeps = tmp_path / "sweeps"
    extra = ["model=bert-base-cased-re", "task=rt-polarity,wnut16", "on_error=record", "publish=false",
             f"hydra.sweep.dir={sweeps}/finetune/smoke"]
    code = tier.run_tier("finetune", "cpu", ["smoke"], lambda o: codes.append(launch(o)) or codes[-1],
                         out_dir=tmp_path, say=lines.append, sweeps=sweeps, extra=extra)
    assert codes == [0] and code == 1  # the sweep says success; its records do not
    assert "finetune/smoke 2 FAILED: 2 runs (2 ran" in lines[1]
    rows = [[c.strip() for c in row.split(" | ")] for row in lines[-1].splitlines()[2:]]
    assert [r[1] for r in rows] == ["rt-polarity--bert-base-cased-re--finetune-full--seed0",
                                    "wnut16--bert-base-cased-re--finetune-full--seed0"]
    assert all("bert-base-cased-re" in r[2] for r in rows), rows  # the error's first line: the missing model
