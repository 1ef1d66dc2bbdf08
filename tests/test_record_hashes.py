"""A committed record made by today's method version recomposes, from its own overrides, to the config hash it was
saved under. A key added to a schema with a non-null default changes every such hash: a tier then redoes finished
runs and `make verify` reports drift everywhere, without a word about why."""
import json
import random
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.config import compose
from experiments import REPO
from experiments.results import config_hash, outdated_reason

PAPERS = sorted(p.parent.name for p in (REPO / "results").glob("*/runs"))
PER_PAPER = 4


def current_records(paper: str) -> list[tuple[Path, dict]]:
    """A seeded sample of the paper's ok records that today's method version still stands behind."""
    files = sorted((REPO / "results" / paper / "runs").rglob("*.json"))
    random.Random(0).shuffle(files)
    picked = []
    for f in files:
        r = json.loads(f.read_text())
        if r.get("status") == "ok" and "config_hash" in r and not outdated_reason(r):
            picked.append((f, r))
        if len(picked) == PER_PAPER:
            break
    return picked


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("paper", PAPERS)
def test_current_records_recompose_to_their_hash(paper):
    records = current_records(paper)
    assert records, f"results/{paper}: no current ok record to check"
    for f, r in records:
        now = OmegaConf.to_container(compose(*r["overrides"]), resolve=True)
        assert config_hash(now) == r["config_hash"], \
            f"{f.relative_to(REPO)}: its overrides compose to another hash today (a key added with a non-null default?)"


def test_every_bookkeeping_key_is_a_key_of_the_root_config():
    """The hash, the run name and the report's groups leave out results.BOOKKEEPING: a key renamed in the schema but
    not there would silently enter every record's hash."""
    from experiments.identity import NOT_IN_NAME
    from experiments.results import BOOKKEEPING, BOOKKEEPING_NESTED, NOT_GROUPED
    cfg = compose()
    for key in (*BOOKKEEPING, *BOOKKEEPING_NESTED):
        assert OmegaConf.select(cfg, key, default="<absent>") != "<absent>", key
        assert key in NOT_IN_NAME and key in NOT_GROUPED
