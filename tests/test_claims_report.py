"""The claims pages from synthetic rows: REPORT.md's banner, counts, sentences and narrow index are generated from the
rows (a changed verdict or a paper-scale row changes them), the page stays under its size limit, every result names
its statistic, CLAIMS.md keeps the paper's values whole and claims.json round-trips."""
from __future__ import annotations

import json
import re

import pytest

from experiments.evidence import claims, report, verdicts

OFFLINE = "cpu, offline stand-ins; rt-polarity for SST-2, minilm-l6 for BERT-base; 1000 train / 1244 eval examples"
STAND_INS = {"rt-polarity": "SST-2", "minilm-l6": "BERT-base (6 of its 12 layers)"}


def claim(cid: str, kind: str = "paper", values=None, labels=("",), text: str | None = None, **kw) -> claims.Claim:
    comps = tuple(claims.Comparison(label=lb, metric="objective", units="points",
                                    test=claims.Test("difference", at_least=-1.0),
                                    a={"method.variant": "reduced"}, b={"method.variant": "full"},
                                    pair_by=("model.name", "task.name", "seed")) for lb in labels)
    return claims.Claim(id=cid, claim=text or f"The claim {cid} holds on every task.", where="Table 1",
                        values=values if values is not None else {"SST-2": {"reduced": 77.6, "full": 75.4}},
                        comparisons=comps, needs_signal=True, kind=kind, **kw)


def outcome(verdict: str = "holds", est: float = 2.5, ci=(1.0, 4.0), label: str = "", **kw) -> verdicts.Outcome:
    return verdicts.Outcome(label=label, verdict=verdict, estimate=est, ci=ci, n="n=1 seed x 1244 examples",
                            statistic=kw.pop("statistic", "a − b, accuracy points"),
                            interval=kw.pop("interval", "paired bootstrap over 1244 examples"), **kw)


def row(c: claims.Claim, verdict: str = "holds", outcomes=None, scale: str = OFFLINE, **kw) -> verdicts.Row:
    outs = outcomes if outcomes is not None else [outcome(verdict)]
    return verdicts.Row(claim=c, scale=scale, verdict=verdict, reason=kw.pop("reason", ""), outcomes=outs,
                        evidence=[], **kw)


def papers() -> dict:
    return {
        "alpha": [row(claim("rdc-close-to-full"), "does not hold",
                      [outcome("does not hold", -2.7, (-4.5, -0.8), p=0.002)], holm=True),
                  row(claim("half-adapters"), "holds", [outcome("holds", 1.5, (0.4, 2.6), p=0.01)], holm=False,
                      fragile=["the signal guard at 3 points instead of 2: inconclusive"]),
                  row(claim("qa-trails"), "not run", [], scale="-", reason="squad-dev is not in the CPU tier"),
                  row(claim("speed-ours", kind="target"), "holds"),
                  row(claim("merge-exact", kind="implementation"), "holds",
                      [outcome("holds", 0.0, None, statistic="max |Δ logit|", interval="exact")]),
                  row(claim("ratio-is-two", kind="by-construction", why="the ratio of widths: a check on the code"),
                      "holds")],
        "beta": [row(claim("probe-signal"), "not testable here",
                     [outcome("not testable here", -14.4, (-16.0, -13.2),
                              unfit=[f"quoref/minilm-l6/L{i}: f1 12.4 vs a capitalised-word guesser 26.3"
                                     for i in range(5)])]),
                 row(claim("premise", kind="premise"), "does not hold", [outcome("does not hold", -1.8, (-2.7, -1.1))],
                     post_hoc="records from 2025-01-02 predate the registration at abc1234"),
                 row(claim("glue-sizes", not_testable="needs GLUE"), "not testable here", [], scale="-",
                     reason="needs GLUE, which no offline package ships")],
    }


def summary(rows: dict) -> str:
    return "\n".join(report.claims_summary(rows, {p: STAND_INS for p in rows}))


def counts_line(text: str, paper: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"| [{paper}]("))
    return [c.strip() for c in line.strip("|").split("|")]


