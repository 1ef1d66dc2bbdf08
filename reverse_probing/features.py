"""What the frozen sources give a probe: the documents prepared for their tokenizers, and per document each source's
hidden states at every layer (computed once per segment and kept in the activation store), reduced by the extraction
variant. A sweep in one process reads each source's states of a split once (`states_memo`)."""
from __future__ import annotations

import copy
import hashlib

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from experiments import data
from experiments.config import ConfigError
from experiments.context import RunContext
from experiments.memo import Memo
from experiments.models import frozen_encoder, tokenizer_fingerprint
from experiments.store import model_fingerprint
from reverse_probing.byte_memo import ByteMemo
from reverse_probing.documents import Doc, prepare, words_of
from reverse_probing.extract import extract, positions

memo = Memo(24)  # a sweep in one process prepares each split's documents (and fingerprints each source) once
states_memo = ByteMemo()  # and reads each source's states of a split once, while they fit half the host's memory


def forget() -> None:
    """Drop what this package memoised (the frozen encoders are models.frozen_encoder's)."""
    memo.clear()
    states_memo.clear()


def load_source(model: DictConfig):
    """(tokenizer, frozen encoder in eval mode, weights fingerprint), once per process: the fingerprint names the
    source in the activation store's keys, and hashing its weights costs ~0.2 s per 100 MB."""
    tok, enc = frozen_encoder(model)
    return tok, enc, memo(("fingerprint", id(enc), OmegaConf.to_yaml(model)), lambda: model_fingerprint(enc))


def piece_counts(tok, words: list[str]) -> list[int]:
    ids = tok(words, is_split_into_words=True, add_special_tokens=False).word_ids()
    counts = [0] * len(words)
    for w in ids:
        if w is not None:
            counts[w] += 1
    return counts


def safe_words(tok, words: list[str]) -> list[str]:
    """A word the tokenizer turns into nothing (a control character) becomes its unknown token: every word needs a
    sub-token to be pooled from."""
    counts = piece_counts(tok, words)
    return [w if c else tok.unk_token for w, c in zip(words, counts)]


def load_docs(task: DictConfig, data_cfg: DictConfig, splits=("train", "dev", "eval")) -> dict[str, list[dict]]:
    """The documents of `splits` only (an extra evaluation set has no train split: its task's schema default
    {train, eval} would make the loader look for one)."""
    missing = [s for s in splits if s not in task.splits]
    if missing:
        raise ConfigError(f"task={task.name} has no {', '.join(missing)} split (task.splits: {dict(task.splits)})")
    task = copy.deepcopy(task)
    task.splits = {s: task.splits[s] for s in splits}
    raw = data.load_splits(task, data_cfg)
    return {s: raw[s].to_list() for s in splits}


def span_unit(toks: list) -> str:
    """The head's positions: sub-tokens where every source shares one tokenizer (the paper's bert-base-cased sources:
    coref-hoi's spans, widths, head attention and k = 0.4 x sub-tokens), words where tokenizers differ (they share no
    sub-tokens: each source's are pooled to words)."""
    return "subtoken" if len({tokenizer_fingerprint(t) for t in toks}) == 1 else "word"


def units_used(toks: list) -> dict[str, str]:
    """The record's extra: the unit of spans (their width, head attention) and of pruning's count."""
    unit = span_unit(toks)
    return {"span_unit": unit, "prune_unit": unit}


def prepared(cfg: DictConfig, raw: list[dict], toks: list) -> list[Doc]:
    m = cfg.method
    unit = span_unit(toks)
    out = []
    for doc in raw:
        words, _ = words_of(doc)
        # a word a tokenizer drops becomes its unknown token (safe_words): one piece
        pieces = np.max([[c or 1 for c in piece_counts(t, words)] for t in toks], axis=0).tolist() if words else []
        out.append(prepare(doc, pieces, m.max_segment_len, m.gold_mentions, m.max_span_width, unit))
    return out


