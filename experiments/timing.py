"""Timing helpers: ratios measured in one process, never absolute times compared across runs.

Benchmarks interleave baseline and method (A B C A B C ...) after a warm-up, take medians of repeats, and
put `device_name()` next to every number, so machine drift (thermal, other tenants, page cache) hits all
contenders alike and a table never mixes hardware.
"""
from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

Clock = Callable[[], float]


def _device(device: Any) -> torch.device:
    return torch.device(device) if device is not None else torch.device("cpu")


def device_name(device: Any = None) -> str:
    """A human-readable device string for timing tables, e.g. 'cpu: AMD EPYC 7B13, 2 threads'."""
    dev = _device(device)
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(dev)}"
    if dev.type != "cpu":
        return dev.type
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    n = torch.get_num_threads()
    return f"cpu: {model}, {n} thread{'' if n == 1 else 's'}"


def sync(device: Any = None) -> None:
    """Wait for queued kernels, so a timer measures the work and not just its launch."""
    dev = _device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def interleaved(
    fns: dict[str, Callable[[], object]],
    repeats: int = 7,
    warmup: int = 1,
    device: Any = None,
    clock: Clock = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per call of each fn: `warmup` untimed rounds, then `repeats` rounds of one call each, in turn.

    Within a round the fns run in dict order (A B C A B C ...), so slow drift of the machine spreads over all
    of them instead of biasing whichever ran last.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
            sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            t0 = clock()
            fn()
            sync(device)
            times[name].append(clock() - t0)
    return times


def summarize(times: dict[str, list[float]], baseline: str) -> dict[str, dict[str, float]]:
    """Per name: median_s, min_s, max_s, n and speedup_vs_baseline.

    speedup_vs_baseline = median(times[baseline]) / median(times[name]): above 1 means faster than the
    baseline (the baseline itself is 1.0). The recycling paper's "speedup %" is (this - 1) * 100.
    """
    if baseline not in times:
        raise KeyError(f"baseline {baseline!r} not among {sorted(times)}")
    base = statistics.median(times[baseline])
    out = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        out[name] = {
            "median_s": med,
            "min_s": min(ts),
            "max_s": max(ts),
            "n": len(ts),
            "speedup_vs_baseline": base / med if med > 0 else float("inf"),
        }
    return out


class StepTimer:
    """Accumulates per-step durations; use `with timer:` or `timer.start()` / `timer.stop()`.

    Syncs the device at both ends of a step, so asynchronous CUDA work is counted in the step that queued it.
    `clock` is injectable so tests need no sleeping.
    """

    def __init__(self, device: Any = None, clock: Clock = time.perf_counter):
        self.device = device
        self.clock = clock
        self.times: list[float] = []
        self._t0: float | None = None

    def start(self) -> None:
        if self._t0 is not None:
            raise RuntimeError("StepTimer.start() called twice without stop()")
        sync(self.device)
        self._t0 = self.clock()

    def stop(self) -> float:
        if self._t0 is None:
            raise RuntimeError("StepTimer.stop() called without start()")
        sync(self.device)
        dt = self.clock() - self._t0
        self._t0 = None
        self.times.append(dt)
        return dt

    def __enter__(self) -> StepTimer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        self.times.clear()
        self._t0 = None

    def __len__(self) -> int:
        return len(self.times)

    @property
    def total_s(self) -> float:
        return sum(self.times)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3 if self.times else float("nan")
