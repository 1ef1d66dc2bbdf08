"""method=eat and method=eat_bench through the suite's runner on tiny-bert and the rt-polarity fixture: every arm runs,
trained weights are cached and reused (a corrupt cache is retrained, never read), bad configs are refused before any
work, and the benchmark's ablation covers every subset of the three components."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from eat import bench as B
from eat import run as R
from eat.model import Settings
from experiments.run import execute

TINY = ("method.exit_layer=3", "method.prune_after=[1,2]", "method.window=4")


def run(smoke_cfg, tmp_path, *overrides, method="eat", out=None):
    """One run; `out` gives it an output directory of its own, so a finished run is not skipped."""
    cfg = smoke_cfg(f"method={method}", f"method.checkpoint_dir={tmp_path / 'ckpt'}", *TINY, *overrides)
    rec = execute(cfg, tmp_path / "out" / (out or cfg.run_id))
    assert rec["status"] == "ok", rec.get("error")
    return rec


@pytest.mark.parametrize("variant", ["dense", "eat", "paper_code"])
def test_every_arm_runs_and_reports_the_papers_columns(variant, smoke_cfg, tmp_path):
    m = run(smoke_cfg, tmp_path, f"method.variant={variant}")
    rec = m["metrics"]
    assert 0 <= rec["eval/accuracy"] <= 1 and 1 <= rec["eval/avg_depth"] <= 4
    if variant == "dense":
        assert rec["eval/avg_retention"] == 1.0 and rec["eval/avg_depth"] == 4
    else:
        assert rec["eval/avg_retention"] < 1.0  # pruned after layers 1 and 2
        assert {f["tau"] for f in m["extra"]["frontier"]} == {0.8, 0.85, 0.9, 0.95}
        assert "calib/ece_eval_before" in rec and rec["calib/temperature"] > 0
    pe = m["per_example"]["eval"]
    assert np.mean(np.asarray(pe["pred"]) == np.asarray(pe["label"])) == pytest.approx(rec["eval/accuracy"])
    ex = m["extra"]
    assert [d["layer"] for d in ex["layers"]] == [1, 2, 3, 4] and ex["layers"][0]["running"] == 1.0
    assert ex["model_dims"]["layers"] == 4 and ex["seq_len_mean"] > 0 and isinstance(ex["tau_choice"], str)
    assert np.mean([d["running"] for d in ex["layers"]]) == pytest.approx(rec["eval/avg_depth"] / 4)


def test_trained_weights_are_cached_and_a_corrupt_cache_is_retrained(smoke_cfg, tmp_path):
    first = run(smoke_cfg, tmp_path, out="first")
    again = run(smoke_cfg, tmp_path, out="again")
    assert not first["extra"]["checkpoint_cached"] and again["extra"]["checkpoint_cached"]
    assert again["metrics"]["eval/accuracy"] == first["metrics"]["eval/accuracy"]
    assert again["per_example"] == first["per_example"]
    (weights,) = (tmp_path / "ckpt").glob("eat-*/weights.safetensors")
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    healed = run(smoke_cfg, tmp_path, out="healed")
    assert not healed["extra"]["checkpoint_cached"]
    assert healed["per_example"] == first["per_example"]  # retrained from the same seed: the same model


def test_changed_weights_or_data_or_force_never_reuse_a_checkpoint(smoke_cfg, tiny_assets, tmp_path):
    on = (*tiny_assets.model(seed=0), *tiny_assets.data(40))

    def fresh(*overrides, out):
        rec = run(smoke_cfg, tmp_path, *on, *overrides, out=out)
        return rec["extra"]["checkpoint_cached"], rec["per_example"]
    assert fresh(out="a")[0] is False and fresh(out="b")[0] is True
    tiny_assets.model(seed=1)  # the model's weights rebuilt
    assert fresh(out="c")[0] is False
    tiny_assets.data(32)  # the data asset rebuilt
    assert fresh(out="d")[0] is False
    assert len(list((tmp_path / "ckpt").glob("eat-*"))) == 3
    forced, preds = fresh("force=true", out="e")  # retrained and replaced in place
    assert forced is False and len(list((tmp_path / "ckpt").glob("eat-*"))) == 3
    assert fresh(out="f") == (True, preds)


def test_a_different_training_gets_its_own_checkpoint(smoke_cfg, tmp_path):
    run(smoke_cfg, tmp_path)
    run(smoke_cfg, tmp_path, "method.prune_ratio=0.5")
    run(smoke_cfg, tmp_path, "method.taus=[0.9]")  # inference-only: no new training
    assert len(list((tmp_path / "ckpt").glob("eat-*"))) == 2


@pytest.mark.parametrize("override,match", [
    ("task=wnut16", "cls/pair task"),
    ("method.exit_layer=4", "below the last"),
    ("method.variant=sparse", "dense, eat, paper_code"),
    ("method.taus=[0.0]", "thresholds in"),
])
def test_bad_configs_are_refused_before_training(override, match, smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat", f"method.checkpoint_dir={tmp_path / 'ckpt'}", *TINY, override)
    with pytest.raises(ValueError, match=match):
        execute(cfg, tmp_path / "out")
    assert not (tmp_path / "ckpt").exists()


def test_the_ablation_is_every_subset_of_the_three_components():
    s = Settings(tau=0.9)
    arms = B.ablation(s)
    assert len(arms) == 8 and arms["eat:prune+window+exit"] == s
    assert arms["eat:none"] == s.dense()
    assert arms["eat:exit"].tau == 0.9 and arms["eat:exit"].window is None and arms["eat:exit"].prune_ratio == 0


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_latency_bench_times_every_contender(pooling, smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, f"method.pooling={pooling}", "method.n_latency=6", "method.warmup=2", "method.batch_size=4",
              "method.throughput_rounds=1", "method.bootstrap=50", "method.baseline_model=tiny-bert",
              method="eat_bench")
    m = rec["metrics"]
    names = rec["extra"]["contenders"]
    assert {"dense", "dense_hf", "paper_code", "baseline", "eat:none", "eat:prune+window+exit"} <= set(names)
    for name in names:
        assert m[f"latency/{name}_p50_ms"] <= m[f"latency/{name}_p99_ms"]
        assert len(rec["extra"]["replicates"][f"speedup/{name}_p50"]) == 50
        assert m[f"throughput/{name}_per_s"] > 0
    best = rec["extra"]["best_setting"]  # chosen on dev among the component subsets (None: none within tolerance)
    assert best is None or (best.startswith("eat:") and m["acc/eat:best"] == m[f"acc/{best}"])
    assert len(rec["extra"]["replicates"]["delta_acc/dense"]) == 50
    # three timing seeds of 6 examples each; the mean latency is the mean of the seeds' means
    ex = rec["extra"]
    assert ex["timing_seeds"] == [0, 1, 2] and rec["n_samples"]["timed"] == 18
    assert len(ex["latency_ms"]["dense"]) == 18 and len(ex["per_seed"]["dense"]["mean_ms"]) == 3
    for name in names:
        assert m[f"latency/{name}_mean_ms"] == pytest.approx(np.mean(ex["per_seed"][name]["mean_ms"]))
        assert m[f"throughput/{name}_per_s"] == pytest.approx(np.mean(ex["per_seed"][name]["throughput_per_s"]))
    assert ex["layers_of"] == "eat:prune+window+exit" and [d["layer"] for d in ex["layers"]] == [1, 2, 3, 4]
    assert ex["layers_by_contender"]["eat:none"][3]["retention_observed"] == 1.0
    # the dense paths compute the same predictions, whatever the heads pool
    assert m["acc/dense"] == m["acc/dense_hf"]
    assert m["delta_acc/dense"] == 0.0 and m["retention/eat:none"] == 1.0 and m["depth/eat:none"] == 4


def test_scaling_bench_fits_slopes(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.data.long_texts", lambda min_words=0: ["word " * 400] * 5)
    rec = run(smoke_cfg, tmp_path, "method.variant=scaling", "method.lengths=[64,128]", "method.repeats=2",
              "method.bootstrap=20",
              "method.scaling_shape={hidden_size:32,num_hidden_layers:4,num_attention_heads:2,intermediate_size:64}",
              method="eat_bench")
    m = rec["metrics"]
    for arm in ("dense", "window", "eat", "paper_code"):
        assert m[f"scaling/{arm}_ms@64"] > 0 and np.isfinite(m[f"scaling/{arm}_slope"])
    json.dumps(rec["extra"]["scaling_ms"])


def test_length_bench_reads_the_long_task_with_the_short_task_arms(smoke_cfg, tmp_path):
    rec = run(smoke_cfg, tmp_path, "method.variant=length", "method.n_long=4", "method.warmup=1",
              "method.bootstrap=20", method="eat_bench")
    m = rec["metrics"]
    assert rec["n_samples"]["long_examples"] == 4 and m["long/acc/dense"] == m["long/acc/dense_hf"]
    assert m["long/retention/eat:prune+window"] < 1.0 and m["long/latency/paper_code_p50_ms"] > 0
    assert len(rec["extra"]["detail"]["length"]) == 4


def test_length_bench_refuses_an_unknown_long_task(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat_bench", "method.variant=length", "method.long_task=imdb",
                    f"method.checkpoint_dir={tmp_path / 'ckpt'}", *TINY)
    with pytest.raises(ValueError, match="method.long_task='imdb' names no conf/task/imdb.yaml"):
        execute(cfg, tmp_path / "out")
    assert not (tmp_path / "ckpt").exists()  # refused before any training


def test_latency_bench_refuses_more_timed_examples_than_the_eval_split(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat_bench", "method.n_latency=1000", f"method.checkpoint_dir={tmp_path / 'ckpt'}", *TINY)
    with pytest.raises(ValueError, match="lower method.n_latency"):
        execute(cfg, tmp_path / "out")
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_hugging_face_dense_path_equals_ours(pooling):
    import torch
    from tests.eat.test_model import batch, bert
    from eat.model import EatModel
    m = EatModel(bert(), 3, exit_layer=None, settings=Settings().dense(), pooling=pooling).eval()
    ids, mask = batch()
    with torch.no_grad():
        assert (B._hf_dense(m)(input_ids=ids, attention_mask=mask) - m(ids, mask).logits).abs().max() <= 1e-5


def test_calibration_off_keeps_the_temperature_at_one(smoke_cfg, tmp_path):
    m = run(smoke_cfg, tmp_path, "method.calibrate=false")["metrics"]
    assert m["calib/temperature"] == 1.0 and m["calib/fitted_temperature"] > 0
    assert m["calib/ece_eval_after"] == m["calib/ece_eval_before"]
    assert m["calib/ece_dev_after"] == m["calib/ece_dev_before"]


def test_an_arm_trained_inside_the_benchmark_is_the_arm_a_standalone_run_trains(smoke_cfg, tmp_path):
    # the benchmark trains eat, then dense, then the baseline in one process; a cached dense checkpoint must hold the
    # weights a run of its own would train, or a record that reads it cannot be reproduced
    alone = run(smoke_cfg, tmp_path, "method.variant=dense", f"method.checkpoint_dir={tmp_path / 'a'}", out="alone")
    run(smoke_cfg, tmp_path, "method.n_latency=2", "method.warmup=1", "method.batch_size=4",
        "method.throughput_rounds=1", "method.bootstrap=20", "method.baseline_model=tiny-bert",
        f"method.checkpoint_dir={tmp_path / 'b'}", method="eat_bench", out="bench")
    cached = run(smoke_cfg, tmp_path, "method.variant=dense", f"method.checkpoint_dir={tmp_path / 'b'}", out="cached")
    assert cached["extra"]["checkpoint_cached"] and not alone["extra"]["checkpoint_cached"]
    assert cached["per_example"] == alone["per_example"]
    assert cached["extra"]["history"] == alone["extra"]["history"]


def test_the_default_arm_trains_eq_1_final_plus_0_3_exit_and_nothing_else(smoke_cfg):
    # Eq. 1: CE_L + 0.3 CE_exit. A patience head is built only for the patience rule; trained by default, it added
    # 0.3 CE of another layer to every arm's loss
    cfg = smoke_cfg("method=eat", *TINY)  # debug=smoke still names a patience_layer: unread without patience=true
    torch.manual_seed(0)
    m = R.build(cfg).train()
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    m.attn_dropout = m.hidden_dropout = 0.0
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, m.encoder.config.vocab_size, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    labels = torch.tensor([0, 1, 1, 0])
    with torch.no_grad(), m.using(Settings().dense()):
        out = m(ids, mask, labels=labels)  # training: every head's loss, no exit
        hs = m.eval().encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert sorted(out.layer_logits) == [3, 4] and m.patience_classifier is None
    valid = mask.bool()
    want = F.cross_entropy(m.classifier(m.pool(hs[4], valid)), labels) + 0.3 * F.cross_entropy(
        m.exit_classifier(m.pool(hs[3], valid)), labels)
    assert torch.isclose(out.loss, want, atol=1e-5)


def test_the_patience_rule_builds_its_head_below_the_exit(smoke_cfg):
    cfg = smoke_cfg("method=eat", *TINY, "method.patience=true", "method.patience_layer=null")
    R.check(cfg)
    assert R.build(cfg).patience_layer == 2  # the layer below the exit head (3 at the paper's exit layer 4)
    bad = smoke_cfg("method=eat", *TINY, "method.patience=true", "method.patience_layer=3")
    with pytest.raises(ValueError, match=r"method.patience_layer=3 must be in 1..2 .*set method.patience_layer"):
        R.check(bad)


def _feats(n=64, seed=0, vocab=100):
    """n examples of 5..40 tokens as the runner's features ([CLS] = 2 first)."""
    from datasets import Dataset
    g = torch.Generator().manual_seed(seed)
    ids = []
    for _ in range(n):
        t = int(torch.randint(5, 41, (1,), generator=g))
        ids.append([2] + torch.randint(5, vocab, (t - 1,), generator=g).tolist())
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids],
                              "labels": torch.randint(0, 3, (n,), generator=g).tolist()})


