"""reverse_probing/report.py builds the signal table, Tables 1-3 beside the paper's rows, the layer sweep with the layer
chosen on dev (the final layer being the full record), mean vs attention, single vs pairs, cosine, α, sum vs mean, the
sources' own scores and the benchmark from run records shaped as run.py writes them (synthetic, with known answers):
the comparisons on quoref (the stand-in target: QA head, SQuAD F1 0-100, a trivial answerer's F1 as the baseline),
the WinoGrande records at chance. reverse_probing/claims.yaml decides the claims per target (sources selected by
method.sources; model.name is always the architecture), a layer or a concat depth chosen on dev."""
import csv

import pytest

from experiments.evidence.records import select
from experiments.evidence.selection import SelectionError, best_dev_over
from reverse_probing.report import build
from tests.helpers.reports import assert_decided_parts_hold, empty_report, verdicts

SEEDS = (0, 1, 2)
L6, NER, QA, NLI, PII, COREF, QREF = ("minilm-l6", "minilm-l6-ner", "minilm-l6-qa", "minilm-l6-nli", "minilm-l6-pii",
                                      "minilm-l6-coref", "minilm-l6-quoref")
TASKS = (L6, NER, QA, NLI)  # the task sources of the quoref grid
BASE = {L6: 55.0, NER: 35.0, QA: 45.0, NLI: 45.0, QREF: 75.0}  # quoref eval F1 (0-100), full, mean
PEAK = {L6: 4, QA: 4, NLI: 5}  # the best truncation layer of L1..5 (each beats the final layer by 10 points there)
# NER: dev peaks at layer 2, eval at layer 3: the tables and the claims must take 2 (eval never chooses)
NER_EVAL = {1: 50.0, 2: 58.0, 3: 59.0, 4: 52.0, 5: 45.0}
NER_DEV = {1: 52.0, 2: 62.0, 3: 60.0, 4: 53.0, 5: 46.0}
PAIRS = ((NLI, L6), (NER, L6), (NLI, NER), (QA, L6), (NLI, QA), (NER, QA))  # the paper's six pairs, as stand-ins
TRIVIAL = 20.0  # eval/majority_f1: the trivial answerer
TASK_KINDS = {"quoref": ("qa", "eval/f1"), "wnut16": ("ner", "eval/entity_f1"), "vitaminc": ("pair", "eval/accuracy")}


def _record(srcs, variant, agg, seed, metrics, method="reverse_probing", task="quoref", trunc=None, concat_n=None,
            extra=None, exp="quoref_single", **method_fields):
    kind, objective = TASK_KINDS.get(task, ("coref", "eval/conll_f1"))
    task_cfg = {"name": task, "type": kind, "objective": objective, "source": "offline",
                "stand_in_for": "conll2012" if kind in ("qa", "coref") else None}
    config = {"method": {"name": method, "sources": list(srcs), "variant": variant, "aggregate": agg, "trunc": trunc,
                         "concat_n": concat_n, **method_fields},
              "model": {"name": "minilm-l6", "source": "offline", "stand_in_for": None},  # always the architecture
              "task": task_cfg, "train": {"epochs": 4, "patience": 0}, "data": {}, "hardware": {"name": "cpu"},
              "seed": seed, "exp_id": f"reverse_probing/{exp}"}
    run_id = f"{task}--{method}--{'+'.join(srcs)}--{variant}-{agg}-{trunc}-{concat_n}--seed{seed}"
    config["run_id"] = run_id
    return {"schema_version": 2, "paper": "reverse_probing", "exp_id": config["exp_id"], "status": "ok",
            "run_id": run_id, "config": config, "metrics": metrics, "per_example": {}, "extra": extra or {},
            "n_samples": {"train_examples": 500, "eval_examples": 300}, "config_hash": run_id,
            "provenance": {"hardware": "cpu", "device": "cpu: test", "git_dirty": False}}


