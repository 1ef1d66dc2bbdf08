"""method=layer_fusion: a backbone's block outputs fused (DWAtt, Concat, scalar mix, mean, last, or n extra blocks)
before the task head, trained under one regime and one protocol (layer_fusion/config.py).

fe: the frozen backbone's block outputs z_1..z_L come from the activation store (computed once per example, shared
by every fusion, budget and trial), so a run trains only the fusion and the head. Every fusion but `deeper` is
position-wise, so a token head trains on the labelled positions alone (the first piece of each word): the same
logits there as on the whole sequence, at a fraction of the cost (tests/layer_fusion). ft/lora run the backbone.

Records: the best dev score over the run (fewshot: the paper's "best observed dev score"), the final one, eval at the
best-dev weights (never used to choose), the dev curve, the learned weights over blocks, and the new parameters."""
from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from experiments import batches as B
from experiments import data as D
from experiments import metrics as M
from experiments.cached import Cached
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.memo import Memo
from experiments.models import SequenceHead, TokenHead, load_encoder, paper_head, pool, tokenizer_fingerprint
from experiments.optim import own_lr
from experiments.store import model_fingerprint
from experiments.train import fit
from layer_fusion.config import FUSIONS, LAMBDA_UNIFORM, HEADS, PROTOCOLS, REGIMES
from layer_fusion.fusion import DepthFusion, ExtraLayers, default_extra_layers, final_norm_of
from layer_fusion.model import FusionModel, renorm_last

log = logging.getLogger(__name__)


# ---- checks, before any work ------------------------------------------------------------------------------------
def check(cfg: DictConfig) -> None:
    m, task, model = cfg.method, cfg.task, cfg.model
    for key, value, valid in (("protocol", m.protocol, PROTOCOLS), ("regime", m.regime, REGIMES),
                              ("fusion", m.fusion, FUSIONS), ("head", m.head, HEADS)):
        if value not in valid:
            raise ValueError(f"method.{key}={value!r} is not one of {', '.join(valid)}")
    want = ("ner",) if m.protocol == "fewshot" else ("cls", "pair")
    if task.type not in want:
        raise ValueError(f"method.protocol={m.protocol} needs a {' or '.join(want)} task; task={task.name} is "
                         f"{task.type} (fewshot: e.g. task=wnut16; p32: task=rt-polarity, vitaminc, winogrande)")
    causal = model.get("kind") == "causal"
    token = "last" if causal else "cls"
    if m.head == "paper" and task.type in ("cls", "pair") and model.pooling != token:
        # the frozen probe pools each block by model.pooling before the head: it must be the token HF's head reads
        raise ValueError(f"method.head=paper reads {'the last real' if causal else 'the first'} token, as Hugging "
                         f"Face's head does, but model.pooling={model.pooling} (model={model.name}): set "
                         f"model.pooling={token}, or method.head=fresh")
    if m.fusion == "deeper" and causal:
        raise ValueError(f"method.fusion=deeper adds encoder blocks; model={model.name} is a decoder (the P-32 "
                         "paper has no deeper baseline): use last, mean, scalar_mix, concat or dwatt")
    if m.truncate is not None and not 1 <= m.truncate <= model.num_layers:
        raise ValueError(f"method.truncate={m.truncate} must lie in 1..{model.num_layers} (model={model.name}) "
                         "or be null")
    if m.protocol == "fewshot" and m.shots < 1:
        raise ValueError(f"method.shots={m.shots}: N must be >= 1")
    if m.regime == "fe" and m.protocol == "fewshot" and cfg.train.patience:
        raise ValueError(f"train.patience={cfg.train.patience}: the few-shot protocol trains each epoch budget to its "
                         "end and reports the best dev score seen; set train.patience=0")
    if m.lambda_lr is not None and m.fusion != "scalar_mix":
        raise ValueError(f"method.lambda_lr={m.lambda_lr} applies to fusion=scalar_mix only (fusion={m.fusion})")
    # P-32 on a GLUE task: the checkpoint is chosen on the metric the paper reports the task by (MRPC: F1, not the
    # accuracy its task config keeps for PEMA)
    paper = m.paper_objectives.get(task.name) if m.protocol == "p32" else None
    if paper is not None and task.objective != paper:
        raise ValueError(f"task.objective={task.objective}: P-32 reports task={task.name} by {paper}, so its "
                         f"checkpoint is chosen on it: set task.objective={paper} (the p32 experiments set it from "
                         "method.paper_objectives)")
    # both protocols choose on dev (fewshot: the paper's best dev F1) and score eval once: without a dev split the
    # run would choose on the split it reports, so a config without one is refused here, before any work
    if "dev" not in task.splits and not task.get("dev_from_train"):
        raise ValueError(f"task={task.name} has no dev split (task.splits={dict(task.splits)}, task.dev_from_train="
                         "null): name one in task.splits (e.g. dev: validation) or set task.dev_from_train=0.1")


