"""CoNLL-2012 at paper scale without `make assets`: build_conll2012 converts the hub's copy (served from a hub-shaped
fixture) or installs a local copy ($STRATA_CONLL2012) into data/conll2012; a run that needs it before then, or a
source no build has saved, is refused before any work with the fix; every source a reverse_probing grid names can be
loaded or is saved by a build the tier runs first."""
import json
import re

import datasets

import pytest
import yaml
from omegaconf import OmegaConf

from experiments import data, registry
from experiments.config import ConfigError
from experiments.coref import read_jsonlines
from experiments.run import execute
from reverse_probing import conll2012, sources, supplied, tacred
from scripts import tier
from experiments.config import CONF, compose

FIXTURE = CONF.parent / "tests" / "fixtures" / "hub" / "ontonotes--conll2012_ontonotesv5--english_v4.json"


@pytest.fixture
def hub(monkeypatch):
    """The hub's english_v4 as `datasets.load_dataset` returns it: a few documents typed by the dataset's features
    (the fixture's, which equal conf/hub_manifest.yaml's)."""
    doc = json.loads(FIXTURE.read_text())
    features = datasets.Features.from_dict(doc["features"])
    splits = {s: datasets.Dataset.from_list(rows, features=features) for s, rows in doc["splits"].items()}
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, split=None, **k: splits[split] if split else splits)

# the fixture's first document, part 0, as word-level documents should read it (known clusters: John/He/his,
# Mary/her, and "his new job", which nests "his")
PART0 = {"doc_key": "bc/cnn/00/cnn_0001_0",
         "sentences": [["John", "met", "Mary", "in", "Paris", "."],
                       ["He", "told", "her", "about", "his", "new", "job", "."]],
         "speakers": [["Speaker_A"] * 6, ["Speaker_B"] * 8],
         "clusters": [[[0, 0], [6, 6], [10, 10]], [[2, 2], [8, 8]], [[10, 12]]]}
PART1 = {"doc_key": "bc/cnn/00/cnn_0001_1", "sentences": [["The", "company", "hired", "him", "."], ["It", "grew", "."]],
         "speakers": [["-"] * 5, ["-"] * 3], "clusters": [[[3, 3]], [[0, 1], [5, 5]]]}  # cluster ids are per part
# the same part as coref-hoi's preprocess.py writes it: one segment of sub-tokens ("Paris" in two pieces), [CLS] and
# [SEP] around it, clusters over sub-tokens
COREF_HOI = {"doc_key": "bc/cnn/00/cnn_0001_0",
             "sentences": [["[CLS]", "John", "met", "Mary", "in", "Pa", "##ris", ".", "He", "told", "her", "about",
                            "his", "new", "job", ".", "[SEP]"]],
             "speakers": [["[SPL]"] + ["Speaker_A"] * 7 + ["Speaker_B"] * 8 + ["[SPL]"]],
             "subtoken_map": [0, 0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 13],
             "sentence_map": [0] * 8 + [1] * 9,
             "clusters": [[[1, 1], [8, 8], [12, 12]], [[3, 3], [10, 10]], [[12, 14]]]}


def as_sets(doc):
    return doc["sentences"], doc.get("speakers"), {frozenset(map(tuple, c)) for c in doc["clusters"]}


def task():
    return compose("task=conll2012").task


def test_a_hub_document_becomes_one_word_level_document_per_part(hub):
    row = next(iter(data.load_rows(task(), OmegaConf.create({"source": "hub"}), "train")))
    docs, dropped = conll2012.hub_documents(row)
    assert docs == [PART0, PART1] and dropped == 0


def test_the_hub_conversion_equals_the_coref_hoi_path_on_the_same_part(tmp_path):
    (tmp_path / "dev.jsonlines").write_text(json.dumps(COREF_HOI) + "\n")
    from_hoi = read_jsonlines(tmp_path / "dev.jsonlines")[0]
    row = json.loads(FIXTURE.read_text())["splits"]["test"][0]
    assert as_sets(conll2012.hub_documents(row)[0][0]) == as_sets(from_hoi)


