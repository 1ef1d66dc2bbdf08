"""What a GPU tier will cost and need, checked before any GPU work:

    python -m scripts.preflight layer_fusion pema          # make preflight: every paper
    python -m scripts.preflight --force recycling          # go on although the estimated disk does not fit

Per paper: the jobs (every grid expanded as Hydra's basic sweeper does), the estimated GPU-hours (conf/tier_costs.yaml,
an estimate), the activation-store and HF-cache bytes (estimated from the models' dimensions and the datasets' sizes
in conf/hub_manifest.yaml) against the free disk, and the gated models and licences the jobs touch. It refuses (exit 1)
when a gated model is in the grid and no hub token is set (HF_TOKEN or `hf auth login`), when the tree has uncommitted
changes (a tier publishes, and a published record must point at committed code) unless allow_dirty, and when the
bytes do not fit the free disk unless force. scripts.tier runs it before a GPU tier."""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml

from experiments import REPO

CONF = REPO / "conf"
COSTS = CONF / "tier_costs.yaml"
GROUPS = ("model", "task", "method", "hardware")
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}
GLU = {"llama", "mistral", "gemma", "gemma2", "gemma3", "gemma3_text", "qwen2", "qwen3"}  # gate, up and down matrices
UNTIED = {"llama", "mistral"}  # an LM head of its own beside the input embeddings


@dataclass
class Job:
    model: str
    task: str
    settings: dict  # the swept keys and values of this job, over the experiment's own (dotted keys)


@dataclass
class Experiment:
    paper: str
    name: str
    jobs: list[Job]
    base: dict  # the experiment's composed config (resolved where it can be)


@dataclass
class Plan:
    paper: str
    experiments: list[Experiment]
    hours: tuple[float, float] = (0.0, 0.0)
    unestimated: list[str] = field(default_factory=list)
    store_bytes: int = 0
    store_unknown: list[str] = field(default_factory=list)
    hf_bytes: int = 0
    hf_unknown: list[str] = field(default_factory=list)
    hub_models: set[str] = field(default_factory=set)
    hub_datasets: set[str] = field(default_factory=set)

    @property
    def hub_ids(self) -> set[str]:
        return self.hub_models | self.hub_datasets

    @property
    def n_jobs(self) -> int:
        return sum(len(e.jobs) for e in self.experiments)


def hub_manifest() -> dict:
    """conf/hub_manifest.yaml through experiments.hub; an absent or partial manifest reads as empty sections."""
    try:
        from experiments.hub import manifest
        m = manifest()
    except (ImportError, OSError):
        m = {}
    return {"datasets": m.get("datasets") or {}, "models": m.get("models") or {}}


def costs(path: Path = COSTS) -> dict:
    doc = yaml.safe_load(path.read_text()) if path.exists() else {}
    return {"gpu_hours": doc.get("gpu_hours") or {}, "store": doc.get("store") or {}}


def compose(paper: str, name: str, conf: Path = CONF) -> tuple[dict, dict]:
    """(the experiment's config as a plain dict, its hydra.sweeper.params)."""
    from omegaconf import OmegaConf

    from experiments.config import compose as compose_config
    cfg = compose_config(f"experiment={paper}/{name}", hydra_node=True, conf=conf)
    params = dict(cfg.hydra.sweeper.params or {})
    base = OmegaConf.to_container(cfg, resolve=False)
    base.pop("hydra", None)
    return base, params


def grid(params: dict) -> list[list[str]]:
    """The jobs of a -m sweep over these params, as Hydra's basic sweeper expands them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return list(itertools.chain.from_iterable(BasicSweeper.split_arguments(parsed, None))) or [[]]


def experiment(paper: str, name: str, conf: Path = CONF) -> Experiment:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    base, params = compose(paper, name, conf)
    jobs = []
    for job in grid(params):
        choice = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(job)}
        jobs.append(Job(model=str(choice.get("model", base["model"]["name"])),
                        task=str(choice.get("task", base["task"]["name"])), settings=choice))
    return Experiment(paper, name, jobs, base)


def setting(exp: Experiment, job: Job, key: str):
    """A job's value of a dotted key: its own override, else the experiment's."""
    if key in job.settings:
        return job.settings[key]
    node = exp.base
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def group_file(group: str, name: str, conf: Path = CONF) -> dict:
    path = conf / group / f"{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def model_dims(name: str, hub: dict, conf: Path = CONF) -> tuple[int | None, int | None]:
    """(layers, hidden size) of a model option: the hub config where the manifest has it, else conf/model's."""
    m = group_file("model", name, conf)
    config = ((hub["models"].get(m.get("hf_id")) or {}).get("config") or {}) if m.get("source") == "hub" else {}
    return (config.get("num_hidden_layers") or m.get("num_layers"), config.get("hidden_size") or m.get("hidden_size"))


