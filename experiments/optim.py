"""The optimizer and learning-rate schedule of every training loop: AdamW without decay on biases and normalisation
weights, and linear warmup then linear decay to 0. Two warmup conventions exist because two recipes are reproduced:
the suite's trainer never takes a zero-lr step, the HF Trainer (intrinsic_dim's SFT [C]) starts from 0."""
from __future__ import annotations

import math

import torch
from torch import nn


LR_ATTR = "own_lr"  # a parameter carrying this attribute trains at that learning rate, undecayed (`own_lr`)


def own_lr(param: nn.Parameter, lr: float) -> nn.Parameter:
    """Give one parameter its own learning rate (e.g. P-32's λ); the schedule scales it like every other group."""
    setattr(param, LR_ATTR, float(lr))
    return param


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """The trainable parameters in two groups: decayed, and biases + normalisation weights undecayed (BERT's recipe);
    plus one undecayed group per learning rate that parameters set with `own_lr`."""
    decay, no_decay, own = [], [], {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if hasattr(p, LR_ATTR):
            own.setdefault(getattr(p, LR_ATTR), []).append(p)
        else:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0},
            *({"params": ps, "weight_decay": 0.0, "lr": lr} for lr, ps in own.items())]


def adamw(model: nn.Module, lr: float, weight_decay: float, device: torch.device | None = None) -> torch.optim.AdamW:
    """AdamW over `param_groups`. With a cpu/cuda `device` it is the fused kernel (one kernel for all parameters; on a
    2-core CPU ~6x faster than foreach for MiniLM's 22.7M); without one, torch's default implementation."""
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"{type(model).__name__} has no trainable parameters: nothing for the optimizer to update")
    fused = device is not None and torch.device(device).type in ("cpu", "cuda")
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, **({"fused": True} if fused else {}))


def warmup_steps(warmup_ratio: float, total: int, hf: bool = False) -> int:
    """Warmup steps for a ratio of `total`: rounded down (the suite), or up as transformers' TrainingArguments does."""
    if not 0.0 <= warmup_ratio <= 1.0:
        raise ValueError(f"warmup_ratio={warmup_ratio} must lie in [0, 1] (a fraction of the training steps)")
    return math.ceil(total * warmup_ratio) if hf else int(warmup_ratio * total)


def linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, total: int,
                    hf: bool = False) -> torch.optim.lr_scheduler.LambdaLR:
    """lr x factor(step): a linear rise over `warmup` steps, then linear decay to 0 at step `total`.

    The rise is (step + 1) / (warmup + 1) (the suite: the first step already learns), or with hf=True
    step / warmup, transformers.get_linear_schedule_with_warmup exactly (the first step has lr 0)."""
    if total < 1 or not 0 <= warmup <= total:
        raise ValueError(f"schedule needs 0 <= warmup <= total and total >= 1; got warmup={warmup}, total={total}")

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup) if hf else (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
