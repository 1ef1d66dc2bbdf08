"""conf/hub_manifest.yaml against the configs, offline: every hub id has an entry, no task reads a loading-script repo
(datasets 5 refuses them) without a pinned script-free revision or data files, every split, column and label order a
task names exists on the hub, every config pins the manifest's revision; the loader passes those pins to
datasets.load_dataset; scripts.hub's refresh, run on hub-shaped answers (no network), writes entries and pins configs
that pass the same check; one switch turns the hub on for models and datasets together."""
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import datasets
import httpx
import huggingface_hub.constants
import pytest
import yaml

from experiments import data, hub
from experiments.config import CONF, compose
from scripts import hub as hub_script
from tests.helpers.grids import compose_experiment


def test_every_config_agrees_with_the_manifest():
    problems = hub_script.check()
    assert not problems, "\n".join(problems)


def test_the_manifest_is_in_the_form_a_refresh_writes():
    """A refresh rewrites the whole file: the committed one must read back identically (a clean diff)."""
    assert hub_script.dump(hub_script.load()) == hub_script.MANIFEST.read_text(encoding="utf-8")
    assert hub.manifest() == hub_script.load()


def test_every_entry_says_whether_a_refresh_confirmed_it():
    doc = hub_script.load()
    for kind in ("datasets", "models"):
        for key, entry in doc[kind].items():
            assert isinstance(entry.get("confirmed"), bool), f"{kind} {key}: confirmed must be true or false"
            rev = entry.get("revision")
            assert rev is None or hub_script.SHA.match(rev) or rev == hub_script.PARQUET_REF, \
                f"{kind} {key}: revision {rev!r}"


def _conf(tmp_path: Path, tasks: dict[str, str], models: dict[str, str] = {}) -> Path:
    """A conf/ tree holding only these task and model yamls (and an empty experiment folder)."""
    for group, files in (("task", tasks), ("model", models)):
        (tmp_path / group).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (tmp_path / group / f"{name}.yaml").write_text(text)
    (tmp_path / "experiment").mkdir(exist_ok=True)
    return tmp_path


SCRIPT_DOC = {"datasets": {"org/ner": {
    "revision": hub_script.PARQUET_REF, "format": "script", "gated": False, "licence": None, "confirmed": False,
    "configs": {"ner": {"splits": {"train": 10, "validation": 5},
                        "features": {"tokens": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
                                     "ner_tags": {"feature": {"names": ["O", "B-X"], "_type": "ClassLabel"},
                                                  "_type": "Sequence"}}}}}},
    "models": {}}
NER = ("name: ner\ntype: ner\nsource: hub\nhf: {{path: org/ner, name: null{rev}}}\nsplits: {{train: train, "
       "{splits}}}\ntext_fields: [tokens]\nlabel_field: ner_tags\nlabel_names: [{labels}]\n")


def test_a_script_repo_read_without_a_pinned_revision_is_named_with_the_fix(tmp_path):
    conf = _conf(tmp_path, {"ner": NER.format(rev="", splits="eval: validation", labels="O, B-X")})
    problems = hub_script.check(SCRIPT_DOC, conf)
    assert any("conf/task/ner.yaml: hf.path=org/ner ships a loading script" in p
               and "hf.revision: refs/convert/parquet" in p for p in problems), problems
    pinned = _conf(tmp_path, {"ner": NER.format(rev=", revision: refs/convert/parquet", splits="eval: validation",
                                                labels="O, B-X")})
    assert hub_script.check(SCRIPT_DOC, pinned) == []


def test_a_named_config_of_an_export_is_read_from_its_folder(tmp_path):
    """An export holds each builder config in a folder and has no configs of its own: datasets would merge them."""
    named = NER.format(rev=", revision: refs/convert/parquet", splits="eval: validation", labels="O, B-X")
    named = named.replace("org/ner, name: null", "org/ner, name: ner")
    assert any("hf.name=ner: the parquet export of a script repo has no builder configs" in p
               and "set hf.data_dir: ner" in p for p in hub_script.check(SCRIPT_DOC, _conf(tmp_path, {"ner": named})))
    folder = named.replace("org/ner, name: ner", "org/ner, name: null, data_dir: ner")
    assert hub_script.check(SCRIPT_DOC, _conf(tmp_path, {"ner": folder})) == []


