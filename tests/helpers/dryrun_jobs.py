"""What the paper-tier dry run walks: every job a GPU tier launches (`scripts.tier.experiments(paper, "gpu",
hub=True)`, each grid expanded as Hydra's basic sweeper does), keyed by the code path it takes (model family,
tokenizer class, task, method and its variant, precision); the first job of each key is run. `shrink` adds what makes
that job fit a tiny model on ~30-row fixtures in seconds without changing which code runs (steps, sizes, layer
indices); the precision and every other setting stay the experiment's."""
from __future__ import annotations

import functools
import itertools
import os
import re
from dataclasses import dataclass

import yaml
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, open_dict

import experiments.registry  # noqa: F401  (registers the schemas before any compose)
from experiments import REPO
from experiments.config import CONF, compose
from scripts import tier

# what the GPU tier runs on: precision stays the experiment's (bf16/fp16 autocast runs on CPU too); on a GPU machine
# STRATA_DRYRUN_DEVICE=cuda walks the same jobs on the card
HARDWARE = ("hardware=gpu", f"hardware.device={os.environ.get('STRATA_DRYRUN_DEVICE', 'cpu')}", "hardware.threads=1",
            "hardware.num_workers=0")
KEY_FIELDS = ("family", "tokenizer", "task", "method", "variant", "precision")


def papers() -> list[str]:
    """The implemented papers, as the Makefile lists them (the papers `make <paper>` runs)."""
    line = next(x for x in (REPO / "Makefile").read_text().splitlines() if x.startswith("PAPERS"))
    return line.split(":=", 1)[1].split()


@functools.lru_cache(maxsize=None)
def group_yaml(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text()) or {}


@functools.lru_cache(maxsize=1)
def manifest_models() -> dict:
    path = CONF / "hub_manifest.yaml"
    return (yaml.safe_load(path.read_text()) or {}).get("models") or {} if path.exists() else {}


def tokenizer_class(model: str) -> str:
    """The tokenizer class the hub repo names (the manifest), else the family's (a model the manifest lacks)."""
    m = group_yaml("model", model)
    hub = manifest_models().get(m.get("hf_id")) or {}
    return hub.get("tokenizer_class") or f"{m.get('family', 'bert')}:{m.get('source', 'offline')}"


def compose_job(exp: str, *overrides: str, hydra_node: bool = False) -> DictConfig:
    return compose(f"experiment={exp}", *overrides, hydra_node=hydra_node)


def grid(exp: str) -> tuple[DictConfig, list[list[str]]]:
    """(the experiment's base config, its sweep's jobs as override lists)."""
    cfg = compose_job(exp, hydra_node=True)
    params = cfg.hydra.sweeper.params or {}
    with open_dict(cfg):
        del cfg["hydra"]
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return cfg, list(itertools.chain.from_iterable(BasicSweeper.split_arguments(parsed, None))) or [[]]


def variant(method: str, value) -> str:
    """A variant that only sets a size names one path: icl-5 and icl-10 run the same code (icl-0 does not)."""
    v = str(value)
    return re.sub(r"-[1-9]\d*$", "-k", v) if method == "intrinsic_dim" else v


@dataclass(frozen=True)
class Job:
    exp: str
    overrides: tuple[str, ...]
    key: tuple[str, ...]
    model: str
    task: str
    method: str

    @property
    def id(self) -> str:
        return f"{self.exp}[{','.join(self.key[2:])}/{self.model}]"


def walk(names: list[str] | None = None) -> tuple[list[Job], dict[str, dict]]:
    """(the first job of every key, in tier order; per experiment: its jobs and keys). `names` restricts to those
    experiments (paper/name)."""
    first: dict[tuple, Job] = {}
    per: dict[str, dict] = {}
    for paper in papers():
        for name in tier.experiments(paper, "gpu", hub=True):
            exp = f"{paper}/{name}"
            if names is not None and exp not in names:
                continue
            base, jobs = grid(exp)
            methods: dict[str, DictConfig] = {}
            keys = set()
            for job in jobs:
                choice = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(job)}
                m = choice.get("method", base.method.name)
                if m != base.method.name and m not in methods:  # a method choice brings its own defaults
                    methods[m] = compose_job(exp, f"method={m}")
                cfg = methods.get(m, base)
                model, task = choice.get("model", cfg.model.name), choice.get("task", cfg.task.name)
                method_cfg = cfg.method
                v = choice.get("method.variant", method_cfg.get("variant"))
                if m == "layer_fusion":  # protocol and regime choose the training path; fusion the module
                    v = "/".join(str(choice.get(f"method.{k}", method_cfg.get(k))) for k in ("protocol", "regime"))
                key = (group_yaml("model", model).get("family", "bert"), tokenizer_class(model), task, m,
                       variant(m, v), str(choice.get("hardware.precision", cfg.hardware.precision)))
                keys.add(key)
                if key not in first:
                    first[key] = Job(exp, tuple(job), key, model, task, m)
            per[exp] = {"jobs": len(jobs), "keys": keys}
    return list(first.values()), per


