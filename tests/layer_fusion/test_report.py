"""layer_fusion/report.py builds the few-shot grid, gains, learning curves, the P-32 table beside the paper's rows, the
λ heatmap and the parameter table from run records (synthetic ones here, with known answers), says what to run where
records are missing; layer_fusion/claims.yaml decides the claims; layer_fusion/paper_values.yaml recomputes the papers'
derived numbers and records where they do not."""
import csv

import numpy as np
import pytest
from scipy import stats

from experiments.evidence.paper_values import paper_values
from layer_fusion.report import build, curve_stats
from tests.helpers.reports import assert_decided_parts_hold, empty_report, verdicts

SEEDS = (0, 1, 2)
# best dev F1 (fraction) of each fusion at (N, epochs): Concat leads at N = 8, DWAtt at N = 128, Base+n trails
F1 = {8: {"deeper": 0.20, "last": 0.15, "concat": 0.35, "dwatt": 0.25},
      128: {"deeper": 0.40, "last": 0.35, "concat": 0.45, "dwatt": 0.50}}
SIZES = {"rt-polarity": 8000, "winogrande": 30000, "vitaminc": 60000}
STAND_IN = {"rt-polarity": "sst2", "winogrande": "rte", "vitaminc": "mnli", "wnut16": "conll2003"}
# eval accuracy of each P-32 arm: the decoder gains from the mix, the encoder does not
ACC = {"smollm2-135m": {"last": 0.70, "mean": 0.72, "scalar_mix": 0.75},
       "minilm-l6": {"last": 0.80, "mean": 0.79, "scalar_mix": 0.802}}


def _rec(method, model, task, seed, metrics, extra=None, n_samples=None, kind="encoder", layers=12, exp_id=None,
         **m):
    config = {"method": {"name": method, "variant": "default", "truncate": None, "lambda_lr": None,
                         "prenorm_handling": "as_is", **m},
              "model": {"name": model, "source": "offline", "kind": kind, "num_layers": layers, "stand_in_for": None},
              "task": {"name": task, "stand_in_for": STAND_IN.get(task), "objective": "eval/entity_f1"
                       if task == "wnut16" else "eval/accuracy", "type": "ner" if task == "wnut16" else "cls"},
              "train": {"epochs": float(m.pop("epochs", 50))}, "data": {}, "hardware": {"name": "cpu"}, "seed": seed,
              "exp_id": exp_id or f"layer_fusion/{method}_cpu"}
    run_id = f"{task}--{model}--{method}-{'-'.join(f'{k}{v}' for k, v in sorted(m.items()))}--seed{seed}"
    config["run_id"] = run_id
    return {"schema_version": 2, "paper": "layer_fusion", "exp_id": config["exp_id"], "status": "ok", "run_id": run_id,
            "config": config, "metrics": metrics, "per_example": {}, "extra": extra or {},
            "n_samples": n_samples or {}, "provenance": {"hardware": "cpu", "device": "cpu: test", "git_dirty": False}}


def _curve(best: float, fast: bool, total: int = 100) -> list[dict]:
    rise = (0.9, 1, 1, 1) if fast else (0.3, 0.6, 0.8, 1)
    return [{"step": s, "dev/entity_f1": best * r} for s, r in zip((25, 50, 75, 100), rise)]


def _fewshot(fusion, shots, epochs, seed, regime="fe", f1=None, model="e5-small"):
    f1 = (F1[shots][fusion] if f1 is None else f1) + 0.004 * (seed - 1)
    curve = _curve(f1, fast=fusion == "concat")
    m = {"dev/entity_f1": f1, "dev/entity_f1_final": f1 - 0.01, "eval/entity_f1": f1 - 0.02,
         "train/steps": 100, "train/best_step": 50, "train/to90_frac": 0.25 if fusion == "concat" else 0.5,
         "params/fusion": 1774080}
    return _rec("layer_fusion", model, "wnut16", seed, m, {"curve": curve, "total_steps": 100},
                exp_id="layer_fusion/fewshot_cpu", protocol="fewshot", regime=regime, fusion=fusion, shots=shots,
                epochs=epochs)


