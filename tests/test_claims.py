"""experiments/evidence/claims.py and verdicts.py: verdicts from synthetic records with known differences, the
intervals against plain numpy and scipy, selector/pairing and validation errors, and every registered paper's
claims.yaml against the committed records."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats as scipy_stats
from sklearn.metrics import f1_score

from experiments import REPO, evaluate, metrics, registry
from experiments.evidence import claims, records, report, signal, stats, verdicts
from experiments.results import load_runs

_ids = itertools.count()


def rec(variant: str, seed: int = 0, acc: float = 0.8, task: str = "t1", model: str = "m", majority: float | None = 0.5,
        hardware: str = "cpu", schema: int = 2, per_example: dict | None = None, extra: dict | None = None,
        **more_metrics) -> dict:
    """A minimal run record of a classification run."""
    m = {"eval/accuracy": acc, **more_metrics}
    if majority is not None:
        m["eval/majority_accuracy"] = majority
    r = {"schema_version": schema, "run_id": f"{task}--{model}--x-{variant}--seed{seed}", "exp_id": "p/art",
         "status": "ok", "metrics": m, "config_hash": f"h{next(_ids)}", "extra": extra or {},
         "config": {"model": {"name": model, "source": "offline"},
                    "task": {"name": task, "type": "cls", "objective": "eval/accuracy"},
                    "method": {"name": "x", "variant": variant}, "data": {"limit_eval": 100, "subset_seed": 0},
                    "seed": seed, "exp_id": "p/art"},
         "provenance": {"hardware": hardware, "git_dirty": False, "created_at": "2026-01-01T00:00:00"}}
    if per_example is not None:
        r["per_example"] = {"eval": per_example}
    return r


def claims_registry(*entries: dict, stand_ins: dict | None = None) -> claims.Registry:
    return claims.parse_claims({"paper": "p", "claims": list(entries), "stand_ins": stand_ins or {}}, "p/claims.yaml")


def claim(test: dict, needs_signal: bool = True, cid: str = "c", **compare) -> dict:
    compare = {"metric": "eval/accuracy", "units": "points", "a": {"method.variant": "new"},
               "b": {"method.variant": "base"}, "pair_by": ["model.name", "task.name", "seed"], "test": dict(test),
               **compare}
    return {"id": cid, "kind": "paper", "claim": "new is no worse than base",
            "paper": {"where": "Table 1", "values": {"new": 1.0}},
            "compare": compare, "needs_signal": needs_signal}


def rows(runs, *entries, tmp_path=None, **kw):
    return verdicts.evaluate_claims("p", runs, tmp_path or Path("/nonexistent"),
                                    registry=claims_registry(*entries, **kw))


def seeds(diffs, base=0.80):
    """Paired records whose new - base accuracy differences are `diffs` (fractions), one seed each."""
    out = []
    for s, d in enumerate(diffs):
        out += [rec("base", s, base), rec("new", s, base + d)]
    return out


AT_LEAST_M1 = {"kind": "difference", "at_least": -1.0}


# ---------------------------------------------------------------- verdicts

def test_holds_when_the_whole_interval_is_above_the_threshold():
    (row,) = rows(seeds([0.05, 0.06, 0.04]), claim(AT_LEAST_M1))
    assert row.verdict == "holds"
    o = row.outcomes[0]
    assert o.estimate == pytest.approx(5.0) and o.ci[0] > -1.0 and "3 seeds" in o.n
    assert o.sd == pytest.approx(1.0)  # points


def test_does_not_hold_when_the_whole_interval_is_below():
    (row,) = rows(seeds([-0.05, -0.06, -0.04]), claim(AT_LEAST_M1))
    assert row.verdict == "does not hold" and row.outcomes[0].ci[1] < -1.0


def test_inconclusive_when_the_interval_straddles_and_says_how_much_more_data():
    (row,) = rows(seeds([-0.03, 0.01, -0.005, 0.0]), claim(AT_LEAST_M1))
    o = row.outcomes[0]
    assert row.verdict == "inconclusive"
    assert o.ci[0] < -1.0 < o.ci[1]
    assert "CI crosses -1" in o.reason and "the seeds" in o.reason


def test_one_seed_without_per_example_scores_is_inconclusive_not_decided_by_the_point():
    (row,) = rows(seeds([0.05]), claim(AT_LEAST_M1))
    assert row.verdict == "inconclusive" and "no interval" in row.outcomes[0].reason


def test_one_measurement_is_decided_by_its_value_only_when_the_claim_declares_it_exact():
    runs = [rec("new", speed=30.0), rec("base", speed=10.0)]
    c = claim({"kind": "direction", "sign": "+"}, needs_signal=False, metric="speed", units=None,
              pair_by=["model.name"])
    (row,) = rows(runs, c)  # a timing, an ECE: noisy, and one measurement has no interval
    assert row.verdict == "inconclusive" and "no interval" in row.outcomes[0].reason
    assert row.outcomes[0].estimate == 20.0
    (row,) = rows(runs, dict(c, exact="a parameter count: the same on every run"))
    assert row.verdict == "holds" and row.outcomes[0].interval == "exact" and row.outcomes[0].p is None


def test_not_run_without_records_names_what_is_missing():
    (row,) = rows([rec("other", 0)], claim(AT_LEAST_M1))
    assert row.verdict == "not run" and "no records" in row.reason and "method.variant=new" in row.reason


def test_records_of_an_older_method_version_decide_nothing_and_the_row_says_why():
    now = registry.version_of("eat")
    runs = seeds([0.05, 0.06, 0.04])
    for r in runs:
        r["config"]["method"]["name"], r["method_version"] = "eat", now
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "holds"
    for r in runs:
        r["method_version"] = now - 1
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "not run" and "6 records made by an older version of the method" in row.reason
    assert f"version {now - 1} of its method, now {now}" in row.reason
    from experiments.results import legacy_reason
    assert legacy_reason(runs[0]) == f"made by version {now - 1} of its method, now {now}"


def test_a_requirement_on_an_arm_leaves_out_the_records_that_fail_it_and_says_why():
    need = {"side": "a", "metric": "lambda/entropy_ratio", "at_most": 0.999, "why": "the weights did not learn"}
    runs = seeds([0.05, 0.06, 0.04, -0.10])
    news = [r for r in runs if r["config"]["method"]["variant"] == "new"]
    for r, h in zip(news, (0.5, 0.6, 0.7, 0.9995)):  # the last seed stayed uniform: it alone says "does not hold"
        r["metrics"]["lambda/entropy_ratio"] = h
    (row,) = rows(runs, dict(claim(AT_LEAST_M1), requires=need))
    assert row.verdict == "holds" and "1 of 4 a records left out: the weights did not learn" in row.outcomes[0].notes
    (without,) = rows(runs, claim(AT_LEAST_M1))
    assert without.verdict != "holds"
    for r in news:
        r["metrics"]["lambda/entropy_ratio"] = 1.0
    (row,) = rows(runs, dict(claim(AT_LEAST_M1), requires=need))
    assert row.verdict == "not testable here" and "the weights did not learn" in row.outcomes[0].reason
    with pytest.raises(claims.ClaimsError, match="requires.side"):
        claims_registry(dict(claim(AT_LEAST_M1), requires=dict(need, side="c")))
    with pytest.raises(claims.ClaimsError, match="requires.at_least"):
        claims_registry(dict(claim(AT_LEAST_M1), requires={k: v for k, v in need.items() if k != "at_most"}))


def test_a_comparison_without_records_beside_decided_ones_is_not_run_and_the_row_partly_tested():
    c = claim(AT_LEAST_M1, b=[{"method.variant": "base"}, {"method.variant": "never-ran"}])
    (row,) = rows(seeds([0.05, 0.06, 0.04]), c)
    assert [o.verdict for o in row.outcomes] == ["holds", "not run"]
    assert row.verdict == "partly tested" and row.parts == (1, 2) and "never-ran: not run" in row.reason


def test_not_testable_line_of_the_yaml_is_the_reason_when_nothing_ran():
    c = claim(AT_LEAST_M1)
    c["not_testable"] = "needs a 900M model from the hub"
    (row,) = rows([], c)
    assert row.verdict == "not testable here" and row.reason == "needs a 900M model from the hub"


def test_arm_at_the_majority_rate_makes_the_claim_not_testable_but_keeps_the_number():
    runs = [rec("base", s, 0.515, majority=0.50) for s in range(3)] + \
           [rec("new", s, 0.80, majority=0.50) for s in range(3)]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "not testable here"
    assert "accuracy 0.515 vs majority class 0.500" in " ".join(row.outcomes[0].unfit)
    assert row.outcomes[0].estimate == pytest.approx(28.5)  # shown for orientation only


def test_arm_two_points_above_the_majority_rate_is_doing_its_task():
    runs = [rec("base", s, 0.53, majority=0.50) for s in range(3)] + \
           [rec("new", s, 0.60 + s / 100, majority=0.50) for s in range(3)]
    assert rows(runs, claim(AT_LEAST_M1))[0].verdict == "holds"


def test_constant_predictions_make_the_claim_not_testable():
    pe_const = {"pred": [1] * 10, "label": [0, 1] * 5}
    pe_ok = {"pred": [0, 1] * 5, "label": [0, 1] * 5}
    runs = [rec("base", 0, 0.5, majority=0.2, per_example=pe_const),
            rec("new", 0, 1.0, majority=0.2, per_example=pe_ok)]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "not testable here" and "constant predictions" in " ".join(row.outcomes[0].unfit)


def test_intrinsic_dim_style_prediction_counts_are_the_constant_guard():
    runs = [rec("base", 0, 0.9, extra={"pred_counts": [0, 500]}), rec("new", 0, 0.9)]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "not testable here" and "base: constant predictions" in " ".join(row.outcomes[0].unfit)
    # the majority rate kept in extra (intrinsic_dim) is a baseline too
    r = rec("x", acc=0.55, majority=None, extra={"majority_rate": 0.546})
    assert "vs majority class 0.546" in signal.not_doing_task(r, "eval/accuracy")


def test_unknown_majority_baseline_is_said():
    r = rec("x", majority=None)
    r["config"]["task"]["type"] = "mc"  # no eval split to count labels in
    assert "majority baseline unknown" in signal.not_doing_task(r, "eval/accuracy")


def test_group_with_an_unfit_arm_is_left_out_and_said():
    runs = seeds([0.05, 0.06, 0.04]) + [rec("base", s, 0.505, task="t2") for s in range(3)] + \
        [rec("new", s, 0.9, task="t2") for s in range(3)]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "partly tested" and row.parts == (1, 2) and row.outcomes[0].estimate == pytest.approx(5.0)
    assert "t2/m/base" in " ".join(row.outcomes[0].unfit) and "decided on 1 of 2" in row.reason


def test_needs_signal_false_skips_the_guard():
    runs = [rec("base", s, 0.50, majority=0.5) for s in range(2)] + \
        [rec("new", s, 0.60, majority=0.5) for s in range(2)]
    assert rows(runs, claim(AT_LEAST_M1, needs_signal=False))[0].verdict == "holds"


# ---------------------------------------------------------------- the bootstraps against plain numpy

def _hand_percentile(reps):
    return tuple(np.percentile(reps, [2.5, 97.5]))


def test_seed_interval_is_students_t_not_the_range_of_the_seeds():
    diffs = np.array([0.02, -0.01, 0.04, 0.03])
    (row,) = rows(seeds(diffs), claim(AT_LEAST_M1))
    d = diffs * 100
    half = scipy_stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    o = row.outcomes[0]
    assert o.ci == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-9) and o.interval.startswith("t over 4")
    # three seeds: a percentile bootstrap would print their min and max; t is wider than the range
    (row,) = rows(seeds([0.005, 0.005, 0.007]), claim(AT_LEAST_M1))
    lo, hi = row.outcomes[0].ci
    assert lo < 0.5 and hi > 0.7


def test_groups_that_share_seeds_are_averaged_per_seed_before_the_t_interval():
    # two tasks whose differences move together with the seed: a joint interval sees 3 values, not 6 independent
    runs = []
    for task, shift in (("t1", 0.0), ("t2", 0.10)):
        for s, d in enumerate([0.01, 0.03, 0.05]):
            runs += [rec("base", s, 0.70 + shift, task=task), rec("new", s, 0.70 + shift + d, task=task)]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    per_seed = np.array([1.0, 3.0, 5.0])
    half = scipy_stats.t.ppf(0.975, 2) * per_seed.std(ddof=1) / np.sqrt(3)
    assert row.outcomes[0].ci == pytest.approx((3.0 - half, 3.0 + half)) and "df 2" in row.outcomes[0].interval


def test_paired_example_bootstrap_matches_a_numpy_loop():
    rng0 = np.random.default_rng(7)
    n = 60
    label = rng0.integers(0, 2, n)
    pred_a = np.where(rng0.random(n) < 0.8, label, 1 - label)
    pred_b = np.where(rng0.random(n) < 0.7, label, 1 - label)
    ca, cb = (pred_a == label).astype(float), (pred_b == label).astype(float)
    runs = [rec("new", 0, ca.mean(), majority=0.0, per_example={"pred": pred_a.tolist(), "label": label.tolist()}),
            rec("base", 0, cb.mean(), majority=0.0, per_example={"pred": pred_b.tolist(), "label": label.tolist()})]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    rng = np.random.default_rng(stats.BOOT_SEED)
    hand = []
    for _ in range(stats.N_BOOT):  # one index row per resample, the same rows for both arms
        idx = rng.integers(0, n, n)
        hand.append(100 * (ca[idx].mean() - cb[idx].mean()))
    o = row.outcomes[0]
    assert o.ci == pytest.approx(_hand_percentile(hand), abs=1e-9)
    assert o.estimate == pytest.approx(100 * (ca.mean() - cb.mean())) and "60 examples" in o.n


def test_example_bootstrap_not_used_when_arms_saw_different_examples():
    pe = {"pred": [0, 1, 1, 0], "label": [0, 1, 0, 0]}
    a, b = rec("new", 0, 0.75, per_example=pe, majority=0.0), rec("base", 0, 0.75, per_example=pe, majority=0.0)
    b["config"]["data"] = {"limit_eval": 50, "subset_seed": 1}
    (row,) = rows([a, b], claim(AT_LEAST_M1))
    assert row.verdict == "inconclusive" and "no interval" in row.outcomes[0].reason


def test_resampled_macro_f1_and_entity_f1_match_sklearn_and_seqeval():
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 3, 40), rng.integers(0, 3, 40)
    idx = rng.integers(0, 40, size=(5, 40))
    w = np.stack([np.bincount(i, minlength=40) for i in idx])
    got = stats.resampled_metric("eval/f1_macro", {"pred": p.tolist(), "label": y.tolist()}, w)
    want = [f1_score(y[i], p[i], average="macro", zero_division=0) for i in idx]
    assert got == pytest.approx(want)
    gold = [["B-PER", "I-PER", "O"], ["B-LOC", "O", "B-PER"], ["O", "O", "O"]]
    pred = [["B-PER", "I-PER", "O"], ["B-PER", "O", "B-PER"], ["B-LOC", "O", "O"]]
    pe = {**metrics.entity_counts(pred, gold), **metrics.token_counts(pred, gold)}
    ones = np.ones((1, 3))
    assert stats.resampled_metric("eval/entity_f1", pe, ones)[0] == \
        pytest.approx(metrics.seqeval_f1(pred, gold)["entity_f1"])
    assert stats.resampled_metric("eval/token_f1", pe, ones)[0] == pytest.approx(metrics.token_f1(pred, gold))


def test_replicates_kept_by_a_method_give_the_interval():
    a = rec("new", 0, extra={"replicates": {"eval/auc": [10.0, 11.0, 12.0, 13.0]}}, **{"eval/auc": 11.5})
    b = rec("base", 0, extra={"replicates": {"eval/auc": [9.0, 9.5, 10.0, 10.5]}}, **{"eval/auc": 9.75})
    c = claim({"kind": "direction", "sign": "+"}, needs_signal=False, metric="eval/auc", units=None)
    (row,) = rows([a, b], c)
    o = row.outcomes[0]
    assert row.verdict == "holds" and o.ci[0] >= 1.0 and o.ci[1] <= 2.5  # paired replicate differences: 1..2.5


def test_curve_replicates_decide_a_reduced_comparison():
    """Replicates of a per-layer curve (intrinsic_dim's extra.curves.twonn): min over layers of a - b per replicate."""
    curve_a, curve_b = [np.nan, 5.0, 6.0, 7.0], [np.nan, 4.0, 4.5, 6.5]
    reps_a = [[np.nan, 5.0 + d, 6.0, 7.0 + d] for d in (-0.1, 0.0, 0.1, 0.2)]
    reps_b = [[np.nan, 4.0, 4.5 + d, 6.5] for d in (-0.1, 0.0, 0.1, 0.2)]
    a = rec("new", 0, extra={"curves": {"twonn": curve_a}, "replicates": {"extra.curves.twonn": reps_a}})
    b = rec("base", 0, extra={"curves": {"twonn": curve_b}, "replicates": {"extra.curves.twonn": reps_b}})
    c = claim({"kind": "direction", "sign": "+"}, needs_signal=False, metric="extra.curves.twonn", units=None,
              reduce="min")
    (row,) = rows([a, b], c)
    o = row.outcomes[0]
    assert o.estimate == pytest.approx(0.5) and "replicates" in o.n  # layer 3: 7.0 - 6.5
    assert row.verdict == "holds" and 0.3 <= o.ci[0] and o.ci[1] <= 0.7 + 1e-9
    (row,) = rows([dict(a, extra={"curves": {"twonn": curve_a}}), b], c)  # no replicates: no interval
    assert row.verdict == "inconclusive"


def test_correlation_and_spread_kinds():
    xs = [np.linspace(1, 10, 8) + i for i in range(3)]
    runs = [rec(f"v{i}", task=f"t{i}", extra={"curves": {"x": x.tolist(), "y": (2 * x + 1).tolist()}},
                **{"eval/auc": 10.0 + 3 * i})
            for i, x in enumerate(xs)]
    corr = claim({"kind": "correlation", "at_least": 0.5}, needs_signal=False, cid="r", a={"method.name": "x"},
                 x="extra.curves.x", y="extra.curves.y")
    for k in ("b", "metric", "units", "pair_by"):
        corr["compare"].pop(k)
    spread = claim({"kind": "spread", "at_most": 5.0}, needs_signal=False, cid="s", a={"method.name": "x"},
                   metric="eval/auc", units=None, across="task.name", pair_by=["model.name", "task.name"])
    spread["compare"].pop("b")
    r_row, s_row = rows(runs, corr, spread)
    assert r_row.verdict == "holds" and r_row.outcomes[0].estimate == pytest.approx(1.0)
    assert s_row.verdict == "inconclusive" and "no interval" in s_row.outcomes[0].reason  # measured values
    (s_row,) = rows(runs, dict(spread, exact="deterministic given the runs"))
    assert s_row.verdict == "does not hold" and s_row.outcomes[0].estimate == pytest.approx(6.0)


def test_a_correlation_over_fewer_than_eight_points_is_not_testable():
    runs = [rec("v0", extra={"curves": {"x": [1.0, 2.0, 3.0], "y": [2.0, 4.0, 6.5]}})]
    corr = claim({"kind": "correlation", "at_least": 0.5}, needs_signal=False, cid="r", a={"method.name": "x"},
                 x="extra.curves.x", y="extra.curves.y")
    for k in ("b", "metric", "units", "pair_by"):
        corr["compare"].pop(k)
    (row,) = rows(runs, corr)
    assert row.verdict == "not testable here" and "r over 3 points" in row.outcomes[0].reason
    assert row.outcomes[0].ci is None and row.outcomes[0].estimate == pytest.approx(1.0, abs=0.01)


def test_a_correlation_over_one_x_value_is_not_testable_not_a_crash():
    runs = [rec(f"v{i}", task=f"t{i}", extra={"curves": {"x": [5.0] * 4, "y": [1.0, 2.0, 3.0, 4.0 + i]}})
            for i in range(3)]
    corr = claim({"kind": "correlation", "at_least": 0.5}, needs_signal=False, cid="r", a={"method.name": "x"},
                 x="extra.curves.x", y="extra.curves.y")
    for k in ("b", "metric", "units", "pair_by"):
        corr["compare"].pop(k)
    (row,) = rows(runs, corr)
    assert row.verdict == "not testable here"
    assert "extra.curves.x is the same at all 12 points" in row.outcomes[0].reason


# ---------------------------------------------------------------- selectors, pairing, scales

def test_two_records_for_one_pair_key_are_named_in_the_row_not_a_crash():
    runs = seeds([0.01]) + [rec("new", 0, 0.7)]
    runs[-1]["run_id"] = "dup-run"
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert row.verdict == "not testable here"
    assert re.search(r"claim 'c'.*selector a matches two records.*dup-run.*add a selector", row.reason)


def test_selectors_match_lists_globs_operators_and_null():
    r = rec("new", 3)
    r["config"]["method"]["k"] = None
    assert records.matches(r, {"method.variant": ["old", "new"], "exp_id": "p/a*", "seed": {"ge": 3}, "method.k": None})
    assert not records.matches(r, {"seed": {"gt": 3}})
    assert records.matches(r, {"method.variant": {"not": "old"}, "method.missing": None})
    assert not records.matches(r, {"method.variant": "ne*x"})


def test_scales_are_rows_never_merged_and_legacy_is_labelled():
    runs = seeds([0.05, 0.06, 0.04]) + [dict(r, provenance={"hardware": "gpu"}, schema_version=1,
                                             config_hash=f"g{i}") for i, r in enumerate(seeds([-0.05, -0.06, -0.04]))]
    cpu, gpu = sorted(rows(runs, claim(AT_LEAST_M1), stand_ins={"t1": "SST-2"}), key=lambda r: r.scale)
    assert cpu.verdict == "holds" and gpu.verdict == "does not hold"
    assert cpu.scale.startswith("cpu, offline stand-ins; t1 for SST-2") and "legacy" not in cpu.scale
    assert gpu.scale.startswith("gpu") and gpu.scale.endswith("legacy records")


def test_same_config_published_twice_counts_once():
    runs = seeds([0.05, 0.06])
    runs.append(dict(runs[0], exp_id="p/other"))
    (row,) = rows(runs, claim(AT_LEAST_M1))
    assert "2 seeds" in row.outcomes[0].n


def test_list_of_b_selectors_all_must_hold():
    runs = seeds([0.05, 0.06, 0.04]) + [rec("base2", s, 0.95) for s in range(3)]
    c = claim({"kind": "direction", "sign": "+"}, b=[{"method.variant": "base"}, {"method.variant": "base2"}])
    (row,) = rows(runs, c)
    assert [o.label for o in row.outcomes] == ["base", "base2"]
    assert [o.verdict for o in row.outcomes] == ["holds", "does not hold"] and row.verdict == "does not hold"


def test_expected_constants_and_exact_tests():
    runs = [rec("x", model="bert", size=108.31), rec("x", model="roberta", size=124.9)]
    c = claim({"kind": "exact", "tolerance": 0.05}, needs_signal=False, metric="size", units=None,
              expected={"by": "model.name", "values": {"bert": 108.3, "roberta": 124.6}}, pair_by=["model.name"])
    c["compare"].pop("b")
    c["compare"]["a"] = {"method.variant": "x"}
    (row,) = rows(runs, dict(c, exact="sizes computed from the configs"))
    assert row.verdict == "does not hold" and "0.3" in row.outcomes[0].reason


# ---------------------------------------------------------------- rendering

# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("mutate, match", [
    (lambda c: c["compare"]["test"].update(kind="bigger"), r"claim 'c': key 'compare\[0\].test.kind': 'bigger'"),
    (lambda c: c.pop("needs_signal"), r"claim 'c': key 'needs_signal': missing"),
    (lambda c: c.update(id="Bad Id"), r"key 'id': 'Bad Id' must be a lower-case slug"),
    (lambda c: c["compare"].update(pair_by="seed"), r"key 'compare\[0\].pair_by'"),
    (lambda c: c["compare"]["test"].update(at_most=1, at_least=None) or c["compare"]["test"].pop("at_least"), None),
    (lambda c: c["compare"].update(colour="red"), r"key 'compare\[0\].colour': unknown key"),
    (lambda c: c["compare"]["test"].update(tolerance=1), r"'compare\[0\].test.tolerance': not a key of a difference"),
    (lambda c: c.pop("compare"), r"key 'compare': missing; .*not_testable"),
    (lambda c: c["compare"].update(a={"seed": {"between": 1}}), r"'compare\[0\].a'.*operator selector"),
])
def test_validation_errors_name_file_claim_and_key(mutate, match):
    c = claim(AT_LEAST_M1)
    mutate(c)
    if match is None:
        claims_registry(c)  # a valid variant of the same claim
        return
    with pytest.raises(claims.ClaimsError, match=match) as e:
        claims_registry(c)
    assert str(e.value).startswith("p/claims.yaml: ")


