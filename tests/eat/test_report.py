"""eat/report.py builds Tables 1-3 (the paper's rows beside ours), the ablation, scaling, calibration and the figures
from run records, says what to run where records are missing, and eat/claims.yaml decides the claims we construct."""
import csv
import math

import numpy as np
import pytest

from eat.report import _kept, build
from experiments.evidence.claims import load_claims
from experiments.evidence.verdicts import evaluate_claims

N = 200
LABELS = [i % 2 for i in range(N)]


def _preds(n_wrong: int) -> list[int]:
    return [1 - y if i < n_wrong else y for i, y in enumerate(LABELS)]


def _cfg(method, variant, model="minilm-l6", task="rt-polarity", layers=6, seed=0, **m):
    return {"method": {"name": method, "variant": variant, "prune_after": [2, 4], "prune_ratio": 0.3,
                       "prune_rule": "paper", "baseline_model": "minilm-l3", **m},
            "task": {"name": task, "stand_in_for": "sst2" if task == "rt-polarity" else None, "type": "cls",
                     "objective": "eval/accuracy"},
            "model": {"name": model, "stand_in_for": None, "num_layers": layers, "source": "offline"},
            "data": {"limit_train": 1000}, "hardware": {"name": "cpu", "eval_batch_size": 64}, "seed": seed,
            "run_id": f"{task}--{model}--{method}-{variant}--seed{seed}"}


def _rec(config, metrics, per_example=None, extra=None, exp_id="eat/table1_sst2_cpu"):
    config["exp_id"] = exp_id  # selectors read the config's copy
    return {"schema_version": 2, "paper": "eat", "exp_id": exp_id, "status": "ok", "run_id": config["run_id"],
            "config": config, "metrics": metrics, "per_example": per_example or {}, "extra": extra or {},
            "n_samples": {"eval_examples": N}, "provenance": {"hardware": "cpu", "device": "cpu: test",
                                                          "git_dirty": False}}


D, D_FF, WINDOW = 384, 1536, 16
# per-layer loads (running, tokens_in, retention_observed, retention_scheduled) as the records keep them in extra.layers
LOADS = {
    "dense": [(1.0, 40.0, 1.0, 1.0)] * 6,
    # pruned after layers 2 and 4; 40% of the examples exit at layer 4
    "eat": [(1.0, 40.0, 1.0, 1.0), (1.0, 40.0, 0.70, 0.70), (1.0, 28.0, 0.70, 0.70), (1.0, 28.0, 0.50, 0.49),
            (0.6, 20.0, 0.50, 0.49), (0.6, 20.0, 0.50, 0.49)],
    # zero-masked: every slot stays in the tensor, so each layer computes all 40
    "paper_code": [(1.0, 40.0, 1.0, 1.0), (1.0, 40.0, 0.70, 0.70), (1.0, 40.0, 0.70, 0.70), (1.0, 40.0, 0.50, 0.49),
                   (0.9, 40.0, 0.50, 0.49), (0.9, 40.0, 0.50, 0.49)],
}


def _layers(variant, n_layers=6):
    return [{"layer": i + 1, "running": r, "tokens_in": t, "retention_observed": o, "retention_scheduled": sc}
            for i, (r, t, o, sc) in enumerate(LOADS[variant][:n_layers])]


def _shape(variant, n_layers=6):
    return {"layers": _layers(variant, n_layers), "seq_len_mean": 40.0,
            "model_dims": {"layers": n_layers, "hidden": D, "intermediate": D_FF, "heads": 12,
                           "window": None if variant == "dense" else WINDOW}}


def _hand_flops(variant, window, exit_head=True, n_layers=6):
    """eat/flops.py's convention by hand: 2 x (4nd² + 2nkd + 2nd·d_ff) per layer x running, + heads Linear(d, 2)."""
    total = 0.0
    for r, t, _, _ in LOADS[variant][:n_layers]:
        k = t if window is None else min(t, 2 * window + 2)
        total += r * (4 * t * D * D + 2 * t * k * D + 2 * t * D * D_FF)
    total += LOADS[variant][n_layers - 1][0] * D * 2 + (LOADS[variant][3][0] * D * 2 if exit_head else 0)
    return 2 * total