def _p32(model, task, fusion, seed, regime):
    acc = ACC[model][fusion] + 0.002 * seed
    kind, L = ("causal", 30) if model == "smollm2-135m" else ("encoder", 6)
    m = {"eval/accuracy": acc, "eval/majority_accuracy": 0.5, "dev/accuracy": acc}
    extra = {}
    if fusion == "scalar_mix":
        early = 0.12 - SIZES[task] * 1.5e-6 + 0.003 * seed  # more data, less weight on the first blocks
        lam = np.linspace(1.0, 0.0, L) * early
        w = np.exp(lam) / np.exp(lam).sum()
        extra = {"lambda": lam.tolist(), "layer_weights": w.tolist(), "lambda_learned": {"early_excess": early}}
        m.update({"lambda/entropy_ratio": 0.99, "lambda/early_excess": early, "train/examples": SIZES[task]})
    return _rec("layer_fusion", model, task, seed, m, extra, {"train_examples": SIZES[task], "eval_examples": 500},
                kind=kind, layers=L, exp_id="layer_fusion/p32_cpu", protocol="p32", regime=regime, fusion=fusion)


def _params():
    rows = [{"model": "roberta-large", "hf_id": "FacebookAI/roberta-large", "num_layers": 24, "hidden_size": 1024,
             "fusion": f, "name": name, "extra_layers": n, "default": True, "new_params": v, "formula": 0,
             "formula_expr": "-"} for f, name, n, v in (("deeper", "Base+2", 2, 25192448),
                                                         ("concat", "Concat", None, 25190400),
                                                         ("dwatt", "DWAtt", None, 26353152))]
    metrics = {f"params/roberta-large/{r['fusion']}": r["new_params"] for r in rows}
    return _rec("layer_fusion_params", "roberta-large", "wnut16", 0, metrics, {"params": rows},
                exp_id="layer_fusion/params_cpu")


def _bench():
    return _rec("layer_fusion_bench", "e5-small", "wnut16", 0,
                {"speedup/cached_vs_recompute": 6.0, "speedup/cached_vs_recompute_lo": 5.5,
                 "speedup/cached_vs_recompute_hi": 6.5, "time/cached_step_ms": 5.0, "time/recompute_step_ms": 30.0},
                exp_id="layer_fusion/bench", fusion="dwatt", protocol="fewshot", regime="fe")


def _runs():
    runs = [_fewshot(f, n, ep, s) for f in F1[8] for n in (8, 128) for ep in (25, 50, 100) for s in SEEDS]
    runs += [_fewshot(f, 8, 50, s, regime="ft", f1=0.6) for f in ("deeper", "concat", "dwatt") for s in SEEDS]
    runs += [_p32(model, task, f, s, regime) for model, regimes in (("smollm2-135m", ("fe", "lora")),
                                                                    ("minilm-l6", ("fe", "ft")))
             for regime in regimes for task in SIZES for f in ACC[model] for s in (0, 1)]
    return runs + [_params(), _bench()]


def _csv(out, name):
    return list(csv.DictReader(open(out / "tables" / f"{name}.csv")))


def test_curve_stats_known_answer():
    curve = [{"step": s, "f": v} for s, v in ((25, 0.2), (50, 0.4), (75, 0.4), (100, 0.4))]
    auc, steps, frac = curve_stats(curve, "f", 100)
    # area from (0, 0): 0.25 * (0 + 20) / 2 + 0.25 * (20 + 40) / 2 + 0.5 * 40 = 30 points; 90% of 40 first at step 50
    assert auc == pytest.approx(30.0) and (steps, frac) == (50, 0.5)


