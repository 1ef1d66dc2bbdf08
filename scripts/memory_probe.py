"""Shape-only memory probe of the paper tiers: for each distinct (model, method) of a paper's GPU grids, build the
model with random weights from its real architecture config, run one worst-case batch (the config's batch size x
max length) at the run's precision, forward and backward where the run trains, and record the peak memory against the
card. Catches a grid that cannot fit before GPU-days are spent; measures nothing about accuracy or speed.

    python -m scripts.memory_probe --paper intrinsic_dim layer_fusion --out outputs/memory_probe.json
    python -m scripts.memory_probe --paper intrinsic_dim --plan-only --out plan.json   # the plan alone (no torch)
    python -m scripts.memory_probe --plan plan.json --budget-s 220 --out probe.json     # measure a saved plan
    python -m scripts.memory_probe --paper intrinsic_dim --tiny --out t.json            # shrunk dims, any CPU

The grids are read as scripts.tier lists a paper's GPU tier (hub and offline experiments) and composed like the
runner composes a job (with hardware=gpu). Architecture configs come from conf/hub_manifest.yaml
(`models[<hf_id>].config`), else the model file's `from_config`, else a built-in table. Modes, as the runs compute:
  extract       frozen forward, last token of every layer kept (intrinsic_dim ICL), fp32, the store's own hooks
  extract_all   frozen forward, every layer at every position kept (feature extraction into the store), fp32
  lora_sft      causal-LM LoRA step (intrinsic_dim SFT): its precision and gradient checkpointing
  lora          LoRA on the backbone, every block output fused into a sequence head (layer_fusion p32), autocast
  finetune      every weight trains, sequence head, autocast: an upper bound for methods not modelled here
Probes run in order of importance (PRIORITY first, then the largest models); --budget-s stops before a probe that
would start past it, and the JSON is rewritten after every probe, so a run cut short keeps what it measured."""
from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from experiments import REPO
from experiments.files import write_json

CONF = REPO / "conf"
MANIFEST = CONF / "hub_manifest.yaml"
# (model, mode) pairs measured first: the ones closest to the card's edge
PRIORITY = (("llama-2-13b", "extract"), ("llama-2-13b", "lora_sft"), ("llama-2-7b", "lora"), ("llama-3-8b", "extract"),
            ("deberta-v2-xlarge", "finetune"), ("roberta-large", "finetune"))
# the DeBERTa-v2 hub configs' attention settings (the manifest keeps only sizes)
_DEBERTA = {"relative_attention": True, "pos_att_type": ["p2c", "c2p"], "position_biased_input": False,
            "max_relative_positions": -1, "position_buckets": 256, "share_att_key": True, "norm_rel_ebd": "layer_norm"}
_DISTILBERT = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
               "intermediate_size": "hidden_dim"}
GROUPS = ("model", "task", "method")


@dataclass
class Probe:
    """One worst-case batch to measure, and the experiments whose grids contain it."""
    model: str  # conf/model/<model>.yaml
    mode: str  # extract | extract_all | lora_sft | lora | finetune
    batch: int
    length: int
    precision: str  # fp32 | bf16 | fp16: autocast over fp32 weights (fp32 = none)
    checkpointing: bool = False
    causal: bool = False  # a decoder (causal LM) rather than an encoder
    arch: dict = field(default_factory=dict)  # config.json fields: model_type and sizes
    lora: dict = field(default_factory=dict)  # r, alpha, targets
    experiments: list[str] = field(default_factory=list)
    why: str = ""  # how batch and length were chosen

    @property
    def key(self) -> tuple:
        return (self.model, self.mode, self.precision, self.checkpointing)


# ---- the plan: every distinct (model, mode) of the grids ------------------------------------------------------

def _compose(exp: str, overrides: Sequence[str]):
    from experiments.config import compose
    return compose(f"experiment={exp}", "hardware=gpu", *overrides, hydra_node=True)


def _jobs(params) -> list[list[str]]:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return list(itertools.chain.from_iterable(BasicSweeper.split_arguments(parsed, None))) or [[]]


