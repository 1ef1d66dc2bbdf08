"""experiments/config.py `validate` and the runner's refusals: bad input is an error naming the key, the value and
the fix, raised before any work and recorded like any other failure."""
import json

import pytest

from experiments import registry
from experiments.config import ConfigError, compose, validate
from experiments.run import execute, num_threads

BAD = [  # (override, what the message must name); unrefused, each would hang, crash late or be ignored
    ("data.limit_train=0", "data.limit_train=0"),
    ("data.limit_train=-5", "data.limit_train=-5"),
    ("data.limit_eval=0", "data.limit_eval=0"),
    ("data.max_length=0", "data.max_length=0"),
    ("hardware.batch_size=0", "hardware.batch_size=0"),
    ("train.grad_accum=0", "train.grad_accum=0"),
    ("train.epochs=0", "train.epochs=0"),
    ("store.dtype=fp8", "store.dtype=fp8"),
    ("seed=-1", "seed=-1"),
    ("hardware.threads=0", "hardware.threads=0"),
    ("train.warmup_ratio=1.5", "train.warmup_ratio=1.5"),
    ("train.max_grad_norm=-1", "train.max_grad_norm=-1.0"),  # clip_grad_norm_ would flip the gradient
    ("train.weight_decay=-5", "train.weight_decay=-5.0"),
    ("train.lr=0", "train.lr=0.0"),
    ("hardware.device=cpuu", "hardware.device=cpuu"),
    ("hardware.device=cuda:x", "hardware.device=cuda:x"),
    ("on_error=ignore", "on_error=ignore"),
    ("+train.lrr=1", "train.lrr"),
    ("+method.kk=3", "method.kk"),
    ("+nonsense=1", "nonsense"),
]


@pytest.mark.parametrize("override,named", BAD)
def test_bad_value_is_named_before_any_work(override, named):
    with pytest.raises(ConfigError, match=named.replace("+", r"\+").replace(".", r"\.")) as e:
        validate(compose(override))
    assert "use " in str(e.value) or "unknown config key" in str(e.value)  # says what is valid


def test_good_configs_pass():
    for overrides in [(), ("train.epochs=0", "train.max_steps=5"), ("data.limit_train=1",), ("method=recycling",),
                      ("method=intrinsic_dim", "model=smollm2-135m"), ("pema.enabled=true",),
                      ("train.max_grad_norm=0", "train.weight_decay=0"), ("hardware.device=auto",),
                      ("hardware.device=cuda:1",), ("hardware.device=mps",)]:
        validate(compose(*overrides))


@pytest.mark.parametrize("override,says", [
    ("train.max_grad_norm=-1", "a number ≥ 0 (0: no clipping)"),
    ("train.lr=0", "a number > 0 (at lr 0 nothing trains"),
    ("hardware.device=cpuu", "cpu, cuda, cuda:N (N a GPU index), mps or auto"),
])
def test_the_refusal_says_what_is_valid(override, says):
    with pytest.raises(ConfigError) as e:
        validate(compose(override))
    assert says in str(e.value)


def test_max_grad_norm_zero_means_no_clipping(monkeypatch):
    """What the schema comment and the refusal promise: 0 skips clipping, a positive norm clips."""
    import torch

    from experiments.train import fit
    from tests.helpers.toy_fit import Linear, accuracy, batches, cfg, data
    clipped = []
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, norm: clipped.append(norm))
    x, y = data()
    for norm in (0.0, 1.0):
        fn, n = batches(x, y, 8)
        fit(Linear(), fn, n, cfg(max_grad_norm=norm), lambda m: accuracy(m, x, y), "eval/acc", True,
            torch.device("cpu"))
    assert clipped == [1.0] * 8  # 8 steps at norm 1.0, none at 0


def _no_work(name):
    pytest.fail("no work may start")


def test_unknown_on_error_is_refused_before_the_skip(smoke_cfg, tmp_path, monkeypatch):
    """An unknown on_error neither hides behind a finished run nor acts as `record` (which returns: exit 0)."""
    monkeypatch.setattr(registry, "resolve", lambda name: lambda cfg, ctx: {"eval/accuracy": 0.5})
    execute(smoke_cfg(), tmp_path / "run")
    before = (tmp_path / "run" / "result.json").read_text()
    monkeypatch.setattr(registry, "resolve", _no_work)
    for out in ("run", "new-seed"):  # the finished config, and one that would run
        with pytest.raises(ConfigError, match="on_error=ignore is not valid: use one of raise, record"):
            execute(smoke_cfg("on_error=ignore"), tmp_path / out)
    assert (tmp_path / "run" / "result.json").read_text() == before  # the finished record is untouched
    assert not (tmp_path / "new-seed").exists()


def test_max_length_beyond_the_models_positions_is_refused_before_any_work(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "resolve", _no_work)
    with pytest.raises(ConfigError, match=r"data\.max_length=100000 is longer than model=tiny-bert reads: it has 512 "
                                          r"positions .*Use data\.max_length=512 or less"):
        execute(smoke_cfg("data.max_length=100000"), tmp_path / "a")
    with pytest.raises(ConfigError, match=r"task\.max_length=513 .*512 positions"):  # the task's own length too
        execute(smoke_cfg("task.max_length=513"), tmp_path / "b")
    monkeypatch.setattr(registry, "resolve", lambda name: lambda cfg, ctx: {"eval/accuracy": 0.5})
    assert execute(smoke_cfg("data.max_length=512"), tmp_path / "c")["status"] == "ok"


