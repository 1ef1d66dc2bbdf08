"""Training one arm (dense | eat | paper_code) and readying it to be scored or timed.

Training [P Alg. 2, R]: CE(final) + 0.3 CE(exit head) [P Eq. 1] (+ 0.3 CE(patience head), only with
method.patience=true: the rule needs a head of its own); pruning annealed per epoch (epoch e of E prunes p (e-1)/(E-1));
local attention on throughout; no exit while training. The checkpoint is chosen on dev with the arm's full inference
settings minus the exit (pruning at its target). Weights are cached (eat/checkpoints.py), so method=eat_bench times
the same models. Then the exit head is calibrated and tau chosen on dev (eat/inference.py)."""
from __future__ import annotations

import logging
import math
from dataclasses import replace

import torch
from omegaconf import DictConfig, OmegaConf

from eat import checkpoints, inference
from eat.config import patience_layer_of
from eat.model import Distilled, EatModel, Settings
from experiments import recipe
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.models import load_encoder, load_tokenizer
from experiments.recipe import Splits
from experiments.train import fit

log = logging.getLogger(__name__)


def settings_of(m: DictConfig) -> Settings:
    """The arm's inference settings without an exit threshold (tau is chosen on dev)."""
    if m.variant == "dense":
        return Settings().dense()
    s = Settings(prune_after=tuple(m.prune_after), prune_ratio=m.prune_ratio, prune_rule=m.prune_rule,
                 scorer=m.scorer, window=m.window, patience=m.patience)
    if m.variant == "paper_code":  # the official code: zero-masking under its keep rule, dense mask, batch exit [R]
        s = replace(s, prune_rule="repo", prune_mode="mask", kernel="masked", exit_mode="batch")
    return s


def load_data(cfg: DictConfig):
    """(tokenizer, every split of the task encoded): the model's tokenizer is the first the run loads, so the record
    names it."""
    tok = load_tokenizer(cfg.model)
    return tok, recipe.encode(cfg, tok)


def build(cfg: DictConfig) -> EatModel:
    m = cfg.method
    _, enc = load_encoder(cfg.model)
    dense = m.variant == "dense"  # the baseline is the encoder fine-tuned alone: no extra heads
    return EatModel(enc, len(cfg.task.label_names), exit_layer=None if dense else m.exit_layer,
                    patience_layer=patience_layer_of(m), exit_weight=m.exit_weight,
                    settings=settings_of(m), pooling=m.pooling or cfg.model.pooling)


def train_arm(cfg: DictConfig, ctx: RunContext, tok, splits: Splits) -> tuple[EatModel, dict]:
    """The arm's trained model (from the cache when its exact training exists) and its training summary. Its head
    init and dropout are seeded by the arm's own cfg.seed, so the weights a checkpoint holds do not depend on what
    ran before in the process (the benchmark trains three arms in one), and a cached arm reproduces when rerun."""
    torch.manual_seed(cfg.seed)
    model = build(cfg)
    path = checkpoints.checkpoint_path(cfg, ctx, model, tok)
    info = None if cfg.force else checkpoints.load(path, model)  # force=true retrains and replaces the checkpoint
    if info is not None:
        log.info("eat: reusing the %s checkpoint %s", cfg.method.variant, path)
        return model.to(ctx.device), {**info, "cached": True}
    m, pad = cfg.method, tok.pad_token_id
    target = model.settings
    train_settings = target if m.variant == "dense" else replace(target, tau=None)
    batches, n_batches = recipe.token_batches(cfg, ctx, splits.train, pad)
    epochs = max(1, math.ceil(cfg.train.epochs))

    def annealed(epoch: int):
        frac = 1.0 if m.anneal == "none" or epochs == 1 else min(1.0, epoch / (epochs - 1))
        model.settings = replace(train_settings, prune_ratio=train_settings.prune_ratio * frac)
        return batches(epoch)

    trainee = model
    if m.distill and m.variant != "dense":
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):  # a cached teacher draws nothing
            dense = OmegaConf.merge(cfg, {"method": {"variant": "dense", "distill": False}})
            teacher, _ = train_arm(dense, ctx, tok, splits)
        trainee = Distilled(model, teacher.to(ctx.device), m.distill_temperature, m.distill_mu)
    dev_split = "dev" if splits.dev is not None else "eval"
    dev_feats = splits.dev if splits.dev is not None else splits.evals

    def select(_):
        with model.using(target):  # the checkpoint is judged as it will run, minus the exit
            return evaluate(model, dev_feats, splits.raw[dev_split], cfg.task, cfg.hardware.eval_batch_size,
                            ctx.device, pad).as_split("dev")
    res = fit(trainee, annealed, n_batches, cfg.train, evaluate=select, objective="dev/accuracy",
              higher_is_better=True, device=ctx.device, precision=cfg.hardware.precision,
              on_eval=lambda s, mt: ctx.log_metrics(mt, s), log_metrics=ctx.sink)
    model.settings = target
    info = {"steps": res.steps, "best_step": res.best_step, "epochs": res.epochs, "train_s": res.train_s,
            "step_ms": res.step_ms, "history": res.history, "dev/accuracy": res.best["dev/accuracy"]}
    checkpoints.save(path, model, info)
    return model, {**info, "cached": False}


def prepare(cfg: DictConfig, ctx: RunContext, tok=None, splits: Splits | None = None):
    """Everything an arm needs to be scored or timed: the trained model with its exit head calibrated and its tau
    chosen on dev, its training summary and what was measured on the way. Loads the arm's own data unless given.
    The caller has run eat.config.check on `cfg`."""
    if splits is None:
        tok, splits = load_data(cfg)
    model, info = train_arm(cfg, ctx, tok, splits)
    pad, bs = tok.pad_token_id, cfg.hardware.eval_batch_size
    s = model.settings
    dev_feats = splits.dev if splits.dev is not None else splits.evals
    dev = inference.predict(model, dev_feats, pad, bs, ctx.device, s)
    evals = inference.predict(model, splits.evals, pad, bs, ctx.device, s)
    out = {"dev/accuracy_no_exit": inference.accuracy(dev), **inference.calibrate(cfg, model, dev, evals)}
    if "exit_logits" in evals:  # is the exit head doing the task? (an exit head at the majority class exits nothing)
        out["eval/exit_head_accuracy"] = float((evals["exit_logits"].argmax(1) == evals["labels"]).mean())
    tau, dev_accs, why = None, {}, "no exit head"
    if model.exit_layer is not None and cfg.method.variant != "dense":
        tau, dev_accs, why = inference.choose_tau(cfg, model, dev_feats, pad, inference.accuracy(dev), ctx.device)
    model.settings = replace(s, tau=tau)
    return model, info, {"tau": tau, "dev_accs": dev_accs, "tau_choice": why, "no_exit": evals, "metrics": out}
