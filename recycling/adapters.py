"""Houlsby bottleneck adapters for BERT-style blocks, placed as the paper's code places them (OpenDelta 0.4
`AdapterModel` [R]): one on the output of each block's attention sublayer and one on the output
of its feed-forward sublayer, h <- h + f(h W_down) W_up. Written by hand: peft has no Houlsby adapter."""
from __future__ import annotations

import torch
from torch import nn
from transformers.activations import ACT2FN


class Adapter(nn.Module):
    """h + f(h W_down + b) W_up + b'. W_up starts at zero, so an adapted model starts as the pretrained one."""

    def __init__(self, d: int, bottleneck: int, act: str = "gelu_new"):
        super().__init__()
        if act not in ACT2FN:
            raise ValueError(f"unknown adapter activation {act!r}; valid: {', '.join(sorted(ACT2FN))}")
        self.down, self.up, self.act = nn.Linear(d, bottleneck), nn.Linear(bottleneck, d), ACT2FN[act]
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.up(self.act(self.down(h)))


def _after(module: nn.Module, _inputs, output):
    # BertAttention returns (states, attention weights); BertOutput returns the states
    if isinstance(output, tuple):
        return (module.adapter(output[0]), *output[1:])
    return module.adapter(output)


def add_adapters(layers: nn.ModuleList, d: int, bottleneck: int, act: str = "gelu_new") -> list[nn.Module]:
    """Put an adapter after the attention and after the feed-forward sublayer of every block in `layers`
    (registered as `<block>.attention.adapter` / `<block>.output.adapter`, the names the paper's code freezes by).
    Returns the adapters."""
    added = []
    for block in layers:
        for sub in ("attention", "output"):
            host = getattr(block, sub, None)
            if host is None:
                raise TypeError(f"{type(block).__name__} has no `{sub}` sublayer: adapters are written for BERT-style "
                                "blocks (bert, roberta, xlm-roberta)")
            if hasattr(host, "adapter"):
                raise ValueError(f"{type(block).__name__}.{sub} already has an adapter")
            host.adapter = Adapter(d, bottleneck, act)
            host.register_forward_hook(_after)
            added.append(host.adapter)
    return added
