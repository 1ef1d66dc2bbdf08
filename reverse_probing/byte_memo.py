"""A least-recently-used memo bounded by the bytes of the tensors it holds (a sweep's per-source stored states: at
CoNLL-2012 scale one source's training split is 20-25 GB, so a count of entries says nothing about host memory)."""
from __future__ import annotations

import os
from typing import Any, Callable, Hashable

import torch

ENV = "STRATA_MEMO_BYTES"


def nbytes(value: Any) -> int:
    """The bytes of the tensors in `value` (nested lists, tuples and dict values); a view counts its whole storage,
    once per distinct storage."""
    seen: set[int] = set()

    def walk(x) -> int:
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            if storage.data_ptr() in seen and x.device.type != "meta":
                return 0
            seen.add(storage.data_ptr())
            return storage.nbytes()
        if isinstance(x, (list, tuple)):
            return sum(walk(v) for v in x)
        if isinstance(x, dict):
            return sum(walk(v) for v in x.values())
        return 0
    return walk(value)


def default_budget() -> int:
    """$STRATA_MEMO_BYTES when set, else half the host's physical memory (the rest: the run's own model, batches and
    the sources being read)."""
    raw = os.environ.get(ENV)
    if raw is not None:
        try:
            value = int(float(raw))
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"{ENV}={raw!r}: give a number of bytes >= 0 (e.g. 32e9; 0 keeps nothing between runs)")
        return value
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


class ByteMemo:
    """The value for a key, computed once and kept while the kept values' tensors total at most `max_bytes`: the least
    recently used go first; a value larger than the whole budget is returned and not kept."""

    def __init__(self, max_bytes: int | None = None):
        self.max_bytes = default_budget() if max_bytes is None else max_bytes
        if self.max_bytes < 0:
            raise ValueError(f"ByteMemo(max_bytes={max_bytes}): give a budget >= 0")
        self._items: dict[Hashable, tuple[Any, int]] = {}

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self._items.values())

    def __call__(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key in self._items:
            self._items[key] = self._items.pop(key)  # most recently used last
            return self._items[key][0]
        value = compute()
        size = nbytes(value)
        if size > self.max_bytes:
            return value
        while self._items and self.bytes + size > self.max_bytes:
            self._items.pop(next(iter(self._items)))
        self._items[key] = (value, size)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()