@functools.lru_cache(maxsize=1)
def _manifest_models() -> dict:
    return (yaml.safe_load(MANIFEST.read_text()) or {}).get("models", {}) if MANIFEST.is_file() else {}


def arch_of(model_cfg) -> dict:
    """The model's architecture fields: the hub manifest's, else its file's from_config."""
    hf_id = model_cfg.get("hf_id")
    man = _manifest_models()
    entry = man.get(hf_id) or {}
    if entry.get("config") and entry.get("model_type"):
        return {"model_type": entry["model_type"], **entry["config"]}
    own = model_cfg.get("from_config")
    if own and own.get("model_type"):
        return dict(own)
    if own and model_cfg.get("family"):
        return {"model_type": {"llama": "llama"}.get(model_cfg.family, model_cfg.family), **own}
    raise KeyError(f"model={model_cfg.name}: no architecture config (add models[{hf_id!r}].config to "
                   f"{MANIFEST.relative_to(REPO)} or from_config to conf/model/{model_cfg.name}.yaml)")


def spec(cfg, exp: str) -> Probe | None:
    """The worst-case batch of one composed job, or None where it holds no model worth probing."""
    from omegaconf import OmegaConf
    m, model = cfg.method, cfg.model
    if model.get("kind") not in ("causal", "encoder") or model.source == "config":
        return None
    arch = arch_of(model)
    context = int(arch.get("max_position_embeddings") or 512)
    causal = model.kind == "causal"
    task_len = cfg.data.get("max_length") or cfg.task.get("max_length") or 512
    base = dict(model=model.name, causal=causal, arch=arch, experiments=[exp])
    lora = {k: OmegaConf.to_container(m[f"lora_{k}"]) if k == "targets" else m[f"lora_{k}"]
            for k in ("r", "alpha", "targets") if f"lora_{k}" in m}
    if m.name == "intrinsic_dim":
        if m.variant == "sft":
            precision = cfg.hardware.precision if m.sft_precision in (None, "hardware") else m.sft_precision
            return Probe(**base, mode="lora_sft", batch=m.sft_batch_size, length=min(m.sft_max_length, context),
                         precision=precision, checkpointing=bool(m.sft_gradient_checkpointing), lora=lora,
                         why="method.sft_batch_size x method.sft_max_length (the truncation bound)")
        T = min(m.max_prompt_tokens, context)
        budget = m.get("extract_token_budget")
        B = max(1, min(m.batch_size, budget // T)) if budget else m.batch_size
        return Probe(**base, mode="extract", batch=B, length=T, precision="fp32",
                     why="the longest prompt allowed (method.max_prompt_tokens, the model's context) at the batch "
                         "method.batch_size and method.extract_token_budget allow")
    regime = m.get("regime")
    if regime == "fe" or m.name == "reverse_probing":
        B = m.get("feature_batch") or cfg.hardware.batch_size
        return Probe(**base, mode="extract_all", batch=int(B), length=min(int(task_len), context), precision="fp32",
                     why="feature batch x task max length, every layer at every position")
    if regime == "lora":
        return Probe(**base, mode="lora", batch=cfg.hardware.batch_size, length=min(int(task_len), context),
                     precision=cfg.hardware.precision, lora=lora, why="hardware.batch_size x task max length")
    return Probe(**base, mode="finetune", batch=int(m.get("batch_size") or cfg.hardware.batch_size),
                 length=min(int(task_len), context), precision=cfg.hardware.precision,
                 why="hardware.batch_size x task max length; every weight trains (an upper bound)")


def plan(papers: Sequence[str], log=print) -> list[Probe]:
    """Every distinct probe of the papers' GPU grids (the largest batch x length of each), in measuring order.
    Each experiment is composed once per value of each group it sweeps (model, task, method), not once per job:
    a job's config is the experiment's with those groups' nodes swapped in, then its other overrides applied."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    from scripts import tier
    found: dict[tuple, Probe] = {}
    for paper in papers:
        for exp in tier.experiments(paper, "gpu", hub=True):
            name = f"{paper}/{exp}"
            base = _compose(name, [])
            params = base.hydra.sweeper.params or {}
            with open_dict(base):
                base.pop("hydra")
            nodes: dict[str, Any] = {}  # "model=x" -> that group's node, composed with the experiment
            seen = set()
            for job in _jobs(params):
                choice = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(job)}
                groups = tuple(f"{g}={choice[g]}" for g in GROUPS if g in choice)
                rest = {k: v for k, v in choice.items() if k not in GROUPS and k != "seed"}
                sig = (groups, json.dumps(rest, sort_keys=True, default=str))
                if sig in seen:
                    continue
                seen.add(sig)
                cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
                with open_dict(cfg):
                    for g in groups:
                        if g not in nodes:
                            nodes[g] = _compose(name, [g])[g.split("=")[0]]
                        cfg[g.split("=")[0]] = nodes[g]
                    for k, v in rest.items():
                        OmegaConf.update(cfg, k, v, force_add=True)
                p = spec(cfg, name)
                if p is None:
                    continue
                old = found.get(p.key)
                if old is None:
                    found[p.key] = p
                    continue
                if name not in old.experiments:
                    old.experiments.append(name)
                if (p.batch * p.length, p.length) > (old.batch * old.length, old.length):
                    p.experiments = old.experiments
                    found[p.key] = p
            log(f"memory probe plan: {name}: {len(seen)} distinct jobs, {len(nodes) + 1} compositions")
    return order(list(found.values()))


def order(probes: list[Probe]) -> list[Probe]:
    def rank(p: Probe):
        pri = next((i for i, (mod, mode) in enumerate(PRIORITY) if p.model == mod and p.mode == mode), len(PRIORITY))
        return pri, -_params(p.arch), -p.batch * p.length
    return sorted(probes, key=rank)


def _params(arch: dict) -> float:
    d, L, f, V = (arch.get(k) or 0 for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"))
    return L * (4 * d * d + 3 * d * f) + V * d


# ---- measuring --------------------------------------------------------------------------------------------------

def shrink(p: Probe) -> Probe:
    """The same probe with tiny dims, batch and length (a CPU walks every code path in seconds)."""
    a = dict(p.arch)
    heads = 4
    kv = a.get("num_key_value_heads")
    a.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=heads, intermediate_size=64,
             vocab_size=min(int(a.get("vocab_size") or 1000), 512), max_position_embeddings=64)
    if kv:
        a["num_key_value_heads"] = heads if kv == p.arch.get("num_attention_heads") else 2
    if "head_dim" in a:
        a["head_dim"] = 8
    return Probe(**{**asdict(p), "arch": a, "batch": min(p.batch, 2), "length": min(p.length, 16)})


def build_config(p: Probe):
    from transformers import AutoConfig
    a = dict(p.arch)
    mt = a.pop("model_type")
    if mt == "distilbert":
        a = {_DISTILBERT.get(k, k): v for k, v in a.items()}
    if mt == "deberta-v2":
        a = {**_DEBERTA, **a}
    cfg = AutoConfig.for_model(mt, **a)
    cfg.pad_token_id = 0  # sequence heads of decoders need one; inputs here have no padding
    cfg.num_labels = 3
    return cfg


def _model(p: Probe, device):
    """fp32 random weights built on the device: a causal LM (extract, lora_sft), the backbone alone (extract_all,
    lora: the fusion head is added in `step`) or a sequence classifier (finetune)."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification
    cfg = build_config(p)
    cls = {"extract": AutoModelForCausalLM, "lora_sft": AutoModelForCausalLM, "extract_all": AutoModel,
           "lora": AutoModel}.get(p.mode, AutoModelForSequenceClassification)
    with torch.device(device):
        return cls.from_config(cfg, dtype=torch.float32)


def _autocast(device, precision: str):
    import torch
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(torch.device(device).type, dtype=dtype or torch.float32, enabled=dtype is not None)


def step(p: Probe, model, device) -> None:
    """One worst-case batch of the probe's mode (what the run's code does with it)."""
    import torch

    from experiments.optim import adamw
    from experiments.store import _blocks, selected_states
    V = int(p.arch.get("vocab_size") or 1000)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, V, (p.batch, p.length), generator=g)
    if p.mode in ("extract", "extract_all"):
        from intrinsic_dim.extract import backbone
        net = backbone(model) if p.mode == "extract" else model
        # one token less per example: padding as a real batch has it (a masked attention, not the causal fast path)
        examples = [{"input_ids": row[: max(1, p.length - b)].tolist()} for b, row in enumerate(ids)]
        n = getattr(net.config, "num_hidden_layers")
        layers = {i: list(range(n + 1)) for i in range(p.batch)}
        if _blocks(net) is None:
            raise RuntimeError(f"{type(net).__name__}: no block stack found; the store would keep every layer")
        for _ in selected_states(net, examples, list(range(p.batch)), layers,
                                 "last" if p.mode == "extract" else "all", p.batch, torch.device(device)):
            pass
        return
    mask = torch.ones(p.batch, p.length, dtype=torch.long)
    mask[1:, -1] = 0  # padding, as a real batch has it
    ids, mask = ids.to(device), mask.to(device)
    if p.mode == "lora_sft":
        from intrinsic_dim import sft as S
        lm = S.add_lora(model, p.lora.get("r", 64), p.lora.get("alpha", 16), 0.1,
                        p.lora.get("targets", ["q_proj", "k_proj", "v_proj", "o_proj"]))
        S.set_checkpointing(lm, p.checkpointing)
        lm.train()
        labels = ids.masked_fill(mask == 0, -100)
        loss = S.step_loss(lm, {"input_ids": ids, "attention_mask": mask, "labels": labels}, p.precision)
        trained = lm
    else:
        trained = model
        if p.checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": False})
        if p.mode == "lora":  # layer_fusion p32: LoRA on the backbone; every block output mixed, then a head
            from peft import LoraConfig, get_peft_model
            targets = [t for t in p.lora.get("targets", []) if any(n.endswith(t) for n, _ in model.named_modules())]
            net = get_peft_model(model, LoraConfig(r=p.lora.get("r", 16), lora_alpha=p.lora.get("alpha", 32),
                                                   lora_dropout=0.05, target_modules=targets or None))
            d, n = model.config.hidden_size, model.config.num_hidden_layers
            with torch.device(device):
                trained = torch.nn.ModuleDict({"net": net, "head": torch.nn.Linear(d, 3)})
                trained.register_parameter("mix", torch.nn.Parameter(torch.zeros(n)))
        trained.train()
        labels = torch.zeros(p.batch, dtype=torch.long, device=device)
        with _autocast(device, p.precision):
            if p.mode == "lora":
                out = trained["net"](input_ids=ids, attention_mask=mask, output_hidden_states=True)
                z = torch.stack(tuple(out.hidden_states[1:]), -2)  # (B, T, L, d), as layer_fusion stacks them
                mixed = (z * torch.softmax(trained.mix, 0)[:, None].to(z.dtype)).sum(-2)
                loss = torch.nn.functional.cross_entropy(trained["head"](mixed[:, -1]).float(), labels)
            else:
                loss = trained(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    opt = adamw(trained, 1e-5, weight_decay=0.0)
    opt.step()  # the optimizer state exists from the first step on
    opt.zero_grad(set_to_none=True)


def measure(p: Probe, device: str) -> dict[str, Any]:
    import torch
    cuda = device.startswith("cuda")
    out: dict[str, Any] = {**asdict(p), "device": device}
    t0 = time.perf_counter()
    model = None
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        out["card_bytes"] = torch.cuda.get_device_properties(torch.device(device)).total_memory
    try:
        model = _model(p, device)
        out["param_bytes"] = sum(t.numel() * t.element_size() for t in model.parameters())
        if cuda:  # building random weights can peak above what loading them does: the step's peak starts here
            out["weights_bytes"] = torch.cuda.memory_allocated()
            out["build_peak_bytes"] = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        step(p, model, device)
        out["status"] = "ok"
    except torch.OutOfMemoryError as e:
        out["status"], out["error"] = "oom", str(e).splitlines()[0][:300]
    except Exception as e:  # a probe that cannot be built says why; the others still run
        out["status"], out["error"] = "error", f"{type(e).__name__}: {e}"[:500]
    finally:
        del model
        if cuda:
            out["peak_bytes"] = torch.cuda.max_memory_allocated()
            out["peak_gib"] = round(out["peak_bytes"] / 2**30, 2)
            out["card_gib"] = round(out["card_bytes"] / 2**30, 2)
            out["fits"] = out["status"] == "ok" and out["peak_bytes"] <= 0.95 * out["card_bytes"]
            gc.collect()
            torch.cuda.empty_cache()
        else:
            out["peak_bytes"] = None  # no allocator statistics on a CPU: the code path is what is checked
        out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def run(probes: Sequence[Probe], out_path: Path, device: str, budget_s: float | None, tiny: bool,
        log=print) -> list[dict]:
    """Measure each probe in order, rewriting `out_path` after each; past `budget_s` the rest are listed unmeasured."""
    t0 = time.monotonic()
    results: list[dict] = []
    for i, p in enumerate(probes):
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            results += [{**asdict(q), "status": "skipped", "error": f"--budget-s {budget_s:g} spent"}
                        for q in probes[i:]]
            break
        q = shrink(p) if tiny else p
        r = measure(q, device)
        results.append(r)
        peak = f"{r['peak_gib']} of {r['card_gib']} GiB" if r.get("peak_gib") is not None else "(no CUDA)"
        log(f"memory probe {i + 1}/{len(probes)}: {p.model} {p.mode} {q.batch}x{q.length} {q.precision}"
            f"{' ckpt' if q.checkpointing else ''}: {r['status']} {peak} in {r['seconds']} s")
        write(out_path, results, device, tiny, time.monotonic() - t0)
    write(out_path, results, device, tiny, time.monotonic() - t0)
    return results


def write(path: Path, results: list[dict], device: str, tiny: bool, elapsed: float) -> None:
    write_json(path, {"device": device, "tiny": tiny, "elapsed_s": round(elapsed, 1), "probes": results})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.memory_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--paper", nargs="+", default=[], help="papers whose GPU grids to probe")
    ap.add_argument("--plan", type=Path, help="measure the probes of a saved plan (a --plan-only output)")
    ap.add_argument("--plan-only", action="store_true", help="write the plan, measure nothing")
    ap.add_argument("--out", type=Path, required=True, help="the JSON written (after every probe)")
    ap.add_argument("--tiny", action="store_true", help="shrink dims, batch and length (a CPU test of the code)")
    ap.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    ap.add_argument("--budget-s", type=float, default=None, help="start no probe after this many seconds")
    ap.add_argument("--only", nargs="+", default=None, help="probe only these models (conf/model names)")
    args = ap.parse_args(argv)
    if not args.paper and not args.plan:
        ap.error("--paper <paper ...> or --plan <file>: say which grids to probe")
    if args.budget_s is not None and args.budget_s <= 0:
        ap.error(f"--budget-s {args.budget_s}: give seconds > 0")
    if args.plan:
        doc = json.loads(args.plan.read_text())
        probes = [Probe(**{k: v for k, v in d.items() if k in Probe.__dataclass_fields__}) for d in doc["probes"]]
    else:
        probes = plan(args.paper, log=lambda s: print(s, file=sys.stderr))
    if args.only:
        probes = [p for p in probes if p.model in args.only]
    if args.plan_only:
        write(args.out, [asdict(p) for p in probes], "none", args.tiny, 0.0)
        print(f"memory probe: {len(probes)} probes planned -> {args.out}")
        return 0
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    results = run(probes, args.out, device, args.budget_s, args.tiny)
    bad = [r for r in results if r["status"] in ("oom", "error") or r.get("fits") is False]
    print(f"memory probe: {len(results)} probes, {len(bad)} failing or over the card -> {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
