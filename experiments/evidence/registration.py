"""Pre-registration of claims: a claim's definition (its comparisons, `exact` and `needs_signal`) is registered at
the commit that introduced it, read from the git history of `<paper>/claims.yaml`, and a record counts as evidence
made in advance only when its code descends from that commit. A threshold or metric written (or changed) after the
records it is judged on were seen is post hoc: `post_hoc` says so per claim, `check_same_commit` names registrations
committed together with the very records they rest on.

    python -m experiments.evidence.registration [papers...]            # stored `registered:` vs computed (exit 1)
    python -m experiments.evidence.registration --write [papers...]    # write the computed ones (commit claims first)
    python -m experiments.evidence.registration --records [papers...]  # also: post hoc records, same-commit ones

Wording (`claim`, comments, comparison labels), `kind`, `paper`, `evidence` and `registered` itself are not part of
the definition: editing them keeps the registration. Each historical version is read with one `git show`, cached per
(file, commit); commits and ancestry never change, so those caches hold for the whole process.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from experiments import REPO

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built in: the pure-Python parser is ~10x slower
SHORT = 12  # characters of a commit written as `registered:`
DEFINITION_KEYS = ("compare", "exact", "needs_signal", "requires")


class RegistrationError(RuntimeError):
    """A registration that cannot be computed or written as asked; the message names the file and the fix."""


# ---------------------------------------------------------------- the definition

def _canon(v: Any) -> Any:
    """JSON-ready and free of cosmetic differences: 1.0 reads as 1, mapping keys as strings."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return v


def definition_digest(raw_claim: dict) -> str:
    """sha256 (16 hex characters) of what decides the claim: `compare` (one mapping or a list of them, read as a
    list; each comparison's `label` left out, being a name), `exact` and `needs_signal`, missing keys as null."""
    compare = raw_claim.get("compare")
    if isinstance(compare, dict):
        compare = [compare]
    if isinstance(compare, list):
        compare = [{k: v for k, v in c.items() if k != "label"} if isinstance(c, dict) else c for c in compare]
    body = {"compare": compare, **{k: raw_claim.get(k) for k in DEFINITION_KEYS if k != "compare"}}
    text = json.dumps(_canon(body), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _digests(doc: Any) -> dict[str, str]:
    """claim id -> definition digest of a parsed claims.yaml ({} when it is not a registry)."""
    claims = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(claims, list):
        return {}
    return {c["id"]: definition_digest(c) for c in claims if isinstance(c, dict) and isinstance(c.get("id"), str)}


# ---------------------------------------------------------------- git

def _git(repo: Path | str, *args: str) -> subprocess.CompletedProcess | None:
    """The finished git command (any exit status), or None when git cannot run at all."""
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None


def _out(repo: Path | str, *args: str) -> str | None:
    p = _git(repo, *args)
    return p.stdout if p is not None and p.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def _availability(repo: str) -> str | None:
    """Why this checkout's history cannot date registrations (None: it can)."""
    out = _out(repo, "rev-parse", "--show-toplevel", "--is-shallow-repository")
    if out is None:
        return f"{repo} is not a git checkout (or git is not installed)"
    top, shallow = (out.split("\n") + [""])[:2]
    if Path(top).resolve() != Path(repo).resolve():
        return f"{repo} is not the top of its git checkout ({top})"
    if shallow.strip() == "true":
        return f"{repo} is a shallow clone: its history is cut (git fetch --unshallow dates registrations)"
    return None


def history_available(repo: Path | str = REPO) -> bool:
    """Whether `repo` is a full git checkout whose history dates registrations; where not (a copy without .git, a
    shallow clone), registered_at and post_hoc answer None and a report should say 'registration not checked'."""
    return _availability(str(Path(repo).resolve())) is None


def _head(repo: str) -> str | None:
    out = _out(repo, "rev-parse", "--verify", "-q", "HEAD")
    return out.strip() if out else None


@functools.lru_cache(maxsize=None)
def _log(repo: str, rel: str, head: str) -> tuple[str, ...]:
    """The commits that changed `rel` up to `head`, newest first."""
    out = _out(repo, "log", "--format=%H", head, "--", rel)
    return tuple(out.split()) if out else ()


@functools.lru_cache(maxsize=None)
def _version(repo: str, rel: str, sha: str) -> dict[str, str]:
    """claim id -> digest of `rel` as committed at `sha` ({} when absent or not valid YAML there)."""
    text = _out(repo, "show", f"{sha}:{rel}")
    try:
        return _digests(_load(text)) if text is not None else {}
    except yaml.YAMLError:
        return {}


@functools.lru_cache(maxsize=None)
def _commit_files(repo: str, sha: str) -> frozenset[str]:
    """Repo-relative paths the commit added or changed (a merge: against its first parent)."""
    out = _out(repo, "show", "-z", "--name-only", "--format=", "--diff-merges=first-parent", sha)
    return frozenset(p.strip("\n") for p in (out or "").split("\0") if p.strip("\n"))


@functools.lru_cache(maxsize=None)
def _ancestors(repo: str, sha: str) -> frozenset[str]:
    """Every commit `sha` descends from, itself included."""
    out = _out(repo, "rev-list", sha)
    return frozenset(out.split()) if out else frozenset()


@functools.lru_cache(maxsize=None)
def _is_ancestor(repo: str, older: str, newer: str) -> bool:
    p = _git(repo, "merge-base", "--is-ancestor", older, newer)
    return p is not None and p.returncode == 0  # 1: not an ancestor; 128: a commit this clone does not have


@functools.lru_cache(maxsize=None)
def _resolve(repo: str, rev: str) -> str | None:
    out = _out(repo, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}")
    return out.strip() if out else None


def clear_caches() -> None:
    """Forget cached answers about checkouts (tests that rewrite one in place)."""
    for f in (_availability, _log, _version, _commit_files, _ancestors, _is_ancestor, _resolve, _relation):
        f.cache_clear()


# ---------------------------------------------------------------- registrations

def _rel(paper: str) -> str:
    return f"{paper}/claims.yaml"


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)