def _acc_rec(variant, n_wrong, model="minilm-l6", layers=6, tau=0.9, lengths=None, per_layer=True):
    preds = _preds(n_wrong)
    m = {"eval/accuracy": 1 - n_wrong / N, "eval/majority_accuracy": 0.5, "eval/avg_depth": float(layers),
         "eval/avg_retention": 1.0, "eat/tau": float("nan")}
    extra = {}
    if variant != "dense":
        lengths = lengths or [8 + (i % 120) for i in range(N)]
        ret = [_kept(t, 0.3, 2, "paper" if variant == "eat" else "repo") / t for t in lengths]
        m.update({"eval/avg_depth": 5.2, "eval/avg_retention": float(np.mean(ret)), "eat/tau": tau,
                  "calib/ece_dev_before": 0.06, "calib/ece_dev_after": 0.02, "calib/ece_eval_before": 0.07,
                  "calib/ece_eval_after": 0.03, "calib/temperature": 1.6})
        frontier = [{"tau": t, "accuracy": m["eval/accuracy"] - 0.01 * (t < tau), "avg_depth": 4 + 2 * t,
                     "avg_retention": m["eval/avg_retention"], "dev_accuracy": 0.8,
                     "exit_hist": {"4": int(100 * (1 - t)), "6": 100 - int(100 * (1 - t))}}
                    for t in (0.8, 0.85, 0.9, 0.95)]
        bins = {"lo": [0.5, 0.75], "hi": [0.75, 1.0], "count": [50, 150], "accuracy": [0.6, 0.9],
                "confidence": [0.62, 0.93]}
        extra = {"frontier": frontier, "curve": {k: [f[k] for f in frontier] for k in ("tau", "avg_depth")},
                 "detail": {"length": lengths, "retention": ret, "depth": [5] * N},
                 "reliability": {"before": bins, "after": bins}}
    if per_layer:
        extra.update(_shape(variant, layers))
    cfg = _cfg("eat", variant, model=model, layers=layers, exit_layer=4)
    cfg["task"]["label_names"] = ["neg", "pos"]
    return _rec(cfg, m, {"eval": {"pred": preds, "label": LABELS}}, extra)


CONTENDERS = ("dense_hf", "dense", "eat:none", "eat:prune+window", "eat:prune+window+exit", "paper_code", "baseline",
              "eat:best")
EAT = "eat:prune+window+exit"


def _bench(speedups: dict, tau=0.9, n_reps=200, spread=0.05, delta=-0.5, deltas=None, best=None):
    rng = np.random.default_rng(0)
    m, reps = {"eat/tau": tau, "calib/temperature": 1.6}, {}
    for name in CONTENDERS:
        s, d = speedups.get(name, 1.0), (deltas or {}).get(name, delta)
        p50 = 10.0 / s
        m.update({f"latency/{name}_p50_ms": p50, f"latency/{name}_p90_ms": 1.2 * p50,
                  f"latency/{name}_p99_ms": 1.5 * p50, f"latency/{name}_mean_ms": 1.1 * p50,
                  f"throughput/{name}_per_s": 100 * s, f"speedup/{name}_p50": s, f"acc/{name}": 85.0,
                  f"delta_acc/{name}": d, f"delta_acc/{name}_lo": d - 1, f"delta_acc/{name}_hi": d + 1,
                  f"depth/{name}": 6.0, f"retention/{name}": 0.53 if "prune" in name else 1.0})
        reps[f"speedup/{name}_p50"] = (s + spread * rng.standard_normal(n_reps)).tolist()
        reps[f"delta_acc/{name}"] = (d + 0.1 * rng.standard_normal(n_reps)).tolist()
    cfg = _cfg("eat_bench", "latency", exit_layer=4)
    cfg["task"]["label_names"] = ["neg", "pos"]
    shape = _shape("eat")
    return _rec(cfg, m, extra={"replicates": reps, "reference": "dense", "contenders": list(CONTENDERS),
                               "best_setting": best, **shape,
                               "layers_by_contender": {"dense": _layers("dense"), EAT: _layers("eat"),
                                                       "paper_code": _layers("paper_code")}},
                exp_id="eat/ablation_cpu")


