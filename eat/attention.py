"""Attention kernels for EAT: dense, the paper-code masked-dense window, and a banded window whose cost is linear in T.

Spec: ../shared/papers/eat.md §1.3, §5. All take per-head tensors q, k, v of shape (B, H, T, dh); the softmax scale is
1/sqrt(dh) (BERT). Rows may have been shortened by physical token pruning, so each row carries the ORIGINAL positions
``pos`` (B, T) of its surviving tokens: strictly increasing over the valid slots, slot 0 = [CLS] (position 0), padding
at the end (``valid`` False). Outputs of padded query rows are finite but meaningless.

The window rule [R] (official code): key j is visible to query i iff both are valid and
(|pos_i - pos_j| <= window or i == 0 or j == 0), i.e. i-16 … i+16 inclusive (33 keys with self) plus global [CLS].

``banded_attention`` computes the same result in O(T·(window + chunk)): positions are distinct increasing integers, so
every key within ±window original positions of query i lies within ±window slots of i. Query blocks of ``chunk`` slots
attend to one overlapping key span of chunk + 2·window slots (a strided ``unfold`` view, one batched matmul; Longformer's
sliding chunks with a single span instead of three blocks), masked by |Δpos| <= window and validity (keys further than
±window slots have |Δpos| > window, as positions strictly increase);
slot 0 is left out of the local span and added back once as a global key for every query; row 0 ([CLS]) attends to all
valid keys densely (O(T)). Positions that do not strictly increase over the valid slots break the equivalence.

Measured (this 2-core CPU machine, shared; torch 2.13 CPU; forward only, B=1, H=4, dh=64, window=16, median ms of
interleaved repeats; log-log slope from T=512 to 4096):

    threads  T:     512    1024   2048   4096   slope
    1  dense        2.6    9.3    35.3   141    1.92
    1  banded       1.0    2.0     4.0   8.5    1.03
    2  dense        1.6    5.2    18.8   81     1.89
    2  banded       0.95   1.7     3.3   7.1    0.97

Alternatives measured against the chunked kernel at the same settings (1 thread, T=512 / 4096):
  - chunk size: 16 → 1.15 / 9.9 ms, 32 → 1.0 / 8.5 ms, 64 → 1.2 / 10.7 ms; 32 is the default.
  - gathered neighbours (unfold the 2w+1 slots around each query, einsum over the strided view): 1.9 / 16 ms, exact
    but ~2× slower (the einsum copies the (T, 33, dh) gather and multiplies 1×dh by dh×33 per query); not kept.
  - ``torch.nn.attention.flex_attention`` with a block mask: eager mode materialises the full T×T score matrix (dense
    cost); ``torch.compile`` on CPU: 9.5 / 140+ ms incl. ``create_block_mask`` per call (it evaluates the mask over
    T² and must be rebuilt for every batch since positions change), kernel alone ~3 / 25 ms; slower than chunked, and
    no dropout; not kept.
Short rows: when one key span covers the whole row (T <= chunk + 2·window) ``method="auto"`` uses the masked-dense
path (same mask, one fused SDPA call): equal up to float rounding (<= 1e-6 in fp32).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

METHODS = ("auto", "chunked", "masked")
CHUNK = 32  # query block of the banded kernel; 16 and 64 measured slower (docstring)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos=None, valid=None, mask=None) -> None:
    """Shapes and dtypes, before any work: q/k/v (B, H, T, dh) float, pos (B, T) long, valid (B, T) / mask (B, T, T) bool."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point():
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"attention: {name} must be a float tensor (B, H, T, dh); got {got}")
    if k.shape != q.shape or v.shape != q.shape or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"attention: q, k, v must share shape and dtype; got q {tuple(q.shape)} {q.dtype}, "
                         f"k {tuple(k.shape)} {k.dtype}, v {tuple(v.shape)} {v.dtype}")
    B, _, T, _ = q.shape
    for name, t, shape, dtype in (("pos", pos, (B, T), torch.long), ("valid", valid, (B, T), torch.bool),
                                  ("mask", mask, (B, T, T), torch.bool)):
        if t is not None and (tuple(t.shape) != shape or t.dtype != dtype):
            raise ValueError(f"attention: {name} must be {dtype} of shape {shape} (from q's B={B}, T={T}); "
                             f"got {t.dtype} {tuple(t.shape)}")


def _check_window(window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"attention: window must be an int >= 0 (original positions each side); got {window!r}")


def dense_attention(q, k, v, valid, dropout_p: float = 0.0) -> torch.Tensor:
    """Full attention over the valid keys (SDPA). Every row sees [CLS] (slot 0), so no row is fully masked."""
    _check(q, k, v, valid=valid)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :], dropout_p=dropout_p)


