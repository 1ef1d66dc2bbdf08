"""The offline coreference targets (scripts/datasets_to_jsonl.py): WinoGrande as 3-mention documents, WSC273 recovered
from BIG-bench winowhy, Quoref in SQuAD's columns. Parsing on hand-written BIG-bench-shaped inputs, the committed
fixtures, the task configs and (marked `assets`) the built assets."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from experiments import REPO, data
from experiments.assets import MANIFEST, require
from experiments.config import compose
from experiments.coref import validate_document
from experiments.models import byte_tokenizer
from scripts.datasets_to_jsonl import (DataCheckError, answer_start, find_spans, quoref_rows, winogrande_document,
                                       winogrande_documents, winowhy_problems, words, wsc_documents)

WG_FIXTURE = REPO / "tests" / "fixtures" / "winogrande-coref.jsonl"
QUOREF_FIXTURE = REPO / "tests" / "fixtures" / "quoref.jsonl"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check_three_mention_doc(doc: dict) -> None:
    """The schema, and what a WinoGrande/WSC document promises: three distinct mentions (two candidates and the
    blank), the gold cluster = {the answer, the blank}, the other candidate alone."""
    validate_document(doc)  # spans in range, start <= end, a mention in one cluster only
    cands, blank, answer = doc["candidates"], doc["blank"], doc["answer"]
    assert answer in (0, 1) and len(cands) == 2 and blank[0] == blank[1]
    assert doc["mentions"] == sorted([*cands, blank]) and len({tuple(m) for m in doc["mentions"]}) == 3
    assert doc["clusters"] == [sorted([cands[answer], blank]), [cands[1 - answer]]]
    n = sum(len(s) for s in doc["sentences"])
    assert all(0 <= s <= e < n for s, e in doc["mentions"])


# -- words and spans --------------------------------------------------------------------------------------------------


def test_words_split_punctuation_and_clitics_and_keep_the_blank_whole():
    assert words("PersonX's dog didn't bark, so _'s cat ran.") == \
        ["PersonX", "'s", "dog", "did", "n't", "bark", ",", "so", "_", "'s", "cat", "ran", "."]
    assert words("the _.") == ["the", "_", "."] and words("a well-known 'quote'") == \
        ["a", "well", "-", "known", "'", "quote", "'"]


def test_find_spans_is_whole_word_case_insensitive_and_allows_a_plural():
    tokens = words("Chocolates beat the feather dusters; a category of cats.")
    assert find_spans(tokens, "chocolate") == [[0, 0]]
    assert find_spans(tokens, "feather duster") == [[3, 4]]  # multi-word, plural on the last word
    assert find_spans(tokens, "cat") == [[9, 9]]  # not the start of "category"
    assert find_spans(tokens, "dog") == [] and find_spans(tokens, "") == []


# -- winogrande-coref -----------------------------------------------------------------------------------------------


def row(sentence: str, option1: str, option2: str, label: int, group: str = "g/0") -> dict:
    return {"sentence": sentence, "option1": option1, "option2": option2, "label": label, "kind": "object",
            "group": group}


def test_winogrande_document_links_the_answer_and_the_blank():
    doc, why = winogrande_document(row("The ski mask kept me warmer than the scarf, as the _ was wool.",
                                       "ski mask", "scarf", 1), twin=1)
    assert why == ""
    check_three_mention_doc(doc)
    assert doc["sentences"][0][12] == "_" and doc["blank"] == [12, 12]
    assert doc["candidates"] == [[1, 2], [8, 8]] and doc["clusters"] == [[[8, 8], [12, 12]], [[1, 2]]]
    assert doc["doc_key"] == "wg/g/0/1" and doc["label"] == doc["answer"] == 1


@pytest.mark.parametrize("sentence,option1,option2,reason", [
    ("The man gave the man's hat to the boy because the _ was cold.", "man", "boy", "candidate found more than once"),
    ("The ski mask was warmer than the cap since the _ was wool.", "ski", "ski mask", "candidates overlap"),
    ("The e-mail reached the desk before the _ was cleared.", "email", "desk", "candidate not whole words"),
])
def test_winogrande_document_refuses_a_candidate_without_one_span(sentence, option1, option2, reason):
    assert winogrande_document(row(sentence, option1, option2, 0), 0) == (None, reason)


def test_a_twin_group_is_dropped_whole():
    good = [row("The cup beat the mug as the _ was new.", "cup", "mug", 0, "g/1"),
            row("The cup beat the mug as the _ was old.", "cup", "mug", 1, "g/1")]
    bad = [row("The cup beat the mug as the _ was new.", "cup", "mug", 0, "g/2"),
           row("The cup and the cup beat the mug as the _ was old.", "cup", "mug", 1, "g/2")]
    docs, dropped = winogrande_documents(good + bad)
    assert [d["doc_key"] for d in docs] == ["wg/g/1/0", "wg/g/1/1"]
    assert dropped == Counter({"object: candidate found more than once": 1})


def test_fixture_documents_are_valid_three_mention_documents():
    docs = read(WG_FIXTURE)
    assert len(docs) == 12 and {d["split"] for d in docs} == {"train", "eval"}
    for doc in docs:
        check_three_mention_doc(doc)
        tokens = doc["sentences"][0]
        assert tokens[doc["blank"][0]] == "_"
        for (s, e), option in zip(doc["candidates"], (doc["option1"], doc["option2"])):
            assert find_spans(tokens[s:e + 1], option) == [[0, e - s]], (doc["doc_key"], option)
    assert any(s < e for d in docs for s, e in d["candidates"])  # a multi-word candidate
    splits = defaultdict(set)
    for d in docs:
        splits[d["group"]].add(d["split"])
    assert all(len(s) == 1 for s in splits.values())
    assert Counter(d["answer"] for d in docs) == Counter({0: 6, 1: 6})


def test_coref_task_loads_nested_spans_through_load_splits_and_load_rows():
    cfg = compose("task=winogrande-coref", "data.source=fixture")
    assert cfg.task.type == "coref" and cfg.task.type in data.TASK_TYPES and cfg.task.stand_in_for == "conll2012"
    ds = data.load_splits(cfg.task, cfg.data)
    assert set(ds) == {"train", "eval", "dev"} and len(ds["train"]) == 8 and len(ds["eval"]) == 4
    by_key = {d["doc_key"]: d for d in read(WG_FIXTURE)}
    for doc in ds["eval"]:  # load_dataset("json") keeps the nested lists (spans inside clusters inside documents)
        assert doc["clusters"] == by_key[doc["doc_key"]]["clusters"]
        assert doc["sentences"] == by_key[doc["doc_key"]]["sentences"]
    rows = data.load_rows(cfg.task, cfg.data, "train")
    assert [r["doc_key"] for r in rows] == [k for k, d in by_key.items() if d["split"] == "train"]


def test_coref_documents_have_no_token_encoder():
    cfg = compose("task=winogrande-coref", "data.source=fixture")
    ds = data.load_splits(cfg.task, cfg.data)
    with pytest.raises(ValueError, match="task type 'coref' has no encoder here.*reverse_probing"):
        data.encode(ds["eval"], byte_tokenizer(), cfg.task, 64, train=False)


@pytest.mark.parametrize("name", ["winogrande-coref", "wsc273", "quoref", "conll2012"])
def test_task_configs_are_labelled_stand_ins_with_their_objective(name):
    task = compose(f"task={name}").task
    assert task.objective.removeprefix("eval/") in list(task.metrics) and (REPO / task.fixture).exists()
    assert task.stand_in_for == "conll2012" or name == "conll2012"
    assert task.type == ("qa" if name == "quoref" else "coref")


# -- wsc273 ---------------------------------------------------------------------------------------------------------


def statement(sentence: str, pronoun: str, answer: str, reason: str = "it is so.") -> dict:
    return {"input": f"{sentence} The '{pronoun}' refers to {answer} because {reason}",
            "target_scores": {"correct": 1, "incorrect": 0}}


def test_winowhy_problems_are_distinct_sentence_pronoun_pairs():
    examples = [statement("The cup fell off the shelf because it was round.", "it", "the cup"),
                statement("The cup fell off the shelf because it was round.", "it", "the cup", "cups roll."),
                statement("The cup fell off the shelf because it was tilted.", "it", "the shelf")]
    assert winowhy_problems(examples) == [
        {"sentence": "The cup fell off the shelf because it was round.", "pronoun": "it", "answer": "the cup"},
        {"sentence": "The cup fell off the shelf because it was tilted.", "pronoun": "it", "answer": "the shelf"}]
    with pytest.raises(DataCheckError, match="both 'the cup' and 'the shelf'"):
        winowhy_problems(examples[:1] + [statement("The cup fell off the shelf because it was round.", "it",
                                                   "the shelf")])
    with pytest.raises(DataCheckError, match="is not"):
        winowhy_problems([{"input": "no statement here", "target_scores": {}}])


def test_wsc_documents_take_the_wrong_candidate_from_the_twin():
    problems = [  # a twin pair, then a pair whose names are not in the sentences, then a lone problem
        {"sentence": "The trophy doesn't fit into the brown suitcase because it is too large.", "pronoun": "it",
         "answer": "the trophy"},
        {"sentence": "The trophy doesn't fit into the brown suitcase because it is too small.", "pronoun": "it",
         "answer": "the suitcase"},
        {"sentence": "I saw Jim yelling at some guy. I don't know why he was, but he looked upset.", "pronoun": "he",
         "answer": "jim"},
        {"sentence": "I saw Jim yelling at some guy. I don't know who he was, but he looked upset.", "pronoun": "he",
         "answer": "the man in the hat"},
        {"sentence": "Lonely Tom waved at the bus.", "pronoun": "Tom", "answer": "tom"}]
    docs, dropped = wsc_documents(problems)
    assert dropped == Counter({"candidate not in sentence": 2, "twin group does not name two candidates": 1})
    first, second = docs
    for doc in docs:
        check_three_mention_doc(doc)
    tokens = first["sentences"][0]
    # "the suitcase" names "the brown suitcase": the span grows over the modifier to the sentence's determiner
    assert [tokens[s:e + 1] for s, e in first["candidates"]] == [["The", "trophy"], ["the", "brown", "suitcase"]]
    assert tokens[first["blank"][0]] == "it" and (first["answer"], second["answer"]) == (0, 1)
    assert first["group"] == second["group"] and first["doc_key"] == "wsc/0"


def test_a_repeated_pronoun_is_the_one_beside_the_twin_difference():
    problems = [
        {"sentence": "Luckily, it was short, so it worked out: the meeting beat the train.", "pronoun": "it",
         "answer": "the meeting"},
        {"sentence": "Luckily, it was delayed, so it worked out: the meeting beat the train.", "pronoun": "it",
         "answer": "the train"},
        {"sentence": "Emma did not pass to Janie although she saw that she was open.", "pronoun": "she",
         "answer": "emma"},
        {"sentence": "Emma did not pass to Janie although she was open.", "pronoun": "she", "answer": "janie"}]
    docs, dropped = wsc_documents(problems)
    assert not dropped
    assert [d["blank"][0] for d in docs] == [2, 2, 7, 7]  # the first "it" in both; "she saw", not "she was open"


# -- quoref ---------------------------------------------------------------------------------------------------------


def quoref_example(passage: str, question: str, *answers: str) -> dict:
    return {"input": f"Passage: {passage} \nQuestion: {question}", "target": [f"{a}." for a in answers]}


def test_quoref_rows_locate_answers_and_drop_what_one_span_cannot_answer():
    passage = "Lambert met Ann Lamb in Rome. Later Lamb wrote to him from St. Ives."
    examples = [quoref_example(passage, "Who wrote to Lambert?", "Lamb"),
                quoref_example(passage, "Where was the letter sent from?", "St. Ives"),
                quoref_example(passage, "Who met in Rome?", "Lambert", "Ann Lamb"),
                quoref_example(passage, "Who is absent?", "Carl"),
                quoref_example("Another passage about Carl.", "Who?", "Carl")]
    rows, dropped, passages = quoref_rows(examples)
    assert passages == 2 and dropped == Counter({"multi-span answer": 1, "answer not in passage": 1})
    assert [r["answers"] for r in rows] == [{"text": ["Lamb"], "answer_start": [16]},  # whole word, not "Lambert"
                                            {"text": ["St. Ives"], "answer_start": [59]},
                                            {"text": ["Carl"], "answer_start": [22]}]
    assert [r["title"] for r in rows] == ["passage/0", "passage/0", "passage/4"]
    assert answer_start("Lamberts", "Lamb") == 0 and answer_start("x", "y") is None  # substring fallback; absent
    with pytest.raises(DataCheckError, match="quoref example 0"):
        quoref_rows([{"input": "Question first", "target": ["x."]}])


def test_quoref_fixture_runs_through_the_qa_encoder():
    rows = read(QUOREF_FIXTURE)
    assert all(r["context"][r["answers"]["answer_start"][0]:].startswith(r["answers"]["text"][0]) for r in rows)
    titles = defaultdict(set)
    for r in rows:
        titles[r["title"]].add(r["split"])
    assert all(len(s) == 1 for s in titles.values()) and {r["split"] for r in rows} == {"train", "eval"}
    cfg = compose("task=quoref", "data.source=fixture")
    ds = data.load_splits(cfg.task, cfg.data)
    enc = data.encode(ds["train"], byte_tokenizer(), cfg.task, 256, train=True)  # some answers fall outside a window
    tok = byte_tokenizer()
    answers = [tok.decode(f["input_ids"][f["start_positions"]:f["end_positions"] + 1]) for f in enc
               if f["start_positions"] > 0]
    # the windows that hold an answer label exactly its word pieces (the byte tokenizer's decode drops spaces)
    assert answers and set(answers) <= {r["answers"]["text"][0].replace(" ", "") for r in rows}


# -- the built assets -------------------------------------------------------------------------------------------------


def manifest_counts(name: str) -> tuple[Path, dict]:
    path = require("data", name)
    return path, json.loads((path / MANIFEST).read_text())["counts"]


@pytest.mark.assets
def test_winogrande_coref_asset_counts_twins_and_balance():
    path, counts = manifest_counts("winogrande-coref")
    docs = {s: read(path / f"{s}.jsonl") for s in ("train", "dev", "eval")}
    assert {s: len(d) for s, d in docs.items()} == {"train": 44578, "dev": 5614, "eval": 5776}
    assert counts["total"] == 55968 and counts["dropped_groups"] == {"object: candidate found more than once": 266}
    where = defaultdict(set)
    for split, split_docs in docs.items():
        answers = Counter(d["answer"] for d in split_docs)
        assert answers[0] == answers[1] == len(split_docs) // 2, split  # twins have opposite answers
        for d in split_docs:
            where[d["group"]].add(split)
            check_three_mention_doc(d)
            assert d["sentences"][0][d["blank"][0]] == "_"
    assert all(len(s) == 1 for s in where.values())  # twins never straddle splits
    # the same split as the winogrande asset, group by group
    wg = {r["group"]: s for s in ("train", "dev", "eval") for r in read(require("data", "winogrande") / f"{s}.jsonl")}
    assert all(wg[g] == next(iter(s)) for g, s in where.items())


@pytest.mark.assets
def test_wsc273_asset_has_its_documented_count_and_valid_documents():
    path, counts = manifest_counts("wsc273")
    docs = read(path / "eval.jsonl")
    assert len(docs) == counts["eval"] == 249 and counts["problems"] == 273
    assert counts["dropped"] == {"candidate not in sentence": 24}
    for d in docs:
        check_three_mention_doc(d)
        assert d["sentences"][0][d["blank"][0]] == d["pronoun"]
    assert 0.4 < sum(d["answer"] for d in docs) / len(docs) < 0.6


@pytest.mark.assets
def test_quoref_asset_splits_by_passage_and_answer_starts_point_at_their_text():
    path, counts = manifest_counts("quoref")
    rows = {s: read(path / f"{s}.jsonl") for s in ("train", "dev", "eval")}
    assert {s: len(r) for s, r in rows.items()} == {"train": 4694, "dev": 518, "eval": 608}
    assert counts["passages"] == 2942 and counts["dropped"] == {"multi-span answer": 680}
    passages = {s: {r["context"] for r in split_rows} for s, split_rows in rows.items()}
    assert not (passages["train"] & passages["dev"] or passages["train"] & passages["eval"]
                or passages["dev"] & passages["eval"])
    for split_rows in rows.values():
        for r in split_rows:
            (text,), (start,) = r["answers"]["text"], r["answers"]["answer_start"]
            assert text and r["context"][start:start + len(text)] == text, r["id"]