def _length(speedups: dict):
    rng = np.random.default_rng(2)
    m = {f"long/speedup/{name}_p50": s for name, s in speedups.items()}
    reps = {f"long/speedup/{name}_p50": (s + 0.02 * rng.standard_normal(100)).tolist() for name, s in speedups.items()}
    return _rec(_cfg("eat_bench", "length"), m, extra={"replicates": reps}, exp_id="eat/length_cpu")


def _scaling(slopes: dict):
    m, reps = {}, {}
    for arm, s in slopes.items():
        for T in (512, 1024, 2048, 4096):
            m[f"scaling/{arm}_ms@{T}"] = (T / 512) ** s
        m[f"scaling/{arm}_slope"] = s
        reps[f"scaling/{arm}_slope"] = (s + 0.02 * np.random.default_rng(1).standard_normal(100)).tolist()
    return _rec(_cfg("eat_bench", "scaling"), m, extra={"replicates": reps, "shape": {"hidden_size": 256,
                                                                                       "num_hidden_layers": 4},
                                                         "prune_after": [2]}, exp_id="eat/scaling_cpu")


def _runs():
    return [_acc_rec("dense", 30), _acc_rec("eat", 32), _acc_rec("paper_code", 34),
            _acc_rec("dense", 40, model="minilm-l3", layers=3),
            _bench({EAT: 1.5, "eat:best": 1.5, "paper_code": 0.6, "baseline": 2.0},
                   deltas={EAT: -0.5, "baseline": -4.0}),
            _length({"paper_code": 0.9}), _scaling({"dense": 1.6, "window": 1.05, "eat": 1.0, "paper_code": 1.9})]


def _paper_code_bench(speedups: dict):
    """The record paper-code-slower-than-dense needs: the paper-code arm's own weights, temperature 1, paper-code
    mode, timed at batch 1 at each tau of the paper's grid, snippets and long documents."""
    rng = np.random.default_rng(3)
    m = {f"{p}speedup/paper_code@{t}_p50": s for t, s in speedups.items() for p in ("", "long/")}
    reps = {k: (v + 0.02 * rng.standard_normal(100)).tolist() for k, v in m.items()}
    return _rec(_cfg("eat_bench", "paper_code"), m, extra={"replicates": reps}, exp_id="eat/paper_code_cpu")


def _csv(out, name):
    return list(csv.DictReader(open(out / "tables" / f"{name}.csv")))


def _verdicts(runs, tmp_path):
    return {r.claim.id: r for r in evaluate_claims("eat", runs, tmp_path)}


def _ours(out):
    """Table 1's rows of ours keyed by (model, arm, tau, record)."""
    return {(r["model"], r["arm"], r["tau"], r["record (regime)"]): r
            for r in _csv(out, "table1_rt-polarity") if r["source"] == "ours"}


BENCH = "method=eat_bench, batch 1"
L6, L3 = "minilm-l6 (for BERT-base)", "minilm-l3 (for DistilBERT)"


@pytest.mark.parametrize("t,paper,repo", [(8, 5, 5), (10, 6, 5), (24, 13, 12), (64, 33, 32), (256, 127, 126)])
def test_the_keep_rules_leave_the_counts_worked_out_by_hand(t, paper, repo):
    assert (_kept(t, 0.3, 2, "paper"), _kept(t, 0.3, 2, "repo")) == (paper, repo)


