"""Every config composes and validates, and every job of every grid passes its method's own checks; bad input fails
naming the problem."""
import importlib

import pytest
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from experiments import REPO, registry
from experiments.config import CONF, compose
from tests.helpers.grids import EXPERIMENTS, GROUPS, compose_experiment, experiments_of, job_configs, methods_run

GROUP_FILES = {g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in GROUPS}
CHECKED = sorted(name for name, m in registry.METHODS.items() if m.check)  # methods with refusals of their own


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("group,name", [(g, n) for g, names in GROUP_FILES.items() for n in names])
def test_every_group_option_composes_with_its_schema(group, name):
    cfg = compose(f"{group}={name}")
    node = cfg[group]
    assert node.name == name
    assert OmegaConf.is_missing(node, "name") is False
    if group in ("model", "task"):  # typed: resolving fails if a YAML key is misspelled or mistyped
        OmegaConf.to_container(node, resolve=True, throw_on_missing=True)


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes(exp):
    cfg, _ = compose_experiment(exp)
    assert cfg.exp_id == exp
    assert cfg.run_id.startswith(f"{cfg.task.name}--{cfg.model.name}--{cfg.method.name}-")


def test_registry_has_schema_yaml_and_package_for_every_method():
    for name, m in registry.METHODS.items():
        assert (CONF / "method" / f"{name}.yaml").exists()
        assert (CONF / "experiment" / m.paper).is_dir()
        assert callable(registry.resolve(name)) and m.version >= 1
        assert set(m.options) <= set(registry.OPTIONS)


def method_check(method: str):
    """The method's check function; a registered name that does not resolve fails naming it."""
    ref = registry.METHODS[method].check
    module, attr = ref.split(":")
    fn = getattr(importlib.import_module(module), attr, None)
    assert callable(fn), f"method={method} names its check {ref!r}, but {module} defines no {attr}(cfg)"
    return fn


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("method", CHECKED)
def test_every_method_with_a_check_names_it_and_runs_in_an_experiment_of_its_paper(method):
    """So the walk below checks some job of it."""
    method_check(method)
    paper = registry.METHODS[method].paper
    assert any(method in methods_run(exp) for exp in experiments_of(paper)), \
        f"no experiment in conf/experiment/{paper}/ runs method={method}: nothing checks its jobs"


@pytest.mark.parametrize("exp", [e for paper in sorted({registry.METHODS[m].paper for m in CHECKED})
                                 for e in experiments_of(paper)])
@pytest.mark.slow  # a sweep over every case: over 10 s in all
def test_every_grid_job_passes_its_methods_check(exp):
    """Every job of an experiment file of a paper with checked methods passes its method's own refusals (Method.check,
    called through registry.check as the runner calls it) before any work. No other folder runs a checked method
    (the slow grid walk in tests/test_identity.py asserts that)."""
    for job, cfg in job_configs(exp, copy=False):
        method = cfg.method.name
        if method in CHECKED:
            method_check(method)
            try:
                registry.check(cfg)
            except Exception as e:
                raise AssertionError(f"experiment={exp} job {job} is refused by method={method}'s check: {e}") from e


def test_a_method_check_refuses_what_it_should():
    """The walk can fail: a job with an invalid value is refused through registry.check."""
    cfg, _ = compose_experiment("eat/ablation_cpu", "method.variant=dense")
    assert cfg.method.name == "eat_bench"
    assert registry.METHODS["eat_bench"].check, "method=eat_bench registers no check: its refusals never run"
    with pytest.raises(ValueError, match="training arms"):  # a benchmark given a training arm
        registry.check(cfg)


def test_misspelled_key_is_named():
    with pytest.raises(ConfigCompositionException) as e:
        compose("train.lrr=1")
    assert "lrr" in str(e.value.__cause__) and "TrainConfig" in str(e.value.__cause__)


def test_misspelled_key_in_a_group_is_named():
    with pytest.raises(ConfigCompositionException) as e:
        compose("model.hiden_size=3")
    assert "hiden_size" in str(e.value.__cause__) and "ModelConfig" in str(e.value.__cause__)


def test_wrong_type_is_named():
    with pytest.raises(ConfigCompositionException) as e:
        compose("train.lr=abc")
    cause = e.value.__cause__
    assert isinstance(cause, ValidationError) and "train.lr" in str(cause) and "abc" in str(cause)


@pytest.mark.parametrize("group", ["model", "task", "method", "hardware"])
def test_unknown_option_lists_the_valid_ones(group):
    with pytest.raises(ConfigCompositionException) as e:
        compose(f"{group}=no-such-{group}")
    msg = str(e.value)
    assert f"Could not find '{group}/no-such-{group}'" in msg and "Available options" in msg
    assert all(name in msg for name in GROUP_FILES[group])
    listed = msg.split("Available options")[1].split("Config search path")[0].split()
    assert sorted(listed[2:] if listed[:2] == ["in", f"'{group}':"] else listed) == GROUP_FILES[group]  # no *_schema


def test_schema_entries_are_not_runnable_options():
    for bad in ("method=finetune_schema", "method=schema", "model=schema"):
        with pytest.raises(ConfigCompositionException, match="Could not find"):
            compose(bad)


def test_malformed_override_fails_to_parse():
    with pytest.raises(OverrideParseException):
        compose("train.lr=[1")


def test_cpu_budget_applies_only_on_cpu_and_yields_to_the_command_line():
    assert compose("task=rt-polarity").data.limit_train == 1000
    assert compose("task=rt-polarity", "hardware=gpu").data.limit_train is None
    assert compose("task=rt-polarity", "data.limit_train=7").data.limit_train == 7
    assert compose("task=sst2").data.limit_train is None  # hub tasks have no CPU budget file


def test_smoke_uses_tiny_model_and_fixtures():
    cfg = compose("debug=smoke", "task=wnut16")
    assert cfg.model.name == "tiny-bert" and cfg.data.source == "fixture" and cfg.data.limit_train is None
    assert (REPO / cfg.task.fixture).exists()


def test_offline_tasks_have_fixtures_and_stand_in_labels():
    for name in ("rt-polarity", "vitaminc", "wnut16", "squad-dev"):
        task = compose(f"task={name}").task
        assert (REPO / task.fixture).exists() and task.stand_in_for
        assert task.objective.removeprefix("eval/") in list(task.metrics)


def test_run_id_is_deterministic():
    cfg = compose("task=vitaminc", "seed=2")
    assert cfg.run_id == "vitaminc--minilm-l6--finetune-full--seed2"
