"""CoNLL-2012 English coreference into the asset cache (data/<task.offline>/<split>.jsonl, a MANIFEST last) as
word-level documents (experiments/coref.py's schema), one per document part (coref-hoi's doc_key `<document>_<part>`).

Two sources, never the LDC archive itself:
- the hub's copy (task.hf: ontonotes/conll2012_ontonotesv5, english_v4; CC BY-NC-ND 4.0): one row per document, its
  sentences carrying part_id, words, speaker and coref_spans [cluster_id, start, end] (word indices within the
  sentence, end inclusive; a cluster id spans the sentences of its part);
- a local copy named by $STRATA_CONLL2012: a directory of coref-hoi's jsonlines ({train,dev,test}.english.384.
  bert-base-cased.jsonlines, sub-token lines), word-level <split>.jsonl, or CoNLL-2012 *.english.v4_gold_conll files.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from experiments.data import load_rows
from experiments.assets import cache_dir, staged, write_manifest
from experiments.config import ConfigError
from experiments.coref import read_conll, read_jsonlines, validate_document

ENV = "STRATA_CONLL2012"
HUB_SPLITS = {"train": "train", "dev": "validation", "eval": "test"}  # the suite's split -> the hub's
LOCAL_STEMS = {"train": "train", "dev": "dev", "eval": "test"}  # the suite's split -> coref-hoi's and CoNLL's file stem


def normalize_word(word: str) -> str:
    """coref-hoi's normalisation of English words: the escaped sentence ends `/.` and `/?` lose their slash."""
    return word[1:] if word in ("/.", "/?") else word


def hub_documents(row: dict) -> tuple[list[dict], int]:
    """One hub row (a whole document) -> (its parts as word-level documents, mentions dropped). A mention listed
    twice (in one cluster or two) is kept once, in the first cluster that names it: the schema's one-cluster rule."""
    parts: dict[int, list[dict]] = {}
    for sentence in row["sentences"]:
        parts.setdefault(int(sentence["part_id"]), []).append(sentence)
    docs, dropped = [], 0
    for part, sentences in sorted(parts.items()):
        clusters: dict[int, list[list[int]]] = defaultdict(list)
        seen: set[tuple[int, int]] = set()
        offset = 0
        for sentence in sentences:
            n = len(sentence["words"])
            for cluster, start, end in sentence["coref_spans"]:
                if not 0 <= start <= end < n:
                    raise ValueError(f"document {row['document_id']!r} part {part}: coref span [{start}, {end}] is "
                                     f"outside its sentence of {n} words")
                span = (offset + start, offset + end)
                if span in seen:
                    dropped += 1
                    continue
                seen.add(span)
                clusters[int(cluster)].append(list(span))
            offset += n
        doc = {"doc_key": f"{row['document_id']}_{part}",
               "sentences": [[normalize_word(w) for w in s["words"]] for s in sentences],
               "speakers": [[s.get("speaker") or "-"] * len(s["words"]) for s in sentences],
               "clusters": [sorted(clusters[c]) for c in sorted(clusters)]}
        docs.append(validate_document(doc))
    return docs, dropped


def local_split(directory: Path, split: str) -> list[dict]:
    """One split of a local copy: the first of <split>.jsonl, coref-hoi's <stem>.english.384.bert-base-cased.jsonlines
    (or any <stem>.english.*.jsonlines) and <stem>.english.v4_gold_conll that exists."""
    stem = LOCAL_STEMS[split]
    candidates = [directory / f"{split}.jsonl", directory / f"{stem}.english.384.bert-base-cased.jsonlines",
                  *sorted(directory.glob(f"{stem}.english.*.jsonlines")), directory / f"{stem}.english.v4_gold_conll"]
    for path in candidates:
        if path.is_file():
            return read_conll(path) if path.name.endswith("gold_conll") else read_jsonlines(path)
    raise ConfigError(f"{ENV}={directory}: no {split} split there; give one of "
                      f"{', '.join(p.name for p in candidates[:2])} or {candidates[-1].name}")


def documents(task: DictConfig, data: DictConfig) -> tuple[dict[str, list[dict]], dict]:
    """split -> documents, and where they came from (the MANIFEST's `source`): the local copy when $STRATA_CONLL2012
    names one, else the hub's."""
    local = os.environ.get(ENV)
    if local:
        directory = Path(local).expanduser()
        if not directory.is_dir():
            raise ConfigError(f"{ENV}={local}: not a directory; name the directory that holds the coref-hoi jsonlines "
                              "(or CoNLL-2012 *_gold_conll files), or unset it to convert the hub's copy")
        return {s: local_split(directory, s) for s in task.splits}, {"local": str(directory.resolve())}
    if not task.hf.path:
        raise ConfigError(f"task={task.name} has no hub copy (task.hf.path is empty): set {ENV}=<directory> to "
                          "install a local one")
    hub_data = OmegaConf.merge(data, {"source": "hub"})
    out, dropped = {}, 0
    for split in task.splits:
        out[split] = []
        for row in load_rows(task, hub_data, HUB_SPLITS.get(split, split)):
            docs, n = hub_documents(row)
            out[split] += docs
            dropped += n
    return out, {"hub": {"path": task.hf.path, "name": task.hf.name, "splits": HUB_SPLITS}, "dropped_mentions": dropped}


def install(task: DictConfig, docs: dict[str, list[dict]], source: dict) -> Path:
    """data/<task.offline>/<task.splits[split]>.jsonl for each split, MANIFEST last, renamed into place."""
    final = cache_dir() / "data" / task.offline
    with staged(final) as stage:
        for split, rows in docs.items():
            with open(stage / f"{task.splits[split]}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in rows)
        write_manifest(stage, {"asset": f"data/{task.offline}", "source": source})
    return final


def build(task: DictConfig, data: DictConfig) -> tuple[dict[str, float], str]:
    """Convert and install; (the record's counts per split, the installed directory)."""
    if task.type != "coref" or task.source != "offline" or not task.offline:
        raise ConfigError(f"method.kind=data builds a coref task's offline data: task={task.name} is {task.type}, "
                          f"source {task.source}, offline {task.offline!r}; use task=conll2012")
    docs, source = documents(task, data)
    metrics = {}
    for split, rows in docs.items():
        metrics[f"data/{split}_documents"] = len(rows)
        metrics[f"data/{split}_words"] = sum(len(s) for d in rows for s in d["sentences"])
        metrics[f"data/{split}_clusters"] = sum(len(d["clusters"]) for d in rows)
        metrics[f"data/{split}_mentions"] = sum(len(c) for d in rows for c in d["clusters"])
    if "dropped_mentions" in source:
        metrics["data/dropped_mentions"] = source["dropped_mentions"]
    return metrics, str(install(task, docs, source))
