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
            "data": {"limit_train": 1000}, "hardware": {"name": "cpu"}, "seed": seed,
            "run_id": f"{task}--{model}--{method}-{variant}--seed{seed}"}


def _rec(config, metrics, per_example=None, extra=None, exp_id="eat/table1_sst2_cpu"):
    config["exp_id"] = exp_id  # selectors read the config's copy
    return {"schema_version": 2, "paper": "eat", "exp_id": exp_id, "status": "ok", "run_id": config["run_id"],
            "config": config, "metrics": metrics, "per_example": per_example or {}, "extra": extra or {},
            "n_samples": {"eval_examples": N}, "provenance": {"hardware": "cpu", "device": "cpu: test",
                                                          "git_dirty": False}}


def _acc_rec(variant, n_wrong, model="minilm-l6", layers=6, tau=0.9, lengths=None):
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
    return _rec(_cfg("eat", variant, model=model, layers=layers), m, {"eval": {"pred": preds, "label": LABELS}},
                extra)


CONTENDERS = ("dense_hf", "dense", "eat:none", "eat:prune+window", "eat:prune+window+exit", "paper_code", "baseline",
              "eat:best")


def _bench(speedups: dict, tau=0.9, n_reps=200, spread=0.05, delta=-0.5):
    rng = np.random.default_rng(0)
    m, reps = {"eat/tau": tau}, {}
    for name in CONTENDERS:
        s = speedups.get(name, 1.0)
        p50 = 10.0 / s
        m.update({f"latency/{name}_p50_ms": p50, f"latency/{name}_p90_ms": 1.2 * p50,
                  f"latency/{name}_p99_ms": 1.5 * p50, f"latency/{name}_mean_ms": 1.1 * p50,
                  f"throughput/{name}_per_s": 100 * s, f"speedup/{name}_p50": s, f"acc/{name}": 85.0,
                  f"delta_acc/{name}": delta, f"delta_acc/{name}_lo": delta - 1, f"delta_acc/{name}_hi": delta + 1,
                  f"depth/{name}": 6.0, f"retention/{name}": 0.53 if "prune" in name else 1.0})
        reps[f"speedup/{name}_p50"] = (s + spread * rng.standard_normal(n_reps)).tolist()
        reps[f"delta_acc/{name}"] = (delta + 0.1 * rng.standard_normal(n_reps)).tolist()
    return _rec(_cfg("eat_bench", "latency"), m, extra={"replicates": reps, "reference": "dense",
                                                         "contenders": list(CONTENDERS)}, exp_id="eat/ablation_cpu")


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
            _bench({"eat:prune+window+exit": 1.5, "eat:best": 1.5, "paper_code": 0.6, "baseline": 2.0}),
            _length({"paper_code": 0.9}), _scaling({"dense": 1.6, "window": 1.05, "eat": 1.0, "paper_code": 1.9})]


def _csv(out, name):
    return list(csv.DictReader(open(out / "tables" / f"{name}.csv")))


def _verdicts(runs, tmp_path):
    return {r.claim.id: r for r in evaluate_claims("eat", runs, tmp_path)}


@pytest.mark.parametrize("t,paper,repo", [(8, 5, 5), (10, 6, 5), (24, 13, 12), (64, 33, 32), (256, 127, 126)])
def test_the_keep_rules_reproduce_the_spec_table(t, paper, repo):
    assert (_kept(t, 0.3, 2, "paper"), _kept(t, 0.3, 2, "repo")) == (paper, repo)


def test_tables_and_figures_are_built_beside_the_papers_rows(tmp_path):
    text = "\n".join(build(_runs(), tmp_path))
    t1 = _csv(tmp_path, "table1_rt-polarity")
    paper = [r for r in t1 if r["source"].startswith("paper")]
    assert {r["model"] for r in paper} == {"BERT-base", "DistilBERT"} and len(paper) == 7  # BERT, DistilBERT, 5 EAT
    assert next(r for r in paper if r["model"] == "DistilBERT")["latency_ms (p50)"] == "5.57–6.13"
    ours = {(r["model"], r["arm"], r["tau"]): r for r in t1 if r["source"] == "ours"}
    eat = ours[("minilm-l6 (for BERT-base)", "EAT (ours)", "0.90 (dev)")]
    assert eat["speed-up vs dense"].startswith("1.50x [") and eat["Δacc (pp)"].startswith("-1.00 [")
    assert eat["latency_ms (p50)"] == "6.67"  # the benchmark of the same task and model, at the same tau
    assert ours[("minilm-l6 (for BERT-base)", "paper-code", "0.90 (dev)")]["speed-up vs dense"].startswith("0.60x")
    base = ours[("minilm-l3 (for DistilBERT)", "baseline (dense)", "")]  # timed and compared against minilm-l6
    assert base["speed-up vs dense"].startswith("2.00x") and base["Δacc (pp)"].startswith("-5.00 [")
    assert len([k for k in ours if k[1] == "EAT (ours)"]) == 4  # one row per swept tau
    vs = _csv(tmp_path, "paper_vs_repro")
    assert {(r["arm"], r["metric"]) for r in vs} >= {("EAT (ours)", "speedup_vs_bert"), ("dense", "delta_acc_pp"),
                                                     ("EAT (ours)", "avg_retention")}
    assert not any(r["metric"] in ("latency_ms", "accuracy") for r in vs)  # offline twins: relative columns only
    abl = _csv(tmp_path, "ablation")
    assert [r["contender"] for r in abl] == [*CONTENDERS[:-2], "baseline (minilm-l3)",
                                             "eat:best (= None, chosen on dev)"]
    sc = {r["arm"]: r for r in _csv(tmp_path, "scaling")}
    assert sc["eat"]["log-log slope [CI]"].startswith("1.00 [") and float(sc["dense"]["ms@4096"]) == pytest.approx(
        8 ** 1.6, rel=1e-6)
    cal = _csv(tmp_path, "calibration")
    assert [(r["ECE eval before"], r["ECE eval after"], r["scaled"]) for r in cal] == [("7.00", "3.00", "yes")] * 2
    for fig in ("frontier", "scaling", "reliability", "retention_vs_length", "exit_layers"):
        assert (tmp_path / "figures" / f"{fig}.png").stat().st_size > 0, fig
        assert (tmp_path / "figures" / f"{fig}.csv").exists()
    assert "could not be built" not in text


