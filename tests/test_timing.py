import pytest
import torch

from experiments.timing import StepTimer, device_name, interleaved, summarize


class FakeClock:
    """Advances only when told to, so timings are exact and nothing sleeps."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_interleaved_runs_in_turn_after_warmup():
    calls = []
    clock = FakeClock()

    def make(name, cost):
        def fn():
            calls.append(name)
            clock.t += cost
        return fn

    times = interleaved({"A": make("A", 2.0), "B": make("B", 1.0)}, repeats=3, warmup=1, clock=clock)
    assert calls == ["A", "B"] * 4  # 1 warm-up round + 3 timed rounds, A B A B ...
    assert times == {"A": [2.0, 2.0, 2.0], "B": [1.0, 1.0, 1.0]}


def test_summarize_math():
    s = summarize({"base": [3.0, 1.0, 2.0], "fast": [0.5, 1.0, 0.25, 4.0]}, baseline="base")
    assert s["base"] == {"median_s": 2.0, "min_s": 1.0, "max_s": 3.0, "n": 3, "speedup_vs_baseline": 1.0}
    assert s["fast"]["median_s"] == 0.75  # even count: mean of the middle two
    assert s["fast"]["min_s"] == 0.25 and s["fast"]["max_s"] == 4.0
    assert s["fast"]["speedup_vs_baseline"] == pytest.approx(2.0 / 0.75)
    with pytest.raises(KeyError):
        summarize({"a": [1.0]}, baseline="b")


def test_step_timer_with_injected_clock():
    clock = FakeClock()
    timer = StepTimer(clock=clock)
    for dt in (0.010, 0.030, 0.020):
        with timer:
            clock.t += dt
    timer.start()
    clock.t += 0.5
    assert timer.stop() == pytest.approx(0.5)
    assert len(timer) == 4
    assert timer.total_s == pytest.approx(0.56)
    assert timer.median_ms == pytest.approx(25.0)
    with pytest.raises(RuntimeError):
        timer.stop()
    timer.reset()
    assert len(timer) == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_device_name_cpu_names_the_processor_and_the_thread_count_in_use(threads):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        name = device_name("cpu")
        assert device_name(torch.device("cpu")) == name
    finally:
        torch.set_num_threads(before)
    suffix = ", 1 thread" if threads == 1 else f", {threads} threads"  # not "1 threads"
    assert name.startswith("cpu: ") and name.endswith(suffix) and name[len("cpu: "):-len(suffix)].strip()
