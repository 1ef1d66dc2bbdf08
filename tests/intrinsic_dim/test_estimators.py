"""TwoNN and MLE: skdim agreement (also on clouds far wider than their neighbour distances), known dimensions,
duplicates, chunking, errors; the AUC formulas by hand."""
import math
import warnings

import numpy as np
import pytest
import torch

from intrinsic_dim import auc, estimators


def embedded_gaussian(n: int, d: int, D: int = 100, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, d)))
    return rng.standard_normal((n, d)) @ Q.T


def skdim_twonn(X) -> float:
    from skdim.id import TwoNN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(TwoNN(discard_fraction=0.1).fit(X).dimension_)


def skdim_mle(X, k: int) -> float:
    from skdim.id import MLE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(MLE().fit(X, n_neighbors=k, comb="mean").dimension_)  # ours averages per-point estimates


@pytest.mark.parametrize("shape,seed", [((400, 100, 5), 0), ((300, 50, 50), 1), ((257, 576, 12), 2)])
def test_twonn_equals_skdim_in_float64(shape, seed):
    n, D, d = shape
    X = embedded_gaussian(n, d, D, seed) + 1e-3 * np.random.default_rng(seed).standard_normal((n, D))
    ours, ref = estimators.twonn(X), skdim_twonn(X)
    assert abs(ours - ref) / ref <= 1e-10


def test_twonn_float32_input_is_computed_in_float64():
    X = embedded_gaussian(400, 8, 64, 3).astype(np.float32)
    # cast first, then the same float64 computation
    assert estimators.twonn(X) == estimators.twonn(X.astype(np.float64))
    assert abs(estimators.twonn(X) - skdim_twonn(X)) / skdim_twonn(X) < 1e-4  # skdim works in float32 here


def test_torch_and_numpy_inputs_agree():
    X = embedded_gaussian(300, 4, 40, 4)
    assert estimators.twonn(torch.from_numpy(X)) == estimators.twonn(X)
    assert estimators.mle(torch.from_numpy(X).float(), k=20) == \
        pytest.approx(estimators.mle(X.astype(np.float32), k=20), rel=1e-12)


@pytest.mark.parametrize("d", [2, 5, 10])
def test_known_dimensions_within_10_percent(d):
    X = embedded_gaussian(5000, d, 100, d)
    assert estimators.twonn(X) == pytest.approx(d, rel=0.10)
    assert estimators.mle(X, k=50) == pytest.approx(d, rel=0.10)


def test_duplicates_are_dropped_and_counted():
    X = embedded_gaussian(300, 6, 50, 5)
    Xd = np.concatenate([X, X[:7], X[:2]])  # 9 duplicate rows
    r = estimators.twonn_detail(Xd)
    assert r.n_duplicates == 9 and r.n_points == 300
    assert r.value == pytest.approx(estimators.twonn(X), rel=1e-12)
    assert abs(r.value - skdim_twonn(X)) / skdim_twonn(X) <= 1e-10
    assert estimators.mle_detail(Xd, k=20).n_duplicates == 9


def test_without_dedup_the_official_floor_applies():
    X = embedded_gaussian(300, 6, 50, 6)
    Xd = np.concatenate([X, X[:1]])  # one duplicate pair: r1 = 0 for two points
    r = estimators.twonn_detail(Xd, dedup=False)
    assert r.n_duplicates == 2 and math.isfinite(r.value)  # mu = r2 / 1e-10 lands in the discarded 10%
    # the same by hand: floor r1, fit
    dist, _ = estimators.nearest_neighbours(torch.from_numpy(Xd), 2)
    r1 = dist[:, 0].clone()
    r1[r1 == 0] = estimators.R1_FLOOR
    assert r.value == pytest.approx(estimators.twonn_from_distances(r1, dist[:, 1]), rel=1e-12)
    with pytest.raises(ValueError, match="duplicate"):
        estimators.mle(Xd, k=10, dedup=False)


def line_and_far_outlier() -> np.ndarray:
    """Points at i^1.5 on a line plus one at 1e6: centred, every point is ~8e4 from the origin while
    its neighbours are 1-5 away, so float32 Gram rounding (~(8e4)^2 * 6e-8) swamps the neighbour distances."""
    return np.array([[i ** 1.5, 0.0] for i in range(12)] + [[1e6, 0.0]])


