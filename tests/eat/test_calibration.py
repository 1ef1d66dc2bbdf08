"""Temperature scaling of the exit head: recovers a known temperature, never raises the dev NLL, stays at 1 on
calibrated data, stays finite on a separable dev set, and applies the paper's ECE > 2% rule."""
import math

import numpy as np
import pytest
import torch

from eat.calibration import T_MIN, apply_temperature, calibrate, fit_temperature, nll
from experiments.metrics import ece


def _sampled(t_true: float, n: int = 20_000, c: int = 3, seed: int = 0, scale: float = 3.0):
    """Logits z and labels drawn from softmax(z / t_true): the NLL-optimal temperature of z is t_true."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, scale, (n, c))
    p = torch.softmax(torch.as_tensor(z / t_true), -1).numpy()
    y = np.minimum((p.cumsum(1) < rng.uniform(size=(n, 1))).sum(1), c - 1)
    return z, y


@pytest.mark.parametrize("t_true", [0.5, 2.0])
def test_recovers_a_known_temperature(t_true):
    z, y = _sampled(t_true)
    t = fit_temperature(z, y)
    assert t == pytest.approx(t_true, rel=0.10)
    assert nll(z, y, t) < nll(z, y, 1.0)


def test_calibrated_logits_keep_t_near_one():
    z, y = _sampled(1.0, seed=3)
    assert fit_temperature(z, y) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("seed", range(4))
def test_never_raises_the_dev_nll(seed):
    rng = np.random.default_rng(seed)
    # random labels (best T is large), a tiny dev set, and sampled data: none may end above T = 1's NLL
    for z, y in [(rng.normal(0, 4, (500, 2)), rng.integers(0, 2, 500)),
                 (rng.normal(0, 1, (7, 3)), rng.integers(0, 3, 7)),
                 _sampled(0.7, n=300, seed=seed)]:
        assert nll(z, y, fit_temperature(z, y)) <= nll(z, y, 1.0) + 1e-12


def test_deterministic_and_float64_for_tensors_of_any_dtype():
    z, y = _sampled(2.0, n=2000, seed=5)
    a = fit_temperature(z, y)
    b = fit_temperature(torch.as_tensor(z, dtype=torch.float32), torch.as_tensor(y))
    assert a == fit_temperature(z, y)  # bit-identical rerun
    assert b == pytest.approx(a, rel=1e-5)  # float32 input is fitted in float64 too


def test_separable_dev_set_gives_the_lower_bound_not_a_blow_up():
    # one class, all correct: the NLL keeps falling as T -> 0, so the fit stops at T_MIN (finite, > 0)
    z = np.stack([np.linspace(0.1, 3.0, 50), np.zeros(50)], 1)
    y = np.zeros(50, dtype=int)
    t = fit_temperature(z, y)
    assert math.isfinite(t) and T_MIN <= t <= T_MIN * 1.01
    assert nll(z, y, t) < nll(z, y, 1.0)


def test_uninformative_logits_keep_t_one():
    # tied logits: softmax is uniform at every T, the NLL is flat, nothing to fit
    assert fit_temperature(np.zeros((10, 3)), np.arange(10) % 3) == 1.0


def test_apply_temperature_keeps_the_array_kind():
    z = torch.tensor([[2.0, -1.0]], dtype=torch.float32)
    out = apply_temperature(z, 2.0)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.tolist() == [[1.0, -0.5]]
    assert apply_temperature([[2.0, -1.0]], 0.5).tolist() == [[4.0, -2.0]]


@pytest.mark.parametrize("logits, labels, message", [
    (np.zeros((3, 2)), [0, 1], "logits has 3 rows but labels has shape (2,)"),
    (np.zeros((3, 1)), [0, 0, 0], "C >= 2 classes"),
    (np.zeros(3), [0, 0, 0], "logits must be (N, C)"),
    (np.zeros((2, 2)), [0, 2], "labels must be class ids in [0, 2)"),
    (np.zeros((2, 2)), [0.5, 1.0], "labels must be integer class ids"),
    ([[np.nan, 0.0]], [0], "NaN/inf"),
    (np.zeros((0, 2)), [], "empty"),
])
def test_bad_input_is_named(logits, labels, message):
    with pytest.raises(ValueError) as e:
        fit_temperature(logits, labels)
    assert message in str(e.value)


@pytest.mark.parametrize("t", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_temperature_is_named(t):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        apply_temperature(np.zeros((1, 2)), t)


def test_calibrate_applies_the_paper_rule():
    over, y = _sampled(2.0, n=5000, seed=7)  # logits twice as sharp as the labels: overconfident, ECE well above 2%
    c = calibrate(over, y)
    assert c.applied and c.ece_before > 0.02 and c.temperature == c.fitted_temperature
    assert c.ece_after < c.ece_before / 3 and c.nll_after < c.nll_before and c.n == 5000
    assert c.ece_before == pytest.approx(ece(torch.softmax(torch.as_tensor(over), -1).numpy(), y))
    ok, y1 = _sampled(1.0, n=20_000, seed=8)  # calibrated: ECE below 2%, T stays 1 though a fit is reported
    c1 = calibrate(ok, y1)
    assert not c1.applied and c1.temperature == 1.0 and c1.ece_before <= 0.02
    assert c1.ece_after == c1.ece_before and c1.fitted_temperature == pytest.approx(1.0, abs=0.05)
    assert set(c1.as_dict()) >= {"temperature", "applied", "ece_before", "ece_after"}
    with pytest.raises(ValueError, match="the paper's 2% is 0.02"):
        calibrate(ok, y1, threshold=2.0)
