"""A small least-recently-used memo for what a sweep in one process should compute once (a frozen model, its
weights' fingerprint, a split's cached features). A value keeps the provenance of its computation: what it read
(experiments.provenance) is noted again for every later run that takes it, so that run's record still names the
assets and tokenizer behind it."""
from __future__ import annotations

from typing import Any, Callable, Hashable

from experiments.provenance import recording


class Memo:
    """The value for a key, computed once; beyond `size` entries the least recently used is dropped (a frozen
    backbone is used by every run, so it stays; a split's features of an earlier configuration go)."""

    def __init__(self, size: int = 8):
        if size < 1:
            raise ValueError(f"Memo(size={size}): keep at least one entry")
        self.size, self._items = size, {}

    def __call__(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key in self._items:
            self._items[key] = self._items.pop(key)  # most recently used last
            self._items[key][1].replay()
        else:
            if len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
            with recording() as reads:
                value = compute()
            self._items[key] = (value, reads)
        return self._items[key][0]

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()


