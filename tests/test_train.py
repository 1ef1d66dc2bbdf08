"""The fine-tuning loop on a tiny problem: it learns, stops early, restores the best weights, accumulates exactly."""
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from experiments.models import HeadOutput
from experiments.train import TrainLog, fit, total_steps


def cfg(**kw):
    base = dict(lr=0.05, weight_decay=0.0, epochs=1.0, max_steps=-1, warmup_ratio=0.0, grad_accum=1,
                max_grad_norm=0.0, eval_every=0, patience=0, progress=False)
    return SimpleNamespace(**{**base, **kw})


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x, labels):
        logits = self.lin(x)
        return HeadOutput(logits, nn.functional.cross_entropy(logits, labels))


def data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long()


def batches(x, y, bs):
    return (lambda epoch: ({"x": x[i:i + bs], "labels": y[i:i + bs]} for i in range(0, len(x), bs))), len(x) // bs


def accuracy(model, x, y):
    return {"eval/acc": (model(x, y).logits.argmax(1) == y).float().mean().item()}


def test_fit_learns_a_separable_problem():
    torch.manual_seed(0)
    x, y = data()
    model = Linear()
    fn, n = batches(x, y, 8)
    r = fit(model, fn, n, cfg(epochs=5), lambda m: accuracy(m, x, y), "eval/acc", True, torch.device("cpu"))
    assert r.best["eval/acc"] >= 0.95 and r.steps == 40 and len(r.history) == 5
    assert r.step_ms > 0 and r.train_s > 0


def test_early_stopping_restores_the_best_weights():
    torch.manual_seed(0)
    x, y = data()
    model = Linear()
    fn, n = batches(x, y, 8)
    scores = iter([0.5, 0.9, 0.8, 0.7, 0.6, 0.95])
    snapshots = []

    def evaluate(m):
        snapshots.append({k: v.clone() for k, v in m.state_dict().items()})
        return {"eval/acc": next(scores)}
    r = fit(model, fn, n, cfg(epochs=10, eval_every=1, patience=3), evaluate, "eval/acc", True, torch.device("cpu"))
    assert r.stopped_early and r.steps == 5 and r.best_step == 2 and r.best["eval/acc"] == 0.9
    for k, v in model.state_dict().items():
        assert torch.equal(v, snapshots[1][k])


def test_lower_is_better_objective():
    x, y = data()
    fn, n = batches(x, y, 8)
    losses = iter([3.0, 1.0, 2.0])
    r = fit(Linear(), fn, n, cfg(max_steps=3, eval_every=1), lambda m: {"eval/loss": next(losses)}, "eval/loss",
            False, torch.device("cpu"))
    assert r.best_step == 2


def test_grad_accumulation_equals_one_big_batch():
    x, y = data(16)
    torch.manual_seed(1)
    a = Linear()
    b = Linear()
    b.load_state_dict(a.state_dict())
    ev = lambda m: {"eval/acc": 0.0}  # noqa: E731
    fa, na = batches(x, y, 4)
    fit(a, fa, na, cfg(max_steps=2, grad_accum=2), ev, "eval/acc", True, torch.device("cpu"))
    fb, nb = batches(x, y, 8)
    fit(b, fb, nb, cfg(max_steps=2), ev, "eval/acc", True, torch.device("cpu"))
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.allclose(va, vb, atol=1e-6), k


def test_total_steps():
    assert total_steps(10, cfg(epochs=2.5, grad_accum=2)) == 13
    assert total_steps(10, cfg(max_steps=7)) == 7


def test_fit_streams_training_loss_learning_rate_and_throughput():
    """Every step of a short run is a point (about 100 a run): the loss of the step, the rate the schedule gave it
    (warmup over 2 of 8 steps, then linear decay), examples/s; evaluations still reach on_eval."""
    torch.manual_seed(0)
    x, y = data()
    model = Linear()
    first = nn.functional.cross_entropy(model.lin(x[:8]), y[:8]).item()  # step 1's loss, before any update
    fn, n = batches(x, y, 8)
    points, evals = [], []
    fit(model, fn, n, cfg(warmup_ratio=0.25), lambda m: accuracy(m, x, y), "eval/acc", True, torch.device("cpu"),
        on_eval=lambda s, m: evals.append(s), log_metrics=lambda m, s: points.append((s, m)))
    assert [s for s, _ in points] == list(range(1, 9)) and evals == [8]
    factors = [1 / 3, 2 / 3, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6]
    assert [m["train/lr"] for _, m in points] == pytest.approx([0.05 * f for f in factors])
    assert points[0][1]["train/loss"] == pytest.approx(first, rel=1e-5)
    assert all(m["train/examples_per_s"] > 0 and "train/tokens_per_s" not in m for _, m in points)
    assert points[-1][1]["train/epoch"] == 1.0
    assert "train/lr_1" not in points[0][1]  # the bias group differs in weight decay only


