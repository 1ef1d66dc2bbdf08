"""What the code and configs cite is in the repository: every asset list, paper summary or docs/ page a tracked file
names exists, no tracked file points outside the checkout, and every "spec §N.M" a paper's files cite is a section
(or a numbered item of one) of that paper's SPEC*.md."""
import re
import subprocess

import pytest

from tests.conftest import REPO

PAPERS = ("recycling", "pema", "intrinsic_dim", "reverse_probing", "layer_fusion", "eat")
# a relative path ending in ASSETS.md or SPEC*.md, or one under docs/
CITED = re.compile(r"(?<![\w/.-])((?:\.\./|\./)?(?:[\w-]+/)*(?:ASSETS|SPEC[\w]*)\.md|(?:\.\./)*docs/[\w./-]*\w)")
SPEC_REF = re.compile(r"\bspec §(\d+)(?:\.(\d+))?", re.IGNORECASE)


def tracked(*suffixes: str) -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    # results/ is generated (from claims.yaml, checked there); this file holds the patterns as examples
    return [p for p in out if p.endswith(suffixes) and not p.startswith("results/") and p != "tests/test_docs.py"
            and (REPO / p).is_file()]


def test_every_cited_asset_list_spec_and_docs_page_exists():
    missing = []
    for path in tracked(".py", ".yaml", ".md", "Makefile"):
        for n, line in enumerate((REPO / path).read_text(encoding="utf-8").splitlines(), 1):
            for ref in CITED.findall(line):
                here = (REPO / path).parent / ref
                if not (here.exists() or (REPO / ref).exists()):  # relative to the file, or to the repository root
                    missing.append(f"{path}:{n}: {ref}")
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_the_citation_pattern_sees_the_forms_in_use():
    line = "(docs/ASSETS.md recipe D); spec [SPEC.md](SPEC.md); layer_fusion/SPEC_P32.md §6; see ../docs/ASSETS.md"
    assert CITED.findall(line) == ["docs/ASSETS.md", "SPEC.md", "SPEC.md", "layer_fusion/SPEC_P32.md",
                                   "../docs/ASSETS.md"]
    assert CITED.findall("(ASSETS.md: no SST-2)") == ["ASSETS.md"]  # bare: must exist beside the file or at the root


def test_nothing_points_outside_the_checkout():
    bad = [f"{p}:{n}" for p in tracked(".py", ".yaml", ".md", ".toml", ".cfg", ".txt", "Makefile")
           for n, line in enumerate((REPO / p).read_text(encoding="utf-8").splitlines(), 1)
           if "../shared" in line or re.search(r"(?<![\w-])shared/", line)]
    assert not bad, "files outside the repository are not there for a user: " + ", ".join(bad)


def sections(spec: str) -> set[tuple[int, int | None]]:
    """(N, None) per "## N." heading, (N, M) per "### N.M" heading and per numbered item "M." of section N."""
    found, current = set(), None
    for line in spec.splitlines():
        if m := re.match(r"## (\d+)\.", line):
            current = int(m[1])
            found.add((current, None))
        elif m := re.match(r"### (\d+)\.(\d+)", line):
            found.add((int(m[1]), int(m[2])))
        elif current is not None and (m := re.match(r"(\d+)\. ", line)):
            found.add((current, int(m[1])))
        elif m := re.match(r"\*\*(\d+)\.(\d+) ", line):  # a bold numbered paragraph: "**1.1 Title.**"
            found.add((int(m[1]), int(m[2])))
    return found


@pytest.mark.parametrize("paper", PAPERS)
def test_every_spec_section_a_papers_files_cite_exists(paper):
    specs = sorted((REPO / paper).glob("SPEC*.md"))
    assert specs, f"{paper}/ has no SPEC*.md"
    have = set().union(*(sections(s.read_text(encoding="utf-8")) for s in specs))
    cited = set()
    for path in tracked(".py", ".yaml", ".md"):
        if path.startswith((f"{paper}/", f"tests/{paper}/", f"conf/experiment/{paper}/")):
            text = (REPO / path).read_text(encoding="utf-8")
            cited |= {(int(n), int(m) if m else None, path) for n, m in SPEC_REF.findall(text)}
    assert cited, f"no file of {paper} cites its spec: the pattern is broken"
    unknown = sorted(f"§{n}{f'.{m}' if m else ''} ({p})" for n, m, p in cited if (n, m) not in have)
    assert not unknown, f"{paper}: cited sections missing from its SPEC*.md: {unknown}"