def test_data_files_other_than_the_manifests_are_named(tmp_path):
    doc = {"datasets": {"org/ner": {**SCRIPT_DOC["datasets"]["org/ner"], "revision": None, "builder": "json",
                                    "data_files": {"train": "d/train.json", "validation": "d/valid.json"}}},
           "models": {}}
    files = ", builder: json, data_files: {train: d/train.json, validation: d/dev.json}"
    text = NER.format(rev=files, splits="eval: validation", labels="O, B-X")
    problems = hub_script.check(doc, _conf(tmp_path, {"ner": text}))
    assert problems == ["conf/task/ner.yaml: hf.path=org/ner is read through a packaged builder: set hf.builder: json "
                        "and hf.data_files: {'train': 'd/train.json', 'validation': 'd/valid.json'} (as "
                        "hub_manifest.yaml)"]


def test_an_offline_task_built_from_a_hub_copy_is_pinned_but_keeps_its_own_splits(tmp_path):
    text = NER.format(rev="", splits="eval: eval", labels="O, B-X").replace("source: hub", "source: offline")
    problems = hub_script.check(SCRIPT_DOC, _conf(tmp_path, {"ner": text}))
    assert len(problems) == 2 and all("revision" in p for p in problems), problems  # no split complaint


def test_a_split_column_or_label_order_the_hub_lacks_is_named(tmp_path):
    text = NER.format(rev=", revision: refs/convert/parquet", splits="dev: validation, eval: test",
                      labels="B-X, O").replace("text_fields: [tokens]", "text_fields: [words]")
    problems = "\n".join(hub_script.check(SCRIPT_DOC, _conf(tmp_path, {"ner": text})))
    assert "splits.eval=test is not a split of org/ner (default); it has train, validation" in problems
    assert "column words is not in org/ner" in problems
    assert "label_names ['B-X', 'O'] differ from the hub's ClassLabel order ['O', 'B-X']" in problems


def test_an_id_without_an_entry_is_named(tmp_path):
    conf = _conf(tmp_path, {}, {"m": "name: m\nsource: hub\nhf_id: org/unknown\n"})
    assert hub_script.check({"datasets": {}, "models": {}}, conf) == [
        "model org/unknown (conf/model/m.yaml) has no entry in hub_manifest.yaml: run python -m scripts.hub "
        "--refresh --only org/unknown"]


@pytest.fixture
def calls(monkeypatch):
    """datasets.load_dataset recorded (and answered with an empty split set) instead of reaching the hub."""
    seen = []

    def load_dataset(path, name=None, split=None, **kwargs):
        seen.append({"path": path, "name": name, "split": split, **kwargs})
        return datasets.DatasetDict()
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return seen


def test_the_loader_passes_the_pinned_revision_to_datasets(calls):
    task = compose("task=conll2003").task
    data._hub(task, "train")
    assert calls == [{"path": "eriktks/conll2003", "name": None, "split": "train", "revision": hub_script.PARQUET_REF}]


def test_the_loader_reads_one_folder_of_an_export(calls):
    task = compose("task=conll2003", "task.hf.data_dir=conll2003").task
    data._hub(task, "test")
    assert calls == [{"path": "eriktks/conll2003", "name": None, "split": "test", "revision": hub_script.PARQUET_REF,
                      "data_dir": "conll2003"}]


def test_the_loader_reads_data_files_through_the_packaged_builder(calls):
    task = compose("task=bc5cdr").task
    data._hub(task)
    rev = task.hf.revision or "main"
    assert calls == [{"path": "json", "name": None, "split": None, "data_files": {
        s: f"hf://datasets/tner/bc5cdr@{rev}/dataset/{f}.json"
        for s, f in (("train", "train"), ("validation", "valid"), ("test", "test"))}}]