def test_duplicate_ids_and_bad_top_level_are_refused(tmp_path):
    with pytest.raises(claims.ClaimsError, match="duplicate id 'c'"):
        claims_registry(claim(AT_LEAST_M1), claim(AT_LEAST_M1))
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims: {}\n")
    with pytest.raises(claims.ClaimsError, match=f"{bad}: top level"):
        claims.load_claims(bad)


# ---------------------------------------------------------------- what evaluate.py keeps for the claims

def test_evaluate_keeps_per_example_scores_that_reproduce_the_metrics():
    task = OmegaConf.create({"metrics": ["accuracy", "f1_macro"]})
    logits = [np.array([2.0, 0.0]), np.array([0.0, 1.0]), np.array([3.0, 0.0]), np.array([0.0, 2.0])]
    scores, pe = evaluate._classification(logits, {"labels": [0, 1, 1, 1]}, None, task)
    assert pe == {"pred": [0, 1, 0, 1], "label": [0, 1, 1, 1]}
    assert scores["majority_accuracy"] == 0.75 and scores["majority_f1_macro"] == pytest.approx(0.75 / 1.75 * 2 / 2)
    ones = np.ones((1, 4))
    assert stats.resampled_metric("eval/f1_macro", pe, ones)[0] == pytest.approx(scores["f1_macro"])
    assert stats.resampled_metric("eval/accuracy", pe, ones)[0] == pytest.approx(scores["accuracy"])
    per = metrics.squad_scores(["the cat", "dog"], [["cat"], ["a bird"]])
    assert per == {"em": [100.0, 0.0], "f1": [100.0, 0.0]}
    assert metrics.squad_em_f1(["the cat", "dog"], [["cat"], ["a bird"]]) == {"em": 50.0, "f1": 50.0}


