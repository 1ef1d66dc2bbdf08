"""Task data: one loader for offline assets, hub datasets and test fixtures (the capped train/eval splits as a
`datasets.DatasetDict`, or one named split's rows), and the encoders that turn each task type into model features."""
from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from urllib.parse import quote

import datasets
import torch
from omegaconf import DictConfig, OmegaConf

from experiments import REPO
from experiments.assets import cache_dir, require
from experiments.config import ConfigError, offline_refusal
from experiments.progress import Progress

log = logging.getLogger(__name__)
# coref: documents in the word-level coreference schema (experiments/coref.py); they load like the rest (nested lists
# survive load_dataset("json")), but the coreference probe tokenizes them itself, so `encode` has no coref encoder
TASK_TYPES = ("cls", "pair", "ner", "qa", "coref")
SOURCES = ("offline", "hub", "fixture")


def _source(task: DictConfig, data: DictConfig) -> str:
    source = data.source or task.source
    if source not in SOURCES:
        raise ValueError(f"unknown data source {source!r}; valid: {', '.join(SOURCES)}")
    if source == "fixture" and not task.fixture:
        raise ValueError(f"task {task.name!r} has no fixture; set task.fixture or use data.source=offline")
    return source


def _hub(task: DictConfig, split: str | None = None):
    """datasets.load_dataset of a hub task at its pinned revision, or of the repo's own files (hf.data_files) through
    a packaged builder. Offline and not cached, datasets fails at once with a ConnectionError; it becomes one line
    with the switch first, not a long traceback ending in "couldn't reach the hub". (The load itself is the cache
    test: a guess at the datasets cache's layout would refuse copies it does hold.)"""
    hf = task.hf
    try:
        if hf.get("data_files"):
            if not hf.get("builder"):
                raise ConfigError(f"task {task.name}: task.hf.data_files is set but task.hf.builder=None: name the "
                                  "packaged builder that reads them (json, parquet or csv)")
            at = f"hf://datasets/{hf.path}@{quote(hf.revision or 'main', safe='')}"
            files = {s: f"{at}/{f}" for s, f in hf.data_files.items()}
            return datasets.load_dataset(hf.builder, data_files=files, split=split)
        pins = {k: hf[k] for k in ("revision", "data_dir") if hf.get(k)}
        return datasets.load_dataset(hf.path, hf.name, split=split, **pins)
    except ConnectionError:
        refusal = offline_refusal("task", task.name, task.hf.path, "dataset", cached=False)
        if refusal is None:
            raise
        raise ConfigError(refusal) from None


def _where(task: DictConfig, source: str, split: str) -> str:
    """Where one split of load_splits comes from, for an error: its file, or its hub dataset and split."""
    if source == "fixture":  # one file; its eval rows also stand in for dev
        return f"{REPO / task.fixture} (its rows with split={'eval' if split == 'dev' else split})"
    name = task.splits.get(split, split)
    if source == "offline":
        return str(cache_dir() / "data" / task.offline / f"{name}.jsonl")
    return f"hub dataset {task.hf.path} ({task.hf.name}), split {name}"


def _nonempty(task: DictConfig, split: str, n: int, where: str) -> None:
    """A split the run needs must have rows: an empty one fails deep in training or evaluation ("need at least one
    array to stack"), after the model has loaded."""
    if n == 0:
        raise ConfigError(f"task {task.name}: the {split} split is empty, {where} has no rows for it: add rows, or "
                          "point task.splits / task.fixture / data.source at data that has them")