def test_data_files_without_a_builder_are_refused(calls):
    task = compose("task=bc5cdr", "task.hf.builder=null").task
    with pytest.raises(ValueError, match=r"task bc5cdr: task\.hf\.data_files is set but task\.hf\.builder=None"):
        data._hub(task)
    assert calls == []


LAYER_FUSION = sorted(p.stem for p in (CONF / "experiment" / "layer_fusion").glob("*.yaml"))


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("exp", LAYER_FUSION)
def test_every_layer_fusion_experiment_task_has_a_dev_split(exp):
    """Both protocols choose their checkpoint on dev (DWAtt: the best dev F1) and score eval once; the task yaml the
    experiment composes, and every task its grid sweeps, must name a dev split or carve one from train."""
    cfg, params = compose_experiment(f"layer_fusion/{exp}")
    for name in str(params.get("task", cfg.task.name)).split(","):
        task = compose_experiment(f"layer_fusion/{exp}", f"task={name.strip()}")[0].task  # with the experiment's keys
        assert "dev" in task.splits or task.get("dev_from_train"), \
            f"layer_fusion/{exp}: task {task.name} has no dev split (splits {dict(task.splits)})"


# ---- the refresh, on hub-shaped answers ----------------------------------------------------------------------------

class FakeApi:
    """HfApi.dataset_info / model_info / list_repo_refs as the hub answers them (the fields scripts.hub reads)."""
    def __init__(self):
        self.asked = []

    def dataset_info(self, repo_id, files_metadata=False):
        self.asked.append(("dataset_info", repo_id, files_metadata))
        files = {"org/ner": ["README.md", "ner.py", "data/train.txt"], "org/glue": ["README.md", "sst2/train.parquet"]}
        return SimpleNamespace(id=repo_id, sha=("a" if repo_id == "org/ner" else "b") * 40, gated=False,
                               card_data={"license": "cc-by-4.0"},
                               siblings=[SimpleNamespace(rfilename=f) for f in files[repo_id]])

    def list_repo_refs(self, repo_id, repo_type=None):
        self.asked.append(("list_repo_refs", repo_id, repo_type))
        return SimpleNamespace(converts=[SimpleNamespace(name="parquet", ref=hub_script.PARQUET_REF,
                                                         target_commit="c" * 40)])

    def model_info(self, repo_id, files_metadata=False):
        self.asked.append(("model_info", repo_id, files_metadata))
        return SimpleNamespace(id="distilbert/" + repo_id, sha="d" * 40, gated="manual", card_data={"license": "mit"},
                               siblings=[SimpleNamespace(rfilename=f) for f in
                                         ("config.json", "pytorch_model.bin", "spm.model", "tokenizer_config.json")],
                               safetensors=None)


EXPORT = {"org/ner": {"ner": {"features": SCRIPT_DOC["datasets"]["org/ner"]["configs"]["ner"]["features"],
                              "splits": {"train": {"name": "train", "num_examples": 10},
                                         "validation": {"name": "validation", "num_examples": 5}}}},
          "org/glue": {"sst2": {"features": {"sentence": {"dtype": "string", "_type": "Value"}},
                                "splits": {"train": {"name": "train", "num_examples": 3}}},
                       "cola": {"features": {}, "splits": {}}}}
FILES = {"config.json": {"model_type": "distilbert", "dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072,
                         "vocab_size": 28996, "max_position_embeddings": 512},
         "tokenizer_config.json": {"do_lower_case": False, "tokenizer_class": "DebertaV2Tokenizer"}}


