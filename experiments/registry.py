"""Method name -> "module:function" (imported lazily, so one method's dependencies never slow or break another),
and the schemas every config group is validated against. Import this before composing any config."""
from __future__ import annotations

import importlib
from typing import Callable

from hydra.core.config_store import ConfigStore

from experiments.config import Config, HardwareConfig, LoggerConfig, ModelConfig, TaskConfig

# name -> (entry point, results/<paper> it publishes to); one line per method
METHODS: dict[str, tuple[str, str]] = {
    "finetune": ("experiments.finetune:run", "finetune"),
    "pema_vocab": ("pema.run:run", "pema"),
    "pema_sizes": ("pema.run:run", "pema"),
    "pema_bench": ("pema.run:run", "pema"),
    "intrinsic_dim": ("intrinsic_dim.run:run", "intrinsic_dim"),
    "recycling": ("recycling.run:run", "recycling"),
    "recycling_bench": ("recycling.bench:run", "recycling"),
}
# name -> its config dataclass ("module:Class"; each <paper>/config.py imports no torch, so this stays cheap)
SCHEMAS: dict[str, str] = {
    "finetune": "experiments.config:FinetuneConfig",
    "pema_vocab": "pema.config:PemaVocabConfig",
    "pema_sizes": "pema.config:PemaSizesConfig",
    "pema_bench": "pema.config:PemaBenchConfig",
    "intrinsic_dim": "intrinsic_dim.config:IntrinsicDimConfig",
    "recycling": "recycling.config:RecyclingConfig",
    "recycling_bench": "recycling.config:RecyclingBenchConfig",
}


class UnknownMethodError(KeyError):
    pass


def _check(name: str) -> None:
    if name not in METHODS:
        raise UnknownMethodError(f"unknown method {name!r}; valid methods: {', '.join(sorted(METHODS))}")


def _load(ref: str):
    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)


def resolve(name: str) -> Callable:
    _check(name)
    return _load(METHODS[name][0])


def paper_of(name: str) -> str:
    _check(name)
    return METHODS[name][1]


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="model", name="schema", node=ModelConfig)
    cs.store(group="task", name="schema", node=TaskConfig)
    cs.store(group="hardware", name="schema", node=HardwareConfig)
    cs.store(group="logger", name="schema", node=LoggerConfig)
    for name, ref in SCHEMAS.items():
        cs.store(group="method", name=f"{name}_schema", node=_load(ref))


register_configs()
