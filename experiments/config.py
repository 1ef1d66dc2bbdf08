"""Typed schemas for every config group. Hydra validates each YAML and each command-line override against them,
so `train.lrr=1` fails naming `lrr` and `train.lr=abc` fails naming `lr` and the type; `validate` adds what types
cannot say (ranges, keys added with `+`)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

from experiments import REPO


@dataclass
class ModelConfig:
    name: str = MISSING
    source: str = "offline"  # offline (packaged asset, `make assets`) | hub (hf_id, needs network) | config (random init)
    hf_id: Optional[str] = None  # the paper's Hugging Face id
    revision: Optional[str] = None  # source=hub: the commit to load, as conf/hub_manifest.yaml pins it (null: main)
    offline: Optional[str] = None  # asset name under $STRATA_CACHE/models
    local_dir: Optional[str] = None  # source=hub: a directory with the repo's files, loaded instead of hf_id
    family: str = "bert"  # bert, roberta, deberta, gpt2, llama; source=config builds bert or llama
    kind: str = "encoder"  # encoder | causal
    num_layers: int = MISSING
    hidden_size: int = MISSING
    pooling: str = "cls"  # sentence representation for cls/pair heads: cls | mean | last
    from_config: Optional[dict[str, Any]] = None  # architecture kwargs for source=config
    stand_in_for: Optional[str] = None  # the paper's model this offline model stands in for (labels tables)
    notes: str = ""


@dataclass
class HubData:
    path: Optional[str] = None  # datasets.load_dataset path: the hub repo id (conf/hub_manifest.yaml's key)
    name: Optional[str] = None  # its config name
    # the repo's commit or ref to read, as conf/hub_manifest.yaml pins it (null: main). A repo that ships a loading
    # script (datasets 5 refuses those) pins refs/convert/parquet, the hub's parquet export of it
    revision: Optional[str] = None
    data_dir: Optional[str] = None  # a folder of the repo to read: an export holds one per builder config
    # or read the repo's own files at `revision` through a packaged builder: {split: path in the repo}
    data_files: Optional[dict[str, str]] = None
    builder: Optional[str] = None  # the packaged builder that reads data_files: json | parquet | csv


@dataclass
class TaskConfig:
    name: str = MISSING
    type: str = MISSING  # cls | pair | ner | qa | coref (experiments.data.TASK_TYPES)
    source: str = "offline"  # offline | hub | fixture
    offline: Optional[str] = None  # asset name under $STRATA_CACHE/data
    hf: HubData = field(default_factory=HubData)
    splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "eval": "eval"})  # + dev: checkpoint selection
    dev_from_train: Optional[float] = None  # no dev split: carve this fraction of train for checkpoint selection
    text_fields: list[str] = field(default_factory=list)  # cls: [text]; pair: [a, b]; ner: [tokens]; qa: [question, context]
    label_field: str = "label"  # cls/pair: int label; ner: tag list; qa: answers dict
    label_names: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=lambda: ["accuracy"])
    objective: str = "eval/accuracy"  # early stopping and sweep objective
    max_length: int = 128
    doc_stride: int = 64  # qa: overlap between windows of a long context
    max_answer_length: int = 30  # qa: longest span considered at decoding
    fixture: Optional[str] = None  # tests/fixtures/<task>.jsonl for debug=smoke
    stand_in_for: Optional[str] = None  # the paper's dataset this offline one stands in for (labels tables)
    notes: str = ""


@dataclass
class HardwareConfig:
    name: str = MISSING
    device: str = "cpu"  # cpu | cuda | cuda:N | mps | auto (cuda when present, else cpu)
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast)
    threads: Optional[int] = None  # torch intra-op threads; null: $OMP_NUM_THREADS if set, else the cores this process may use
    batch_size: int = 16
    eval_batch_size: int = 64
    num_workers: int = 0


@dataclass
class MethodConfig:
    """Base of every method's schema; a paper package subclasses it.

    `variant` is which form of the method runs, one of a closed list its package checks: a training arm (recycling's
    frozen / reduced / adapters, EAT's dense / eat / paper_code), an inference paradigm (intrinsic_dim's icl-<k> /
    sft), an extraction mode (reverse probing's full / norm / trunc) or a benchmark's measurement (recycling_bench's
    training / inference / storage / cost). It is part of a run's name (experiments.identity). PEMA's methods have one
    form each: in its experiment files `variant` names the paper table (table2_cpu, …), as every committed PEMA
    record's config hash holds it."""
    name: str = MISSING
    variant: str = "default"


@dataclass
class FinetuneConfig(MethodConfig):
    """Full fine-tuning: every weight trains (the baseline all papers compare against)."""
    name: str = "finetune"
    variant: str = "full"


@dataclass
class TrainConfig:
    lr: float = 5e-5  # > 0: a method that trains nothing ignores it
    weight_decay: float = 0.01  # ≥ 0; not applied to biases and LayerNorm weights
    epochs: float = 3.0
    max_steps: int = -1  # > 0 overrides epochs
    warmup_ratio: float = 0.1  # linear warmup, then linear decay to 0
    grad_accum: int = 1
    max_grad_norm: float = 1.0  # clip the gradient's global norm to this; 0 = no clipping (a negative one is refused)
    eval_every: int = 0  # optimizer steps between evaluations; 0 = once per epoch
    group_by_length: bool = True  # batches of similar length: less padding, same examples per epoch
    patience: int = 3  # evaluations without improvement before early stopping; 0 = never stop early
    progress: bool = True  # tqdm bar (off automatically when stderr is not a terminal)


@dataclass
class DataConfig:
    source: Optional[str] = None  # overrides task.source (debug=smoke sets fixture)
    limit_train: Optional[int] = None  # cap on training examples (a fixed random subset, the same for every seed)
    limit_eval: Optional[int] = None  # cap on evaluation examples (likewise)
    subset_seed: int = 0  # which subset the limits take
    max_length: Optional[int] = None  # overrides task.max_length


@dataclass
class StoreConfig:
    dir: Optional[str] = None  # default $STRATA_CACHE/activations
    dtype: str = "fp16"  # fp16 | fp32 on disk


@dataclass
class LoggerConfig:
    name: str = "none"
    wandb: bool = False
    project: str = "strata"
    mode: str = "offline"  # offline keeps runs local; `wandb sync` uploads them later


@dataclass
class Config:
    model: ModelConfig = MISSING
    task: TaskConfig = MISSING
    method: Any = MISSING  # a MethodConfig subclass, chosen by the method group
    hardware: HardwareConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    # training options (pema: ...) are added by experiments.registry.root_schema from the registered OPTIONS
    seed: int = 0
    exp_id: str = "adhoc"  # experiment configs set it (e.g. finetune/default_cpu); names the sweep dir
    paper: Optional[str] = None  # results/<paper>/; default: the method's package
    publish: bool = False  # also write results/<paper>/runs/<artifact>/<hardware>/<run_id>.json (clean tree only)
    allow_dirty: bool = False  # publish from a tree with uncommitted changes (the record says so)
    on_error: str = "raise"  # raise | record (write status=failed and let the sweep go on); checked before anything
    force: bool = False  # rerun even if an identical finished result exists
    results_dir: str = "results"
    # the readable base of a run's name; the runner appends every other override (experiments/identity.py)
    run_id: str = "${task.name}--${model.name}--${method.name}-${method.variant}--seed${seed}"
    experiment: Optional[Any] = None
    debug: Optional[Any] = None


class ConfigError(ValueError):
    """A config that cannot run as asked: names the key, the value and the fix; raised before any work."""
    logged = False  # the runner sets it once it has logged the one line (it then prints no traceback)


def _at_least(lo, optional=False):
    def ok(v):
        return (optional and v is None) or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= lo)
    return ok, f"{'null or ' if optional else ''}a number ≥ {lo}"