def test_tables_and_figures_are_built_beside_the_papers_rows(tmp_path):
    text = "\n".join(build(_runs(), tmp_path))
    t1 = _csv(tmp_path, "table1_rt-polarity")
    paper = [r for r in t1 if r["source"].startswith("paper")]
    assert {r["model"] for r in paper} == {"BERT-base", "DistilBERT"} and len(paper) == 7  # BERT, DistilBERT, 5 EAT
    assert next(r for r in paper if r["model"] == "DistilBERT")["latency_ms (p50)"] == "5.57–6.13"
    ours = _ours(tmp_path)
    eat = ours[(L6, "EAT (ours)", "0.90 (dev)", "method=eat")]
    assert eat["Δacc (pp)"].startswith("-1.00 [") and eat["latency_ms (p50)"] == ""  # an accuracy run is not timed
    timed = ours[(L6, "EAT (ours)", "0.90 (dev)", BENCH)]  # the benchmark of the same task and model, its own row
    assert timed["latency_ms (p50)"] == "6.67" and timed["speed-up vs dense"].startswith("1.50x [")
    assert ours[(L6, "paper-code mode on the EAT weights (T = 1.60)", "0.90 (dev)", BENCH)][
        "speed-up vs dense"].startswith("0.60x")
    assert ours[(L3, "baseline (dense)", "", BENCH)]["speed-up vs dense"].startswith("2.00x")
    assert ours[(L3, "baseline (dense)", "", "method=eat")]["Δacc (pp)"].startswith("-5.00 [")
    assert len([k for k in ours if k[1] == "EAT (ours)" and k[3] == "method=eat"]) == 4  # one row per swept tau
    vs = _csv(tmp_path, "paper_vs_repro")
    assert {(r["arm"], r["metric"]) for r in vs} >= {("EAT (ours)", "speedup_vs_bert"), ("dense", "delta_acc_pp"),
                                                     ("EAT (ours)", "avg_retention")}
    assert not any(r["metric"] in ("latency_ms", "accuracy") for r in vs)  # offline twins: relative columns only
    assert not any("EAT weights" in r["arm"] for r in vs)  # not the official code's EAT: held to no paper row
    abl = _csv(tmp_path, "ablation")
    assert [r["contender"] for r in abl] == [*CONTENDERS[:-3], "paper_code (paper-code mode on the EAT weights)",
                                             "baseline (minilm-l3)",
                                             "eat:best = none (no subset within the dev tolerance) (the subset "
                                             "chosen on dev)"]
    sc = {r["arm"]: r for r in _csv(tmp_path, "scaling")}
    assert sc["eat"]["log-log slope [CI]"].startswith("1.00 [") and float(sc["dense"]["ms@4096"]) == pytest.approx(
        8 ** 1.6, rel=1e-6)
    cal = _csv(tmp_path, "calibration")
    assert [(r["ECE eval before"], r["ECE eval after"], r["scaled"]) for r in cal] == [("7.00", "3.00", "yes")] * 2
    for fig in ("frontier", "scaling", "reliability", "retention_by_layer", "retention_vs_length", "exit_layers"):
        assert (tmp_path / "figures" / f"{fig}.png").stat().st_size > 0, fig
        assert (tmp_path / "figures" / f"{fig}.csv").exists()
    assert "could not be built" not in text


def test_no_row_of_table1_splices_two_records_or_two_regimes(tmp_path):
    """The paper-code arm's accuracy run (83% at its own weights) and the benchmark's paper-code contender (85%, the
    EAT arm's weights in paper-code mode) are two models: a row holds the numbers of one record only."""
    build(_runs(), tmp_path)
    ours = _ours(tmp_path)
    for (model, arm, tau, record), r in ours.items():
        timed = r["latency_ms (p50)"] != ""
        assert timed == (record == BENCH) and (r["speed-up vs dense"] != "") == timed, (model, arm, record)
        if timed:  # accuracy, depth and retention as the same benchmark scored them
            assert r["acc (%)"] == "85.00" and r["avg_depth"] == "6.00", (model, arm)
    pc = ours[(L6, "paper-code", "0.90 (dev)", "method=eat, batch exit at batch 64")]
    assert pc["acc (%)"].startswith("83.00 [") and pc["latency_ms (p50)"] == "" and pc["speed-up vs dense"] == ""
    notes = (tmp_path / "tables" / "table1_rt-polarity.md").read_text()
    assert "never merged into one row" in notes
    runs = _runs()
    runs[2]["extra"]["exit_scored_at_batch"] = 1  # a paper-code run whose exits were scored at batch 1
    build(runs, tmp_path / "b1")
    assert (L6, "paper-code", "0.90 (dev)", "method=eat, batch exit at batch 1") in _ours(tmp_path / "b1")


