"""Method name -> its entry point, schema, paper, version and the training options it composes with, all as lazy
"module:attr" strings (imported on use, so one method's dependencies never slow or break another, and the shared
layer never imports a paper package). Import this before composing any config: it registers the schemas."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, make_dataclass
from typing import Callable

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from experiments.config import Config, HardwareConfig, LoggerConfig, ModelConfig, TaskConfig
from experiments.identity import run_name


@dataclass(frozen=True)
class Method:
    run: str  # "module:function", called as run(cfg, ctx) -> metrics
    paper: str  # results/<paper> it publishes to
    schema: str  # "module:Class" of its config dataclass (each <paper>/config.py imports no torch: cheap)
    version: int = 1  # bump when the method's semantics change (recorded in every run record)
    options: tuple[str, ...] = ()  # training options (OPTIONS) it applies; any other enabled option is refused
    check: str | None = None  # "module:function", check(cfg) refuses a config before any work (ConfigError)

    @property
    def package(self) -> str:
        return self.run.split(".", 1)[0]


@dataclass(frozen=True)
class Option:
    schema: str  # "module:Class": the config node `<option>:` at the root
    hook: str  # "module:function": experiments.hooks.Hook


# one line per method
METHODS: dict[str, Method] = {
    "finetune": Method("experiments.finetune:run", "finetune", "experiments.config:FinetuneConfig", options=("pema",)),
    # PEMA's own methods read the pema option's settings (splits, keep_special, tied, ...)
    # version 2: V' counts the dev split the fine-tuned model reads beside train and eval
    "pema_vocab": Method("pema.run:run", "pema", "pema.config:PemaVocabConfig", options=("pema",), version=2),
    "pema_sizes": Method("pema.sizes:run", "pema", "pema.config:PemaSizesConfig", options=("pema",)),
    "pema_bench": Method("pema.bench:run", "pema", "pema.config:PemaBenchConfig", options=("pema",)),
    "pema_scores": Method("pema.scores:run", "pema", "pema.config:PemaScoresConfig", options=("pema",), version=2),
    "intrinsic_dim": Method("intrinsic_dim.run:run", "intrinsic_dim", "intrinsic_dim.config:IntrinsicDimConfig",
                            check="intrinsic_dim.config:check"),
    "intrinsic_dim_bench": Method("intrinsic_dim.bench:run", "intrinsic_dim",
                                  "intrinsic_dim.config:IntrinsicDimBenchConfig"),
    "store_bench": Method("experiments.bench_store:run", "store", "experiments.bench_config:StoreBenchConfig"),
    "finetune_bench": Method("experiments.bench_finetune:run", "finetune",
                             "experiments.bench_config:FinetuneBenchConfig"),
    "recycling": Method("recycling.run:run", "recycling", "recycling.config:RecyclingConfig",
                        check="recycling.config:check"),
    "recycling_bench": Method("recycling.bench:run", "recycling", "recycling.config:RecyclingBenchConfig",
                              check="recycling.config:check"),
    # version 3: Eq. 1 loss, layer 4 prunes before its exit, paper-code at batch 1, paper tau grid, 3 timing seeds
    "eat": Method("eat.run:run", "eat", "eat.config:EatConfig", version=3, check="eat.config:check"),
    "eat_bench": Method("eat.bench:run", "eat", "eat.config:EatBenchConfig", version=3, check="eat.config:check"),
    # version 2: scalar mix sums in fp32 (bf16 no longer rounds small λ away); MNLI-mm scored on the mnli model
    # (eval_mismatched/*); GLUE checkpoints chosen on the paper's metric; eval/majority_f1_binary recorded
    # version 3: a cls/pair task's head is the one HF's *ForSequenceClassification builds (method.head=paper: BERT's
    # pretrained pooler, a decoder's bias-free score), not a fresh dense+tanh+linear; STS-B trains as a regression
    "layer_fusion": Method("layer_fusion.run:run", "layer_fusion", "layer_fusion.config:LayerFusionConfig",
                           version=3, check="layer_fusion.config:check"),
    "layer_fusion_params": Method("layer_fusion.params:run", "layer_fusion",
                                  "layer_fusion.config:LayerFusionParamsConfig", check="layer_fusion.config:check"),
    "layer_fusion_bench": Method("layer_fusion.bench:run", "layer_fusion",
                                 "layer_fusion.config:LayerFusionBenchConfig", check="layer_fusion.config:check"),
    # version 2: the coref head's coarse prior on rank offsets, no dropout on its input, sub-token spans where the
    # sources share a tokenizer; quoref's aggregator at method.aggregator_lr (the CorefTarget build trains the head)
    "reverse_probing": Method("reverse_probing.run:run", "reverse_probing",
                              "reverse_probing.config:ReverseProbingConfig", version=2,
                              check="reverse_probing.config:check"),
    "reverse_probing_source": Method("reverse_probing.sources:run", "reverse_probing",
                                     "reverse_probing.config:SourceConfig", version=2),
    "reverse_probing_cossim": Method("reverse_probing.cossim:run", "reverse_probing",
                                     "reverse_probing.config:CossimConfig"),
    "reverse_probing_bench": Method("reverse_probing.bench:run", "reverse_probing",
                                    "reverse_probing.config:BenchConfig"),
}
# results/<paper> directories, in registry order, and the paper packages (the rest live in experiments/)
PAPERS = tuple(dict.fromkeys(m.paper for m in METHODS.values()))
PACKAGES = tuple(dict.fromkeys(m.package for m in METHODS.values() if m.package != "experiments"))
# training options a paper package registers (experiments.hooks)
OPTIONS: dict[str, Option] = {
    "pema": Option("pema.options:PemaConfig", "pema.hook:hook"),
}


class UnknownMethodError(KeyError):
    pass


def _check(name: str) -> Method:
    if name not in METHODS:
        raise UnknownMethodError(f"unknown method {name!r}; valid methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def _load(ref: str):
    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)


def resolve(name: str) -> Callable:
    return _load(_check(name).run)


def paper_of(name: str) -> str:
    return _check(name).paper


def version_of(name: str) -> int:
    return _check(name).version


def check(cfg) -> None:
    """The method's own refusals (Method.check), before any work; nothing for a method without one."""
    m = _check(cfg.method.name)
    if m.check:
        _load(m.check)(cfg)


