"""Normalized area under an ID curve (ID against layer index), [P §3].

The paper: NormAUC = (1/L) * sum_{i=1}^{L-1} (ID_i + ID_{i+1}) / 2 over the L transformer layers. The official
code uses sklearn.metrics.auc with x rescaled to [0, 1], i.e. the same trapezoid sum divided by (L - 1). Both drop
the embedding output (hidden_states[0]) by default. The Fig. 4 heatmap uses a third variant (layers 2..L, /L),
`heatmap_difference`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NORMS = ("L", "L_minus_1")


def _trapezoid(y: np.ndarray) -> float:
    return float(((y[1:] + y[:-1]) / 2).sum())


def normalized_auc(ids: Sequence[float], norm: str = "L", include_embedding: bool = False) -> float:
    """`ids` holds one ID per hidden state, index 0 = embedding output (HF `output_hidden_states` order).

    norm="L": the paper's formula, divided by the number of layers on the curve; norm="L_minus_1": the official
    code's (x rescaled to [0, 1]). include_embedding=True keeps index 0 on the curve."""
    if norm not in NORMS:
        raise ValueError(f"auc norm must be one of {NORMS}; got {norm!r}")
    y = np.asarray(ids, dtype=np.float64)
    if not include_embedding:
        y = y[1:]
    if y.ndim != 1 or len(y) < 2:
        raise ValueError(f"need an ID curve with at least 2 layers; got {len(y)} after dropping the embedding")
    L = len(y)
    return _trapezoid(y) / (L if norm == "L" else L - 1)


def heatmap_difference(ids_a: Sequence[float], ids_b: Sequence[float]) -> float:
    """Fig. 4's per-(model, dataset) entry, as the official code computes it: np.trapz(ID_a - ID_b) over layers
    2..L (hidden-state indices 2..L: the embedding and layer 1 both dropped), divided by L."""
    a, b = np.asarray(ids_a, dtype=np.float64), np.asarray(ids_b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"ID curves differ in length: {a.shape} vs {b.shape}")
    L = len(a) - 1
    return _trapezoid((a - b)[2:]) / L