def test_tables_and_figures_are_built(tmp_path):
    text = "\n".join(build(_runs(), tmp_path))
    assert "could not be built" not in text
    grid = _csv(tmp_path, "fewshot_grid")
    assert len(grid) == 4 * 2 * 3 + 3  # FE: 4 fusions x 2 N x 3 budgets; FT: 3 fusions at one (N, budget)
    concat8 = next(r for r in grid if r["fusion"] == "Concat" and r["N"] == "8" and r["epochs"] == "25"
                   and r["regime"].startswith("FE"))
    assert concat8["best dev F1"].startswith("35.00 [") and concat8["best dev F1"].endswith("(n=3)")
    assert concat8["model"] == "e5-small (for RoBERTa-large)" and "conll2003" in concat8["task"]
    trials = list(csv.DictReader(open(tmp_path / "tables" / "fewshot_trials.csv")))
    assert len(trials) == len(_fewshot_runs()) and {t["seed"] for t in trials} == {"0", "1", "2"}
    gains = {(r["fusion"], r["N"], r["epochs"], r["regime"][:2]): r for r in _csv(tmp_path, "relative_gains")}
    g = gains[("Concat", "8", "25", "FE")]
    assert g["gain (points)"].startswith("+15.00 [+15.00, +15.00]") and g["relative gain (%)"] == "+75.0"
    assert "+58%" in g["paper (RoBERTa-large, CoNLL-03)"]
    assert gains[("DWAtt", "128", "25", "FE")]["paper (RoBERTa-large, CoNLL-03)"] == ""  # its +5.28: 100 epochs
    lc = {(r["fusion"], r["N"]): r for r in _csv(tmp_path, "learning_curves") if r["regime"].startswith("FE")}
    assert {r["epochs"] for r in lc.values()} == {"50"}  # Fig. 4's budget
    assert lc[("Concat", "8")]["fraction of budget (ours)"].startswith("0.25") and \
        lc[("Base+n", "8")]["fraction of budget (ours)"].startswith("1.00")
    params = {r["fusion"]: r for r in _csv(tmp_path, "params")}
    assert params["DWAtt"]["paper (M)"] == "26.38M" and params["DWAtt"]["spec exact"] == "26,353,152"
    assert {r["ours − spec"] for r in params.values()} == {"+0"}
    p32 = _csv(tmp_path, "p32")
    smol = next(r for r in p32 if r["model"].startswith("smollm2-135m") and r["task"].startswith("rt-polarity")
                and "LoRA" in r["regime"])
    assert smol["paper baseline / P-32 / Avg.Pool"] == "94.90 / 94.38 / 95.18" and smol["paper Δ"] == "-0.52"
    assert smol["P-32 − baseline"].startswith("+5.00") and smol["majority"] == "50.00"
    assert any("not the paper's fine-tuning" in r["regime"] for r in p32)
    avg = next(r for r in p32 if r["task"].startswith("Avg.") and r["model"].startswith("smollm2") and "LoRA" in
               r["regime"])
    # three stand-ins (for sst2, rte, mnli): beside the paper's mean over the same three rows, never its 9-task Avg.
    assert "missing: mrpc, cola, stsb, qnli, qqp, mnli-mm" in avg["task"]
    assert avg["paper baseline / P-32 / Avg.Pool"] == "76.87 / 79.06 / 77.43"
    for fig in ("learning_curves", "lambda_heatmap"):
        assert (tmp_path / "figures" / f"{fig}.png").stat().st_size > 0, fig
    # one grid figure per (model, task, regime, hardware): here FE and FT
    assert sorted(p.name for p in (tmp_path / "figures").glob("fewshot_grid*.png")) == \
        ["fewshot_grid_wnut16_e5-small_fe_cpu.png", "fewshot_grid_wnut16_e5-small_ft_cpu.png"]
    heat = list(csv.DictReader(open(tmp_path / "figures" / "lambda_heatmap.csv")))
    first = [r for r in heat if r["model"] == "smollm2-135m" and r["regime"] == "lora" and r["block"] == "1"]
    assert [r["task"] for r in sorted(first, key=lambda r: int(r["train_examples"]))] == list(SIZES)
    assert {r["lambda_rownorm"] for r in first} == {"1"}  # the first block carries the largest raw λ in each row
    assert _csv(tmp_path, "bench")[0]["value [CI]"] == "6.00 [5.50, 6.50]"
    assert (tmp_path / "tables" / "fe_vs_ft.md").exists() and (tmp_path / "tables" / "sample_auc.md").exists()


def _fewshot_runs():
    return [r for r in _runs() if r["config"]["method"].get("protocol") == "fewshot"
            and r["config"]["method"]["name"] == "layer_fusion"]


def test_missing_records_say_what_to_run(tmp_path):
    text = empty_report(build, tmp_path, ("Table 2", "Few-shot grid", "Relative gains", "Learning curves", "FE vs FT",
                                          "P-32", "λ heatmap", "Feature-extraction speed"))
    assert "make layer_fusion-cpu" in text