def weight_bytes(entry: dict) -> int | None:
    """A hub model's weights as stored: parameters (from its config's dimensions) x the bytes of its saved dtype.
    None when the manifest lacks a dimension."""
    c = entry.get("config") or {}
    try:
        d, layers, vocab = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
        ff = int(c.get("intermediate_size") or 4 * d)
        heads = int(c.get("num_attention_heads") or 1)
        kv = int(c.get("num_key_value_heads") or heads)
    except (KeyError, TypeError, ValueError):
        return None
    family = str(entry.get("model_type") or "")
    attention = 2 * d * d + 2 * d * (d * kv // heads)
    mlp = (3 if family in GLU else 2) * d * ff
    embeddings = vocab * d * (2 if family in UNTIED else 1)
    if family not in GLU:  # learned position embeddings (BERT-style)
        embeddings += int(c.get("max_position_embeddings") or 0) * d
    dtype = DTYPE_BYTES.get(str(entry.get("torch_dtype")), 4)
    return (layers * (attention + mlp) + embeddings) * dtype


def split_rows(task: dict, hub: dict) -> dict[str, int | None] | None:
    """num_rows of each split the task reads (train, dev, eval...), from the manifest; None for a task off the hub."""
    hf = task.get("hf") or {}
    if task.get("source") != "hub" or not hf.get("path"):
        return None
    entry = hub["datasets"].get(hf["path"]) or {}
    sizes = ((entry.get("configs") or {}).get(hf.get("name") or "default") or {}).get("splits") or {}
    return {role: sizes.get(split) for role, split in (task.get("splits") or {}).items() if isinstance(split, str)}


def models_of(exp: Experiment, job: Job, conf: Path = CONF) -> list[str]:
    """The model options a job loads: its model, and the sources a probe reads (method.sources) where it has them."""
    sources = setting(exp, job, "method.sources")
    extra = [str(s) for s in sources] if isinstance(sources, (list, tuple)) else []
    return [job.model] + [s for s in extra if (conf / "model" / f"{s}.yaml").exists()]


def store_bytes(exp: Experiment, rule: dict, hub: dict, conf: Path = CONF,
                seen: set | None = None) -> tuple[int, list[str]]:
    """What this experiment's jobs write to the activation store (estimate): per distinct store key (rule `key`: the
    settings a cached array depends on, or `job`: every job its own), examples x tokens (`tokens` all: max_length,
    last: 1) x layers (`layers` all: every block and the embeddings, one) x hidden size x the store's dtype bytes
    (`dtype`, else store.dtype) x `copies`, for each model it stores (`models: sources`: each probe source, else
    the job's model); `examples` caps the examples per key (prompts per run), `tokens_total` replaces examples x
    tokens (documents: the dataset's sub-tokens). Jobs the rule's `when` excludes write nothing. Returns (bytes, the
    model/task pairs of unknown size). `seen`: the keys already counted (the store is shared across experiments)."""
    seen = set() if seen is None else seen
    total, unknown = 0, []
    dtype = DTYPE_BYTES.get(str(rule.get("dtype") or (exp.base.get("store") or {}).get("dtype")), 2)
    limits = exp.base.get("data") or {}
    for job in exp.jobs:
        if any(str(setting(exp, job, k)) != str(v) for k, v in (rule.get("when") or {}).items()):
            continue
        stored = models_of(exp, job, conf)[1:] if rule.get("models") == "sources" else [job.model]
        for model in stored:
            key = (model, job.task, *(sorted(map(str, job.settings.items())) if rule.get("key") == "job" else
                                      (str(setting(exp, job, k)) for k in rule.get("key") or ())))
            if key in seen:
                continue
            seen.add(key)
            task = group_file("task", job.task, conf)
            rows = split_rows(task, hub)
            layers, d = model_dims(model, hub, conf)
            if not layers or not d:
                unknown.append(f"{model}/{job.task}")
                continue
            depth = int(layers) + 1 if rule.get("layers", "all") == "all" else 1
            if rule.get("tokens_total"):  # documents, not fixed-length examples: the dataset's sub-tokens
                total += int(rule["tokens_total"]) * depth * int(d) * dtype * int(rule.get("copies", 1))
                continue
            if rows is None or None in rows.values():
                unknown.append(f"{model}/{job.task}")
                continue
            examples = 0
            for role, n in rows.items():
                limit = limits.get("limit_train" if role == "train" else "limit_eval")
                examples += min(n, limit) if isinstance(limit, int) else n
            examples = min(examples, int(rule.get("examples") or examples))
            tokens = 1 if rule.get("tokens") == "last" else int(limits.get("max_length") or task.get("max_length")
                                                                 or 128)
            total += examples * tokens * depth * int(d) * dtype * int(rule.get("copies", 1))
    return total, sorted(set(unknown))


def plan(paper: str, names: Sequence[str], conf: Path = CONF, hub: dict | None = None,
         table: dict | None = None) -> Plan:
    hub = hub_manifest() if hub is None else hub
    table = costs() if table is None else table
    p = Plan(paper, [experiment(paper, n, conf) for n in names])
    lo = hi = 0.0
    stored: set = set()
    for exp in p.experiments:
        est = table["gpu_hours"].get(f"{paper}/{exp.name}")
        if est is None:
            p.unestimated.append(exp.name)
        else:
            lo, hi = lo + float(est[0]), hi + float(est[-1])
        rule = table["store"].get(f"{paper}/{exp.name}", table["store"].get(paper))
        if rule:
            b, unknown = store_bytes(exp, rule, hub, conf, stored)
            p.store_bytes += b
            p.store_unknown += unknown
        for job in exp.jobs:
            for model in models_of(exp, job, conf):
                m = group_file("model", model, conf)
                if m.get("source") == "hub" and m.get("hf_id"):
                    p.hub_models.add(m["hf_id"])
            t = group_file("task", job.task, conf)
            if t.get("source") == "hub" and (t.get("hf") or {}).get("path"):
                p.hub_datasets.add(t["hf"]["path"])
    p.hours = (lo, hi)
    for hf_id in sorted(p.hub_models):
        b = weight_bytes(hub["models"].get(hf_id) or {})
        if b is None:
            p.hf_unknown.append(hf_id)
        else:
            p.hf_bytes += b
    p.store_unknown = sorted(set(p.store_unknown))
    return p


def access(ids: set[str], hub: dict) -> tuple[list[str], dict[str, str]]:
    """(the gated ids among these, each id's licence as the manifest states it, "unknown" where it does not)."""
    entries = {i: hub["models"].get(i) or hub["datasets"].get(i) for i in ids}
    gated = sorted(i for i, e in entries.items() if e and e.get("gated") not in (None, False, "false", "False"))
    return gated, {i: str((e or {}).get("licence") or "unknown") for i, e in sorted(entries.items())}


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def existing(path: Path) -> Path:
    """The path, or its nearest existing parent (shutil.disk_usage needs one)."""
    path = Path(path).expanduser().resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def store_dir() -> Path:
    from experiments.assets import cache_dir
    return cache_dir() / "activations"


def hf_cache_dir() -> Path:
    from huggingface_hub import constants
    return Path(constants.HF_HUB_CACHE)


def has_token() -> bool:
    """HF_TOKEN, or a token saved by `hf auth login` (read from disk; nothing is sent)."""
    if os.environ.get("HF_TOKEN", "").strip():
        return True
    try:
        from huggingface_hub import get_token
        return bool(get_token())
    except ImportError:
        return False


def disk_check(need: dict[Path, int], free=lambda p: shutil.disk_usage(p).free) -> list[str]:
    """One line per file system where the bytes planned for its folders exceed its free space."""
    per_fs: dict[int, tuple[list[Path], int, int]] = {}
    for folder, n in need.items():
        root = existing(folder)
        dev = root.stat().st_dev
        folders, total, _ = per_fs.get(dev, ([], 0, 0))
        per_fs[dev] = (folders + [folder], total + n, free(root))
    return [f"disk: {size(total)} estimated for {', '.join(map(str, folders))} but {size(avail)} free there"
            for folders, total, avail in per_fs.values() if total > avail]


def refusals(plans: Sequence[Plan], hub: dict, *, dirty: bool, allow_dirty: bool, token: bool, force: bool,
             disk: Sequence[str]) -> list[str]:
    """Why the tier must not start, each with its fix; empty when it may."""
    out = []
    gated, _ = access(set().union(*(p.hub_ids for p in plans)) if plans else set(), hub)
    if gated and not token:
        out.append(f"gated hub ids in the grid ({', '.join(gated)}) and no hub token: accept each licence on its "
                   "hub page, then set HF_TOKEN=<token> or run `hf auth login`")
    if dirty and not allow_dirty:
        out.append("the tree has uncommitted changes and a tier publishes (publish=true), which every run would "
                   "refuse: commit first, or pass allow_dirty=true (make <paper> ALLOW_DIRTY=1; the records say so)")
    if disk and not force:
        out += [f"{line}: free space (or set STRATA_CACHE / HF_HOME to a larger disk), or pass force "
                "(make <paper> FORCE=1) to start anyway" for line in disk]
    return out


def report(plans: Sequence[Plan], hub: dict) -> list[str]:
    lines = ["GPU-tier pre-flight (GPU-hours and bytes are estimates: conf/tier_costs.yaml, conf/hub_manifest.yaml)"]
    for p in plans:
        lo, hi = p.hours
        hours = f"{lo:.0f}-{hi:.0f} GPU-h" + (f" + unknown for {', '.join(p.unestimated)}" if p.unestimated else "")
        few = ", ".join(p.store_unknown[:4]) + (", ..." if len(p.store_unknown) > 4 else "")
        store = size(p.store_bytes) + (f" + unknown for {len(p.store_unknown)} model/task pairs ({few})"
                                       if p.store_unknown else "")
        hf = size(p.hf_bytes) + (f" + unknown for {', '.join(p.hf_unknown)}" if p.hf_unknown else "")
        gated, licences = access(p.hub_ids, hub)
        lines += [f"  {p.paper}: {len(p.experiments)} experiments, {p.n_jobs} jobs, {hours}",
                  f"    activation store {store}; HF cache (model weights) {hf}",
                  f"    gated: {', '.join(gated) or 'none'}"]
        if licences:
            lines.append("    licences: " + ", ".join(f"{i} ({lic})" for i, lic in licences.items()))
    lo, hi = sum(p.hours[0] for p in plans), sum(p.hours[1] for p in plans)
    lines.append(f"  all: {sum(p.n_jobs for p in plans)} jobs, {lo:.0f}-{hi:.0f} GPU-h, activation store "
                 f"{size(sum(p.store_bytes for p in plans))}, HF cache {size(sum(p.hf_bytes for p in plans))}")
    return lines


def check(papers: Sequence[str], hardware: str = "gpu", *, force: bool = False, allow_dirty: bool = False,
          say=print, conf: Path = CONF) -> int:
    """Plan the GPU tier of these papers, print it, and return 1 (with the reasons) if it must not start."""
    from experiments.results import git_dirty
    from scripts import tier
    hub = hub_manifest()
    online = tier.hub_online()
    plans = [plan(paper, tier.experiments(paper, hardware, conf / "experiment", hub=online), conf, hub)
             for paper in papers]
    for line in report(plans, hub):
        say(line)
    if not online:
        say("  (the hub is off: the packaged-model experiments only; STRATA_HUB=1 adds the paper-scale ones)")
    need = {store_dir(): sum(p.store_bytes for p in plans), hf_cache_dir(): sum(p.hf_bytes for p in plans)}
    why = refusals(plans, hub, dirty=git_dirty(), allow_dirty=allow_dirty, token=has_token(), force=force,
                   disk=disk_check(need))
    for line in why:
        say(f"preflight: refused: {line}")
    return 1 if why else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paper", nargs="*", help="papers to check (default: every registered paper with a GPU tier)")
    ap.add_argument("--hardware", default="gpu", help="the hardware config the tier runs with (default gpu)")
    ap.add_argument("--force", action="store_true", help="start although the estimated bytes exceed the free disk")
    ap.add_argument("--allow-dirty", action="store_true", help="publish from a tree with uncommitted changes")
    args = ap.parse_args(argv)
    from experiments.registry import PAPERS
    from scripts import tier
    papers = args.paper or [p for p in PAPERS if tier.experiments(p, args.hardware)]
    return check(papers, args.hardware, force=args.force, allow_dirty=args.allow_dirty)


if __name__ == "__main__":
    sys.exit(main())