def test_counts_banner_and_sentences_follow_the_rows():
    rows = papers()
    text = summary(rows)
    assert "At paper scale: no rows" in text and "At offline stand-in scale: 7 rows (alpha 5, beta 2; cpu 7)" in text
    assert "do not test the paper's numbers directly" in text and "declared not testable here): 2 rows" in text
    # paper: holds fails open partly n/t not-run | targets premises impl by-constr | fragile post-hoc Holm
    assert counts_line(text, "alpha")[1:] == ["1", "1", "0", "0", "0", "1", "1: 1 holds", "–", "1: 1 pass",
                                              "1: 1 holds", "1", "0", "1 of 2"]
    assert counts_line(text, "beta")[1:8] == ["0", "0", "0", "0", "2", "0", "–"]
    assert counts_line(text, "beta")[8] == "1: 1 fails"  # a failed premise is not the paper failing
    sentence = next(x for x in text.splitlines() if x.startswith("- **alpha**"))
    assert "3 claims of the paper, 1 target of ours, 1 implementation check and 1 claim that holds by construction " \
        "in 6 rows, at offline stand-in scale (cpu 5) only; 1 without records" in sentence
    assert "rt-polarity for SST-2, minilm-l6 for BERT-base;" not in sentence  # short names, no parenthesis
    assert "minilm-l6 for BERT-base" in sentence
    assert "1 does not hold (clearest: rdc-close-to-full, a − b = -2.70 [-4.50, -0.80] (accuracy pts))" in sentence
    assert "Not decided: 1 row not run (qa-trails)" in sentence
    beta = next(x for x in text.splitlines() if x.startswith("- **beta**"))
    assert "1 row with an arm not doing its task (probe-signal); 1 row declared not testable here (glue-sizes)" in beta

    rows["alpha"][1].verdict = "inconclusive"
    rows["alpha"][1].outcomes[0].verdict = "inconclusive"
    changed = summary(rows)
    assert counts_line(changed, "alpha")[1:4] == ["0", "1", "1"]
    sentence = next(x for x in changed.splitlines() if x.startswith("- **alpha**"))
    assert "1 is inconclusive (half-adapters)" in sentence and " hold (strongest" not in sentence

    rows["beta"][0].scale = "gpu, paper scale; quoref"
    assert "At paper scale: 1 row (beta 1)" in summary(rows) and "(alpha 5, beta 1; cpu 6)" in summary(rows)


def test_the_index_is_narrow_collapses_unfit_arms_and_undecided_rows():
    rows = papers()
    text = summary(rows)
    index = text[text.index("## Claims index"):]
    assert "quoref/minilm-l6/L0" not in text  # the arm list lives on the paper's page
    line = next(x for x in index.splitlines() if "rdc-close-to-full" in x)
    assert line == ("| fails | [alpha · rdc-close-to-full](alpha/CLAIMS.md#rdc-close-to-full) | a − b = -2.70 "
                    "[-4.50, -0.80] (accuracy pts) | ≥ -1 | 1 seed × 1244 ex | cpu |")
    assert "| holds*‡ | [alpha · half-adapters]" in index and "| fails† | [beta · premise]" in index  # flags
    assert "| n/t ×1 | [beta](beta/CLAIMS.md) · probe-signal | with an arm not doing its task |" in index
    assert "| not run ×1 | [alpha](alpha/CLAIMS.md) · qa-trails | not run |" in index
    assert all(len(x) <= 160 for x in index.splitlines() if x.startswith("| "))


def _table_cells(md: str, header: str, column: str) -> list[str]:
    """The cells of `column` in every markdown table whose header row starts with `header`."""
    out, cols = [], None
    for line in md.splitlines():
        if line.startswith(header):
            cols = [c.strip() for c in line.strip("|").split("|")]
        elif cols and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            out.append(cells[cols.index(column)])
        elif not line.startswith("|"):
            cols = None
    return out