def test_the_fixture_has_the_manifests_features():
    manifest = yaml.safe_load((CONF / "hub_manifest.yaml").read_text())["datasets"]["ontonotes/conll2012_ontonotesv5"]
    assert json.loads(FIXTURE.read_text())["features"] == manifest["configs"]["english_v4"]["features"]


def test_a_mention_listed_twice_is_kept_once():
    row = {"document_id": "nw/x", "sentences": [{"part_id": 0, "words": ["a", "b"], "speaker": None,
                                                  "coref_spans": [[1, 0, 0], [2, 0, 0], [2, 1, 1], [1, 0, 0]]}]}
    docs, dropped = conll2012.hub_documents(row)
    assert docs[0]["clusters"] == [[[0, 0]], [[1, 1]]] and dropped == 2


def test_build_conll2012_installs_the_hub_copy(hub, smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(conll2012.ENV, raising=False)
    cfg = smoke_cfg("experiment=reverse_probing/build_conll2012", "hardware=cpu", "data.source=null")
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    assert (m["data/train_documents"], m["data/dev_documents"], m["data/eval_documents"]) == (3, 1, 2)
    assert m["data/eval_clusters"] == 5 and m["data/eval_mentions"] == 9 and m["data/dropped_mentions"] == 0
    installed = read_jsonlines(tmp_path / "cache" / "data" / "conll2012" / "eval.jsonl")
    assert installed == [PART0, PART1]
    supplied.check_task(task(), compose("task=conll2012").data)  # now usable: no refusal
    manifest = json.loads((tmp_path / "cache" / "data" / "conll2012" / "MANIFEST.json").read_text())
    assert manifest["source"]["hub"]["path"] == "ontonotes/conll2012_ontonotesv5"


def test_a_local_coref_hoi_copy_is_installed_from_the_directory_the_env_names(tmp_path, monkeypatch):
    local = tmp_path / "coref-hoi"
    local.mkdir()
    for stem in ("train", "dev", "test"):
        (local / f"{stem}.english.384.bert-base-cased.jsonlines").write_text(json.dumps(COREF_HOI) + "\n")
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(conll2012.ENV, str(local))
    metrics, where = conll2012.build(task(), compose("task=conll2012").data)
    assert metrics["data/eval_documents"] == 1 and "dropped_mentions" not in json.dumps(metrics)
    installed = read_jsonlines(tmp_path / "cache" / "data" / "conll2012" / "eval.jsonl")[0]
    assert as_sets(installed) == as_sets(PART0)
    monkeypatch.setenv(conll2012.ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=f"{conll2012.ENV}=.*nowhere: not a directory"):
        conll2012.build(task(), compose("task=conll2012").data)
    (local / "test.english.384.bert-base-cased.jsonlines").unlink()
    monkeypatch.setenv(conll2012.ENV, str(local))
    with pytest.raises(ConfigError, match=f"{conll2012.ENV}=.*: no eval split there"):
        conll2012.build(task(), compose("task=conll2012").data)


def test_a_probe_on_conll2012_without_its_data_names_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "empty"))
    cfg = compose("experiment=reverse_probing/table1", "method.sources=[bert-base-cased]")
    with pytest.raises(ConfigError) as e:
        registry.resolve("reverse_probing")(cfg, None)  # refused before anything reads the run's context
    msg = str(e.value)
    assert "task=conll2012: task.offline=conll2012" in msg and "make assets` does not build it" in msg
    assert "experiment=reverse_probing/build_conll2012" in msg and "STRATA_CONLL2012=" in msg and "STRATA_HUB=1" in msg


def test_a_built_source_that_was_never_built_names_its_build(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "empty"))
    cfg = compose("experiment=reverse_probing/table1", "method.sources=[bert-base-cased-coref]")
    with pytest.raises(ConfigError, match=r"model bert-base-cased-coref .* run python -m experiments.run "
                                          r"experiment=reverse_probing/build_coref first"):
        registry.resolve("reverse_probing")(cfg, None)