def _q(srcs, variant, agg, seed, f1, dev=None, trunc=None, **kw):
    """A quoref probing record as run_qa writes it: eval/dev F1 and EM (0-100), the trivial answerer's F1."""
    f1 = f1 + 0.2 * (seed - 1)
    dev = f1 + 1.0 if dev is None else dev + 0.2 * (seed - 1)
    m = {"eval/f1": f1, "eval/em": f1 - 10, "dev/f1": dev, "dev/em": dev - 10, "eval/majority_f1": TRIVIAL,
         "eval/majority_em": TRIVIAL - 5}
    if len(srcs) == 1:
        m["extract/layer"] = trunc[0] if trunc else 6
    return _record(srcs, variant, agg, seed, m, trunc=trunc, **kw)


def _trunc_f1(src, L):
    if src == NER:
        return NER_EVAL[L], NER_DEV[L]
    if src == QREF:  # the target-trained source is best at its last layer
        f1 = BASE[src] - 2.0 * (6 - L)
    else:
        f1 = BASE[src] + 10.0 - 2.0 * abs(L - PEAK[src])
    return f1, f1 + 1.0


def _singles(s):
    attn = BASE[QREF] - 1 if s == QREF else BASE[s] + 8
    out = []
    for seed in SEEDS:
        out += [_q((s,), "full", "mean", seed, BASE[s]), _q((s,), "full", "attention", seed, attn),
                _q((s,), "norm", "mean", seed, BASE[s] + 1), _q((s,), "norm", "attention", seed, attn - 1)]
        out += [_q((s,), "trunc", "mean", seed, f1, dev, trunc=[L], exp="quoref_layers") for L in range(1, 6)
                for f1, dev in [_trunc_f1(s, L)]]
        out += [_q((s,), "concat", "attention", seed, attn + gain, concat_n=n, exp="quoref_concat")
                for n, gain in ((2, 3.0), (3, 5.0), (6, 4.0))]
    return out


def _pairs(pairs=PAIRS, margin=4.0):
    out = []
    for a, b in pairs:
        srcs = (b, a)  # the opposite order to claims.yaml: source lists are matched as sets
        attn = max(BASE[a], BASE[b]) + 8 + margin
        mean = (BASE[a] + BASE[b]) / 2
        for seed in SEEDS:
            out += [_q(srcs, "full", "attention", seed, attn, exp="quoref_pairs"),
                    _q(srcs, "full", "mean", seed, mean, exp="quoref_pairs")]
    out += [_q((L6, NLI), "full", "sum", seed, (BASE[L6] + BASE[NLI]) / 2 - 1, exp="quoref_sum") for seed in SEEDS]
    return out


def _winogrande():
    """signal_cpu: frozen sources at chance on WinoGrande (accuracy 0.50 +- 0.01 over seeds; CoNLL F1 at the
    majority's)."""
    out = []
    for src, acc in ((L6, 0.50), (COREF, 0.505), (PII, 0.495)):
        for seed in SEEDS:
            a = acc + 0.01 * (seed - 1)
            m = {"eval/accuracy": a, "eval/conll_f1": 0.60 + 0.01 * (seed - 1), "dev/conll_f1": 0.60,
                 "dev/accuracy": a, "eval/majority_accuracy": 0.50, "eval/majority_conll_f1": 0.60,
                 "wsc/accuracy": 0.49, "wsc/conll_f1": 0.58, "extract/layer": 6}
            out.append(_record((src,), "full", "mean", seed, m, task="winogrande-coref", exp="signal_cpu"))
    return out