def test_every_ours_cell_names_its_statistic(tmp_path):
    rows = papers()
    rows["alpha"].append(row(claim("retention", values=0.524), "holds",
                             [outcome("holds", 0.025, (-0.01, 0.04), shown="retention 0.549 vs paper 0.524: Δ +0.025",
                                      statistic="value − paper")]))
    rows["alpha"].append(row(claim("corr"), "holds", [outcome("holds", 0.81, (0.76, 0.85), statistic="r")]))
    text = summary(rows)
    page = "\n".join(report.claims_page("alpha", rows["alpha"], STAND_INS, tmp_path / "alpha"))
    cells = (_table_cells(text, "| verdict |", "ours: statistic = estimate [95 % CI] (units)")
             + _table_cells(page, "| verdict |", "ours: statistic = estimate [95 % CI] (units)")
             + _table_cells(page, "| comparison |", "ours") + _table_cells(page, "| comparison |", "95 % interval"))
    numbers = [c for c in cells if re.search(r"\d", c)]
    assert len(numbers) >= 15
    bare = [c for c in numbers if re.fullmatch(r"[-+−\d.,\[\] ×]+", c)]
    assert bare == []
    assert all(re.search(r"a − b|vs paper|\br\b|Δ|value|accuracy|×|logit", c) for c in numbers), numbers
    assert "r = 0.81 [0.76, 0.85]" in text and "retention 0.549 vs paper 0.524: Δ +0.025 [-0.01, +0.04]" in text


def test_claims_page_keeps_the_papers_values_whole_and_lists_unfit_arms(tmp_path):
    long = "a very long note on how the paper averaged its seeds " * 6
    values = {"Table 1": {"SST-2": {"reduced": 77.6, "full": 75.4, "note": long}, "QQP": [0.57, 0.62]},
              "Table 9": {f"row {i}": i / 10 for i in range(30)}}
    rows = papers()
    rows["alpha"][0] = row(claim("rdc-close-to-full", values=values, text="R" * 400), "does not hold",
                           [outcome("does not hold", -2.7, (-4.5, -0.8))])
    page = "\n".join(report.claims_page("alpha", rows["alpha"], STAND_INS, tmp_path / "alpha"))
    assert "…" not in page and long.strip() in page and "R" * 400 in page
    assert "- QQP: 0.57 / 0.62" in page and all(f"row {i} {i / 10}" in page for i in range(30))
    assert "reduced 77.6" in page and "Kind: paper claim. Paper: Table 1." in page
    assert "Kind: holds by construction: the ratio of widths: a check on the code." in page
    assert "## Implementation checks" in page and '| <a id="merge-exact"></a>merge-exact |' in page
    check = next(x for x in page.splitlines() if x.startswith('| <a id="merge-exact">'))
    assert "| pass |" in check and "max |Δ logit| = 0.00" in check.replace("\\|", "|")
    assert "### merge-exact" not in page  # a check is a table line, not a claim block
    assert "fragile: the signal guard at 3 points instead of 2: inconclusive" in page
    assert "does not survive the paper's Holm correction" in page
    assert "- qa-trails: squad-dev is not in the CPU tier" in page
    beta = "\n".join(report.claims_page("beta", papers()["beta"], STAND_INS, tmp_path / "beta"))
    assert "<details><summary>5 arms left out" in beta and "quoref/minilm-l6/L4: f1 12.4" in beta
    assert "post hoc: records from 2025-01-02 predate the registration at abc1234" in beta
    assert "| paired bootstrap over 1244 examples |" in beta


