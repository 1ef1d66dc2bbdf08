"""Training options: a paper's change to how any fine-tuning method trains (PEMA's partial embedding matrix), attached
without the shared layer knowing the paper. A paper package registers an option in `experiments.registry.OPTIONS`
(its config schema and its hook as lazy "module:attr" strings); a method lists the options it composes with, and the
runner refuses an enabled option that the method does not list.

The protocol: `hook(cfg, ctx, model, tokenizer, features) -> Attached | None`, called after the model and its
encoded features exist and before the optimizer is built; after training, `Attached.finish(model, device)` returns
the option's metrics (and may change the model back, e.g. merge E' into E).

    attached = hooks.attach(cfg, ctx, model, tok, {"train": train, "eval": evals})
    ... fit(model, ...) ...
    metrics.update(hooks.finish(attached, model, ctx.device))
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from experiments import registry


class Attached(Protocol):
    def finish(self, model: nn.Module, device: torch.device | str) -> dict[str, float]: ...


class Hook(Protocol):
    def __call__(self, cfg: Any, ctx: Any, model: nn.Module, tokenizer: Any, features: dict) -> Attached | None: ...


def enabled(cfg) -> list[str]:
    """The registered options this config switches on (`<option>.enabled=true`)."""
    return [name for name in registry.OPTIONS if (opt := cfg.get(name)) is not None and opt.get("enabled", False)]


def attach(cfg, ctx, model: nn.Module, tokenizer, features: dict) -> list[Attached]:
    """Attach every enabled option, in registry order."""
    out = []
    for name in enabled(cfg):
        attached = registry.option_hook(name)(cfg, ctx, model, tokenizer, features)
        if attached is not None:
            out.append(attached)
    return out


def finish(attached: list[Attached], model: nn.Module, device: torch.device | str) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for a in attached:
        metrics.update(a.finish(model, device))
    return metrics
