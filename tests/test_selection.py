"""experiments/evidence/selection.py: the lr chosen per group on dev, known answers on synthetic records."""
import pytest

from experiments.evidence import selection


def rec(lr, seed, dev, variant="reduced", task="rt-polarity", eval_=0.5, objective="eval/accuracy", **extra):
    method = {"name": "recycling", "variant": variant, "k": None, "adapter_lr": None}
    metrics = {objective: eval_}
    if dev is not None:
        metrics[objective.replace("eval/", "dev/")] = dev
    return {"run_id": f"{task}-{variant}-lr{lr}-s{seed}", "exp_id": "x/y", "config_hash": f"{task}{variant}{lr}{seed}",
            "metrics": {**metrics, **extra},
            "config": {"task": {"name": task, "objective": objective}, "model": {"name": "m"}, "method": method,
                       "train": {"lr": lr, "epochs": 3}, "data": {"limit_train": 100}, "seed": seed,
                       "exp_id": "x/y", "store": {"dir": "/somewhere", "dtype": "fp32"}}}


def test_best_mean_dev_over_seeds_is_chosen_per_group():
    rs = [rec(1e-4, 0, 0.80), rec(1e-4, 1, 0.70),        # mean 0.75
          rec(3e-4, 0, 0.78), rec(3e-4, 1, 0.76),        # mean 0.77 <- best, though not the best single run
          rec(1e-3, 0, 0.50), rec(1e-3, 1, 0.52),
          rec(1e-3, 0, 0.60, variant="half_adapters"), rec(1e-4, 0, 0.55, variant="half_adapters")]
    choices = {c.records[0]["config"]["method"]["variant"]: c for c in selection.choose(rs)}
    assert choices["reduced"].lr == 3e-4
    assert choices["reduced"].dev_by_lr[3e-4] == pytest.approx(0.77)
    assert choices["half_adapters"].lr == 1e-3
    kept = selection.best_dev(rs)
    assert sorted((r["config"]["method"]["variant"], r["config"]["train"]["lr"], r["config"]["seed"]) for r in kept) \
        == [("half_adapters", 1e-3, 0), ("reduced", 3e-4, 0), ("reduced", 3e-4, 1)]


def test_lower_is_better_dev_metric_selects_the_minimum():
    rs = [rec(1e-4, 0, 2.0, objective="eval/loss"), rec(3e-4, 0, 1.5, objective="eval/loss")]
    assert selection.choose(rs)[0].lr == 3e-4


def test_ties_go_to_the_smaller_lr_whatever_the_order():
    rs = [rec(3e-4, 0, 0.8), rec(1e-4, 0, 0.8), rec(2e-4, 0, 0.8)]
    assert selection.choose(rs)[0].lr == 1e-4
    assert selection.choose(rs[::-1])[0].lr == 1e-4


def test_eval_never_selects():
    # the eval score is far better at 1e-3, dev at 1e-4: dev decides
    rs = [rec(1e-4, 0, 0.9, eval_=0.6), rec(1e-3, 0, 0.7, eval_=0.95)]
    assert [r["config"]["train"]["lr"] for r in selection.best_dev(rs)] == [1e-4]


def test_method_lr_fields_and_recorded_lr_group_and_select():
    # an adapter variant trains at method.adapter_lr (recorded as metrics train/lr): the lr fields are not the group
    a = rec(1e-4, 0, 0.6, variant="half_adapters", **{"train/lr": 1e-3})
    a["config"]["method"]["adapter_lr"] = 1e-3
    b = rec(1e-4, 0, 0.7, variant="half_adapters", **{"train/lr": 2e-3})
    b["config"]["method"]["adapter_lr"] = 2e-3
    b["config_hash"] = "another computation"
    (c,) = selection.choose([a, b])
    assert c.lr == 2e-3 and set(c.dev_by_lr) == {1e-3, 2e-3}


def test_groups_differ_by_any_other_config_field():
    a, b = rec(1e-4, 0, 0.9), rec(3e-4, 0, 0.5)
    b["config"]["data"]["limit_train"] = 200  # other caps: another group, selected on its own
    assert len(selection.choose([a, b])) == 2
    b["config"]["store"]["dir"] = "/elsewhere"  # where the cache lives is not what a run computes
    b["config"]["exp_id"] = "other/exp"
    b["config"]["data"]["limit_train"] = 100
    assert len(selection.choose([a, b])) == 1


def test_missing_dev_metric_is_a_clear_error():
    rs = [rec(1e-4, 0, 0.8), rec(3e-4, 0, None)]
    with pytest.raises(selection.SelectionError, match=r"dev/accuracy.*task.dev_from_train"):
        selection.choose(rs)


def test_unknown_selection_is_an_error():
    with pytest.raises(selection.SelectionError, match="best_dev"):
        selection.apply("best_eval", [rec(1e-4, 0, 0.8)])
    assert selection.apply(None, [1, 2]) == [1, 2]


def test_duplicate_publications_count_once():
    a = rec(1e-4, 0, 0.9)
    dup = {**a, "exp_id": "other/exp"}
    assert len(selection.choose([a, dup, rec(3e-4, 0, 0.5)])[0].records) == 1


def test_for_table_keeps_the_chosen_lr_and_names_it():
    rs = [rec(1e-4, 0, 0.7), rec(2e-4, 0, 0.8)]
    kept, notes = selection.for_table(rs, lambda g: g[0]["config"]["method"]["variant"])
    assert [r["config"]["train"]["lr"] for r in kept] == [2e-4]
    assert len(notes) == 1 and "reduced: lr 2e-04 (dev/accuracy 0.8; 1e-04: 0.7)" in notes[0]
    # an lr sweep without dev scores cannot be selected: the table shows it whole, without a note
    bare = [rec(1e-4, 0, None), rec(2e-4, 0, None)]
    assert selection.for_table(bare, str) == (bare, [])
    # one lr and no dev (records from before dev splits): shown, nothing to name
    assert selection.for_table(bare[:1], str) == (bare[:1], [])
