"""Session fixtures of the dry run: hub-shaped data (the committed tests/fixtures/hub rows, checked against the hub
manifest's features and split names, repeated to ~30 rows a split) served through `datasets.load_dataset`, and one
directory of hub-shaped tiny models (tests/helpers/hub_models.py) shared by every job."""
from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import datasets
import pytest
import yaml

from experiments import REPO
from tests.helpers.hub_data import FIXTURES, fixture_path, pick

MANIFEST = REPO / "conf" / "hub_manifest.yaml"
ROWS = 30  # per split: enough for a job's n_eval / k / few-shot draws at their shrunk sizes
_real_load_dataset = datasets.load_dataset
BUILDERS = ("json", "csv", "parquet", "text", "arrow")  # packaged builders: local files go to the real loader
HF_FILES = re.compile(r"hf://datasets/([^@/]+/[^@/]+)")  # a hub repo's files, read through a packaged builder


def manifest_datasets() -> dict | None:
    return (yaml.safe_load(MANIFEST.read_text()) or {}).get("datasets") or {} if MANIFEST.exists() else None


def hub_config(path: str, name: str | None) -> dict | None:
    """The manifest's entry for one builder config (None: no manifest in this checkout); a dataset or config the
    manifest does not list fails, as no run could load it."""
    sets = manifest_datasets()
    if sets is None:
        return None
    if path not in sets:
        pytest.fail(f"hub dataset {path} is not in {MANIFEST.relative_to(REPO)}: add it (datasets: {path}: ...)")
    configs = sets[path].get("configs") or {}
    # no name: the hub's default, "default" or the only config there is (datasets loads that one)
    entry = configs.get(name) if name else configs.get("default") or (
        next(iter(configs.values())) if len(configs) == 1 else None)
    if entry is None:
        pytest.fail(f"hub dataset {path} has no config {name or 'default'!r} in {MANIFEST.relative_to(REPO)} "
                    f"(listed: {', '.join(configs) or 'none'}); a run loading it would fail on the hub")
    return entry


def donor(path: str, name: str | None) -> Path:
    """The fixture file whose rows serve (path, name): its own, else one config of the same dataset whose features
    the manifest says are the same (XNLI's and WikiANN's languages share one schema)."""
    own = fixture_path(path, name)
    if own.exists():
        return own
    want = (hub_config(path, name) or {}).get("features")
    for other in sorted(FIXTURES.glob(path.replace("/", "--") + "--*.json")):
        doc = json.loads(other.read_text())
        if want is not None and want == doc["features"]:
            return other
    pytest.fail(f"no offline copy of hub dataset {path} ({name}): write {own.relative_to(REPO)} in its hub schema "
                "(tests/fixtures/hub has examples), or list the config in the hub manifest with the same features "
                "as a config that has one")


def check_schema(path: str, name: str | None, doc: dict) -> None:
    """The fixture's features and split names are the hub's, as the manifest records them: a drift fails here."""
    entry = hub_config(path, name)
    if entry is None:
        return
    if entry.get("features") is not None:
        assert doc["features"] == entry["features"], \
            f"{path} ({name}): fixture features {doc['features']} differ from the hub manifest's {entry['features']}"
    if entry.get("splits"):
        assert set(doc["splits"]) == set(entry["splits"]), \
            f"{path} ({name}): fixture splits {sorted(doc['splits'])} are not the hub's {sorted(entry['splits'])}"


def copy_row(row: dict, n: int) -> dict:
    """The n-th copy of a fixture row, its free text (a string with a space) ending in a number: distinct examples
    (duplicates make distances 0 and correlations undefined); labels, ids, tag sequences and answer offsets kept."""
    if n == 0:
        return row
    return {k: f"{v} {n}" if isinstance(v, str) and " " in v else v for k, v in row.items()}


def hub_dataset(path: str, name: str | None) -> datasets.DatasetDict:
    doc = json.loads(donor(path, name).read_text())
    check_schema(path, name, doc)
    features = datasets.Features.from_dict(doc["features"])
    return datasets.DatasetDict({s: datasets.Dataset.from_list(
        [copy_row(rows[i % len(rows)], i // len(rows)) for i in range(ROWS)], features=features)
        for s, rows in doc["splits"].items()})


@pytest.fixture(scope="session")
def hub_datasets() -> dict:
    """The session's hub-shaped datasets, built once per dataset config."""
    return {}


@pytest.fixture
def hub_data(hub_datasets, monkeypatch):
    """`datasets.load_dataset` as the hub would answer a run, from the fixtures; for this test only."""
    cache = hub_datasets

    def load_dataset(path, name=None, split=None, **kwargs):
        files = kwargs.get("data_files")
        repo = HF_FILES.match(str(next(iter(files.values())))) if isinstance(files, dict) and files else None
        if path in BUILDERS and repo is None:  # local files: the real loader
            return _real_load_dataset(path, name, split=split, **kwargs)
        key = (repo.group(1), None) if repo else (path, name)
        if key not in cache:
            cache[key] = hub_dataset(*key)
        dd = cache[key]
        if repo:  # a hub repo's own files read by a packaged builder: one file per split, named by the run
            missing = sorted(set(files) - set(dd))
            assert not missing, f"{key[0]}: data_files name splits {missing} the hub repo does not have ({list(dd)})"
            dd = datasets.DatasetDict({s: dd[s] for s in files})
        return pick(dd, split)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return load_dataset


@pytest.fixture(scope="session")
def model_root(tmp_path_factory) -> Path:
    """Where the hub-shaped tiny models are written, once per session (each on first use)."""
    return tmp_path_factory.mktemp("hub-models")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the main process names the session; xdist workers inherit it
        os.environ["STRATA_DRYRUN_SESSION"] = uuid.uuid4().hex[:12]


def pytest_terminal_summary(terminalreporter, config):
    """Merge the processes' outcomes into one coverage table: printed, and saved as outputs/dryrun/coverage.txt."""
    from tests.helpers.dryrun_jobs import coverage

    if hasattr(config, "workerinput"):
        return
    folder = REPO / "outputs" / "dryrun" / os.environ.get("STRATA_DRYRUN_SESSION", "session")
    docs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not docs:
        return
    results = {k: v for d in docs for k, v in d["results"].items()}
    table = coverage(docs[0]["per"], results, {k: v for d in docs for k, v in d["known"].items()}, docs[0]["walked"])
    (folder.parent / "coverage.txt").write_text(table + "\n")
    terminalreporter.section("paper-tier dry run: coverage")
    for line in [*table.splitlines(), f"(saved: {(folder.parent / 'coverage.txt').relative_to(REPO)})"]:
        terminalreporter.write_line(line)