def test_missing_records_say_what_to_run(tmp_path):
    text = "\n".join(build([], tmp_path))
    for what in ("Tables 1-3", "Ablation", "Frontier", "Scaling", "Calibration", "Fig. 5", "Fig. 6"):
        assert f"_{what}" in text and "make eat-cpu" in text, what
    assert "could not be built" not in text
    only_acc = "\n".join(build([_acc_rec("dense", 30), _acc_rec("eat", 32)], tmp_path / "acc"))
    assert "No latency benchmark for rt-polarity / minilm-l6: run `python -m experiments.run method=eat_bench" \
        in only_acc
    assert "_Ablation: no method=eat_bench" in only_acc and "could not be built" not in only_acc


def test_claims_parse_and_decide_the_constructed_records(tmp_path):
    assert len(load_claims("eat").claims) >= 8
    v = _verdicts(_runs(), tmp_path)
    assert v["paper-code-slower-than-dense"].verdict == "holds"
    assert v["eat-faster-than-dense-ours"].verdict == "holds"  # every replicate near 1.5 >= 1.3, Δacc near -0.5
    assert v["all-three-components-faster-ours"].verdict == "holds"
    assert v["eat-bridges-dense-and-baseline"].verdict == "holds"  # 1 < 1.5 < 2.0
    assert v["eat-within-3-points-of-dense"].verdict == "holds"  # -1 point, paired over 200 examples
    assert v["eat-beats-distilbert-accuracy"].verdict == "partly tested"  # 84 vs 80; the bert-base pair not run
    # a depth-vs-tau curve of 4 points carries no correlation interval
    assert v["tau-controls-depth"].verdict == "not testable here" and \
        "r over 4 points" in v["tau-controls-depth"].outcomes[0].reason
    assert v["retention-about-half"].verdict == "holds"
    assert v["prunes-more-on-short-inputs"].verdict == "does not hold"  # short inputs keep more
    assert v["linear-cost-ours"].verdict == "holds"
    assert v["linear-cost-paper-code"].verdict == "does not hold"
    # one ECE per arm, no per-example confidences: a noisy value without an interval decides nothing
    assert v["temperature-scaling-lowers-ece"].verdict == "inconclusive"
    assert v["mnli-eat-38-percent"].verdict == "not testable here" and "harness" in v["mnli-eat-38-percent"].reason


def test_claims_turn_with_the_records(tmp_path):
    runs = [_acc_rec("dense", 30), _acc_rec("eat", 60),
            _bench({"eat:prune+window+exit": 1.1, "eat:best": 1.1, "paper_code": 1.2, "baseline": 0.8}),
            _length({"paper_code": 1.1}),
            _scaling({"dense": 1.6, "eat": 1.5, "paper_code": 1.9})]
    v = _verdicts(runs, tmp_path)
    assert v["eat-faster-than-dense-ours"].verdict == "does not hold"  # every replicate near 1.1 < 1.3
    slow_but_wrong = _bench({"eat:best": 1.5}, delta=-3.0)  # fast, but 3 points worse than dense
    assert _verdicts([slow_but_wrong], tmp_path)["eat-faster-than-dense-ours"].verdict == "does not hold"
    assert v["paper-code-slower-than-dense"].verdict == "does not hold"
    assert v["eat-bridges-dense-and-baseline"].verdict == "does not hold"  # EAT faster than the baseline here
    assert v["eat-within-3-points-of-dense"].verdict == "does not hold"  # -15 points
    assert v["linear-cost-ours"].verdict == "does not hold"
    # a benchmark of the tau sweep is not the dev-chosen EAT: the speed claims do not read it
    sweep = _bench({"eat:best": 3.0}, tau=0.8)
    sweep["exp_id"] = sweep["config"]["exp_id"] = "eat/frontier_cpu"
    assert _verdicts(runs + [sweep], tmp_path)["eat-faster-than-dense-ours"].verdict == "does not hold"


def test_an_arm_at_the_majority_class_makes_accuracy_claims_not_testable(tmp_path):
    dense, eat = _acc_rec("dense", 30), _acc_rec("eat", 99)
    eat["per_example"]["eval"]["pred"] = [0] * N  # constant predictions
    eat["metrics"]["eval/accuracy"] = 0.5
    v = _verdicts([dense, eat], tmp_path)
    assert v["eat-within-3-points-of-dense"].verdict == "not testable here"
    assert math.isfinite(v["eat-within-3-points-of-dense"].outcomes[0].estimate)