def test_the_re_build_fails_up_front_naming_how_to_supply_tacred(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "empty"))
    cfg = compose("experiment=reverse_probing/build_re")
    monkeypatch.setattr(sources, "finetune", lambda *a: pytest.fail("the build started without its data"))
    with pytest.raises(ConfigError, match=r"task=tacred: task.offline=tacred .* LDC2018T24 .* "
                                          r"python -m reverse_probing.tacred"):
        sources.run(cfg, None)


def test_tacred_rows_mark_the_subject_and_object(tmp_path, monkeypatch):
    ex = {"id": "x", "token": ["Bill", "Gates", "founded", "Microsoft", "."], "subj_start": 0, "subj_end": 1,
          "obj_start": 3, "obj_end": 3, "relation": "org:founded_by"}
    assert tacred.marked(ex) == "[E1] Bill Gates [/E1] founded [E2] Microsoft [/E2] ."
    assert tacred.marked({**ex, "subj_start": 3, "subj_end": 3, "obj_start": 0, "obj_end": 0}) == \
        "[E2] Bill [/E2] Gates founded [E1] Microsoft [/E1] ."
    assert tacred.marked({**ex, "obj_start": 2, "obj_end": 2}) == "[E1] Bill Gates [/E1] [E2] founded [/E2] Microsoft ."
    src = tmp_path / "json"
    src.mkdir()
    for name in ("train.json", "dev.json", "test.json"):
        (src / name).write_text(json.dumps([ex]))
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    out = tacred.convert(src)
    row = json.loads((out / "eval.jsonl").read_text())
    assert tacred.labels()[row["label"]] == "org:founded_by" and len(tacred.labels()) == 42
    supplied.check_task(compose("task=tacred").task, compose("task=tacred").data)  # now usable: no refusal


# ---- every source a grid names loads, or a build the GPU tier runs first saves it -----------------------------
def grid_sources(name: str) -> set[str]:
    """The model names an experiment file (and the files it inherits) gives method.sources, method.reference or
    `model=`, in its own keys or its sweep."""
    text = (CONF / "experiment" / "reverse_probing" / f"{name}.yaml").read_text()
    node = OmegaConf.load(CONF / "experiment" / "reverse_probing" / f"{name}.yaml")
    found: set[str] = set()
    for entry in node.get("defaults", []):
        if isinstance(entry, str) and entry.startswith("/experiment/reverse_probing/"):
            found |= grid_sources(entry.rsplit("/", 1)[1])
        elif not isinstance(entry, str) and "override /model" in entry:
            found.add(entry["override /model"])
    method = node.get("method") or {}
    found |= set(method.get("sources") or []) | ({method.reference} if method.get("reference") else set())
    for key, value in (OmegaConf.select(node, "hydra.sweeper.params") or {}).items():
        if key in ("method.sources", "model", "method.reference"):
            found |= set(re.findall(r"[\w.-]+", str(value)))
    assert text  # a file that names nothing is still read
    return found


@pytest.mark.parametrize("hardware", ["gpu", "cpu"])
def test_every_source_a_tier_grid_names_loads_or_is_built_first(hardware):
    saved = supplied.builders()
    order = tier.experiments("reverse_probing", hardware)
    if hardware == "gpu":
        assert order[0] == "build_conll2012"  # before everything that reads CoNLL-2012, build_coref included
    seen = set()
    for position, name in enumerate(order):
        seen |= grid_sources(name)
        for model_name in sorted(grid_sources(name)):
            model = OmegaConf.load(CONF / "model" / f"{model_name}.yaml")
            if model.get("source") == "hub":
                assert model.get("hf_id"), f"{name}: model {model_name} is source: hub with no hf_id"
                continue
            if model.get("source") != "offline" or supplied.recipe(f"models/{model.offline}"):
                continue  # random weights from a config, or packaged by `make assets`
            builds = [b.split("/")[1] for b in saved.get(f"models/{model.offline}", [])]
            earlier = [b for b in builds if b in order[:position]]
            assert earlier, f"{name} (tier position {position}) reads {model_name}, saved by {builds or 'nothing'}, " \
                            f"none of which the {hardware} tier runs before it: {order}"
    assert {"minilm-l6-coref"} | ({"bert-base-cased-re", "bert-base-cased-coref", "minilm-l6-ner"}
                                  if hardware == "gpu" else set()) <= seen