def read_jsonl(path: Path) -> list[dict]:
    """One dict per non-empty line (line iteration, not splitlines(): texts may hold U+2028 and the like)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_rows(task: DictConfig, data: DictConfig, split: str) -> list[dict] | datasets.Dataset:
    """All rows of one split of the task's source, by its name there (offline: <split>.jsonl; fixture: the rows whose
    `split` is it; hub: the hub split), uncapped: plain dicts from files, a datasets.Dataset from the hub."""
    source = _source(task, data)
    if source == "offline":
        path = require("data", task.offline) / f"{split}.jsonl"
        rows = read_jsonl(path)
    elif source == "fixture":
        path = REPO / task.fixture
        rows = [r for r in read_jsonl(path) if r["split"] == split]
    else:
        path = f"hub dataset {task.hf.path} ({task.hf.name}), split {split}"
        rows = _hub(task, split)
    _nonempty(task, split, len(rows), f"{path} (its rows with split={split})" if source == "fixture" else str(path))
    return rows


def long_texts(min_words: int = 0) -> list[str]:
    """English Wikipedia documents (the wiki-long asset, 1,000 documents, source order) of at least `min_words`
    whitespace words: real text to fill sequences of up to thousands of tokens in scaling benchmarks."""
    if not isinstance(min_words, int) or min_words < 0:
        raise ValueError(f"long_texts: min_words={min_words!r}; give a whole number of words >= 0")
    rows = read_jsonl(require("data", "wiki-long") / "docs.jsonl")
    texts = [r["text"] for r in rows if r["words"] >= min_words]
    if not texts:
        raise ValueError(f"long_texts: no wiki-long document has {min_words} words (the longest has "
                         f"{max(r['words'] for r in rows)}); lower min_words")
    return texts


def load_splits(task: DictConfig, data: DictConfig) -> datasets.DatasetDict:
    """train/eval (and dev, when task.splits names one or task.dev_from_train carves one from train) splits of `task`,
    each capped to a fixed random subset when data.limit_* is set (dev takes limit_eval)."""
    source = _source(task, data)
    if source == "offline" and task.type == "coref" and _subtoken_level(require("data", task.offline), task):
        from experiments.coref import read_jsonlines  # coref-hoi's jsonlines: sub-token lines to word-level documents
        d = require("data", task.offline)
        ds = datasets.DatasetDict({split: datasets.Dataset.from_list(read_jsonlines(d / f"{name}.jsonl"))
                                   for split, name in task.splits.items()})
    elif source == "offline":
        d = require("data", task.offline)
        files = {split: str(d / f"{name}.jsonl") for split, name in task.splits.items()}
        ds = datasets.load_dataset("json", data_files=files)
    elif source == "fixture":
        # one committed file holds both splits, marked by a `split` column
        rows = datasets.load_dataset("json", data_files=str(REPO / task.fixture))["train"]
        ds = datasets.DatasetDict({s: rows.filter(lambda r, s=s: r["split"] == s) for s in ("train", "eval")})
        if "dev" in task.splits:  # the fixture has no dev rows: its eval rows stand in, so a smoke run exercises dev
            ds["dev"] = ds["eval"]
    else:
        hub = _hub(task)
        missing = {split: name for split, name in task.splits.items() if name not in hub}
        if missing:
            raise ValueError(f"task {task.name!r}: hub dataset {task.hf.path} ({task.hf.name}) has no split "
                             f"{', '.join(map(repr, missing.values()))}; its splits: {', '.join(hub)}. "
                             f"Fix task.splits ({', '.join(f'{k}: {v}' for k, v in missing.items())})")
        ds = datasets.DatasetDict({split: hub[name] for split, name in task.splits.items()})
    for split, rows in ds.items():  # before the dev carve and the limits, which would hide or fail on an empty one
        _nonempty(task, split, len(rows), _where(task, source, split))
    if task.get("dev_from_train") and "dev" not in ds:  # a fixed slice of train, never eval, selects the checkpoint
        cut = ds["train"].train_test_split(test_size=task.dev_from_train, seed=data.subset_seed, shuffle=True)
        ds["train"], ds["dev"] = cut["train"], cut["test"]
    for split, limit in (("train", data.limit_train), ("eval", data.limit_eval), ("dev", data.limit_eval)):
        if split not in ds:
            continue
        if limit is not None and limit < len(ds[split]):
            ds[split] = ds[split].shuffle(seed=data.subset_seed).select(range(limit))
    check_labels(task, ds)
    return ds


def _subtoken_level(d: Path, task: DictConfig) -> bool:
    """Whether a coref task's files are coref-hoi's sub-token jsonlines (their lines carry a subtoken_map)."""
    with open(d / f"{next(iter(task.splits.values()))}.jsonl", encoding="utf-8") as f:
        return "subtoken_map" in json.loads(f.readline() or "{}")


def is_regression(task: DictConfig) -> bool:
    """A cls/pair task that names no label_names predicts one number per example (STS-B's similarity score): a
    regression, trained as Hugging Face trains num_labels=1 (one output, MSE loss) and scored by its metrics
    (pearson, spearman) on the predicted numbers."""
    return task.get("type") in ("cls", "pair") and not task.get("label_names")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_labels(task: DictConfig, ds: datasets.DatasetDict) -> None:
    """Integer labels (class ids, or tag ids of hub NER data) must index task.label_names: a shorter list would fail
    deep in the loss as "Target 2 is out of bounds". A regression's labels must be numbers, and a classification's
    must not be fractional (a regression lists no label_names)."""
    if task.type not in ("cls", "pair", "ner"):
        return
    if is_regression(task):
        for split in ds.values():
            bad = next((v for v in split[task.label_field] if not _number(v)), None)
            if bad is not None:
                raise ValueError(f"task {task.name} lists no task.label_names, so it is a regression, but its label "
                                 f"{task.label_field!r} holds {bad!r}, not a number: list one name per class id in "
                                 "task.label_names")
        return
    ids = set()
    for split in ds.values():
        for v in split[task.label_field]:
            vs = v if isinstance(v, list) else [v]
            frac = next((x for x in vs if isinstance(x, float) and not x.is_integer()), None)
            if frac is not None:
                raise ValueError(f"task {task.name} has label {frac!r}, not a class id, but task.label_names lists "
                                 f"{len(task.label_names)} classes: a regression (one number per example) lists no "
                                 "label_names")
            ids.update(x for x in vs if isinstance(x, int) and not isinstance(x, bool) and x >= 0)  # -1: unlabelled
    if ids and max(ids) >= len(task.label_names):
        raise ValueError(f"task.label_names has {len(task.label_names)} names ({list(task.label_names)}) but the data "
                         f"of task {task.name} has label id {max(ids)}: list one name per label id 0..{max(ids)}")


def max_length(task: DictConfig, data: DictConfig) -> int:
    return int(data.max_length or task.max_length)


def encode(ds: datasets.Dataset, tokenizer, task: DictConfig, max_len: int, train: bool) -> datasets.Dataset:
    """Model features for one split. qa eval features keep `example_id` and `offset_mapping` for decoding."""
    if task.type not in TASK_TYPES or task.type == "coref":
        raise ValueError(f"task type {task.type!r} has no encoder here; valid: cls, pair, ner, qa (coref documents are "
                         "encoded by the coreference probe, method=reverse_probing)")
    fn = {"cls": _encode_text, "pair": _encode_text, "ner": _encode_ner, "qa": _encode_qa}[task.type]

    def encoded(b, idx):  # datasets' own bars are off (experiments.run.quiet_libraries); ours reports long splits
        out = fn(b, idx, tokenizer, task, max_len, train)
        bar.update(len(idx))
        return out
    with Progress(len(ds), f"tokenize {task.name}", unit="ex") as bar:
        return ds.map(encoded, batched=True, with_indices=True, remove_columns=ds.column_names,
                      desc=f"tokenize {task.name}", load_from_cache_file=False,
                      new_fingerprint=_encoded_fingerprint(ds, tokenizer, task, max_len, train))


def _encoded_fingerprint(ds: datasets.Dataset, tokenizer, task: DictConfig, max_len: int, train: bool) -> str:
    """The name datasets gives the encoded split, from what decides it. Left to itself, datasets pickles the closure
    (the tokenizer, the task's OmegaConf node) on every map to name it: slower than tokenizing a small split."""
    from experiments.files import config_key
    from experiments.models import tokenizer_fingerprint  # lazy: models imports this module
    return config_key([ds._fingerprint, tokenizer_fingerprint(tokenizer), OmegaConf.to_container(task, resolve=True),
                       max_len, train], chars=32)


def _encode_text(batch, idx, tokenizer, task, max_len, train):
    texts = [batch[f] for f in task.text_fields]
    enc = tokenizer(*texts, truncation=True, max_length=max_len)
    labels = batch[task.label_field]
    # a regression's targets are floats even where a file writes 4 for 4.0 (MSE needs float tensors)
    enc["labels"] = [float(y) for y in labels] if is_regression(task) else labels
    return enc


def tag_ids(tags: list, names: list[str]) -> list[int]:
    """Tags as ids; offline data stores tag strings, hub data (ClassLabel) stores ids already."""
    if tags and isinstance(tags[0], str):
        index = {n: i for i, n in enumerate(names)}
        unknown = sorted(set(tags) - index.keys())
        if unknown:
            raise ValueError(f"tags {unknown} are not in task.label_names")
        return [index[t] for t in tags]
    return list(tags)


def _encode_ner(batch, idx, tokenizer, task, max_len, train):
    enc = tokenizer(batch[task.text_fields[0]], is_split_into_words=True, truncation=True, max_length=max_len)
    labels, first = [], []
    for i, tags in enumerate(batch[task.label_field]):
        ids, seen, row, row_first = tag_ids(tags, task.label_names), set(), [], []
        for w in enc.word_ids(i):
            # the first piece of each word carries its tag; the rest are ignored by the loss and by decoding
            is_first = w is not None and w not in seen
            row.append(ids[w] if is_first else -100)
            row_first.append(w if is_first else -1)
            seen.add(w)
        labels.append(row)
        first.append(row_first)
    enc["labels"] = labels
    if not train:
        enc["word_index"] = first
    return enc


def _encode_qa(batch, idx, tokenizer, task, max_len, train):
    q_field, c_field = task.text_fields
    questions = [q.lstrip() for q in batch[q_field]]
    enc = tokenizer(questions, batch[c_field], truncation="only_second", max_length=max_len, stride=task.doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    sample = enc.pop("overflow_to_sample_mapping")
    starts, ends, example_ids, offsets = [], [], [], []
    for i, offs in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(i)
        ex = sample[i]
        if train:
            ans = batch[task.label_field][ex]
            s_char = ans["answer_start"][0]
            e_char = s_char + len(ans["text"][0])
            ctx = [j for j, s in enumerate(seq) if s == 1]
            # an answer outside this window is labelled at position 0 ([CLS]): "no answer here"
            if not ctx or offs[ctx[0]][0] > s_char or offs[ctx[-1]][1] < e_char:
                starts.append(0)
                ends.append(0)
            else:
                starts.append(next(j for j in ctx if offs[j][1] > s_char))
                ends.append(next(j for j in reversed(ctx) if offs[j][0] < e_char))
        else:
            example_ids.append(idx[ex])
            offsets.append([o if s == 1 else None for o, s in zip(offs, seq)])
    if train:
        enc["start_positions"], enc["end_positions"] = starts, ends
        enc.pop("offset_mapping")
    else:
        enc["example_index"], enc["offset_mapping"] = example_ids, offsets
    return enc


PAD_LABEL = -100
FEATURES = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")


def collate(rows: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest row (dynamic padding: short tasks stay cheap)."""
    out = {}
    for key in FEATURES:
        if key not in rows[0]:
            continue
        vals = [r[key] for r in rows]
        if isinstance(vals[0], list):
            width = max(len(v) for v in vals)
            fill = {"input_ids": pad_id, "labels": PAD_LABEL}.get(key, 0)
            vals = [v + [fill] * (width - len(v)) for v in vals]
        out[key] = torch.tensor(vals)
    return out


def epoch_order(lengths: list[int], batch_size: int, seed: int, group_by_length: bool = True):
    """epoch -> list of index batches. Each epoch reshuffles, reproducibly from the seed.

    group_by_length: sort rows by length inside shuffled windows of 50 batches, then shuffle the batches, so a batch
    holds rows of similar length and little padding (the order stays random at the batch level)."""
    def order(epoch: int) -> list[list[int]]:
        rng = random.Random(seed * 1000 + epoch)
        idx = list(range(len(lengths)))
        rng.shuffle(idx)
        if group_by_length:
            window = 50 * batch_size
            idx = [i for w in range(0, len(idx), window)
                   for i in sorted(idx[w:w + window], key=lambda i: -lengths[i])]
        chunks = [idx[i:i + batch_size] for i in range(0, len(idx), batch_size)]
        if group_by_length:
            rng.shuffle(chunks)
        return chunks
    return order


def rows_of(features: datasets.Dataset) -> list[dict]:
    """The model features as a list of plain dicts (fast random access while batching)."""
    cols = [c for c in FEATURES if c in features.column_names]
    return [dict(zip(cols, vals)) for vals in zip(*(features[c] for c in cols))]