def _read_working(path: Path) -> Any:
    try:
        return _load(path.read_text())
    except FileNotFoundError as e:
        raise RegistrationError(f"{path}: no claims file") from e
    except yaml.YAMLError as e:
        raise RegistrationError(f"{path}: not valid YAML, so its definitions cannot be dated: {e}") from e


def registrations(paper: str, repo: Path | str = REPO, working: bool = True) -> dict[str, str | None]:
    """claim id -> the commit (full sha) that introduced the claim's current definition: the oldest commit of
    `<paper>/claims.yaml` from which every later version has the same digest. The current definition is the working
    file's (working=False: HEAD's); None for a claim whose current definition is not committed, and for every claim
    when the history is unavailable (history_available)."""
    repo = str(Path(repo).resolve())
    rel = _rel(paper)
    head = _head(repo) if history_available(repo) else None
    current = _digests(_read_working(Path(repo) / rel)) if working else \
        _version(repo, rel, head) if head else {}
    if head is None:
        return dict.fromkeys(current)
    shas = _log(repo, rel, head)
    out: dict[str, str | None] = {}
    for cid, digest in current.items():
        reg = None
        for sha in shas:  # newest first: stop at the first version that defines the claim otherwise (or lacks it)
            if _version(repo, rel, sha).get(cid) != digest:
                break
            reg = sha
        out[cid] = reg
    return out


def registered_at(paper: str, claim_id: str, repo: Path | str = REPO) -> str | None:
    """The commit (full sha) that introduced the claim's current definition; None when the working file's
    definition is not committed yet (or the history is unavailable)."""
    return registrations(paper, repo).get(claim_id)


# ---------------------------------------------------------------- records made before the registration

@functools.lru_cache(maxsize=None)
def _relation(repo: str, sha: Any, reg: str) -> str:
    """'after' (the registration commit or a descendant), 'before' (a strict ancestor) or 'unknown'."""
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{7,40}", sha):
        return "unknown"
    full = sha if len(sha) == 40 else _resolve(repo, sha)
    if full is None:
        return "unknown"
    if full == reg:
        return "after"
    if full in _ancestors(repo, reg):
        return "before"
    return "after" if _is_ancestor(repo, reg, full) else "unknown"


