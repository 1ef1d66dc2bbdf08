"""method=finetune: Full fine-tuning of encoder + task head (every weight trains)."""
from __future__ import annotations

import logging

from omegaconf import DictConfig

from experiments import data as D
from experiments import hooks
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.metrics import higher_is_better
from experiments.models import build, count_parameters, tokenizer_fingerprint
from experiments.train import fit

log = logging.getLogger(__name__)


def prepare(cfg: DictConfig):
    """Tokenizer, model and encoded splits: what every fine-tuning-style method starts from."""
    tok, model = build(cfg.model, cfg.task)
    raw = D.load_splits(cfg.task, cfg.data)
    n = D.max_length(cfg.task, cfg.data)
    train = D.encode(raw["train"], tok, cfg.task, n, train=True)
    evals = D.encode(raw["eval"], tok, cfg.task, n, train=False)
    return tok, model, raw, train, evals


def record_samples(cfg: DictConfig, ctx: RunContext, raw, train, evals) -> None:
    ctx.n_samples.update(train_examples=len(raw["train"]), train_features=len(train),
                         eval_examples=len(raw["eval"]), eval_features=len(evals),
                         limit_train=cfg.data.limit_train, limit_eval=cfg.data.limit_eval,
                         max_length=D.max_length(cfg.task, cfg.data))


def fit_and_score(cfg: DictConfig, ctx: RunContext, model, raw, evals, batches, n_batches: int, pad_id: int,
                  eval_inputs=None) -> dict[str, float]:
    """Train with the shared loop, keep the best evaluation; the metrics every fine-tuning-style method reports.
    `eval_inputs`: how evaluation feeds the model (default: token ids; a cache-fed model passes its own)."""
    hw, objective = cfg.hardware, cfg.task.objective
    result = fit(model, batches, n_batches, cfg.train,
                 evaluate=lambda m: evaluate(m, evals, raw["eval"], cfg.task, hw.eval_batch_size, ctx.device,
                                             pad_id, eval_inputs),
                 objective=objective, higher_is_better=higher_is_better(objective) is not False,
                 device=ctx.device, precision=hw.precision, on_eval=lambda s, m: ctx.log_metrics(m, s))
    ctx.extra["history"] = result.history
    if getattr(result.best, "per_example", None):  # the examples behind the reported (best) evaluation
        ctx.per_example["eval"] = result.best.per_example
    return {**result.best, **count_parameters(model), "train/steps": result.steps, "train/best_step": result.best_step,
            "train/epochs": result.epochs, "time/train_s": result.train_s, "time/step_ms": result.step_ms,
            "time/data_s": result.data_s}


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    tok, model, raw, train, evals = prepare(cfg)
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(tok)
    attached = hooks.attach(cfg, ctx, model, tok, {"train": train, "eval": evals})  # e.g. pema.enabled: E' for E
    batches, n_batches = D.train_batches(train, cfg.hardware.batch_size, tok.pad_token_id, cfg.seed,
                                         cfg.train.group_by_length)
    record_samples(cfg, ctx, raw, train, evals)
    metrics = fit_and_score(cfg, ctx, model, raw, evals, batches, n_batches, tok.pad_token_id)
    return {**metrics, **hooks.finish(attached, model, ctx.device)}  # e.g. E' merged back into the full matrix
