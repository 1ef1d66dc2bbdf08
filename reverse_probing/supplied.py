"""What a reverse-probing run reads from the asset cache that `make assets` does not build: a paper-scale task's data
(CoNLL-2012, TACRED) and the sources the build experiments save. Missing, a run is refused before any work, naming
the experiment that saves it or the steps that supply it (the cache's generic advice, `make assets`, cannot)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from experiments import REPO
from experiments.assets import cache_dir, verify
from experiments.config import ConfigError

EXPERIMENTS = REPO / "conf" / "experiment" / "reverse_probing"


def recipe(key: str) -> bool:
    """Whether `make assets` builds asset `key` (e.g. data/wnut16)."""
    from scripts.assets import BY_KEY  # lazy: scripts/ imports experiments
    return key in BY_KEY


def _resolved(path: Path) -> dict:
    """An experiment file's method and task override, with what it inherits from the experiment files it names
    first in its defaults (its own keys win)."""
    node = OmegaConf.to_container(OmegaConf.load(path))
    out: dict = {"method": {}, "task": None}
    for entry in node.get("defaults", []):
        if isinstance(entry, str) and entry.startswith("/experiment/"):
            parent = _resolved(REPO / "conf" / f"{entry.lstrip('/')}.yaml")
            out = {"method": {**parent["method"]}, "task": parent["task"]}
        elif isinstance(entry, dict) and "override /task" in entry:
            out["task"] = entry["override /task"]
    out["method"].update(node.get("method") or {})
    return out


def builders(folder: Path = EXPERIMENTS) -> dict[str, list[str]]:
    """asset key -> the experiments that save it: models/<method.save_as>, and data/<task.offline> for kind=data."""
    out: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.yaml")):
        node = _resolved(path)
        if node["method"].get("kind") == "data" and node["task"]:
            offline = OmegaConf.load(REPO / "conf" / "task" / f"{node['task']}.yaml").get("offline")
            out.setdefault(f"data/{offline}", []).append(f"{folder.name}/{path.stem}")
        elif node["method"].get("save_as"):
            out.setdefault(f"models/{node['method']['save_as']}", []).append(f"{folder.name}/{path.stem}")
    return out


def _missing(key: str) -> str | None:
    if recipe(key):
        return None  # the cache's own error names `make assets`, which builds it
    problems = verify(cache_dir() / key)
    return problems[0] if problems else None


def _saved_by(key: str) -> str:
    names = builders().get(key)
    return (f"run python -m experiments.run experiment={names[0]} first"
            + (f" (or {', '.join(names[1:])})" if names[1:] else "")) if names else ""


def check_task(task: DictConfig, data: DictConfig) -> None:
    """Refuse a task whose offline data no recipe builds and that is not in the cache, with the fix."""
    if (data.get("source") or task.source) != "offline" or not task.offline:
        return
    key = f"data/{task.offline}"
    if (problem := _missing(key)) is not None:
        saved, notes = _saved_by(key), task.get("notes") or ""
        fix = f"{saved} ({notes})" if saved and notes else saved or notes
        raise ConfigError(f"task={task.name}: task.offline={task.offline} is not usable in {cache_dir() / key} "
                          f"({problem}); `make assets` does not build it: {fix or 'copy it there'}")


def check_models(models: list[DictConfig], what: str = "method.sources") -> None:
    """Refuse sources saved by a build experiment that has not run (in this asset cache), naming it."""
    for model in models:
        if model.source != "offline" or not model.get("offline"):
            continue
        key = f"models/{model.offline}"
        if (problem := _missing(key)) is not None:
            raise ConfigError(f"{what}: model {model.name} (offline: {model.offline}) is not usable in "
                              f"{cache_dir() / key} ({problem}); {_saved_by(key) or 'no experiment saves it'}")


def ready(cfg: DictConfig, models: list[DictConfig], extras: dict[str, DictConfig]) -> None:
    """Everything a probe reads that `make assets` does not build is in the asset cache, or a refusal naming what
    saves it (before any work)."""
    check_models(models)
    for task in [cfg.task, *extras.values()]:
        check_task(task, cfg.data)