def test_normalised_flops_from_the_per_layer_counts(tmp_path):
    build(_runs(), tmp_path)
    ours = _ours(tmp_path)
    dense = _hand_flops("dense", None, exit_head=False)
    # EAT: banded window, exit head read by everyone; paper-code: the dense (T, T) mask computes every pair
    want = {(L6, "dense", "", "method=eat"): 1.0,
            (L6, "EAT (ours)", "0.90 (dev)", "method=eat"): _hand_flops("eat", WINDOW) / dense,
            (L6, "paper-code", "0.90 (dev)", "method=eat, batch exit at batch 64"): _hand_flops("paper_code", None)
            / dense,
            (L3, "baseline (dense)", "", "method=eat"): _hand_flops("dense", None, False, n_layers=3) / dense,
            (L6, "EAT (ours)", "0.90 (dev)", BENCH): _hand_flops("eat", WINDOW) / dense}
    for key, v in want.items():
        assert float(ours[key]["norm. FLOPs"]) == pytest.approx(v, abs=0.005), key
    # zero-masking saves nothing in a layer (only the exits save); physical pruning and the window do
    assert dense > _hand_flops("paper_code", None) > _hand_flops("eat", WINDOW)
    assert ours[(L6, "EAT (ours)", "0.80", "method=eat")]["norm. FLOPs"] == ""  # loads kept at the chosen tau only
    assert ours[(L3, "baseline (dense)", "", BENCH)]["norm. FLOPs"] == ""  # another model than model_dims describe


def test_fig2_scheduled_vs_observed_retention_per_layer(tmp_path):
    text = "\n".join(build(_runs(), tmp_path))
    rows = _csv(tmp_path, "retention_by_layer")
    got = {(r["model"], r["arm"], int(r["layer"])): r for r in rows}
    assert len(rows) == 6 * 3 + 3  # dense, EAT, paper-code on minilm-l6; the 3-layer baseline
    eat5 = got[(L6, "eat", 5)]
    assert (eat5["running (%)"], eat5["tokens in"], eat5["retention scheduled"], eat5["retention observed"]) == \
        ("60.0", "20.0", "0.490", "0.500")
    assert float(eat5["MFLOPs per example"]) == pytest.approx(
        1e-6 * 2 * 0.6 * (4 * 20 * D * D + 2 * 20 * 20 * D + 2 * 20 * D * D_FF), abs=0.01)
    assert got[(L6, "paper_code", 6)]["tokens in"] == "40.0"
    data = list(csv.DictReader(open(tmp_path / "figures" / "retention_by_layer.csv")))
    assert {d["variant"] for d in data} == {"dense", "eat", "paper_code"} and len(data) == len(rows)
    assert "Fig. 2: scheduled vs observed token retention per layer" in text


def test_records_without_per_layer_counts_leave_fig2_and_flops_out_with_a_reason(tmp_path):
    runs = [_acc_rec("dense", 30, per_layer=False), _acc_rec("eat", 32, per_layer=False)]
    text = "\n".join(build(runs, tmp_path))
    assert "_Fig. 2 (scheduled vs observed retention per layer): no method=eat record keeps per-layer token " \
           "counts; 2 method=eat record(s) without per-layer counts" in text
    t1 = _csv(tmp_path, "table1_rt-polarity")
    assert {r["norm. FLOPs"] for r in t1 if r["source"] == "ours"} == {""}
    note = (tmp_path / "tables" / "table1_rt-polarity.md").read_text()
    assert "records without the per-layer counts (made before them: rt-polarity/minilm-l6/dense, " \
           "rt-polarity/minilm-l6/eat)" in note
    assert "could not be built" not in text


