"""What the docs say is in the repository and agrees with it: every asset list, paper summary or docs/ page a tracked
file names exists; no tracked file points outside the checkout; code and config comments cite the paper or the
official code, never a spec section or an issue; a spec section a README or a paper value names exists; the
Makefile's papers are the registry's; every package README has the same sections; and the READMEs' results are the
blocks `python -m experiments.report` generates from the records, with no number typed beside them."""
import io
import json
import re
import subprocess
import tokenize

import pytest

from experiments import REPO, registry
from experiments.evidence import readme

# a relative path ending in ASSETS.md or SPEC*.md, or one under docs/
CITED = re.compile(r"(?<![\w/.-])((?:\.\./|\./)?(?:[\w-]+/)*(?:ASSETS|SPEC[\w]*)\.md|(?:\.\./)*docs/[\w./-]*\w)")
# "spec §6.2" (a paper value's `where`) or "SPEC.md §6.2" (a README's link to its package's own summary)
SPEC_REF = re.compile(r"\b(?:spec|SPEC\w*\.md) §(\d+)(?:\.(\d+))?", re.IGNORECASE)
# what a reader outside the project cannot follow: a spec section instead of the paper, the tracker
OUTSIDE = re.compile(r"\bspec §|\bissue #?\d+|shared/papers", re.IGNORECASE)
HEADINGS = (r"How to run", r"Targets, tiers and stand-ins", r"Deviations from the papers?",
            r"Paper inconsistencies \(recorded, not fixed\)", r"Results")
TYPED_NUMBER = re.compile(r"\d\.\d|\d ?%|\d ?×|\d ?min\b")


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
    assert SPEC_REF.findall("where: \"spec §1.4 ([R])\"; ([SPEC_P32.md §5](SPEC_P32.md)); SPEC.md §6") == \
        [("1", "4"), ("5", ""), ("6", "")]


def test_nothing_points_outside_the_checkout():
    bad = [f"{p}:{n}" for p in tracked(".py", ".yaml", ".md", ".toml", ".cfg", ".txt", "Makefile")
           for n, line in enumerate((REPO / p).read_text(encoding="utf-8").splitlines(), 1)
           if "../shared" in line or re.search(r"(?<![\w-])shared/", line)]
    assert not bad, "files outside the repository are not there for a user: " + ", ".join(bad)


def yaml_comment(line: str) -> str:
    """The comment of a YAML line: a whole-line comment, or what follows ' #' outside quotes."""
    if line.lstrip().startswith("#"):
        return line
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and i and line[i - 1] == " ":
            return line[i:]
    return ""


def test_yaml_comment_reads_only_the_comment():
    assert yaml_comment("  - {where: \"spec §1 # x\"}  # spec §2") == "# spec §2"
    assert yaml_comment("# spec §3") == "# spec §3" and yaml_comment("a: 'b#c'") == ""


