"""The WinoGrande builder (scripts/datasets_to_jsonl.py) on hand-written BIG-bench-shaped targets, the committed
fixture, the task config, and (marked `assets`) the built asset."""
from __future__ import annotations

import io
import json
import tarfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments import REPO
from experiments.assets import MANIFEST, require
from experiments.config import compose
from experiments.data import load_splits
from experiments.run import execute
from scripts.datasets_to_jsonl import (WINOGRANDE_MEMBERS, DataCheckError, bucket, build_winogrande,
                                       winogrande_group, winogrande_rows, winogrande_splits)


def object_target(s1: str, a1: str, s2: str, a2: str) -> str:
    """One twin group as the object subtask writes it."""
    return f"Sentence 1: {s1} \nAnswer1: {a1}. \nSentence 2: {s2} \nAnswer2: {a2}."


def person_target(s1: str, s2: str) -> str:
    return f"Sentence 1: {s1} \nSentence 2: {s2}"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- parsing ----------------------------------------------------------------------------------------------------------


def test_object_twins_share_options_and_have_opposite_labels():
    target = object_target("The jug  would not fit in the box as the _ was too big.", "jug",
                           "The jug would not fit in the box as the _ was too small.", "box")
    rows, why = winogrande_group("object", target)
    assert why == ""
    assert rows == [
        {"sentence": "The jug would not fit in the box as the _ was too big.", "option1": "jug", "option2": "box",
         "options": "Options: jug or box", "label": 0, "kind": "object"},  # doubled space collapsed
        {"sentence": "The jug would not fit in the box as the _ was too small.", "option1": "jug", "option2": "box",
         "options": "Options: jug or box", "label": 1, "kind": "object"}]


def test_option1_is_the_first_mention_not_the_first_answer():
    # answer1 ("Tea") is mentioned second, in another case and in the plural: option1 is still "coffee"
    target = object_target("She chose coffee over teas because the _ was too weak.", "Tea",
                           "She chose coffee over teas because the _ was strong.", "coffee")
    rows, _ = winogrande_group("object", target)
    assert [(r["option1"], r["option2"], r["label"]) for r in rows] == [("coffee", "Tea", 1), ("coffee", "Tea", 0)]


def test_person_spellings_are_unified_and_answers_are_x_then_y():
    target = person_target("personx thanked PersonYs mother because _ was grateful.",
                           "Personx thanked persony's mother because _ was kind.")
    rows, _ = winogrande_group("person", target)
    assert [r["sentence"] for r in rows] == ["PersonX thanked PersonYs mother because _ was grateful.",
                                             "PersonX thanked PersonY's mother because _ was kind."]
    assert [(r["option1"], r["option2"], r["label"]) for r in rows] == [("PersonX", "PersonY", 0),
                                                                       ("PersonX", "PersonY", 1)]


BAD = {
    "unparsed": ("object", "Sentence 1: The _ is red. \nSentence 2: The _ is blue."),
    "blanks != 1": ("person", person_target("PersonX met PersonY so _ waved.", "_ PersonX met PersonY so _ left.")),
    "candidate not in sentence": ("object", object_target("The cup beat the mug as the _ was new.", "cup",
                                                          "The cup beat the mug as the _ was old.", "plate")),
    "same answer": ("object", object_target("The cup beat the mug as the _ was new.", "cup",
                                            "The cup beat the mug as the _ was old.", "Cup")),
    "candidates overlap": ("object", object_target("The ski mask beat the ski as the _ was warm.", "ski mask",
                                                   "The ski mask beat the ski as the _ was fast.", "ski")),
}


@pytest.mark.parametrize("reason", list(BAD))
def test_bad_group_is_dropped_and_counted_by_reason(reason):
    kind, bad = BAD[reason]
    good = (object_target("The cup beat the mug as the _ was new.", "cup", "The cup beat the mug as the _ was old.",
                          "mug") if kind == "object" else
            person_target("PersonX met PersonY so _ waved.", "PersonX met PersonY so _ left."))
    rows, dropped = winogrande_rows(kind, [{"input": "Context Word: x.", "target": [bad, good]}])
    assert dropped == Counter({reason: 1})
    assert [r["group"] for r in rows] == [f"{kind}/0/1"] * 2  # ids keep the source position of what was kept


# -- splits -----------------------------------------------------------------------------------------------------------


def synthetic_rows(n: int) -> list[dict]:
    things = ["cup", "mug", "box", "bag", "car", "van", "pen", "ink"]
    examples = [{"input": f"Context Word: w{i}.", "target": [
        object_target(f"The {a} beat the {b} in test {i} as the _ was new.", a,
                      f"The {a} beat the {b} in test {i} as the _ was old.", b)
        for a, b in zip(things[i % 2::2], things[1 - i % 2::2])]} for i in range(100)]
    rows, dropped = winogrande_rows("object", examples)
    assert not dropped and len(rows) == 800
    return rows