def test_claims_parse_and_decide_the_constructed_records(tmp_path):
    v = verdicts("layer_fusion", _runs(), tmp_path, min_claims=8)
    held = ("concat-beats-base-n-every-n", "dwatt-beats-concat-at-128", "dwatt-beats-base-n-at-128",
             "concat-large-relative-gain-at-n8", "concat-beats-dwatt-at-n8", "fusion-beats-last-layer",
             "concat-converges-early-at-n8", "ft-beats-fe", "params-match-our-derivation", "p32-helps-decoders",
             "p32-no-gain-on-bert", "p32-beats-avgpool", "avgpool-beats-baseline", "larger-data-less-early-weight",
             "p32-helps-decoders-probe", "p32-no-gain-on-encoder-probe", "p32-beats-avgpool-probe",
             "larger-data-less-early-weight-probe")
    assert_decided_parts_hold(v, held)
    # only the (N, budget) cells that were run decide "at every N"; the others are not run, and the row says so
    every_n = v["concat-beats-base-n-every-n"]
    assert {o.label for o in every_n.outcomes if o.verdict != "not run"} == \
        {f"N={n}, {ep} epochs" for n in (8, 128) for ep in (25, 50, 100)}
    assert len(every_n.outcomes) == 20 and every_n.verdict == "partly tested" and every_n.parts == (6, 20)
    assert "N=64, 75 epochs: not run" in every_n.reason
    assert v["mlm-dwatt-closest-to-base"].verdict == "not testable here" and "MLM" in \
        v["mlm-dwatt-closest-to-base"].reason


def test_claims_turn_with_the_records(tmp_path):
    runs = [_fewshot(f, 128, 100, s, f1={"deeper": 0.5, "concat": 0.4, "dwatt": 0.3}[f]) for f in
            ("deeper", "concat", "dwatt") for s in SEEDS]
    v = verdicts("layer_fusion", runs, tmp_path)
    assert v["concat-beats-base-n-every-n"].verdict == "does not hold"
    assert v["dwatt-beats-concat-at-128"].verdict == "does not hold"
    # an arm at F1 ~ 0 (an all-O tagger) is not doing the task: not testable, never "holds"
    dead = [_fewshot(f, 8, 25, s, f1={"deeper": 0.001, "concat": 0.3}[f]) for f in ("deeper", "concat") for s in SEEDS]
    d = verdicts("layer_fusion", dead, tmp_path)
    assert d["concat-large-relative-gain-at-n8"].verdict == "not testable here"
    assert "all-O tagger" in " ".join(w for o in d["concat-large-relative-gain-at-n8"].outcomes for w in o.unfit)
    wrong = _params()
    wrong["metrics"]["params/roberta-large/concat"] = 25166848  # one shared bias
    assert verdicts("layer_fusion", [wrong], tmp_path)["params-reproduce-table2"].verdict == "does not hold"
    assert verdicts("layer_fusion", [wrong], tmp_path)["params-match-our-derivation"].verdict == "does not hold"
    flat = [_p32("minilm-l6", t, f, s, "ft") for t in SIZES for f in ("last", "scalar_mix") for s in (0, 1)]
    for r in flat:
        if r["config"]["method"]["fusion"] == "scalar_mix":
            r["metrics"]["eval/accuracy"] += 0.05  # a 5-point gain on the encoder
    assert verdicts("layer_fusion", flat, tmp_path)["p32-no-gain-on-bert"].verdict == "does not hold"


# ---- the papers' numbers -------------------------------------------------------------------------------------------

P32_TASKS = ("rte", "mrpc", "cola", "stsb", "sst2", "qnli", "qqp", "mnli", "mnli-mm")


def _avg_errors(pv) -> list[str]:
    """Every printed Avg. of P-32's Tables 2, 3, 4 and 6 that differs by more than 0.005 from its 9 rows' mean."""
    out = []
    cols = {(c.model, c.column) for c in pv.cells.values() if c.task == "avg" and c.column != "gain"}
    for model, col in sorted(cols):
        rows = [c for t in P32_TASKS for c in pv.select(model=model, task=t, column=col)]
        assert len(rows) == 9, (model, col)
        mean = float(np.mean([c.value for c in rows]))
        printed = pv.select(model=model, task="avg", column=col)[0].value
        if abs(mean - printed) > 0.005 + 1e-9:
            out.append(f"{model} {col}: printed {printed}, rows give {mean:.2f}")
    return out


