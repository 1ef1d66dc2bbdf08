"""method=intrinsic_dim end to end on tiny-llama + the rt-polarity fixture: records, store and checkpoint reuse,
bad variants, the report."""
import logging
from pathlib import Path

import numpy as np
import pytest

from experiments.models import byte_tokenizer, tokenizer_fingerprint
from experiments.results import load_runs
from experiments.run import execute
from intrinsic_dim import report
from intrinsic_dim import run as id_run
from experiments.config import compose


def _cfg(tmp_path, *overrides):
    return compose("experiment=intrinsic_dim/smoke", f"results_dir={tmp_path / 'results'}",
                   f"store.dir={tmp_path / 'store'}", f"method.checkpoint_dir={tmp_path / 'lora'}", *overrides)


@pytest.mark.slow  # ~4 s quiet: five in-process runs (training included) and the report
def test_icl_and_sft_runs_write_curves_and_reuse_caches(tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)  # publish=true from a developer's dirty tree
    recs = {}
    for v in ("icl-0", "icl-2", "icl_unique-2", "sft"):
        recs[v] = execute(_cfg(tmp_path, f"method.variant={v}", "publish=true"), tmp_path / "run" / v)
        assert recs[v]["status"] == "ok", recs[v].get("error")
    x = recs["icl-2"]["extra"]
    assert len(x["curves"]["twonn"]) == 5 and len(x["curves"]["mle_k5"]) == 5  # tiny-llama: 4 layers + embedding
    assert x["n_prompts"] == 16 and x["computed_prompts"] > 0
    assert x["prompt_examples"][0].count("\n\n") == 2 and x["prompt_examples"][0].endswith("Answer:\n")
    acc = recs["icl-2"]["metrics"]["eval/accuracy"]
    assert acc == x["accuracy"] and (acc * 16).is_integer() and sum(x["pred_counts"]) == 16  # a share of 16 prompts
    ck = recs["sft"]["extra"]["checkpoints"]
    assert [(c["epoch"], c["split"]) for c in ck] == [(e, s) for e in range(3) for s in ("train", "eval")]
    assert ck[1]["computed_prompts"] == 0  # epoch 0 = the base model: the icl-0 states, from the store
    for est, curve in recs["icl-0"]["extra"]["curves"].items():  # index 0 (embedding) is NaN: one shared token
        assert ck[1]["curves"][est][1:] == curve[1:]
    # another estimator setting: nothing recomputed, no retraining (checkpoints come from the cache)
    again = execute(_cfg(tmp_path, "method.variant=sft", "method.mle_ks=[4]"), tmp_path / "run" / "sft2")
    assert again["status"] == "ok"
    assert all(c["computed_prompts"] == 0 for c in again["extra"]["checkpoints"])
    assert again["metrics"]["time/train_s"] == recs["sft"]["metrics"]["time/train_s"]
    assert again["extra"]["checkpoints"][-1]["curves"]["twonn"][1:] == ck[-1]["curves"]["twonn"][1:]
    # the report builds from the published records alone
    runs = load_runs(tmp_path / "results", "intrinsic_dim")
    assert len(runs) == 4
    for r in runs:  # present the smoke runs as the comparison and dynamics experiments
        r["exp_id"] = "intrinsic_dim/sft_dynamics_cpu" if r["extra"]["paradigm"] == "sft" else \
            "intrinsic_dim/icl_vs_k_cpu"
    runs += [dict(r, exp_id="intrinsic_dim/icl_vs_sft_cpu") for r in runs]
    lines = report.build(runs, tmp_path / "out")
    text = "\n".join(lines)
    assert "Table 1" in text and "[CLAIMS.md](CLAIMS.md)" in text and "holds" not in text  # verdicts: CLAIMS.md
    for f in ("tables/table1_accuracy.md", "tables/auc.md", "tables/fig4_auc_difference.csv",
              "tables/sft_checkpoints.md", "figures/fig5_auc_boxplot.png", "tables/fig6_auc_per_model.md",
              "figures/fig6_auc_per_model.png"):
        assert (tmp_path / "out" / f).is_file(), f
    assert list((tmp_path / "out" / "figures").glob("fig2_*.png")) and \
        list((tmp_path / "out" / "figures").glob("fig3_*.png"))


