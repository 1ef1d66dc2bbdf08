"""No module binds one top-level name twice: the later binding silently replaces the earlier one for every function
that reads it (a second `WORD = ...` at the bottom of scripts/datasets_to_jsonl.py would replace the language filter's
regex, and only a fresh `make assets` would notice, as every warm cache keeps passing). Rebinding in a function, a
branch or a `try` is left alone: only the module's own straight-line statements count."""
import ast

import pytest

from experiments import REPO, registry

PACKAGES = ("experiments", "scripts", "tests", *registry.PACKAGES)


def rebound_names(source: str) -> dict[str, list[int]]:
    """Top-level names bound more than once, with the lines that bind them. Annotated declarations without a value
    (`x: int`) bind nothing; `__all__ += [...]` is an update, not a rebinding."""
    lines: dict[str, list[int]] = {}
    packages: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [n.id for t in node.targets for n in ast.walk(t)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]  # not `os` in os.environ[k] = v
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, ast.Import):  # `import a` and `import a.b` both bind the same package `a`
            roots = [a.name.split(".")[0] for a in node.names]
            targets = [a.asname or r for a, r in zip(node.names, roots) if a.asname or r not in packages]
            packages |= {r for a, r in zip(node.names, roots) if not a.asname}
        elif isinstance(node, ast.ImportFrom):
            targets = [a.asname or a.name for a in node.names if a.name != "*"]
        else:
            continue
        for name in targets:
            lines.setdefault(name, []).append(node.lineno)
    return {name: at for name, at in lines.items() if len(at) > 1}


def test_the_check_sees_every_form():  # a package imported twice (`os`, `os.path`) is one binding
    src = ("import re\nWORD = re.compile('a')\ndef f():\n    WORD = 1\nclass C: pass\nx: int\n"
           "WORD = re.compile('b')\ndef C(): pass\nfrom os import path as re\nA, (B, x) = 1, (2, 3)\nx = 4\n"
           "if True:\n    A = 5\nimport os\nimport os.path\n")
    assert rebound_names(src) == {"re": [1, 9], "WORD": [2, 7], "C": [5, 8], "x": [10, 11]}


@pytest.mark.parametrize("path", sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_top_level_name_is_bound_twice(path):
    rebound = rebound_names(path.read_text())
    assert not rebound, f"{path.relative_to(REPO)} binds {rebound} more than once at module level: the later " \
                        "binding silently replaces the earlier one for every function that reads it; rename one"