# ---------------------------------------------------------------- the real registries

WITH_CLAIMS = [p for p in registry.PAPERS if (REPO / p / "claims.yaml").exists()]


def test_every_paper_package_has_its_claims():
    assert set(registry.PACKAGES) <= set(WITH_CLAIMS)


@pytest.mark.parametrize("paper", WITH_CLAIMS)
def test_real_claims_files_validate_against_the_committed_records(paper):
    reg = claims.load_claims(paper)
    assert reg.paper == paper and reg.claims
    runs = load_runs(REPO / "results", paper)
    assert runs, f"no committed records for {paper}"
    metric_keys = {k for r in runs for k in r.get("metrics", {})}

    def exists(key: str | None) -> bool:
        if key in (None, "objective"):
            return any(records.metric_name(r, None) in r.get("metrics", {}) for r in runs)
        if key.startswith("extra."):
            return any(records.raw_value(r, key) is not None for r in runs)
        return key in metric_keys
    awaiting = set()  # comparisons whose arm has no committed record yet (a tier not run): nothing to read
    for cl in reg.claims:
        for comp in cl.comparisons:
            if not records.select(runs, comp.a):
                awaiting.add((cl.id, comp.label))
                continue
            keys = [comp.x, comp.y] if comp.test.kind == "correlation" else [comp.metric, comp.b_metric, comp.per]
            for key in keys:
                if key is not None or comp.test.kind != "correlation":
                    assert exists(key) or cl.not_testable, \
                        f"{paper}/claims.yaml: claim {cl.id!r}: metric {key!r} is in no committed record"
    assert len(awaiting) < sum(len(cl.comparisons) for cl in reg.claims), f"{paper}: no claim reads a committed record"
    rows = verdicts.evaluate_claims(paper, runs, REPO / "results")
    waiting = {cid for cid, _ in awaiting} - {cl.id for cl in reg.claims for c in cl.comparisons
                                              if (cl.id, c.label) not in awaiting}
    assert all(row.verdict in ("not run", "not testable here") for row in rows if row.claim.id in waiting)
    page = "\n".join(report.claims_page(paper, rows, reg.stand_ins, REPO / "results" / paper))
    assert all(cl.id in page for cl in reg.claims)
    for row in rows:
        assert row.verdict in claims.VERDICTS
        assert all(p.exists() for p in row.evidence)


