"""Coreference documents in the suite's word-level schema, read from coref-hoi jsonlines or CoNLL-2012 files, and
written back as CoNLL-2012 key/response files for the reference scorer.

A document: {"doc_key": str, "sentences": [[word, ...], ...], "speakers": [[str, ...], ...] (optional, parallel to
sentences), "clusters": [[[start, end], ...], ...] (word indices into the flattened document, end inclusive),
"mentions": [[start, end], ...] (optional gold mentions, singletons included), plus free extra keys}.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

__all__ = ["read_jsonlines", "read_conll", "write_conll", "validate_document", "flatten"]

SPECIAL_SUBTOKENS = frozenset({"[CLS]", "[SEP]"})  # segment boundaries coref-hoi adds around every segment
_BEGIN = re.compile(r"^#\s*begin document \((?P<name>.*)\); part (?P<part>\d+)\s*$")
_PART_SUFFIX = re.compile(r"^(?P<name>.+)_(?P<part>\d+)$")
_COREF_CELL = re.compile(r"^\((\d+)\)$|^\((\d+)$|^(\d+)\)$")


def flatten(doc: dict) -> list[str]:
    return [w for sentence in doc["sentences"] for w in sentence]


def validate_document(doc: dict) -> dict:
    """`doc` itself when it fits the schema, else a ValueError naming the doc_key and the problem."""
    key = doc.get("doc_key") if isinstance(doc, dict) else None
    where = f"document {key!r}"
    if not isinstance(doc, dict) or not isinstance(key, str) or not key:
        raise ValueError(f"a coreference document needs a non-empty string doc_key, got {str(doc)[:80]}")
    sentences = doc.get("sentences")
    if not isinstance(sentences, list) or not all(isinstance(s, list) and s for s in sentences):
        raise ValueError(f"{where}: sentences must be a list of non-empty word lists")
    if not all(isinstance(w, str) and w for s in sentences for w in s):
        raise ValueError(f"{where}: every word must be a non-empty string")
    n = sum(len(s) for s in sentences)
    if "speakers" in doc and [len(s) for s in doc["speakers"]] != [len(s) for s in sentences]:
        raise ValueError(f"{where}: speakers are not parallel to sentences (lengths {[len(s) for s in doc['speakers']]}"
                         f" vs {[len(s) for s in sentences]}); give one speaker per word")
    seen: dict[tuple[int, int], int] = {}
    for i, cluster in enumerate(doc.get("clusters", [])):
        for span in cluster:
            start, end = _span(span, where, f"cluster {i}", n)
            if (start, end) in seen:
                raise ValueError(f"{where}: mention [{start}, {end}] is in clusters {seen[(start, end)]} and {i}; "
                                 "a mention belongs to one cluster")
            seen[(start, end)] = i
    for span in doc.get("mentions", []):
        _span(span, where, "mentions", n)
    return doc


def _span(span, where: str, what: str, n: int) -> tuple[int, int]:
    if not (isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(x, int) for x in span)):
        raise ValueError(f"{where}: {what} holds {span!r}; a mention is [start, end] word indices")
    start, end = span
    if start > end:
        raise ValueError(f"{where}: {what} mention [{start}, {end}] starts after it ends (end is inclusive)")
    if start < 0 or end >= n:
        raise ValueError(f"{where}: {what} mention [{start}, {end}] is out of range for {n} words")
    return start, end


# -- coref-hoi jsonlines ------------------------------------------------------------------------------------------

def read_jsonlines(path) -> list[dict]:
    """Documents of a coref-hoi / CoNLL-2012 jsonlines file. Subtoken-level lines (with `subtoken_map`) become word
    level: words are their subtokens joined (WordPiece `##` continuations glued on), [CLS]/[SEP] dropped, sentences
    from `sentence_map`, a word's speaker its first subtoken's, clusters mapped through `subtoken_map`. Word indices
    are renumbered 0..n-1 in order (a word the tokenizer gave no subtoken has no position). Word-level lines (no
    `subtoken_map`) are read as they are. Every document is validated."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not a JSON line ({e})") from None
            docs.append(validate_document(_from_subtokens(raw) if "subtoken_map" in raw else raw))
    return docs


