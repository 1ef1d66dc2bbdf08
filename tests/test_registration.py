"""Pre-registration of claims (experiments/evidence/registration.py), on throwaway git repositories: which commit
registers a definition, writing `registered:` lines, registrations committed with their records, post hoc records."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from experiments.evidence import registration

CLAIMS = """\
# a hand-written registry: these comments must survive --write
paper: p
claims:
  - id: c1
    kind: paper
    claim: "A beats B."  # the wording is not the definition
    paper: {where: "Table 1"}
    compare:
      label: a vs b
      metric: objective
      a: {method.variant: a}
      b: {method.variant: b}
      pair_by: [seed]
      test: {kind: difference, at_least: 1.0}
    needs_signal: false

  # the second claim
  - id: c2
    kind: paper
    claim: "A is positive."
    paper: {where: "Table 2"}
    compare:
      metric: objective
      a: {method.variant: a}
      test: {kind: direction, sign: "+"}
    needs_signal: true
"""
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args], env=ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit(repo: Path, msg: str, *paths: str) -> str:
    git(repo, "add", *paths)
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD")


def write(repo: Path, text: str) -> str:
    (repo / "p").mkdir(exist_ok=True)
    (repo / "p" / "claims.yaml").write_text(text)
    return "p/claims.yaml"


def record(repo: Path, name: str, variant: str, sha: str | None = None) -> str:
    """A run record the claims select (method.variant a or b), under results/p/runs/."""
    rel = f"results/p/runs/art/cpu/{name}.json"
    rec = {"run_id": name, "paper": "p", "exp_id": "p/art", "status": "ok", "config_hash": name,
           "config": {"method": {"variant": variant}, "seed": 0},
           "metrics": {"eval/accuracy": 0.9}, "provenance": {"git_sha": sha, "created_at": "2026-01-01T00:00:00"}}
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(json.dumps(rec))
    return rel


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    registration.clear_caches()
    yield r
    registration.clear_caches()


def test_digest_ignores_wording_and_registered_but_not_the_definition():
    base = {"id": "x", "claim": "one", "compare": {"label": "l", "test": {"kind": "exact", "target": 1.0}},
            "needs_signal": False}
    same = {**base, "claim": "two", "kind": "target", "registered": "abc", "evidence": ["t.md"],
            "paper": {"where": "T"}, "compare": [{"label": "other", "test": {"target": 1, "kind": "exact"}}]}
    assert registration.definition_digest(base) == registration.definition_digest(same)
    assert registration.definition_digest(base) != registration.definition_digest({**base, "needs_signal": True})
    assert registration.definition_digest(base) != registration.definition_digest({**base, "exact": "deterministic"})
    assert registration.definition_digest(base) != registration.definition_digest(
        {**base, "compare": {"test": {"kind": "exact", "target": 2.0}}})


def test_registered_at_skips_wording_edits_and_moves_with_the_definition(repo):
    first = commit(repo, "claims", write(repo, CLAIMS))
    assert registration.registered_at("p", "c1", repo) == first
    # wording, a comment, a label and a `kind:` line: the definition stays, so does its registration
    edited = CLAIMS.replace('"A beats B."', '"A beats B by a point."').replace("label: a vs b", "label: A vs B")
    edited = edited.replace("kind: paper", "kind: target  # ours", 1).replace("# the second", "# the 2nd")
    wording = commit(repo, "wording", write(repo, edited))
    assert wording != first
    assert registration.registered_at("p", "c1", repo) == first
    assert registration.registered_at("p", "c2", repo) == first
    # a threshold is a definition: c1 moves to its commit, c2 stays
    moved = commit(repo, "threshold", write(repo, edited.replace("at_least: 1.0", "at_least: 2.0")))
    assert registration.registered_at("p", "c1", repo) == moved
    assert registration.registered_at("p", "c2", repo) == first
    # back to the old threshold: registered at the commit that restored it, not at the first
    back = commit(repo, "threshold back", write(repo, edited))
    assert registration.registered_at("p", "c1", repo) == back
    # an uncommitted definition has no registration yet; a new claim neither
    write(repo, edited.replace('sign: "+"', 'sign: "-"'))
    assert registration.registered_at("p", "c2", repo) is None
    assert registration.registered_at("p", "c1", repo) == back
    assert registration.registrations("p", repo, working=False)["c2"] == first  # HEAD's definitions


def test_write_refuses_a_dirty_file_and_keeps_comments(repo, capsys):
    rel = write(repo, CLAIMS)
    assert registration.main(["--write", "p"], repo=repo) == 2  # never committed
    first = commit(repo, "claims", rel)
    write(repo, CLAIMS + "\n# an uncommitted edit\n")
    assert registration.main(["--write", "p"], repo=repo) == 2
    err = capsys.readouterr().err
    assert "p/claims.yaml" in err and "commit" in err
    assert "registered:" not in (repo / rel).read_text()

    write(repo, CLAIMS)
    assert registration.main(["p"], repo=repo) == 1  # nothing stored yet
    assert registration.main(["--write", "p"], repo=repo) == 0
    text = (repo / rel).read_text()
    assert f"  - id: c1\n    kind: paper\n    registered: {first[:registration.SHORT]}\n    claim:" in text
    assert f"  - id: c2\n    kind: paper\n    registered: {first[:registration.SHORT]}\n" in text
    assert "\n".join(s for s in text.splitlines() if "registered:" not in s) + "\n" == CLAIMS  # only lines added
    assert registration.main(["p"], repo=repo) == 0
    commit(repo, "register", rel)  # only `registered:` changed: the registration stays
    assert registration.registered_at("p", "c1", repo) == first
    assert registration.main(["p"], repo=repo) == 0

    commit(repo, "threshold, not re-registered", write(repo, text.replace("at_least: 1.0", "at_least: 0.5")))
    capsys.readouterr()
    assert registration.main(["p"], repo=repo) == 1
    out = capsys.readouterr().out
    assert "p/c1:" in out and "differs" in out
    assert registration.main(["--write", "p"], repo=repo) == 0  # replaces the stale line, adds none
    new = (repo / rel).read_text()
    assert new.count("registered:") == 2 and new.count(first[:registration.SHORT]) == 1


def test_write_after_kind_and_replaces_a_stale_line():
    stale = "  - id: c1\n    registered: 0000000  # old\n    kind: paper\n"
    text = CLAIMS.replace("  - id: c1\n    kind: paper\n", stale)
    text = text.replace("  - id: c2\n    kind: paper\n    claim:", "  - kind: paper\n    id: c2\n    claim:")
    new = registration.write_registered(text, {"c1": "123456789012", "c2": "abcdefabcdef"})
    assert '  - id: c1\n    kind: paper\n    registered: "123456789012"\n    claim:' in new  # quoted: not a number
    assert "0000000" not in new and "  - kind: paper\n    id: c2\n    registered: abcdefabcdef\n" in new
    with pytest.raises(registration.RegistrationError, match="no `id:` line"):
        registration.write_registered(CLAIMS, {"c3": "abcdefabcdef"})


def test_check_same_commit_flags_a_threshold_committed_with_its_records(repo):
    rel = write(repo, CLAIMS)
    base = commit(repo, "claims", rel)
    record(repo, "b0", "b", base)
    commit(repo, "b arm", "results")
    assert registration.check_same_commit("p", repo) == []
    together = commit(repo, "threshold and the a record together",
                      write(repo, CLAIMS.replace("at_least: 1.0", "at_least: 0.1")), record(repo, "a0", "a", base))
    problems = registration.check_same_commit("p", repo, repo / "results")
    assert len(problems) == 1 and problems[0].startswith(f"p/c1: registered in {together[:registration.SHORT]}")
    assert "results/p/runs/art/cpu/a0.json" in problems[0]
    # c2 rests on the same record but was registered before it: not flagged; c1 apart from its records passes
    commit(repo, "threshold alone", write(repo, CLAIMS.replace("at_least: 1.0", "at_least: 0.2")))
    assert registration.check_same_commit("p", repo) == []


def test_post_hoc_names_records_made_before_the_registration(repo):
    older = commit(repo, "code", write(repo, "paper: p\nclaims: []\n"))
    reg = commit(repo, "claims", write(repo, CLAIMS))
    later = commit(repo, "more", write(repo, CLAIMS + "# later\n"))

    def at(*shas):
        return [{"provenance": {"git_sha": s}} for s in shas]
    assert registration.post_hoc(at(reg, later, reg), reg, repo) is None
    assert registration.post_hoc(at(reg[:12]), reg[:12], repo) is None  # abbreviated shas
    assert registration.post_hoc([], reg, repo) is None
    why = registration.post_hoc(at(older, later, older), reg[:registration.SHORT], repo)
    assert why == f"2 of 3 records predate the claim's registration ({reg[:registration.SHORT]})"
    unknown = registration.post_hoc(at("f" * 40, reg, None), reg, repo)
    assert unknown.startswith("2 of 3 records at an unknown commit")
    assert "unknown commit" in registration.post_hoc(at(reg), "f" * 40, repo)
    assert "not committed" in registration.post_hoc(at(reg), None, repo)


def test_no_history_no_verdict(repo, tmp_path):
    reg = commit(repo, "claims", write(repo, CLAIMS))
    commit(repo, "more", write(repo, CLAIMS + "# more\n"))
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    plain = tmp_path / "plain"
    (plain / "p").mkdir(parents=True)
    (plain / "p" / "claims.yaml").write_text(CLAIMS)
    for where in (shallow, plain):
        assert not registration.history_available(where)
        assert registration.post_hoc([{"provenance": {"git_sha": "0" * 40}}], reg, where) is None
        assert registration.registered_at("p", "c1", where) is None
        assert registration.main(["p"], repo=where) == 0  # says 'registration not checked'
    assert registration.history_available(repo)


def test_every_papers_claims_history_can_be_walked():
    if not registration.history_available(registration.REPO):
        pytest.skip("this checkout is shallow or has no git history")
    papers = registration.papers_in()
    assert len(papers) >= 6
    for paper in papers:
        # HEAD's definitions: working edits are not committed yet
        regs = registration.registrations(paper, working=False)
        assert regs, paper
        assert None not in regs.values(), (paper, [c for c, r in regs.items() if r is None])


def test_every_claim_is_registered_at_the_commit_that_set_its_definition_apart_from_its_records():
    """A threshold or metric changed together with the records it rests on fails here, as does a definition edited
    after its registration (commit it, then `python -m experiments.evidence.registration --write`)."""
    if not registration.history_available(registration.REPO):
        pytest.skip("this checkout is shallow or has no git history")
    assert registration.main([]) == 0
    for paper in registration.papers_in():
        assert registration.check_same_commit(paper) == [], paper
