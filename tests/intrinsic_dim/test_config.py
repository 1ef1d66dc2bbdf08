"""method=intrinsic_dim's refusals (intrinsic_dim.config.check): each names the key and what is valid, through the
registry's Method.check as well, and a run refuses before it loads its model."""
import pytest

from experiments import registry
from experiments.config import ConfigError
from experiments.run import execute
from intrinsic_dim.config import check, parse_variant, sft_precision
from experiments.config import compose


def _cfg(*overrides):
    return compose("experiment=intrinsic_dim/smoke", *overrides)


@pytest.mark.parametrize("variant", ["icl-0", "icl-2", "icl_unique-2", "sft"])
def test_the_smoke_paradigms_pass(variant):
    check(_cfg(f"method.variant={variant}"))


def test_variant_parses_into_paradigm_and_k():
    assert parse_variant("icl-10") == ("icl", 10) and parse_variant("icl_unique-2") == ("icl_unique", 2)
    assert parse_variant("sft") == ("sft", 0)
    for bad in ("icl5", "icl-", "sft-2", "", None):
        with pytest.raises(ConfigError, match="icl-<k>"):
            parse_variant(bad)


@pytest.mark.parametrize("overrides, message", [
    (("method.variant=fewshot",), "method.variant='fewshot' is not a paradigm"),
    (("method.variant=icl-2", "method.auc_norm=L_plus_1"), "method.auc_norm='L_plus_1'; valid: L, L_minus_1"),
    (("method.variant=icl-2", "method.sft_loss=labels"), "method.sft_loss='labels'; valid: full"),
    (("method.variant=icl-2", "method.store_dtype=bf16"), "method.store_dtype='bf16'; valid: one of fp16, fp32"),
    (("method.variant=sft", "method.sft_precision=fp16"), "method.sft_precision='fp16' gives 'fp16'"),
    (("method.variant=sft", "hardware.precision=fp16"), "method.sft_precision=None gives 'fp16'"),
])
def test_refusals_name_the_key_and_what_is_valid(overrides, message):
    cfg = _cfg(*overrides)
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
        check(cfg)
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
        registry.check(cfg)  # the registry's Method.check is this function


def test_fp16_hardware_is_refused_only_where_sft_trains():
    check(_cfg("method.variant=icl-2", "hardware.precision=fp16"))  # ICL trains nothing: precision is unused
    assert sft_precision(_cfg("method.variant=sft", "hardware.precision=bf16")) == "bf16"
    assert sft_precision(_cfg("method.variant=sft", "hardware.precision=bf16", "method.sft_precision=fp32")) == "fp32"
    assert sft_precision(_cfg("method.variant=sft", "method.sft_precision=hardware")) == "fp32"


def test_a_run_refuses_before_loading_its_model(tmp_path, monkeypatch):
    def never(*_, **__):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr("intrinsic_dim.run.load_model", never)
    rec = execute(_cfg("method.variant=sft", "method.sft_loss=labels", "on_error=record",
                       f"results_dir={tmp_path / 'results'}", f"store.dir={tmp_path / 'store'}"), tmp_path / "run")
    assert rec["status"] == "failed" and "method.sft_loss='labels'" in rec["error"]
    assert "the model was loaded" not in rec["error"]
