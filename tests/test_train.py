"""The training loop on a tiny problem: it learns, stops early, restores the best weights, accumulates exactly, and
steps a method's own optimizers as a plain loop would."""

import pytest
import torch
from torch import nn

from experiments.models import HeadOutput
from experiments.optim import linear_schedule
from experiments.train import EarlyStopping, Optimization, TrainLog, fit, total_steps
from tests.helpers.toy_fit import Linear, accuracy, batches, cfg, data


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


def test_early_stopping_waits_for_patience_and_min_steps_and_keeps_the_best_weights():
    model = Linear()
    stop = EarlyStopping("dev/f1", True, patience=2, min_steps=4)
    scores = [0.5, 0.6, 0.6, 0.4, 0.3, 0.7, 0.2, 0.1]  # a tie is no improvement
    decisions = []
    for step, f1 in enumerate(scores, 1):
        with torch.no_grad():
            model.lin.bias.fill_(step)  # the weights name their step
        decisions.append(stop.update(step, {"dev/f1": f1}, model))
    # step 3: 1 bad; step 4: 2 bad and step 4 >= min_steps: stop (a caller stops there; this one goes on)
    assert decisions == [False, False, False, True, True, False, False, True]
    assert stop.best_step == 6 and stop.best == {"dev/f1": 0.7}
    stop.restore(model)
    assert torch.equal(model.lin.bias, torch.full((2,), 6.0))
    lower = EarlyStopping("dev/loss", False, patience=0)  # 0: never stops
    assert not any(lower.update(s, {"dev/loss": float(s)}, model) for s in range(1, 20)) and lower.best_step == 1


def test_fit_does_not_stop_before_min_steps():
    x, y = data()
    fn, n = batches(x, y, 8)  # 8 steps an epoch
    r = fit(Linear(), fn, n, cfg(epochs=10, patience=1), lambda m: {"eval/acc": 0.5}, "eval/acc", True,
            torch.device("cpu"), min_steps=24)
    assert r.stopped_early and r.steps == 24 and r.best_step == 8 and len(r.intervals_s) == 3
    assert all(t > 0 for t in r.intervals_s)


class TwoParts(nn.Module):
    """Two parts with their own optimisation recipes, as a probe's head and aggregator have."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x, labels, sources, scale):
        logits = self.b(torch.relu(self.a(x + sum(sources)))) * scale
        return HeadOutput(logits, nn.functional.cross_entropy(logits, labels))


def recipes(model, total):
    """Adam on one part (no warmup), AdamW with warmup on the other, each clipped to its own norm."""
    adam = torch.optim.Adam(model.b.parameters(), lr=0.05, eps=1e-6)
    adamw = torch.optim.AdamW(model.a.parameters(), lr=0.02, eps=1e-6, weight_decay=0.01)
    return [Optimization(adam, linear_schedule(adam, 0, total), list(model.b.parameters()), 0.5),
            Optimization(adamw, linear_schedule(adamw, 2, total), list(model.a.parameters()), 0.1)]


def test_fit_with_its_own_optimizers_steps_each_as_a_plain_loop_would():
    """Several optimizers, each with its schedule and its own clipping, and batches holding a list of tensors and a
    flag: fit's weights are bit for bit a plain loop's that clips, steps and schedules each optimizer in turn."""
    x, y = data(32)
    extra = [torch.randn(32, 4, generator=torch.Generator().manual_seed(3))]

    def make(epoch):
        return ({"x": x[i:i + 8], "labels": y[i:i + 8], "sources": [e[i:i + 8] for e in extra], "scale": 2.0}
                for i in range(0, 32, 8))
    torch.manual_seed(0)
    ours, plain = TwoParts(), TwoParts()
    plain.load_state_dict(ours.state_dict())
    losses = []
    r = fit(ours, make, 4, cfg(epochs=3, eval_every=100, lr=1.0, max_grad_norm=0.0),
            lambda m: {"eval/acc": 0.0}, "eval/acc", True, torch.device("cpu"), optimizers=recipes(ours, 12),
            on_step=lambda step, loss: losses.append(float(loss)))
    assert r.steps == 12 and len(losses) == 12
    opts, expected = recipes(plain, 12), []
    for epoch in range(3):
        for batch in make(epoch):
            loss = plain(**batch).loss
            for o in opts:
                o.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for o in opts:
                torch.nn.utils.clip_grad_norm_(o.params, o.max_grad_norm)
                o.optimizer.step()
                o.schedule.step()
            expected.append(loss.item())
    assert losses == expected
    for (k, a), b in zip(ours.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), k


def test_fit_without_evaluation_keeps_the_last_weights():
    x, y = data()
    fn, n = batches(x, y, 8)
    model = Linear()
    r = fit(model, fn, n, cfg(epochs=1), None, None, True, torch.device("cpu"), test=lambda m: accuracy(m, x, y))
    assert r.history == [] and r.best == {} and r.best_step == r.steps == 8 and r.intervals_s == []
    assert r.test == accuracy(model, x, y)  # scored at the weights training ended with


def test_train_log_counts_a_batch_by_its_first_tensor():
    """A probe's batch opens with a list of per-source tensors (3 sources here) and holds a flag: its size is the
    first tensor's rows (5 documents)."""
    curve = TrainLog(lambda m, s: None, total_steps=10)
    curve.batch({"sources": [torch.ones(5, 2)] * 3, "spans": torch.ones(5, 2), "gold_mentions": True})
    assert curve.examples == 5
