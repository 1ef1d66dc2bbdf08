"""Coreference metrics (experiments.metrics: MUC, B³, CEAF-e, CoNLL F1) on hand-worked cases, and the document
readers/writer of experiments.coref on handmade files. tests/test_coref_scorer.py checks both against the reference
scorer v8.01."""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from experiments.coref import read_conll, read_jsonlines, validate_document, write_conll
from experiments.metrics import b_cubed, ceaf_e, coref_counts, coref_scores, declared, higher_is_better, muc

approx = pytest.approx
FIXTURES = Path(__file__).parent / "fixtures" / "coref"

# Pradhan et al. 2014, "Scoring coreference partitions of predicted mentions", the running example (Fig. 1):
# key {a b c} {d e f g}; response {a b} {c d} {f g h i} (e missed, h and i invented).
KEY = [["a", "b", "c"], ["d", "e", "f", "g"]]
RESPONSE = [["a", "b"], ["c", "d"], ["f", "g", "h", "i"]]


def test_pradhan_2014_worked_example():
    doc = [(RESPONSE, KEY)]
    # MUC: key {abc} is split by the response into {ab}{c}: 3-2 = 1 link kept; {defg} into {d}{e}{fg}: 4-3 = 1;
    # R = 2 / ((3-1) + (4-1)) = 2/5. Response {ab}: 1 part, 2-1 = 1; {cd}: 2 parts, 0; {fghi}: {fg}{h}{i}, 4-3 = 1;
    # P = 2 / (1 + 1 + 3) = 2/5.
    assert muc(doc) == approx({"r": 2 / 5, "p": 2 / 5, "f1": 2 / 5})
    # B³ recall over the 7 key mentions: a, b: 2/3 each; c: 1/3; d: 1/4; e: 0; f, g: 2/4 each -> (35/12) / 7 = 5/12.
    # precision over the 8 response mentions: a, b: 2/2 each; c, d: 1/2 each; f, g: 2/4 each; h, i: 0 -> 4/8.
    b3 = b_cubed(doc)
    assert (b3["r"], b3["p"]) == approx((5 / 12, 1 / 2))
    assert b3["f1"] == approx(2 * (5 / 12) * (1 / 2) / (5 / 12 + 1 / 2))
    # CEAF-e, phi4 = 2|K∩R| / (|K| + |R|): {abc}-{ab} 4/5, {abc}-{cd} 2/5, {defg}-{cd} 2/6, {defg}-{fghi} 4/8.
    # Best alignment {abc}-{ab}, {defg}-{fghi}: 4/5 + 1/2 = 13/10; R = (13/10) / 2 key entities = 0.65,
    # P = (13/10) / 3 response entities = 13/30.
    assert ceaf_e(doc) == approx({"r": 0.65, "p": 13 / 30, "f1": 2 * 0.65 * (13 / 30) / (0.65 + 13 / 30)})
    s = coref_scores(doc)
    assert s["conll_f1"] == approx((s["muc_f1"] + s["b3_f1"] + s["ceafe_f1"]) / 3)
    assert set(s) == {f"{m}_{q}" for m in ("muc", "b3", "ceafe") for q in ("p", "r", "f1")} | {"conll_f1"}


def test_scores_accumulate_over_the_corpus_not_per_document():
    big = [list(range(10))]  # one 10-mention entity, found exactly: 9 of 9 links
    small_gold, small_pred = [["x", "y"]], []  # a 2-mention entity, not found: 0 of 1 link
    docs = [(big, big), (small_pred, small_gold)]
    # corpus MUC: R = (9 + 0) / (9 + 1) = 0.9, P = 9 / (9 + 0) = 1, F1 = 2 * 0.9 / 1.9 = 18/19;
    # the mean of the per-document F1s would be (1 + 0) / 2 = 0.5
    assert muc(docs)["f1"] == approx(18 / 19)
    per_doc = [muc([d])["f1"] for d in docs]
    assert per_doc == [1.0, 0.0] and muc(docs)["f1"] != approx(sum(per_doc) / 2)
    # B³ recall: (10 + 0) / 12 key mentions; CEAF-e recall: 1 / 2 key entities
    assert b_cubed(docs)["r"] == approx(10 / 12) and ceaf_e(docs)["r"] == approx(1 / 2)
    counts = coref_counts(docs)
    assert counts["muc_r_num"] == [9, 0] and counts["muc_r_den"] == [9, 1] and counts["b3_p_den"] == [10, 0]