def option_hook(name: str) -> Callable:
    return _load(OPTIONS[name].hook)


def root_schema() -> type:
    """Config plus one node per registered option (`pema: PemaConfig`), built here so that experiments/config.py
    imports no paper package."""
    fields = [(name, _load(o.schema), field(default_factory=_load(o.schema))) for name, o in OPTIONS.items()]
    return make_dataclass("Config", fields, bases=(Config,))


def register_configs() -> None:
    cs = ConfigStore.instance()
    # schemas live in their own groups (schema/, schema/method/), so Hydra's lists of valid `model=` or `method=`
    # options show only the runnable YAML files; each file names its schema: defaults: [/schema@_here_: model, _self_]
    cs.store(name="config_schema", node=root_schema())
    for group, node in (("model", ModelConfig), ("task", TaskConfig), ("hardware", HardwareConfig),
                        ("logger", LoggerConfig)):
        cs.store(group="schema", name=group, node=node)
    for name, m in METHODS.items():
        cs.store(group="schema/method", name=name, node=_load(m.schema))
    # hydra's run/sweep dirs name a job as the runner does (experiments/identity.py)
    OmegaConf.register_new_resolver("run_name", lambda base, overrides: run_name(base, overrides), replace=True)
    # conf/hydra/launcher/slurm.yaml: a job asks for a GPU (and a GPU job's CPUs and memory) only if it runs on one
    OmegaConf.register_new_resolver("on_cuda", on_cuda, replace=True)


def on_cuda(device: str, if_cuda, otherwise):
    """`${on_cuda:${hardware.device},a,b}`: a for a CUDA device (cuda, cuda:1), b for anything else (cpu; auto, which
    takes a GPU only where one happens to be, asks for none)."""
    return if_cuda if str(device).startswith("cuda") else otherwise


register_configs()