def test_p32_averages_and_gains_recompute_except_the_recorded_one():
    pv = paper_values("layer_fusion")
    assert _avg_errors(pv) == ["BERT first6: printed 76.33, rows give 76.22"]  # P-32 Table 3's own inconsistency
    assert "76.22" in pv.get("BERT", "avg", "first6", "score").note
    for model in ("BERT", "StableCode", "LLaMA-2-7B", "LLaMA-2-13B"):  # §4's gains: printed Avg. P-32 − baseline
        gain = pv.get(model, "avg", "p32", "score").value - pv.get(model, "avg", "baseline", "score").value
        assert gain == pytest.approx(pv.get(model, "avg", "gain", "score").value, abs=1e-9), model
    rte = pv.get("BERT", "rte", "p32", "accuracy").value - pv.get("BERT", "rte", "baseline", "accuracy").value
    assert rte == pytest.approx(pv.get("BERT", "rte", "gain", "accuracy").value)
    # Table 3's 12-block column is Table 2's BERT baseline, Table 6's baseline and P-32 are Table 2's LLaMA-2-7B rows
    assert pv.get("BERT", "mrpc", "baseline", "f1_binary").where == "Tables 2, 3"
    assert pv.get("LLaMA-2-7B", "cola", "p32", "mcc").where == "Tables 2, 6"


def test_p32_regression_of_section_5_4_does_not_recompute():
    pv = paper_values("layer_fusion")
    tasks = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
    size = [pv.get(None, t, None, "train_samples").value for t in tasks]

    def score(t, col):
        return next(c.value for c in pv.select(model="LLaMA-2-7B", task=t, column=col))
    fit = stats.linregress(size, [score(t, "p32") - score(t, "baseline") for t in tasks])
    assert fit.slope == pytest.approx(-2.74e-06, rel=0.01) and fit.rvalue ** 2 == pytest.approx(0.033, abs=0.001)
    assert fit.pvalue == pytest.approx(0.67, abs=0.01)
    paper = pv.get("LLaMA-2-7B", None, "gain_vs_train_samples", "slope").value
    assert paper == -1.428e-05 and abs(fit.slope / paper - 1) > 0.5  # the paper's fit is not the tables'


def test_dwatt_numbers_agree_with_each_other_where_they_should():
    pv = paper_values("layer_fusion")

    def gain(col, metric, task="CoNLL-03"):
        return pv.get("RoBERTa-large", task, col, metric).value
    # Fig. 2's caption (+1.6 over Concat) is §6.2's two gains over R26 subtracted
    assert gain("N128-ep100", "gain_dwatt_vs_base_n") - gain("N128-ep100", "gain_concat_vs_base_n") == \
        pytest.approx(gain("N128-ep100", "gain_dwatt_vs_concat"))
    assert gain(None, "fusion_gain_min") == gain("N128-ep100", "gain_concat_vs_base_n")  # the abstract's 3.68
    assert "traced to no figure" in pv.get("RoBERTa-large", "CoNLL-03", None, "fusion_gain_max").note
    # Table 2 in millions vs the exact counts: Base+2 rounds to its cell, Concat and DWAtt do not (recorded)
    rounded = {c: round(pv.get("RoBERTa-large", None, c, "new_params").value / 1e6, 2) for c in
               ("base_n", "concat", "dwatt")}
    printed = {c: pv.get("RoBERTa-large", None, c, "new_params_m").value for c in rounded}
    assert {c for c in rounded if rounded[c] != printed[c]} == {"concat", "dwatt"}
    assert rounded == {"base_n": 25.19, "concat": 25.19, "dwatt": 26.35}
    # the Base+n formula 7n(d + d^2) does not give the printed 25.19M
    assert 7 * 2 * (1024 + 1024 ** 2) / 1e6 == pytest.approx(14.7, abs=0.05)
    assert pv.get(None, None, "table4", "lr").value != pv.get(None, None, None, "lr").value


