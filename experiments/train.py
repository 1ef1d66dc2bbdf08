"""The one plain-torch training loop: AdamW, linear warmup then linear decay (experiments.optim), gradient
accumulation, early stopping on the dev objective (`EarlyStopping`: the best weights are restored), progress
(experiments.progress), per-step timing and training curves for the run's logger (`TrainLog`). It is the "Full"
baseline every paper compares against; methods reuse it by passing a model whose frozen parts need no grad, and a
method with its own optimisation recipe passes its optimizers (`Optimization`: several, each with its schedule and
clipping) and its own batches (a dict of keyword arguments of the model's forward).

Mixed precision is torch's own: autocast, and for fp16 a `torch.amp.GradScaler` (bf16 has fp32's range and needs
none). accelerate would own the same three things (autocast, scaler, device placement) behind its `Accelerator`, but
this loop already holds them in a few lines, runs on one device, and its tests pin exact equivalences (accumulation
= one big batch, skipped overflow steps) that a wrapper's own choices (e.g. when it skips the scheduler) would put
out of view; so the loop stays plain torch."""
from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch
from torch import nn

from experiments.optim import adamw, linear_schedule, warmup_steps
from experiments.progress import Progress
from experiments.timing import StepTimer

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    best: dict[str, float]  # eval metrics of the restored best weights
    best_step: int
    steps: int
    epochs: float
    train_s: float  # optimizer steps only
    step_ms: float  # median optimizer-step time (forward + backward + update)
    stopped_early: bool
    skipped_steps: int = 0  # fp16 steps whose gradients overflowed: no update, no schedule step, a smaller loss scale
    data_s: float = 0.0  # time spent producing batches (tokenized padding, or reading a cache)
    history: list[dict] = field(default_factory=list)
    test: dict[str, float] | None = None  # `test(model)` once, at the restored best weights (when given)
    step_s: list[float] = field(default_factory=list)  # every optimizer step's time, in order
    # before each evaluation, the wall time trained since the previous one (batches included: a model whose batches
    # run a training encoder spends most of its time there; evaluations and checkpoint copies excluded)
    intervals_s: list[float] = field(default_factory=list)


@dataclass
class Optimization:
    """One optimizer and its schedule, stepped together; before the step, `params` (what it updates) have their
    gradients clipped to a global norm of `max_grad_norm` (0: not clipped). A method with one recipe per part of its
    model (e.g. a head with Adam and an aggregator with AdamW) passes one of these per part."""
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    params: list[nn.Parameter]
    max_grad_norm: float = 0.0


class EarlyStopping:
    """The best evaluation so far, its step and a CPU copy of its weights, and when to stop: after `patience`
    evaluations in a row with no strictly better objective (0: never), and not before step `min_steps`."""

    def __init__(self, objective: str, higher_is_better: bool, patience: int, min_steps: int = 0):
        self.objective, self.patience, self.min_steps = objective, patience, min_steps
        self.sign = 1 if higher_is_better else -1
        self.best: dict[str, float] = {}
        self.best_score: float | None = None
        self.best_step, self.best_state, self.bad = 0, None, 0

    def update(self, step: int, metrics: dict[str, float], model: nn.Module) -> bool:
        """Take the evaluation at `step`; True when training should stop."""
        score = metrics[self.objective]
        if self.best_score is None or self.sign * score > self.sign * self.best_score:
            self.best, self.best_score, self.best_step, self.bad = metrics, score, step, 0
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            self.bad += 1
        return bool(self.patience) and self.bad >= self.patience and step >= self.min_steps

    def restore(self, model: nn.Module) -> None:
        model.load_state_dict(self.best_state)