# ---- the model ---------------------------------------------------------------------------------------------------
def blocks_of(cfg: DictConfig) -> int:
    return cfg.method.truncate or cfg.model.num_layers


def build(cfg: DictConfig, backbone: nn.Module, n_labels: int, pooled: bool) -> FusionModel:
    """Fusion + [extra blocks] + head on `backbone`. pooled: the head reads one state per example (P-32 fe)."""
    m, d = cfg.method, cfg.model.hidden_size
    gen = torch.Generator().manual_seed(cfg.seed)  # DWAtt's static keys: re-drawn per trial, as every new weight
    fusion = DepthFusion("last" if m.fusion == "deeper" else m.fusion, blocks_of(cfg), d,
                         scalar_mix_init=m.scalar_mix_init, gamma_q=m.gamma_q, gamma_v=m.gamma_v, d_pos=m.d_pos,
                         scale=m.dwatt_scale, generator=gen)
    if m.lambda_lr is not None:
        own_lr(fusion.lam, m.lambda_lr)
    extra = None
    if m.fusion == "deeper":
        extra = ExtraLayers(backbone, m.extra_layers or default_extra_layers(cfg.model.num_layers))
    regression = D.is_regression(cfg.task)
    if cfg.task.type == "ner":
        head = TokenHead(d, len(cfg.task.label_names))
    elif m.head == "paper":  # pooled or not, it reads the one token HF's head reads (check() holds model.pooling to it)
        head = paper_head(cfg.model, backbone.config, n_labels, regression)
    else:
        head = SequenceHead(d, n_labels, "cls" if pooled else cfg.model.pooling, regression=regression)
    norm = final_norm_of(backbone)
    if norm is not None:
        norm.requires_grad_(False)
    return FusionModel(fusion, head, backbone, extra, norm, m.prenorm_handling)


def new_parameters(model: FusionModel) -> dict[str, int]:
    count = lambda mods: sum(p.numel() for mod in mods if mod is not None for p in mod.parameters())  # noqa: E731
    return {"params/new": count(model.new_modules()), "params/fusion": count([model.fusion, model.extra]),
            "params/trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def apply_regime(cfg: DictConfig, model: FusionModel) -> None:
    m = cfg.method
    if m.regime == "fe":
        model.backbone.requires_grad_(False)
    elif m.regime == "lora":
        from peft import LoraConfig, get_peft_model  # only this regime needs peft
        targets = [t for t in m.lora_targets if any(n.endswith(t) for n, _ in model.backbone.named_modules())]
        if not targets:
            raise ValueError(f"method.lora_targets={list(m.lora_targets)} match no module of model={cfg.model.name}; "
                             "name its projection layers (e.g. query,value for BERT; q_proj,v_proj for Llama)")
        model.backbone = get_peft_model(model.backbone, LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha,
                                                                   lora_dropout=m.lora_dropout,
                                                                   target_modules=targets))