def test_max_positions_reads_the_config_without_weights(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from experiments.models import max_positions
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # no hub model cached
    known = {"tiny-bert": 512, "tiny-llama": 512, "bert-base-uncased": 512, "gpt2": 1024,
             "roberta-large": 512,  # 514 positions, the first two sit below the padding index
             "deberta-v3-base": None,  # relative positions only: no table to overflow
             "llama-3-8b": None}  # hub, no from_config, offline and uncached: its load refuses instead
    assert {m: max_positions(compose(f"model={m}").model) for m in known} == known
    # an offline model: its asset's config.json, read without loading (or verifying) the weights
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "models" / "minilm-l6").mkdir(parents=True)
    (tmp_path / "cache" / "models" / "minilm-l6" / "config.json").write_text(
        json.dumps({"model_type": "bert", "max_position_embeddings": 128}))
    assert max_positions(compose("model=minilm-l6").model) == 128
    assert max_positions(compose("model=minilm-l3").model) is None  # not built: `make assets` is the load's refusal


def test_a_hub_model_offline_and_uncached_is_refused_before_loading(smoke_cfg, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from experiments.models import weights_path
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("transformers.AutoModel.from_pretrained", lambda *a, **k: pytest.fail("no load may start"))
    rec = execute(smoke_cfg("model=bert-base-uncased", "on_error=record"), tmp_path / "run")
    assert rec["status"] == "failed" and rec["error"].startswith(
        "ConfigError: set STRATA_HUB=1 to download it: model=bert-base-uncased loads bert-base-uncased from the "
        "Hugging Face hub")
    assert rec["error"].count("STRATA_HUB=1") == 1  # the runner's own hint is not appended twice
    # cached: no refusal, the hub id is handed to transformers
    snap = tmp_path / "hf" / "models--bert-base-uncased" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (tmp_path / "hf" / "models--bert-base-uncased" / "refs").mkdir()
    (tmp_path / "hf" / "models--bert-base-uncased" / "refs" / "main").write_text("abc")
    assert weights_path(compose("model=bert-base-uncased").model) == "bert-base-uncased"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online: never refused
    assert weights_path(compose("model=gpt2").model) == "openai-community/gpt2"


def test_an_unknown_experiment_lists_those_that_exist():
    from experiments.config import unknown_experiment
    msg = unknown_experiment(["-m", "experiment=finetune/nope"])
    assert msg.startswith("experiment=finetune/nope names no conf/experiment/finetune/nope.yaml; the experiments of "
                          "finetune: ") and "finetune/default_cpu" in msg and "finetune/smoke" in msg
    msg = unknown_experiment(["experiment=finetun/smoke"])
    assert "experiment=finetun/smoke names no paper" in msg and "eat, finetune, intrinsic_dim" in msg
    assert "finetune/nope" in unknown_experiment(["-m", "experiment=finetune/smoke,finetune/nope"])
    for fine in (["experiment=finetune/smoke"], ["+experiment=eat/smoke"], ["experiment=null"], ["seed=1"],
                 ["-m", "experiment=glob(finetune/*)"]):
        assert unknown_experiment(fine) is None


def test_listing_marks_where_each_model_and_task_loads_from():
    from experiments.config import listing
    rows = {line.split()[0]: line.split()[1:] for line in listing().splitlines() if line.startswith("  ")}
    assert rows["minilm-l6"][:3] == ["offline", "asset", "models/minilm-l6,"]
    assert rows["tiny-bert"][0] == "random" and rows["rt-polarity"][:3] == ["offline", "asset", "data/rt-polarity,"]
    assert rows["bert-base-uncased"][:2] == ["hub", "bert-base-uncased"] and rows["sst2"][:2] == ["hub", "nyu-mll/glue"]


@pytest.mark.parametrize("override", ["seed=-1", "hardware.threads=0", "hardware.device=cuda", "data.limit_train=0",
                                      "train.max_grad_norm=-1", "hardware.device=cpuu", "data.max_length=100000"])
def test_a_refused_job_leaves_a_failed_record(override, smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(registry, "resolve", lambda name: pytest.fail("no work may start"))
    rec = execute(smoke_cfg(override, "on_error=record"), tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "result.json").read_text())
    assert rec["status"] == on_disk["status"] == "failed" and override.split("=")[0] in on_disk["error"]
    with pytest.raises(ConfigError):  # on_error=raise: recorded, then raised
        execute(smoke_cfg(override), tmp_path / "run2")
    assert json.loads((tmp_path / "run2" / "result.json").read_text())["status"] == "failed"


def test_threads_follow_omp_num_threads_unless_set(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert num_threads(None) == 1 and num_threads(3) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    import os
    assert num_threads(None) == len(os.sched_getaffinity(0))



def test_smoke_configs_are_shared_but_each_test_gets_its_own_copy(smoke_cfg, tmp_path):
    a = smoke_cfg("seed=3")
    a.seed, a.task.name = 4, "edited"
    b = smoke_cfg("seed=3")
    assert (b.seed, b.task.name, b.results_dir) == (3, "rt-polarity", str(tmp_path / "results")) and b is not a