def test_the_batch_exit_rule_is_scored_at_batch_1():
    # the paper scored (and timed) the official code at batch 1, where "exit only when the whole batch is confident"
    # is a per-example exit; scored on batches of 64 nothing exits, a quantity the paper never measured
    from eat.model import EatModel
    from experiments import data as D
    from tests.eat.test_model import bert, threshold
    m = EatModel(bert(), 3, exit_layer=4).eval().double()
    with torch.no_grad():
        m.exit_classifier.weight.mul_(30)
    feats = _feats()
    paper = Settings(prune_rule="repo", prune_mode="mask", kernel="masked", exit_mode="batch", window=8)
    conf = _softmax_max(R.predict(m, feats, 0, 64, torch.device("cpu"), paper)["exit_logits"])
    tau, n_exit = threshold(conf, 8, 24)
    s = replace(paper, tau=tau)  # about 3 in 4 examples are confident
    by_one = []
    with torch.no_grad(), m.using(s):
        for row in D.rows_of(feats):
            o = m(**{k: v for k, v in D.collate([row], 0).items() if k != "labels"})
            by_one.append((o.logits[0], int(o.depth[0])))
    scored = R.predict(m, feats, 0, 64, torch.device("cpu"), s)
    assert scored["depth"].tolist() == [d for _, d in by_one]
    assert (scored["depth"] == 4).sum() == n_exit
    assert np.abs(scored["logits"] - torch.stack([z for z, _ in by_one]).numpy()).max() <= 1e-5  # fp32 out
    batched = R.predict(m, feats, 0, 64, torch.device("cpu"), s, batch1=False)  # the batch rule on 64 at once
    assert batched["depth"].tolist() == [6] * 64


