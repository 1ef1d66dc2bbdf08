"""The runner end to end on tiny-bert + fixtures: records, skip-if-done, failures, kills, sweeps."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from experiments import REPO, registry
from experiments.assets import MissingAssetError
from experiments.config import ConfigError, compose
from experiments.run import execute

TASK_METRICS = {"rt-polarity": "eval/accuracy", "vitaminc": "eval/f1_macro", "wnut16": "eval/entity_f1",
                "squad-dev": "eval/f1"}


@pytest.mark.parametrize("task", TASK_METRICS)
def test_smoke_run_writes_a_complete_record(task, smoke_cfg, tmp_path):
    rec = execute(smoke_cfg(f"task={task}", "publish=true"), tmp_path / "run")
    assert rec["status"] == "ok"
    on_disk = json.loads((tmp_path / "run" / "result.json").read_text())
    assert on_disk == json.loads(json.dumps(rec, default=str))
    published = tmp_path / "results" / "finetune" / "runs" / "smoke" / "cpu" / f"{task}--tiny-bert--finetune-full--seed0.json"
    assert json.loads(published.read_text())["config_hash"] == rec["config_hash"]
    m = rec["metrics"]
    assert 0.0 <= m[TASK_METRICS[task]] <= (100.0 if task == "squad-dev" else 1.0)
    assert m["train/steps"] == 6 and m["params/trainable"] == m["params/total"] > 0
    assert rec["higher_is_better"][TASK_METRICS[task]] is True
    assert rec["n_samples"]["train_examples"] > 0 and rec["n_samples"]["eval_examples"] > 0
    for key in ("git_sha", "torch", "transformers", "device", "wall_s", "created_at"):
        assert key in rec["provenance"]
    assert rec["config"]["task"]["name"] == task and len(rec["config_hash"]) == 16


def test_rerun_skips_and_force_reruns(smoke_cfg, tmp_path, monkeypatch):
    first = execute(smoke_cfg(), tmp_path / "run")
    monkeypatch.setattr(registry, "resolve", lambda name: pytest.fail("a finished run must not run again"))
    assert execute(smoke_cfg(), tmp_path / "run") == first
    calls = []
    monkeypatch.setattr(registry, "resolve", lambda name: lambda cfg, ctx: calls.append(1) or {"eval/accuracy": 1.0})
    assert execute(smoke_cfg("force=true"), tmp_path / "run")["metrics"] == {"eval/accuracy": 1.0}
    # a changed config is a different run: same run_id and directory, new hash, so it runs again
    execute(smoke_cfg("train.lr=0.002"), tmp_path / "run")
    assert len(calls) == 2


def test_committed_results_are_recomputed_not_reused(smoke_cfg, tmp_path, monkeypatch):
    execute(smoke_cfg("publish=true"), tmp_path / "a")  # as if results/ came with the clone
    calls = []
    monkeypatch.setattr(registry, "resolve", lambda name: lambda cfg, ctx: calls.append(1) or {"eval/accuracy": 1.0})
    rec = execute(smoke_cfg("publish=true"), tmp_path / "fresh-clone-outputs")
    assert calls == [1] and rec["metrics"] == {"eval/accuracy": 1.0}
    published = tmp_path / "results" / "finetune" / "runs" / "smoke" / "cpu" / f"{rec['run_id']}.json"
    assert json.loads(published.read_text())["metrics"] == {"eval/accuracy": 1.0}  # the new run replaces it


def test_unreadable_result_is_redone(smoke_cfg, tmp_path):
    execute(smoke_cfg(), tmp_path / "run")
    (tmp_path / "run" / "result.json").write_text('{"status": "ok", "config_ha')  # torn write from another tool
    assert execute(smoke_cfg(), tmp_path / "run")["status"] == "ok"
    json.loads((tmp_path / "run" / "result.json").read_text())


def _boom(cfg, ctx):
    raise RuntimeError("diverged at step 3")


def test_failure_is_recorded_then_raised_or_swallowed(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "resolve", lambda name: _boom)
    with pytest.raises(RuntimeError, match="diverged"):
        execute(smoke_cfg("publish=true"), tmp_path / "a")
    rec = json.loads((tmp_path / "a" / "result.json").read_text())
    assert rec["status"] == "failed" and "diverged at step 3" in rec["error"] and "_boom" in rec["traceback"]
    assert not (tmp_path / "results").exists()  # failures are never published
    rec = execute(smoke_cfg("on_error=record"), tmp_path / "b")
    assert rec["status"] == "failed"
    # a failed record is not "done": the next run retries
    monkeypatch.setattr(registry, "resolve", lambda name: lambda cfg, ctx: {"eval/accuracy": 0.5})
    assert execute(smoke_cfg("on_error=record"), tmp_path / "b")["status"] == "ok"


def test_missing_asset_cache_names_make_assets(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "empty-cache"))
    cfg = compose("model=minilm-l6", "task=rt-polarity", f"results_dir={tmp_path}")
    with pytest.raises(MissingAssetError, match="make assets"):
        execute(cfg, tmp_path / "run")


def _main_as_hydra_calls_it(cfg, out, mode, monkeypatch):
    """experiments.run.main with the config Hydra would pass and the HydraConfig it would set."""
    from types import SimpleNamespace

    from hydra.core.hydra_config import HydraConfig

    from experiments.run import main
    hc = SimpleNamespace(runtime=SimpleNamespace(output_dir=str(out)), overrides=SimpleNamespace(task=[]), mode=mode)
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: hc))
    return main(cfg)


def test_a_refusal_is_one_line_and_a_nonzero_exit(smoke_cfg, tmp_path, monkeypatch, caplog):
    from hydra.errors import CompactHydraException
    from hydra.types import RunMode
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(registry, "resolve", lambda name: pytest.fail("no work may start"))
    with pytest.raises(SystemExit) as e:
        _main_as_hydra_calls_it(smoke_cfg("train.lr=0"), tmp_path / "a", RunMode.RUN, monkeypatch)
    assert e.value.code == 1
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert lines == ["run rt-polarity--tiny-bert--finetune-full--seed0 failed: ConfigError: train.lr=0.0 is not valid: "
                     "use a number > 0 (at lr 0 nothing trains; a method that trains nothing ignores train.lr)",
                     f"  record: {(tmp_path / 'a' / 'result.json').resolve()}"]
    assert "Traceback" in json.loads((tmp_path / "a" / "result.json").read_text())["traceback"]  # kept in the record
    caplog.clear()
    with pytest.raises(SystemExit):  # refused before any record: on_error itself, logged by main
        _main_as_hydra_calls_it(smoke_cfg("on_error=ignore"), tmp_path / "b", RunMode.RUN, monkeypatch)
    assert [r.getMessage() for r in caplog.records] == ["refused: on_error=ignore is not valid: use one of raise, "
                                                        "record (raise stops at a failure, record writes it and lets "
                                                        "a sweep go on)"]
    # in a -m sweep the other jobs still run: Hydra reports the job at the end, as one line (a compact exception)
    with pytest.raises(CompactHydraException, match="^ConfigError: train.lr=0.0 is not valid"):
        _main_as_hydra_calls_it(smoke_cfg("train.lr=0"), tmp_path / "c", RunMode.MULTIRUN, monkeypatch)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # Hydra's switch for the whole traceback still works
    with pytest.raises(ConfigError):
        _main_as_hydra_calls_it(smoke_cfg("train.lr=0"), tmp_path / "d", RunMode.RUN, monkeypatch)


@pytest.mark.slow
def test_refusals_from_the_command_line(tmp_path):
    """What a user sees: one line and exit 1, for a bad value, an unknown on_error and a missing experiment."""
    def run(*args):
        return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    proc = run("debug=smoke", "train.max_grad_norm=-1", f"hydra.run.dir={tmp_path / 'a'}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    assert "train.max_grad_norm=-1.0 is not valid: use a number ≥ 0 (0: no clipping)" in out
    assert f"record: {tmp_path / 'a' / 'result.json'}" in out and len(out.strip().splitlines()) == 2
    proc = run("debug=smoke", "on_error=ignore", "seed=7", f"hydra.run.dir={tmp_path / 'b'}")
    assert proc.returncode == 1 and "on_error=ignore is not valid" in proc.stderr + proc.stdout
    assert not (tmp_path / "b" / "result.json").exists()
    proc = run("-m", "experiment=finetune/nope")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("experiment=finetune/nope names no conf/experiment/finetune/nope.yaml; the "
                                  "experiments of finetune: ") and "finetune/smoke" in proc.stderr


def _runner(*overrides, out):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "experiments.run", "debug=smoke", f"hydra.run.dir={out}",
                             f"results_dir={out.parent / 'results'}", *overrides], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_killed_run_leaves_no_result_and_rerun_completes(tmp_path):
    out = tmp_path / "run"
    args = ("train.max_steps=400", "train.eval_every=1", "train.patience=0", "publish=true", "allow_dirty=true")
    proc = _runner(*args, out=out)
    deadline = time.time() + 120
    for line in proc.stdout:  # kill it once training is under way
        if "step 2/400" in line or time.time() > deadline:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "result.json").exists()
    assert not list(out.glob("*.tmp")) and not (tmp_path / "results").exists()
    proc = _runner(*args, out=out)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, log
    rec = json.loads((out / "result.json").read_text())
    assert rec["status"] == "ok" and rec["metrics"]["train/steps"] == 400


@pytest.mark.slow
def test_multirun_sweep_in_a_subprocess(tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "-m", "experiment=finetune/smoke", "seed=0,1",
                           f"hydra.sweep.dir={sweep}", f"results_dir={tmp_path / 'results'}", "on_error=record"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sweep.glob("cpu/*/result.json")]
    assert len(records) == 8 and all(r["status"] == "ok" for r in records)
    assert {r["run_id"] for r in records} == {f"{t}--tiny-bert--finetune-full--seed{s}" for t in TASK_METRICS
                                              for s in (0, 1)}
    assert "8 runs, 0 failed" in proc.stderr + proc.stdout


def test_sweep_keys_outside_the_base_name_get_their_own_record(smoke_cfg, tmp_path):
    """Two configs never share a record: a sweep over train.lr publishes two files, named by the override."""
    recs = [execute(smoke_cfg("publish=true", f"train.lr={lr}"), tmp_path / f"run{lr}", [f"train.lr={lr}", "seed=0"])
            for lr in ("0.001", "0.002")]
    assert [r["run_id"] for r in recs] == [f"rt-polarity--tiny-bert--finetune-full--seed0--train.lr={lr}"
                                           for lr in ("0.001", "0.002")]
    published = sorted((tmp_path / "results" / "finetune" / "runs" / "smoke" / "cpu").glob("*.json"))
    assert [json.loads(p.read_text())["config"]["train"]["lr"] for p in published] == [0.001, 0.002]
    assert recs[0]["overrides"] == ["train.lr=0.001", "seed=0"]


def test_record_carries_provenance(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg(), tmp_path / "run")
    assert rec["schema_version"] == 2 and rec["method_version"] == registry.version_of("finetune")
    prov = rec["provenance"]
    assert prov["git_dirty"] is False and prov["allow_dirty"] is False and prov["threads"] >= 1
    assert isinstance(prov["assets"], dict) and prov["tokenizer"]


def test_publish_from_a_dirty_tree_is_refused_before_any_work(smoke_cfg, tmp_path, monkeypatch):
    cfg = smoke_cfg("publish=true")
    monkeypatch.setattr("experiments.run.git_dirty", lambda: True)
    monkeypatch.setattr(registry, "resolve", lambda name: pytest.fail("no work may start"))
    with pytest.raises(ValueError, match="allow_dirty=true"):
        execute(cfg, tmp_path / "run")
    assert not (tmp_path / "results").exists()
    monkeypatch.setattr(registry, "resolve", lambda name: lambda cfg, ctx: {"eval/accuracy": 0.5})
    rec = execute(smoke_cfg("publish=true", "allow_dirty=true"), tmp_path / "run2")
    assert rec["provenance"]["git_dirty"] is True and rec["provenance"]["allow_dirty"] is True


def test_an_option_the_method_does_not_apply_is_refused(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=recycling", "pema.enabled=true")
    with pytest.raises(ValueError, match="pema.enabled=true but method=recycling .*methods that do: finetune"):
        execute(cfg, tmp_path / "run")


def wandb_records(path, block=32768):
    """The records of a wandb offline run file (a leveldb-style log: 7-byte file header, 32 KiB blocks, each record
    chunk with a 7-byte header crc32 | length | type (1 full, 2 first, 3 middle, 4 last))."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunks, out = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            break
        chunks += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(chunks)
            out.append(r)
            chunks = b""
    return out