# per method: what fits the tiny fixture model and ~30-row data (the smoke settings of conf/debug/method where they
# exist); never a precision, a split or a task setting
SHRINK = {
    "eat": ["method.exit_layer=1", "method.patience_layer=1", "method.prune_after=[1]", "method.window=4"],
    "eat_bench": ["method.exit_layer=1", "method.patience_layer=1", "method.prune_after=[1]", "method.window=4",
                  "method.n_latency=4", "method.warmup=1", "method.n_dev_latency=4", "method.batch_size=4",
                  "method.throughput_rounds=1", "method.bootstrap=20", "method.n_long=4", "method.repeats=1",
                  "method.lengths=[32]"],
    "intrinsic_dim": ["method.n_train=16", "method.n_eval=8", "method.mle_ks=[3]", "method.sft_epochs=1",
                      "method.sft_batch_size=4", "method.batch_size=4"],
    "layer_fusion": ["method.shots=1", "train.patience=0"],
    "pema_bench": ["method.steps=1", "method.repeats=2", "method.prepare_repeats=1", "method.memory_rounds=1"],
    "recycling": ["method.k=1"],  # the layer the cache keeps, within the fixture's 2
    "recycling_bench": ["method.n_batches=2", "method.batch_size=4", "method.seq_len=16", "method.steps=2",
                        "method.repeats=1"],
    "reverse_probing": ["method.ffnn_size=16", "method.feature_size=4", "method.max_epochs=1", "method.min_epochs=1",
                        "method.docs_per_step=4"],
}
COMMON = ["train.max_steps=2", "train.epochs=1", "train.eval_every=2", "train.progress=false",
          "data.limit_train=24", "data.limit_eval=12", "hardware.batch_size=4", "hardware.eval_batch_size=8",
          "force=true", "on_error=record", "publish=false"]


def sample(jobs: list[Job]) -> list[Job]:
    """The jobs `make test` runs (the whole walk is `make dryrun`): greedily, the fewest first jobs that together
    reach every experiment, every value of each key field (every family, tokenizer, task, method variant and
    precision) and the pairs where loaders and precision meet (tokenizer x task type, task x precision, family x
    precision), most new values first, tier order on ties."""
    def values(j: Job) -> set:
        family, tok, task, method, var, precision = j.key
        return {("exp", j.exp), *zip(KEY_FIELDS, j.key), ("method", method, var),
                ("tokenizer x type", tok, group_yaml("task", task).get("type")), ("task x precision", task, precision),
                ("family x precision", family, precision)}
    todo, left, out = set().union(*map(values, jobs)) if jobs else set(), list(jobs), []
    while todo:
        best = max(left, key=lambda j: len(values(j) & todo))
        out.append(best)
        left.remove(best)
        todo -= values(best)
    return [j for j in jobs if j in out]


def fit_layers(cfg: DictConfig, n: int) -> DictConfig:
    """Layer indices a paper config names per source (interpolated, so no override can reach them), capped at the
    fixture's n layers."""
    m = cfg.method
    if m.name == "reverse_probing":
        if m.get("trunc"):
            m.trunc = [min(int(v), n) for v in m.trunc]
        if m.get("concat_n"):
            m.concat_n = min(int(m.concat_n), n)
    return cfg


def shrink(job: Job) -> list[str]:
    return [*COMMON, *SHRINK.get(job.method, [])]


def coverage(per: dict[str, dict], results: dict[str, str], known: dict[str, str], walked: int) -> str:
    """The coverage table: per experiment and per paper, its jobs, its distinct paths (keys) and how many of them
    ran ok here (a path is run once, by the first experiment that reaches it); then every path that did not."""
    ok = {k for k, v in results.items() if v == "ok"}
    lines = [f"{'experiment':<42} {'jobs':>6} {'paths':>6} {'ok':>5}"]
    papers: dict[str, set] = {}
    for exp, d in per.items():
        keys = set(d["keys"])
        papers.setdefault(exp.split("/")[0], set()).update(keys)
        lines.append(f"{exp:<42} {d['jobs']:>6} {len(keys):>6} {len(keys & ok):>5}")
    for paper, keys in papers.items():
        lines.append(f"{'paper ' + paper:<42} {sum(d['jobs'] for e, d in per.items() if e.startswith(paper + '/')):>6}"
                     f" {len(keys):>6} {len(keys & ok):>5}")
    present = set().union(*papers.values()) if papers else set()
    lines.append(f"{'total':<42} {sum(d['jobs'] for d in per.values()):>6} {len(present):>6} {len(present & ok):>5}")
    lines.append(f"walked {len(results)} first jobs of {walked}; {len(ok)} of the {len(present)} distinct paths "
                 f"(family|tokenizer|task|method|variant|precision) ran ok")
    lines += [f"  {k}: {'expected: ' + known[k] if k in known else v}" for k, v in sorted(results.items()) if v != "ok"]
    return "\n".join(lines)