def python_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source: the prose a reader follows. Other strings are
    left out: a table note a report renders into results/ is evidence, as committed."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    code = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    ends = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)  # a statement alone on its line(s)
    docs = [tok for i, tok in enumerate(code) if tok.type == tokenize.STRING and (i == 0 or code[i - 1].type in ends)
            and i + 1 < len(code) and code[i + 1].type == tokenize.NEWLINE]
    return sorted([(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
                  + [(t.start[0], t.string) for t in docs])


def test_python_prose_is_comments_and_docstrings_only():
    source = ('"""doc spec §1"""\nx = "note spec §2"  # spec §3\ndef f():\n    """spec §4"""\n'
              'notes = ["a",\n         "spec §6",\n         ]\n')
    assert [n for n, text in python_prose(source) if OUTSIDE.search(text)] == [1, 2, 4]


def test_code_and_config_comments_cite_the_paper_not_a_spec_section_or_an_issue():
    """Comments and docstrings of Python files, comments of YAML files and the Makefile. Values are evidence: a
    paper value's `where`, a claim's wording and a report's table notes render into results/ as committed."""
    bad = []
    for path in tracked(".py", ".yaml", "Makefile"):
        source = (REPO / path).read_text(encoding="utf-8")
        if path.endswith(".py"):
            prose = python_prose(source)
        else:
            prose = [(n, yaml_comment(line) if path.endswith(".yaml") else line)
                     for n, line in enumerate(source.splitlines(), 1)]
        bad += [f"{path}:{n}: {text.strip()[:100]}" for n, text in prose if OUTSIDE.search(text)]
    assert not bad, "cite the paper ([P §x], [P Table y]) or the official code ([R]) instead:\n" + "\n".join(bad)


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


@pytest.mark.parametrize("paper", registry.PACKAGES)
def test_every_spec_section_a_papers_files_name_exists(paper):
    specs = sorted((REPO / paper).glob("SPEC*.md"))
    assert specs, f"{paper}/ has no SPEC*.md"
    have = set().union(*(sections(s.read_text(encoding="utf-8")) for s in specs))
    cited = set()
    for path in tracked(".py", ".yaml", ".md"):
        if path.startswith((f"{paper}/", f"tests/{paper}/", f"conf/experiment/{paper}/")):
            text = (REPO / path).read_text(encoding="utf-8")
            cited |= {(int(n), int(m) if m else None, path) for n, m in SPEC_REF.findall(text)}
    unknown = sorted(f"§{n}{f'.{m}' if m else ''} ({p})" for n, m, p in cited if (n, m) not in have)
    assert not unknown, f"{paper}: cited sections missing from its SPEC*.md: {unknown}"


# ---- the Makefile ------------------------------------------------------------------------------------------------

def test_the_makefiles_papers_are_the_registered_papers_with_a_cpu_tier():
    from scripts import tier
    line = next(x for x in (REPO / "Makefile").read_text().splitlines() if x.startswith("PAPERS "))
    listed = line.split(":=", 1)[1].split()
    assert len(listed) == len(set(listed))
    assert set(listed) == {p for p in registry.PAPERS if tier.experiments(p, "cpu")}


# ---- the READMEs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("paper", registry.PACKAGES)
def test_every_package_readme_has_the_same_sections(paper):
    headings = [line[3:] for line in (REPO / paper / "README.md").read_text().splitlines() if line.startswith("## ")]
    assert len(headings) == len(HEADINGS) and all(re.fullmatch(h, got) for h, got in zip(HEADINGS, headings)), \
        f"{paper}/README.md: '## ' sections {headings}; expected {list(HEADINGS)} (others go under them as ###)"


@pytest.mark.parametrize("paper", registry.PACKAGES)
def test_every_module_a_package_readme_lists_exists(paper):
    rows = [line.split("|")[1] for line in (REPO / paper / "README.md").read_text().splitlines()
            if line.startswith("| `")]
    named = {m for cell in rows for m in re.findall(r"`(\w+\.py)`", cell)}
    assert not sorted(m for m in named if not (REPO / paper / m).is_file()), f"{paper}/README.md lists modules it lacks"


# the READMEs with a generated block (readme.expected's keys, which take seconds to compute: not at collection)
READMES = sorted([REPO / "README.md", *(REPO / p / "README.md" for p in registry.PACKAGES)])


@pytest.mark.slow  # a sweep over every case: over 10 s in all
def test_each_readme_holds_the_block_the_records_give():
    """A README whose block differs from results/ was edited by hand or not regenerated: python -m experiments.report
    rewrites it."""
    expected = readme.expected()
    assert sorted(expected) == READMES
    for path in READMES:
        assert readme.block_of(path.read_text(encoding="utf-8")) == expected[path], \
            f"{path.relative_to(REPO)}: run python -m experiments.report"


@pytest.mark.parametrize("path", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_result_is_typed_beside_a_generated_block(path):
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^## Results\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"{path.relative_to(REPO)} has no '## Results' section"
    typed = readme.with_block(m.group(1), [])
    assert not TYPED_NUMBER.findall(typed), f"{path.relative_to(REPO)}: a measured number typed by hand in Results"


def record(exp_id: str, hardware: str, wall: float, status: str = "ok") -> dict:
    return {"exp_id": exp_id, "status": status, "provenance": {"hardware": hardware, "wall_s": wall}}


def test_a_papers_block_follows_its_records_claims_and_experiment_files(tmp_path):
    results, conf = tmp_path / "results", tmp_path / "conf"
    for i, (exp, hw, wall, status) in enumerate([("demo/a_cpu", "cpu", 90.0, "ok"), ("demo/a_cpu", "cpu", 30.0, "ok"),
                                                 ("demo/b", "gpu", 7200.0, "ok"), ("demo/b", "gpu", 5.0, "failed")]):
        path = results / "demo" / "runs" / exp.split("/")[1] / hw / f"r{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record(exp, hw, wall, status)))
    (results / "demo" / "tables").mkdir()
    (results / "demo" / "tables" / "t.md").write_text("x")
    (conf / "demo").mkdir(parents=True)
    for name, tier in (("a_cpu", "cpu"), ("b", "offline"), ("c", "hub"), ("smoke", "smoke")):
        (conf / "demo" / f"{name}.yaml").write_text(f"exp_id: demo/{name}\nexperiment: {{tier: {tier}}}\n")
    rows = [{"paper": "demo", "id": "x-holds", "kind": "paper", "scale": "cpu, stand-ins", "verdict": "holds"},
            {"paper": "demo", "id": "x-holds", "kind": "paper", "scale": "cpu, stand-ins", "verdict": "holds"},
            {"paper": "demo", "id": "y", "kind": "target", "scale": "-", "verdict": "not run"}]
    (results / "claims.json").write_text(json.dumps(rows))
    block = readme.paper_block("demo", results, conf=conf)
    assert block[0].startswith("3 run records (cpu 2, gpu 1; Σ wall time cpu 2.0 min, gpu 2.0 h) → 1 table and ")
    assert "2 claim rows" in block[0]  # one per claim and scale, however many comparisons a row has
    assert "- **The paper's claims** (1 row): holds: [x-holds](../results/demo/CLAIMS.md#x-holds)." in block
    assert "- **Our targets** (1 row): not run: [y](../results/demo/CLAIMS.md#y)." in block
    assert block[-1] == "No record yet from 1 experiment file of `conf/experiment/demo/`: GPU tier with the hub: `c`."


def test_writing_a_block_replaces_only_the_block_and_a_readme_without_one_is_refused():
    text = f"# x\n\nprose 1\n\n{readme.BEGIN}\nold\n{readme.END}\n\nafter\n"
    assert readme.with_block(text, ["new", "lines"]) == f"# x\n\nprose 1\n\n{readme.BEGIN}\nnew\nlines\n{readme.END}" \
                                                        "\n\nafter\n"
    with pytest.raises(readme.BlockError):
        readme.block_of("# no block\n")
    with pytest.raises(readme.BlockError):
        readme.block_of(f"{readme.END}\n{readme.BEGIN}\n")
