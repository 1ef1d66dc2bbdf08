"""method=layer_fusion through the suite's runner on tiny models and the fixtures: feature extraction from the
activation store gives the same logits as running the frozen backbone (also on the labelled positions alone), the
few-shot sample follows the protocol, the records carry what the report reads, and bad configs are refused before
any work."""
import numpy as np
import pytest
import torch

from experiments import data, models
from experiments.config import ConfigError
from experiments.context import RunContext
from experiments.models import architecture, load_encoder, tokenizer_fingerprint
from experiments.optim import own_lr, param_groups
from experiments.run import execute
from layer_fusion import assemble, features, protocols
from layer_fusion.config import check
from layer_fusion.fusion import DepthFusion
from layer_fusion.params import count
from experiments.config import compose
from tests.helpers.grids import compose_experiment


def record(smoke_cfg, tmp_path, *overrides):
    cfg = smoke_cfg("method=layer_fusion", *overrides)
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    return rec


def fe_setup(tmp_path, *overrides):
    cfg = compose("debug=smoke", "method=layer_fusion", *overrides)
    tok, backbone = load_encoder(cfg.model)
    backbone.eval()
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu", store_dir=tmp_path / "store",
                     store_dtype="fp32")
    raw = data.load_splits(cfg.task, cfg.data)
    feats = data.encode(raw["eval"], tok, cfg.task, data.max_length(cfg.task, cfg.data), train=False)
    torch.manual_seed(0)
    model = assemble.build(cfg, backbone, len(cfg.task.label_names), pooled=cfg.method.protocol == "p32")
    model.eval()
    return cfg, ctx, tok, backbone, feats, model


@pytest.mark.parametrize("fusion", ["last", "scalar_mix", "concat", "dwatt", "deeper"])
def test_cached_blocks_give_the_backbones_logits_on_the_scored_positions(fusion, tmp_path):
    cfg, ctx, tok, backbone, feats, model = fe_setup(tmp_path, "task=wnut16", f"method.fusion={fusion}")
    cached, scored = features.split_inputs(cfg, ctx, ctx.store(), backbone, feats, tokenizer_fingerprint(tok), "all",
                                           False)
    n = 8
    with torch.no_grad():
        full = model(**data.collate(data.rows_of(feats.select(range(n))), tok.pad_token_id)).logits
        fed = model(**cached.inputs(0, n)).logits
    for i in range(n):
        keep = [p for p, w in enumerate(feats[i]["word_index"]) if w >= 0] if fusion != "deeper" \
            else list(range(len(feats[i]["input_ids"])))
        assert fed[i, :len(keep)].shape == full[i, keep].shape
        torch.testing.assert_close(fed[i, :len(keep)], full[i, keep], atol=1e-5, rtol=1e-5)
    if fusion != "deeper":  # evaluation aligns the compacted positions with their words
        assert [w for w in scored[0]["word_index"]] == [w for w in feats[0]["word_index"] if w >= 0]


@pytest.mark.parametrize("fusion", ["last", "mean", "scalar_mix"])
def test_pooled_probe_equals_pooling_the_fused_states(fusion, tmp_path):
    """P-32's frozen probe pools each block first (one state per example in the store); for the linear fusions
    this equals the head pooling the fused sequence, which is what a fine-tuned model computes."""
    cfg, ctx, tok, backbone, feats, model = fe_setup(tmp_path, "task=rt-polarity", "model=tiny-llama",
                                                     "method.protocol=p32", f"method.fusion={fusion}")
    if fusion == "scalar_mix":  # away from uniform, so a wrong block order would show
        with torch.no_grad():
            model.fusion.lam.normal_()
    cached, _ = features.split_inputs(cfg, ctx, ctx.store(), backbone, feats, tokenizer_fingerprint(tok), "last", True)
    unpooled = assemble.build(cfg, backbone, 2, pooled=False)
    unpooled.load_state_dict(model.state_dict())
    unpooled.eval()
    with torch.no_grad():
        probe = model(**cached.inputs(0, 6)).logits
        full = unpooled(**data.collate(data.rows_of(feats.select(range(6))), tok.pad_token_id)).logits
    torch.testing.assert_close(probe, full, atol=1e-5, rtol=1e-5)