def test_refresh_resolves_every_id_and_pins_the_configs(tmp_path, monkeypatch):
    conf = _conf(tmp_path / "conf", {
        "ner": NER.format(rev="", splits="eval: validation", labels="O, B-X"),
        "sst2": "name: sst2\ntype: cls\nsource: hub\nhf: {path: org/glue, name: sst2}   # kept\n"
                "splits: {train: train}\ntext_fields: [sentence]\nlabel_field: sentence\n"},
        {"m": "name: m\nsource: hub\nhf_id: distilbert-base-cased\nfamily: bert\n"})
    exported = []
    monkeypatch.setattr(hub_script, "_export_infos", lambda path, rev: exported.append((path, rev)) or EXPORT[path])
    monkeypatch.setattr(hub_script, "_download_json", lambda repo, name, rev: FILES.get(name))
    api, out = FakeApi(), tmp_path / "manifest.yaml"
    doc, failed = hub_script.refresh(conf=conf, path=out, api=api, log=lambda line: None)
    assert failed == []
    ner = doc["datasets"]["org/ner"]
    assert (ner["format"], ner["revision"], ner["confirmed"], ner["licence"]) == ("script", "c" * 40, True, "cc-by-4.0")
    assert ner["configs"]["ner"]["splits"] == {"train": 10, "validation": 5}
    assert ner["configs"]["ner"]["features"] == EXPORT["org/ner"]["ner"]["features"]
    glue = doc["datasets"]["org/glue"]
    assert (glue["format"], glue["revision"], list(glue["configs"])) == ("parquet", "b" * 40, ["sst2"])
    assert exported == [("org/glue", "b" * 40), ("org/ner", "c" * 40)]  # a script repo: its export's infos
    m = doc["models"]["distilbert-base-cased"]
    assert m["config"] == {"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12,
                           "intermediate_size": 3072, "vocab_size": 28996, "max_position_embeddings": 512}
    assert (m["gated"], m["redirects_to"], m["tokenizer_class"], m["extras"]) == \
        (True, "distilbert/distilbert-base-cased", "DebertaV2Tokenizer", ["sentencepiece", "protobuf"])
    assert ("model_info", "distilbert-base-cased", True) in api.asked
    assert hub_script.load(out) == doc
    # the configs pin what the manifest says, in place (comments and the rest of the line kept), then check clean
    assert hub_script.check(doc, conf) != []
    assert {p.name for p in hub_script.pin(doc, conf)} == {"ner.yaml", "sst2.yaml", "m.yaml"}
    sst2 = (conf / "task/sst2.yaml").read_text()
    assert "hf: {path: org/glue, name: sst2, revision: " + "b" * 40 + "}   # kept" in sst2
    assert re.search(r"^hf_id: distilbert-base-cased\nrevision: d{40}$", (conf / "model/m.yaml").read_text(), re.M)
    assert hub_script.check(doc, conf) == []
    assert hub_script.pin(doc, conf) == []


def test_add_prefix_space_is_the_tokenizer_config_s_else_the_byte_level_pre_tokenizer_s():
    byte_level = {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}}
    nested = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split"}, byte_level["pre_tokenizer"]]}}
    prefix_space = hub_script.prefix_space
    assert prefix_space({"add_prefix_space": True}, lambda: pytest.fail("tokenizer.json read needlessly")) is True
    assert prefix_space(None, lambda: byte_level) is False and prefix_space({}, lambda: nested) is False
    assert hub_script.prefix_space({}, lambda: {"pre_tokenizer": {"type": "BertPreTokenizer"}}) is None
    assert hub_script.prefix_space(None, lambda: None) is None


def test_a_gated_model_without_a_token_keeps_its_fields_unconfirmed(monkeypatch, capsys):
    from huggingface_hub.errors import GatedRepoError

    def gated(repo, name, rev):
        url = f"https://huggingface.co/{repo}/resolve/{rev}/{name}"
        raise GatedRepoError("401: access to this repo is restricted",
                             response=httpx.Response(401, request=httpx.Request("GET", url)))
    monkeypatch.setattr(hub_script, "_download_json", gated)
    old = {"revision": None, "gated": True, "confirmed": False, "model_type": "llama", "config": {"hidden_size": 4096}}
    entry = hub_script.refresh_model(FakeApi(), "org/llama", old)
    assert entry == {**old, "revision": "d" * 40, "licence": "mit",
                     "files": ["config.json", "pytorch_model.bin", "spm.model", "tokenizer_config.json"]}
    assert "org/llama is gated: its files need HF_TOKEN" in capsys.readouterr().out