def log_radii() -> np.ndarray:
    """300 points in the plane at radii spread over 7 decades (log-uniform): a cloud ~1e7 wide whose inner points
    are ~1 apart."""
    rng = np.random.default_rng(0)
    r, theta = 10 ** rng.uniform(0, 7, 300), rng.uniform(0, 2 * np.pi, 300)
    return np.stack([r * np.cos(theta), r * np.sin(theta)], 1)


def far_clusters() -> np.ndarray:
    """Two tight 3-dim clusters 1000 apart in every coordinate (D=10)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((150, 3)) @ rng.standard_normal((3, 10)) * 0.01
    b = rng.standard_normal((150, 3)) @ rng.standard_normal((3, 10)) + 1000
    return np.concatenate([a, b])


def massive_activations() -> np.ndarray:
    """LLM-like states: a 5-dim manifold in D=64, and on 30% of the points two coordinates ~1e4 times larger than
    the rest (the massive activations of attention-sink tokens), varying by 5%."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 5)) @ rng.standard_normal((5, 64)) / 3 + 0.01 * rng.standard_normal((300, 64))
    hot = rng.random(300) < 0.3
    X[hot, :2] += 1e4 * (1 + 0.05 * rng.standard_normal((hot.sum(), 2)))
    return X


# each of these gave a different estimate before the float32 candidate search was certified (e.g. 3.06 for 4.02)
@pytest.mark.parametrize("X", [line_and_far_outlier(), log_radii(), far_clusters(), massive_activations()],
                         ids=["line_and_far_outlier", "log_radii", "far_clusters", "massive_activations"])
def test_twonn_equals_skdim_on_clouds_wider_than_their_neighbour_distances(X):
    assert abs(estimators.twonn(X) - skdim_twonn(X)) / skdim_twonn(X) <= 1e-10


@pytest.mark.parametrize("X", [log_radii(), far_clusters(), massive_activations()],
                         ids=["log_radii", "far_clusters", "massive_activations"])
def test_mle_equals_skdim_on_clouds_wider_than_their_neighbour_distances(X):
    assert abs(estimators.mle(X, k=20) - skdim_mle(X, 20)) / skdim_mle(X, 20) <= 1e-10


def brute_force(X: torch.Tensor, k: int) -> torch.Tensor:
    d = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist")  # direct differences, no Gram
    return d.fill_diagonal_(math.inf).sort(1).values[:, :k]


@pytest.mark.parametrize("precision", ["highest", "medium"])  # medium: TF32/bf16 allowed -> a float64 search
def test_search_is_exact_on_far_clusters_at_any_matmul_precision(precision):
    X = torch.from_numpy(far_clusters())
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        dist, idx = estimators.nearest_neighbours(X, 20)
        expected = torch.float32 if precision == "highest" else torch.float64
        assert estimators._search_precision(10, X.device)[0] == expected
    finally:
        torch.set_float32_matmul_precision(before)
    assert torch.allclose(dist, brute_force(X, 20), rtol=1e-13, atol=0)
    assert torch.equal(dist, torch.linalg.vector_norm(X[idx] - X[:, None], dim=2))  # indices match distances
    # 7 rows, 100 pairs
    chunked = estimators.nearest_neighbours(X, 20, chunk_bytes=4 * 300 * 7, exact_bytes=8 * 10 * 100)
    assert torch.equal(chunked[0], dist) and torch.equal(chunked[1], idx)


