"""The shared layer depends on no paper: no module of experiments/ imports a paper package, anywhere in its body
(a paper attaches through experiments.registry's lazy "module:attr" strings and experiments.hooks)."""
import ast

import pytest

from experiments import REPO, registry


def imported_packages(source: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            out.add(str(node.args[0].value).split(".")[0])
    return out


def test_the_walker_sees_every_form():
    src = "import pema.hook\nfrom recycling import model\ndef f():\n    import eat\n" \
          "    importlib.import_module('layer_fusion.x')\nfrom . import sibling\n"
    assert imported_packages(src) == {"pema", "recycling", "eat", "layer_fusion"}


@pytest.mark.parametrize("path", sorted((REPO / "experiments").rglob("*.py")), ids=lambda p: p.name)
def test_shared_module_imports_no_paper(path):
    bad = imported_packages(path.read_text()) & set(registry.PACKAGES)
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}: move the shared need into experiments/ " \
                    "or register it (experiments/registry.py)"