def _others():
    alpha = [[0.34, 0.33, 0.33], [0.40, 0.32, 0.28], [0.45, 0.31, 0.24]]
    out = [_q((L6, NLI, NER), "full", "attention", s, 66.0, extra={"alpha": alpha[:3 - (s == 2)]}, exp="quoref_multi")
           for s in SEEDS]
    out.append(_record((L6, NER, QA, NLI, PII), "full", "mean", 0,
                       {f"cossim/{k}": v for k, v in ((L6, 0.8), (NER, 0.5), (QA, 0.55), (NLI, 0.6), (PII, 0.4))},
                       method="reverse_probing_cossim", task="winogrande-coref", exp="cossim_cpu",
                       reference=COREF, split="dev"))
    out += [_record((L6,), "full", "mean", s, {"eval/entity_f1": 0.40 + 0.01 * s}, method="reverse_probing_source",
                    task="wnut16", exp="build_ner_cpu", save_as=NER) for s in SEEDS]
    out.append(_record((L6,), "full", "mean", 0, {"eval/accuracy": 0.70, "eval/majority_accuracy": 0.45},
                       method="reverse_probing_source", task="vitaminc", exp="build_nli_cpu", save_as=NLI))
    out.append(_record((L6,), "full", "mean", 0,
                       {"bench/ratio": 12.0, "bench/ratio_lo": 11.0, "bench/ratio_hi": 13.5, "bench/head_epoch_s": 0.5,
                        "bench/encoder_forward_s": 6.0}, method="reverse_probing_bench", task="winogrande-coref",
                       exp="bench"))
    return out


def _runs():
    return [r for s in BASE for r in _singles(s)] + _pairs() + _winogrande() + _others()


def _csv(out, name):
    return list(csv.DictReader(open(out / "tables" / f"{name}.csv")))


def _ours(rows, source, **cols):
    return next(r for r in rows if r.get("row", "ours") == "ours" and r["source"].split(" ")[0] == source
                and all(r[k].startswith(v) for k, v in cols.items()))


