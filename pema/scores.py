"""method=pema_scores: fine-tuning with and without PEMA in one process, and how far apart the two results are
(Table 10's claim, paper §4: "no effect on task performance").

One run trains both arms from one start: the model is built once (so the task head has one initialisation) and
deep-copied per arm; both arms get the same batches in the same order (one `recipe.token_batches` generator, one
seed) and the same dropout masks (the torch RNG state is restored before each arm). The full arm is exactly what
`method=finetune` computes with this seed; the PEMA arm attaches E' first and merges it back after training. Then:

- `pema/max_abs_dlogit`: the largest |logit difference| over every eval feature and class (token-level heads: every
  position), the two arms at their restored best weights;
- `pema/max_abs_dweight`: the largest |weight difference| over every entry of every state-dict tensor, the merged input
  embedding included (`pema/max_abs_dweight_embedding`: that matrix alone).

The PEMA arm's scores are the record's eval/* (its dev/*, time/*, pema/* too); the full arm's are eval_full/* (and
dev_full/*, time/full_*), its per-example scores per_example["eval_full"]. `method.noise_floor=true` trains the full arm
a second time and records the same two maxima between the two full runs (pema/floor_*): on a GPU whose kernels are
not deterministic, that is the difference that owes nothing to PEMA.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from torch import nn

from experiments import recipe
from experiments.context import RunContext
from experiments.evaluate import forward_logits, token_inputs
from pema.hook import attach
from pema.partial import find_owner, input_embedding

log = logging.getLogger(__name__)


def max_abs_dlogit(a: nn.Module, b: nn.Module, features, pad_id: int, batch_size: int, device) -> float:
    """Largest |logit_a - logit_b| over every feature of `features` and every class (and position)."""
    inputs = token_inputs(features, pad_id)
    was = a.training, b.training
    a.eval(), b.eval()
    with torch.inference_mode():
        la = forward_logits(a, len(features), inputs, batch_size, device)
        lb = forward_logits(b, len(features), inputs, batch_size, device)
    a.train(was[0]), b.train(was[1])
    return max((float(abs(x - y).max()) for x, y in zip(la, lb) if x.size), default=0.0)


def max_abs_dweight(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], only: str | None = None) -> float:
    """Largest |a - b| over every entry of every floating tensor of two state dicts with the same keys and shapes
    (`only`: that key alone)."""
    if a.keys() != b.keys():
        raise ValueError(f"the two arms' state dicts differ in keys: {sorted(a.keys() ^ b.keys())[:6]}")
    worst = 0.0
    for k, x in a.items():
        if (only is None or k == only) and x.is_floating_point():
            y = b[k]
            if x.shape != y.shape:
                raise ValueError(f"{k}: shapes {tuple(x.shape)} and {tuple(y.shape)} differ (PEMA not merged back?)")
            if x.numel():
                worst = max(worst, float((x.double() - y.double()).abs().max()))
    return worst


def embedding_key(model: nn.Module) -> str:
    """The state-dict key of the model's input embedding matrix."""
    weight = input_embedding(find_owner(model)).weight
    return next(n for n, p in model.named_parameters() if p is weight)


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if device.type == "cuda" else None


def _set_rng_state(state) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _as_full(metrics: dict[str, float]) -> dict[str, float]:
    """The full arm's metrics under names of their own: eval/x -> eval_full/x, dev/x -> dev_full/x, time/x ->
    time/full_x, train/x -> train/full_x (params/* are the same in both arms)."""
    out = {}
    for k, v in metrics.items():
        head, _, name = k.partition("/")
        if head in ("eval", "dev"):
            out[f"{head}_full/{name}"] = v
        elif head in ("time", "train"):
            out[f"{head}/full_{name}"] = v
    return out


@dataclass
class Arms:
    full: nn.Module
    pema: nn.Module  # merged back: a full-vocabulary model
    metrics_full: dict[str, float]
    metrics_pema: dict[str, float]
    evals: object  # the encoded eval features both arms were scored on
    pad_id: int
    again: nn.Module | None = None  # the full arm trained a second time (method.noise_floor)


def train_arms(cfg: DictConfig, ctx: RunContext, noise_floor: bool = False) -> Arms:
    """Both arms from one built model, one batch order and one RNG state (see the module docstring)."""
    tok, template, splits = recipe.prepare(cfg)
    recipe.record_samples(cfg, ctx, splits)
    batches, n_batches = recipe.token_batches(cfg, ctx, splits.train, tok.pad_token_id)
    start = _rng_state(ctx.device)
    features = {"train": splits.train, "eval": splits.evals, **({"dev": splits.dev} if splits.dev is not None else {})}

    def train_arm(pema: bool) -> tuple[nn.Module, dict[str, float]]:
        model = copy.deepcopy(template)
        attached = attach(cfg.pema, model, tok, features, ctx.output_dir) if pema else None
        _set_rng_state(start)  # the same dropout masks in every arm
        metrics = recipe.fit_and_score(cfg, ctx, model, splits, batches, n_batches, tok.pad_token_id)
        if attached is not None:
            metrics.update(attached.finish(model, ctx.device))  # E' merged back: a full-vocabulary model again
        return model, metrics

    full, m_full = train_arm(False)
    hist_full, pe_full = ctx.extra.pop("history", None), ctx.per_example.pop("eval", None)
    again = None
    if noise_floor:
        again, _ = train_arm(False)
        ctx.extra.pop("history", None), ctx.per_example.pop("eval", None)
    part, m_pema = train_arm(True)
    ctx.extra["history_full"] = hist_full
    if pe_full is not None:
        ctx.per_example["eval_full"] = pe_full
    return Arms(full, part, m_full, m_pema, splits.evals, tok.pad_token_id, again)


@contextlib.contextmanager
def deterministic(on: bool):
    """Deterministic kernels for the run (warn where an op has none); cuBLAS reads its workspace setting when its
    handle is created, i.e. at the run's first matmul on the GPU."""
    if not on:
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    with deterministic(cfg.method.deterministic):
        return _run(cfg, ctx)


def _run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    a = train_arms(cfg, ctx, cfg.method.noise_floor)
    bs = cfg.hardware.eval_batch_size
    sd_full, sd_pema = a.full.state_dict(), a.pema.state_dict()
    out = {**a.metrics_pema, **_as_full(a.metrics_full),
           "pema/max_abs_dlogit": max_abs_dlogit(a.full, a.pema, a.evals, a.pad_id, bs, ctx.device),
           "pema/max_abs_dweight": max_abs_dweight(sd_full, sd_pema),
           "pema/max_abs_dweight_embedding": max_abs_dweight(sd_full, sd_pema, only=embedding_key(a.pema))}
    if a.again is not None:
        out["pema/floor_max_abs_dlogit"] = max_abs_dlogit(a.full, a.again, a.evals, a.pad_id, bs, ctx.device)
        out["pema/floor_max_abs_dweight"] = max_abs_dweight(sd_full, a.again.state_dict())
    ctx.extra["pema_scores"] = {
        "arms": "full (eval_full/*) and PEMA (eval/*) from one built model, one batch order, one RNG state",
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(), "device": ctx.device_name}
    log.info("pema_scores: max |Δ logit| %.3g, max |Δ weight| %.3g", out["pema/max_abs_dlogit"],
             out["pema/max_abs_dweight"])
    return out