def test_stand_ins_reach_the_papers_rows_only_where_their_twin_allows():
    pv = paper_values("layer_fusion")
    m = pv.find("smollm2-135m", "vitaminc", "avgpool", "accuracy", task_for="mnli")
    assert m.value == 85.48 and m.stand_in
    assert pv.lookup("minilm-l6", "winogrande", "baseline", "accuracy", task_for="rte") == 62.46
    assert pv.lookup("minilm-l6", "winogrande", "first3", "accuracy", task_for="rte") is None  # Table 3: not twinned
    assert pv.lookup("e5-small", "wnut16", "N128-ep100", "gain_dwatt_vs_base_n", task_for="conll2003") == 5.28
    assert pv.lookup("roberta-large", "conll2003", "N8-ep25", "rel_gain_concat_vs_base_n") == 58


# ---- P-32 at paper scale: each GLUE task in its paper metric, MNLI-mm from the mnli model -------------------------

GLUE = {"rte": "accuracy", "mrpc": "f1_binary", "cola": "mcc", "stsb": "spearman", "sst2": "accuracy",
        "qnli": "accuracy", "qqp": "f1_binary", "mnli": "accuracy"}


def _glue(task, fusion, seed, paper=0.5, acc=0.8):
    """A LLaMA-2-7B LoRA record: `paper` on the task's paper metric, `acc` on accuracy (they disagree on purpose)."""
    metric = GLUE[task]
    m = {f"eval/{metric}": paper + 0.002 * seed, "eval/majority_accuracy": 0.5}
    if metric != "accuracy":
        m["eval/accuracy"] = acc + 0.002 * seed
    if metric == "f1_binary":
        m["eval/majority_f1_binary"] = 0.3
    if task == "mnli":
        m.update({"eval_mismatched/accuracy": paper + 0.05 + 0.002 * seed, "eval_mismatched/majority_accuracy": 0.35})
    if fusion == "scalar_mix":
        m.update({"lambda/entropy_ratio": 0.99999, "lambda/early_excess": 0.0})
    r = _rec("layer_fusion", "llama-2-7b", task, seed, m, {}, {"train_examples": 1000, "eval_examples": 400},
             kind="causal", layers=32, exp_id="layer_fusion/p32_glue", protocol="p32", regime="lora", fusion=fusion)
    r["config"]["task"]["objective"] = f"eval/{metric}"
    r["config"]["model"]["source"] = r["config"]["task"]["source"] = "hub"
    return r


def test_p32_table_reads_each_tasks_paper_metric_and_averages_like_the_paper(tmp_path):
    runs = [_glue(t, f, s, paper={"last": 0.5, "scalar_mix": 0.6, "mean": 0.55}[f]) for t in GLUE
            for f in ("last", "scalar_mix", "mean") for s in (0, 1)]
    build(runs, tmp_path)
    rows = {r["task"].split(" ")[0]: r for r in _csv(tmp_path, "p32")}
    assert rows["cola"]["metric"] == "mcc" and rows["cola"]["baseline"].startswith("50.10")
    assert rows["cola"]["paper baseline / P-32 / Avg.Pool"] == "46.40 / 50.89 / 51.76"  # MCC, found under its metric
    assert rows["mrpc"]["metric"] == "f1_binary" and rows["mrpc"]["paper baseline / P-32 / Avg.Pool"] == \
        "80.47 / 83.91 / 76.79"
    assert rows["qqp"]["paper baseline / P-32 / Avg.Pool"] == "87.06 / 85.07 / 86.95"
    assert rows["stsb"]["metric"] == "spearman" and rows["stsb"]["paper Δ"] == "+2.32"
    mm = rows["mnli-mismatched"]  # the mnli model on validation_mismatched: no model of its own
    assert mm["baseline"].startswith("55.10") and mm["paper baseline / P-32 / Avg.Pool"] == "82.90 / 86.25 / 86.22"
    avg = next(r for r in _csv(tmp_path, "p32") if r["task"].startswith("Avg."))
    assert avg["task"] == "Avg. of the paper's 9 tasks" and avg["paper baseline / P-32 / Avg.Pool"] == \
        "77.93 / 79.92 / 78.53"
    # without STS-B: our 8-task mean beside the paper's mean of the same 8 rows, never its printed 9-task Avg.
    build([r for r in runs if r["config"]["task"]["name"] != "stsb"], tmp_path)
    avg = next(r for r in _csv(tmp_path, "p32") if r["task"].startswith("Avg."))
    assert avg["task"] == "Avg. over 8 of the paper's 9 tasks (missing: stsb)"
    assert avg["paper baseline / P-32 / Avg.Pool"] == "77.06 / 79.01 / 77.86"
    assert "λ did not learn" in (tmp_path / "tables" / "p32.md").read_text()