def test_a_failed_refresh_keeps_the_old_entry_and_says_so(tmp_path, monkeypatch):
    conf = _conf(tmp_path / "conf", {}, {"m": "name: m\nsource: hub\nhf_id: org/gated\n"})
    out = tmp_path / "manifest.yaml"
    old = {"datasets": {}, "models": {"org/gated": {"revision": None, "confirmed": False}}}
    hub_script.save(old, out)

    class Gated(FakeApi):
        def model_info(self, repo_id, files_metadata=False):
            raise PermissionError("401: gated, log in")
    lines = []
    doc, failed = hub_script.refresh(conf=conf, path=out, api=Gated(), log=lines.append)
    assert failed == ["model org/gated: PermissionError: 401: gated, log in"]
    assert doc["models"]["org/gated"] == {"revision": None, "confirmed": False}
    assert lines == ["scripts.hub: not refreshed, old entry kept: model org/gated: PermissionError: 401: gated, log in"]


# ---- the one switch ------------------------------------------------------------------------------------------------

@pytest.fixture
def env(monkeypatch):
    """A clean environment for the switch; the imported libraries' flags are restored afterwards."""
    for k in ("STRATA_HUB", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", huggingface_hub.constants.HF_HUB_OFFLINE)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", datasets.config.HF_HUB_OFFLINE)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", datasets.config.HF_DATASETS_OFFLINE)
    return monkeypatch