def test_report_stays_under_its_limit_with_110_long_rows(tmp_path, monkeypatch):
    rows: dict[str, list] = {}
    labels = ["holds", "does not hold", "inconclusive", "not testable here", "not run", "partly tested"]
    for i in range(110):
        paper = f"paper_{i % 6}"
        cid = f"claim-{i}-" + "x" * 35
        kind = ["paper", "paper", "paper", "target", "implementation", "by-construction"][i % 6 if i % 4 else 0]
        v = labels[i % len(labels)]
        outs = [] if v == "not run" else [
            outcome(v, -2.7 + i, (-4.5 + i, -0.8 + i), label=f"group {j} " + "y" * 30,
                    unfit=[f"arm {k}: " + "z" * 80 for k in range(4)] if v == "not testable here" else [])
            for j in range(3)]
        rows.setdefault(paper, []).append(row(claim(cid, kind=kind, text="T" * 600), v, outs,
                                              scale="-" if v == "not run" else OFFLINE, reason="r" * 300))
    for p in rows:
        (tmp_path / p / "runs").mkdir(parents=True)
    monkeypatch.setattr(report, "claims_rows", lambda results_dir: (rows, {p: STAND_INS for p in rows}))
    path = report.write_index(tmp_path, {p: [f"t{j}.md" for j in range(12)] for p in rows})
    text = path.read_text()
    assert len(text.encode()) <= report.REPORT_BYTES
    assert "**Scale.**" in text[:600] and text.index("## Claims by paper") < text.index("## Claims index")
    assert all(f"- **{p}**" in text for p in rows) and "## Papers" in text
    assert all((tmp_path / p / "CLAIMS.md").exists() for p in rows)
    assert "T" * 600 not in text and "z" * 80 not in text
    assert "T" * 600 in (tmp_path / "paper_1" / "CLAIMS.md").read_text()
    assert "more rows on its page" in text  # cut, and saying so


def test_claims_json_round_trips_and_the_build_is_byte_identical(tmp_path, monkeypatch):
    rows = papers()
    for p in rows:
        (tmp_path / p / "runs").mkdir(parents=True)
    monkeypatch.setattr(report, "claims_rows", lambda results_dir: (rows, {p: STAND_INS for p in rows}))
    first = {}
    for attempt in range(2):
        report.write_index(tmp_path, {p: [] for p in rows})
        files = [tmp_path / "REPORT.md", tmp_path / "claims.json", *(tmp_path / p / "CLAIMS.md" for p in rows)]
        now = {f: f.read_bytes() for f in files}
        assert attempt == 0 or now == first
        first = now
    data = json.loads((tmp_path / "claims.json").read_text())
    assert data == json.loads(json.dumps(report.claims_records(rows)))
    assert len(data) == sum(max(len(r.outcomes), 1) for rs in rows.values() for r in rs)
    obj = data[0]
    assert list(obj)[:9] == ["paper", "id", "kind", "scale", "verdict", "holm", "fragile", "post_hoc", "parts"]
    assert obj["id"] == "rdc-close-to-full" and obj["ci"] == [-4.5, -0.8] and obj["p"] == 0.002
    assert obj["statistic"] == "a − b, accuracy points" and obj["interval"] == "paired bootstrap over 1244 examples"
    not_run = next(o for o in data if o["id"] == "qa-trails")
    assert not_run["comparison"] is None and not_run["verdict"] == "not run"


def test_every_link_into_a_claims_page_finds_its_anchor(tmp_path, monkeypatch):
    rows = papers()
    for p in rows:
        (tmp_path / p / "runs").mkdir(parents=True)
    monkeypatch.setattr(report, "claims_rows", lambda results_dir: (rows, {p: STAND_INS for p in rows}))
    text = report.write_index(tmp_path, {p: [] for p in rows}).read_text()
    links = [(tmp_path / page, anchor) for page, anchor in re.findall(r"\]\(([\w/]+/CLAIMS\.md)#([\w-]+)\)", text)]
    for p in rows:
        page = tmp_path / p / "CLAIMS.md"
        links += [(page, anchor) for anchor in re.findall(r"\]\(#([\w-]+)\)", page.read_text())]
    assert len(links) > 10
    for page, anchor in links:
        md = page.read_text()
        assert f"\n### {anchor}\n" in md or f'<a id="{anchor}"></a>' in md, f"{page.name}#{anchor}"


@pytest.mark.parametrize("verdict", ["holds", "does not hold"])
def test_a_paper_without_claims_loses_its_stale_page(tmp_path, monkeypatch, verdict):
    rows = {"alpha": [row(claim("c"), verdict, [outcome(verdict)])]}
    (tmp_path / "alpha" / "runs").mkdir(parents=True)
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "CLAIMS.md").write_text("old")
    monkeypatch.setattr(report, "claims_rows", lambda results_dir: (rows, {}))
    report.write_index(tmp_path, {"alpha": []})
    assert not (tmp_path / "gone" / "CLAIMS.md").exists() and (tmp_path / "alpha" / "CLAIMS.md").exists()