def post_hoc(records: list[dict], registered: str | None, repo: Path | str = REPO) -> str | None:
    """None when every record's code (provenance.git_sha) is the registration commit or a descendant of it: the
    claim was defined before the run. Otherwise why not, in a few words: records at a strict ancestor predate the
    registration; a commit neither before nor after it (another branch, unknown to this clone, not recorded) is
    named an unknown commit and counts too. None as well when the history is unavailable (history_available)."""
    repo = str(Path(repo).resolve())
    if not records or not history_available(repo):
        return None
    n = len(records)
    if registered is None:
        return f"the claim's definition is not committed (not registered): all {n} records predate it"
    reg = _resolve(repo, str(registered))
    if reg is None:
        return f"registration {registered} is not a commit of this clone: all {n} records at an unknown commit"
    kinds = [_relation(repo, (r.get("provenance") or {}).get("git_sha"), reg) for r in records]
    before, unknown = kinds.count("before"), kinds.count("unknown")
    parts = [f"{before} of {n} records predate the claim's registration ({reg[:SHORT]})"] * bool(before)
    parts += [f"{unknown} of {n} records at an unknown commit (neither before nor after {reg[:SHORT]})"] * bool(unknown)
    return "; ".join(parts) or None


def claim_records(claim, runs: list[dict]) -> list[dict]:
    """The records a claim's comparisons select (either arm), each once."""
    from experiments.evidence.records import SelectError, matches, select

    out: dict[int, dict] = {}
    for comp in claim.comparisons:
        for sel in (comp.a, comp.b):
            if sel is None:
                continue
            try:
                chosen = select(runs, sel)
            except SelectError:  # a selection that cannot be made: every record the selector names
                chosen = [r for r in runs if matches(r, sel)]
            out.update((id(r), r) for r in chosen)
    return list(out.values())


def _registry(path: Path):
    from experiments.evidence.claims import ClaimsError, load_claims  # imports scipy: only where records are read

    try:
        return load_claims(path)
    except ClaimsError as e:
        raise RegistrationError(str(e)) from e


def _runs_with_paths(results_dir: Path, papers) -> tuple[list[dict], dict[int, Path]]:
    """The records experiments.results.load_runs reads (results/<paper>/runs/**.json), with the file of each."""
    from experiments.results import read_json

    runs, where = [], {}
    for paper in papers:
        for p in sorted((Path(results_dir) / paper / "runs").rglob("*.json")):
            r = read_json(p)
            if r is not None:
                runs.append(r)
                where[id(r)] = p
    return runs, where


def check_same_commit(paper: str, repo: Path | str = REPO, results_dir: Path | str | None = None) -> list[str]:
    """One line per claim whose registration commit also added or changed a record file the claim rests on (the
    records its comparisons select, baselines_from included): its definition was set with those records in view."""
    repo = Path(repo).resolve()
    if not history_available(repo):
        return []
    results_dir = Path(results_dir) if results_dir is not None else repo / "results"
    registry = _registry(repo / _rel(paper))
    regs = registrations(paper, repo)
    runs, where = _runs_with_paths(results_dir, [paper, *registry.baselines_from])
    problems = []
    for claim in registry.claims:
        reg = regs.get(claim.id)
        if reg is None:
            continue
        recs = claim_records(claim, runs)
        rels = {os.path.relpath(where[id(r)].resolve(), repo) for r in recs}
        hit = sorted(rels & _commit_files(str(repo), reg))
        if hit:
            problems.append(
                f"{paper}/{claim.id}: registered in {reg[:SHORT]}, the commit that also added or changed {len(hit)} of "
                f"the {len(recs)} records it rests on ({hit[0]}{', ...' if len(hit) > 1 else ''}): its definition was "
                f"set with them in view; rerun them at a later commit")
    return problems


# ---------------------------------------------------------------- writing `registered:` lines

_KEY = re.compile(r"(?P<key>[A-Za-z_][\w-]*):(?:\s|$)")


def _sha_scalar(sha: str) -> str:
    """The sha as a YAML scalar that reads back as the same string (an all-digit sha would read as a number)."""
    return sha if yaml.safe_load(f"k: {sha}")["k"] == sha else json.dumps(sha)