def source_states(cfg: DictConfig, ctx: RunContext, model: DictConfig, raw: list[dict],
                  docs: list[Doc]) -> list[torch.Tensor]:
    """Per document, the source's hidden states at every layer at the kept positions (its sub-tokens, or its words,
    pooled: the documents' unit): (L+1, len(keep), d) in the store's dtype. Each segment of each document is one
    store entry (all layers)."""
    tok, enc, fp = load_source(model)
    rows, owner = [], []
    for i, (doc, d) in enumerate(zip(raw, docs)):
        words = safe_words(tok, words_of(doc)[0])
        for a, b in d.segments:
            encoded = tok(words[a:b], is_split_into_words=True)
            rows.append({"input_ids": encoded["input_ids"], "word_ids": encoded.word_ids(), "n": b - a})
            owner.append(i)
    store = ctx.store()
    states = store.hidden_states(enc, [{"input_ids": r["input_ids"]} for r in rows], "all",
                                 tokenizer_key=tokenizer_fingerprint(tok), max_length=cfg.method.max_segment_len,
                                 select="all", batch_size=cfg.method.feature_batch, device=ctx.device, model_key=fp)
    per_doc: list[list[torch.Tensor]] = [[] for _ in docs]
    for r, (row, i) in enumerate(zip(rows, owner)):
        per_doc[i].append(positions(states[r], row["word_ids"], row["n"], unit_of(docs[i]),
                                    cfg.method.word_pooling))
    return [at_positions(torch.cat(parts, 1), d, 1) for parts, d in zip(per_doc, docs)]


def unit_of(doc: Doc) -> str:
    return "subtoken" if doc.word_of else "word"


def at_positions(x: torch.Tensor, doc: Doc, dim: int) -> torch.Tensor:
    """A document's per-position features (along `dim`) at its kept positions; refused when the source's pieces are
    not the document's (another tokenizer than the one its sub-token positions come from)."""
    n = len(doc.word_of) if doc.word_of else doc.n_words
    if x.shape[dim] != n:
        raise ValueError(f"document {doc.key}: the source gives {x.shape[dim]} {unit_of(doc)}s, the document has {n}")
    return x.index_select(dim, torch.tensor(doc.keep, dtype=torch.long, device=x.device)).contiguous()


def layout(docs: list[Doc]) -> str:
    """What a source's states at the documents' kept positions depend on besides the source: segments, kept
    positions and their unit. Sources that share a tokenizer give the same layout alone and in any set."""
    parts = [(d.key, d.segments, d.keep, len(d.word_of)) for d in docs]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def split_states(cfg, ctx, models, split: str, raw, docs, task: DictConfig) -> list[list[torch.Tensor]]:
    """Per source, per document: its stored states, memoised across the runs of a sweep within a byte budget and
    keyed on the source and the documents' layout, so a pair reuses each member's single-source states."""
    ident = OmegaConf.to_yaml(OmegaConf.masked_copy(cfg, ["data"])) + OmegaConf.to_yaml(task) + str(
        [cfg.method.max_segment_len, cfg.method.word_pooling, layout(docs)])
    return [states_memo(("states", OmegaConf.to_yaml(m), split, ident),
                        lambda m=m: source_states(cfg, ctx, m, raw, docs)) for m in models]


def extracted(cfg, states: list[list[torch.Tensor]], layers) -> list[list[torch.Tensor]]:
    """Per source, per document: the variant's features from the source's states at every layer."""
    m = cfg.method
    return [[extract(s, m.variant, layer, m.concat_n) for s in per_doc] for per_doc, layer in zip(states, layers)]


def read_layer(cfg: DictConfig, models, layers) -> dict[str, float]:
    """extract/layer: the hidden_states index a single-source run reads (the last for full, norm and concat)."""
    if len(models) != 1:
        return {}
    return {"extract/layer": layers[0] if cfg.method.variant == "trunc" else models[0].num_layers}


def coref_data(cfg: DictConfig, ctx: RunContext, models, layers, extras) -> dict:
    """split (and extra-evaluation prefix) -> (documents, per-source features, rows), read from the activation
    store."""
    m = cfg.method
    toks = [load_source(x)[0] for x in models]
    raw = load_docs(cfg.task, cfg.data)
    for prefix, task in extras.items():
        raw[prefix] = load_docs(task, cfg.data, ("eval",))["eval"]
    out = {}
    for split, rows in raw.items():
        docs = memo(("docs", split, OmegaConf.to_yaml(cfg.task), OmegaConf.to_yaml(cfg.data), str(sorted(m.sources)),
                     m.gold_mentions, m.max_segment_len, m.max_span_width), lambda rows=rows: prepared(cfg, rows, toks))
        task = cfg.task if split in ("train", "dev", "eval") else extras[split]
        out[split] = (docs, extracted(cfg, split_states(cfg, ctx, models, split, rows, docs, task), layers), rows)
    return out