def test_a_run_published_by_two_experiments_is_found_by_either_experiments_selector():
    """The same computation (one config hash) in two experiments: a selector on exp_id finds its own experiment's copy,
    whichever copy is newer (a global dedupe would keep only the newest and leave the other experiment's claims
    empty)."""
    a, b = rec("sft", acc=0.9), rec("icl", acc=0.6)
    later = dict(a, exp_id="p/other", provenance={**a["provenance"], "created_at": "2026-02-01T00:00:00"})
    for r in (a, b):
        r["config"]["exp_id"] = "p/art"
    later["config"] = {**a["config"], "exp_id": "p/other"}
    assert records.select([a, later, b], {"method.variant": "sft", "exp_id": "p/art"}) == [a]
    assert records.select([a, later], {"method.variant": "sft"}) == [later]  # one per computation, the newest


# ---------------------------------------------------------------- lr selection on dev and a baseline from another paper

def _lr(r: dict, lr: float, dev: float) -> dict:
    r["config"]["train"] = {"lr": lr}
    r["metrics"]["dev/accuracy"] = dev
    return r


def test_select_best_dev_compares_the_arms_at_their_dev_chosen_lr():
    runs = []
    for s in range(3):
        # new: at lr 1e-3 the eval score is much better, but dev picks 1e-4; base: dev picks 3e-4
        runs += [_lr(rec("new", s, 0.80 + 0.001 * s), 1e-4, 0.9), _lr(rec("new", s, 0.99), 1e-3, 0.5),
                 _lr(rec("base", s, 0.79), 1e-4, 0.6), _lr(rec("base", s, 0.70 + 0.001 * s), 3e-4, 0.7)]
    c = claim(AT_LEAST_M1, a={"method.variant": "new", "select": "best_dev"},
              b={"method.variant": "base", "select": "best_dev"})
    (row,) = rows(runs, c)
    assert row.outcomes[0].estimate == pytest.approx(10.0)  # 80.x - 70.x points, not 99 - anything
    assert {r["config"]["train"]["lr"] for r in row.outcomes[0].records} == {1e-4, 3e-4}


