"""The package contract: every registered paper package has the same shape (ARCHITECTURE.md), valid
paper_values.yaml and claims.yaml, a README with the sections a researcher looks for, its benchmark in bench.py, and
entry points that no sibling imports."""
import ast

import pytest

from experiments import REPO, registry
from experiments.config import CONF
from experiments.evidence.claims import load_claims
from experiments.evidence.paper_values import load as load_paper_values

PACKAGES = registry.PACKAGES
FILES = ("__init__.py", "config.py", "report.py", "paper_values.yaml", "claims.yaml", "README.md")
README_SECTIONS = ("targets", "deviations", "inconsistencies")  # each a `## ` heading containing the word


def methods_of(package: str) -> dict[str, registry.Method]:
    return {name: m for name, m in registry.METHODS.items() if m.package == package}


def imports_of(path, package: str) -> set[str]:
    """The package's modules a source file imports, by dotted name (`from . import run` and `from pkg import run`
    both read as pkg.run), in any function body too."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package if node.level else node.module or ""
            base = f"{package}.{node.module}" if node.level and node.module else base
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            out.add(str(node.args[0].value))
    return {name for name in out if name == package or name.startswith(f"{package}.")}


def test_packages_come_from_the_registry():
    """Every folder holding a claims.yaml is a registered package, so a new paper is checked as soon as it has one."""
    folders = {p.parent.name for p in REPO.glob("*/claims.yaml")}
    assert folders <= set(PACKAGES), f"{sorted(folders - set(PACKAGES))} register no method in experiments/registry.py"
    assert PACKAGES and "experiments" not in PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_package_files(package):
    missing = [f for f in FILES if not (REPO / package / f).exists()]
    assert not missing, f"{package}/ lacks {missing}"
    doc = ast.get_docstring(ast.parse((REPO / package / "__init__.py").read_text()))
    assert doc and any(venue in doc for venue in ("arXiv", "RepL4NLP", "ACL")), f"{package}/__init__.py: cite the paper"
    assert (CONF / "experiment" / package / "smoke.yaml").exists()
    assert any((CONF / "experiment" / package).glob("*_cpu.yaml")), f"{package}: no CPU tier"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_benchmark_lives_in_bench_py(package):
    benches = {name: m.run for name, m in methods_of(package).items() if name.endswith("_bench")}
    wrong = {name: run for name, run in benches.items() if run != f"{package}.bench:run"}
    assert not wrong, f"benchmark methods {wrong}: a package's benchmark is {package}.bench:run"
    if benches:
        assert (REPO / package / "bench.py").exists(), f"{package} registers {sorted(benches)} but has no bench.py"


@pytest.mark.parametrize("package", PACKAGES)
def test_run_py_is_an_entry_point_no_sibling_imports(package):
    """run.py holds a method's `run(cfg, ctx)`; what siblings share lives in modules named for what it is."""
    if not (REPO / package / "run.py").exists():
        pytest.skip(f"{package} has no run.py")
    assert f"{package}.run:run" in {m.run for m in methods_of(package).values()}, \
        f"{package}/run.py is the entry point of no registered method"
    importers = [str(p.relative_to(REPO)) for p in sorted((REPO / package).rglob("*.py")) if p.name != "run.py"
                 and f"{package}.run" in imports_of(p, package)]
    assert not importers, f"{importers} import {package}.run: move what they use into a module named for what it is"


def test_the_import_scan_sees_every_form(tmp_path):
    src = tmp_path / "x.py"
    src.write_text("from . import run\nfrom .run import f\nimport pkg.run\ndef g():\n    from pkg import run as r\n"
                   "    importlib.import_module('pkg.run')\nfrom pkg.other import run_x\nfrom .config import check\n")
    assert imports_of(src, "pkg") == {"pkg", "pkg.run", "pkg.run.f", "pkg.other", "pkg.other.run_x", "pkg.config",
                                      "pkg.config.check"}


@pytest.mark.parametrize("package", PACKAGES)
def test_readme_sections(package):
    headings = [line[3:].lower() for line in (REPO / package / "README.md").read_text().splitlines()
                if line.startswith("## ")]
    for word in README_SECTIONS:
        assert any(word in h for h in headings), f"{package}/README.md has no '## ...{word}...' section"


@pytest.mark.parametrize("package", PACKAGES)
def test_paper_values_and_claims_are_valid(package):
    pv = load_paper_values(REPO / package / "paper_values.yaml")
    assert pv.cells, f"{package}/paper_values.yaml holds no number"
    claims = load_claims(package)
    assert len(claims.claims) >= 5 and len({c.id for c in claims.claims}) == len(claims.claims)
