"""Attention kernels for EAT: dense, the paper-code masked-dense window, and a banded window whose cost is linear in T.

The paper's pattern [P]: each token sees ±16 positions plus a global [CLS], which sees every token, at a cost O(T·k)
[P §5]; the official code builds it as a dense mask [R]. All take per-head tensors q, k, v of shape (B, H, T, dh);
the softmax scale is 1/sqrt(dh) (BERT). Rows may have been shortened by physical token pruning, so each row carries the
ORIGINAL positions ``pos`` (B, T) of its surviving tokens: strictly increasing over the valid slots, slot 0 = [CLS]
(position 0), padding at the end (``valid`` False). Outputs of padded query rows are finite but meaningless.

The window rule [R] (official code): key j is visible to query i iff both are valid and
(|pos_i - pos_j| <= window or i == 0 or j == 0), i.e. i-16 … i+16 inclusive (33 keys with self) plus global [CLS].

``banded_attention`` computes the same result in O(T·(window + chunk)): positions are distinct increasing integers, so
every key within ±window original positions of query i lies within ±window slots of i. Query blocks of ``chunk`` slots
attend to one overlapping key span of chunk + 2·window slots (a strided ``unfold`` view; the blocks go on SDPA's batch
axis, one fused call; Longformer's sliding chunks with a single span instead of three blocks), masked by
|Δpos| <= window and validity (keys further than ±window slots have |Δpos| > window, as positions strictly increase);
slot 0 is left out of the local span and added back once as a global key for every query; row 0 ([CLS]) attends to all
valid keys densely (O(T)). Positions that do not strictly increase over the valid slots break the equivalence.

Measured by hand (not a test) on the shared 2-core CPU box, torch 2.13 CPU, forward under inference_mode, B=1, H=4,
dh=64, window=16, all tokens valid, median ms of 40 interleaved repeats, two runs (load average ~3):

    1 thread     T=512   1024   2048   4096   log-log slope 512→4096 (run 1 / run 2)
    dense          3.4   13.3   52.6    212   1.99 / 1.98
    banded         1.05   2.5    5.2   10.0   1.07 / 1.11

With 2 threads on that box (load ~3 on 2 cores) the numbers are oversubscription noise, not kernel cost:
dense 6–8 / 15–16 / 57–59 / 220–227 ms, banded 1.4 / 6.1 / 8.5 / 128 ms in one run and 88 / 128 / 125 / 130 ms in the
next (the kernel's ~15 small ops each wait for the second core; dense is a few large ones). Use 1 thread there.

Alternatives, same settings, 1 thread, T=512 / 4096, each beside this kernel in one process:
  - this kernel (chunk 32) 1.2 / 9.8 ms; chunk 16: 1.2 / 10.0; chunk 64: 1.5 / 11.0. The same chunks with an explicit
    matmul-softmax-matmul instead of SDPA: 1.45 / 10.4 (CLS folded into the span) or 2.2 / 12.3 (CLS scored apart).
  - (a) gathered neighbours (unfold the 2w+1 slots around each query, einsum over the strided view): 5.8 / 147 ms
    (dense 3.6 / 208 in that run): the einsum materialises the (T, dh, 33) gather and does 1×dh·dh×33 products.
    Not kept.
  - (c) ``flex_attention`` + ``create_block_mask`` (mask_mod on pos/valid), torch.compile'd on CPU: kernel alone
    5.4 / 47.6 ms, with the block mask rebuilt per call (positions change with every batch and pruning step; the mask
    is evaluated over T²) 17.5 / 310 ms, beside banded 3.0 / 9.9 and dense 4.0 / 212; ~18 s compile; no dropout with a
    mask. Not kept.
  - paper-code ``masked_attention(window_mask(...))``: 4.7 / 892 ms beside dense 3.6 / 429 (a loaded run): slower than
    dense, as it must be: the mask is applied to the whole (T, T) product.
Short rows (H=12, 1 thread): B=1, T=64: masked 0.24 ms vs chunked 0.36; T=128: chunked 0.40–0.61 vs masked 0.49–0.78
(dh 32 / 64); B=32, dh=32: chunked 18.5 / 40.7 / 46.6 ms vs masked 17.2 / 36.2 / 60.4 at T=128 / 192 / 256. So
``method="auto"`` takes the masked-dense path when one key span covers the row (T <= chunk + 2·window = 64); between 64
and ~200 tokens the two are within noise at batch 32. Both paths compute the same mask; they agree to float rounding.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

METHODS = ("auto", "chunked", "masked")
CHUNK = 32  # query block of the banded kernel; 16 measured the same, 64 slower (docstring)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos=None, valid=None, mask=None) -> None:
    """Shapes and dtypes, before any work: q/k/v (B, H, T, dh) float, pos (B, T) long, valid (B, T) and mask bool."""
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
    nb = -(-T // chunk)  # query blocks
    pad = nb * chunk - T
    span = chunk + 2 * w  # local key slots of one block: [block start - w, block end + w)
    # local keys: slot 0 is taken out (it comes first, once, as the global key), as are padded slots
    kvalid = valid.clone()
    kvalid[:, 0] = False
    kvalid = F.pad(kvalid, (w, pad + w)).unfold(1, span, chunk)  # (B, nb, span)
    kpos = F.pad(pos, (w, pad + w)).unfold(1, span, chunk)  # (B, nb, span)
    qpos = F.pad(pos, (0, pad)).view(B, nb, chunk)
    local = ((qpos[..., None] - kpos[:, :, None, :]).abs() <= window) & kvalid[:, :, None, :]
    mask = torch.cat([local.new_ones(B, nb, chunk, 1), local], -1)  # (B, nb, chunk, 1 + span)

    def spans(x):  # (B, H, T, dh) -> (B·nb, H, 1 + span, dh): [CLS] then the block's key span (unfold: a strided view)
        xs = F.pad(x, (0, 0, w, pad + w)).unfold(2, span, chunk).permute(0, 2, 1, 4, 3)  # (B, nb, H, span, dh)
        return torch.cat([x[:, None, :, :1].expand(B, nb, H, 1, dh), xs], -2).reshape(B * nb, H, 1 + span, dh)

    # blocks go to SDPA's batch axis: one fused call, its scale, fp32 softmax for half inputs and dropout
    qb = F.pad(q, (0, 0, 0, pad)).view(B, H, nb, chunk, dh).transpose(1, 2).reshape(B * nb, H, chunk, dh)
    out = F.scaled_dot_product_attention(qb, spans(k), spans(v), attn_mask=mask.view(B * nb, 1, chunk, 1 + span),
                                         dropout_p=dropout_p)
    out = out.view(B, nb, H, chunk, dh).transpose(1, 2).reshape(B, H, nb * chunk, dh)[:, :, 1:T]
    # row 0 ([CLS]) sees every valid key: one dense row, O(T)
    row0 = F.scaled_dot_product_attention(q[:, :, :1], k, v, attn_mask=valid[:, None, None, :], dropout_p=dropout_p)
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