def test_singletons_count_in_b3_and_ceafe_but_not_in_muc():
    gold = [["a", "b"], ["c"]]  # "c" is a gold singleton
    found = coref_scores([([["a", "b"]], gold)])
    # MUC: links 1/1 on both sides. B³ R: a, b 2/2 each, c 0 -> 2/3; P 2/2. CEAF-e R: 1 of 2 entities, P 1 of 1.
    assert (found["muc_r"], found["muc_p"]) == (1.0, 1.0)
    assert (found["b3_r"], found["b3_p"], found["ceafe_r"], found["ceafe_p"]) == approx((2 / 3, 1, 1 / 2, 1))
    # the singleton found as well: everything 1
    assert coref_scores([([["a", "b"], ["c"]], gold)])["conll_f1"] == 1.0
    # a spurious singleton "z" costs B³ precision (2/3) and CEAF-e precision (1/2), never MUC
    spurious = coref_scores([([["a", "b"], ["z"]], [["a", "b"]])])
    assert (spurious["muc_p"], spurious["muc_r"], spurious["b3_r"], spurious["ceafe_r"]) == (1, 1, 1, 1)
    assert (spurious["b3_p"], spurious["ceafe_p"]) == approx((2 / 3, 1 / 2))


def test_twinless_mentions_inside_a_cluster_cost_precision():
    # response {a b z}: z is not a gold mention. MUC P = 1 correct link of 2; B³ P = (2/3 + 2/3 + 0) / 3 = 4/9;
    # CEAF-e phi4({a b}, {a b z}) = 4/5 for both R (1 entity) and P (1 entity).
    s = coref_scores([([["a", "b", "z"]], [["a", "b"]])])
    assert (s["muc_r"], s["muc_p"], s["b3_r"], s["b3_p"]) == approx((1, 1 / 2, 1, 4 / 9))
    assert (s["ceafe_r"], s["ceafe_p"]) == approx((4 / 5, 4 / 5))


def test_empty_response_and_empty_gold_score_zero():
    zero = {k: 0.0 for k in coref_scores([([["a", "b"]], [["a", "b"]])])}
    assert coref_scores([([], [["a", "b"], ["c"]])]) == zero
    assert coref_scores([([["a", "b"]], [])]) == zero
    assert coref_scores([([], [])]) == zero
    assert coref_scores([([[]], [["a", "b"]])]) == zero  # an empty cluster is no cluster


def test_json_lists_are_mentions_like_tuples():
    as_lists = [([[[0, 1], [5, 5]], [[7, 8]]], [[[0, 1], [5, 5], [7, 8]]])]
    as_tuples = [([[(0, 1), (5, 5)], [(7, 8)]], [[(0, 1), (5, 5), (7, 8)]])]
    assert coref_scores(as_lists) == coref_scores(as_tuples)
    # MUC: gold {01 55 78} split in two by the response: R = (3 - 2) / 2, P = 1 / 1
    assert coref_scores(as_lists)["muc_r"] == 0.5


def test_ceafe_alignment_is_optimal():
    """The Hungarian alignment equals the best of all one-to-one alignments on random small partitions."""
    rng = random.Random(0)
    for _ in range(40):
        mentions = list(range(rng.randint(1, 9)))
        gold = _random_partition(rng, mentions)
        pred = _random_partition(rng, [m for m in mentions if rng.random() < 0.8] + [100, 101][:rng.randint(0, 2)])
        best = 0.0
        small, large = (gold, pred) if len(gold) <= len(pred) else (pred, gold)
        for perm in itertools.permutations(range(len(large)), len(small)):
            best = max(best, sum(2 * len(set(a) & set(large[j])) / (len(a) + len(large[j]))
                                 for a, j in zip(small, perm)))
        assert sum(coref_counts([(pred, gold)])["ceafe_r_num"]) == approx(best)


def _random_partition(rng, mentions):
    clusters: dict[int, list] = {}
    for m in mentions:
        clusters.setdefault(rng.randint(0, 3), []).append(m)
    return list(clusters.values())


def test_duplicated_mentions_and_bad_input_are_errors():
    with pytest.raises(ValueError, match=r"document 0: predicted mention \(0, 1\) appears twice"):
        coref_scores([([[[0, 1], [2, 2]], [[0, 1]]], [[[0, 1], [2, 2]]])])
    with pytest.raises(ValueError, match="document 1: gold mention 'a' appears twice"):
        coref_scores([([], []), ([], [["a", "b", "a"]])])
    with pytest.raises(ValueError, match="pair"):
        coref_scores([([["a", "b"]],)])
    with pytest.raises(ValueError, match="no documents"):
        coref_scores([])
    with pytest.raises(ValueError, match="list of clusters"):
        coref_scores([("ab", [["a", "b"]])])


def test_metric_keys_are_declared_higher_is_better():
    for key in ("conll_f1", "dev/conll_f1", "eval/muc_p", "eval/b3_r", "wsc/ceafe_f1", "dev/b3_f1"):
        assert declared(key) and higher_is_better(key) is True, key
    assert higher_is_better("eval/conll_f1_lo") is None


# ---------------------------------------------------------------- readers and writer