def test_train_log_averages_the_loss_between_points_and_counts_tokens():
    points = []
    curve = TrainLog(lambda m, s: points.append((s, m)), total_steps=1000)
    assert curve.every == 10
    for step in range(1, 21):
        curve.batch({"input_ids": torch.ones(4, 5), "attention_mask": torch.tensor([[1] * 5] * 3 + [[1, 1, 0, 0, 0]])})
        curve.step(step, float(step), [1e-3, 2e-3])
    assert [s for s, _ in points] == [10, 20]
    assert points[0][1]["train/loss"] == pytest.approx(5.5) and points[1][1]["train/loss"] == pytest.approx(15.5)
    assert points[1][1]["train/lr_1"] == 2e-3
    m = points[1][1]
    assert m["train/tokens_per_s"] / m["train/examples_per_s"] == pytest.approx(17 / 4)  # 17 real tokens a batch of 4
    silent = TrainLog(None, total_steps=10)
    silent.batch({"input_ids": torch.ones(2, 3)})
    silent.step(10, torch.tensor(1.0), [1e-3])
    assert silent.examples == 0 and silent.loss is None  # without a logger nothing is even counted


class Scale(nn.Module):
    """loss = sum(w * x): a batch holding inf gives w an inf gradient."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x, labels):
        logits = x * self.w
        return HeadOutput(logits, logits.sum())


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_fp16_skips_a_step_whose_gradient_overflows_and_keeps_the_weights_finite(clip):
    x = torch.ones(3, 4)
    x[1, 0] = float("inf")  # step 2's gradient
    snapshots = []

    def evaluate(m):
        snapshots.append(m.w.detach().clone())
        return {"eval/acc": float(len(snapshots))}  # the last evaluation is the best: its weights are restored
    model = Scale()
    fn = lambda epoch: ({"x": x[i:i + 1], "labels": x[i:i + 1]} for i in range(3))  # noqa: E731
    points = []
    r = fit(model, fn, 3, cfg(max_steps=3, eval_every=1, max_grad_norm=clip, warmup_ratio=1.0), evaluate, "eval/acc",
            True, torch.device("cpu"), precision="fp16", log_metrics=lambda m, s: points.append(m["train/lr"]))
    assert r.steps == 3 and all(torch.isfinite(s).all() for s in snapshots)
    assert r.skipped_steps == 1 and points == pytest.approx([0.05 / 4, 0.05 / 2, 0.05 / 2])  # no schedule step
    assert torch.equal(snapshots[1], snapshots[0])  # the overflowing step changed nothing
    assert not torch.equal(snapshots[2], snapshots[1])  # the next one trains again


def test_fp16_training_follows_fp32_on_a_tiny_model():
    """CPU autocast runs the linear layer in fp16; the scaled loss trains to the weights fp32 reaches, within fp16's
    rounding. (Kernel speed and the scale's growth over thousands of steps only a GPU run shows.)"""
    x, y = data()
    runs = {}
    for precision in ("fp32", "fp16"):
        torch.manual_seed(0)
        model = Linear()
        fn, n = batches(x, y, 8)
        r = fit(model, fn, n, cfg(epochs=3, max_grad_norm=1.0), lambda m: accuracy(m, x, y), "eval/acc", True,
                torch.device("cpu"), precision=precision)
        runs[precision] = (model.lin.weight.detach().clone(), r)
    (w32, r32), (w16, r16) = runs["fp32"], runs["fp16"]
    assert r16.skipped_steps == 0 and r16.steps == r32.steps == 24
    assert torch.allclose(w16, w32, atol=5e-3) and not torch.equal(w16, w32)  # fp16 did run, and stayed close
