"""experiments/config.py `validate` and the runner's refusals: bad input is an error naming the key, the value and
the fix, raised before any work and recorded like any other failure."""
import json

import pytest

from experiments import registry
from experiments.config import ConfigError, validate
from experiments.run import execute, num_threads
from tests.conftest import compose

BAD = [  # (override, what the message must name); each of these used to hang, crash late or be ignored
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
                      ("method=intrinsic_dim", "model=smollm2-135m"), ("pema.enabled=true",)]:
        validate(compose(*overrides))


@pytest.mark.parametrize("override", ["seed=-1", "hardware.threads=0", "hardware.device=cuda", "data.limit_train=0"])
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
