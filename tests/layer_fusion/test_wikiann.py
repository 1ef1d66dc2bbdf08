"""WikiANN English (DWAtt Figs. 7-9): the task loads from a copy of the hub dataset's layout (columns, ClassLabel
names, split names), its experiments compose and pass the method's checks, and a few-shot run trains on it."""
import pytest

from experiments import data
from experiments.run import execute
from layer_fusion.config import check
from layer_fusion.protocols import entity_types
from experiments.config import compose
from tests.helpers.hub_data import load_fixture
from tests.helpers.grids import compose_experiment


def test_wikiann_en_loads_from_its_hub_shaped_fixture(hub):
    _, hub_splits = load_fixture("unimelb-nlp/wikiann", "en")
    assert set(hub_splits) == {"train", "validation", "test"}
    assert set(hub_splits["train"].column_names) == {"tokens", "ner_tags", "langs", "spans"}
    cfg = compose("task=wikiann-en")
    ds = data.load_splits(cfg.task, cfg.data)
    assert {s: len(v) for s, v in ds.items()} == {"train": 6, "dev": 3, "eval": 3}  # dev = validation, eval = test
    assert ds["train"].features["ner_tags"].feature.names == list(cfg.task.label_names)
    assert entity_types(cfg.task.label_names) == 3  # C in N·C: PER, ORG, LOC


@pytest.mark.parametrize("exp,model,shots", [("layer_fusion/wikiann_en_grid", "roberta-large", "8,16,32,64,128"),
                                             ("layer_fusion/wikiann_lang", "xlm-roberta-large", "100")])
def test_wikiann_experiments_compose_and_pass_the_checks(exp, model, shots):
    cfg, params = compose_experiment(exp)
    assert (cfg.task.name, cfg.model.name, cfg.task.hf.path, cfg.task.hf.name) == \
        ("wikiann-en", model, "unimelb-nlp/wikiann", "en")
    assert dict(cfg.task.splits) == {"train": "train", "dev": "validation", "eval": "test"}
    assert params["method.shots"] == shots
    check(cfg)


def test_a_few_shot_run_trains_on_the_wikiann_fixture(hub, smoke_cfg, tmp_path):
    cfg = smoke_cfg("method=layer_fusion", "task=wikiann-en", "data.source=hub", "method.fusion=concat")
    rec = execute(cfg, tmp_path / "out")
    assert rec["status"] == "ok", rec.get("error")
    assert len(rec["extra"]["sample"]) == 3 and {"dev/entity_f1", "eval/entity_f1"} <= set(rec["metrics"])
