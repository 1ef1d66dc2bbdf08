"""The layer-k cache: h^k of every encoded example, computed once by the frozen lower model and read back from the
suite's activation store (keyed per example [S], so reshuffled batches hit), plus the batches a
cache-fed model trains and evaluates on. No Hydra; the store's root comes in as an argument."""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from experiments.data import collate, epoch_order
from experiments.store import ActivationStore, LayerStates

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class LayerCache:
    """h^k for `rows` (encoded features with input_ids): batches of right-padded states + mask + the rows' targets.

    in_ram=True copies every entry into memory once (the paper's "cache in RAM", A.5); otherwise each batch reads
    (and crc-verifies) its entries from the memory-mapped shards."""

    def __init__(self, states: LayerStates, k: int, rows: Sequence[dict], pad_id: int, in_ram: bool = False):
        self.states, self.k, self.rows, self.pad_id = states, k, rows, pad_id
        self.ram = [states.layer(k)[i] for i in range(len(rows))] if in_ram else None

    def __len__(self) -> int:
        return len(self.rows)

    def hidden(self, idx: Sequence[int], dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        if self.ram is None:
            return self.states.padded(idx, self.k, dtype=dtype)
        rows = [self.ram[i] for i in idx]
        T = max(r.shape[0] for r in rows)
        x = torch.zeros(len(rows), T, rows[0].shape[1], dtype=dtype)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        for b, r in enumerate(rows):
            x[b, :r.shape[0]] = r
            mask[b, :r.shape[0]] = 1
        return x, mask

    def batch(self, idx: Sequence[int], targets: bool = True) -> dict[str, torch.Tensor]:
        hidden, mask = self.hidden(idx)
        out = {"hidden": hidden, "attention_mask": mask}
        if targets:
            extra = collate([{k: v for k, v in self.rows[i].items() if k not in INPUT_KEYS} for i in idx], self.pad_id)
            out.update(extra)
        return out

    def batches(self, batch_size: int, seed: int, group_by_length: bool = True):
        """(epoch -> batches, batches per epoch), in the same order token-id training would use."""
        order = epoch_order([len(r["input_ids"]) for r in self.rows], batch_size, seed, group_by_length)
        return (lambda epoch: (self.batch(chunk) for chunk in order(epoch))), -(-len(self.rows) // batch_size)

    def eval_inputs(self) -> Callable[[int, int], dict[str, torch.Tensor]]:
        """For experiments.evaluate: (i, j) -> the cached inputs of features i..j-1."""
        return lambda i, j: self.batch(range(i, j), targets=False)


def build(store: ActivationStore, lower: nn.Module, rows: Sequence[dict], k: int, *, tokenizer_key: str,
          max_length: int, batch_size: int, device) -> LayerStates:
    """Compute (only) the missing h^k entries with the lower model and return the store's view over them."""
    examples = [{key: r[key] for key in ("input_ids", "token_type_ids") if key in r} for r in rows]
    return store.hidden_states(lower, examples, [k], tokenizer_key=tokenizer_key, max_length=max_length,
                               batch_size=batch_size, device=device)


def prefetch(batches: Iterable, ahead: int) -> Iterator:
    """Yield `batches` while a thread reads up to `ahead` of them in advance (the paper's prefetcher, A.5)."""
    if ahead <= 0:
        yield from batches
        return
    q: queue.Queue = queue.Queue(maxsize=ahead)
    done = object()

    def work():
        try:
            for b in batches:
                q.put(b)
        except BaseException as e:  # surfaced in the consumer
            q.put(e)
        q.put(done)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    while (item := q.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item
    t.join()