def _items(lines: list[str], path: Path) -> list[tuple[int, int, int]]:
    """(first line, end line, key indent) of each item of the top-level `claims:` block list."""
    def fail(msg):
        raise RegistrationError(f"{path}: {msg}; write registered: lines by hand, or make `claims:` a block list "
                                f"of block mappings ('  - id: ...')")
    start = next((i for i, s in enumerate(lines) if re.fullmatch(r"claims:\s*(#.*)?", s.rstrip("\r\n"))), None)
    if start is None:
        fail("no top-level `claims:` line")
    starts, indent, end = [], None, len(lines)
    for i in range(start + 1, len(lines)):
        s = lines[i].rstrip("\r\n")
        body = s.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        ind = len(s) - len(body)
        if indent is None:
            indent = ind
        if ind < indent or (ind == indent and not body.startswith("-")):
            end = i
            break
        if ind == indent:
            m = re.match(r"-( +)(?=[A-Za-z_])", body)
            if not m:
                fail(f"line {i + 1} starts a claim that is not a block mapping")
            starts.append((i, ind + 1 + len(m.group(1))))
    return [(i, starts[j + 1][0] if j + 1 < len(starts) else end, k) for j, (i, k) in enumerate(starts)]


def _key_at(line: str, indent: int, first: bool) -> str | None:
    """The mapping key this line starts at the item's key indent (the first line: after its '- ')."""
    s = line.rstrip("\r\n")
    if not first and (len(s) - len(s.lstrip(" ")) != indent):
        return None
    m = _KEY.match(s[indent:] + " ")
    return m.group("key") if m else None


def write_registered(text: str, regs: dict[str, str], path: Path | str = "<claims>") -> str:
    """`text` (a claims.yaml) with a `registered: <sha>` line in each claim whose id `regs` names, replacing any
    such line, placed right after the claim's id (and a directly following `kind:`) at the same indentation; every
    other line, comments included, is kept as it is. The result must parse to the same registry with only
    `registered` changed, else RegistrationError."""
    path = Path(path)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    out, done = [], set()
    prev = 0
    for first, end, k in _items(lines, path):
        out += lines[prev:first]
        block = lines[first:end]
        keys = [_key_at(s, k, j == 0) for j, s in enumerate(block)]
        drop = [j for j, key in enumerate(keys) if key == "registered"]
        if any(j + 1 < len(block) and block[j + 1].strip() and not block[j + 1].lstrip().startswith("#")
               and len(block[j + 1]) - len(block[j + 1].lstrip(" ")) > k for j in drop):
            raise RegistrationError(f"{path}: a `registered:` value spans lines; make it one line")
        ids = [j for j, key in enumerate(keys) if key == "id"]
        cid = None
        if ids:
            try:
                cid = yaml.safe_load(block[ids[0]].rstrip("\r\n")[k:]).get("id")
            except (yaml.YAMLError, AttributeError):
                cid = None
        if cid not in regs:
            out += block
            prev = end
            continue
        keep = [(s, key) for j, (s, key) in enumerate(zip(block, keys)) if j not in drop]
        at = next(j for j, (_, key) in enumerate(keep) if key == "id") + 1
        while at < len(keep) and keep[at][1] == "kind":
            at += 1
        eol = "\r\n" if keep[at - 1][0].endswith("\r\n") else "\n"
        keep.insert(at, (f"{' ' * k}registered: {_sha_scalar(regs[cid])}{eol}", "registered"))
        out += [s for s, _ in keep]
        done.add(cid)
        prev = end
    out += lines[prev:]
    new = "".join(out)
    want = _load(text)
    for c in want.get("claims") or []:
        if isinstance(c, dict) and c.get("id") in done:
            c["registered"] = regs[c["id"]]
    if _load(new) != want or set(regs) - done:
        missing = sorted(set(regs) - done)
        raise RegistrationError(f"{path}: could not write registered: lines textually"
                                + (f" (no `id:` line found for {missing})" if missing else "")
                                + "; write them by hand")
    return new


# ---------------------------------------------------------------- the command line

def papers_in(repo: Path | str = REPO) -> list[str]:
    """The registered papers with a claims.yaml in `repo`."""
    from experiments.registry import PAPERS  # lazy: the registry imports every package's config
    return sorted(p for p in PAPERS if (Path(repo) / p / "claims.yaml").is_file())


def _dirty(repo: Path, rel: str) -> bool:
    out = _out(repo, "status", "--porcelain", "--", rel)
    return bool(out and out.strip())