def test_p32_claims_read_each_tasks_paper_metric(tmp_path):
    """P-32 beats the baseline on MCC (CoLA), F1 (MRPC) and MNLI-mm while losing on their accuracy: the claims
    read the paper's metric, each in points."""
    runs = [_glue(t, f, s, paper={"last": 0.6, "scalar_mix": 0.7}[f], acc={"last": 0.85, "scalar_mix": 0.8}[f])
            for t in ("cola", "mrpc", "mnli") for f in ("last", "scalar_mix") for s in SEEDS]
    row = verdicts("layer_fusion", runs, tmp_path)["p32-helps-decoders"]
    by = {o.label.split(" ")[0]: o for o in row.outcomes}
    assert by["CoLA"].verdict == by["MRPC,"].verdict == by["MNLI-mm"].verdict == "holds"
    assert by["CoLA"].estimate == pytest.approx(10.0) and by["MRPC,"].estimate == pytest.approx(10.0)
    assert by["accuracy"].verdict == "holds"  # mnli (matched) reads its accuracy, the paper metric there
    assert by["STS-B"].verdict == "not run" and row.verdict == "partly tested"


def test_dwatt_at_128_reads_the_100_epoch_panel_only(tmp_path):
    """Fig. 2 is the 100-epoch panel: 25-epoch records at N = 128 do not decide the claims."""
    short = [_fewshot(f, 128, 25, s) for f in ("deeper", "concat", "dwatt") for s in SEEDS]
    v = verdicts("layer_fusion", short, tmp_path)
    assert v["dwatt-beats-concat-at-128"].verdict == "not run" and v["dwatt-beats-base-n-at-128"].verdict == "not run"
    v = verdicts("layer_fusion", short + [_fewshot(f, 128, 100, s) for f in ("deeper", "concat", "dwatt") for s in SEEDS], tmp_path)
    assert v["dwatt-beats-concat-at-128"].verdict == "holds"
    assert {r["config"]["train"]["epochs"] for o in v["dwatt-beats-concat-at-128"].outcomes for r in o.records} == {100}


def test_params_compare_with_the_printed_table_and_our_derivation_apart(tmp_path):
    v = verdicts("layer_fusion", [_params()], tmp_path)
    printed = {o.label: o for o in v["params-reproduce-table2"].outcomes}
    # Table 2 prints millions: Base+2 25.19M is ours rounded; Concat (25.19M, printed 25.18M) and DWAtt (26.35M,
    # printed 26.38M) are not, and the row says so instead of checking our derivation against itself
    assert printed["Base+2"].verdict == "holds" and printed["Concat"].verdict == "does not hold"
    assert printed["DWAtt"].verdict == "does not hold" and printed["DWAtt"].estimate == pytest.approx(-26848)
    ours = v["params-match-our-derivation"]
    assert ours.verdict == "holds" and all("paper" not in (o.shown or "") for o in ours.outcomes)
    assert ours.claim.where.startswith("ours")


def test_lambda_at_uniform_leaves_the_early_weight_claims_not_testable(tmp_path):
    """P-32 Fig. 2's reading needs λ to have moved: a run whose softmax(λ) stayed uniform records no
    extra.lambda_learned, so the correlation is not testable rather than a verdict on noise."""
    runs = [_p32(model, t, "scalar_mix", s, "fe") for model in ACC for t in SIZES for s in (0, 1)]
    assert verdicts("layer_fusion", runs, tmp_path)["larger-data-less-early-weight-probe"].verdict == "holds"
    for r in runs:  # what layer_fusion/run.py records when λ did not move
        r["metrics"]["lambda/entropy_ratio"] = 0.99999
        del r["extra"]["lambda_learned"]
    row = verdicts("layer_fusion", runs, tmp_path)["larger-data-less-early-weight-probe"]
    assert row.verdict == "not testable here" and "lambda_learned" in row.outcomes[0].reason