def test_tables_and_figures_are_built(tmp_path):
    text = "\n".join(build(_runs(), tmp_path))
    assert "could not be built" not in text and "stand-in target" in text
    t1 = _csv(tmp_path, "table1_single")
    ner = _ours(t1, NER, **{"target (hardware)": "quoref"})
    assert ner["source"] == "minilm-l6-ner (stand-in for NER)"
    assert ner["target (hardware)"] == "quoref (stand-in target, QA head, SQuAD F1), cpu"
    # a cell is the mean of its seeds: 35 + 0.2 * (seed - 1) over seeds 0, 1, 2 -> 35.00 (F1 is 0-100 already)
    assert ner["mean-full"].startswith("35.00 [") and ner["mean-full"].endswith("(n=3)")
    assert ner["trunc layer"] == "2" and ner["mean-trunc"].startswith("58.00")  # dev's layer, not eval's 3
    assert ner["attn-trunc"] == ""  # no attention sweep at layer 2 (the CSV leaves a missing cell empty)
    assert ner["concat6-attn"].startswith("47.00") and ner["concat12-attn"] == ""
    # the target-trained source is best at its final layer: trunc = the full record, attention trunc = attn-full
    qref = _ours(t1, QREF)
    assert qref["source"] == "minilm-l6-quoref (stand-in for Coref)" and qref["trunc layer"] == "6"
    assert qref["mean-trunc"] == qref["mean-full"] and qref["attn-trunc"] == qref["attn-full"]
    wg = _ours(t1, COREF)
    assert wg["target (hardware)"].startswith("winogrande-coref (CoNLL F1)") and wg["mean-full"].startswith("60.00")
    paper_ner = next(r for r in t1 if r["row"] == "paper" and r["source"] == "NER")
    assert paper_ner["mean-full"] == "35.63 ± 2.12" and paper_ner["trunc layer"] == "6"
    assert paper_ner["concat6-attn"] == "66.30 ± 0.51"
    sweep = {r["source"].split(" ")[0]: r for r in _csv(tmp_path, "layer_sweep")}
    assert {s: sweep[s]["layer chosen on dev"] for s in sweep} == {L6: "4", NER: "2", QA: "4", NLI: "5", QREF: "6"}
    assert sweep[NER]["L3"].startswith("59.00") and sweep[NER]["L6"].startswith("35.00")  # L6: the full record
    assert sweep[NER]["intermediate − final (paired)"].startswith("+23.00")
    assert sweep[QREF]["best intermediate (dev)"] == "5" and sweep[QREF]["intermediate − final (paired)"] == \
        "-2.00 [-2.00, -2.00] (n=3)"
    assert sweep[NER]["paper best layer"] == "6" and sweep[NER]["paper sweep L6..L12"].startswith("61.76 / 58.21")
    sig = {(r["target (hardware)"].split(" ")[0], r["source"].split(" ")[0]): r for r in _csv(tmp_path, "signal")}
    wl6 = sig[("winogrande-coref", L6)]
    assert wl6["metric"] == "eval/accuracy" and wl6["ours"].startswith("50.00") and wl6["majority / trivial"] == "50.00"
    assert wl6["signal"] == "not shown (CI crosses 0)" and wl6["WSC273 accuracy"].startswith("49.00")
    assert wl6["CoNLL F1"].startswith("60.00") and wl6["majority CoNLL F1"] == "60.00"
    ql6 = sig[("quoref", L6)]
    assert ql6["metric"] == "eval/f1" and ql6["ours − majority (paired)"].startswith("+35.00")
    assert ql6["signal"] == "yes (CI above)" and ql6["WSC273 accuracy"] == ""
    t2 = _csv(tmp_path, "table2_pairs")
    ours = next(r for r in t2 if r["row"] == "ours" and r["sources"].startswith("NER+MRPC"))
    assert ours["attn-full"].startswith("67.00")  # max(55, 35) + 8 + 4
    assert next(r for r in t2 if r["row"] == "paper" and r["sources"] == "NER+MRPC")["attn-full"] == "67.94 ± 0.78"
    svp = {(r["aggregate"], r["pair"].split(" ")[0]): r for r in _csv(tmp_path, "single_vs_pairs")}
    nm = svp[("attention", "NER+MRPC")]
    # the best single (on dev) is minilm-l6 (64 vs 44): the pair beats it by the constructed 4 points every seed
    assert nm["best single (dev)"] == L6 and nm["pair − best single (paired)"] == "+4.00 [+4.00, +4.00] (n=3)"
    assert nm["paper: 1 / 2 / pair"] == "55.30 / 67.05 / 67.94"
    mva = {r["sources"].split(" ")[0]: r for r in _csv(tmp_path, "mean_vs_attention")}
    assert mva["NER"]["attention − mean (paired)"].startswith("+8.00") and mva["NER"]["paper Δ"] == "+19.67"
    svm = _csv(tmp_path, "sum_vs_mean")
    assert len(svm) == 1 and svm[0]["sum − mean (paired)"] == "-1.00 [-1.00, -1.00] (n=3)"
    alpha = _csv(tmp_path, "alpha")
    first = next(r for r in alpha if r["source"].startswith(L6))
    # up to the shortest seed (2 dev evaluations): the last is the second
    assert first["α first dev evaluation"].startswith("0.34") and first["α last"].startswith("0.40")
    cos = {r["source"].split(" ")[0]: r for r in _csv(tmp_path, "cossim")}
    assert cos[L6]["cosine"] == "0.80 (n=1)" and cos[NER]["paper"] == "low" and "NER-dslim" in cos[PII]["source"]
    src = {r["source"].split(" ")[0]: r for r in _csv(tmp_path, "source_tasks")}
    assert src[NER]["metric"] == "eval/entity_f1" and src[NER]["score"].startswith("41.00")  # save_as, not model.name
    assert src[NLI]["score"] == "70.00 (n=1)" and src[NLI]["majority / trivial baseline"] == "45.00"
    assert _csv(tmp_path, "bench")[0]["ratio [CI]"] == "12.00 [11.00, 13.50]"
    for fig in ("fig2_sources", "fig3_cossim", "fig4_mean_vs_attention", "fig5_layer_sweep", "fig8_single_vs_pairs",
                "fig9_alpha"):
        assert (tmp_path / "figures" / f"{fig}.png").stat().st_size > 0, fig