def _softmax_max(z):
    return torch.softmax(torch.as_tensor(z), -1).amax(-1).numpy()


def test_tau_chosen_among_identical_candidates_says_so():
    from omegaconf import OmegaConf
    from eat.model import EatModel
    from tests.eat.test_model import bert
    m = EatModel(bert(), 3, exit_layer=4).eval()
    with torch.no_grad():
        m.exit_classifier.weight.zero_()  # uniform: 1/3 < every tau, nothing ever exits
    cfg = OmegaConf.create({"method": {"taus": [0.95, 0.8, 0.9], "tau_tolerance": 1.0},
                            "hardware": {"eval_batch_size": 16}})
    feats = _feats(20)
    base = R._acc(R.predict(m, feats, 0, 16, torch.device("cpu"), m.settings))
    tau, accs, why = R.choose_tau(cfg, m, feats, 0, base, torch.device("cpu"))
    assert tau == 0.8 and set(accs) == {0.8, 0.9, 0.95}
    assert why.startswith("all candidates identical on dev") and "lowest tau on the grid, 0.8" in why


def _keep(t):
    """The paper rule by hand, in integers: [CLS] + ceil(0.7 (t - 1)) others."""
    return 1 + (7 * (t - 1) + 9) // 10


@pytest.mark.parametrize("mode,kernel", [("remove", "banded"), ("mask", "masked")])
def test_per_layer_statistics_match_a_hand_count(mode, kernel):
    # the contract eat/report.py (Fig. 2) and eat/flops.py read: extra.layers, one dict per encoder layer
    from eat.model import EatModel
    from tests.eat.test_model import bert, threshold
    m = EatModel(bert(), 3, exit_layer=4).eval().double()
    with torch.no_grad():
        m.exit_classifier.weight.mul_(30)
    feats = _feats(40, seed=1)
    s = Settings(window=8, prune_mode=mode, kernel=kernel)
    tau, n_exit = threshold(_softmax_max(R.predict(m, feats, 0, 16, torch.device("cpu"), s)["exit_logits"]), 15, 30)
    s = replace(s, tau=tau)  # some exit after layer 4, the others run on
    p = R.predict(m, feats, 0, 16, torch.device("cpu"), s)
    stats = R.layer_stats(p, s)
    n = np.asarray([len(r) for r in feats["input_ids"]])
    k2 = np.asarray([_keep(t) for t in n])
    k4 = np.asarray([_keep(t) for t in k2])
    full = p["depth"] == 6
    assert (~full).sum() == n_exit and 0 < n_exit < 40
    slots = {"remove": [n, n, k2, k2, k4, k4], "mask": [n] * 6}[mode]
    left = [n, k2, k2, k4, k4, k4]
    t = int(round(n.mean()))
    sched = [1, _keep(t) / t, _keep(t) / t, _keep(_keep(t)) / t, _keep(_keep(t)) / t, _keep(_keep(t)) / t]
    assert [d["layer"] for d in stats] == [1, 2, 3, 4, 5, 6]
    for i, d in enumerate(stats):
        on = full if i >= 4 else np.ones(40, bool)
        assert d["running"] == pytest.approx(on.mean())
        assert d["tokens_in"] == pytest.approx(slots[i][on].mean())
        assert d["retention_observed"] == pytest.approx((left[i][on] / n[on]).mean())
        assert d["retention_scheduled"] == pytest.approx(sched[i])
    shape = R.shape_of(p, m, s)
    assert shape["seq_len_mean"] == pytest.approx(n.mean())
    assert shape["model_dims"] == {"layers": 6, "hidden": 32, "intermediate": 64, "heads": 4, "window": 8}


