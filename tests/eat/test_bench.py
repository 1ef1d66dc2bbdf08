"""eat/bench.py's pieces without a runner: the ablation covers every subset of the three components, the Hugging Face
dense path computes what our loop does, timing seeds are pooled and averaged as the paper averages its runs, and every
timed call goes through the suite's interleaved timer (a fake clock makes the times exact)."""
import numpy as np
import pytest
import torch

from eat import bench
from eat.model import EatModel, Settings
from tests.helpers.eat_inputs import batch, bert


def test_the_ablation_is_every_subset_of_the_three_components():
    s = Settings(tau=0.9)
    arms = bench.ablation(s)
    assert len(arms) == 8 and arms["eat:prune+window+exit"] == s
    assert arms["eat:none"] == s.dense()
    assert arms["eat:exit"].tau == 0.9 and arms["eat:exit"].window is None and arms["eat:exit"].prune_ratio == 0


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_hugging_face_dense_path_equals_ours(pooling):
    m = EatModel(bert(), 3, exit_layer=None, settings=Settings().dense(), pooling=pooling).eval()
    ids, mask = batch()
    with torch.no_grad():
        assert (bench._hf_dense(m)(input_ids=ids, attention_mask=mask) - m(ids, mask).logits).abs().max() <= 1e-5


def test_timing_seeds_are_averaged_as_the_paper_averages_three_runs():
    runs = {0: {"a": np.array([1.0, 2, 3])}, 1: {"a": np.array([4.0, 5, 6])}, 2: {"a": np.array([7.0, 8, 9])}}
    out = {}
    per = bench._seed_means(out, runs)
    assert per["a"]["mean_ms"] == [2.0, 5.0, 8.0] and per["a"]["seeds"] == [0, 1, 2]
    assert out["latency/a_mean_ms"] == 5.0 and out["latency/a_mean_ms_seed_sd"] == pytest.approx(3.0)
    assert bench._pooled(runs)["a"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    rows = [{"i": i} for i in range(50)]
    drawn = bench._seeded(rows, 2, 5, [0, 1, 2])
    assert [sd for sd, _ in drawn] == [0, 1, 2] and all(len(r) == 7 for _, r in drawn)
    assert len({tuple(x["i"] for x in r) for _, r in drawn}) == 3  # each seed its own examples and order
    assert drawn == bench._seeded(rows, 2, 5, [0, 1, 2])  # and reproducibly so


class Ticks:
    """A clock that advances by `step` seconds on every read; the calls it timed, in order."""

    def __init__(self, step: float = 0.5):
        self.t, self.step, self.calls = 0.0, step, []

    def __call__(self) -> float:
        self.t += self.step
        return self.t

    def contender(self, name: str, cost: float = 0.0):
        """A contender whose call takes `cost` seconds on this clock."""
        def fn(b):
            self.calls.append((name, int(b["input_ids"][0, 1])))
            self.t += cost
        return fn


def _rows(n: int) -> list[dict]:
    return [{"input_ids": [2, 10 + i], "attention_mask": [1, 1], "labels": 0} for i in range(n)]


def test_batch_1_latency_times_each_example_through_every_contender_in_turn_after_the_warm_up():
    clock = Ticks()
    contenders = {"a": clock.contender("a", cost=1.0), "b": clock.contender("b", cost=3.0)}
    lat = bench._batch1(contenders, _rows(4), 1, 0, torch.device("cpu"), clock=clock)
    # per example A then B; the warm-up example runs through both but is not timed
    assert clock.calls == [(n, 10 + i) for i in range(4) for n in ("a", "b")]
    assert lat["a"].tolist() == [1.5e3] * 3 and lat["b"].tolist() == [3.5e3] * 3  # cost + one clock step, in ms


def test_throughput_is_the_median_of_interleaved_timed_passes_after_an_untimed_one():
    clock = Ticks(step=0.0)
    contenders = {"a": clock.contender("a", cost=0.25), "b": clock.contender("b", cost=1.0)}
    per_s = bench._throughput(contenders, _rows(6), 4, 2, 0, torch.device("cpu"), clock=clock)
    one_pass = [("a", 10), ("a", 14)], [("b", 10), ("b", 14)]  # 6 rows in batches of 4: two batches per pass
    assert clock.calls == [*one_pass[0], *one_pass[1]] * 3  # the untimed pass, then 2 rounds of a-pass b-pass
    assert per_s == {"a": 6 / 0.5, "b": 6 / 2.0}  # two batches per pass at 0.25 s and 1 s each
