"""method=layer_fusion: a backbone's block outputs fused (DWAtt, Concat, scalar mix, mean, last, or n extra blocks)
before the task head, trained under one regime and one protocol (layer_fusion/config.py).

fe: the frozen backbone's block outputs z_1..z_L come from the activation store (layer_fusion/features.py: computed
once per example, shared by every fusion, budget and trial), so a run trains only the fusion and the head. Every
fusion but `deeper` is position-wise, so a token head trains on the labelled positions alone (the first piece of each
word): the same logits there as on the whole sequence, at a fraction of the cost. ft/lora run the backbone.

Records: the best dev score over the run (fewshot: the paper's "best observed dev score"), the final one, eval at the
best-dev weights (never used to choose), the dev curve, the learned weights over blocks, and the new parameters."""
from __future__ import annotations

import math
import time

import numpy as np
from omegaconf import DictConfig

from experiments import data
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.metrics import f1_binary
from experiments.models import frozen_encoder, load_encoder, tokenizer_fingerprint
from experiments.recipe import token_batches
from experiments.train import fit
from layer_fusion.assemble import apply_regime, build, new_parameters
from layer_fusion.config import LAMBDA_UNIFORM, check
from layer_fusion.features import fe_inputs
from layer_fusion.fusion import DepthFusion
from layer_fusion.protocols import entity_types, few_shot_sample, train_config


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    m, task = cfg.method, cfg.task
    # a frozen backbone is shared by the runs of a sweep in one process; a trained one is loaded fresh
    pre_split = task.type == "ner"  # the tokenizer reads pre-split words (a byte-level BPE one marks their starts)
    if m.regime == "fe":
        tok, backbone = frozen_encoder(cfg.model, pre_split=pre_split)
        tok_key = tokenizer_fingerprint(tok)  # keys this tokenizer's ids in the activation store
    else:
        tok, backbone = load_encoder(cfg.model, pre_split=pre_split)
        backbone.eval()
    raw = data.load_splits(task, cfg.data)
    if "dev" not in raw:
        raise ValueError(f"task={task.name} has no dev split: set task.dev_from_train (layer fusion chooses and "
                         "reports on dev; eval is scored once at the chosen weights)")
    # further eval splits (MNLI's eval_mismatched): scored once, like eval, at the same dev-chosen weights, so one
    # trained model gives both of the paper's MNLI columns; capped as eval is
    evals = ["eval", *sorted(s for s in raw if s.startswith("eval_"))]
    for s in evals[1:]:
        if cfg.data.limit_eval is not None and cfg.data.limit_eval < len(raw[s]):
            raw[s] = raw[s].shuffle(seed=cfg.data.subset_seed).select(range(cfg.data.limit_eval))
    n_len = data.max_length(task, cfg.data)
    if m.protocol == "fewshot":
        C = m.classes or entity_types(task.label_names)
        sample = few_shot_sample(len(raw["train"]), m.shots, C, cfg.seed)
        raw["train"] = raw["train"].select(sample)
        ctx.extra["sample"] = sample
    feats = {s: data.encode(raw[s], tok, task, n_len, train=(s == "train")) for s in ("train", "dev", *evals)}
    n_labels = 1 if data.is_regression(task) else len(task.label_names)  # a regression: one output (HF num_labels=1)
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
        batches, n_batches = token_batches(cfg, ctx, feats["train"], tok.pad_token_id)
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
        out_extra["eval/majority_f1_binary"] = f1_binary(const, labels)
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
    if m.fusion == "scalar_mix":
        out.update(lambda_metrics(model.fusion, trajectory, ctx.extra))
        out["train/examples"] = len(raw["train"])
    ctx.extra["prenorm_handling"] = m.prenorm_handling if cfg.model.get("kind") == "causal" else "post-LN (n/a)"
    if task.type in ("cls", "pair"):  # which head the fusion feeds (method.head; paper: as HF builds it, or why not)
        ctx.extra["head"] = model.head.note
    return out


def lambda_metrics(fusion: DepthFusion, trajectory: list[dict], extra: dict) -> dict[str, float]:
    """scalar_mix: λ, its trajectory and softmax(λ) go to the record's extra; how far softmax(λ) left uniform and
    where its weight sits are the metrics."""
    weights = fusion.layer_weights()
    extra["lambda"] = fusion.lam.detach().cpu().tolist()
    extra["lambda_trajectory"] = trajectory
    extra["layer_weights"] = weights.tolist()
    out = {"lambda/entropy_ratio": float(-(weights * weights.clamp_min(1e-12).log()).sum() / math.log(len(weights)))}
    # P-32 Fig. 2 ("larger datasets put less weight on the first blocks"): the first quarter's weight above uniform
    early = -(-len(weights) // 4)
    out["lambda/early_excess"] = float(weights[:early].sum()) - early / len(weights)
    # ...which is evidence only where λ moved: at uniform the share is noise around 0, so the claims read it from
    # here, absent when λ did not learn (larger-data-less-early-weight*: not testable on such records)
    if out["lambda/entropy_ratio"] < LAMBDA_UNIFORM:
        extra["lambda_learned"] = {"early_excess": out["lambda/early_excess"]}
    return out