def test_missing_records_say_what_to_run(tmp_path):
    text = "\n".join(build([], tmp_path))
    for what in ("Tables 1-3", "Ablation", "Frontier", "Scaling", "Calibration", "Fig. 2", "Fig. 5", "Fig. 6"):
        assert f"_{what}" in text and "make eat-cpu" in text, what
    assert "could not be built" not in text
    only_acc = "\n".join(build([_acc_rec("dense", 30), _acc_rec("eat", 32)], tmp_path / "acc"))
    assert "No latency benchmark for rt-polarity / minilm-l6: run `python -m experiments.run method=eat_bench" \
        in only_acc
    assert "_Ablation: no method=eat_bench" in only_acc and "could not be built" not in only_acc


def test_the_dev_chosen_subset_is_named_for_what_it_is(tmp_path):
    build([_bench({"eat:best": 1.3}, best="eat:exit")], tmp_path)
    abl = _csv(tmp_path, "ablation")
    assert abl[-1]["contender"] == "eat:best = exit only (the subset chosen on dev)"
    claim = next(c for c in load_claims("eat").claims if c.id == "eat-faster-than-dense-ours")
    assert "The best EAT setting" not in claim.claim and "exit only" in claim.claim


def test_claims_parse_and_decide_the_constructed_records(tmp_path):
    reg = load_claims("eat")
    assert len(reg.claims) >= 8
    kinds = {c.id: c.kind for c in reg.claims}
    assert kinds["tau-controls-depth"] == kinds["retention-about-half"] == "by-construction"
    assert kinds["tau-trades-accuracy-for-speed"] == "paper"
    v = _verdicts(_runs(), tmp_path)
    # the paper-code arm's own weights were never timed: not run, and the row says which record it needs
    assert v["paper-code-slower-than-dense"].verdict == "not run" and \
        "method.variant=paper_code" in v["paper-code-slower-than-dense"].reason
    assert v["eat-faster-than-dense-ours"].verdict == "holds"  # every replicate near 1.5 >= 1.3, Δacc near -0.5
    assert v["all-three-components-faster-ours"].verdict == "holds"
    # 1 < 1.5 < 2.0 and EAT 3.5 points above the baseline
    assert v["eat-bridges-dense-and-baseline"].verdict == "holds"
    assert v["eat-within-3-points-of-dense"].verdict == "holds"  # -1 point, paired over 200 examples
    assert v["eat-beats-distilbert-accuracy"].verdict == "partly tested"  # 84 vs 80; the bert-base pair not run
    # a depth-vs-tau curve of 4 points carries no correlation interval
    assert v["tau-controls-depth"].verdict == "not testable here" and \
        "r over 4 points" in v["tau-controls-depth"].outcomes[0].reason
    # no exit and the exit are equally accurate here (both -0.5 vs dense): no accuracy bought back, no trade-off
    assert v["tau-trades-accuracy-for-speed"].outcomes[1].verdict == "holds"  # 1.5 / 1.0
    assert v["tau-trades-accuracy-for-speed"].outcomes[0].verdict != "holds"
    # the same keep rule on both sides, the retention shown beside the paper's; QQP and MNLI-m not run
    ret = v["retention-about-half"]
    assert ret.verdict == "partly tested" and ret.outcomes[0].verdict == "holds"
    rt = _acc_rec("paper_code", 34)["metrics"]["eval/avg_retention"]
    assert ret.outcomes[0].shown.startswith(f"{rt:.2f} vs paper 0.52") and ret.outcomes[0].a_mean == \
        pytest.approx(rt)
    assert v["prunes-more-on-short-inputs"].verdict == "does not hold"  # short inputs keep more
    assert v["linear-cost-ours"].verdict == "holds"
    assert v["linear-cost-paper-code"].verdict == "does not hold"
    # one ECE per arm, no per-example confidences: a noisy value without an interval decides nothing
    ece = v["temperature-scaling-lowers-ece"]
    assert ece.verdict == "inconclusive"
    assert ece.outcomes[0].estimate == pytest.approx(-4.0) and "points" in ece.outcomes[0].statistic  # 3% - 7%
    assert v["mnli-eat-38-percent"].verdict == "not testable here" and "harness" in v["mnli-eat-38-percent"].reason


