"""Intrinsic-dimension estimators on a point cloud X (N x D): TwoNN (Facco et al. 2017) exactly as the paper's
official code computes it, and the MLE of Levina & Bickel (2004) used as the paper's sanity check (App. F).

Both share one batched torch nearest-neighbour search: candidates come from the float32 Gram matrix of the centred
data (whole, or in row chunks of at most `chunk_bytes`, on CPU or GPU), their distances are recomputed directly as
||x_i - x_j|| in float64, and a rigorous bound on the float32 error certifies per row that no other point can be
nearer (what it cannot exclude is searched exactly). So the neighbours are the exact float64 ones however wide the
cloud is next to its neighbour distances, r1, r2 (and the MLE's T_j) carry no Gram-matrix cancellation error, and
exact duplicates give exactly r1 = 0.

Duplicate points (identical prompts give identical states) make r1 = 0 and mu = r2/r1 infinite; by default they
are removed first (one copy kept) and counted. With `dedup=False` the official behaviour is kept instead: r1 = 0 is
replaced by 1e-10 (and counted).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

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


def _search_precision(D: int, device: torch.device) -> tuple[torch.dtype, float]:
    """dtype of the candidate product and the unit roundoff u it runs at: float32, unless the user let float32
    products run in TF32 or bf16 (torch.set_float32_matmul_precision, torch.backends.*.fp32_precision), which
    makes the error bound useless at D in the hundreds; then float64, certified the same way."""
    backend = torch.backends.cuda.matmul if device.type == "cuda" else torch.backends.mkldnn.matmul
    prec = getattr(backend, "fp32_precision", None)  # torch >= 2.9: "none" (the default) or "ieee" is float32
    ieee = prec in ("none", "ieee") if prec is not None else (
        torch.get_float32_matmul_precision() == "highest"
        and not (device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32))
    u = 2.0 ** -24
    return (torch.float32, u) if ieee and D * u <= 0.01 else (torch.float64, 2.0 ** -53)


@functools.cache
def _blas() -> ThreadpoolController:
    """numpy's BLAS thread pools, found once (~2 ms)."""
    return ThreadpoolController()


