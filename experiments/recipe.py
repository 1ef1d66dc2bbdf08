"""The fine-tuning recipe that every method training a model on a task shares: build, encode every split, record
their sizes, batch, train with the shared loop (experiments.train.fit) and score. A method changes a step by calling
the steps itself (Embedding Recycling feeds cached states as batches; EAT keeps the model and scores it its own way),
never by copying them.

    tok, model, splits = prepare(cfg)
    metrics = finetune(cfg, ctx, tok, model, splits)"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from experiments import batches, data
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.metrics import higher_is_better
from experiments.models import build, count_parameters
from experiments.train import fit


@dataclass
class Splits:
    raw: dict[str, Any]  # split -> rows as loaded
    train: Any  # encoded features (datasets.Dataset)
    evals: Any
    dev: Any = None  # None when the task has no dev split: the checkpoint is then chosen on eval, as the papers' GLUE
    # numbers are


def encode(cfg: DictConfig, tok) -> Splits:
    """Every split of the task, loaded and encoded at the run's maximum length."""
    raw = data.load_splits(cfg.task, cfg.data)
    n = data.max_length(cfg.task, cfg.data)
    train = data.encode(raw["train"], tok, cfg.task, n, train=True)
    evals = data.encode(raw["eval"], tok, cfg.task, n, train=False)
    dev = data.encode(raw["dev"], tok, cfg.task, n, train=False) if "dev" in raw else None
    return Splits(raw, train, evals, dev)


def prepare(cfg: DictConfig):
    """(tokenizer, model with its task head, encoded splits): what every fine-tuning-style method starts from."""
    tok, model = build(cfg.model, cfg.task)
    return tok, model, encode(cfg, tok)


def record_samples(cfg: DictConfig, ctx: RunContext, splits: Splits) -> None:
    raw = splits.raw
    ctx.n_samples.update(train_examples=len(raw["train"]), train_features=len(splits.train),
                         eval_examples=len(raw["eval"]), eval_features=len(splits.evals),
                         **({"dev_examples": len(raw["dev"])} if "dev" in raw else {}),
                         limit_train=cfg.data.limit_train, limit_eval=cfg.data.limit_eval,
                         max_length=data.max_length(cfg.task, cfg.data))


def token_batches(cfg: DictConfig, ctx: RunContext, features, pad_id: int):
    """(epoch -> padded token batches, batches per epoch) with the run's batch size, seed and loader settings."""
    return batches.train_batches(features, cfg.hardware.batch_size, pad_id, cfg.seed, cfg.train.group_by_length,
                                 **batches.loading(cfg.hardware, ctx.device))


def fit_and_score(cfg: DictConfig, ctx: RunContext, model, splits: Splits, train_batches, n_batches: int, pad_id: int,
                  eval_inputs=None, dev_inputs=None, train_cfg: DictConfig | None = None) -> dict[str, float]:
    """Train with the shared loop, keep the best evaluation; the metrics every fine-tuning-style method reports.
    `eval_inputs`/`dev_inputs`: how evaluation feeds the model (default: token ids; a cache-fed model passes its
    own). With a dev split the checkpoint is chosen on dev and eval is scored once, at the chosen weights, so the
    reported eval/* never selected anything. `train_cfg`: the training settings when they are not cfg.train (an arm
    that trains at its own learning rate)."""
    hw, objective, raw, dev = cfg.hardware, cfg.task.objective, splits.raw, splits.dev
    if dev is not None and eval_inputs is not None and dev_inputs is None:
        raise ValueError(f"task {cfg.task.name} selects its checkpoint on dev, and the model reads eval through its own "
                         "inputs (eval_inputs): pass dev_inputs too, or dev would be fed token ids")

    def score(split, feats, inputs):
        inputs = inputs or batches.TokenInputs(feats, pad_id)  # built once: every evaluation reuses its workers
        return lambda m: evaluate(m, feats, raw[split], cfg.task, hw.eval_batch_size, ctx.device, pad_id,
                                  inputs, hw.num_workers).as_split(split)
    select, key = (score("dev", dev, dev_inputs), objective.replace("eval/", "dev/", 1)) if dev is not None else \
        (score("eval", splits.evals, eval_inputs), objective)
    result = fit(model, train_batches, n_batches, train_cfg or cfg.train, evaluate=select, objective=key,
                 higher_is_better=higher_is_better(objective) is not False,
                 device=ctx.device, precision=hw.precision, on_eval=lambda s, m: ctx.log_metrics(m, s),
                 test=score("eval", splits.evals, eval_inputs) if dev is not None else None, log_metrics=ctx.sink)
    ctx.extra["history"] = result.history
    scored = result.best if dev is None else result.test
    if getattr(scored, "per_example", None):  # the examples behind the reported evaluation
        ctx.per_example["eval"] = scored.per_example
    return {**result.best, **scored, **count_parameters(model), "train/steps": result.steps,
            "train/best_step": result.best_step, "train/epochs": result.epochs, "time/train_s": result.train_s,
            "time/step_ms": result.step_ms, "time/data_s": result.data_s}


def finetune(cfg: DictConfig, ctx: RunContext, tok, model, splits: Splits) -> dict[str, float]:
    """Every weight of `model` trains on token batches of the train split; the recipe's last three steps."""
    record_samples(cfg, ctx, splits)
    train_batches, n_batches = token_batches(cfg, ctx, splits.train, tok.pad_token_id)
    return fit_and_score(cfg, ctx, model, splits, train_batches, n_batches, tok.pad_token_id)