def _from_subtokens(raw: dict) -> dict:
    where = f"document {raw.get('doc_key')!r}"
    subtokens = [t for segment in raw["sentences"] for t in segment]
    speakers = [s for segment in raw.get("speakers", []) for s in segment] or None
    for name, values in (("subtoken_map", raw["subtoken_map"]), ("sentence_map", raw.get("sentence_map")),
                         ("speakers", speakers)):
        if values is None and name == "sentence_map":
            raise ValueError(f"{where}: a subtoken-level document needs sentence_map to rebuild its sentences")
        if values is not None and len(values) != len(subtokens):
            raise ValueError(f"{where}: {name} has {len(values)} entries for {len(subtokens)} subtokens")
    real = [i for i, t in enumerate(subtokens) if t not in SPECIAL_SUBTOKENS]
    words: dict[int, list[int]] = {}  # original word index -> its subtoken positions, in document order
    for i in real:
        words.setdefault(raw["subtoken_map"][i], []).append(i)
    order = sorted(words)
    if any(words[a][-1] > words[b][0] for a, b in zip(order, order[1:])):
        raise ValueError(f"{where}: subtoken_map is not monotonic over the subtokens")
    renumber = {w: j for j, w in enumerate(order)}
    sentences: dict[int, list[str]] = {}
    sentence_speakers: dict[int, list[str]] = {}
    for w in order:
        pieces = [subtokens[i] for i in words[w]]
        text = pieces[0] + "".join(p[2:] if p.startswith("##") else p for p in pieces[1:])
        sentence = raw["sentence_map"][words[w][0]]
        sentences.setdefault(sentence, []).append(text)
        if speakers is not None:
            sentence_speakers.setdefault(sentence, []).append(speakers[words[w][0]])
    clusters = []
    for c, cluster in enumerate(raw.get("clusters", [])):
        spans = []
        for start, end in cluster:
            if not (0 <= start <= end < len(subtokens)) or {subtokens[start], subtokens[end]} & SPECIAL_SUBTOKENS:
                raise ValueError(f"{where}: cluster {c} mention [{start}, {end}] is not a span of real subtokens")
            spans.append([renumber[raw["subtoken_map"][start]], renumber[raw["subtoken_map"][end]]])
        clusters.append(spans)
    extra = {k: v for k, v in raw.items() if k not in
             ("sentences", "speakers", "clusters", "subtoken_map", "sentence_map", "pronouns", "tokens")}
    doc = {**extra, "doc_key": raw["doc_key"], "sentences": [sentences[s] for s in sorted(sentences)]}
    if speakers is not None:
        doc["speakers"] = [sentence_speakers[s] for s in sorted(sentences)]
    doc["clusters"] = clusters
    return doc


# -- CoNLL-2012 -----------------------------------------------------------------------------------------------------

def read_conll(path) -> list[dict]:
    """One document per `#begin document (name); part N` block of a CoNLL-2012 file (*.gold_conll): doc_key
    `name_N` (coref-hoi's convention), words from column 4, speakers from column 10 when the rows have all 12+
    columns, clusters from the last column (`(12`, `12)`, `(12)`, joined by `|`; same-id mentions nest innermost-
    first, as the reference scorer pairs them). Validated."""
    docs, doc, rows = [], None, []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if m := _BEGIN.match(line):
                if doc is not None:
                    raise ValueError(f"{path}:{lineno}: #begin document inside document {doc!r}")
                doc, rows = f"{m['name']}_{int(m['part'])}", [[]]
            elif line.startswith("#end document"):
                if doc is None:
                    raise ValueError(f"{path}:{lineno}: #end document without #begin document")
                docs.append(validate_document(_conll_document(doc, [s for s in rows if s], f"{path}")))
                doc = None
            elif doc is None:
                if line.strip():
                    raise ValueError(f"{path}:{lineno}: a row outside any document")
            elif not line.strip():
                rows.append([])
            else:
                rows[-1].append((lineno, line.split()))
    if doc is not None:
        raise ValueError(f"{path}: document {doc!r} has no #end document")
    return docs