@pytest.mark.parametrize("given, on", [
    ({}, False),
    ({"STRATA_HUB": "1"}, True),
    ({"STRATA_HUB": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, True),
    ({"STRATA_HUB": "0", "HF_HUB_OFFLINE": "0"}, False),
    ({"HF_HUB_OFFLINE": "0"}, True),  # the older spelling turns datasets on too
    ({"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "1"}, True),
    ({"HF_DATASETS_OFFLINE": "0"}, False),
])
def test_one_switch_sets_models_and_datasets_together(env, given, on):
    for k, v in given.items():
        env.setenv(k, v)
    assert hub.online() is on
    flag = "0" if on else "1"
    assert (os.environ["HF_HUB_OFFLINE"], os.environ["HF_DATASETS_OFFLINE"]) == (flag, flag)
    assert huggingface_hub.constants.HF_HUB_OFFLINE is (not on) and datasets.config.HF_HUB_OFFLINE is (not on)
    assert hub.online() is on  # idempotent: a child process inherits a consistent pair


def test_a_switch_value_that_is_neither_on_nor_off_is_refused(env):
    env.setenv("STRATA_HUB", "maybe")
    with pytest.raises(ValueError, match=r"STRATA_HUB='maybe' is neither on nor off: set STRATA_HUB=1"):
        hub.online()
    assert "HF_HUB_OFFLINE" not in os.environ


def test_every_printed_hub_instruction_names_the_one_switch():
    """Instructions that turn the hub on with HF_HUB_OFFLINE=0 alone leave the datasets offline (datasets obeys
    HF_DATASETS_OFFLINE): every doc, comment and message names STRATA_HUB=1 instead."""
    root = CONF.parent
    files = [root / "Makefile", *root.glob("*/README.md"), *(root / "conf").rglob("*.yaml"),
             *(root / "experiments").glob("*.py")]
    stale = [f"{p.relative_to(root)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if "HF_HUB_OFFLINE=0" in line]
    assert not stale, f"HF_HUB_OFFLINE=0 as the instruction (use STRATA_HUB=1): {stale}"


def test_refresh_documents_its_fields():
    text = hub_script.__doc__ + hub_script.HEADER
    for word in ("--refresh", "--check", "confirmed", "refs/convert/parquet", "revision"):
        assert word in text
    assert yaml.safe_load(hub_script.MANIFEST.read_text())["datasets"]


def test_a_hub_model_loads_at_its_pinned_revision(monkeypatch):
    """Tokenizer, config and weights are all read at model.revision (the manifest's pin), for encoders and LMs."""
    from experiments import models
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # no refusal: the loads below are fakes
    seen = []

    def fake(kind, value):
        return lambda path, **kw: seen.append((kind, path, kw.get("revision"))) or value
    monkeypatch.setattr(models.AutoTokenizer, "from_pretrained", fake("tokenizer", SimpleNamespace(pad_token="<pad>")))
    monkeypatch.setattr(models.AutoConfig, "from_pretrained", fake("config", SimpleNamespace(model_type="roberta")))
    monkeypatch.setattr(models.AutoModel, "from_pretrained", fake("weights", "encoder"))
    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", fake("lm", SimpleNamespace(eval=lambda: "lm")))
    rev = "e" * 40
    assert models.load_encoder(compose("model=roberta-base", f"model.revision={rev}").model)[1] == "encoder"
    assert models.load_causal_lm(compose("model=llama-2-7b", f"model.revision={rev}").model)[1] == "lm"
    assert seen == [(k, hf, rev) for k, hf in (("tokenizer", "FacebookAI/roberta-base"),
                                                ("config", "FacebookAI/roberta-base"),
                                                ("weights", "FacebookAI/roberta-base"),
                                                ("tokenizer", "meta-llama/Llama-2-7b-hf"),
                                                ("lm", "meta-llama/Llama-2-7b-hf"))]


def test_the_command_exits_non_zero_on_a_problem_or_an_id_not_refreshed(monkeypatch, capsys):
    monkeypatch.setenv("STRATA_HUB", "0")  # --refresh sets it: restored after the test
    assert hub_script.main(["--check"]) == 0
    monkeypatch.setattr(hub_script, "refresh",
                        lambda only: (hub_script.load(), ["model org/x: ConnectError: no network"]))
    monkeypatch.setattr(hub_script, "pin", lambda doc: [])
    monkeypatch.setattr(hub, "online", lambda: True)  # the command turns the hub on; nothing may reach it here
    assert hub_script.main(["--refresh"]) == 1
    assert "1 ids not refreshed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hub_script.main(["--refresh", "--only", "org/unknown"])
    assert "--only org/unknown: no conf/ file names these ids" in capsys.readouterr().err


def test_pins_left_null_keep_the_hash_of_records_made_before_they_existed():
    """A record made before task.hf.revision and its siblings (and model.revision) existed hashes as a config that
    has them null: finished runs are not redone and `make verify` sees no drift; a pinned revision is hashed."""
    from omegaconf import OmegaConf

    from experiments.results import config_hash
    now = OmegaConf.to_container(compose("task=sst2", "model=roberta-base"), resolve=True)
    before = json.loads(json.dumps(now))
    for key in ("revision", "data_dir", "data_files", "builder"):
        del before["task"]["hf"][key]
    for key in ("revision", "local_dir"):
        before["model"].pop(key)
    assert config_hash(now) == config_hash(before)
    assert now["task"]["hf"]["revision"] is None and "revision" in now["model"]  # the caller's config untouched
    now["task"]["hf"]["revision"] = "f" * 40
    assert config_hash(now) != config_hash(before)


def test_a_cache_of_work_on_hub_data_keys_on_its_pins():
    """PEMA's counts and EAT's checkpoints key on data_fingerprint: a new revision (or data files) of a hub dataset
    is other data and must be counted again, while an unpinned one (main) keeps the key it always had."""
    from experiments.assets import data_fingerprint
    pinned = compose("task=conll2003")
    assert pinned.task.hf.revision == "refs/convert/parquet"
    first = data_fingerprint(pinned.task, pinned.data)
    moved = compose("task=conll2003", "task.hf.revision=" + "a" * 40)
    assert first and "refs/convert/parquet" in first and data_fingerprint(moved.task, moved.data) != first
    unpinned = compose("task=sst2")
    assert unpinned.task.hf.revision is None and data_fingerprint(unpinned.task, unpinned.data) is None
