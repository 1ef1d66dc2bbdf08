"""method=eat: fine-tune one arm (dense | eat | paper_code) on a classification task, calibrate the exit head and choose
tau on dev (eat/training.py), then score eval once at the chosen tau and at every swept tau (the frontier;
eat/inference.py)."""
from __future__ import annotations

from dataclasses import replace

from omegaconf import DictConfig

from eat.config import check
from eat.inference import accuracy, point, predict, probs, score, shape_of
from eat.training import load_data, prepare
from experiments import metrics, recipe
from experiments.context import RunContext


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    tok, splits = load_data(cfg)
    model, info, sel = prepare(cfg, ctx, tok, splits)
    recipe.record_samples(cfg, ctx, splits)
    pad, bs, m = tok.pad_token_id, cfg.hardware.eval_batch_size, cfg.method
    swept, extension = {}, {}  # tau -> eval predictions; the chosen tau is one of swept, no exit came from prepare()
    if model.exit_layer is not None and m.variant != "dense":
        swept = {tau: predict(model, splits.evals, pad, bs, ctx.device, replace(model.settings, tau=tau))
                 for tau in sorted(m.taus)}
        extension = {tau: predict(model, splits.evals, pad, bs, ctx.device, replace(model.settings, tau=tau))
                     for tau in sorted(m.get("extension_taus") or [])}
    no_exit = sel["no_exit"]
    chosen = swept[sel["tau"]] if sel["tau"] in swept else no_exit
    out = {**score(chosen, cfg.task), **sel["metrics"],
               "eval/accuracy_no_exit": accuracy(no_exit), "eval/avg_depth": float(chosen["depth"].mean()),
               "eval/avg_retention": float(chosen["retention"].mean()),
               "eat/tau": sel["tau"] if sel["tau"] is not None else float("nan"),
               "train/steps": info["steps"], "train/best_step": info["best_step"], "time/train_s": info["train_s"],
               "time/step_ms": info["step_ms"]}
    frontier = [{**point(tau, p), "dev_accuracy": sel["dev_accs"][tau]} for tau, p in swept.items()]
    ctx.per_example["eval"] = {"pred": chosen["logits"].argmax(1).tolist(), "label": chosen["labels"].tolist()}
    # the frontier as parallel arrays: what experiments.evidence.claims correlates (depth vs tau)
    curve = {k: [f[k] for f in frontier] for k in ("tau", "accuracy", "avg_depth", "avg_retention")}
    ctx.extra.update(history=info["history"], checkpoint_cached=info["cached"], frontier=frontier, curve=curve,
                     tau_choice=sel["tau_choice"],
                     detail={"length": chosen["length"].tolist(), "retention": chosen["retention"].round(4).tolist(),
                             "depth": chosen["depth"].tolist()},
                     reliability={when: {k: v.tolist() for k, v in metrics.calibration_bins(
                         probs(no_exit["exit_logits"], t), no_exit["labels"], m.ece_bins).items()}
                         for when, t in (("before", 1.0), ("after", float(model.temperature)))}
                     if "exit_logits" in no_exit else {})
    if extension:  # off the paper's grid: labelled, never the headline
        ctx.extra["frontier_extension"] = [{**point(tau, p), "extension": True} for tau, p in extension.items()]
    if model.settings.exit_mode == "batch" and sel["tau"] is not None:
        # the headline is batch 1 (the paper's); the batch rule read on eval batches of `bs` for comparison
        p = predict(model, splits.evals, pad, bs, ctx.device, model.settings, batch1=False)
        ctx.extra["batch_exit_at_eval_batch"] = {"batch_size": bs, **point(sel["tau"], p)}
    ctx.extra["exit_scored_at_batch"] = 1  # every exit above is what batch-1 inference computes
    ctx.extra.update(shape_of(chosen, model, model.settings))  # per layer, at the headline tau on eval
    return out