def test_chunked_search_equals_one_block():
    X = torch.from_numpy(embedded_gaussian(500, 7, 30, 7))
    d1, i1 = estimators.nearest_neighbours(X, 5)
    d2, i2 = estimators.nearest_neighbours(X, 5, chunk_bytes=4 * 500 * 3)  # 3 rows per chunk
    # recompute 2 rows (of 7 candidates) at a time
    d3, i3 = estimators.nearest_neighbours(X, 5, exact_bytes=8 * 7 * 30 * 2)
    assert torch.equal(i1, i2) and torch.equal(i1, i3)
    assert torch.equal(d1, d2) and torch.equal(d1, d3)
    brute = torch.cdist(X, X).fill_diagonal_(math.inf).sort(1)
    assert torch.allclose(d1, brute.values[:, :5], rtol=1e-12)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"shape \(N, D\)"):
        estimators.twonn(np.zeros(10))
    with pytest.raises(ValueError, match="NaN"):
        estimators.twonn(np.full((10, 3), np.nan))
    with pytest.raises(estimators.TooFewPoints, match="3 distinct"):
        estimators.twonn(np.ones((50, 4)))
    with pytest.raises(estimators.TooFewPoints, match="lower k"):
        estimators.mle(np.random.default_rng(0).standard_normal((30, 4)), k=50)
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        estimators.twonn([[1.0, 2.0]])
    with pytest.raises(ValueError, match="discard_fraction"):
        estimators.twonn(np.random.default_rng(0).standard_normal((30, 4)), discard_fraction=1.0)


def test_bootstrap_interval_brackets_the_estimate():
    X = embedded_gaussian(400, 5, 40, 8)
    lo, hi = estimators.bootstrap(X, estimators.twonn, n=10, seed=0)
    assert lo < hi and lo < estimators.twonn(X) * 1.15 and hi > estimators.twonn(X) * 0.85


def test_normalized_auc_by_hand():
    ids = [float("nan"), 1.0, 2.0, 3.0, 4.0]  # index 0 = embedding output, dropped by default
    assert auc.normalized_auc(ids, "L") == pytest.approx(7.5 / 4)  # trapezoid 1.5 + 2.5 + 3.5, paper: / L
    assert auc.normalized_auc(ids, "L_minus_1") == pytest.approx(7.5 / 3)  # official code: x rescaled to [0, 1]
    assert auc.normalized_auc([0.0, 1, 2, 3, 4], "L", include_embedding=True) == pytest.approx(8 / 5)
    a, b = [0, 0, 5, 5, 5], [0, 9, 1, 1, 1]  # layers 0 and 1 do not count in Fig. 4's difference
    assert auc.heatmap_difference(a, b) == pytest.approx((4 + 4) / 4)
    with pytest.raises(ValueError, match="auc norm"):
        auc.normalized_auc(ids, "mean")


@pytest.mark.parametrize("threads", [1, 2])
def test_gram_paths_agree_and_give_the_same_estimate(threads):
    """One thread: numpy's SYRK; more: torch's mirrored tiles. Both are exact enough for the certified search, so the
    estimate does not depend on the thread count."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((301, 40)).astype(np.float32)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        G = estimators._gram_rows(torch.from_numpy(X), 0, len(X))
        np.testing.assert_allclose(G.numpy(), X.astype(np.float64) @ X.T.astype(np.float64), rtol=1e-5, atol=1e-4)
        assert torch.equal(G, G.T)
        est = estimators.twonn(X.astype(np.float64))
    finally:
        torch.set_num_threads(before)
    assert est == pytest.approx(estimators.twonn(X.astype(np.float64)), rel=1e-12)


@pytest.mark.parametrize("dedup", [True, False])
def test_per_point_mu_refits_to_twonn_and_resamples_pair_by_prompt(dedup):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 6)) @ rng.normal(size=(6, 50))
    X[[10, 20]] = X[3]  # a triplicate: dropped copies (dedup) or the official r1 floor
    X[30] = X[7]
    mu, n_dup = estimators.twonn_mu(X, dedup=dedup)
    ref = estimators.twonn_detail(X, dedup=dedup)
    assert n_dup == ref.n_duplicates and (int(np.isnan(mu).sum()) == 3) is dedup
    if dedup:
        assert estimators.twonn_fit(mu) == pytest.approx(ref.value, rel=1e-12)
    idx = estimators.resample_indices(400, 300, seed=1)
    # every arm with 400 prompts draws the same ones
    assert (idx == estimators.resample_indices(400, 300, seed=1)).all()
    if dedup:
        reps = estimators.twonn_fit(mu[idx])
        assert reps.shape == (300,) and np.isfinite(reps).all()
        lo, hi = np.percentile(reps, [2.5, 97.5])
        assert lo < ref.value < hi and hi - lo < 0.3 * ref.value  # centred on the estimate, a usable width