def test_missing_records_say_what_to_run(tmp_path):
    text = empty_report(build, tmp_path, ("Signal", "Table 1", "Table 2", "Table 3", "Layer sweep", "Mean vs attention",
                                          "Single vs pairs", "Cosine", "Attention weights", "Sum vs mean",
                                          "Source fine-tunes", "Head-only"))
    assert "experiment=reverse_probing/quoref_layers" in text and "experiment=reverse_probing/signal_cpu" in text
    assert "make reverse_probing-cpu" in text


def test_claims_decide_the_constructed_records_per_target(tmp_path):
    v = verdicts("reverse_probing", _runs(), tmp_path, min_claims=12)
    held = ("frozen-features-carry-signal-quoref", "intermediate-layer-beats-final", "attention-beats-mean",
             "pairs-beat-best-single", "vanilla-source-beats-ner", "coref-target-upper-bound",
             "sum-slightly-worse-than-mean", "concat-helps-attention-single", "ner-best-layer-lowest")
    assert_decided_parts_hold(v, held)
    # WinoGrande: accuracy at chance over seeds, the CI straddles the majority class
    wg = v["frozen-features-carry-signal-winogrande"]
    assert wg.verdict == "inconclusive" and [round(o.estimate, 6) for o in wg.outcomes] == [0.0, 0.5]
    # the upper bound holds on quoref; its WinoGrande comparisons are there, each not testable (arms at the majority)
    ub = {o.label: o for o in v["coref-target-upper-bound"].outcomes}
    # mean: 75 - 35; attention: 74 - 43; the estimate is the mean over the two aggregations (groups)
    assert ub["quoref (stand-in target): upper bound - NER (minilm-l6-ner)"].estimate == pytest.approx((40 + 31) / 2)
    wg_ub = [o for label, o in ub.items() if label.startswith("coreference") and o.verdict != "not run"]
    assert {o.label for o in wg_ub} == {"coreference: CorefTarget - MRPC (minilm-l6 / bert-base-cased-mrpc)",
                                        "coreference: CorefTarget - NER-dslim (minilm-l6-pii / dslim-bert-base-ner)"}
    assert all(o.verdict == "not testable here" and o.unfit for o in wg_ub)
    # the comparisons whose sources have no WinoGrande records are shown as not run, never dropped
    assert {o.label for o in ub.values() if o.verdict == "not run"} >= {"coreference: CorefTarget - NER"}
    assert v["coref-target-upper-bound"].verdict == "partly tested"
    # offline cosines are to a reference at chance on its own task: the claim says why it is not decided by them
    assert v["cossim-pattern"].verdict == "not testable here" and "at chance" in v["cossim-pattern"].reason
    # norm for combinations is not run on quoref: no records, said so
    assert v["norm-helps-mean-combinations"].verdict == "not run"
    assert len(v["pairs-beat-best-single"].outcomes) == 12
    # the layer is chosen on dev among L1-5: NER at layer 2 (+23 over the full record), not eval's layer 3 (+24)
    inter = v["intermediate-layer-beats-final"].outcomes[0]
    assert inter.label.startswith("quoref (stand-in target)")
    assert inter.estimate == pytest.approx((10 + 10 + 10 + 23) / 4)
    assert {o.estimate for o in v["ner-best-layer-lowest"].outcomes if o.verdict != "not run"} == {-2.0, -3.0}
    concat = v["concat-helps-attention-single"].outcomes[0]
    assert concat.estimate == pytest.approx(5.0)  # n = 3, the best on dev (and here on eval too)


