"""Token-wise aggregation of k frozen source models' embeddings into one [P §3.2].

Every input is one source's features at the same positions, (..., d_i); the output is (..., d). Position-wise: each
token's output depends on that token's k inputs alone, so the head may read any subset of positions (the gold
mentions) and get what the whole document would give there.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from reverse_probing.config import MODES


class Aggregator(nn.Module):
    """mean | sum: no parameters (k = 1: the identity). attention: the official code's form, used for every
    attention run of the paper [R]: a learned constant query q ∈ R^h (the bias of its Linear(d→h): with
    mode_query=constant only the bias reaches the score), per-model keys K_i: Linear(d_i→h), per-model values
    V_i: Linear(d_i→d), α_i(t) = softmax_i(q·K_i h_i(t) / √h), E(t) = Σ_i α_i(t) V_i h_i(t). attention_literal:
    the paper's formula, α_i = softmax_i(w·h_i(t)) with one shared w and no value projection, E = Σ_i α_i h_i
    (equal widths only)."""

    def __init__(self, mode: str, widths: list[int], d: int, key_size: int = 128):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"aggregate={mode!r} is not one of {', '.join(MODES)}")
        if not widths:
            raise ValueError("Aggregator needs at least one source")
        if mode != "attention" and any(w != d for w in widths):
            raise ValueError(f"aggregate={mode} adds the sources' vectors, so every width must be {d}; got {widths} "
                             "(layer concat widens a source: use aggregate=attention, whose value projections map "
                             "it back)")
        self.mode, self.k, self.key_size = mode, len(widths), key_size
        if mode == "attention":
            bound = 1 / math.sqrt(d)  # nn.Linear's bias init, which is what the constant query is in [R]
            self.query = nn.Parameter(torch.empty(key_size).uniform_(-bound, bound))
            self.keys = nn.ModuleList(nn.Linear(w, key_size) for w in widths)
            self.values = nn.ModuleList(nn.Linear(w, d) for w in widths)
        elif mode == "attention_literal":
            self.score = nn.Linear(d, 1)

    def forward(self, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(E, α): E (..., d); α (..., k), the weight of each source per position (None for mean and sum)."""
        if len(inputs) != self.k:
            raise ValueError(f"Aggregator built for {self.k} sources got {len(inputs)}")
        if self.mode == "mean":
            return torch.stack(inputs).mean(0), None
        if self.mode == "sum":
            return torch.stack(inputs).sum(0), None
        if self.mode == "attention":
            scores = torch.stack([key(h) @ self.query for key, h in zip(self.keys, inputs)], -1)
            alpha = torch.softmax(scores / math.sqrt(self.key_size), -1)
            values = torch.stack([v(h) for v, h in zip(self.values, inputs)], -1)  # (..., d, k)
            return (values * alpha.unsqueeze(-2)).sum(-1), alpha
        h = torch.stack(inputs, -1)  # (..., d, k)
        alpha = torch.softmax(self.score(h.transpose(-1, -2)).squeeze(-1), -1)
        return (h * alpha.unsqueeze(-2)).sum(-1), alpha