# ---- cached block outputs (fe) -----------------------------------------------------------------------------------
def cached_blocks(cfg: DictConfig, ctx: RunContext, store, backbone: nn.Module, feats, tok_key: str,
                  select: str) -> list[torch.Tensor]:
    """Per example, its block outputs z_1..z_n as one (T_i or 1, n, d) tensor in the store's dtype, from the store
    (every block 1..L is stored once per example and model, whatever n this run reads)."""
    L, n = cfg.model.num_layers, blocks_of(cfg)
    rows = D.rows_of(feats)
    # the frozen backbone's weights are hashed once per process (0.2 s per 100 MB), not once per run
    key = _memo(("fingerprint", id(backbone), OmegaConf.to_yaml(cfg.model)), lambda: model_fingerprint(backbone))
    states = store.hidden_states(backbone, rows, list(range(1, L + 1)), tokenizer_key=tok_key,
                                 max_length=D.max_length(cfg.task, cfg.data), select=select,
                                 batch_size=cfg.method.feature_batch, device=ctx.device, model_key=key)
    norm = final_norm_of(backbone)
    out = []
    for i in range(len(rows)):
        z = states[i][:n].transpose(0, 1)  # (T_i, n, d)
        if norm is not None and n < L:
            with torch.no_grad():
                z = renorm_last(z.float(), norm).to(z.dtype)
        out.append(z.contiguous())
    return out


def labelled_positions(feats) -> list[list[int]]:
    """Per sentence, the positions a token head is scored at (the first piece of each word)."""
    return [[p for p, lab in enumerate(labels) if lab != -100] for labels in feats["labels"]]


# ---- protocols ---------------------------------------------------------------------------------------------------
def few_shot_sample(n_train: int, shots: int, classes: int, seed: int) -> list[int]:
    """N·C training sentences drawn uniformly without replacement, not stratified [D §5.2]; each trial (seed)
    draws its own."""
    k = shots * classes
    if k > n_train:
        raise ValueError(f"method.shots={shots} x {classes} classes = {k} sentences, but the train split has "
                         f"{n_train}: lower method.shots (or method.classes)")
    return sorted(np.random.default_rng(seed).choice(n_train, size=k, replace=False).tolist())


def entity_types(label_names) -> int:
    return sum(1 for name in label_names if str(name).startswith("B-"))