def test_select_best_dev_without_a_dev_metric_says_so_in_the_row():
    runs = [rec("new", 0), rec("base", 0)]
    for r in runs:
        r["config"]["train"] = {"lr": 1e-4}
    (row,) = rows(runs, claim(AT_LEAST_M1, a={"method.variant": "new", "select": "best_dev"}))
    assert row.verdict == "not testable here" and "dev/accuracy" in row.reason and "dev_from_train" in row.reason


def test_unknown_selection_is_refused_naming_the_key():
    with pytest.raises(claims.ClaimsError, match="select.*best_eval.*best_dev"):
        claims_registry(claim(AT_LEAST_M1, a={"method.variant": "new", "select": "best_eval"}))


def test_baselines_from_reads_the_other_papers_records(tmp_path, monkeypatch):
    from experiments.files import write_json
    base = rec("full", 0, 0.7)
    base["config"]["method"]["name"] = "finetune"
    write_json(tmp_path / "finetune" / "runs" / "default_cpu" / "cpu" / "a.json", base)
    reg = claims.parse_claims({"paper": "p", "baselines_from": ["finetune"], "claims": [
        claim({"kind": "direction", "sign": "+"}, b={"method.name": "finetune"})]}, "p/claims.yaml")
    assert reg.baselines_from == ("finetune",)
    monkeypatch.setattr(claims, "load_claims", lambda paper: reg)
    assert claims.baseline_runs("p", tmp_path)[0]["config"]["method"]["name"] == "finetune"
    with pytest.raises(claims.ClaimsError, match="baselines_from"):
        claims.parse_claims({"paper": "p", "baselines_from": "finetune", "claims": []}, "p/claims.yaml")


