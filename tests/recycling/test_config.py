"""Embedding Recycling's refusals (recycling.config.check), for both of its methods, before any work."""
import pytest

from experiments import registry
from experiments.config import ConfigError
from experiments.run import execute
from recycling.config import BENCHMARKS, VARIANTS, check


@pytest.mark.parametrize("method, variants", [("recycling", VARIANTS), ("recycling_bench", BENCHMARKS)])
def test_each_variant_passes(smoke_cfg, method, variants):
    for v in variants:
        check(smoke_cfg(f"method={method}", f"method.variant={v}"))


@pytest.mark.parametrize("method, valid", [
    ("recycling", "full, frozen, reduced, half_adapters, full_adapters"),
    ("recycling_bench", "training, inference, storage, cost"),
])
def test_an_unknown_variant_is_refused_naming_the_valid_ones(smoke_cfg, method, valid):
    cfg = smoke_cfg(f"method={method}", "method.variant=half")
    with pytest.raises(ConfigError, match=f"^unknown {method} variant 'half'; valid: {valid}$"):
        check(cfg)
    if registry.METHODS[method].check:  # the registry's Method.check, where it names one, is this function
        with pytest.raises(ConfigError, match="valid: "):
            registry.check(cfg)


def test_a_run_refuses_before_building_its_model(smoke_cfg, tmp_path, monkeypatch):
    def never(*_, **__):
        raise AssertionError("the model was built")
    monkeypatch.setattr("experiments.recipe.build", never)
    monkeypatch.setattr("recycling.bench.build", never)
    for method in ("recycling", "recycling_bench"):
        cfg = smoke_cfg(f"method={method}", "method.variant=half", "on_error=record", f"store.dir={tmp_path}")
        rec = execute(cfg, tmp_path / method)
        assert rec["status"] == "failed" and f"unknown {method} variant 'half'" in rec["error"]
        assert "the model was built" not in rec["error"]
