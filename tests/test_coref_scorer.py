"""experiments.metrics' MUC, B³ and CEAF-e against the reference scorer v8.01 (`perl scorer.pl all key response
none`, from the `coref-fixtures` asset) on the two CoNLL-2012 fixture files and adversarial responses built from
them: equal numerators and denominators, and the same percentages to the two decimals the scorer prints."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from experiments.assets import require
from experiments.coref import read_conll, write_conll
from experiments.metrics import coref_counts, coref_scores

pytestmark = [pytest.mark.assets,
              pytest.mark.skipif(shutil.which("perl") is None, reason="the reference scorer needs perl (not found)")]
SCORER_NAMES = {"muc": "muc", "bcub": "b3", "ceafe": "ceafe"}
LINE = re.compile(r"Coreference: Recall: \((?P<rn>[\d.e+-]+) / (?P<rd>\d+)\) (?P<r>[\d.]+)%\s+Precision: "
                  r"\((?P<pn>[\d.e+-]+) / (?P<pd>\d+)\) (?P<p>[\d.]+)%\s+F1: (?P<f>[\d.]+)%")


@pytest.fixture(scope="module")
def fixtures():
    return require("data", "coref-fixtures")


def scorer(fixtures, key, response) -> dict[str, dict[str, float]]:
    out = subprocess.run(["perl", str(fixtures / "scorer" / "scorer.pl"), "all", str(key), str(response), "none"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    found = {}
    for block in out.split("METRIC ")[1:]:
        name = block.split(":", 1)[0]
        if name in SCORER_NAMES:
            m = LINE.search(block)
            assert m, f"no Coreference line for {name} in:\n{block}"
            found[SCORER_NAMES[name]] = {k: float(v) for k, v in m.groupdict().items()}
    assert set(found) == set(SCORER_NAMES.values()), out
    return found


def printed(x: float) -> float:
    return int(x * 10000) / 100  # the scorer truncates (Perl's int) to two decimals of a percent


def responses(docs: list[dict]) -> dict[str, list[list]]:
    """Adversarial responses for each document, name -> per-document clusters."""
    out: dict[str, list] = {name: [] for name in ("identical", "two_removed", "merged", "split", "spurious",
                                                   "singletons_only", "empty", "mixed")}
    for doc in docs:
        gold = [sorted(map(tuple, c)) for c in doc["clusters"]]
        n = sum(len(s) for s in doc["sentences"])
        used = {m for c in gold for m in c}
        free = [(i, i) for i in range(n) if (i, i) not in used]
        out["identical"].append(gold)
        two = [i for i, c in enumerate(gold) if len(c) == 2][-2:]  # docs/ASSETS.md: two (2-mention) clusters removed
        out["two_removed"].append([c for i, c in enumerate(gold) if i not in two])
        out["merged"].append([gold[0] + gold[1]] + gold[2:])
        out["split"].append([half for c in gold for half in ((c[:len(c) // 2], c[len(c) // 2:]) if len(c) > 2
                                                           else (c,))])
        # twinless mentions: one added to every other cluster, a spurious 2-mention entity, a spurious singleton
        extra, pairs = iter(free[:len(gold)]), free[len(gold):len(gold) + 3]
        out["spurious"].append([c + [next(extra)] if i % 2 == 0 else c for i, c in enumerate(gold)]
                               + [pairs[:2], pairs[2:3]])
        out["singletons_only"].append([[m] for c in gold for m in c])
        out["empty"].append([])
        # a bit of everything: first cluster loses a mention to a new twinless-mixed cluster, the last two merge
        tail = gold[1:-2] + [gold[-2] + gold[-1]] if len(gold) > 2 else gold[1:]
        out["mixed"].append([gold[0][1:], [gold[0][0], free[0]]] + tail)
    return out


@pytest.mark.parametrize("corpus", ["nt_6401.gold_conll", "coref.gold_conll", "both"])
def test_scores_equal_the_reference_scorer(fixtures, tmp_path, corpus):
    names = ["nt_6401.gold_conll", "coref.gold_conll"] if corpus == "both" else [corpus]
    docs = [d for name in names for d in read_conll(fixtures / name)]
    # The key is our own copy: coref.gold_conll separates sentences with lines holding one space, which the scorer
    # (it skips only truly empty lines) counts as tokens, so its mention offsets would not line up with a response
    # written with empty separator lines. test_conll_round_trip_of_the_fixtures scores against nt_6401's original.
    key = write_conll(docs, tmp_path / "key.conll")
    for name, clusters in responses(docs).items():
        response = write_conll([{**d, "clusters": c} for d, c in zip(docs, clusters)], tmp_path / f"{name}.conll")
        theirs = scorer(fixtures, key, response)
        pairs = [(c, d["clusters"]) for d, c in zip(docs, clusters)]
        ours, counts = coref_scores(pairs), {k: sum(v) for k, v in coref_counts(pairs).items()}
        for metric, t in theirs.items():
            where = f"{corpus}, response {name}, {metric}"
            assert (counts[f"{metric}_r_num"], counts[f"{metric}_r_den"], counts[f"{metric}_p_num"],
                    counts[f"{metric}_p_den"]) == pytest.approx((t["rn"], t["rd"], t["pn"], t["pd"]), abs=1e-9), where
            assert (printed(ours[f"{metric}_r"]), printed(ours[f"{metric}_p"]), printed(ours[f"{metric}_f1"])) == \
                (t["r"], t["p"], t["f"]), where


def test_two_clusters_removed_from_nt_6401_gives_the_documented_f1(fixtures, tmp_path):
    """docs/ASSETS.md: nt_6401 against a copy with two clusters removed scores MUC 98.63, B³ 97.70, CEAF-e 92.85."""
    doc, = read_conll(fixtures / "nt_6401.gold_conll")
    assert (len(doc["clusters"]), sum(len(c) for c in doc["clusters"])) == (15, 89)
    # removing any two 2-mention clusters gives these numbers: MUC R = (74 - 2) / 74, P = 1, F1 = 144/146
    two = [i for i, c in enumerate(doc["clusters"]) if len(c) == 2][:2]
    pred = [c for i, c in enumerate(doc["clusters"]) if i not in two]
    response = write_conll([{**doc, "clusters": pred}], tmp_path / "response.conll")
    theirs = scorer(fixtures, fixtures / "nt_6401.gold_conll", response)
    ours = coref_scores([(pred, doc["clusters"])])
    assert [theirs[m]["f"] for m in ("muc", "b3", "ceafe")] == [98.63, 97.70, 92.85]
    assert [printed(ours[f"{m}_f1"]) for m in ("muc", "b3", "ceafe")] == [98.63, 97.70, 92.85]


def test_conll_round_trip_of_the_fixtures(fixtures, tmp_path):
    for name in ("nt_6401.gold_conll", "coref.gold_conll"):
        docs = read_conll(fixtures / name)
        assert read_conll(write_conll(docs, tmp_path / name)) == docs
    # the scorer reads our copy of nt_6401 as it reads the original (whose separators are empty lines): 100 on all
    theirs = scorer(fixtures, fixtures / "nt_6401.gold_conll", tmp_path / "nt_6401.gold_conll")
    assert all((t["rn"], t["r"], t["p"], t["f"]) == (t["rd"], 100, 100, 100) for t in theirs.values())
