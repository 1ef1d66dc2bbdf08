"""Experiment files and their sweep grids, as `python -m experiments.run -m experiment=<paper>/<name>` expands them:
the job config each run gets, so a test can walk every job a tier would start without starting one."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from copy import deepcopy
from functools import lru_cache

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.config import CONF, compose

# every experiment file, as the `experiment=` value that selects it
EXPERIMENTS = sorted(str(p.relative_to(CONF / "experiment").with_suffix(""))
                     for p in (CONF / "experiment").rglob("*.yaml"))
# config groups a sweep may choose: choosing one sets <group>.name (each option's name equals its file name)
GROUPS = ("model", "task", "method", "hardware")


def experiments_of(paper: str) -> list[str]:
    """The experiment files under conf/experiment/<paper>/."""
    return [e for e in EXPERIMENTS if e.split("/", 1)[0] == paper]


def compose_experiment(exp: str, *overrides: str) -> tuple[DictConfig, dict]:
    """(the job config, as the runner gets it, and its sweep params); composed once per process, a copy each call."""
    return deepcopy(_composed(exp, overrides))


@lru_cache(maxsize=None)
def _composed(exp: str, overrides: tuple[str, ...]) -> tuple[DictConfig, dict]:
    cfg = compose(f"experiment={exp}", *overrides, hydra_node=True)
    params = dict(cfg.hydra.sweeper.params or {})
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, params


def grid_jobs(params) -> list[list[str]]:
    """The jobs of a -m sweep over the experiment's hydra.sweeper.params, as Hydra's basic sweeper expands them."""
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return list(itertools.chain.from_iterable(BasicSweeper.split_arguments(parsed, None))) or [[]]


@lru_cache(maxsize=None)
def _parsed(override: str) -> tuple:
    (o,) = OverridesParser.create().parse_overrides([override])
    return o.key_or_group, o.value()


def choices(job: list[str]) -> dict:
    """A job's overrides as {key: value}, values parsed as Hydra parses them (`[a,b]` is a list). A grid's jobs
    share their override strings, so each is parsed once."""
    return dict(_parsed(o) for o in job)


def methods_run(exp: str) -> set[str]:
    """The methods an experiment's jobs run: its own, or those its grid chooses among."""
    base, params = compose_experiment(exp)
    if "method" not in params:
        return {base.method.name}
    (o,) = OverridesParser.create().parse_overrides([f"method={params['method']}"])
    return set(o.sweep_string_iterator()) if o.is_sweep_override() else {str(o.value())}


def job_configs(exp: str, copy: bool = True) -> Iterator[tuple[list[str], DictConfig]]:
    """(job, its config) for every job of the experiment's grid. A method choice is composed (its schema's defaults,
    the variant among them, differ from the experiment's method); any other choice is set on the composed config, a
    model, task or hardware choice as its name only (the rest of that node stays the experiment's: composing every
    combination would cost a compose per job).
    With copy=False the configs are one object per method, updated in place job after job (fast, for a caller that
    reads each job before asking for the next)."""
    base, params = compose_experiment(exp)
    methods: dict[str, DictConfig] = {}
    for job in grid_jobs(params):
        choice = choices(job)
        if "method" in choice and choice["method"] not in methods:
            methods[choice["method"]] = compose_experiment(exp, f"method={choice['method']}")[0]
        cfg = methods.get(choice.get("method"), base)
        cfg = deepcopy(cfg) if copy else cfg
        for k, v in choice.items():
            OmegaConf.update(cfg, f"{k}.name" if k in GROUPS else k, v, force_add=True)
        yield job, cfg