def _above(lo, why=""):
    def ok(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > lo
    return ok, f"a number > {lo}{why}"


def _one_of(*values):
    return (lambda v: v in values), "one of " + ", ".join(map(str, values))


ON_ERROR = ("raise", "record")
DEVICES = "cpu, cuda, cuda:N (N a GPU index), mps or auto (cuda when present, else cpu)"


def _device(v) -> bool:
    return isinstance(v, str) and (v in ("cpu", "cuda", "mps", "auto") or re.fullmatch(r"cuda:\d+", v) is not None)


# key -> (predicate, the valid range in words); checked on every composed config by `validate`
RANGES = {
    "seed": _at_least(0),
    "data.limit_train": _at_least(1, optional=True),
    "data.limit_eval": _at_least(1, optional=True),
    "data.max_length": _at_least(1, optional=True),
    "task.max_length": _at_least(1),
    "hardware.batch_size": _at_least(1),
    "hardware.eval_batch_size": _at_least(1),
    "hardware.threads": _at_least(1, optional=True),
    "hardware.num_workers": _at_least(0),
    "hardware.precision": _one_of("fp32", "bf16", "fp16"),
    "hardware.device": (_device, DEVICES),
    "task.dev_from_train": ((lambda v: v is None or 0 < v < 1), "null or a fraction in (0, 1)"),
    "train.grad_accum": _at_least(1),
    "train.lr": _above(0, " (at lr 0 nothing trains; a method that trains nothing ignores train.lr)"),
    "train.weight_decay": _at_least(0),
    # a negative norm makes clip_grad_norm_ flip the gradient: training climbs the loss and still reports ok
    "train.max_grad_norm": (_at_least(0)[0], "a number ≥ 0 (0: no clipping)"),
    "train.warmup_ratio": ((lambda v: 0 <= v <= 1), "a number in [0, 1]"),
    "train.patience": _at_least(0),
    "train.eval_every": _at_least(0),
    "store.dtype": _one_of("fp16", "fp32"),
    "on_error": _one_of(*ON_ERROR),
}


def unknown_keys(node, path: str = "") -> list[str]:
    """Keys of a typed node that its dataclass does not declare (Hydra lets `+key=value` add them even to a
    structured config, where they would be hashed and ignored)."""
    schema = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(schema):
        return []
    declared = {f.name: f for f in dataclasses.fields(schema)}
    out = [f"{path}{k}" for k in node.keys() if k not in declared]
    for name in declared:
        child = node._get_node(name)  # not `name in node`, which resolves every interpolation below it
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            out += unknown_keys(child, f"{path}{name}.")
    return out


def validate(cfg) -> None:
    """Every check the schema's types cannot make, before any work: unknown keys (with or without `+`) and values
    out of range, each error naming the key, the value and what is valid."""
    unknown = unknown_keys(cfg)
    if unknown:
        raise ConfigError(f"unknown config key(s) {', '.join(unknown)}: no schema declares them, so they would be "
                          "recorded and ignored. Check the spelling (`--cfg job` prints the config).")
    for key, (ok, valid) in RANGES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if not ok(value):
            raise ConfigError(f"{key}={value} is not valid: use {valid}")
    train = cfg.train
    if train.max_steps <= 0 and not train.epochs > 0:
        raise ConfigError(f"train.epochs={train.epochs} trains nothing: use epochs > 0 or train.max_steps > 0")


def load_group(group: str, name: str, schema, key: str) -> DictConfig:
    """conf/<group>/<name>.yaml as a typed node, for a config key that names another config (`key`, in the error)."""
    path = CONF / group / f"{name}.yaml"
    if not path.exists():
        valid = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"{key}={name!r} names no conf/{group}/{name}.yaml; valid: {', '.join(valid)}")
    node = OmegaConf.load(path)
    node.pop("defaults", None)
    return OmegaConf.merge(OmegaConf.structured(schema), node)