def test_a_row_holds_only_when_every_part_was_decided_and_held():
    v = verdicts._combine
    assert v(["holds", "not testable here"]) == "partly tested"
    assert v(["holds", "not run"]) == "partly tested"
    assert v(["holds", "not testable here", "does not hold"]) == "does not hold"
    assert v(["not testable here", "not testable here"]) == "not testable here"
    assert v(["not run"]) == "not run" and v(["holds", "holds"]) == "holds"
    assert v(["holds", "inconclusive", "not testable here"]) == "inconclusive"


def test_example_ci_of_a_one_seed_record_brackets_its_metric_and_refuses_a_mismatch():
    rng = np.random.default_rng(1)
    label = rng.integers(0, 2, 400)
    pred = np.where(rng.random(400) < 0.8, label, 1 - label)  # ~80% right
    acc = float((pred == label).mean())
    rec = {"metrics": {"eval/accuracy": acc}, "per_example": {"eval": {"pred": pred.tolist(), "label": label.tolist()}}}
    lo, hi = stats.example_ci(rec, "eval/accuracy", n_boot=500)
    assert lo < acc < hi and 0.04 < hi - lo < 0.1  # ~±2 sd of a binomial proportion at n=400: 2*1.96*0.02
    assert stats.example_ci({**rec, "metrics": {"eval/accuracy": acc * 100}}, "eval/accuracy") is None  # scale mismatch
    assert stats.example_ci({"metrics": {"eval/accuracy": acc}}, "eval/accuracy") is None  # no per-example scores
    assert stats.example_ci(rec, "dev/accuracy") is None


