"""Vocabulary usage: token counts over tokenized splits, the sub-vocabulary V' a fine-tuning run uses, and the
reductions it buys (paper §3-§6). Plain numpy; no I/O, no Hydra.

Counting follows the official code [R]: `np.bincount(ids, minlength=|V|)` summed over every split, V' = the ids with a
non-zero count in ascending order (so the id map is order-preserving), plus the ids a caller insists on keeping.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


def flat_ids(features, column: str = "input_ids") -> np.ndarray:
    """Every token id of a tokenized split (a `datasets.Dataset` or a list of id lists), as one int64 array."""
    data = getattr(features, "data", None)
    if data is not None and hasattr(data, "column"):  # a datasets.Dataset: read the arrow column without Python lists
        col = data.column(column).combine_chunks()
        if hasattr(col, "flatten"):
            return np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
    rows = features[column] if not isinstance(features, list) else features
    return np.fromiter((i for row in rows for i in row), dtype=np.int64)


def count(ids: Iterable[np.ndarray], size: int) -> np.ndarray:
    """Occurrences of each id in [0, size) summed over id arrays. An id >= size (a tokenizer larger than the embedding
    matrix) is an error: that model could not embed it."""
    counts = np.zeros(size, dtype=np.int64)
    for a in ids:
        a = np.asarray(a, dtype=np.int64)
        if a.size == 0:
            continue
        if a.min() < 0 or a.max() >= size:
            raise ValueError(f"token id {int(a.max()) if a.max() >= size else int(a.min())} is outside the embedding "
                             f"matrix of {size} rows; is the tokenizer the model's own?")
        counts += np.bincount(a, minlength=size)
    return counts


def select(counts: np.ndarray, keep: Iterable[int] = ()) -> np.ndarray:
    """V' as ascending original ids: every id with a non-zero count, plus `keep` (pad and special tokens)."""
    used = counts > 0
    keep = [int(k) for k in keep if k is not None]
    bad = [k for k in keep if not 0 <= k < len(counts)]
    if bad:
        raise ValueError(f"ids to keep {bad} are outside the vocabulary of {len(counts)} rows")
    used[keep] = True
    return np.flatnonzero(used).astype(np.int64)


@dataclass(frozen=True)
class Usage:
    """Fig. 2's two axes for one corpus, plus the vocabulary size (embedding rows)."""
    total: int  # token occurrences
    unique: int  # distinct ids
    rows: int  # |V|

    @property
    def unique_pct(self) -> float:
        return 100.0 * self.unique / self.rows


def usage(counts: np.ndarray) -> Usage:
    return Usage(total=int(counts.sum()), unique=int((counts > 0).sum()), rows=len(counts))


@dataclass(frozen=True)
class Reduction:
    """Paper §5: embedding reduction 100(1 - |V'|/|V|); model reduction 100(|V|-|V'|)d/N (Table 2), and in params
    (Table 3)."""
    rows: int  # |V| (embedding rows, not len(tokenizer): padding rows count as removed [P Table 5])
    used: int  # |V'|
    d: int
    n_params: int  # N: every parameter of the model with its task head

    @property
    def removed(self) -> int:
        return (self.rows - self.used) * self.d

    @property
    def embedding_pct(self) -> float:
        return 100.0 * (1.0 - self.used / self.rows)

    @property
    def model_pct(self) -> float:
        return 100.0 * self.removed / self.n_params


def zero_count(counts: np.ndarray, n_tokens: int) -> np.ndarray:
    """Ids of tokens the tokenizer can produce (id < n_tokens = len(tokenizer)) that never occur (Table 1). Embedding
    rows beyond the tokenizer (padding rows, e.g. DeBERTaV3, e5) are not tokens and are left out."""
    return np.flatnonzero(counts[:n_tokens] == 0).astype(np.int64)
