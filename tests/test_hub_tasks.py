"""Every hub task config, exercised offline: a tiny copy of its hub dataset, written in that dataset's documented schema
(column names, ClassLabel ids and names, split names; tests/fixtures/hub/<path>[--<name>].json, each naming its
source), is served in place of `datasets.load_dataset`, and the suite's real code paths read it: the train/eval loader,
a one-step fine-tuning run scored with the task's metrics, and intrinsic_dim's prompts where it has a template. A
renamed column, a missing split or label names out of the hub's order fail here, not in a GPU user's first run."""
import datasets
import pytest
from omegaconf import OmegaConf

from experiments import data
from experiments.config import CONF, compose
from experiments.models import byte_tokenizer
from experiments.run import execute
from intrinsic_dim import extract, prompts
from intrinsic_dim.run import split_items
from tests.helpers.hub_data import FIXTURES, fixture_path, load_fixture

HUB_TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml") if OmegaConf.load(p).get("source") == "hub")


def label_feature(ds: datasets.Dataset, field: str):
    f = ds.features[field]
    return getattr(f, "feature", f)  # a tag sequence's items


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("name", HUB_TASKS)
def test_hub_task_columns_labels_and_splits_match_its_dataset(name, hub):
    cfg = compose(f"task={name}")
    task = cfg.task
    doc, dd = load_fixture(task.hf.path, task.hf.name)
    ds = data.load_splits(task, cfg.data)  # every split task.splits names must exist on the hub
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
TRAINABLE = [t for t in HUB_TASKS if _yaml(t).type in data.TASK_TYPES and t not in REGRESSION]


@pytest.mark.slow  # a sweep over every case: over 10 s in all
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
    ds = data.load_splits(cfg.task, cfg.data)
    for split, train in (("train", True), ("eval", False)):
        enc = data.encode(ds[split], byte_tokenizer(), cfg.task, data.max_length(cfg.task, cfg.data), train=train)
        assert len(enc) == len(ds[split]) and all(isinstance(y, float) for y in enc["labels"])


INTRINSIC = [t for t in HUB_TASKS if t in prompts.TEMPLATES]


@pytest.mark.parametrize("name", INTRINSIC)
def test_hub_task_renders_intrinsic_dim_prompts(name, hub):
    cfg = compose("method=intrinsic_dim", "model=tiny-llama", f"task={name}", "method.variant=icl-1",
                  "method.n_train=1", "method.n_eval=3")
    pool, evals, _ = split_items(cfg, unique=False)  # the recipe's hub splits (prompts.RECIPES)
    items = prompts.render(name, evals)
    texts = prompts.build("icl", 1, items, prompts.render(name, pool))
    assert len(texts) == 3 and all(q in p for (q, _), p in zip(items, texts))
    assert len(extract.tokenize(byte_tokenizer(), texts, 4096)) == 3


def test_a_split_the_hub_lacks_is_named_with_the_ones_it_has(hub):
    cfg = compose("task=jnlpba", "task.splits.eval=test")  # jnlpba's test set is its `validation`
    with pytest.raises(ValueError, match=r"has no split 'test'; its splits: train, validation\. Fix task\.splits"):
        data.load_splits(cfg.task, cfg.data)


@pytest.mark.slow  # a sweep over every case: over 10 s in all
def test_every_fixture_belongs_to_a_hub_task():
    """A task with a hub copy (source=hub, or an offline task built from one) has its fixture, and no other does."""
    tasks = [t for t in (compose(f"task={p.stem}").task for p in (CONF / "task").glob("*.yaml")) if t.hf.path]
    used = {fixture_path(t.hf.path, t.hf.name or t.hf.data_dir).name for t in tasks}
    assert {p.name for p in FIXTURES.glob("*.json")} == used