def test_claims_turn_with_the_records(tmp_path):
    runs = [_acc_rec("dense", 30), _acc_rec("eat", 60),
            _bench({EAT: 1.1, "eat:best": 1.1, "paper_code": 1.2, "baseline": 0.8}),
            _length({"paper_code": 1.1}),
            _scaling({"dense": 1.6, "eat": 1.5, "paper_code": 1.9})]
    v = _verdicts(runs, tmp_path)
    assert v["eat-faster-than-dense-ours"].verdict == "does not hold"  # every replicate near 1.1 < 1.3
    slow_but_wrong = _bench({"eat:best": 1.5}, delta=-3.0)  # fast, but 3 points worse than dense
    assert _verdicts([slow_but_wrong], tmp_path)["eat-faster-than-dense-ours"].verdict == "does not hold"
    assert v["eat-bridges-dense-and-baseline"].verdict == "does not hold"  # EAT faster than the baseline here
    assert v["eat-within-3-points-of-dense"].verdict == "does not hold"  # -15 points
    assert v["linear-cost-ours"].verdict == "does not hold"
    # a benchmark of the tau sweep is not the dev-chosen EAT: the speed claims do not read it
    sweep = _bench({"eat:best": 3.0}, tau=0.8)
    sweep["exp_id"] = sweep["config"]["exp_id"] = "eat/frontier_cpu"
    assert _verdicts(runs + [sweep], tmp_path)["eat-faster-than-dense-ours"].verdict == "does not hold"
    # the paper-code arm's own weights timed at the paper's grid decide paper-code-slower-than-dense either way
    grid = ("0.80", "0.85", "0.90", "0.95")
    slow = _paper_code_bench(dict.fromkeys(grid, 0.6))
    assert _verdicts([slow], tmp_path)["paper-code-slower-than-dense"].verdict == "holds"
    fast_at_one = _paper_code_bench({**dict.fromkeys(grid, 0.6), "0.80": 1.2})
    assert _verdicts([fast_at_one], tmp_path)["paper-code-slower-than-dense"].verdict == "does not hold"


def test_bridging_needs_accuracy_above_the_small_model(tmp_path):
    """Between dense and the baseline in latency, but less accurate than the baseline: dominated, not a bridge."""
    dominated = _bench({EAT: 1.5, "baseline": 2.0}, deltas={EAT: -3.0, "baseline": -0.5})
    row = _verdicts([dominated], tmp_path)["eat-bridges-dense-and-baseline"]
    assert [o.verdict for o in row.outcomes] == ["holds", "holds", "does not hold"] and row.verdict == "does not hold"


def test_the_frontier_claim_needs_accuracy_bought_back_by_a_higher_tau(tmp_path):
    trade = _bench({EAT: 1.4, "eat:prune+window": 1.1}, deltas={EAT: -2.0, "eat:prune+window": -0.2})
    assert _verdicts([trade], tmp_path)["tau-trades-accuracy-for-speed"].verdict == "holds"
    worse_without_exit = _bench({EAT: 1.4, "eat:prune+window": 1.1}, deltas={EAT: -0.2, "eat:prune+window": -2.0})
    assert _verdicts([worse_without_exit], tmp_path)["tau-trades-accuracy-for-speed"].verdict == "does not hold"
    slower_exit = _bench({EAT: 0.9, "eat:prune+window": 1.1}, deltas={EAT: -2.0, "eat:prune+window": -0.2})
    assert _verdicts([slower_exit], tmp_path)["tau-trades-accuracy-for-speed"].verdict == "does not hold"


def test_an_arm_at_the_majority_class_makes_accuracy_claims_not_testable(tmp_path):
    dense, eat = _acc_rec("dense", 30), _acc_rec("eat", 99)
    eat["per_example"]["eval"]["pred"] = [0] * N  # constant predictions
    eat["metrics"]["eval/accuracy"] = 0.5
    v = _verdicts([dense, eat], tmp_path)
    assert v["eat-within-3-points-of-dense"].verdict == "not testable here"
    assert math.isfinite(v["eat-within-3-points-of-dense"].outcomes[0].estimate)
