"""Temperature scaling of the exit head (the paper's §7.2; Guo et al., 2017): one scalar T > 0 divides the exit logits,
fitted on dev by the NLL of softmax(logits / T). The paper gives no optimiser or split [P]; we fit log T with LBFGS in
float64 on dev logits [S]. The paper applies T only when the dev ECE (15 bins) exceeds 2% (`calibrate`).

log T is bounded to [-log T_MAX, log T_MAX] through tanh, so T > 0 by construction and the fit stays finite when the
NLL has no interior minimum: on a dev set the head gets entirely right, sharper is always better and T goes to
T_MIN = 1 / T_MAX (every example then becomes confident enough to exit). Plain torch/numpy: no Hydra, no I/O.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from experiments.metrics import class_scores, ece

T_MAX = 100.0
T_MIN = 1.0 / T_MAX
ECE_THRESHOLD = 0.02  # the paper's "if ECE > 2%" (§7.2)


def _as_tensors(logits, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (N, C) logits and int64 (N,) labels on the CPU, checked before any work."""
    z, y = class_scores(logits, labels, "logits")
    return torch.from_numpy(z), torch.from_numpy(y)


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return t


def nll(logits, labels, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of the labels under softmax(logits / temperature), in float64."""
    z, y = _as_tensors(logits, labels)
    return float(F.cross_entropy(z / _check_temperature(temperature), y))


def fit_temperature(logits, labels, max_iter: int = 200) -> float:
    """The T in [T_MIN, T_MAX] minimising the dev NLL of softmax(logits / T); deterministic (float64 LBFGS on the
    CPU from T = 1). Never worse than no scaling: if the fit does not lower the NLL below T = 1's, returns 1.0."""
    z, y = _as_tensors(logits, labels)
    bound = math.log(T_MAX)
    u = torch.zeros((), dtype=torch.float64, requires_grad=True)  # log T = bound * tanh(u); u = 0 is T = 1
    opt = torch.optim.LBFGS([u], lr=1.0, max_iter=max_iter, tolerance_grad=1e-12, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(z * torch.exp(-bound * torch.tanh(u)), y)
        loss.backward()
        return loss

    opt.step(closure)
    t = math.exp(bound * math.tanh(float(u.detach())))
    with torch.no_grad():
        better = F.cross_entropy(z / t, y) < F.cross_entropy(z, y)
    return t if better else 1.0


def apply_temperature(logits, temperature: float):
    """logits / T, as the same kind of array it was given (a torch tensor stays one, on its device and dtype)."""
    t = _check_temperature(temperature)
    if isinstance(logits, torch.Tensor):
        return logits / t
    return np.asarray(logits, dtype=np.float64) / t


def _probs(z: torch.Tensor, t: float) -> np.ndarray:
    return torch.softmax(z / t, dim=-1).numpy()


@dataclass(frozen=True)
class Calibration:
    """The exit head's calibration on dev: ECE (fraction) and NLL before and after, the temperature in use (1.0 when
    not applied) and the fitted one (reported even when the rule keeps T = 1)."""
    temperature: float
    applied: bool
    fitted_temperature: float
    ece_before: float
    ece_after: float
    nll_before: float
    nll_after: float
    n: int

    def as_dict(self) -> dict:
        return asdict(self)


def calibrate(logits, labels, threshold: float = ECE_THRESHOLD, n_bins: int = 15) -> Calibration:
    """The paper's rule (§7.2): fit T on these (dev) logits and use it only if their ECE exceeds `threshold`.
    ECE after is measured on the same dev data the T was fitted on (as the paper does); report the eval split's ECE
    separately through `apply_temperature` and `experiments.metrics.ece`."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold is an ECE as a fraction in [0, 1] (the paper's 2% is 0.02), got {threshold!r}")
    z, y = _as_tensors(logits, labels)
    labels_np = y.numpy()
    before = ece(_probs(z, 1.0), labels_np, n_bins)
    fitted = fit_temperature(z, y)
    t = fitted if before > threshold else 1.0
    return Calibration(temperature=t, applied=before > threshold, fitted_temperature=fitted, ece_before=before,
                       ece_after=ece(_probs(z, t), labels_np, n_bins), nll_before=nll(z, y), nll_after=nll(z, y, t),
                       n=len(y))