def test_splits_never_part_twins_and_keep_labels_balanced():
    rows = synthetic_rows(100)
    split = winogrande_splits(rows)
    assert set(split.values()) == {"train", "dev", "eval"}  # 400 groups: every split gets some
    labels = defaultdict(Counter)
    for r in rows:
        labels[split[r["group"]]][r["label"]] += 1
    assert all(c[0] == c[1] > 0 for c in labels.values())
    by_group = defaultdict(list)
    for r in rows:
        by_group[r["group"]].append(r["sentence"])
    for group, (s1, s2) in by_group.items():  # the recorded rule, recomputed
        b = bucket(s1 + "\n" + s2 + "\n", 10)
        assert split[group] == {0: "eval", 1: "dev"}.get(b, "train")


def fake_sdist(path: Path, targets: dict[str, list[str]]) -> Path:
    """A .tar.gz with the two members where the bigbench sdist keeps them."""
    with tarfile.open(path, "w:gz") as tf:
        for kind, member in WINOGRANDE_MEMBERS.items():
            data = json.dumps({"examples": [{"input": "Context Word: x.", "target": targets[kind]}]}).encode()
            info = tarfile.TarInfo("bigbench-1.0.0/bigbench/benchmark_tasks" + member)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_build_refuses_a_task_file_of_another_size(tmp_path):
    sdist = fake_sdist(tmp_path / "bigbench-1.0.0.tar.gz", {"object": [BAD["same answer"][1]],
                                                             "person": [BAD["blanks != 1"][1]]})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataCheckError, match=r"winogrande \(examples, twin groups\).*got \(1, 1, 1, 1\), expected "
                                             r"\(4500, 12083, 6500, 16215\)"):
        build_winogrande([sdist], out)
    assert not list(out.iterdir())  # refused before writing


# -- fixture and config -----------------------------------------------------------------------------------------------


def test_fixture_rows_are_what_the_builder_makes_of_them():
    fixture = read(REPO / "tests/fixtures/winogrande.jsonl")
    assert 20 <= len(fixture) <= 40
    by_group = defaultdict(list)
    for r in fixture:
        by_group[r["group"]].append(r)
    for twins in by_group.values():
        (a, b), kind = twins, twins[0]["kind"]
        answers = [r[f"option{r['label'] + 1}"] for r in twins]
        target = (object_target(a["sentence"], answers[0], b["sentence"], answers[1]) if kind == "object" else
                  person_target(a["sentence"], b["sentence"]))
        built, why = winogrande_group(kind, target)
        assert why == "" and built == [{k: v for k, v in r.items() if k not in ("group", "split")} for r in twins]
        assert a["split"] == b["split"]
    for split in ("train", "eval"):
        assert Counter(r["label"] for r in fixture if r["split"] == split) in (Counter({0: n, 1: n}) for n in (4, 12))


def test_task_config_reads_sentence_and_options_and_selects_on_dev():
    task = compose("task=winogrande").task
    assert task.type == "pair" and list(task.text_fields) == ["sentence", "options"]
    assert list(task.label_names) == ["option1", "option2"] and task.stand_in_for == "rte"
    assert task.objective.removeprefix("eval/") in list(task.metrics) and task.splits["dev"] == "dev"
    cfg = compose("debug=smoke", "task=winogrande")
    ds = load_splits(cfg.task, cfg.data)
    assert {s: len(ds[s]) for s in ds} == {"train": 24, "eval": 8, "dev": 8}


def test_smoke_run_trains_and_scores(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("task=winogrande"), tmp_path / "run")
    assert rec["status"] == "ok" and rec["metrics"]["train/steps"] == 6
    assert 0.0 <= rec["metrics"]["eval/accuracy"] <= 1.0 and "eval/f1_macro" in rec["metrics"]


# -- the built asset --------------------------------------------------------------------------------------------------


@pytest.mark.assets
def test_asset_counts_balance_and_twin_groups_per_split():
    root = require("data", "winogrande")
    splits = {s: read(root / f"{s}.jsonl") for s in ("train", "dev", "eval")}
    assert {s: len(r) for s, r in splits.items()} == {"train": 45018, "dev": 5664, "eval": 5818}
    for rows in splits.values():
        labels = Counter(r["label"] for r in rows)
        assert labels[0] == labels[1] == len(rows) // 2
    groups = {s: {r["group"] for r in rows} for s, rows in splits.items()}
    assert not (groups["train"] & groups["eval"] or groups["train"] & groups["dev"] or groups["dev"] & groups["eval"])
    everything = [r for rows in splits.values() for r in rows]
    assert Counter(r["kind"] for r in everything) == {"object": 24088, "person": 32412}
    assert all(r["sentence"].count("_") == 1 and r["options"] == f"Options: {r['option1']} or {r['option2']}"
               for r in everything)
    manifest = json.loads((root / MANIFEST).read_text())
    assert sum(manifest["counts"]["dropped_groups"].values()) == 48


@pytest.mark.assets
def test_offline_task_loads_train_dev_eval():
    cfg = compose("task=winogrande", "data.limit_train=null", "data.limit_eval=null")
    ds = load_splits(cfg.task, cfg.data)
    assert {s: len(ds[s]) for s in ds} == {"train": 45018, "eval": 5818, "dev": 5664}
    assert OmegaConf.to_container(cfg.task.splits) == {"train": "train", "eval": "eval", "dev": "dev"}
