"""A package report built from no records: what its tests check before the records-driven cells."""


def empty_report(build, out, sections) -> str:
    """The page `build` writes with no run records. Every section in `sections` (their titles) stands as a placeholder
    line `_<title>…_` that says what to run, and none failed to build."""
    text = "\n".join(build([], out))
    assert "could not be built" not in text
    assert [s for s in sections if f"_{s}" not in text] == []
    return text


def verdicts(paper: str, runs: list[dict], out, min_claims: int = 1) -> dict:
    """Claim id -> its evaluation over `runs` (experiments.evidence.verdicts); the paper's claims.yaml parses into at
    least `min_claims` claims."""
    from experiments.evidence.claims import load_claims
    from experiments.evidence.verdicts import evaluate_claims
    assert len(load_claims(paper).claims) >= min_claims
    return {r.claim.id: r for r in evaluate_claims(paper, runs, out)}


def assert_decided_parts_hold(results: dict, ids) -> None:
    """Each claim's decided parts all hold, and the claim reads "holds" or, when some parts were not run or cannot be
    tested here, "partly tested" (never "holds" on part of the evidence)."""
    for cid in ids:
        r = results[cid]
        decided = [o.verdict for o in r.outcomes if o.verdict not in ("not run", "not testable here")]
        assert decided and set(decided) == {"holds"} and r.verdict in ("holds", "partly tested"), \
            (cid, r.verdict, r.reason, [(o.label, o.verdict, o.reason, o.unfit) for o in r.outcomes])