def test_bad_variant_fails_naming_the_fix(tmp_path):
    rec = execute(_cfg(tmp_path, "method.variant=fewshot", "on_error=record"), tmp_path / "bad")
    assert rec["status"] == "failed" and "icl-<k>" in rec["error"]


def test_split_recipe_matches_datasets_shuffle_and_never_overlaps(tmp_path, monkeypatch):
    import datasets

    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(400)]
    monkeypatch.setattr(id_run, "load_rows", lambda task, data, split: rows)
    cfg = _cfg(tmp_path, "task=sst2", "data.source=hub", "method.n_train=100", "method.n_eval=50")
    pool, evals, uniq = id_run.split_items(cfg, unique=False)
    order = datasets.Dataset.from_list(rows).shuffle(seed=42)["sentence"]  # the official DatasetDict.shuffle(42)
    assert [r["sentence"] for r in pool] == order[:100]
    assert [r["sentence"] for r in evals] == order[100:150]  # same source split: the items after the pool
    cfg = _cfg(tmp_path, "task=sst2", "data.source=hub", "method.n_train=100", "method.n_eval=50",
               "method.unique_pool=300")
    pool, evals, uniq = id_run.split_items(cfg, unique=True)
    assert [r["sentence"] for r in uniq] == order[:300] and [r["sentence"] for r in evals] == order[300:350]
    cfg = _cfg(tmp_path, "task=sst2", "data.source=hub", "method.n_train=100", "method.n_eval=50", "method.dev=true")
    pool, dev, _ = id_run.split_items(cfg, unique=False)  # dev: after the pool and the eval items carved from train
    assert [r["sentence"] for r in pool] == order[:100] and [r["sentence"] for r in dev] == order[150:200]


def test_dev_split_of_an_offline_task_is_train_rows_after_the_pool(tmp_path, monkeypatch):
    rows = {"train": [{"text": f"t{i}", "label": i % 2} for i in range(300)],
            "eval": [{"text": f"e{i}", "label": i % 2} for i in range(80)]}
    monkeypatch.setattr(id_run, "load_rows", lambda task, data, split: rows[split])
    base = ("task=rt-polarity", "method.n_train=100", "method.n_eval=50")
    pool, evals, _ = id_run.split_items(_cfg(tmp_path, *base), unique=False)
    pool_d, dev, _ = id_run.split_items(_cfg(tmp_path, *base, "method.dev=true"), unique=False)
    assert pool_d == pool and all(r["text"].startswith("e") for r in evals)
    assert len(dev) == 50 and all(r["text"].startswith("t") for r in dev)
    assert not {r["text"] for r in dev} & {r["text"] for r in pool}