# ---------------------------------------------------------------- the signal guard, fragility, replicates, rounds

def test_the_guard_uses_the_arms_interval_and_names_its_baseline():
    # 2.5 points above the majority class on average, but the three seeds scatter down to it: not shown to work
    runs = [rec("base", s, a, majority=0.50) for s, a in enumerate([0.505, 0.525, 0.545])] + \
           [rec("new", s, 0.80, majority=0.50) for s in range(3)]
    (row,) = rows(runs, claim(AT_LEAST_M1))
    o = row.outcomes[0]
    assert row.verdict == "not testable here" and o.baseline == "majority class"
    assert "interval reaches the baseline" in " ".join(o.unfit)


def test_an_all_o_tagger_and_a_failed_baseline_arm_are_named_as_such():
    def ner(variant, seed, f1):
        r = rec(variant, seed, majority=None, **{"eval/entity_f1": f1})
        r["config"]["task"].update(type="ner", objective="eval/entity_f1")
        return r
    runs = [ner("base", s, 0.005) for s in range(3)] + [ner("new", s, 0.30 + s / 100) for s in range(3)]
    (row,) = rows(runs, claim(AT_LEAST_M1, metric="eval/entity_f1"))
    o = row.outcomes[0]
    assert row.verdict == "not testable here" and o.baseline == "an all-O tagger"
    assert o.baseline_failed and o.reason == "baseline failed to train"


def test_a_verdict_that_moves_with_the_guard_by_one_point_is_fragile():
    # t2's base arm clears the 2-point guard by 0.5 points: at 3 points it drops out, and the row's verdict moves
    runs = seeds([0.05, 0.06, 0.04]) + [rec("base", s, 0.625, task="t2", majority=0.60) for s in range(3)] + \
        [rec("new", s, 0.50, task="t2", majority=0.20) for s in range(3)]
    (row,) = rows(runs, claim(AT_LEAST_M1, needs_signal=True))
    assert row.verdict == "does not hold"
    assert row.fragile and "signal guard at 3 points" in row.fragile[0]


def test_kept_replicates_are_used_as_they_are_never_redrawn():
    reps_a = np.linspace(0.40, 0.60, 1000)
    runs = [rec("new", 0, 0.5, majority=None, extra={"replicates": {"eval/accuracy": reps_a.tolist()}})]
    c = claim({"kind": "difference", "at_least": 40.0}, needs_signal=False, expected=0.0, pair_by=["model.name"])
    c["compare"].pop("b")
    (row,) = rows(runs, c)
    assert row.outcomes[0].ci == pytest.approx(tuple(np.percentile(reps_a * 100, [2.5, 97.5])))