def _gram_rows(Xs: torch.Tensor, s: int, e: int, blocks: int = 4) -> torch.Tensor:
    """Xs[s:e] @ Xs.T. The whole matrix (s:e = all rows) is symmetric, so only its upper blocks are multiplied:
    - one CPU thread: numpy's BLAS SYRK, pinned to one thread (half the multiplications of a GEMM; 2000 x 576
      float32: 23 vs 45 ms for torch's GEMM on the reference AMD EPYC);
    - more threads: torch, the upper `blocks` x `blocks` tiles mirrored (62 % of a GEMM's work). A multi-threaded
      numpy SYRK would be faster alone, but its BLAS workers keep spinning after the call and starve torch's own
      pool in the steps that follow: 31 layers x 2000 x 576 on 2 threads ran at 0.92x scikit-dimension that way,
      2.5x this way (intrinsic_dim/README.md)."""
    n = len(Xs)
    if Xs.device.type != "cpu" or (s, e) != (0, n):
        return Xs[s:e] @ Xs.T
    if torch.get_num_threads() == 1:
        x = Xs.numpy()
        with _blas().limit(limits=1, user_api="blas"):
            return torch.from_numpy(x @ x.T)
    out = torch.empty(n, n, dtype=Xs.dtype)
    edges = [n * i // blocks for i in range(blocks + 1)]
    for i in range(blocks):
        rows = slice(edges[i], edges[i + 1])
        for j in range(i, blocks):
            cols = slice(edges[j], edges[j + 1])
            out[rows, cols] = tile = Xs[rows] @ Xs[cols].T
            if j != i:
                out[cols, rows] = tile.T
    return out


def _exact_distances(X: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, block_bytes: int) -> torch.Tensor:
    """||X[rows[r]] - X[cols[r, c]]|| in float64 from the coordinates (no Gram cancellation), shape of `cols`,
    gathered in blocks of `block_bytes` (small enough to stay in cache: one gather of every row's candidates at
    once is memory-bound and costs twice the Gram product)."""
    R, W = cols.shape
    pairs = max(1, block_bytes // (8 * X.shape[1]))
    br, bc = max(1, pairs // W), min(W, pairs)
    out = torch.empty(R, W, dtype=torch.float64, device=X.device)
    for b in range(0, R, br):
        for c in range(0, W, bc):
            diff = X[cols[b:b + br, c:c + bc]]  # (br, bc, D)
            diff.sub_(X[rows[b:b + br], None, :])
            out[b:b + br, c:c + bc] = torch.linalg.vector_norm(diff, dim=2)
    return out


def nearest_neighbours(X: torch.Tensor, k: int, chunk_bytes: int = 1 << 28, margin: int = 2,
                       exact_bytes: int = 1 << 22) -> tuple[torch.Tensor, torch.Tensor]:
    """(distances, indices) of every row's k nearest other rows, ascending: exactly the k smallest float64
    distances ||x_i - x_j|| computed from the coordinates, however wide the cloud is next to its neighbour
    distances (outliers, far clusters, massive activations).

    Candidates: the k + `margin` smallest b_ij = |x_j|^2 - 2 x_i.x_j (the squared distance less the row's constant
    |x_i|^2) from the float32 Gram matrix of the centred data (whole, or in row chunks of at most `chunk_bytes`;
    half the cost of float64); their distances are recomputed in float64 from the coordinates and the k nearest
    kept. b_ij has a rigorous error bound (rounding x and |x_j|^2 to float32, Higham's gamma_D = D u / (1 - D u)
    for a length-D dot product in any summation order, one rounding for the sum; u the unit roundoff):
        |b_ij - (||x_i - x_j||^2 - |x_i|^2)| <= e_ij = c (|x_i| + |x_j|)^2,  c = 1.01 (3 u + gamma_D),
    with the data scaled by a power of two so that |x| < 1 (no float32 overflow; an absolute term covers
    underflow; the 1% covers second-order and float64 terms). So a point j lies no nearer than the row's k-th
    exact candidate distance T_k when b_ij + |x_i|^2 - e_ij >= T_k. A row is certified when that holds for every
    point outside its candidates: first at once, from the largest kept b_ij and e_ij at the largest |x_j|; for
    a row that fails, point by point, and the points still not excluded are searched exactly in float64 for that
    row (all of them at worst). A wide cloud costs time, never a wrong neighbour."""
    N, D = X.shape
    if not 1 <= k < N:
        raise ValueError(f"need 1 <= k < N; got k={k}, N={N}")
    m = min(N - 1, k + margin)
    Xc = X - X.mean(0, keepdim=True)  # distances are translation-invariant; centring shrinks the Gram error
    amax = float(Xc.abs().max())
    scale = math.ldexp(1.0, -math.frexp(amax)[1]) if amax > 0 else 1.0  # a power of two: exact
    Xc.mul_(scale)
    norm = torch.linalg.vector_norm(Xc, dim=1)
    sq = norm * norm
    dtype, u = _search_precision(D, X.device)
    Xs, s_sq = Xc.to(dtype), sq.to(dtype)
    c = 1.01 * (3 * u + D * u / (1 - D * u))
    e_abs = 4 * (D + 1) * torch.finfo(dtype).tiny * torch.finfo(dtype).eps  # underflow to subnormals
    dist = torch.empty(N, k, dtype=torch.float64, device=X.device)
    idx = torch.empty(N, k, dtype=torch.long, device=X.device)
    rows = max(1, min(N, chunk_bytes // (Xs.element_size() * N)))
    for s in range(0, N, rows):
        e = min(N, s + rows)
        r = torch.arange(s, e, device=X.device)
        b = _gram_rows(Xs, s, e)
        b = torch.add(s_sq, b, alpha=-2, out=b)  # (rows, N): |x_j|^2 - 2 x_i.x_j, one rounding
        b[r - s, r] = math.inf  # not itself
        b_m, cand = b.topk(m, dim=1, largest=False, sorted=False)  # (rows, m)
        exact, order = _exact_distances(X, r, cand, exact_bytes).sort(dim=1)
        dist[s:e], idx[s:e] = exact[:, :k], cand.gather(1, order[:, :k])
        if m == N - 1:
            continue  # every other point is a candidate
        # T_k - |x_i|^2, to compare with b_ij - e_ij; the factor covers the rounding of the float64 distances
        t_k = (exact[:, k - 1] * scale) ** 2 * (1 + 4 * (D + 5) * 2.0 ** -53) - sq[s:e]
        outside = b_m.max(1).values.double() - c * (norm[s:e] + norm.max()) ** 2 - e_abs  # <= any non-candidate's
        unsure = ((outside < t_k) & (exact[:, k - 1] > 0)).nonzero()[:, 0]  # T_k = 0 (k duplicates) is certain
        if len(unsure) == 0:
            continue
        lower = b[unsure].double() - c * (norm[s + unsure, None] + norm[None, :]) ** 2 - e_abs
        maybe = lower < t_k[unsure, None]  # itself: inf, never
        maybe.scatter_(1, cand[unsure], False)  # already exact
        for i, row in zip((s + unsure).tolist(), maybe):
            extra = row.nonzero()[:, 0]
            if len(extra):
                cols = torch.cat([idx[i], extra])[None]  # the k kept so far and every point not excluded
                ex, order = _exact_distances(X, torch.tensor([i], device=X.device), cols, exact_bytes).sort(dim=1)
                dist[i], idx[i] = ex[0, :k], cols[0, order[0, :k]]
    return dist, idx


def _neighbours(X, k: int, dedup: bool, device) -> tuple[torch.Tensor, int, int]:
    """Distances to the k nearest neighbours, the number of points behind them and of exact duplicates. With
    `dedup`, duplicates are dropped (first copy kept) only when the search finds a zero distance, which an exact
    duplicate always gives (the search is exact): distinct data pays no `torch.unique`."""
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


def twonn_mu(X, dedup: bool = True, device=None) -> tuple[np.ndarray, int]:
    """Per point mu = r2/r1 (N,), NaN for the dropped copies of a duplicate (dedup) or r1 floored at 1e-10 (the
    official code), and the number of such points: what TwoNN fits, kept per point so prompts can be resampled."""
    X = _as_tensor(X, device)
    N = X.shape[0]
    if N <= 2:
        raise TooFewPoints(f"TwoNN needs at least 3 distinct points; got {N}")
    dist, _ = nearest_neighbours(X, 2)
    zero = dist[:, 0] == 0
    mu = torch.full((N,), float("nan"), dtype=torch.float64, device=X.device)
    if dedup and bool(zero.any()):
        _, inverse = torch.unique(X, dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), N, dtype=torch.long, device=X.device)
        first.scatter_reduce_(0, inverse, torch.arange(N, device=X.device), reduce="amin")
        keep = first.sort().values  # the first copy of every distinct point, in order (as deduplicate)
        if len(keep) <= 2:
            raise TooFewPoints(f"TwoNN needs at least 3 distinct points; got {len(keep)}")
        d, _ = nearest_neighbours(X[keep], 2)
        mu[keep] = d[:, 1] / d[:, 0]
        return mu.cpu().numpy(), N - len(keep)
    r1 = dist[:, 0].clone()
    r1[zero] = R1_FLOOR
    mu[:] = dist[:, 1] / r1
    return mu.cpu().numpy(), int(zero.sum())


def twonn_fit(mu: np.ndarray, discard_fraction: float = 0.1) -> np.ndarray:
    """The official fit (twonn_from_distances) of each row of mu (..., N); NaN entries (dropped duplicates) are not
    points: a row's N is its number of finite values."""
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # mu = 0 (dedup=False triplicates): NaN, as the official
        return _fit(mu, discard_fraction)


def _fit(mu: np.ndarray, discard_fraction: float) -> np.ndarray:
    x = np.log(np.sort(np.where(np.isnan(mu), np.inf, mu), axis=-1))  # dropped points sort last
    n = np.isfinite(x).sum(-1, keepdims=True)
    i = np.arange(1, mu.shape[-1] + 1)
    keep = i <= np.floor(n * (1 - discard_fraction))
    if not keep[..., 1].all():
        raise ValueError(f"TwoNN keeps fewer than 2 points after discarding {discard_fraction:.0%}")
    x = np.where(keep, x, 0.0)
    y = np.where(keep, -np.log1p(-np.minimum(i / n, 1 - 1e-300)), 0.0)
    return (x * y).sum(-1) / (x * x).sum(-1)


def resample_indices(n: int, replicates: int, seed: int = 0) -> np.ndarray:
    """(replicates, n) prompt indices drawn with replacement: the same for every arm with the same n (paired)."""
    return np.random.default_rng(seed).integers(0, n, size=(replicates, n))


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
