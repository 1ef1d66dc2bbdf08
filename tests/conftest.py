import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach a model hub
os.environ.pop("STRATA_HUB", None)  # nor turn it on from the shell (experiments.hub.online)
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
if os.environ.get("PYTEST_XDIST_WORKER"):  # one process per core (make test): one thread each, runs they start too
    os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or "1"

import pytest
import torch

import experiments.registry  # noqa: F401  (registers the schemas before any compose)
from experiments import REPO
from experiments.assets import cache_dir
from experiments.config import compose
from tests.helpers.asset_cache import assets_ready

# one thread per xdist worker: two workers of two threads each on the 2-core reference machine run far slower
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 2) if os.environ.get("PYTEST_XDIST_WORKER") else 2)


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


_SMOKE: dict = {}


@pytest.fixture
def smoke_cfg(tmp_path, monkeypatch):
    """Compose a debug=smoke config whose outputs all land in tmp_path. The working tree counts as clean, so
    publish=true works while a developer has uncommitted changes (tests/test_run.py tests the refusal)."""
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)

    def make(*overrides: str):
        if overrides not in _SMOKE:  # tests compose the same few configs many times; each gets its own copy
            _SMOKE[overrides] = compose("debug=smoke", *overrides)
        cfg = copy.deepcopy(_SMOKE[overrides])
        cfg.results_dir = str(tmp_path / "results")
        return cfg
    return make


@pytest.fixture
def hub(monkeypatch):
    """Serve tests/fixtures/hub (each a tiny copy of a hub dataset's layout) in place of `datasets.load_dataset`."""
    import datasets

    from tests.helpers import hub_data
    monkeypatch.setattr(datasets, "load_dataset", hub_data.load_dataset)


@pytest.fixture
def tiny_assets(tmp_path, monkeypatch):
    """A temporary STRATA_CACHE with assets as `make assets` leaves them (files + MANIFEST.json), rebuilt in place at
    will: `model(seed)` writes models/tiny-offline (tiny-bert's architecture, weights from `seed`, the byte tokenizer)
    and `data(n)` data/tiny-data (the rt-polarity fixture's first n train rows and its eval rows); each returns the
    overrides that run on it."""
    import json
    from types import SimpleNamespace

    from transformers import BertConfig, BertModel

    from experiments.assets import write_manifest
    from experiments.models import byte_tokenizer
    cache = tmp_path / "cache"
    monkeypatch.setenv("STRATA_CACHE", str(cache))

    def model(seed: int) -> tuple[str, ...]:
        d, tok = cache / "models" / "tiny-offline", byte_tokenizer()
        torch.manual_seed(seed)
        cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                         intermediate_size=64, pad_token_id=tok.pad_token_id)
        BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
        tok.save_pretrained(d)
        write_manifest(d)
        return "model.source=offline", "model.offline=tiny-offline"

    def data(n: int) -> tuple[str, ...]:
        d = cache / "data" / "tiny-data"
        d.mkdir(parents=True, exist_ok=True)
        rows = [json.loads(line) for line in (REPO / "tests/fixtures/rt-polarity.jsonl").read_text().splitlines()]
        for split, keep in (("train", n), ("eval", None)):
            lines = [json.dumps(r) for r in rows if r["split"] == split][:keep]
            (d / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
        write_manifest(d)
        return "data.source=offline", "task.offline=tiny-data"
    return SimpleNamespace(cache=cache, model=model, data=data)


def pytest_ignore_collect(collection_path, config):
    """A mark expression that deselects the dry run (its jobs are all `slow` and `dryrun`, e.g. `make test-unit`)
    skips importing it: each worker then starts seconds sooner."""
    from _pytest.mark.expression import Expression
    expr = config.option.markexpr
    if collection_path.name == "dryrun" and collection_path.is_dir() and expr:
        return not Expression.compile(expr).evaluate(lambda mark: mark in ("slow", "dryrun"))
    return None
