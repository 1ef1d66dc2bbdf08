"""The package contract: every registered paper package has the same shape (ARCHITECTURE.md), valid
paper_values.yaml and claims.yaml, and a README with the sections a researcher looks for."""
import ast

import pytest

from experiments import registry
from experiments.evidence.claims import load_claims
from experiments.evidence.paper_values import load as load_paper_values
from tests.conftest import CONF, REPO

PACKAGES = sorted({m.paper for m in registry.METHODS.values() if (REPO / m.paper / "__init__.py").exists()})
FILES = ("__init__.py", "config.py", "run.py", "report.py", "paper_values.yaml", "claims.yaml", "README.md")
README_SECTIONS = ("targets", "deviations", "inconsistencies")  # each a `## ` heading containing the word


def test_every_paper_with_a_method_is_checked():
    assert PACKAGES == ["eat", "intrinsic_dim", "layer_fusion", "pema", "recycling", "reverse_probing"]


@pytest.mark.parametrize("paper", PACKAGES)
def test_package_files(paper):
    missing = [f for f in FILES if not (REPO / paper / f).exists()]
    assert not missing, f"{paper}/ lacks {missing}"
    doc = ast.get_docstring(ast.parse((REPO / paper / "__init__.py").read_text()))
    assert doc and any(venue in doc for venue in ("arXiv", "RepL4NLP", "ACL")), f"{paper}/__init__.py: cite the paper"
    assert (CONF / "experiment" / paper / "smoke.yaml").exists()
    assert any((CONF / "experiment" / paper).glob("*_cpu.yaml")), f"{paper}: no CPU tier"


@pytest.mark.parametrize("paper", PACKAGES)
def test_readme_sections(paper):
    headings = [line[3:].lower() for line in (REPO / paper / "README.md").read_text().splitlines()
                if line.startswith("## ")]
    for word in README_SECTIONS:
        assert any(word in h for h in headings), f"{paper}/README.md has no '## ...{word}...' section"


@pytest.mark.parametrize("paper", PACKAGES)
def test_paper_values_and_claims_are_valid(paper):
    pv = load_paper_values(REPO / paper / "paper_values.yaml")
    assert pv.cells, f"{paper}/paper_values.yaml holds no number"
    claims = load_claims(paper)
    assert len(claims.claims) >= 5 and len({c.id for c in claims.claims}) == len(claims.claims)