class TrainLog:
    """Training curves for a run's logger (`RunContext.log_metrics`, i.e. wandb): every `every` optimizer steps, and
    at the last one, the mean loss over the steps since the previous point, the learning rate the last step used
    (`train/lr`; `train/lr_1`, ... for parameter groups with their own base rate) and the throughput over training
    time (evaluation excluded): examples/s, and tokens/s when batches carry an attention mask. Without a logger every
    method returns at once: no counting, no device sync."""

    def __init__(self, sink: Callable[[dict, int], None] | None, total_steps: int, every: int | None = None):
        self.sink, self.total = sink, total_steps
        # about 100 points a run and at least one every 50 steps: a smoke run still draws a curve, a long one is light
        self.every = every or max(1, min(50, total_steps // 100))
        self._reset()

    def _reset(self) -> None:
        self.loss, self.steps, self.examples, self.tokens = None, 0, 0, None
        self.t0 = time.perf_counter()

    def batch(self, batch: dict) -> None:
        """Count one (micro-)batch."""
        if self.sink is None or not batch:
            return
        # the first tensor's rows (a list of per-source tensors or a flag says nothing about the batch size)
        first = next((v for v in batch.values() if isinstance(v, torch.Tensor)), next(iter(batch.values())))
        self.examples += len(first) if hasattr(first, "__len__") else 1
        mask = batch.get("attention_mask")
        if isinstance(mask, torch.Tensor):  # summed on its device; read once per point
            self.tokens = mask.sum() if self.tokens is None else self.tokens + mask.sum()

    def step(self, step: int, loss: torch.Tensor | float, lrs: list[float], **extra: float) -> None:
        """After optimizer step `step`: its loss (detached; a device tensor is read only when a point is due) and
        the learning rates it used (`rates`)."""
        if self.sink is None:
            return
        self.loss = loss if self.loss is None else self.loss + loss
        self.steps += 1
        if step % self.every and step != self.total:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        point = {"train/loss": float(self.loss) / self.steps, "train/lr": lrs[0],
                 **{f"train/lr_{i}": lr for i, lr in enumerate(lrs[1:], 1)},
                 "train/examples_per_s": self.examples / dt, **extra}
        if self.tokens is not None:
            point["train/tokens_per_s"] = float(self.tokens) / dt
        self.sink(point, step)
        self._reset()

    @staticmethod
    def rates(*optimizers: torch.optim.Optimizer) -> list[float]:
        """The current learning rate of each distinct base rate (groups that only differ in weight decay are one):
        read before `optimizer.step()`, they are the rates that step uses."""
        seen, out = set(), []
        for opt in optimizers:
            for g in opt.param_groups:
                base = g.get("initial_lr", g["lr"])
                if base not in seen:
                    seen.add(base)
                    out.append(g["lr"])
        return out

    @contextlib.contextmanager
    def paused(self):
        """Time inside the block (an evaluation) does not count toward throughput."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.t0 += time.perf_counter() - t


def total_steps(n_batches: int, cfg) -> int:
    if cfg.max_steps and cfg.max_steps > 0:
        return int(cfg.max_steps)
    return max(1, math.ceil(n_batches * cfg.epochs / cfg.grad_accum))


def fit(model: nn.Module, batches: Callable[[int], Iterable[dict]], n_batches: int, cfg,
        evaluate: Callable[[nn.Module], dict[str, float]] | None, objective: str | None, higher_is_better: bool,
        device: torch.device, precision: str = "fp32", on_eval: Callable[[int, dict], None] | None = None,
        test: Callable[[nn.Module], dict[str, float]] | None = None,
        log_metrics: Callable[[dict, int], None] | None = None, optimizers: Sequence[Optimization] | None = None,
        min_steps: int = 0, on_step: Callable[[int, torch.Tensor], None] | None = None) -> FitResult:
    """Train `model` on `batches(epoch)` (a fresh, reshuffled iterable each epoch) for cfg.max_steps or cfg.epochs.

    `evaluate(model) -> metrics` runs every cfg.eval_every optimizer steps (0: each epoch) and at the end; the weights
    with the best `metrics[objective]` are kept and restored, and after cfg.patience evaluations without improvement
    (none before step `min_steps`) training stops. Without `evaluate` nothing is evaluated and the last weights stay.
    `test(model)`, if given, is scored once at those weights (a dev split selects, the eval split is only reported).
    `log_metrics(metrics, step)` receives the training curves (`TrainLog`; pass the run's `ctx.log_metrics`);
    `on_eval(step, metrics)` each evaluation; `on_step(step, loss)` each optimizer step's loss (a detached tensor).
    cfg is a TrainConfig. `optimizers` replace the AdamW that cfg.lr, cfg.weight_decay, cfg.warmup_ratio and
    cfg.max_grad_norm describe. A batch is the model's keyword arguments: tensors (and lists of tensors) move to
    `device`, anything else (a flag) passes as it is.
    """
    model.to(device)
    steps_total = total_steps(n_batches, cfg)
    eval_every = cfg.eval_every or max(1, n_batches // cfg.grad_accum)
    if optimizers is None:
        opt = adamw(model, cfg.lr, cfg.weight_decay, device)
        optimizers = [Optimization(opt, linear_schedule(opt, warmup_steps(cfg.warmup_ratio, steps_total), steps_total),
                                   list(model.parameters()), cfg.max_grad_norm)]
    opts = [o.optimizer for o in optimizers]
    autocast = _autocast(device, precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    skipped = 0
    timer = StepTimer(device)
    stopping = EarlyStopping(objective, higher_is_better, cfg.patience, min_steps) if evaluate is not None else None
    history, step, micro, epoch, stopped = [], 0, 0, 0, False
    bar = Progress(steps_total, "train", unit="step", enabled=cfg.progress, delay_s=0)
    curve = TrainLog(log_metrics, steps_total)
    # the step's loss is kept only for someone who reads it
    track = log_metrics is not None or on_step is not None or bar.tty or bar.lines
    intervals, trained_since = [], [time.perf_counter()]

    def scored(fn):
        model.eval()
        with torch.inference_mode(), autocast():
            metrics = fn(model)
        model.train()
        return metrics

    def run_eval() -> bool:
        intervals.append(time.perf_counter() - trained_since[0])
        with curve.paused():
            metrics = scored(evaluate)
        history.append({"step": step, **metrics})
        if on_eval:
            on_eval(step, metrics)
        log.info("step %d/%d  %s", step, steps_total, "  ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        stop = stopping.update(step, metrics, model)
        trained_since[0] = time.perf_counter()
        return stop

    model.train()
    for o in opts:
        o.zero_grad(set_to_none=True)
    data_s = [0.0]
    while step < steps_total and not stopped:
        for batch in _timed(batches(epoch), data_s):
            if micro % cfg.grad_accum == 0:
                timer.start()
                step_loss = 0.0
            curve.batch(batch)
            batch = {k: _to(v, device) for k, v in batch.items()}
            with autocast():
                loss = model(**batch).loss / cfg.grad_accum
            scaler.scale(loss).backward()
            if track:
                step_loss = step_loss + loss.detach().float()
            micro += 1
            if micro % cfg.grad_accum:
                continue
            for o in optimizers:
                if o.max_grad_norm:
                    scaler.unscale_(o.optimizer)  # clip the true gradients, not the scaled ones
                    torch.nn.utils.clip_grad_norm_(o.params, o.max_grad_norm)
            lrs = TrainLog.rates(*opts)  # the rates this step uses; the schedules' step sets the next ones
            if optimizer_step(opts, scaler):
                for o in optimizers:
                    o.schedule.step()
            else:
                skipped += 1
            for o in opts:
                o.zero_grad(set_to_none=True)
            step += 1
            timer.stop()
            bar.update(1, loss=step_loss)
            curve.step(step, step_loss, lrs, **{"train/epoch": micro / max(1, n_batches)})
            if on_step:
                on_step(step, step_loss)
            if evaluate is not None and (step % eval_every == 0 or step == steps_total):
                stopped = run_eval()
            if stopped or step >= steps_total:
                break
        epoch += 1
    bar.close()
    if skipped:
        log.info("fp16: %d of %d steps skipped on overflowing gradients (loss scale now %g)", skipped, step,
                 scaler.get_scale())
    if stopping is not None:
        if not history or history[-1]["step"] != step:
            run_eval()
        stopping.restore(model)
    best, best_step = (stopping.best, stopping.best_step) if stopping is not None else ({}, step)
    return FitResult(best=best, best_step=best_step, steps=step, epochs=micro / max(1, n_batches),
                     train_s=timer.total_s, step_ms=timer.median_ms, stopped_early=stopped, history=history,
                     skipped_steps=skipped, data_s=data_s[0], step_s=list(timer.times), intervals_s=intervals,
                     test=scored(test) if test is not None else None)


def optimizer_step(optimizers: Sequence[torch.optim.Optimizer], scaler: torch.amp.GradScaler) -> bool:
    """Each optimizer's step through the fp16 loss scaler (one scale update for them all); False when the gradients
    held inf/NaN and the step was skipped (the weights unchanged). The caller then skips its schedule steps too, as
    transformers' Trainer does: a schedule counts the updates that happened."""
    if not scaler.is_enabled():
        for opt in optimizers:
            opt.step()
        return True
    before = scaler.get_scale()
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()  # halves the scale after an overflow, grows it after a run of clean steps
    return scaler.get_scale() >= before


def _to(value, device: torch.device):
    """A batch value on `device`: a tensor, each tensor of a list (one per source model), anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, (list, tuple)):
        return [_to(v, device) for v in value]
    return value


def _timed(batches: Iterable[dict], acc: list[float]):
    """Yield from `batches`, adding the time each takes to produce to acc[0]."""
    it = iter(batches)
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            return
        acc[0] += time.perf_counter() - t0
        yield batch


def _autocast(device: torch.device, precision: str):
    if precision == "fp32":  # no autocast at all: the loop also runs on devices autocast does not know (meta)
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        raise ValueError(f"unknown precision {precision!r}; valid: fp32, bf16, fp16")
    return lambda: torch.autocast(device.type, dtype=dtype)
