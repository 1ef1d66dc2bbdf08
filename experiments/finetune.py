"""method=finetune: Full fine-tuning of encoder + task head (every weight trains), through the shared recipe."""
from __future__ import annotations

from omegaconf import DictConfig

from experiments import hooks, recipe
from experiments.context import RunContext


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    tok, model, splits = recipe.prepare(cfg)
    # e.g. pema.enabled: E' for E, over every split the model reads (dev too: it chooses the checkpoint)
    features = {"train": splits.train, "eval": splits.evals, **({"dev": splits.dev} if splits.dev is not None else {})}
    attached = hooks.attach(cfg, ctx, model, tok, features)
    metrics = recipe.finetune(cfg, ctx, tok, model, splits)
    return {**metrics, **hooks.finish(attached, model, ctx.device)}  # e.g. E' merged back into the full matrix
