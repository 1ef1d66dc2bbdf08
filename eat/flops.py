"""Analytic encoder FLOPs of one EAT arm per example: what the paper logs as "normalised FLOPs" and plots as Fig. 3's
"normalised compute" (the official code's flops.py runs fvcore on the unpruned dense model, so it neither sees the
pruning nor counts the attention matmuls [R]). Pure arithmetic on numbers a run record keeps; no I/O.

Convention, stated once: FLOPs = 2 x multiply-adds. Per layer, with n token slots, hidden size d, FFN size d_ff and k
keys per query, the multiply-adds are
    Q, K, V and output projections      4·n·d²
    attention scores + weighted sum     2·n·k·d
    FFN (two matmuls)                   2·n·d·d_ff
k = n with dense attention (also the official code's dense (T, T) window mask: it computes every pair). With the
local window of ±w positions and the global [CLS], k = min(n, 2w + 2): 2w + 1 window keys (the query itself
included) and [CLS], never more keys than there are tokens. The [CLS] row's dense reach is not counted apart.
Each layer counts for the fraction of examples that compute it (early exit), and each classification head, a
Linear(d, C) on one vector (as eat/model.py builds them), for the fraction that evaluates it. Embedding lookups,
LayerNorms, softmax and biases are left out (no matmul).

Token counts are means over examples, so the n·k term of dense attention is E[n]² where the true cost is E[n²]: a
slight undercount when lengths vary; attention is a few per cent of a layer while n is far below 6d (where its 2·n²·d
multiply-adds reach the 12·n·d² of the projections and FFN at d_ff = 4d).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

FLOPS_PER_MAC = 2


@dataclass(frozen=True)
class Layer:
    """How much of one layer an arm computes: the fraction of examples running it and the mean token slots entering
    it over those examples."""
    running: float
    tokens: float


def keys_per_query(n: float, window: int | None) -> float:
    """Keys a query attends to: every token (window None), else 2w + 1 window keys and the global [CLS], at most n."""
    if window is None:
        return n
    return min(n, 2 * window + 2)


def layer_macs(n: float, hidden: int, intermediate: int, window: int | None = None) -> float:
    """Multiply-adds of one encoder layer over n token slots."""
    d, k = hidden, keys_per_query(n, window)
    return 4 * n * d * d + 2 * n * k * d + 2 * n * d * intermediate


def encoder_flops(layers: Sequence[Layer], hidden: int, intermediate: int, window: int | None = None,
                  heads: Sequence[tuple[int, int]] = ()) -> float:
    """FLOPs per example of an encoder whose layer i (1-based, in order) is `layers[i-1]`, plus `heads`: (layer,
    number of outputs) for each classification head, evaluated by the examples that compute that layer."""
    macs = sum(l.running * layer_macs(l.tokens, hidden, intermediate, window) for l in layers)
    for at, n_out in heads:
        if not 1 <= at <= len(layers):
            raise ValueError(f"a head at layer {at} of an encoder with {len(layers)} layers")
        macs += layers[at - 1].running * hidden * n_out
    return FLOPS_PER_MAC * macs


def normalised(arm: float, dense: float) -> float:
    """An arm's FLOPs as a fraction of the dense arm's on the same data."""
    if dense <= 0:
        raise ValueError(f"dense FLOPs {dense} must be positive")
    return arm / dense
