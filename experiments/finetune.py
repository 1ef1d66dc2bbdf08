"""method=finetune: Full fine-tuning of encoder + task head (every weight trains)."""
from __future__ import annotations

import logging

from omegaconf import DictConfig

from experiments import batches as B
from experiments import data as D
from experiments import hooks
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.metrics import higher_is_better
from experiments.models import build, count_parameters, tokenizer_fingerprint
from experiments.train import fit

log = logging.getLogger(__name__)


def prepare(cfg: DictConfig):
    """Tokenizer, model and encoded splits: what every fine-tuning-style method starts from. A task whose splits name
    a `dev` split selects its checkpoint there (`encode_dev`); otherwise on eval, as the papers' GLUE numbers do."""
    tok, model = build(cfg.model, cfg.task)
    raw = D.load_splits(cfg.task, cfg.data)
    n = D.max_length(cfg.task, cfg.data)
    train = D.encode(raw["train"], tok, cfg.task, n, train=True)
    evals = D.encode(raw["eval"], tok, cfg.task, n, train=False)
    return tok, model, raw, train, evals


def encode_dev(cfg: DictConfig, tok, raw):
    """The encoded dev split, or None when the task has none."""
    return D.encode(raw["dev"], tok, cfg.task, D.max_length(cfg.task, cfg.data), train=False) if "dev" in raw else None


def record_samples(cfg: DictConfig, ctx: RunContext, raw, train, evals) -> None:
    ctx.n_samples.update(train_examples=len(raw["train"]), train_features=len(train),
                         eval_examples=len(raw["eval"]), eval_features=len(evals),
                         **({"dev_examples": len(raw["dev"])} if "dev" in raw else {}),
                         limit_train=cfg.data.limit_train, limit_eval=cfg.data.limit_eval,
                         max_length=D.max_length(cfg.task, cfg.data))


def fit_and_score(cfg: DictConfig, ctx: RunContext, model, raw, evals, batches, n_batches: int, pad_id: int,
                  eval_inputs=None, dev=None, dev_inputs=None) -> dict[str, float]:
    """Train with the shared loop, keep the best evaluation; the metrics every fine-tuning-style method reports.
    `eval_inputs`: how evaluation feeds the model (default: token ids; a cache-fed model passes its own). With a dev
    split (`dev`, `dev_inputs` likewise) the checkpoint is chosen on dev and eval is scored once, at the chosen
    weights, so the reported eval/* never selected anything."""
    hw, objective = cfg.hardware, cfg.task.objective
    if "dev" in raw and dev is None:
        raise ValueError(f"task {cfg.task.name} has a dev split (task.splits.dev) but the method passed no dev "
                         "features to fit_and_score: encode it (experiments.finetune.encode_dev) and pass dev=")

    def score(split, feats, inputs):
        inputs = inputs or B.TokenInputs(feats, pad_id)  # built once: every evaluation reuses its loader's workers
        return lambda m: evaluate(m, feats, raw[split], cfg.task, hw.eval_batch_size, ctx.device, pad_id,
                                  inputs, hw.num_workers).as_split(split)
    select, key = (score("dev", dev, dev_inputs), objective.replace("eval/", "dev/", 1)) if dev is not None else \
        (score("eval", evals, eval_inputs), objective)
    result = fit(model, batches, n_batches, cfg.train, evaluate=select, objective=key,
                 higher_is_better=higher_is_better(objective) is not False,
                 device=ctx.device, precision=hw.precision, on_eval=lambda s, m: ctx.log_metrics(m, s),
                 test=score("eval", evals, eval_inputs) if dev is not None else None, log_metrics=ctx.sink)
    ctx.extra["history"] = result.history
    scored = result.best if dev is None else result.test
    if getattr(scored, "per_example", None):  # the examples behind the reported evaluation
        ctx.per_example["eval"] = scored.per_example
    return {**result.best, **scored, **count_parameters(model), "train/steps": result.steps, "train/best_step": result.best_step,
            "train/epochs": result.epochs, "time/train_s": result.train_s, "time/step_ms": result.step_ms,
            "time/data_s": result.data_s}


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    tok, model, raw, train, evals = prepare(cfg)
    dev = encode_dev(cfg, tok, raw)
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(tok)
    # e.g. pema.enabled: E' for E, over every split the model reads (dev too: it chooses the checkpoint)
    features = {"train": train, "eval": evals, **({"dev": dev} if dev is not None else {})}
    attached = hooks.attach(cfg, ctx, model, tok, features)
    batches, n_batches = B.train_batches(train, cfg.hardware.batch_size, tok.pad_token_id, cfg.seed,
                                         cfg.train.group_by_length, **B.loading(cfg.hardware, ctx.device))
    record_samples(cfg, ctx, raw, train, evals)
    metrics = fit_and_score(cfg, ctx, model, raw, evals, batches, n_batches, tok.pad_token_id, dev=dev)
    return {**metrics, **hooks.finish(attached, model, ctx.device)}  # e.g. E' merged back into the full matrix
