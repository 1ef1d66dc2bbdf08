"""The banded window kernel equals the paper-code masked-dense attention (values, gradients); dense at wide windows."""
import pytest
import torch

from eat.attention import banded_attention, dense_attention, masked_attention, window_mask

W = 16  # the paper's ±16


def _rows(B, T, L, seed, pad=True):
    """Rows as pruning leaves them: positions a random increasing subset of 0..L-1 keeping 0; some rows end padded."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.zeros(B, T, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        n = T if (b == 0 or not pad) else int(torch.randint(1, T + 1, (1,), generator=g))
        rest = torch.randperm(L - 1, generator=g)[: n - 1].sort().values + 1
        pos[b, :n] = torch.cat([torch.zeros(1, dtype=torch.long), rest])
        pos[b, n:] = int(torch.randint(0, L, (1,), generator=g))  # padding positions are arbitrary
        valid[b, :n] = True
    return pos, valid


def _qkv(B, H, T, dh, seed, dtype=torch.float64, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, dh, generator=g, dtype=dtype).requires_grad_(grad) for _ in range(3)]


def _close(a, b, valid, tol=1e-5):
    """Compare valid query rows (padded query rows may hold anything finite)."""
    m = valid[:, None, :, None].expand_as(a)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert (a - b).abs()[m].max().item() <= tol


def test_window_mask_is_the_paper_code_rule():
    pos = torch.tensor([[0, 3, 4, 20, 36, 37, 0]])
    valid = torch.tensor([[True] * 6 + [False]])
    m = window_mask(pos, valid, W)[0]
    ref = torch.zeros(7, 7, dtype=torch.bool)
    for i in range(6):
        for j in range(6):
            ref[i, j] = abs(int(pos[0, i]) - int(pos[0, j])) <= W or i == 0 or j == 0
    assert torch.equal(m, ref)
    # |20-4| = |36-20| = 16 in (inclusive), |20-3| = |37-20| = 17 out; [CLS] row and column always in
    assert m[3, 2] and m[3, 4] and not m[3, 1] and not m[3, 5] and m[5, 0] and m[0, 5] and not m[6].any()


@pytest.mark.parametrize("T", [5, 17, 33, 34, 100, 257])
@pytest.mark.parametrize("method", ["auto", "chunked"])
def test_banded_equals_masked_window(T, method):
    pos, valid = _rows(3, T, L=3 * T, seed=T)
    q, k, v = _qkv(3, 2, T, 8, seed=T + 1)
    ref = masked_attention(q, k, v, window_mask(pos, valid, W))
    _close(banded_attention(q, k, v, pos, valid, W, method=method), ref, valid)


@pytest.mark.parametrize("chunk", [1, 7, 32, 64])
def test_banded_does_not_depend_on_chunk(chunk):
    pos, valid = _rows(2, 150, L=400, seed=3)
    q, k, v = _qkv(2, 3, 150, 16, seed=4, dtype=torch.float32)
    ref = masked_attention(q, k, v, window_mask(pos, valid, W))
    _close(banded_attention(q, k, v, pos, valid, W, method="chunked", chunk=chunk), ref, valid)


@pytest.mark.parametrize("window", [0, 1, 5])
def test_small_windows_with_contiguous_positions(window):
    T = 70
    pos, valid = _rows(2, T, L=T, seed=5, pad=False)  # unpruned: positions 0..T-1
    assert torch.equal(pos[0], torch.arange(T))
    q, k, v = _qkv(2, 2, T, 8, seed=6)
    ref = masked_attention(q, k, v, window_mask(pos, valid, window))
    _close(banded_attention(q, k, v, pos, valid, window, method="chunked"), ref, valid)


@pytest.mark.parametrize("T", [17, 100])
def test_window_covering_the_row_equals_dense(T):
    pos, valid = _rows(3, T, L=T + 10, seed=7)
    q, k, v = _qkv(3, 2, T, 8, seed=8)
    dense = dense_attention(q, k, v, valid)
    for method in ("auto", "chunked", "masked"):
        _close(banded_attention(q, k, v, pos, valid, T + 10, method=method), dense, valid)


def test_gradients_match_masked():
    T = 90
    pos, valid = _rows(2, T, L=200, seed=9)
    ins_b, ins_m = _qkv(2, 2, T, 8, seed=10, grad=True), _qkv(2, 2, T, 8, seed=10, grad=True)
    g = torch.randn(2, 2, T, 8, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    g = g * valid[:, None, :, None]  # the model ignores padded query rows
    (banded_attention(*ins_b, pos, valid, W, method="chunked") * g).sum().backward()
    (masked_attention(*ins_m, window_mask(pos, valid, W)) * g).sum().backward()
    for a, b in zip(ins_b, ins_m):
        assert torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0
        assert (a.grad - b.grad).abs().max().item() <= 1e-5


def test_padded_rows_are_finite_in_fp32():
    T = 80
    pos, valid = _rows(4, T, L=300, seed=12)
    valid[1, 1:] = False  # a row of [CLS] only
    q, k, v = _qkv(4, 2, T, 8, seed=13, dtype=torch.float32)
    for out in (masked_attention(q, k, v, window_mask(pos, valid, W)), dense_attention(q, k, v, valid),
                banded_attention(q, k, v, pos, valid, W, method="chunked")):
        assert torch.isfinite(out).all()


def test_bf16_runs_and_agrees():
    T = 120
    pos, valid = _rows(2, T, L=300, seed=18)
    q, k, v = _qkv(2, 2, T, 16, seed=19, dtype=torch.bfloat16)
    out = banded_attention(q, k, v, pos, valid, W, method="chunked")
    assert out.dtype == torch.bfloat16
    _close(out.float(), masked_attention(q, k, v, window_mask(pos, valid, W)).float(), valid, tol=3e-2)


def test_dropout_only_when_asked():
    T = 60
    pos, valid = _rows(1, T, L=100, seed=14, pad=False)
    q, k, v = _qkv(1, 2, T, 8, seed=15, dtype=torch.float32)
    base = banded_attention(q, k, v, pos, valid, W, method="chunked")
    torch.manual_seed(0)
    dropped = banded_attention(q, k, v, pos, valid, W, dropout_p=0.5, method="chunked")
    assert torch.isfinite(dropped).all() and not torch.allclose(base, dropped)


def test_bad_inputs_raise_clear_errors():
    pos, valid = _rows(2, 10, L=20, seed=16)
    q, k, v = _qkv(2, 2, 10, 8, seed=17, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"q must be a float tensor \(B, H, T, dh\)"):
        dense_attention(q[0], k, v, valid)
    with pytest.raises(ValueError, match="q must be a float tensor"):
        dense_attention(q.long(), k, v, valid)
    with pytest.raises(ValueError, match="share shape and dtype"):
        dense_attention(q, k.double(), v, valid)
    with pytest.raises(ValueError, match="valid must be torch.bool"):
        dense_attention(q, k, v, valid.long())
    with pytest.raises(ValueError, match=r"pos must be torch.int64 of shape \(2, 10\)"):
        banded_attention(q, k, v, pos[:, :5], valid, W)
    with pytest.raises(ValueError, match=r"mask must be torch.bool of shape \(2, 10, 10\)"):
        masked_attention(q, k, v, window_mask(pos, valid, W)[:, :5])
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        banded_attention(q, k, v, pos, valid, -1)
    with pytest.raises(ValueError, match="method='flex' is not one of"):
        banded_attention(q, k, v, pos, valid, W, method="flex")
    with pytest.raises(ValueError, match="window_mask: pos must be long"):
        window_mask(pos.float(), valid, W)