@pytest.mark.slow  # ~4 s: three tiny runs, then the claims machinery on their records
def test_records_carry_what_the_claims_bootstrap(tmp_path):
    from experiments.evidence import claims, verdicts
    recs = {}
    for v in ("icl-0", "icl-2", "sft"):
        recs[v] = execute(_cfg(tmp_path, f"method.variant={v}", "method.auc_bootstrap=200", "method.label_space=true",
                               "method.sft_loss=completion", "method.sft_epochs=1"), tmp_path / "run" / v)
        assert recs[v]["status"] == "ok", recs[v].get("error")
        pe, reps = recs[v]["per_example"]["eval"], recs[v]["extra"]["replicates"]["eval/auc_twonn"]
        assert len(pe["pred"]) == len(pe["label"]) == 16 and len(reps) == 200
        curves = recs[v]["extra"]["replicates"]["extra.curves.twonn"]
        assert np.shape(curves) == (200, 5)  # tiny-llama: embedding + 4 layers
        assert np.mean(np.equal(pe["pred"], pe["label"])) == recs[v]["metrics"]["eval/accuracy"]
    assert recs["icl-2"]["extra"]["labels"] == [" negative", " positive"]
    assert recs["icl-2"]["extra"]["prompt_examples"][0].count("Answer:\n positive") + \
        recs["icl-2"]["extra"]["prompt_examples"][0].count("Answer:\n negative") == 2  # demos written as scored
    doc = {"paper": "intrinsic_dim", "claims": [{
        "id": "x", "kind": "paper", "claim": "c", "paper": {"where": "w"}, "needs_signal": False,
        "compare": [{"metric": "eval/auc_twonn", "a": {"method.variant": "icl-2"}, "b": {"method.variant": "sft"},
                     "pair_by": ["model.name", "task.name", "seed"], "test": {"kind": "direction", "sign": "+"}},
                    {"metric": "eval/accuracy", "a": {"method.variant": "sft"}, "b": {"method.variant": "icl-0"},
                     "pair_by": ["model.name", "task.name", "seed"], "test": {"kind": "direction", "sign": "+"}}]}]}
    claim = claims.parse_claims(doc).claims[0]
    auc, acc = (verdicts.evaluate_comparison(claim, c, list(recs.values())) for c in claim.comparisons)
    assert "bootstrap replicates" in auc.n and auc.ci[0] < auc.estimate < auc.ci[1]
    assert auc.estimate == pytest.approx(recs["icl-2"]["metrics"]["eval/auc_twonn"]
                                         - recs["sft"]["metrics"]["eval/auc_twonn"])
    assert "16 examples" in acc.n and acc.ci is not None
    layer = claims.parse_claims({**doc, "claims": [{**doc["claims"][0], "compare": {
        **doc["claims"][0]["compare"][0], "metric": "extra.curves.twonn", "reduce": "min"}}]}).claims[0]
    low = verdicts.evaluate_comparison(layer, layer.comparisons[0], list(recs.values()))
    assert "bootstrap replicates" in low.n and low.ci[0] <= low.estimate <= low.ci[1]


