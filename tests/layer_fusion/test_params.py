"""DWAtt Table 2 from configs alone: the paper's counts recomputed exactly (roberta-large, roberta-base, the offline
encoders), P-32's "L parameters", counts on the meta device equal to counts of real modules, Base+n on the
architecture experiments.models.architecture reads, and method=layer_fusion_params through the runner."""
import pytest
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModel

from experiments.config import ConfigError, ModelConfig, load_group
from experiments.run import execute
from layer_fusion.fusion import DepthFusion, ExtraLayers
from layer_fusion.params import count, rows, shape_only, table


def model(name):
    return load_group("model", name, ModelConfig, "test")


def by_name(name):
    return {r["name"]: r["new_params"] for r in rows(model(name))}


@pytest.mark.parametrize("name,expected", [
    # the paper's 26.38M / 25.18M / 25.19M (DWAtt Table 2), recomputed exactly
    ("roberta-large", {"DWAtt": 26_353_152, "Concat": 25_190_400, "Base+2": 25_192_448}),
    ("xlm-roberta-large", {"DWAtt": 26_353_152, "Concat": 25_190_400, "Base+2": 25_192_448}),
    ("roberta-base", {"Base+1": 7_087_872, "Concat": 7_087_104, "DWAtt": 7_730_304}),
])
def test_paper_scale_counts_equal_the_recomputed_ones(name, expected):
    got = by_name(name)
    assert {k: got[k] for k in expected} == expected
    assert got["Base"] == got["Average"] == 0


# the offline encoders' config.json fields (BERT, 12 heads, FFN 1536): no asset needed to check the arithmetic
OFFLINE = {"minilm-l6": (6, {"dwatt": 1_053_120, "concat": 887_040, "deeper": 1_774_464}),
           "e5-small": (12, {"dwatt": 1_948_224, "concat": 1_774_080, "deeper": 1_774_464})}


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_offline_encoder_counts_equal_their_configs_arithmetic(name):
    L, expected = OFFLINE[name]
    arch = AutoConfig.for_model("bert", hidden_size=384, num_hidden_layers=L, num_attention_heads=12,
                                intermediate_size=1536)
    shape = shape_only(model(name))  # depth and width from conf/model, as the table reads them
    assert (shape.num_hidden_layers, shape.hidden_size) == (L, 384)
    assert {f: count(arch if f == "deeper" else shape, f) for f in expected} == expected


@pytest.mark.assets
def test_offline_encoder_table_from_the_assets_config():
    got = {(r["model"], r["fusion"]): r["new_params"] for r in table(sorted(OFFLINE)) if r["extra_layers"] in (None, 1)}
    assert got == {(m, f): n for m, (_, e) in OFFLINE.items() for f, n in e.items()} | \
        {(m, f): 0 for m in OFFLINE for f in ("last", "mean")} | {(m, "scalar_mix"): L for m, (L, _) in OFFLINE.items()}


@pytest.mark.parametrize("name,L", [("bert-base-cased", 12), ("llama-2-7b", 32), ("llama-2-13b", 40),
                                    ("smollm2-135m", 30), ("gemma3-270m", 18)])
def test_scalar_mix_adds_one_parameter_per_block(name, L):
    assert by_name(name)["scalar mix (P-32)"] == L  # P-32: "32 parameters" for Llama-2-7B


def test_decoders_get_no_deeper_baseline_and_need_no_architecture():
    got = rows(model("llama-2-7b"))  # hub model without from_config: depth and width suffice
    assert {r["fusion"] for r in got} == {"last", "mean", "scalar_mix", "concat", "dwatt"}


def test_closed_forms_sit_beside_the_exact_counts():
    got = {r["name"]: r for r in rows(model("roberta-large"))}
    L, d = 24, 1024
    assert got["Concat"]["formula"] == L * d * d and got["Concat"]["new_params"] == L * d * d + L * d  # + L biases
    assert got["DWAtt"]["formula"] == L * d * d + d * d + L * d and got["DWAtt"]["formula_expr"] == "Ld² + d² + Ld"
    assert got["Base+2"]["formula"] == 12 * 2 * d * d and got["Base+2"]["default"] and not got["Base+1"]["default"]
    assert got["scalar mix (P-32)"]["formula"] == L


def test_meta_counts_equal_real_modules():
    """Counting on the meta device is counting the modules the method trains (k_pos, a buffer, is not counted)."""
    cfg = AutoConfig.for_model("bert", vocab_size=100, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                               intermediate_size=64)
    backbone = AutoModel.from_config(cfg)
    real = {f: sum(p.numel() for p in DepthFusion(f, 4, 32).parameters())
            for f in ("last", "mean", "scalar_mix", "concat", "dwatt")}
    real["deeper"] = sum(p.numel() for p in ExtraLayers(backbone, 2).parameters())
    assert {f: count(cfg, f, 2 if f == "deeper" else None) for f in real} == real
    assert real["scalar_mix"] == 4 and real["concat"] == 4 * (32 * 32 + 32)


def test_bad_inputs_name_the_value_and_the_fix(monkeypatch):
    cfg = AutoConfig.for_model("bert", hidden_size=32, num_hidden_layers=2, num_attention_heads=2)
    with pytest.raises(ValueError, match="'lstm'"):
        count(cfg, "lstm")
    # a hub encoder without its config.json fields: its Base+n needs the hub's config.json, refused offline (the
    # decoders' rows above need none)
    monkeypatch.setattr("experiments.config.in_hf_cache", lambda *a, **k: False)
    bare = OmegaConf.merge(model("roberta-large"), {"from_config": None})
    with pytest.raises(ConfigError, match="STRATA_HUB=1.*model=roberta-large loads FacebookAI/roberta-large"):
        rows(bare)
    wrong = OmegaConf.merge(model("roberta-base"), {"num_layers": 24})
    with pytest.raises(ValueError, match="num_layers=24.*12 x 768"):
        rows(wrong)
    with pytest.raises(ValueError, match="method.models='roberta-huge'"):
        table(["roberta-base", "roberta-huge"])


def test_run_records_the_table(smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=layer_fusion_params", "method.models=[roberta-large,roberta-base,llama-2-7b]")
    rec = execute(cfg, tmp_path / "out")
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    assert (m["params/roberta-large/dwatt"], m["params/roberta-large/concat"], m["params/roberta-large/deeper"]) == \
        (26_353_152, 25_190_400, 25_192_448)
    assert m["params/roberta-large/deeper_1"] == 12_596_224 and m["params/roberta-base/deeper"] == 7_087_872
    assert m["params/llama-2-7b/scalar_mix"] == 32 and "params/llama-2-7b/deeper" not in m
    rows_ = rec["extra"]["params"]
    assert {"model", "hf_id", "num_layers", "hidden_size", "fusion", "extra_layers", "new_params", "formula"} <= \
        set(rows_[0])
    assert len(rows_) == 7 + 7 + 5
    assert all(rec["higher_is_better"][k] is None for k in m)  # counts: no better side


def test_run_refuses_an_empty_model_list(smoke_cfg, tmp_path):
    with pytest.raises(ConfigError, match="method.models is empty"):
        execute(smoke_cfg("method=layer_fusion_params", "method.models=[]"), tmp_path / "out")
