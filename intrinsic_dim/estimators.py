"""Intrinsic-dimension estimators on a point cloud X (N x D): TwoNN (Facco et al. 2017) exactly as the paper's
official code computes it, and the MLE of Levina & Bickel (2004) used as the paper's sanity check (App. F).

Both share one batched torch nearest-neighbour search: distances come from the Gram matrix of the centred data in
row chunks (so N=5000, D=4096 never holds more than `chunk_bytes` of distances at once, on CPU or GPU), `topk`
picks the neighbours of each row, and the distances of the chosen neighbours are then recomputed directly as
||x_i - x_j|| in float64, so r1, r2 (and the MLE's T_j) carry no Gram-matrix cancellation error and exact
duplicates give exactly r1 = 0.

Duplicate points (identical prompts give identical states) make r1 = 0 and mu = r2/r1 infinite; by default they
are removed first (one copy kept) and counted. With `dedup=False` the official behaviour is kept instead: r1 = 0 is
replaced by 1e-10 (and counted).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

R1_FLOOR = 1e-10  # official code: r1[r1 == 0] = 1e-10 (calculate_id.py)


class TooFewPoints(ValueError):
    """Not enough distinct points for the estimator (e.g. the embedding layer, where every prompt's last token is
    the same newline token and so the same vector)."""


@dataclass
class IDResult:
    """One estimate with what went into it."""

    value: float
    n_points: int  # points used (after deduplication)
    n_duplicates: int  # points dropped as exact duplicates (dedup=True) or with r1 = 0 floored (dedup=False)


def _as_tensor(X, device=None) -> torch.Tensor:
    if isinstance(X, np.ndarray):
        X = torch.from_numpy(np.ascontiguousarray(X))
    elif not isinstance(X, torch.Tensor):
        raise TypeError(f"X must be a numpy array or a torch tensor of shape (N, D), got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, D); got shape {tuple(X.shape)}")
    if not torch.is_floating_point(X):
        X = X.to(torch.float64)
    if not bool(torch.isfinite(X).all()):
        raise ValueError("X contains NaN or inf; clean the hidden states before estimating their dimension")
    device = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else X.device)
    return X.to(device=device, dtype=torch.float64)


def deduplicate(X: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Exact duplicate rows removed (first copy kept, original order); returns (rows, number dropped)."""
    uniq, inverse = torch.unique(X, dim=0, return_inverse=True)
    if len(uniq) == len(X):
        return X, 0
    first = torch.full((len(uniq),), len(X), dtype=torch.long, device=X.device)
    first.scatter_reduce_(0, inverse, torch.arange(len(X), device=X.device), reduce="amin")
    return X[first.sort().values], len(X) - len(uniq)