@pytest.mark.slow
def test_wandb_offline_writes_a_real_run_with_the_metrics(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "debug=smoke", "logger=wandb", f"hydra.run.dir={out}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WANDB_MODE": "offline"})  # not silent: its warnings are checked
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "result.json").read_text())
    (run_file,) = out.glob("wandb/offline-run-*/run-*.wandb")
    logged, history = {}, []
    for r in wandb_records(run_file):
        kind = r.WhichOneof("record_type")
        items = r.history.item if kind == "history" else r.summary.update if kind == "summary" else []
        row = {it.key or ".".join(it.nested_key): json.loads(it.value_json) for it in items}
        logged.update(row)
        if kind == "history":
            history.append(row)
    assert logged["eval/accuracy"] == pytest.approx(rec["metrics"]["eval/accuracy"])
    assert logged["train/steps"] == rec["metrics"]["train/steps"] == 6 and logged["status"] == "ok"
    # the training curves, one point per step of this 6-step run (experiments.train.TrainLog)
    train = [h for h in history if "train/loss" in h]
    assert [h["_step"] for h in train] == [1, 2, 3, 4, 5, 6], history
    assert all(h["train/lr"] > 0 and h["train/examples_per_s"] > 0 and h["train/tokens_per_s"] > 0 for h in train)
    assert "deprecated" not in proc.stderr  # wandb.init's reinit takes a current value


