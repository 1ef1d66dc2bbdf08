"""Training and evaluation batches through torch DataLoaders: padding runs in `hardware.num_workers` worker processes
(none: in this one), pinned for a CUDA device, so the accelerator is not kept waiting on Python collation. The batches
and their order are `experiments.data`'s (`epoch_order`, `collate`), whatever the number of workers."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import datasets
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from experiments.data import collate, epoch_order, rows_of

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def loading(hardware, device) -> dict:
    """DataLoader settings of a run: `hardware.num_workers` workers, pinned memory when the device is CUDA."""
    workers = hardware.num_workers
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ValueError(f"hardware.num_workers={workers!r}: give a whole number >= 0 (0 pads in the main process)")
    return {"num_workers": workers, "pin_memory": torch.device(device).type == "cuda"}


class Rows(Dataset):
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


class Pad:
    """collate() with its pad id, as a picklable object (workers may be spawned, not forked)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        return collate(rows, self.pad_id)


class EpochSampler(Sampler):
    """The index batches of `epoch_order` for the epoch last set. The main process draws them, so persistent workers
    see each epoch's new order."""

    def __init__(self, order: Callable[[int], list[list[int]]], n_batches: int):
        self.order, self.n_batches, self.epoch = order, n_batches, 0

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.order(self.epoch))

    def __len__(self) -> int:
        return self.n_batches


def _loader(dataset, num_workers: int, pin_memory: bool, **kw) -> DataLoader:
    return DataLoader(dataset, num_workers=num_workers, pin_memory=pin_memory, persistent_workers=num_workers > 0,
                      **kw)


def train_batches(features: datasets.Dataset, batch_size: int, pad_id: int, seed: int, group_by_length: bool = True,
                  num_workers: int = 0, pin_memory: bool = False):
    """(epoch -> padded batches, batches per epoch): the batches of `epoch_order`, padded by `collate`, from a
    DataLoader (pass `**loading(cfg.hardware, device)`). One epoch is iterated at a time."""
    rows = rows_of(features)
    n_batches = -(-len(rows) // batch_size)
    sampler = EpochSampler(epoch_order([len(r["input_ids"]) for r in rows], batch_size, seed, group_by_length),
                           n_batches)
    loader = _loader(Rows(rows), num_workers, pin_memory, batch_sampler=sampler, collate_fn=Pad(pad_id))

    def epoch_batches(epoch: int):
        sampler.epoch = epoch  # read when the loader's iterator starts, i.e. at the first batch
        yield from loader
    return epoch_batches, n_batches


class Padded:
    """(start, stop) -> collate(rows[start:stop]); picklable, so DataLoader workers can pad."""

    def __init__(self, rows: list[dict], pad_id: int):
        self.rows, self.pad_id = rows, pad_id

    def __call__(self, i: int, j: int) -> dict[str, torch.Tensor]:
        return collate(self.rows[i:j], self.pad_id)


class TokenInputs(Padded):
    """(start, stop) -> the padded model inputs (`INPUTS`) of features[start:stop], and the loaders over them."""

    def __init__(self, features: datasets.Dataset, pad_id: int):
        cols = [c for c in INPUTS if c in features.column_names]
        super().__init__([dict(zip(cols, vals)) for vals in zip(*(features[c] for c in cols))], pad_id)
        self._loaders: dict[tuple, DataLoader] = {}

    def loader(self, batch_size: int, num_workers: int, pin_memory: bool) -> DataLoader:
        """One loader per setting, kept: repeated evaluations reuse its persistent workers, which end with this
        object (the loader reads a `Padded` over the same rows, so no cycle keeps them alive)."""
        key = (batch_size, num_workers, pin_memory)
        if key not in self._loaders:
            self._loaders[key] = eval_batches(Padded(self.rows, self.pad_id), len(self.rows), batch_size,
                                              num_workers, pin_memory)
        return self._loaders[key]


class Spans(Dataset):
    """inputs(i, j) for the span (i, j) a sampler names."""

    def __init__(self, inputs: Callable[[int, int], dict]):
        self.inputs = inputs

    def __getitem__(self, span: tuple[int, int]) -> dict:
        return self.inputs(*span)


def eval_batches(inputs: Callable[[int, int], dict], n: int, batch_size: int, num_workers: int = 0,
                 pin_memory: bool = False) -> DataLoader:
    """inputs(0, b), inputs(b, 2b), ... up to n, in order, from a DataLoader. Only token inputs (`Padded`) go to
    workers and pinned memory: other inputs (cached hidden states, perhaps already on the device) are read here."""
    if not isinstance(inputs, Padded):
        num_workers, pin_memory = 0, False
    spans = [(i, min(n, i + batch_size)) for i in range(0, n, batch_size)]
    return _loader(Spans(inputs), num_workers, pin_memory, sampler=spans, batch_size=None, collate_fn=_as_is)


def _as_is(batch):
    return batch  # not the default's conversion: cached inputs arrive as their producer made them