def test_few_shot_sample_is_uniform_per_trial_and_refuses_too_many():
    a = protocols.few_shot_sample(100, 4, 5, seed=0)
    assert len(a) == 20 == len(set(a)) and a == sorted(a) and a == protocols.few_shot_sample(100, 4, 5, seed=0)
    assert a != protocols.few_shot_sample(100, 4, 5, seed=1)  # each trial draws its own sentences
    counts = np.bincount(np.concatenate([protocols.few_shot_sample(10, 1, 5, s) for s in range(2000)]), minlength=10)
    assert counts.min() > 0.9 * counts.mean()  # uniform over the pool (not stratified, not the first k)
    with pytest.raises(ValueError, match="method.shots=30 x 5 classes = 150 sentences, but the train split has 100"):
        protocols.few_shot_sample(100, 30, 5, seed=0)


@pytest.mark.slow  # several whole runs: 4-6 s; make test runs it
@pytest.mark.parametrize("fusion", ["dwatt", "scalar_mix", "deeper"])
def test_fewshot_record_carries_curve_best_and_new_parameters(fusion, smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "task=wnut16", f"method.fusion={fusion}", "method.shots=1", "train.patience=0",
                 "method.evals_per_run=3")
    m, extra = rec["metrics"], rec["extra"]
    curve = [c["dev/entity_f1"] for c in extra["curve"]]
    assert m["dev/entity_f1"] == pytest.approx(max(curve)) and m["dev/entity_f1_final"] == pytest.approx(curve[-1])
    assert len(curve) == 3 and "eval/entity_f1" in m
    assert len(extra["sample"]) == len(set(extra["sample"])) == 10  # N = 1 x wnut16's 10 entity types
    assert m["params/trainable"] == m["params/new"]  # fe: the backbone is frozen
    cfg = compose("model=tiny-bert")
    added = count(architecture(cfg.model), fusion, 1 if fusion == "deeper" else None)
    assert m["params/fusion"] == added
    if fusion == "scalar_mix":
        assert len(extra["lambda"]) == 4 and len(extra["lambda_trajectory"]) == 3
        assert sum(extra["layer_weights"]) == pytest.approx(1.0)
        # the early-block share the claims read is recorded only where λ left uniform
        assert ("lambda_learned" in extra) == (m["lambda/entropy_ratio"] < 0.999)


def test_fe_runs_share_one_frozen_backbone_and_record_its_tokenizer(smoke_cfg, tmp_path, monkeypatch):
    """fe: the backbone comes from experiments.models.frozen_encoder, loaded once for the runs of a process and never
    trained; each record names the tokenizer the run read (provenance notes it, replayed on a memo hit)."""
    loads, load = [], models.load_encoder
    counted = lambda *a, **k: loads.append(a) or load(*a, **k)  # noqa: E731
    monkeypatch.setattr(models, "load_encoder", counted)
    monkeypatch.setattr("layer_fusion.run.load_encoder", counted)  # a load of the run's own would count too
    tag = f"model.stand_in_for=fe-{tmp_path.name}"  # a model config no earlier test has loaded in this process
    cfg = smoke_cfg("method=layer_fusion", "task=wnut16", tag)
    tok, backbone = models.frozen_encoder(cfg.model, pre_split=True)  # the tokenizer reads pre-split words
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    recs = [record(smoke_cfg, tmp_path, "task=wnut16", tag, f"method.fusion={f}", "method.shots=1", "train.patience=0")
            for f in ("dwatt", "scalar_mix")]
    assert len(loads) == 1  # the frozen_encoder call above; both runs took its backbone
    for rec in recs:
        assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(tok)
        assert rec["metrics"]["params/trainable"] == rec["metrics"]["params/new"]
    assert not any(p.requires_grad for p in backbone.parameters()) and not backbone.training
    assert all(torch.equal(v, backbone.state_dict()[k]) for k, v in before.items())


def test_ft_trains_a_backbone_of_its_own(smoke_cfg, tmp_path):
    """ft: the backbone trains (its parameters count as trainable); it is a fresh load, not the shared frozen one."""
    tag = f"model.stand_in_for=ft-{tmp_path.name}"
    cfg = smoke_cfg("method=layer_fusion", "task=rt-polarity", "method.protocol=p32", "method.regime=ft", tag)
    tok, frozen = models.frozen_encoder(cfg.model)
    before = {k: v.clone() for k, v in frozen.state_dict().items()}
    rec = record(smoke_cfg, tmp_path, "task=rt-polarity", "method.protocol=p32", "method.regime=ft", tag)
    m = rec["metrics"]
    assert m["params/trainable"] > m["params/new"] + 0.9 * sum(p.numel() for p in frozen.parameters())
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(tok)
    assert all(torch.equal(v, frozen.state_dict()[k]) for k, v in before.items())


