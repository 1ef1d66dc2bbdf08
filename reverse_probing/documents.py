"""Coreference documents (the suite's word-level schema, experiments/coref.py) as probe inputs: the words each source
reads, split into segments every source's tokenizer fits; the candidate spans and their gold clusters; batches.

Segments are word ranges shared by every source: packed by sentence so that the longest tokenization among the
sources fits max_len sub-tokens (coref-hoi packs sub-tokens of one tokenizer the same way [R english.384]).

The head's positions: sub-tokens where every source shares one tokenizer (the paper's bert-base-cased sources), as in
coref-hoi: candidate spans start and end at any sub-token of one sentence, max_span_width and the head attention count
sub-tokens, pruning keeps top_span_ratio of every sub-token of every segment, [CLS] and [SEP] included (coref-hoi
model.py:125-176, preprocess.py get_sentence_map); each source's sub-token states are read as they are. Where the
sources split words differently (a trimmed vocabulary, minilm-l6-pii), they meet at the word: each source's sub-token
states are pooled to words (reverse_probing/extract.py word_pool) and spans, widths and pruning count words. Gold
clusters are words; sub-token spans are scored against the gold mentions' sub-token spans (coref-hoi's evaluator).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from reverse_probing.coref import candidate_spans

GENRES = ("bc", "bn", "mz", "nw", "pt", "tc", "wb")  # OntoNotes genres, the doc_key prefix [coref-hoi]
UNITS = ("word", "subtoken")  # the head's positions (spans, widths, head attention, pruning's count)


@dataclass
class Doc:
    """One document as the head reads it. Its positions are its words, or its sub-tokens (`word_of` maps them back;
    `prepare`'s unit). `keep`: the positions whose features are read (every one, or in gold-mention mode only the
    mentions': the aggregator is position-wise and the head reads nothing else); spans index `keep`."""
    key: str
    n_words: int
    segments: list[tuple[int, int]]  # word ranges [a, b)
    keep: list[int]  # document positions
    spans: list[tuple[int, int]]  # candidates, (start, end) inclusive, over `keep`
    cluster_ids: list[int]  # per span: its gold cluster (1-based), 0 none
    gold: list[tuple[tuple[int, int], ...]]  # gold clusters in document word indices
    speakers: list[int] = field(default_factory=list)  # per kept position
    segment_of: list[int] = field(default_factory=list)  # per kept position
    genre: int = 0
    choice: tuple[int, int, int] | None = None  # (the blank's span, the answer's, the other's): indices into spans
    segment_units: list[int] = field(default_factory=list)  # per segment, the units pruning counts (UNITS)
    word_of: list[int] = field(default_factory=list)  # per document position, its word; empty: positions are words

    def word(self, position: int) -> int:
        """The document word at a position (`keep` holds positions)."""
        return self.word_of[position] if self.word_of else position

    def gold_positions(self) -> list[tuple[tuple[int, int], ...]]:
        """The gold clusters over document positions (sub-tokens: each mention from its first word's first piece to
        its last word's last piece), what predicted spans are scored against, as coref-hoi's evaluator compares
        sub-token spans."""
        if not self.word_of:
            return self.gold
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for p, w in enumerate(self.word_of):
            first.setdefault(w, p)
            last[w] = p
        return [tuple((first[s], last[e]) for s, e in c) for c in self.gold]

    @property
    def units(self) -> int:
        """What k = top_span_ratio × units counts: the document's sub-tokens or words (`prepare`'s unit)."""
        return sum(self.segment_units) if self.segment_units else self.n_words


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


def segment_units(pieces: list[int], segments: list[tuple[int, int]], unit: str) -> list[int]:
    """Per segment, what pruning counts: its words (unit=word), or its sub-tokens plus [CLS] and [SEP] (unit=subtoken:
    coref-hoi's num_words counts every token under the input mask, model.py:123-125)."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: use one of {', '.join(UNITS)}")
    return [b - a if unit == "word" else sum(pieces[a:b]) + 2 for a, b in segments]


def prepare(doc: dict, pieces: list[int], max_len: int, gold_mentions: bool, max_width: int,
            unit: str = "word") -> Doc:
    """`pieces`: per word, the most sub-tokens any source splits it into (with one shared tokenizer: its own count);
    `unit`: the head's positions, words or sub-tokens (UNITS; sub-tokens need one shared tokenizer's `pieces`)."""
    words, sentence_of = words_of(doc)
    clusters = [tuple(tuple(m) for m in c) for c in doc["clusters"]]
    segments = pack(pieces, sentence_of, max_len)
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: use one of {', '.join(UNITS)}")
    # positions: the words, or every sub-token (a word's pieces in order); a word span covers its first word's first
    # piece to its last word's last piece
    word_of = [w for w in range(len(words)) for _ in range(pieces[w])] if unit == "subtoken" else []
    first = np.concatenate([[0], np.cumsum(pieces)]).astype(int).tolist() if word_of else list(range(len(words) + 1))
    to_pos = lambda m: (first[m[0]], first[m[1] + 1] - 1)  # noqa: E731
    word = word_of.__getitem__ if word_of else (lambda p: p)
    n_pos = first[-1]
    cid = {to_pos(m): i + 1 for i, c in enumerate(clusters) for m in c}
    if gold_mentions:
        mentions = sorted({to_pos(m) for m in doc.get("mentions") or [m for c in clusters for m in c]})
        keep = sorted({p for s, e in mentions for p in range(s, e + 1)})
    else:
        mentions = candidate_spans([sentence_of[w] for w in word_of] if word_of else sentence_of, max_width)
        keep = list(range(n_pos))
    at = {p: i for i, p in enumerate(keep)}
    spans = [(at[s], at[e]) for s, e in mentions]
    seg = np.zeros(len(words), dtype=np.int64)
    for k, (a, b) in enumerate(segments):
        seg[a:b] = k
    speaker_names = [s for sent in doc.get("speakers") or [] for s in sent]
    ids: dict[str, int] = {}
    speakers = [ids.setdefault(speaker_names[word(p)], len(ids)) if speaker_names else 0 for p in keep]
    prefix = doc["doc_key"][:2]
    choice = None
    index = {m: i for i, m in enumerate(mentions)}
    # a forced choice needs its three mentions among the candidates (predicted mentions may leave a wide one out)
    if "blank" in doc and "candidates" in doc and "answer" in doc and \
            all(to_pos(m) in index for m in [doc["blank"], *doc["candidates"]]):
        cands = [index[to_pos(c)] for c in doc["candidates"]]
        choice = (index[to_pos(doc["blank"])], cands[doc["answer"]], cands[1 - doc["answer"]])
    return Doc(doc["doc_key"], len(words), segments, keep, spans, [cid.get(m, 0) for m in mentions], clusters,
               speakers, seg[[word(p) for p in keep]].tolist(), GENRES.index(prefix) if prefix in GENRES else 0,
               choice, segment_units(pieces, segments, unit), word_of)


def window(doc: Doc, max_segments: int, rng: np.random.Generator) -> tuple[Doc, list[int]]:
    """A training document of more than max_segments segments cut to that many consecutive ones at a random offset,
    with the spans inside them [R max_training_sentences; coref-hoi cuts training documents only]. Returns the cut
    document and the rows of `keep` it retains."""
    if len(doc.segments) <= max_segments:
        return doc, list(range(len(doc.keep)))
    o = int(rng.integers(0, len(doc.segments) - max_segments + 1))
    lo, hi = doc.segments[o][0], doc.segments[o + max_segments - 1][1]
    rows = [i for i, k in enumerate(doc.segment_of) if o <= k < o + max_segments]
    at = {r: i for i, r in enumerate(rows)}
    inside = [((at[s], at[e]), c) for (s, e), c in zip(doc.spans, doc.cluster_ids) if s in at and e in at]
    spans, cids = [s for s, _ in inside], [c for _, c in inside]
    cut = Doc(doc.key, hi - lo, doc.segments[o:o + max_segments], [doc.keep[r] for r in rows], spans,
              cids, doc.gold, [doc.speakers[r] for r in rows], [doc.segment_of[r] - o for r in rows], doc.genre,
              segment_units=doc.segment_units[o:o + max_segments], word_of=doc.word_of)
    return cut, rows


def collate(docs: list[Doc], features: list[list[torch.Tensor]]) -> dict:
    """A padded batch: `sources` one (B, W, d_i) tensor per source (features[source][doc] is (len(keep), d_i)),
    and the head's inputs."""
    B, W, S = len(docs), max(len(d.keep) for d in docs), max(1, max(len(d.spans) for d in docs))
    sources = []
    for per_doc in features:
        x = torch.zeros(B, W, per_doc[0].shape[-1], dtype=per_doc[0].dtype, device=per_doc[0].device)
        for b, f in enumerate(per_doc):
            x[b, :f.shape[0]] = f
        sources.append(x)
    spans = torch.zeros(B, S, 2, dtype=torch.long)
    span_mask = torch.zeros(B, S, dtype=torch.bool)
    cluster_ids = torch.zeros(B, S, dtype=torch.long)
    speakers, segments = (torch.zeros(B, W, dtype=torch.long) for _ in range(2))
    for b, d in enumerate(docs):
        n, w = len(d.spans), len(d.keep)
        if n:
            spans[b, :n] = torch.tensor(d.spans)
            cluster_ids[b, :n] = torch.tensor(d.cluster_ids)
        span_mask[b, :n] = True
        speakers[b, :w], segments[b, :w] = torch.tensor(d.speakers), torch.tensor(d.segment_of)
    return {"sources": sources, "spans": spans, "span_mask": span_mask, "cluster_ids": cluster_ids,
            "units": torch.tensor([d.units for d in docs]), "speakers": speakers, "segments": segments,
            "genre": torch.tensor([d.genre for d in docs])}
