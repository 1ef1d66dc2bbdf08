"""experiments/batches.py: the DataLoader path yields the very tensors, in the very order, that the in-process
batching (experiments.data's epoch_order and collate, the padded slices evaluation reads) does, with and without
workers."""
import random

import datasets
import pytest
import torch
from omegaconf import OmegaConf

from experiments import batches, data
from experiments.evaluate import forward_logits
from experiments.models import HeadOutput


def features(n=45, seed=0, labels="token"):
    rng = random.Random(seed)
    lens = [rng.randint(2, 19) for _ in range(n)]
    ids = [[rng.randint(3, 99) for _ in range(t)] for t in lens]
    cols = {"input_ids": ids, "attention_mask": [[1] * t for t in lens], "token_type_ids": [[0] * t for t in lens]}
    cols["labels"] = [[rng.randint(0, 4) for _ in range(t)] for t in lens] if labels == "token" else \
        [rng.randint(0, 1) for _ in range(n)]
    return datasets.Dataset.from_dict(cols)


def in_process(feats, batch_size, pad_id, seed, group):
    """The batching the loaders replace: epoch_order's chunks, padded by collate in this process."""
    rows = data.rows_of(feats)
    order = data.epoch_order([len(r["input_ids"]) for r in rows], batch_size, seed, group)
    return lambda epoch: [data.collate([rows[j] for j in chunk], pad_id) for chunk in order(epoch)]


def same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) and x[k].dtype == y[k].dtype for k in x)


@pytest.mark.parametrize("workers", [0, 2])
def test_train_batches_equal_the_in_process_batches_epoch_after_epoch(workers):
    for seed, group, labels in ((0, True, "token"), (3, False, "class"), (7, True, "class")):
        feats = features(seed=seed, labels=labels)
        old = in_process(feats, 8, 1, seed, group)
        new, n_new = batches.train_batches(feats, 8, 1, seed, group, num_workers=workers)
        assert n_new == 6
        for epoch in range(3):
            same(list(new(epoch)), list(old(epoch)))
    part = new(5)  # an epoch left half-way (max_steps) does not disturb the next one
    same([next(part), next(part)], list(old(5))[:2])
    same(list(new(6)), list(old(6)))


def test_eval_batches_equal_padded_slices_in_order_with_workers():
    feats = features(n=23)
    want = [data.collate(data.rows_of(feats.select(range(i, min(23, i + 5)))), 0) for i in range(0, 23, 5)]
    want = [{k: v for k, v in b.items() if k != "labels"} for b in want]
    inputs = batches.TokenInputs(feats, 0)
    for workers in (0, 2):
        same(list(inputs.loader(5, workers, False)), want)
        same(list(batches.eval_batches(inputs, 23, 5, workers)), want)
    assert inputs.loader(5, 2, False) is inputs.loader(5, 2, False)  # evaluations reuse the workers


class Echo(torch.nn.Module):
    def forward(self, input_ids, attention_mask, token_type_ids=None):
        return HeadOutput(input_ids.float().unsqueeze(-1), None)


def test_forward_logits_is_the_same_through_workers_and_through_any_callable():
    feats = features(n=17)
    inputs = batches.TokenInputs(feats, 0)
    plain = forward_logits(Echo(), 17, lambda i, j: inputs(i, j), 4, "cpu")  # a callable: read in this process
    for workers in (0, 2):
        got = forward_logits(Echo(), 17, inputs, 4, "cpu", num_workers=workers)
        assert len(got) == 17 and all((a == b).all() for a, b in zip(got, plain))
    assert [len(x) for x in plain] == [len(r) for r in feats["input_ids"]]  # unpadded per feature


def test_loading_reads_the_hardware_config_and_refuses_a_bad_worker_count():
    assert batches.loading(OmegaConf.create({"num_workers": 2}), "cpu") == {"num_workers": 2, "pin_memory": False}
    assert batches.loading(OmegaConf.create({"num_workers": 0}), torch.device("cuda"))["pin_memory"]
    with pytest.raises(ValueError, match="hardware.num_workers=-1"):
        batches.loading(OmegaConf.create({"num_workers": -1}), "cpu")


def test_evaluation_workers_end_with_their_inputs():
    import weakref
    inputs = batches.TokenInputs(features(n=9), 0)
    loader = weakref.ref(inputs.loader(4, 2, False))
    list(loader())
    del inputs
    assert loader() is None  # no reference cycle: the loader, and its persistent workers, go with the inputs


@pytest.mark.parametrize("group", [True, False])
def test_train_batches_cover_every_row_once_per_epoch_and_reshuffle(group):
    feats = datasets.Dataset.from_list([{"input_ids": [1] * (1 + i % 7), "labels": i} for i in range(50)])
    fn, n = batches.train_batches(feats, 8, pad_id=0, seed=0, group_by_length=group)
    e0 = [b["labels"].tolist() for b in fn(0)]
    assert n == len(e0) == 7 and sorted(sum(e0, [])) == list(range(50))
    assert e0 != [b["labels"].tolist() for b in fn(1)]  # a new order each epoch
    assert e0 == [b["labels"].tolist() for b in fn(0)]  # reproducible
    padding = sum(int((b["input_ids"] == 0).sum()) for b in fn(0))
    if group:  # sorted within the window: far less padding than a random order
        shuffled = batches.train_batches(feats, 8, 0, 0, False)[0](0)
        assert padding < sum(int((b["input_ids"] == 0).sum()) for b in shuffled)
