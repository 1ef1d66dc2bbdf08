"""Hub datasets offline: tests/fixtures/hub holds a tiny copy of each hub dataset a task reads, in that dataset's
documented schema, and these serve it where `datasets.load_dataset` would download it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import datasets
import pytest

from experiments import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hub"


def fixture_path(path: str, name: str | None) -> Path:
    """The offline copy of hub dataset `path` (config or data_dir `name`)."""
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


def pick(dd: datasets.DatasetDict, split: str | None):
    """Every split for None, else the one asked for, with datasets' own message for a split the repo lacks."""
    if split is None:
        return dd
    if split not in dd:
        raise ValueError(f'Unknown split "{split}". Should be one of {list(dd)}.')
    return dd[split]


def load_dataset(path, name=None, split=None, data_files=None, revision=None, data_dir=None, **kwargs):
    """`datasets.load_dataset` over the fixtures (what experiments.data calls for source=hub): by repo id and config,
    or, for a repo read through a packaged builder, by the repo its hf://datasets/<repo>@<rev>/ files name, or for
    one folder of a parquet export (data_dir), by that folder's config."""
    if data_files:
        path, name = re.match(r"hf://datasets/([^@]+)@", next(iter(data_files.values()))).group(1), None
    name = name or data_dir
    _, dd = load_fixture(path, name)
    return pick(dd, split)