def nearest_neighbours(X: torch.Tensor, k: int, chunk_bytes: int = 1 << 28, margin: int = 8,
                       exact_bytes: int = 1 << 22) -> tuple[torch.Tensor, torch.Tensor]:
    """(distances, indices) of every row's k nearest other rows, ascending; distances exact (float64).

    The candidate search takes the k + `margin` nearest by squared distance from the Gram matrix of the centred
    data in float32 (row chunks of at most `chunk_bytes`; half the cost of float64); their distances are then
    recomputed in float64 directly from the coordinates and the k nearest kept, so a rounding-level near-tie in the
    Gram matrix cannot swap a neighbour out. The recompute gathers candidates in blocks of `exact_bytes`, small
    enough to stay in cache (one gather of every row's candidates at once is memory-bound and costs twice the
    Gram product)."""
    N, D = X.shape
    if not 1 <= k < N:
        raise ValueError(f"need 1 <= k < N; got k={k}, N={N}")
    m = min(N - 1, k + margin)
    Xc = X - X.mean(0, keepdim=True)  # distances are translation-invariant; centring shrinks the Gram error
    Xs = Xc.to(torch.float32)  # candidates only: exact distances come from Xc below
    sq = (Xs * Xs).sum(1)
    dist = torch.empty(N, k, dtype=torch.float64, device=X.device)
    idx = torch.empty(N, k, dtype=torch.long, device=X.device)
    rows = max(1, min(N, chunk_bytes // (4 * N)))
    block = max(1, exact_bytes // (8 * m * D))
    for s in range(0, N, rows):
        e = min(N, s + rows)
        d2 = torch.addmm(sq[None, :], Xs[s:e], Xs.T, beta=1.0, alpha=-2.0)  # (rows, N): |y|^2 - 2 x.y
        d2.add_(sq[s:e, None])
        d2[torch.arange(e - s, device=X.device), torch.arange(s, e, device=X.device)] = math.inf  # not itself
        cand = d2.topk(m, dim=1, largest=False, sorted=False).indices  # (rows, m)
        del d2
        for b in range(s, e, block):
            c = cand[b - s:min(e, b + block) - s]
            diff = Xc[c]  # (block, m, D)
            diff.sub_(Xc[b:b + len(c), None, :])
            exact, order = torch.linalg.vector_norm(diff, dim=2).sort(dim=1)
            dist[b:b + len(c)] = exact[:, :k]
            idx[b:b + len(c)] = c.gather(1, order[:, :k])
    return dist, idx


def _neighbours(X, k: int, dedup: bool, device) -> tuple[torch.Tensor, int, int]:
    """Distances to the k nearest neighbours, the number of points behind them and of exact duplicates. With
    `dedup`, duplicates are dropped (first copy kept) only when the search finds a zero distance, which an exact
    duplicate gives (its copy is a float32 candidate unless more than `margin` other points tie with it to float32
    rounding): distinct data pays no `torch.unique`."""
    X = _as_tensor(X, device)
    if X.shape[0] <= k:
        raise TooFewPoints(f"need more than {k} points; got {X.shape[0]}")
    dist, _ = nearest_neighbours(X, k)
    n_zero = int((dist[:, 0] == 0).sum())
    if not (dedup and n_zero):
        return dist, X.shape[0], n_zero
    X, n_dup = deduplicate(X)
    if X.shape[0] <= k:
        raise TooFewPoints(f"need more than {k} distinct points; got {X.shape[0]} after dropping {n_dup} duplicates")
    return nearest_neighbours(X, k)[0], X.shape[0], n_dup


def twonn_from_distances(r1: torch.Tensor, r2: torch.Tensor, discard_fraction: float = 0.1) -> float:
    """The official fit: mu = r2/r1 sorted, F = i/N, keep the int(N(1-f)) smallest mu, least squares through the
    origin of log(1-F) on log(mu); ID = -slope."""
    N = r1.shape[0]
    mu = (r2 / r1).sort().values
    n_keep = int(N * (1 - discard_fraction))
    if n_keep < 2:
        raise ValueError(f"TwoNN keeps {n_keep} of {N} points after discarding {discard_fraction:.0%}; need >= 2")
    F = torch.arange(1, n_keep + 1, dtype=torch.float64, device=mu.device) / N
    x = torch.log(mu[:n_keep])
    y = -torch.log1p(-F)
    return float((x * y).sum() / (x * x).sum())


def twonn_detail(X, discard_fraction: float = 0.1, dedup: bool = True, device=None) -> IDResult:
    """TwoNN with the number of points used and of duplicates dropped (or floored)."""
    if not 0.0 <= discard_fraction < 1.0:
        raise ValueError(f"discard_fraction must be in [0, 1); got {discard_fraction}")
    try:
        dist, n, n_dup = _neighbours(X, 2, dedup, device)
    except TooFewPoints as e:
        raise TooFewPoints(f"TwoNN needs at least 3 distinct points: {e}") from None
    r1, r2 = dist[:, 0].clone(), dist[:, 1]
    r1[r1 == 0] = R1_FLOOR  # only without dedup: the official floor
    return IDResult(twonn_from_distances(r1, r2, discard_fraction), n, n_dup)


def twonn(X, discard_fraction: float = 0.1, dedup: bool = True, device=None) -> float:
    """TwoNN intrinsic dimension of X (N x D, numpy or torch), computed in float64 (see the module docstring)."""
    return twonn_detail(X, discard_fraction, dedup, device).value


def mle_detail(X, k: int = 50, dedup: bool = True, device=None) -> IDResult:
    """Levina-Bickel MLE: per point 1 / mean_{j<k} log(T_k / T_j) over its k nearest neighbours, averaged."""
    if k < 2:
        raise ValueError(f"MLE needs k >= 2 neighbours; got k={k}")
    try:
        T, n, n_dup = _neighbours(X, k, dedup, device)
    except TooFewPoints as e:
        raise TooFewPoints(f"MLE with k={k} {e} (lower k)") from None
    if not dedup and n_dup:
        raise ValueError(f"{n_dup} points have a duplicate (zero distance); MLE is undefined, use dedup=True")
    logs = torch.log(T[:, -1:] / T[:, :-1])  # (N, k-1)
    per_point = 1.0 / logs.mean(1)
    return IDResult(float(per_point.mean()), n, n_dup)


def mle(X, k: int = 50, dedup: bool = True, device=None) -> float:
    """Levina-Bickel MLE intrinsic dimension of X (N x D), neighbourhood k, per-point estimates averaged."""
    return mle_detail(X, k, dedup, device).value


def bootstrap(X, estimator, n: int = 100, seed: int = 0, level: float = 0.95, device=None,
              **kwargs) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of `estimator(X_resampled, **kwargs)` over points (ours; the paper
    reports none). Resampling with replacement creates duplicates, so the estimators' dedup drops the repeats: each
    replicate is the estimate on the distinct points drawn (~63% of N)."""
    if n < 2:
        raise ValueError(f"bootstrap needs n >= 2 replicates; got {n}")
    X = _as_tensor(X, device)
    g = torch.Generator().manual_seed(seed)
    vals = []
    for _ in range(n):
        idx = torch.randint(0, X.shape[0], (X.shape[0],), generator=g).to(X.device)
        vals.append(estimator(X[idx], dedup=True, **kwargs))
    lo, hi = np.quantile(vals, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)