CONF = REPO / "conf"


def compose(*overrides: str, hydra_node: bool = False, conf: Path = CONF) -> DictConfig:
    """The config `python -m experiments.run <overrides>` gets (with `hydra_node`, also its hydra node: the sweep
    params of an experiment file)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import experiments.registry  # noqa: F401  (the config schemas and resolvers, before any compose)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra_node)
    finally:
        GlobalHydra.instance().clear()


def hub_offline(kind: str = "model") -> bool:
    """Whether runs may not reach the Hugging Face hub, for a model or a dataset (`kind`) alike: the one switch,
    STRATA_HUB=1 (experiments.hub.online, which experiments.run applies to both libraries before they load)."""
    from experiments.hub import wanted
    return not wanted()


def in_hf_cache(repo_id: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds a hub model (its config.json) at `revision` (None = main): what an
    offline run can load. Paths are read from the environment at call time."""
    from huggingface_hub import constants, try_to_load_from_cache
    return isinstance(try_to_load_from_cache(repo_id, "config.json", cache_dir=constants.HF_HUB_CACHE,
                                             revision=revision), str)


def offline_refusal(key: str, name: str, repo: str, kind: str, cached: bool | None = None,
                    revision: str | None = None) -> str | None:
    """The refusal for `key=name`, which loads `repo` from the hub, while runs are offline and the local cache has no
    copy (the load would fail after a long traceback ending in "check your internet connection"); else None.
    `cached`: what the caller found (a dataset's load is its own test); None looks a model up at `revision`."""
    if not hub_offline(kind) or (in_hf_cache(repo, revision) if cached is None else cached):
        return None
    return (f"set STRATA_HUB=1 to download it: {key}={name} loads {repo} from the Hugging Face hub, runs are "
            "offline by default and the local HF cache has no copy (or pick an offline one: python -m "
            "experiments.config --list)")


