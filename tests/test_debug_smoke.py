"""`debug=smoke method=<m>` for every registered method: it runs on the tiny models and the committed fixtures, with no
asset cache, or it refuses at once and names what to add. What a method needs beyond debug/smoke.yaml comes from
conf/debug/method/smoke_<m>.yaml (the paper defaults stay as they are)."""
import pytest

from experiments import registry
from experiments.config import compose
from experiments.run import execute

# methods the smoke defaults (tiny-bert, rt-polarity) cannot serve: the refusal the plain command gives, and the
# overrides that make it run (a causal LM, a task of the method's type, the name of the encoder a build saves)
NEEDS = {
    "intrinsic_dim": ("this method needs a causal LM", ("model=tiny-llama",)),
    "intrinsic_dim_bench": ("this method needs a causal LM", ("model=tiny-llama",)),
    "layer_fusion": ("needs a ner task", ("task=wnut16",)),
    "layer_fusion_bench": ("needs a ner task", ("task=wnut16",)),
    "reverse_probing": ("use task=winogrande-coref", ("task=winogrande-coref",)),
    "reverse_probing_bench": ("use task=winogrande-coref", ("task=winogrande-coref",)),
    "reverse_probing_cossim": ("use task=winogrande-coref", ("task=winogrande-coref",)),
    "reverse_probing_source": ("name the new encoder", ("method.save_as=tiny-bert-smoke",)),
}


def test_every_refusal_listed_is_a_registered_method():
    assert set(NEEDS) <= set(registry.METHODS)


def test_method_smoke_settings_apply_under_debug_smoke_only():
    assert compose("debug=smoke", "method=eat").method.exit_layer == 3  # within tiny-bert's 4 layers
    assert compose("method=eat").method.exit_layer == 4  # the paper's default is untouched
    assert compose("debug=smoke", "method=eat", "method.exit_layer=2").method.exit_layer == 2  # the command line wins
    assert compose("debug=smoke", "method=layer_fusion").train.patience == 0
    assert compose("debug=smoke").results_dir != "results"  # a toy record never lands in the committed results/


@pytest.mark.slow  # 19 methods through the runner, ~2 min on 2 cores
@pytest.mark.parametrize("method", sorted(registry.METHODS))
def test_debug_smoke_runs_every_method_or_says_what_to_add(method, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))  # no asset needed; method caches stay in tmp_path
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)
    common = ("debug=smoke", f"method={method}", f"results_dir={tmp_path / 'results'}")
    refusal, extra = NEEDS.get(method, (None, ()))
    if refusal:
        rec = execute(compose(*common, "on_error=record"), tmp_path / "plain")
        assert rec["status"] == "failed" and refusal in rec["error"]
        assert not (tmp_path / "cache").exists() or method.startswith("intrinsic_dim")  # refused before any work
    rec = execute(compose(*common, *extra), tmp_path / "run")
    assert rec["status"] == "ok" and rec["metrics"], rec.get("error")