@pytest.mark.slow
def test_submitit_local_sweep_finds_both_records_and_its_summary(tmp_path):
    """The local executor of the launcher that submits to SLURM: each job runs in its own process."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "-m", "debug=smoke", "seed=0,1",
                           "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}",
                           f"results_dir={tmp_path / 'results'}"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = sorted(json.loads(p.read_text())["run_id"] for p in sweep.glob("cpu/*/result.json"))
    assert records == [f"rt-polarity--tiny-bert--finetune-full--seed{s}" for s in (0, 1)]
    assert list(sweep.glob(".submitit/*/*_log.out"))  # the jobs really went through submitit
    assert "2 runs, 0 failed" in proc.stderr + proc.stdout


@pytest.mark.slow
def test_a_hub_name_fails_fast_offline_and_names_the_switch(tmp_path):
    """Outside make (no HF_*_OFFLINE in the environment) an uncached hub model fails at once, naming the switch,
    instead of retrying the network for 30-50 s."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "STRATA_HUB")}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty local cache: the model can only come from the hub
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "model=bert-base-uncased", "task=rt-polarity",
                           "on_error=record", f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads((tmp_path / "run" / "result.json").read_text())
    assert rec["status"] == "failed" and "STRATA_HUB=1" in rec["error"]
    assert "model=bert-base-uncased" in rec["error"] and rec["provenance"]["wall_s"] < 10


def test_a_finished_dirty_record_is_not_published_by_a_later_skip(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.run.git_dirty", lambda: True)
    execute(smoke_cfg(), tmp_path / "run")  # not published: allowed from a dirty tree
    monkeypatch.setattr(registry, "resolve", lambda name: pytest.fail("a finished run must not run again"))
    with pytest.raises(ValueError, match="uncommitted changes.*allow_dirty=true"):
        execute(smoke_cfg("publish=true"), tmp_path / "run")
    assert not (tmp_path / "results").exists()