def window_mask(pos: torch.Tensor, valid: torch.Tensor, window: int) -> torch.Tensor:
    """The paper-code mask (B, T, T): j visible to i iff both valid and (|pos_i - pos_j| <= window or i == 0 or j == 0).

    Vectorised; the official code built the same mask with a Python loop over positions.
    """
    _check_window(window)
    if pos.dim() != 2 or pos.dtype != torch.long or valid.shape != pos.shape or valid.dtype != torch.bool:
        raise ValueError(f"window_mask: pos must be long (B, T) and valid bool of the same shape; got pos {pos.dtype} "
                         f"{tuple(pos.shape)}, valid {valid.dtype} {tuple(valid.shape)}")
    mask = (pos[:, :, None] - pos[:, None, :]).abs() <= window
    mask[:, 0, :] = True
    mask[:, :, 0] = True
    return mask & valid[:, :, None] & valid[:, None, :]


def masked_attention(q, k, v, mask, dropout_p: float = 0.0) -> torch.Tensor:
    """Dense O(T²) attention under a (B, T, T) boolean mask: the paper-code window (``window_mask``).

    Query rows with no visible key (padded queries) attend to every key instead, so they stay finite (never NaN).
    """
    _check(q, k, v, mask=mask)
    mask = mask | ~mask.any(-1, keepdim=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], dropout_p=dropout_p)


def _chunked(q, k, v, pos, valid, window: int, chunk: int, dropout_p: float) -> torch.Tensor:
    B, H, T, dh = q.shape
    w = min(window, T - 1)  # slot reach: positions are distinct integers, so no key is further than T-1 slots
    nb = -(-T // chunk)
    pad = nb * chunk - T
    span = chunk + 2 * w
    q0, q = q[:, :, :1], q * (1.0 / math.sqrt(dh))
    # local keys: slot 0 is taken out (it comes back once as the global key), as are padded slots
    kvalid = valid.clone()
    kvalid[:, 0] = False
    kvalid = F.pad(kvalid, (w, pad + w)).unfold(1, span, chunk)  # (B, nb, span)
    kpos = F.pad(pos, (w, pad + w)).unfold(1, span, chunk)  # (B, nb, span)
    qpos = F.pad(pos, (0, pad)).view(B, nb, chunk)
    local = ((qpos[..., None] - kpos[:, :, None, :]).abs() <= window) & kvalid[:, :, None, :]  # (B, nb, chunk, span)

    qb = F.pad(q, (0, 0, 0, pad)).view(B, H, nb, chunk, dh)
    kb = F.pad(k, (0, 0, w, pad + w)).unfold(2, span, chunk)  # (B, H, nb, dh, span), a strided view
    vb = F.pad(v, (0, 0, w, pad + w)).unfold(2, span, chunk).transpose(-1, -2)  # (B, H, nb, span, dh)
    scores = (qb @ kb).masked_fill(~local[:, None], float("-inf"))
    cls = (qb @ k[:, :, None, 0, :, None])  # (B, H, nb, chunk, 1): the global [CLS] key, never masked
    low = q.dtype in (torch.float16, torch.bfloat16)  # softmax in fp32 for half inputs, as SDPA does
    p = torch.cat([cls, scores], -1).softmax(-1, dtype=torch.float32 if low else None).to(q.dtype)
    if dropout_p > 0:
        p = F.dropout(p, dropout_p)
    out = p[..., 1:] @ vb + p[..., :1] * v[:, :, None, :1, :]
    out = out.reshape(B, H, nb * chunk, dh)[:, :, 1:T]
    # row 0 ([CLS]) sees every valid key: one dense row, O(T)
    row0 = F.scaled_dot_product_attention(q0, k, v, attn_mask=valid[:, None, None, :], dropout_p=dropout_p)
    return torch.cat([row0, out], 2)


def banded_attention(q, k, v, pos, valid, window: int, dropout_p: float = 0.0, method: str = "auto",
                     chunk: int = CHUNK) -> torch.Tensor:
    """``masked_attention(q, k, v, window_mask(pos, valid, window))`` at a cost linear in T (module docstring).

    method: "chunked" (the banded kernel), "masked" (dense with the window mask) or "auto" (masked when one key span
    of chunk + 2·window slots already covers the row, where the fused dense call is cheaper; chunked otherwise).
    """
    _check(q, k, v, pos=pos, valid=valid)
    _check_window(window)
    if method not in METHODS:
        raise ValueError(f"banded_attention: method={method!r} is not one of {METHODS}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"banded_attention: chunk must be an int >= 1 (query block size); got {chunk!r}")
    T = q.shape[2]
    if method == "masked" or (method == "auto" and T <= chunk + 2 * window):
        return masked_attention(q, k, v, window_mask(pos, valid, window), dropout_p)
    return _chunked(q, k, v, pos, valid, window, chunk, dropout_p)