def _conll_document(doc_key: str, sentences: list[list[tuple[int, list[str]]]], path: str) -> dict:
    doc = {"doc_key": doc_key, "sentences": [], "speakers": []}
    open_, clusters = defaultdict(list), defaultdict(list)
    position = 0
    for sentence in sentences:
        doc["sentences"].append([])
        doc["speakers"].append([])
        for lineno, cols in sentence:
            if len(cols) < 5:
                raise ValueError(f"{path}:{lineno}: a CoNLL-2012 row needs at least 5 columns, got {cols}")
            parts = [] if cols[-1] in ("-", "_") else cols[-1].split("|")
            matches = [_COREF_CELL.match(p) for p in parts]
            if None in matches:
                raise ValueError(f"{path}:{lineno}: coreference cell {cols[-1]!r} is not made of (N, N) and (N)")
            # the scorer's order within a cell: one-word mentions, then begins, then ends
            for single, _, _ in (m.groups() for m in matches):
                if single is not None:
                    clusters[int(single)].append([position, position])
            for _, begin, _ in (m.groups() for m in matches):
                if begin is not None:
                    open_[int(begin)].append(position)
            for _, _, end in (m.groups() for m in matches):
                if end is not None:
                    if not open_[int(end)]:
                        raise ValueError(f"{path}:{lineno}: a mention of entity {end} ends without a begin")
                    clusters[int(end)].append([open_[int(end)].pop(), position])
            doc["sentences"][-1].append(cols[3])
            doc["speakers"][-1].append(cols[9] if len(cols) >= 12 else None)
            position += 1
    if unclosed := sorted(c for c, starts in open_.items() if starts):
        raise ValueError(f"{path}: document {doc_key!r}: mentions of entities {unclosed} never close")
    if any(s is None for sentence in doc["speakers"] for s in sentence):
        del doc["speakers"]
    doc["clusters"] = [sorted(clusters[c]) for c in sorted(clusters)]
    return doc


def write_conll(docs: list[dict], path, clusters_key: str = "clusters") -> Path:
    """A CoNLL-2012 file of `docs` with `doc[clusters_key]` in the coreference column, for the reference scorer
    (write the key with the gold clusters and the response with the predicted ones). Tab-separated 12 columns (the
    scorer reads the last tab-separated one): name, part, word index, word, placeholders, speaker, the coreference
    cell. A doc_key `name_N` is written as `#begin document (name); part N` (read_conll's inverse); any other as part
    000. Entity ids are cluster indices."""
    lines = []
    for doc in docs:
        validate_document({**doc, "clusters": doc.get(clusters_key, [])})
        key = doc["doc_key"]
        m = _PART_SUFFIX.match(key)
        name, part = (m["name"], int(m["part"])) if m else (key, 0)
        words = flatten(doc)
        if any(ch.isspace() for w in words for ch in w):
            raise ValueError(f"document {key!r}: a word holds whitespace, which a CoNLL row cannot carry")
        speakers = [s for sent in doc["speakers"] for s in sent] if "speakers" in doc else ["-"] * len(words)
        cells = _coref_cells(key, doc.get(clusters_key, []), len(words))
        lines.append(f"#begin document ({name}); part {part:03d}")
        i = 0
        for sentence in doc["sentences"]:
            for j in range(len(sentence)):
                speaker = re.sub(r"\s+", "_", str(speakers[i])) or "-"
                lines.append("\t".join([name, str(part), str(j), words[i], "-", "*", "-", "-", "-", speaker, "*",
                                        cells[i]]))
                i += 1
            lines.append("")
        lines.append("#end document")
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _coref_cells(key: str, clusters, n: int) -> list[str]:
    """Per word, the coreference cell. Same-cluster mentions must nest or be disjoint: the scorer pairs an end with
    the latest open begin of its entity, so crossing ones could not be read back."""
    singles, begins, ends = defaultdict(list), defaultdict(list), defaultdict(list)
    for c, cluster in enumerate(clusters):
        spans = sorted((int(s), int(e)) for s, e in cluster)
        for a in range(len(spans)):
            for b in range(a + 1, len(spans)):
                (s1, e1), (s2, e2) = spans[a], spans[b]
                if s1 < s2 <= e1 < e2:
                    raise ValueError(f"document {key!r}: cluster {c} mentions [{s1}, {e1}] and [{s2}, {e2}] cross; "
                                     "CoNLL's coreference column cannot express that")
        for s, e in spans:
            if s == e:
                singles[s].append(c)
            else:
                begins[s].append((-e, c))  # the longer mention opens first
                ends[e].append((-s, c))    # the shorter (later-starting) mention closes first
    cells = []
    for i in range(n):
        parts = [f"({c}" for _, c in sorted(begins[i])] + [f"({c})" for c in singles[i]] + \
                [f"{c})" for _, c in sorted(ends[i])]
        cells.append("|".join(parts) or "-")
    return cells
