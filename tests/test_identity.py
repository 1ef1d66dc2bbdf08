"""Run identity (experiments/identity.py): every experiment grid composed, every published path unique."""
import json
import random

import pytest
from omegaconf import OmegaConf

from experiments import REPO, registry
from experiments.config import CONF
from experiments.identity import MAX_NAME, artifact, override_key, published_path, run_name
from experiments.files import write_json
from experiments.run import check
from tests.helpers.grids import EXPERIMENTS, job_configs


def test_run_name_adds_every_override_outside_the_base():
    base = "rt-polarity--minilm-l6--recycling-reduced--seed0"
    assert run_name(base, ["seed=0", "task=rt-polarity", "method.k=2", "experiment=recycling/depth_cpu"]) == \
        f"{base}--method.k=2"
    assert run_name(base, ["train.lr=3e-4", "+data.limit_train=5", "hardware=gpu", "publish=true"]) == \
        f"{base}--data.limit_train=5--train.lr=3e-4"  # sorted; + dropped; path and bookkeeping keys left out
    assert run_name(base, ["method.trunc=[1,2]"]) == f"{base}--method.trunc=_1,2_"  # a list: the published form
    assert override_key("budget@_global_=cpu_x") == "budget" and override_key("~data.limit_train") == "data.limit_train"


def test_a_name_made_file_safe_gets_a_hash_so_two_override_sets_never_share_it():
    base = "rt-polarity--tiny-bert--finetune-full--seed0"
    a, b = run_name(base, ["task.fixture=/a/x/edge.jsonl"]), run_name(base, ["task.fixture=/a/x_edge.jsonl"])
    assert a != b and a.startswith(f"{base}--task.fixture=_a_x_edge.jsonl~") and b.startswith(a.split("~")[0])
    for x, y in ((["method.sources=[a]"], ["method.sources=_a_"]),  # a list and the literal it reads as
                 (["~data.limit_train=5"], ["data.limit_train=5"]),  # a deletion and a setting
                 (["train.lr=1--data.limit_train=5"], ["train.lr=1", "data.limit_train=5"]),  # "--" is the separator
                 (["data.source=x-", "train.lr=1"], ["data.source=x", "-train.lr=1"])):
        assert run_name(base, x) != run_name(base, y), (x, y)
    # the same set names the same run whatever its order or `+`; a plain name (no hash) stays as it was
    assert run_name(base, ["+train.lr=1", "data.source=/t"]) == run_name(base, ["data.source=/t", "train.lr=1"])
    assert "~" not in run_name(base, ["train.lr=1e-4", "data.limit_train=-1"])


def test_random_override_sets_never_share_a_name():
    """Values drawn from the characters that sanitizing merges (`/`, `_`, space, brackets, `-`, `~`, `=`)."""
    rng, names = random.Random(0), {}
    for _ in range(5000):
        overrides = frozenset(f"{rng.choice('ab')}.{rng.choice('xy')}=" + "".join(rng.choices("a_/ []-~=", k=5))
                              for _ in range(rng.randint(1, 2)))
        name = run_name("t--m--f-full--seed0", sorted(overrides))
        assert names.setdefault(name, overrides) == overrides, f"{sorted(overrides)} and {sorted(names[name])}: {name}"
    assert len(names) > 1000


def test_a_long_override_set_gets_a_bounded_name_that_can_be_written(tmp_path):
    base = "rt-polarity--tiny-bert--eat-eat--seed0"
    overrides = [f"method.option_{i}=some_fairly_long_value_{i}" for i in range(10)]
    name = run_name(base, overrides)
    assert len(name.encode()) == MAX_NAME and name.startswith(f"{base}--method.option_0=some_fairly_long_value_0--")
    assert run_name(base, [*overrides[:-1], "method.option_9=other"]) != name  # the cut tail still tells them apart
    path = published_path(tmp_path, "eat", "adhoc", "cpu", name)
    write_json(path, {"run_id": name})  # the published file and its temporary twin fit a file name
    assert json.loads(path.read_text())["run_id"] == name


def test_every_published_record_keeps_its_name():
    """The records under results/ are found by name: a change of naming would orphan them beside their reruns."""
    records = sorted((REPO / "results").glob("*/runs/**/*.json"))
    assert len(records) > 500
    for p in records:
        r = json.loads(p.read_text())
        assert run_name(r["config"]["run_id"], r["overrides"]) == r["run_id"] == p.stem, p


def test_artifact_strips_the_paper_prefix():
    assert artifact("recycling/table1_cpu", "recycling") == "table1_cpu"
    assert artifact("adhoc", "finetune") == "adhoc" and artifact("x/y", "finetune") == "x__y"


@pytest.mark.slow  # every job of every grid (over 5,000) composed and checked: 35 s to 2 min on 2 cores
def test_every_experiment_grid_publishes_unique_paths_and_passes_the_runners_checks():
    """Each experiment is composed; each job of its grid is applied to it (tests/helpers/grids.py). Every job passes
    the runner's refusals and publishes to a path of its own. A method with checks of its own runs only in its
    paper's experiment folder, where tests/test_configs.py walks its jobs through them."""
    seen, n_jobs = {}, 0
    for exp in EXPERIMENTS:
        for job, cfg in job_configs(exp, copy=False):
            check(cfg, dirty=False)  # every job passes the runner's refusals (ranges, unknown keys, options)
            method = registry.METHODS[cfg.method.name]
            assert not method.check or exp.startswith(f"{method.paper}/"), \
                f"{exp} job {job} runs {cfg.method.name}, whose checks run on {method.paper}/ experiments only"
            paper = cfg.paper or method.paper
            path = published_path("results", paper, cfg.exp_id, cfg.hardware.name, run_name(cfg.run_id, job))
            assert path not in seen, f"{exp} job {job} publishes {path}, as does {seen[path]}"
            seen[path] = (exp, job)
            n_jobs += 1
    print(f"\n{len(EXPERIMENTS)} experiment grids, {n_jobs} jobs, {len(seen)} published paths, 0 collisions")
    assert n_jobs == len(seen) > 1000


@pytest.mark.parametrize("group", ["model", "task"])
def test_group_option_names_match_their_files(group):
    """The run name uses model.name / task.name: a file whose name field differs would name runs after another."""
    for p in (CONF / group).glob("*.yaml"):
        assert OmegaConf.load(p).get("name") == p.stem, p
