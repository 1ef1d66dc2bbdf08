"""Progress of long work (training, evaluation, tokenisation, filling the activation store): a tqdm bar on a
terminal, and where stderr is a file or a pipe (a SLURM log, `make` output) a log line at most every INTERVAL_S
seconds. Work that ends before DELAY_S (bar) or INTERVAL_S (lines) shows nothing, so short runs and tests stay quiet.
"""
from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

log = logging.getLogger(__name__)
INTERVAL_S = 30.0  # between two log lines when stderr is not a terminal
DELAY_S = 2.0  # a terminal bar appears only once the work has taken this long
clock = time.monotonic  # (tests replace it)


def _hms(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m:02d}:{s:02d}"


def _fmt(value) -> str:
    value = value.item() if hasattr(value, "item") else value  # a 0-d tensor (a loss still on the device)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class Progress:
    """`update(n, **postfix)` as the work advances, `close()` (or a `with` block) at the end. `enabled=False` shows
    nothing anywhere (train.progress=false)."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", enabled: bool = True,
                 delay_s: float = DELAY_S):
        self.total, self.desc, self.unit = total, desc, unit
        self.tty = enabled and sys.stderr.isatty()
        self.lines = enabled and not self.tty
        self.bar = tqdm(total=total, desc=desc, unit=unit, delay=delay_s, leave=False, disable=not self.tty)
        self.n, self.postfix = 0, {}
        self.start = self.last = clock()
        self.logged = False

    def update(self, n: int = 1, **postfix) -> None:
        self.n += n
        if self.tty:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)
        elif self.lines:
            self.postfix = postfix or self.postfix  # formatted only when a line is due: a tensor syncs once
            now = clock()
            if now - self.last >= INTERVAL_S:
                self.last = now
                self._line(now)

    def _line(self, now: float, done: bool = False) -> None:
        elapsed = now - self.start
        if done:
            where = f"done, {self.n:,} {self.unit}"
        elif self.total:
            left = elapsed * (self.total - self.n) / max(self.n, 1)
            where = f"{self.n:,}/{self.total:,} {self.unit} ({100 * self.n / self.total:.0f}%), ~{_hms(left)} left"
        else:
            where = f"{self.n:,} {self.unit}"
        extra = "".join(f"  {k}={_fmt(v)}" for k, v in self.postfix.items())
        log.info("%s: %s, %s elapsed (%.3g %s/s)%s", self.desc, where, _hms(elapsed), self.n / max(elapsed, 1e-9),
                 self.unit, extra)
        self.logged = True

    def close(self) -> None:
        self.bar.close()
        if self.lines and self.logged:  # a log that said "running" also says when it ended
            self._line(clock(), done=True)
        self.lines = False

    def __reduce__(self):
        """Pickles as a fresh, silent bar of the same work: `datasets.map` hashes the function that updates it to name
        its output (a random name, and a new cache file each time, if the live bar went into the hash)."""
        return Progress, (self.total, self.desc, self.unit, False)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
