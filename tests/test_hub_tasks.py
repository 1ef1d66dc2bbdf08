"""Every hub task config, exercised offline: a tiny copy of its hub dataset, written in that dataset's documented schema
(column names, ClassLabel ids and names, split names; tests/fixtures/hub/<path>[--<name>].json, each naming its
source), is served in place of `datasets.load_dataset`, and the suite's real code paths read it: the train/eval loader,
a one-step fine-tuning run scored with the task's metrics, and intrinsic_dim's prompts where it has a template. A
renamed column, a missing split or label names out of the hub's order fail here, not in a GPU user's first run."""
import json
import re
from pathlib import Path

import datasets
import pytest
from omegaconf import OmegaConf

from experiments import data as D
from experiments.models import byte_tokenizer
from experiments.run import execute
from intrinsic_dim import extract as X
from intrinsic_dim import prompts as P
from intrinsic_dim import run as IR
from tests.conftest import CONF, REPO, compose
from tests.helpers.hub_data import pick

FIXTURES = REPO / "tests" / "fixtures" / "hub"
HUB_TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml") if OmegaConf.load(p).get("source") == "hub")


def fixture_path(path: str, name: str | None) -> Path:
    return FIXTURES / (path.replace("/", "--") + (f"--{name}" if name else "") + ".json")


def load_fixture(path: str, name: str | None) -> tuple[dict, datasets.DatasetDict]:
    """(the fixture document, its splits as the hub would return them: typed by the documented features)."""
    f = fixture_path(path, name)
    if not f.exists():
        pytest.fail(f"no offline copy of hub dataset {path} ({name}): write {f.relative_to(REPO)} with a few rows in "
                    "its documented schema (see the other files there)")
    doc = json.loads(f.read_text())
    assert doc["hub"] == {"path": path, "name": name} and doc["source"], f"{f.name}: hub id or source missing"
    features = datasets.Features.from_dict(doc["features"])
    return doc, datasets.DatasetDict({s: datasets.Dataset.from_list(rows, features=features)
                                      for s, rows in doc["splits"].items()})


@pytest.fixture
def hub(monkeypatch):
    """Serve the fixtures through `datasets.load_dataset` (what experiments.data calls for source=hub): by repo id
    and config, or, for a repo read through a packaged builder, by the repo its hf://datasets/<repo>@<rev>/ files
    name, or for one folder of a parquet export (data_dir), by that folder's config."""
    def load_dataset(path, name=None, split=None, data_files=None, revision=None, data_dir=None, **kwargs):
        if data_files:
            path, name = re.match(r"hf://datasets/([^@]+)@", next(iter(data_files.values()))).group(1), None
        name = name or data_dir
        _, dd = load_fixture(path, name)
        return pick(dd, split)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


def label_feature(ds: datasets.Dataset, field: str):
    f = ds.features[field]
    return getattr(f, "feature", f)  # a tag sequence's items


@pytest.mark.parametrize("name", HUB_TASKS)
def test_hub_task_columns_labels_and_splits_match_its_dataset(name, hub):
    cfg = compose(f"task={name}")
    task = cfg.task
    doc, dd = load_fixture(task.hf.path, task.hf.name)
    ds = D.load_splits(task, cfg.data)  # every split task.splits names must exist on the hub
    assert set(ds) == set(task.splits) | ({"dev"} if task.dev_from_train else set())
    for split in ds.values():
        missing = [c for c in [*task.text_fields, task.label_field] if c not in split.column_names]
        assert not missing, f"{name}: columns {missing} are not in {task.hf.path}; it has {split.column_names}"
    feat = label_feature(ds["train"], task.label_field)
    if isinstance(feat, datasets.ClassLabel):  # ids in the config's order = the hub's ids
        assert list(task.label_names) == feat.names
    elif "label_names" in doc:  # plain int ids whose names the dataset documents elsewhere (tner)
        assert list(task.label_names) == doc["label_names"]
    elif task.label_names:  # string labels (CommonsenseQA's answerKey)
        assert set(ds["eval"][task.label_field]) <= set(task.label_names)
    if task.type in ("cls", "pair") and task.label_names:  # the eval split is labelled (GLUE's test is not)
        assert all(0 <= y < len(task.label_names) for y in ds["eval"][task.label_field]), \
            f"{name}: eval split {task.splits.eval!r} has labels outside 0..{len(task.label_names) - 1}"


def _yaml(task: str):
    return OmegaConf.load(CONF / "task" / f"{task}.yaml")


# regression (stsb): layer_fusion trains it (tests/layer_fusion/test_stsb.py, on its own fixture); here encoding
# is its path
REGRESSION = [t for t in HUB_TASKS if _yaml(t).type in ("cls", "pair") and not _yaml(t).get("label_names")]
TRAINABLE = [t for t in HUB_TASKS if _yaml(t).type in D.TASK_TYPES and t not in REGRESSION]


@pytest.mark.parametrize("name", TRAINABLE)
def test_hub_task_trains_one_step_and_scores_every_metric(name, hub, smoke_cfg, tmp_path):
    cfg = smoke_cfg(f"task={name}", "data.source=hub", "train.max_steps=1", f"store.dir={tmp_path / 'store'}")
    rec = execute(cfg, tmp_path / "run")
    assert rec["status"] == "ok"
    scored = {f"eval/{m}" for m in cfg.task.metrics}
    assert scored <= set(rec["metrics"]) and cfg.task.objective in rec["metrics"], \
        f"{name}: metrics {sorted(scored - set(rec['metrics']))} were not scored"


@pytest.mark.parametrize("name", REGRESSION)
def test_hub_regression_task_encodes(name, hub):
    cfg = compose(f"task={name}")
    ds = D.load_splits(cfg.task, cfg.data)
    for split, train in (("train", True), ("eval", False)):
        enc = D.encode(ds[split], byte_tokenizer(), cfg.task, D.max_length(cfg.task, cfg.data), train=train)
        assert len(enc) == len(ds[split]) and all(isinstance(y, float) for y in enc["labels"])


INTRINSIC = [t for t in HUB_TASKS if t in P.TEMPLATES]


@pytest.mark.parametrize("name", INTRINSIC)
def test_hub_task_renders_intrinsic_dim_prompts(name, hub):
    cfg = compose("method=intrinsic_dim", "model=tiny-llama", f"task={name}", "method.variant=icl-1",
                  "method.n_train=1", "method.n_eval=3")
    pool, evals, _ = IR.split_items(cfg, unique=False)  # the recipe's hub splits (prompts.RECIPES)
    items = P.render(name, evals)
    prompts = P.build("icl", 1, items, P.render(name, pool))
    assert len(prompts) == 3 and all(q in p for (q, _), p in zip(items, prompts))
    assert len(X.tokenize(byte_tokenizer(), prompts, 4096)) == 3


def test_a_split_the_hub_lacks_is_named_with_the_ones_it_has(hub):
    cfg = compose("task=jnlpba", "task.splits.eval=test")  # jnlpba's test set is its `validation`
    with pytest.raises(ValueError, match=r"has no split 'test'; its splits: train, validation\. Fix task\.splits"):
        D.load_splits(cfg.task, cfg.data)


def test_every_fixture_belongs_to_a_hub_task():
    """A task with a hub copy (source=hub, or an offline task built from one) has its fixture, and no other does."""
    tasks = [t for t in (compose(f"task={p.stem}").task for p in (CONF / "task").glob("*.yaml")) if t.hf.path]
    used = {fixture_path(t.hf.path, t.hf.name or t.hf.data_dir).name for t in tasks}
    assert {p.name for p in FIXTURES.glob("*.json")} == used