def train_config(cfg: DictConfig, n_batches: int) -> DictConfig:
    """cfg.train with evaluations spread `evals_per_run` times over the whole budget (fewshot)."""
    t = OmegaConf.to_container(cfg.train, resolve=True)
    if cfg.method.protocol == "fewshot":
        total = max(1, math.ceil(n_batches * t["epochs"] / t["grad_accum"])) if t["max_steps"] <= 0 else t["max_steps"]
        t["eval_every"] = max(1, total // cfg.method.evals_per_run)
    return OmegaConf.create(t)


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    m, task = cfg.method, cfg.task
    # a frozen backbone is shared by the runs of a sweep in one process; a trained one is loaded fresh
    pre_split = task.type == "ner"  # the tokenizer reads pre-split words (a byte-level BPE one marks their starts)
    tok, backbone = (_memo(("backbone", OmegaConf.to_yaml(cfg.model), pre_split),
                           lambda: load_encoder(cfg.model, pre_split=pre_split))
                     if m.regime == "fe" else load_encoder(cfg.model, pre_split=pre_split))
    backbone.eval()
    ctx.tokenizer_fingerprint = tok_key = tokenizer_fingerprint(tok)
    raw = D.load_splits(task, cfg.data)
    if "dev" not in raw:
        raise ValueError(f"task={task.name} has no dev split: set task.dev_from_train (layer fusion chooses and "
                         "reports on dev; eval is scored once at the chosen weights)")
    # further eval splits (MNLI's eval_mismatched): scored once, like eval, at the same dev-chosen weights, so one
    # trained model gives both of the paper's MNLI columns; capped as eval is
    evals = ["eval", *sorted(s for s in raw if s.startswith("eval_"))]
    for s in evals[1:]:
        if cfg.data.limit_eval is not None and cfg.data.limit_eval < len(raw[s]):
            raw[s] = raw[s].shuffle(seed=cfg.data.subset_seed).select(range(cfg.data.limit_eval))
    n_len = D.max_length(task, cfg.data)
    if m.protocol == "fewshot":
        C = m.classes or entity_types(task.label_names)
        sample = few_shot_sample(len(raw["train"]), m.shots, C, cfg.seed)
        raw["train"] = raw["train"].select(sample)
        ctx.extra["sample"] = sample
    feats = {s: D.encode(raw[s], tok, task, n_len, train=(s == "train")) for s in ("train", "dev", *evals)}
    n_labels = 1 if D.is_regression(task) else len(task.label_names)  # a regression: one output (HF num_labels=1)
    pooled = m.regime == "fe" and m.protocol == "p32"
    model = build(cfg, backbone, n_labels, pooled)
    apply_regime(cfg, model)
    ctx.n_samples.update(train_examples=len(raw["train"]), dev_examples=len(raw["dev"]),
                         eval_examples=len(raw["eval"]), max_length=n_len,
                         **{f"{s}_examples": len(raw[s]) for s in evals[1:]})

    t0 = time.perf_counter()
    if m.regime == "fe":
        batches, n_batches, inputs, score_feats = fe_inputs(cfg, ctx, backbone, feats, tok_key, pooled)
        model.backbone = None  # the cached states stand in for it
    else:
        batches, n_batches = B.train_batches(feats["train"], cfg.hardware.batch_size, tok.pad_token_id, cfg.seed,
                                             cfg.train.group_by_length, **B.loading(cfg.hardware, ctx.device))
        inputs, score_feats = {s: None for s in feats}, feats
    features_s = time.perf_counter() - t0

    def scorer(split):
        return lambda mdl: evaluate(mdl, score_feats[split], raw[split], task, cfg.hardware.eval_batch_size,
                                    ctx.device, tok.pad_token_id, inputs[split]).as_split(split)

    trajectory = []  # the weights over blocks at every evaluation (scalar_mix: λ; Fig. 2's trajectories)

    def on_eval(step, metrics):
        if m.fusion == "scalar_mix":
            trajectory.append({"step": step, "lambda": model.fusion.lam.detach().cpu().tolist()})
        ctx.log_metrics(metrics, step)

    objective = task.objective.replace("eval/", "dev/", 1)

    def scored_evals(mdl):  # eval and the further eval splits, at the same weights; per-example scores: eval's
        out = scorer("eval")(mdl)
        for s in evals[1:]:
            out.update(scorer(s)(mdl))
        return out

    result = fit(model, batches, n_batches, train_config(cfg, n_batches), evaluate=scorer("dev"),
                 objective=objective, higher_is_better=True, device=ctx.device, precision=cfg.hardware.precision,
                 on_eval=on_eval, test=scored_evals, log_metrics=ctx.sink)
    if getattr(result.test, "per_example", None):
        ctx.per_example["eval"] = result.test.per_example
    # the claims hold an arm against a constant predictor on the metric they read; evaluate() stores that baseline
    # for accuracy and macro F1, not for the positive class's F1 (MRPC's and QQP's paper metric): store it here
    labels = np.asarray((getattr(result.test, "per_example", None) or {}).get("label", []))
    out_extra = {}
    if "f1_binary" in task.metrics and labels.size and np.issubdtype(labels.dtype, np.integer):
        const = np.full_like(labels, np.bincount(labels).argmax())
        out_extra["eval/majority_f1_binary"] = M.f1_binary(const, labels)
    ctx.extra["curve"] = [{"step": h["step"], objective: h[objective]} for h in result.history]
    ctx.extra["total_steps"] = result.steps
    out = {**result.best, **result.test, **out_extra, **new_parameters(model),
           f"{objective}_final": result.history[-1][objective],
           "train/steps": result.steps, "train/best_step": result.best_step, "train/epochs": result.epochs,
           "time/train_s": result.train_s, "time/step_ms": result.step_ms, "time/features_s": features_s}
    # DWAtt Fig. 4's "converging in 30% of training time": the first evaluation at >= 90% of the best dev score
    peak = max(h[objective] for h in result.history)
    # a correlation objective (spearman, mcc) can peak at or below 0, where 90% of the peak means nothing: no key
    hit = next((h["step"] for h in result.history if peak > 0 and h[objective] >= 0.9 * peak), None)
    if hit is not None:
        out["train/to90_frac"] = hit / result.steps
    weights = model.fusion.layer_weights()
    if m.fusion == "scalar_mix":
        ctx.extra["lambda"] = model.fusion.lam.detach().cpu().tolist()
        ctx.extra["lambda_trajectory"] = trajectory
        ctx.extra["layer_weights"] = weights.tolist()
        out["lambda/entropy_ratio"] = float(-(weights * weights.clamp_min(1e-12).log()).sum() / math.log(len(weights)))
        # P-32 Fig. 2 ("larger datasets put less weight on the first blocks"): the first quarter's weight above uniform
        early = -(-len(weights) // 4)
        out["lambda/early_excess"] = float(weights[:early].sum()) - early / len(weights)
        # ...which is evidence only where λ moved: at uniform the share is noise around 0, so the claims read it from
        # here, absent when λ did not learn (larger-data-less-early-weight*: not testable on such records)
        if out["lambda/entropy_ratio"] < LAMBDA_UNIFORM:
            ctx.extra["lambda_learned"] = {"early_excess": out["lambda/early_excess"]}
        out["train/examples"] = len(raw["train"])
    ctx.extra["prenorm_handling"] = m.prenorm_handling if cfg.model.get("kind") == "causal" else "post-LN (n/a)"
    if task.type in ("cls", "pair"):  # which head the fusion feeds (method.head; paper: as HF builds it, or why not)
        ctx.extra["head"] = model.head.note
    return out


def fe_inputs(cfg, ctx, backbone, feats, tok_key, pooled):
    """(train batches, batches per epoch, eval inputs per split, the features evaluation aligns with) from cached
    block outputs. Token tasks keep only the labelled positions unless the extra blocks need the whole sentence."""
    m = cfg.method
    store = ctx.store()
    select = "last" if pooled and cfg.model.pooling == "last" else "all"
    cached, score_feats = {}, {}
    for split in feats:
        key = (split, select, pooled, m.fusion == "deeper", blocks_of(cfg), tok_key,
               OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["model", "task", "data"])),
               tuple(ctx.extra.get("sample", ())) if split == "train" else ())
        cached[split], score_feats[split] = _memo(key, lambda: split_inputs(cfg, ctx, store, backbone, feats[split],
                                                                            tok_key, select, pooled))
    batches, n_batches = cached["train"].batches(cfg.hardware.batch_size, cfg.seed)
    return batches, n_batches, {s: cached[s].inputs for s in feats if s != "train"}, score_feats


# a sweep in one process loads its frozen backbone and reads each split's cached blocks once
_memo = Memo(8)


def split_inputs(cfg, ctx, store, backbone, f, tok_key, select, pooled):
    """One split's cached block outputs as model inputs, and the features evaluation aligns with."""
    z = cached_blocks(cfg, ctx, store, backbone, f, tok_key, select)
    labels = list(f["labels"])
    if pooled:  # one state per example: the head's pooling applied to each block (pooling and fusion commute)
        if select == "all":
            z = [pool(s.float().transpose(0, 1), torch.ones(s.shape[1], s.shape[0], dtype=torch.long),
                      cfg.model.pooling).unsqueeze(0).to(s.dtype) for s in z]
    elif cfg.task.type == "ner" and cfg.method.fusion != "deeper":
        keep = labelled_positions(f)
        z = [s[k] for s, k in zip(z, keep)]
        labels = [[lab[p] for p in k] for lab, k in zip(labels, keep)]
        if "word_index" in f.column_names:
            f = f.map(lambda ex: {"word_index": [w for w in ex["word_index"] if w >= 0]})
    return Cached(z, {"labels": labels}), f
