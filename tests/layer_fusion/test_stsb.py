"""STS-B through method=layer_fusion (P-32 Table 2's STS-B row, Fig. 3): a tiny random model trains on a hub-shaped
copy of glue/stsb (sentence1, sentence2, a float label, idx; served in place of `datasets.load_dataset`) as a
regression, chooses its checkpoint on dev Spearman and records eval Pearson and Spearman; the Fig. 3 grid trains on
nested 20-100% subsets of the train split."""
import json
import math
from pathlib import Path

import datasets
import pytest
from omegaconf import OmegaConf

from experiments.run import execute
from tests.helpers.grids import compose_experiment, grid_jobs

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "layer_fusion" / "nyu-mll--glue--stsb.json"
STSB_TRAIN = 5749  # P-32 Table 5 (and the hub's train split)


@pytest.fixture
def stsb_hub(monkeypatch):
    doc = json.loads(FIXTURE.read_text())
    features = datasets.Features.from_dict(doc["features"])
    splits = datasets.DatasetDict({s: datasets.Dataset.from_list(rows, features=features)
                                   for s, rows in doc["splits"].items()})

    def load_dataset(path, name=None, split=None, **kwargs):
        assert (path, name) == ("nyu-mll/glue", "stsb"), f"only glue/stsb is served here, not {path} ({name})"
        return splits if split is None else splits[split]
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return splits


@pytest.mark.parametrize("model,regime,fusion,head", [
    ("tiny-bert", "ft", "scalar_mix", "fresh pooler (random model, no checkpoint)"),
    ("tiny-llama", "fe", "last", "score: bias-free linear on the last real token"),
])
def test_a_tiny_model_trains_stsb_as_a_regression(model, regime, fusion, head, stsb_hub, smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=layer_fusion", "task=stsb", "data.source=hub", f"model={model}", "method.protocol=p32",
                    f"method.regime={regime}", f"method.fusion={fusion}", "task.dev_from_train=0.25",
                    "train.max_steps=4", "train.eval_every=2", f"store.dir={tmp_path / 'store'}")
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    for key in ("eval/spearman", "eval/pearson", "dev/spearman"):
        assert key in m and math.isfinite(m[key]) and -1 <= m[key] <= 1, key
    assert "eval/accuracy" not in m and not any("majority" in k for k in m)
    # the checkpoint is the best dev Spearman of the run
    assert m["dev/spearman"] == pytest.approx(max(c["dev/spearman"] for c in rec["extra"]["curve"]))
    assert rec["extra"]["head"] == head
    assert rec["n_samples"]["train_examples"] == 24 and rec["n_samples"]["dev_examples"] == 8


def test_p32_glue_includes_stsb():
    _, params = compose_experiment("layer_fusion/p32_glue")
    assert "stsb" in params["task"].split(",")


def test_the_fraction_grid_trains_on_20_to_100_percent_of_stsb_train():
    base, params = compose_experiment("layer_fusion/p32_stsb_fraction")
    assert base.task.name == "stsb" and base.task.hf.path == "nyu-mll/glue" and base.model.name == "llama-2-7b"
    assert params["task"] == "stsb" and params["method.fusion"] == "last,scalar_mix"
    # the dev carve comes first (datasets' train_test_split: ceil of the fraction), then the cap on what is left
    left = STSB_TRAIN - math.ceil(base.task.dev_from_train * STSB_TRAIN)
    limits = [int(v) for v in params["data.limit_train"].split(",")]
    assert limits == [round(f * left) for f in (0.2, 0.4, 0.6, 0.8, 1.0)] and limits[-1] == left  # 100%: all of it
    assert len(grid_jobs(params)) == 5 * 2 * 3
    assert OmegaConf.select(base, "data.subset_seed") == 0  # one shuffle for every point: nested subsets