def test_lambda_gets_its_own_learning_rate():
    fusion = DepthFusion("scalar_mix", 4, 8)
    own_lr(fusion.lam, 0.1)
    groups = param_groups(torch.nn.ModuleDict({"f": fusion, "head": torch.nn.Linear(8, 2)}), 0.01)
    own = [g for g in groups if "lr" in g]
    assert len(own) == 1 and own[0]["lr"] == 0.1 and own[0]["params"] == [fusion.lam]
    assert own[0]["weight_decay"] == 0.0


@pytest.mark.parametrize("overrides,match", [
    (("task=rt-polarity", "method.protocol=fewshot"), "fewshot needs a ner task"),
    (("task=wnut16", "method.protocol=p32"), "p32 needs a cls or pair task"),
    (("task=rt-polarity", "method.protocol=p32", "model=tiny-llama", "method.fusion=deeper"), "decoder"),
    (("task=wnut16", "method.truncate=9"), r"method.truncate=9 must lie in 1..4"),
    (("task=wnut16", "train.patience=2"), "train.patience=2"),
    (("task=wnut16", "train.patience=0", "method.fusion=dwatt", "method.lambda_lr=0.1"), "scalar_mix only"),
    (("task=wnut16", "method.fusion=sum"), "method.fusion='sum' is not one of"),
])
def test_bad_configs_are_refused_before_any_work(overrides, match, smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=layer_fusion", "on_error=record", *overrides)
    with pytest.raises(ConfigError, match=match):
        check(cfg)
    rec = execute(cfg, tmp_path / "out")
    assert rec["status"] == "failed" and "train/steps" not in rec.get("metrics", {})


@pytest.mark.assets
def test_a_packaged_decoder_loads_with_its_tied_input_embedding():
    """The decoder stack of smollm2 keeps the embedding its checkpoint stores only as lm_head (a bare AutoModel load
    leaves it random: the bug this guards against)."""
    from experiments.models import load_causal_lm
    model = compose("model=smollm2-135m").model
    _, dec = load_encoder(model)
    _, lm = load_causal_lm(model)
    assert torch.equal(dec.embed_tokens.weight, lm.lm_head.weight)


# ---- P-32's GLUE grids: the paper's metric per task, MNLI matched and mismatched from one model --------------------

def test_p32_glue_chooses_each_task_on_its_paper_metric():
    for task, want in (("mrpc", "eval/f1_binary"), ("cola", "eval/mcc"), ("qqp", "eval/f1_binary"),
                       ("rte", "eval/accuracy"), ("mnli", "eval/accuracy")):
        cfg, params = compose_experiment("layer_fusion/p32_glue", f"task={task}")
        assert cfg.task.objective == want, task
        check(cfg)
    assert "mnli-mismatched" not in params["task"]  # MNLI-mm is the mnli model's second eval split
    cfg = compose("method=layer_fusion", "method.protocol=p32", "task=mrpc", "model=tiny-llama",
                  "task.dev_from_train=0.1")
    assert cfg.task.objective == "eval/accuracy"  # conf/task/mrpc.yaml, PEMA's choice, is left alone
    with pytest.raises(ConfigError, match=r"task.objective=eval/accuracy: P-32 reports task=mrpc by eval/f1_binary"):
        check(cfg)


@pytest.mark.parametrize("regime", ["fe", "ft"])
def test_mnli_matched_and_mismatched_are_scored_on_one_model(regime, hub, smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "task=mnli", "data.source=hub", "model=tiny-llama", "method.protocol=p32",
                 f"method.regime={regime}", "method.fusion=scalar_mix", "task.dev_from_train=0.5")
    m = rec["metrics"]
    assert {"eval/accuracy", "eval_mismatched/accuracy", "eval_mismatched/majority_accuracy"} <= set(m)
    assert rec["n_samples"]["eval_mismatched_examples"] == 4 and rec["n_samples"]["eval_examples"] == 4
    assert len(rec["per_example"]["eval"]["pred"]) == 4  # the matched split's, which the claims bootstrap over
