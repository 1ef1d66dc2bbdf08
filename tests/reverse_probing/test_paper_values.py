"""reverse_probing/paper_values.yaml: the paper's numbers agree with each other where they should (the text's "%"
differences are table cells subtracted, the trunc layers are the sweep's argmax, the bold cells are the row maxima,
Fig. 4b is Table 1 rounded), and the paper's inconsistencies are recorded, not smoothed over."""
import pytest

from experiments.evidence.paper_values import paper_values

TASK = "CoNLL-2012"
BEST = {"MRPC": 9, "RE": 9, "QA": 8, "NER": 6, "BERT": 10, "Coref": 12}
T1_COLS = ("mean-full", "mean-norm", "mean-trunc", "attn-full", "attn-norm", "attn-trunc", "concat4-attn",
           "concat6-attn", "concat12-attn")
T23_COLS = T1_COLS[:6]


def _pv():
    return paper_values("reverse_probing")


def _f1(row, col):
    return _pv().get(row, TASK, col, "conll_f1").value


def _rows(where):
    return sorted({c.model for c in _pv().select(where=where, metric="conll_f1")})


def test_tables_are_complete():
    pv = _pv()
    assert _rows("Table 1") == sorted(BEST) and len(_rows("Table 2")) == 6 and len(_rows("Table 3")) == 5
    for where, cols in (("Table 1", T1_COLS), ("Table 2", T23_COLS), ("Table 3", T23_COLS)):
        for row in _rows(where):
            for col in cols:
                assert pv.get(row, TASK, col, "conll_f1") and pv.get(row, TASK, col, "conll_f1_std"), (row, col)


def test_trunc_layers_are_the_sweeps_argmax_and_its_cells():
    pv = _pv()
    for row, layer in BEST.items():
        sweep = {L: _f1(row, f"trunc-L{L}") for L in range(6, 13)}
        assert max(sweep, key=sweep.get) == layer == pv.get(row, TASK, "trunc", "best_layer").value, row
        assert _f1(row, "mean-trunc") == sweep[layer]  # Table 1's mean-trunc is the sweep at its best layer
        assert _f1(row, "mean-full") == sweep[12]  # L = 12 is the full model
    # NER is still rising at the bottom of the search range
    assert _f1("NER", "trunc-L6") > _f1("NER", "trunc-L7")


def test_bold_cells_are_the_row_maxima():
    pv = _pv()
    for where, cols in (("Table 1", T1_COLS), ("Table 2", T23_COLS), ("Table 3", T23_COLS)):
        for row in _rows(where):
            vals = {c: _f1(row, c) for c in cols}
            bold = pv.get(row, TASK, None, "row_best").value
            assert vals[bold] == max(vals.values()), (where, row, bold)


def test_text_differences_are_table_cells_subtracted_except_the_recorded_one():
    pv = _pv()
    gains = pv.select(metric="gain_text")
    assert len(gains) == 13
    off = []
    for g in gains:
        a, b = g.column.split(" - ")
        diff = _f1(g.model, a) - _f1(g.model, b)
        decimals = len(str(g.value).split(".")[1]) if "." in str(g.value) else 0
        if abs(diff - g.value) > 0.5 * 10 ** -decimals + 1e-9:
            off.append((g.model, g.column, g.value, round(diff, 2)))
    assert off == [("NER", "mean-trunc - mean-full", 26.2, 26.13)]  # "up to +26.2%": the table gives 26.13
    assert "26.13" in pv.get("NER", TASK, "mean-trunc - mean-full", "gain_text").note


def test_fig4b_is_table1_rounded():
    for row in BEST:
        for fig, col in (("fig4b-mean", "mean-full"), ("fig4b-attn", "attn-full")):
            assert _f1(row, fig) == pytest.approx(_f1(row, col), abs=0.051), (row, fig)


def test_recorded_inconsistencies():
    pv = _pv()
    # the conclusion's range "35.63 (NER) to 61.16 (MRPC)" holds only among the task fine-tunes: BERT is higher
    assert pv.get(None, TASK, None, "single_range_text").value == "35.63 (NER) to 61.16 (MRPC)"
    tasks = ("MRPC", "NER", "RE", "QA")
    assert min(tasks, key=lambda r: _f1(r, "mean-full")) == "NER" and max(tasks, key=lambda r: _f1(r, "mean-full")) \
        == "MRPC"
    assert _f1("BERT", "mean-full") > _f1("MRPC", "mean-full") and _f1("BERT", "attn-full") > _f1("MRPC", "attn-full")
    # the "non-frozen target trained from scratch" number is the frozen Coref row's mean-full
    assert _f1("Coref", "target-from-scratch") == _f1("Coref", "mean-full")
    # Coref attn-trunc at L = 12 is the attn-full configuration, printed with another std
    assert _f1("Coref", "attn-trunc") == _f1("Coref", "attn-full")
    assert pv.get("Coref", TASK, "attn-trunc", "conll_f1_std").value != \
        pv.get("Coref", TASK, "attn-full", "conll_f1_std").value
    assert "72.01" in pv.get("Coref", TASK, "concat6-attn", "conll_f1").note
    assert "0.50" in pv.get("RE", TASK, "attn-full", "conll_f1").note


def test_sum_vs_mean_and_the_head_lr_sweep():
    assert _f1("MRPC+BERT", "sum-full") - _f1("MRPC+BERT", "mean-full") == pytest.approx(-0.92)
    sweep = {c.column: c.value for c in _pv().select(model="Coref+BERT", metric="conll_f1")}
    assert max(sweep, key=sweep.get) == "lr-1e-4" and _pv().get(None, None, None, "head_lr").value == 1e-4


def test_stand_ins_reach_the_papers_rows():
    pv = _pv()
    m = pv.find("minilm-l6-ner", "winogrande-coref", "mean-full", "conll_f1")
    assert m.value == 35.63 and m.stand_in and len(m.via) == 2  # a stand-in source on a stand-in target
    assert pv.lookup("minilm-l6-nli", "winogrande-coref", "trunc", "best_layer") == 9  # RE's row
    assert pv.lookup("bert-base-cased-mrpc", "CoNLL-2012", "attn-full", "conll_f1") == 67.05
    assert not pv.find("bert-base-cased", "CoNLL-2012", "attn-full", "conll_f1").stand_in