def _check(paper: str, repo: Path, records: bool, results_dir: Path) -> tuple[int, int, list[str]]:
    """(claims, claims whose stored registration differs or is missing, lines to print)."""
    path = repo / _rel(paper)
    doc = _read_working(path)
    regs = registrations(paper, repo)
    raw = {c["id"]: c for c in doc.get("claims") or [] if isinstance(c, dict) and isinstance(c.get("id"), str)}
    lines, bad = [], 0
    if records:
        registry = _registry(path)
        runs, _ = _runs_with_paths(results_dir, [paper, *registry.baselines_from])
        by_id = {c.id: claim_records(c, runs) for c in registry.claims}
    for cid, reg in regs.items():
        stored = raw[cid].get("registered")
        stored = None if stored is None else str(stored)
        if reg is None:
            state = "differs: its definition is not committed" if stored else "missing: its definition is not committed"
        elif stored is None:
            state = "missing"
        elif len(stored) >= 7 and reg.startswith(stored):
            state = "ok"
        else:
            state = "differs"
        bad += state != "ok"
        line = f"{paper}/{cid}: registered {stored or '-'}, computed {reg[:SHORT] if reg else '-'}  {state}"
        if records:
            recs = by_id.get(cid, [])
            why = post_hoc(recs, reg, repo)
            line += f"; {len(recs)} records" + (f"; post hoc: {why}" if why else "")
        lines.append(line)
    if records:
        lines += [f"same commit: {p}" for p in check_same_commit(paper, repo, results_dir)]
    return len(regs), bad, lines


def main(argv: list[str] | None = None, repo: Path | str = REPO) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.evidence.registration",
                                description="Compare each claim's stored `registered:` commit with the commit that "
                                            "introduced its current definition (exit 1 when any differs or is missing)"
                                            "; --write writes the computed ones into claims.yaml.")
    p.add_argument("papers", nargs="*", help="paper packages (default: every one with a claims.yaml)")
    p.add_argument("--write", action="store_true",
                   help="write `registered:` lines (claims.yaml must be committed), then commit them")
    p.add_argument("--records", action="store_true",
                   help="also count each claim's records made before its registration, and registrations committed "
                        "together with their records")
    p.add_argument("--results-dir", default=None, help="where the run records are (default: <repo>/results)")
    args = p.parse_args(argv)
    repo = Path(repo).resolve()
    results_dir = Path(args.results_dir) if args.results_dir else repo / "results"
    papers = args.papers or papers_in(repo)
    unknown = [x for x in papers if not (repo / _rel(x)).is_file()]
    if unknown:
        print(f"error: no claims.yaml for {', '.join(unknown)}; papers: {', '.join(papers_in(repo))}", file=sys.stderr)
        return 2
    why = _availability(str(repo))
    if why:
        print(f"registration not checked: {why}", file=sys.stderr)
        return 2 if args.write else 0
    try:
        if args.write:
            dirty = [_rel(x) for x in papers if _dirty(repo, _rel(x))]
            if dirty:
                print(f"error: {', '.join(dirty)} has uncommitted changes; a definition is registered at the commit "
                      f"that holds it: commit it first (git add {' '.join(dirty)} && git commit), then run --write "
                      f"again", file=sys.stderr)
                return 2
            for paper in papers:
                path = repo / _rel(paper)
                regs = registrations(paper, repo)
                if None in regs.values():
                    raise RegistrationError(f"{path}: claims {[c for c, r in regs.items() if r is None]} have no "
                                            f"commit in the history; commit claims.yaml, then run --write again")
                text = path.read_text()
                new = write_registered(text, {c: r[:SHORT] for c, r in regs.items()}, path)
                if new != text:
                    path.write_text(new)
                    print(f"{_rel(paper)}: wrote registered: for {len(regs)} claims; commit it "
                          f"(git add {_rel(paper)} && git commit)")
        total = bad = 0
        for paper in papers:
            n, b, lines = _check(paper, repo, args.records, results_dir)
            total, bad = total + n, bad + b
            print("\n".join(lines))
    except RegistrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{total} claims in {len(papers)} papers; {total - bad} registered as computed, {bad} missing or differing"
          + (" (python -m experiments.evidence.registration --write writes them)" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