def test_timing_rounds_give_a_t_interval_around_the_recorded_value():
    slow, fast = [100.0, 104.0, 98.0], [50.0, 51.0, 50.0]
    per = np.array(slow) / np.array(fast)
    runs = [rec("new", 0, majority=None, **{"speedup/x": float(np.median(slow) / np.median(fast))},
                extra={"rounds": {"slow": slow, "fast": fast}})]
    c = claim({"kind": "ratio", "at_least": 1.5}, needs_signal=False, metric="speedup/x", units=None,
              expected=1.0, pair_by=["model.name"], rounds={"a": "extra.rounds.slow", "b": "extra.rounds.fast",
                                                           "as": "ratio"})
    c["compare"].pop("b")
    c["compare"]["test"] = {"kind": "difference", "at_least": 0.5}
    (row,) = rows(runs, c)
    o = row.outcomes[0]
    half = scipy_stats.t.ppf(0.975, 2) * per.std(ddof=1) / np.sqrt(3)
    est = float(np.median(slow) / np.median(fast)) - 1.0
    assert o.ci == pytest.approx((est - half, est + half)) and "timing rounds" in o.interval
    # rounds that are not the measurement behind the metric give no interval
    runs[0]["metrics"]["speedup/x"] = 9.0
    assert rows(runs, c)[0].verdict == "inconclusive"


def test_holm_marks_rows_whose_tests_survive_the_papers_family():
    strong = claim(AT_LEAST_M1, cid="strong")
    weak = claim({"kind": "difference", "at_least": 0.0}, cid="weak", a={"method.variant": "new2"})
    runs = seeds([0.05, 0.06, 0.04, 0.05, 0.055]) + \
        [rec("new2", s, 0.80 + d) for s, d in enumerate([0.008, 0.02, 0.012, 0.016, 0.01])]
    s_row, w_row = rows(runs, strong, weak)
    assert s_row.verdict == w_row.verdict == "holds"
    assert s_row.outcomes[0].p < w_row.outcomes[0].p < 0.025
    assert s_row.holm is True and w_row.holm is (w_row.outcomes[0].p <= 0.025)
    # the step-down itself, against a hand computation at family-wise 0.025: 0.001 <= 0.025/4, 0.02 > 0.025/3
    assert stats.holm([0.02, 0.001, 0.2, 0.03]) == [False, True, False, False]
    assert stats.holm([0.004, 0.001, 0.02]) == [True, True, True]  # 0.001 <= 0.025/3, 0.004 <= 0.025/2, 0.02 <= 0.025


def test_post_hoc_is_said_when_a_claim_has_no_registration():
    (row,) = rows(seeds([0.05, 0.06, 0.04]), claim(AT_LEAST_M1))
    assert row.post_hoc == "the claim carries no registration commit"


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c.pop("kind"), r"key 'kind': missing"),
    (lambda c: c.update(kind="wish"), r"key 'kind': 'wish' is not one of paper, target"),
    (lambda c: c.update(kind="by-construction"), r"key 'why': missing: a by-construction claim"),
    (lambda c: c["compare"].update(rounds={"b": "x"}), r"key 'compare\[0\].rounds'"),
])
def test_kinds_and_rounds_are_validated(mutate, match):
    c = claim(AT_LEAST_M1)
    mutate(c)
    with pytest.raises(claims.ClaimsError, match=match):
        claims_registry(c)


def test_one_sided_p_values_against_scipy_and_the_replicates():
    iv = stats.t_interval([1.0, 2.0, 4.0])
    se = np.std([1.0, 2.0, 4.0], ddof=1) / np.sqrt(3)
    assert stats.one_sided_p(iv, 0.0, above=True) == pytest.approx(scipy_stats.t.sf((7 / 3) / se, 2))
    assert stats.one_sided_p(iv, 0.0, above=False) == pytest.approx(scipy_stats.t.cdf((7 / 3) / se, 2))
    reps = np.arange(100.0)  # 10 of 100 replicates at or below 9
    boot = stats.replicate_interval(50.0, reps, "examples")
    assert stats.one_sided_p(boot, 9.0, above=True) == pytest.approx(11 / 101)


def test_a_correlation_arm_whose_interval_reaches_its_baseline_is_not_testable():
    n = 40
    label = np.array([0, 1] * (n // 2))
    pred = label.copy()
    pred[:9] = 1 - pred[:9]  # 31 of 40 right: 77.5 %, 7.5 points over a 0.70 majority, but +-13 points wide
    x = np.linspace(1, 10, 10)
    runs = [rec("v0", acc=float((pred == label).mean()), majority=0.70,
                per_example={"pred": pred.tolist(), "label": label.tolist()},
                extra={"curves": {"x": x.tolist(), "y": (2 * x).tolist()}})]
    corr = claim({"kind": "correlation", "at_least": 0.5}, needs_signal=True, cid="r", a={"method.name": "x"},
                 x="extra.curves.x", y="extra.curves.y")
    for k in ("b", "metric", "units", "pair_by"):
        corr["compare"].pop(k)
    (row,) = rows(runs, corr)
    assert row.verdict == "not testable here" and "interval reaches the baseline" in row.outcomes[0].unfit[0]
    runs[0]["metrics"]["eval/majority_accuracy"] = 0.50  # far below: the same arm does its task
    assert rows(runs, corr)[0].verdict == "holds"
