"""layer_fusion.config.check: the refusals of all three layer_fusion methods, torch-free, on composed configs, raised as
ConfigError, and the one the registry runs for each of them."""
import subprocess
import sys

import pytest

from experiments import REPO, registry
from experiments.config import ConfigError
from layer_fusion.config import check
from experiments.config import compose

FEWSHOT = ("task=wnut16", "train.patience=0")  # a few-shot run trains its whole budget
GOOD = {"layer_fusion": FEWSHOT, "layer_fusion_bench": FEWSHOT, "layer_fusion_params": ()}


def test_the_checks_import_no_torch():
    code = "import sys, layer_fusion.config; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("method", sorted(GOOD))
def test_a_composed_config_of_each_method_passes_its_checks(method):
    cfg = compose(f"method={method}", *GOOD[method])
    check(cfg)
    registry.check(cfg)


@pytest.mark.parametrize("overrides,match", [
    (("method=layer_fusion", *FEWSHOT, "method.fusion=sum"), "method.fusion='sum' is not one of"),
    (("method=layer_fusion", "task=rt-polarity"), "fewshot needs a ner task"),
    (("method=layer_fusion", "task=wnut16"), "train.patience=2"),
    (("method=layer_fusion_bench", *FEWSHOT, "method.fusion=sum"), "method.fusion='sum'"),  # the run's own
    (("method=layer_fusion_bench", *FEWSHOT, "method.regime=ft"), "times the few-shot feature-extraction run"),
    (("method=layer_fusion_bench", "task=rt-polarity", "method.protocol=p32"), "times the few-shot"),
    (("method=layer_fusion_params", "method.models=[]"), "method.models is empty"),
])
def test_refusals_are_config_errors_through_the_registry_too(overrides, match):
    cfg = compose(*overrides)
    with pytest.raises(ConfigError, match=match):
        check(cfg)
    if registry.METHODS[cfg.method.name].check:  # wired: the registry refuses it before the runner does any work
        with pytest.raises(ConfigError, match=match):
            registry.check(cfg)


def test_the_registry_names_this_check():
    methods = {n: m for n, m in registry.METHODS.items() if m.paper == "layer_fusion"}
    assert set(methods) == set(GOOD)
    assert methods["layer_fusion"].check == "layer_fusion.config:check"
    assert {m.check for m in methods.values() if m.check} == {"layer_fusion.config:check"}