def unknown_experiment(args: list[str]) -> str | None:
    """The refusal for a command line whose `experiment=` names no conf/experiment file, listing the experiments of
    that paper (or the papers); None when every named experiment exists. Hydra's own error lists neither."""
    root = CONF / "experiment"
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if key != "experiment" or not sep:
            continue
        for name in value.split(","):  # a sweep lists several; glob(...) and the like are Hydra's to expand
            name = name.strip()
            if not name or name == "null" or any(c in name for c in "()[]{}$*"):
                continue
            if (root / f"{name}.yaml").is_file():
                continue
            paper = name.split("/")[0] if "/" in name else ""
            papers = sorted(p.name for p in root.iterdir() if p.is_dir())
            if paper in papers:
                names = sorted(str(p.relative_to(root).with_suffix("")) for p in (root / paper).rglob("*.yaml"))
                return (f"experiment={name} names no conf/experiment/{name}.yaml; the experiments of {paper}: "
                        f"{', '.join(names)}")
            return (f"experiment={name} names no paper under conf/experiment: use experiment=<paper>/<name> with "
                    f"one of the papers {', '.join(papers)} (`make list` lists every experiment)")
    return None


def listing() -> str:
    """Every model and task config with where it loads from: offline (a packaged asset, `make assets`), random (built
    from its config, no files) or hub (needs STRATA_HUB=1 unless in the local HF cache;
    a hub model's cached copy is named, a dataset's is found by loading it)."""
    lines = []
    for group, what in (("model", "model=<name>"), ("task", "task=<name>")):
        lines.append(f"{group}s ({what}; conf/{group}/):")
        for path in sorted((CONF / group).glob("*.yaml")):
            node = OmegaConf.load(path)
            source = node.get("source", "offline")
            if source == "hub":
                repo = node.get("hf_id") if group == "model" else (node.get("hf") or {}).get("path")
                config = None if group == "model" else (node.get("hf") or {}).get("name")
                if not repo:
                    where = f"no public hub id: set hf_id (conf/{group}/{path.stem}.yaml says how)"
                else:
                    where = f"{repo}{f' ({config})' if config else ''}" + (
                        ", in the local HF cache" if group == "model" and in_hf_cache(repo) else "")
            elif source == "config":
                source, where = "random", "random weights from its config, no files"
            else:
                where = f"asset {'models' if group == 'model' else 'data'}/{node.get('offline')}" + (
                    f", stands in for {node.stand_in_for}" if node.get("stand_in_for") else "")
            lines.append(f"  {path.stem:36} {source:8} {where}")
    lines.append("offline: `make assets` once, then no network; random: no files; hub: STRATA_HUB=1 (network) "
                 "unless in the local HF cache")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--list"]:
        sys.exit("usage: python -m experiments.config --list   (every model and task: offline, random or hub)")
    print(listing())