def test_timing_seeds_are_averaged_as_the_paper_averages_three_runs():
    runs = {0: {"a": np.array([1.0, 2, 3])}, 1: {"a": np.array([4.0, 5, 6])}, 2: {"a": np.array([7.0, 8, 9])}}
    out = {}
    per = B._seed_means(out, runs)
    assert per["a"]["mean_ms"] == [2.0, 5.0, 8.0] and per["a"]["seeds"] == [0, 1, 2]
    assert out["latency/a_mean_ms"] == 5.0 and out["latency/a_mean_ms_seed_sd"] == pytest.approx(3.0)
    assert B._pooled(runs)["a"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    rows = [{"i": i} for i in range(50)]
    drawn = B._seeded(rows, 2, 5, [0, 1, 2])
    assert [sd for sd, _ in drawn] == [0, 1, 2] and all(len(r) == 7 for _, r in drawn)
    assert len({tuple(x["i"] for x in r) for _, r in drawn}) == 3  # each seed its own examples and order
    assert drawn == B._seeded(rows, 2, 5, [0, 1, 2])  # and reproducibly so


def test_the_bench_refuses_no_timing_seeds(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=eat_bench", "method.timing_seeds=[]", f"method.checkpoint_dir={tmp_path / 'ckpt'}", *TINY)
    with pytest.raises(ValueError, match="method.timing_seeds"):
        execute(cfg, tmp_path / "out")
