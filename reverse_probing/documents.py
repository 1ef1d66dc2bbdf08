"""Coreference documents (the suite's word-level schema, experiments/coref.py) as probe inputs: the words each source
reads, split into segments every source's tokenizer fits; the candidate spans and their gold clusters; batches.

Sources meet at the word: each tokenizes the words its own way and its sub-token states are pooled back to words
(reverse_probing/extract.py word_pool), so a trimmed vocabulary (minilm-l6-pii) mixes with the others token-wise.
Segments are word ranges shared by every source: packed by sentence so that the longest tokenization among the
sources fits max_len sub-tokens (coref-hoi packs sub-tokens of one tokenizer the same way [R english.384]).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from reverse_probing.coref import candidate_spans

GENRES = ("bc", "bn", "mz", "nw", "pt", "tc", "wb")  # OntoNotes genres, the doc_key prefix [coref-hoi]


@dataclass
class Doc:
    """One document as the head reads it. `keep`: the words whose features are read (every word, or in gold-mention
    mode only the mentions' words: the aggregator is position-wise and the head reads nothing else); spans index
    `keep`."""
    key: str
    n_words: int
    segments: list[tuple[int, int]]  # word ranges [a, b)
    keep: list[int]
    spans: list[tuple[int, int]]  # candidates, (start, end) inclusive, over `keep`
    cluster_ids: list[int]  # per span: its gold cluster (1-based), 0 none
    gold: list[tuple[tuple[int, int], ...]]  # gold clusters in document word indices
    speakers: list[int] = field(default_factory=list)  # per kept word
    segment_of: list[int] = field(default_factory=list)  # per kept word
    genre: int = 0
    choice: tuple[int, int, int] | None = None  # (the blank's span, the answer's, the other's): indices into spans


def words_of(doc: dict) -> tuple[list[str], list[int]]:
    words = [w for s in doc["sentences"] for w in s]
    return words, [i for i, s in enumerate(doc["sentences"]) for _ in s]


def pack(pieces: list[int], sentence_of: list[int], max_len: int) -> list[tuple[int, int]]:
    """Word ranges of at most max_len - 2 sub-tokens (room for [CLS]/[SEP]), whole sentences where they fit."""
    budget = max_len - 2
    if max(pieces, default=0) > budget:
        raise ValueError(f"a word has {max(pieces)} sub-tokens, more than a segment of {max_len} holds")
    sent_bounds, a = [], 0
    for i in range(1, len(pieces) + 1):
        if i == len(pieces) or sentence_of[i] != sentence_of[i - 1]:
            sent_bounds.append((a, i))
            a = i
    out, start, used = [], 0, 0
    for a, b in sent_bounds:
        n = sum(pieces[a:b])
        if used and used + n > budget:  # the sentence does not fit: close the segment before it
            out.append((start, a))
            start, used = a, 0
        if n <= budget:
            used += n
            continue
        for w in range(a, b):  # one sentence longer than a segment: cut it between words
            if used + pieces[w] > budget:
                out.append((start, w))
                start, used = w, 0
            used += pieces[w]
    if start < len(pieces):
        out.append((start, len(pieces)))
    return out


def prepare(doc: dict, pieces: list[int], max_len: int, gold_mentions: bool, max_width: int) -> Doc:
    """`pieces`: per word, the most sub-tokens any source splits it into."""
    words, sentence_of = words_of(doc)
    clusters = [tuple(tuple(m) for m in c) for c in doc["clusters"]]
    cid = {m: i + 1 for i, c in enumerate(clusters) for m in c}
    segments = pack(pieces, sentence_of, max_len)
    if gold_mentions:
        mentions = sorted({tuple(m) for m in doc.get("mentions") or [m for c in clusters for m in c]})
        keep = sorted({w for s, e in mentions for w in range(s, e + 1)})
    else:
        mentions = candidate_spans(sentence_of, max_width)
        keep = list(range(len(words)))
    at = {w: i for i, w in enumerate(keep)}
    spans = [(at[s], at[e]) for s, e in mentions]
    seg = np.zeros(len(words), dtype=np.int64)
    for k, (a, b) in enumerate(segments):
        seg[a:b] = k
    speaker_names = [s for sent in doc.get("speakers") or [] for s in sent]
    ids: dict[str, int] = {}
    speakers = [ids.setdefault(speaker_names[w], len(ids)) if speaker_names else 0 for w in keep]
    prefix = doc["doc_key"][:2]
    choice = None
    if "blank" in doc and "candidates" in doc and "answer" in doc:
        index = {m: i for i, m in enumerate(mentions)}
        cands = [index[tuple(c)] for c in doc["candidates"]]
        choice = (index[tuple(doc["blank"])], cands[doc["answer"]], cands[1 - doc["answer"]])
    return Doc(doc["doc_key"], len(words), segments, keep, spans, [cid.get(m, 0) for m in mentions], clusters,
               speakers, seg[keep].tolist(), GENRES.index(prefix) if prefix in GENRES else 0, choice)


def window(doc: Doc, max_segments: int, rng: np.random.Generator) -> tuple[Doc, list[int]]:
    """A training document of more than max_segments segments cut to that many consecutive ones at a random offset,
    with the spans inside them [R max_training_sentences; coref-hoi cuts training documents only]. Returns the cut
    document and the rows of `keep` it retains."""
    if len(doc.segments) <= max_segments:
        return doc, list(range(len(doc.keep)))
    o = int(rng.integers(0, len(doc.segments) - max_segments + 1))
    lo, hi = doc.segments[o][0], doc.segments[o + max_segments - 1][1]
    rows = [i for i, w in enumerate(doc.keep) if lo <= w < hi]
    at = {r: i for i, r in enumerate(rows)}
    inside = [((at[s], at[e]), c) for (s, e), c in zip(doc.spans, doc.cluster_ids) if s in at and e in at]
    spans, cids = [s for s, _ in inside], [c for _, c in inside]
    cut = Doc(doc.key, hi - lo, doc.segments[o:o + max_segments], [doc.keep[r] for r in rows], spans,
              cids, doc.gold, [doc.speakers[r] for r in rows], [doc.segment_of[r] - o for r in rows], doc.genre)
    return cut, rows


def collate(docs: list[Doc], features: list[list[torch.Tensor]]) -> dict:
    """A padded batch: `sources` one (B, W, d_i) tensor per source (features[source][doc] is (len(keep), d_i)),
    and the head's inputs."""
    B, W, S = len(docs), max(len(d.keep) for d in docs), max(1, max(len(d.spans) for d in docs))
    sources = []
    for per_doc in features:
        x = torch.zeros(B, W, per_doc[0].shape[-1], dtype=per_doc[0].dtype)
        for b, f in enumerate(per_doc):
            x[b, :f.shape[0]] = f
        sources.append(x)
    spans = torch.zeros(B, S, 2, dtype=torch.long)
    span_mask = torch.zeros(B, S, dtype=torch.bool)
    cluster_ids = torch.zeros(B, S, dtype=torch.long)
    speakers, segments, positions = (torch.zeros(B, W, dtype=torch.long) for _ in range(3))
    for b, d in enumerate(docs):
        n, w = len(d.spans), len(d.keep)
        if n:
            spans[b, :n] = torch.tensor(d.spans)
            cluster_ids[b, :n] = torch.tensor(d.cluster_ids)
        span_mask[b, :n] = True
        speakers[b, :w], segments[b, :w] = torch.tensor(d.speakers), torch.tensor(d.segment_of)
        positions[b, :w] = torch.tensor(d.keep)
    return {"sources": sources, "spans": spans, "span_mask": span_mask, "cluster_ids": cluster_ids,
            "words": torch.tensor([d.n_words for d in docs]), "speakers": speakers, "segments": segments,
            "genre": torch.tensor([d.genre for d in docs]), "positions": positions}