def test_read_jsonlines_maps_subtokens_to_words():
    sub, word = read_jsonlines(FIXTURES / "handmade.jsonlines")
    # subtokens [CLS] John went to Wash ##ington . He [SEP] | [CLS] liked it there . [SEP]; sentence_map puts "He" in
    # the second sentence although it sits in the first segment
    assert sub["sentences"] == [["John", "went", "to", "Washington", "."], ["He", "liked", "it", "there", "."]]
    assert sub["speakers"] == [["a"] * 5, ["b"] * 5]
    # John (subtoken 1) ~ He (7) -> words 0 ~ 5; Wash ##ington (4-5) ~ there (12) -> words 3 ~ 8
    assert sub["clusters"] == [[[0, 0], [5, 5]], [[3, 3], [8, 8]]]
    assert sub["genre"] == "nw" and "subtoken_map" not in sub and "pronouns" not in sub
    assert word == json.loads((FIXTURES / "handmade.jsonlines").read_text().splitlines()[1])


def test_read_jsonlines_rejects_mentions_on_special_subtokens(tmp_path):
    raw = json.loads((FIXTURES / "handmade.jsonlines").read_text().splitlines()[0])
    raw["clusters"] = [[[0, 1], [7, 7]]]  # starts on [CLS]
    (path := tmp_path / "bad.jsonlines").write_text(json.dumps(raw) + "\n")
    with pytest.raises(ValueError, match=r"'nw/handmade/00/doc_0': cluster 0 mention \[0, 1\]"):
        read_jsonlines(path)


def doc_with_nesting() -> dict:
    return {"doc_key": "bc/test/00/doc_2",
            "sentences": [["Mary", "'s", "sister", "saw", "her", "."], ["She", "waved", "."]],
            "speakers": [["A"] * 6, ["speaker two"] * 3],
            # entity 0 holds nested mentions 0-1 and 0-2 (same start), entity 1 a singleton inside 0-2,
            # entity 2 the next word (adjacent)
            "clusters": [[[0, 1], [0, 2], [4, 4], [6, 6]], [[2, 2]], [[3, 3], [7, 7]]]}


def test_write_then_read_conll_round_trips(tmp_path):
    doc = doc_with_nesting()
    path = write_conll([doc], tmp_path / "key.conll")
    assert path.read_text().splitlines()[0] == "#begin document (bc/test/00/doc); part 002"
    back, = read_conll(path)
    assert back == {**doc, "speakers": [["A"] * 6, ["speaker_two"] * 3]}  # whitespace cannot live in a column
    # the response column: predicted clusters under another key
    pred = {**doc, "predicted": [[[0, 2], [6, 6]]]}
    back, = read_conll(write_conll([pred], tmp_path / "resp.conll", "predicted"))
    assert back["clusters"] == [[[0, 2], [6, 6]]]


def test_write_conll_refuses_crossing_mentions_of_one_entity(tmp_path):
    doc = {**doc_with_nesting(), "clusters": [[[0, 2], [2, 4]]]}
    with pytest.raises(ValueError, match=r"cluster 0 mentions \[0, 2\] and \[2, 4\] cross"):
        write_conll([doc], tmp_path / "x.conll")


def test_read_conll_parses_cells_like_the_scorer(tmp_path):
    rows = ["#begin document (x); part 000", "x 0 0 A - - - - - s - (1|(2)", "x 0 1 B - - - - - s - 1)", "",
            "x 0 2 C - - - - - s - (1)", "#end document"]
    (path := tmp_path / "x.gold_conll").write_text("\n".join(rows) + "\n")
    doc, = read_conll(path)
    assert doc == {"doc_key": "x_0", "sentences": [["A", "B"], ["C"]], "speakers": [["s", "s"], ["s"]],
                   "clusters": [[[0, 1], [2, 2]], [[0, 0]]]}
    (path := tmp_path / "open.gold_conll").write_text("\n".join(rows[:2] + rows[-1:]) + "\n")
    with pytest.raises(ValueError, match=r"'x_0': mentions of entities \[1\] never close"):
        read_conll(path)


@pytest.mark.parametrize("change, message", [
    ({"clusters": [[[0, 9]]]}, r"\[0, 9\] is out of range for 9 words"),
    ({"clusters": [[[3, 2]]]}, r"\[3, 2\] starts after it ends"),
    ({"clusters": [[[0, 0], [3, 3]], [[3, 3]]]}, r"\[3, 3\] is in clusters 0 and 1"),
    ({"speakers": [["A"] * 6, ["B"] * 2]}, "speakers are not parallel"),
])
def test_validate_document_names_the_document_and_the_problem(change, message):
    with pytest.raises(ValueError, match=r"document 'bc/test/00/doc_2'.*" + message):
        validate_document({**doc_with_nesting(), **change})