def test_lora_checkpoints_key_on_weights_data_and_code_version(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import torch

    cfg, ctx = _cfg(tmp_path, "method.variant=sft"), SimpleNamespace(device=torch.device("cpu"), store_dir=tmp_path)
    key = id_run._checkpoint_dir(cfg, ctx, "weights-a", [[5, 6]])
    assert key.parent == tmp_path / "lora"  # method.checkpoint_dir
    assert id_run._checkpoint_dir(cfg, ctx, "weights-a", [[5, 6]]) == key
    assert id_run._checkpoint_dir(cfg, ctx, "weights-b", [[5, 6]]) != key  # other base weights
    assert id_run._checkpoint_dir(cfg, ctx, "weights-a", [[5, 7]]) != key  # other data or tokenizer: other token ids
    monkeypatch.setattr(id_run, "CHECKPOINT_VERSION", id_run.CHECKPOINT_VERSION + 1)
    assert id_run._checkpoint_dir(cfg, ctx, "weights-a", [[5, 6]]) != key  # other training code


def test_lora_checkpoints_keep_the_names_and_directory_they_were_cached_under(tmp_path, monkeypatch):
    """A refactor of the key must not orphan the cached checkpoints: these names were computed by the key as it was
    when the CPU tier's checkpoints were cached, and the default root is the asset cache's lora-checkpoints/ (where
    the committed records say they live), whatever store.dir says."""
    from types import SimpleNamespace

    import torch

    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    cfg = compose("experiment=intrinsic_dim/smoke", "method.variant=sft", f"store.dir={tmp_path / 'elsewhere'}")
    ctx = SimpleNamespace(device=torch.device("cpu"), store_dir=tmp_path / "elsewhere")
    root = tmp_path / "cache" / "lora-checkpoints"
    assert id_run._checkpoint_dir(cfg, ctx, "weights-a", [[5, 6], [7]]) == root / "b13c897cd9bd13923e50"
    assert id_run._checkpoint_dir(cfg, ctx, "weights-a", [[5, 6], [7]], "bf16") == root / "0f934ed08e1f1b46def9"


@pytest.mark.slow  # ~6 s: three tiny one-epoch SFT runs
def test_force_retrains_lora_checkpoints_and_a_retrain_cut_short_is_never_reused(tmp_path, caplog):
    sft = ("method.variant=sft", "method.sft_epochs=1")
    with caplog.at_level(logging.INFO):
        first = execute(_cfg(tmp_path, *sft), tmp_path / "run" / "a")
        ckpt = Path(first["extra"]["checkpoint_dir"])
        caplog.clear()
        forced = execute(_cfg(tmp_path, *sft, "force=true"), tmp_path / "run" / "a")
        assert "reusing" not in caplog.text and forced["extra"]["checkpoint_dir"] == str(ckpt)
        assert forced["metrics"]["time/train_s"] != first["metrics"]["time/train_s"]  # timed afresh, not read back
        (ckpt / "train.json").unlink()  # as a forced retrain killed after rewriting some epochs
        caplog.clear()
        healed = execute(_cfg(tmp_path, *sft), tmp_path / "run" / "b")
        assert "reusing" not in caplog.text and (ckpt / "train.json").is_file()
        caplog.clear()
        execute(_cfg(tmp_path, *sft), tmp_path / "run" / "c")
        assert "reusing 1 cached LoRA checkpoints" in caplog.text
    assert healed["metrics"]["eval/accuracy"] == first["metrics"]["eval/accuracy"]


def test_bad_sft_loss_fails_naming_the_key(tmp_path):
    rec = execute(_cfg(tmp_path, "method.variant=sft", "method.sft_loss=labels", "on_error=record"), tmp_path / "run")
    assert rec["status"] == "failed" and "method.sft_loss='labels'" in rec["error"]


@pytest.mark.slow  # ~8 s: three tiny runs and a fresh reload
def test_a_sweep_loads_and_fingerprints_its_model_once(tmp_path, monkeypatch):
    counts = {"load": 0, "fingerprint": 0}

    def counted(name, fn):
        def wrapper(*a, **kw):
            counts[name] += 1
            return fn(*a, **kw)
        return wrapper

    monkeypatch.setattr(id_run, "load_causal_lm", counted("load", id_run.load_causal_lm))
    monkeypatch.setattr(id_run, "model_fingerprint", counted("fingerprint", id_run.model_fingerprint))
    monkeypatch.setattr(id_run, "_models", id_run.Memo(1))
    recs = {v: execute(_cfg(tmp_path, f"method.variant={v}", "method.sft_epochs=1"), tmp_path / "run" / v)
            for v in ("icl-0", "sft", "icl-2")}
    assert all(r["status"] == "ok" for r in recs.values()), [r.get("error") for r in recs.values()]
    assert counts == {"load": 1, "fingerprint": 1}
    assert recs["icl-0"]["extra"]["computed_prompts"] == 16
    # after the SFT run the cached model is the base again: its epoch-0 states were the icl-0 ones, and a fresh
    # process (an emptied memo) gives the icl-2 run the same numbers
    id_run._models.clear()
    fresh = execute(_cfg(tmp_path, "method.variant=icl-2", f"store.dir={tmp_path / 'store2'}"), tmp_path / "fresh")
    assert counts == {"load": 2, "fingerprint": 2}
    assert fresh["extra"]["computed_prompts"] == 16  # an empty store: computed anew, with the reloaded model
    assert fresh["metrics"]["eval/auc_twonn"] == recs["icl-2"]["metrics"]["eval/auc_twonn"]
    assert fresh["metrics"]["eval/accuracy"] == recs["icl-2"]["metrics"]["eval/accuracy"]


def test_prompts_are_capped_at_the_model_context(tmp_path):
    rec = execute(_cfg(tmp_path, "method.variant=icl-2", "model.from_config.max_position_embeddings=64",
                       "on_error=record"), tmp_path / "short")
    assert rec["status"] == "failed"
    assert "the model's context (model.max_position_embeddings=64)" in rec["error"] and "smaller k" in rec["error"]
    ok = execute(_cfg(tmp_path, "method.variant=icl-0", "method.max_prompt_tokens=8192"), tmp_path / "long")
    assert ok["status"] == "ok", ok.get("error")
    assert ok["extra"]["prompt_token_limit"] == 512  # tiny-llama's context, not the 8192 asked for
    assert ok["extra"]["prompt_token_limit_by"] == "model.max_position_embeddings"
    assert ok["provenance"]["tokenizer"] == tokenizer_fingerprint(byte_tokenizer())  # tiny-llama's tokenizer