def test_claims_turn_with_the_records(tmp_path):
    worse = [r for s in TASKS for r in _singles(s)] + _pairs(margin=-12.0)
    assert verdicts("reverse_probing", worse, tmp_path)["pairs-beat-best-single"].verdict == "does not hold"
    flat = [r for s in (L6, NER) for r in _singles(s)]
    for r in flat:  # every intermediate layer below the final one
        if r["config"]["method"]["variant"] == "trunc":
            r["metrics"]["eval/f1"] -= 40
    assert verdicts("reverse_probing", flat, tmp_path)["intermediate-layer-beats-final"].verdict == "does not hold"
    # an arm at the trivial answerer's F1 is not doing the task: not testable, never "holds"
    dead = [r for s in (L6, NER) for r in _singles(s)]
    for r in dead:
        if r["config"]["method"]["sources"] == [NER]:
            r["metrics"]["eval/f1"] = TRIVIAL + 0.5
    d = verdicts("reverse_probing", dead, tmp_path)["vanilla-source-beats-ner"]
    assert d.verdict == "not testable here" and any("question-blind answerer" in w
                                                   for o in d.outcomes for w in o.unfit)


def test_sources_select_by_method_sources_as_sets_and_layers_are_chosen_on_dev():
    recs = _pairs(PAIRS[:1])
    assert recs[0]["config"]["method"]["sources"] == [L6, NLI]
    assert len(select(recs, {"method.sources": [NLI, L6], "method.aggregate": "attention"})) == 3
    assert len(select(recs, {"method.sources": [NLI, "*"], "method.aggregate": "attention"})) == 3
    assert not select(recs, {"method.sources": [NLI], "method.aggregate": "attention"})
    assert len(select(recs, {"method.sources": {"not": ["*"]}, "method.aggregate": "sum"})) == 3
    # every record names the architecture minilm-l6: the upper bound is found by its sources, and is no task source
    qref = [r for r in _singles(QREF) if r["config"]["method"]["variant"] == "full"]
    assert {r["config"]["model"]["name"] for r in qref} == {L6}
    assert len(select(qref, {"method.sources": [QREF], "method.aggregate": "mean"})) == 3
    assert not select(qref, {"method.sources": [L6]})
    ner = [r for r in _singles(NER) if r["config"]["method"]["variant"] == "trunc"]
    chosen = best_dev_over(ner, "method.trunc")
    assert {tuple(r["config"]["method"]["trunc"]) for r in chosen} == {(2,)} and len(chosen) == 3
    del ner[0]["metrics"]["dev/f1"]
    with pytest.raises(SelectionError, match="dev/f1"):
        best_dev_over(ner, "method.trunc")


def test_table1_shows_the_trivial_answer_beside_every_row(tmp_path):
    """A target where a constant answer scores above every source (WinoGrande: the best constant clustering 72.80,
    the sources 71.7-72.3) must show it in Table 1 itself, not only in the signal table."""
    runs = [r for s in (L6, NER) for r in _singles(s)]
    for src, f1 in ((L6, 0.723), (COREF, 0.719), (PII, 0.717)):
        for seed in SEEDS:
            m = {"eval/accuracy": 0.5, "eval/conll_f1": f1, "dev/conll_f1": f1, "eval/majority_accuracy": 0.511,
                 "eval/majority_conll_f1": 0.728, "extract/layer": 6}
            runs.append(_record((src,), "full", "mean", seed, m, task="winogrande-coref", exp="signal_cpu"))
    build(runs, tmp_path)
    t1 = _csv(tmp_path, "table1_single")
    for src in (L6, COREF, PII):
        row = _ours(t1, src, **{"target (hardware)": "winogrande-coref"})
        assert row["trivial answer"] == "72.80"
        assert float(row["mean-full"].split(" ")[0]) < float(row["trivial answer"])
    assert _ours(t1, NER, **{"target (hardware)": "quoref"})["trivial answer"] == f"{TRIVIAL:.2f}"
    assert {r["trivial answer"] for r in t1 if r["row"] == "paper"} <= {"", "—"}
    assert "Trivial answer" in (tmp_path / "tables" / "table1_single.md").read_text()
