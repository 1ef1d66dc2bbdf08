"""Token counts of one tokenized split (method=pema_vocab's corpus), counted once: per process (a -m sweep counts a
split every job shares once) and, when asked, on disk under the asset cache (`<STRATA_CACHE>/pema/counts`), so
experiments that count the same split with the same tokenizer (Tables 2, 3 and 4) tokenize it once. An entry is named
by everything that decides its counts, so a rebuilt data asset or another tokenizer is counted again."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from experiments import data
from experiments.assets import data_fingerprint
from experiments.files import config_key, write_bytes
from experiments.memo import Memo
from pema import vocab

KIND = "pema/counts"  # the cache's directory under the asset cache (experiments.files.cache_root)
COUNTS_VERSION = 2  # bump when the counting changes: cached counts are keyed by it (2: the dev carve is in the key)
KEY_CHARS = 24  # digits of an entry's name; the entries already cached carry 24
_MEMO = Memo(size=64)  # (counts, examples) per entry name; a table's sweep revisits a few dozen splits at most


def raw_ids(ds, tok, task: DictConfig, special_tokens: bool) -> list[list[int]]:
    """Untruncated ids of a split's text (Fig. 2 counts): the text fields as the task's encoder reads them."""
    kw = dict(truncation=False, add_special_tokens=special_tokens, verbose=False)
    fields = task.text_fields
    if task.type == "ner":
        return tok(list(ds[fields[0]]), is_split_into_words=True, **kw)["input_ids"]
    return tok(*[list(ds[x]) for x in fields], **kw)["input_ids"]


def entry_key(tok_key: str, rows: int, task: DictConfig, data_cfg: DictConfig, hub_name, split: str,
              truncation: bool, special_tokens: bool) -> list:
    """Everything that decides a split's counts: the tokenizer (its fingerprint), the embedding rows, the task's
    data and its splits, the tokenization and the data asset's manifest."""
    return [COUNTS_VERSION, tok_key, rows, task.name, task.source, task.offline, task.hf.path,
            hub_name or task.hf.name, split, task.splits.get(split), data.max_length(task, data_cfg), truncation,
            special_tokens, task.get("dev_from_train"),  # a carve changes which rows train (and dev) hold
            data_cfg.source, data_cfg.limit_train, data_cfg.limit_eval, data_cfg.subset_seed,
            data_fingerprint(task, data_cfg)]


def split_counts(tok, rows: int, task: DictConfig, data_cfg: DictConfig, hub_name, split: str, truncation: bool,
                 special_tokens: bool, tok_key: str, cache: Path | None,
                 force: bool = False) -> tuple[np.ndarray, int, bool]:
    """(id counts of one split, examples, whether they came from a cache: this process's or `cache`'s on disk).
    `force` recounts and replaces the disk entry."""
    key = entry_key(tok_key, rows, task, data_cfg, hub_name, split, truncation, special_tokens)
    name = config_key(key, KEY_CHARS)
    path = cache / f"{name}.npz" if cache is not None else None

    def count_and_keep() -> tuple[np.ndarray, int]:
        counts, examples = _count(tok, rows, task, data_cfg, hub_name, split, truncation, special_tokens)
        if path is not None:
            _store(path, counts, examples, json.dumps(key, sort_keys=True, default=str))
        return counts, examples
    if force:
        return (*count_and_keep(), False)
    counted = []

    def load_or_count() -> tuple[np.ndarray, int]:
        stored = _load(path) if path is not None else None
        if stored is not None:
            return stored
        counted.append(name)
        return count_and_keep()
    counts, examples = _MEMO(name, load_or_count)
    return counts, examples, not counted


def _count(tok, rows: int, task: DictConfig, data_cfg: DictConfig, hub_name, split: str, truncation: bool,
           special_tokens: bool) -> tuple[np.ndarray, int]:
    t = task if hub_name is None else OmegaConf.merge(task, {"hf": {"name": hub_name}})
    raw = data.load_splits(t, data_cfg)
    if split not in raw:
        raise ValueError(f"pema.splits names {split!r} but task {task.name} has splits {sorted(raw)}")
    if truncation:  # the run's real features: truncation, windows, special tokens
        ids = vocab.flat_ids(data.encode(raw[split], tok, t, data.max_length(task, data_cfg), train=split == "train"))
        if not special_tokens:
            ids = ids[~np.isin(ids, tok.all_special_ids)]
    else:
        ids = vocab.flat_ids(raw_ids(raw[split], tok, t, special_tokens))
    return vocab.count([ids], rows), len(raw[split])


def _load(path: Path) -> tuple[np.ndarray, int] | None:
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            return z["counts"], int(z["examples"])
    except (OSError, ValueError, KeyError):  # unreadable: recount and rewrite
        return None


def _store(path: Path, counts: np.ndarray, examples: int, key: str) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, counts=counts, examples=examples, key=key)
    write_bytes(path, buf.getvalue())  # whole or not at all: a killed run leaves no half-written entry
