"""python -m experiments.report [paper ...]: results/<paper>/runs/**/*.json -> tables/*.{md,csv}, figures/*.{png,csv},
results/<paper>/README.md, and the index results/REPORT.md; for every paper with a claims.yaml,
results/<paper>/CLAIMS.md (each claim, its comparisons and verdicts) and results/claims.json (the same for machines).

Two kinds of tables. Generic per-experiment tables, for the experiments a paper package lists in `GENERIC_TABLES`
(every experiment of a paper without a package, e.g. finetune): one row per group of runs that share every config
field except the seed, and per metric, ours as mean ± sd over seeds (n), the paper's number where
`<paper>/paper_values.yaml` has one, Δ = ours − paper, the hardware; fields that differ inside an experiment (e.g.
method.k) are columns of their own. Then the paper's own tables: `<paper>/report.py`'s `build(runs, out)`, written with
the kit in experiments/evidence/tables.py. tables/ and figures/ are rebuilt from scratch each time: never edit them
by hand."""
from __future__ import annotations

import argparse
import fnmatch
import importlib
import importlib.util
import json
import math
import os
import re
from collections import Counter
from pathlib import Path

from experiments import REPO
from experiments.evidence import selection
from experiments.evidence.signal import SIGNAL_MARGIN_POINTS
from experiments.evidence.stats import example_ci
from experiments.metrics import declared, higher_is_better
from experiments.evidence.paper_values import PaperValues, paper_values
from experiments.identity import published_path
from experiments.results import NOT_GROUPED, legacy_reason, load_runs, read_json
from experiments.files import write_json
from experiments.evidence.tables import (GENERATED, Table, arrow, caps, delta, figure_link, fmt, label, natural, pyplot,
                                save_figure, scale, summary)

SHOWN = ("eval/", "test/", "time/")          # metric families of a generic table
IDENTITY = ("task.name", "model.name", "method.name", "method.variant", "hardware.name")


# ---- generic per-experiment tables -------------------------------------------------------------------------------

def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list) else v
    return out


def _grouped_fields(flat: list[dict]) -> list[str]:
    """Config fields whose value differs between the runs (seed and bookkeeping aside), in natural order."""
    keys = sorted({k for f in flat for k in f}, key=natural)
    keep = [k for k in keys if k.split(".")[0] not in NOT_GROUPED and k not in NOT_GROUPED]
    return [k for k in keep if len({json.dumps(f.get(k), default=str) for f in flat}) > 1]


def varying_columns(runs: list[dict]) -> list[str]:
    """The differing fields a reader must see as columns: those the (task, model, method, variant, hardware) of a row
    does not already determine (method.k when one experiment runs k=2 and k=4)."""
    flat = [flatten(r["config"]) for r in runs]
    fields = _grouped_fields(flat)
    cols = []
    for k in fields:
        if k in IDENTITY:
            continue
        by_identity: dict[tuple, set] = {}
        for f in flat:
            by_identity.setdefault(tuple(f.get(i) for i in IDENTITY), set()).add(json.dumps(f.get(k), default=str))
        if any(len(v) > 1 for v in by_identity.values()):
            cols.append(k)
    return cols


def groups(runs: list[dict]) -> dict[tuple, list[dict]]:
    """Runs that share every config field but the seed (never averaging k=2 with k=4)."""
    flat = [flatten(r["config"]) for r in runs]
    fields = sorted(set(_grouped_fields(flat)) | set(IDENTITY), key=natural)
    out: dict[tuple, list[dict]] = {}
    for r, f in zip(runs, flat):
        out.setdefault(tuple(json.dumps(f.get(k), default=str) for k in fields), []).append(r)
    return out


def _shown(key: str) -> bool:
    """Scores with a direction, the majority-class baseline beside them, and undeclared keys (marked '?')."""
    return key.startswith(SHOWN) and (higher_is_better(key) is not None or not declared(key) or "/majority_" in key)


def _cell(v) -> str:
    return "—" if v is None else str(v)


def generic_table(runs: list[dict], exp_id: str, pv: PaperValues) -> Table:
    """One experiment's runs as a Table (rows per group and metric)."""
    extra = varying_columns(runs)
    t = Table(exp_id.replace("/", "__"), exp_id,
              ["task", "model", "method", *extra, "metric", "ours (mean ± sd, n)", "paper", "Δ", "hardware", "seeds",
               "legacy"], runs=runs)
    via = set()
    rows = []
    for members in groups(runs).values():
        r0, f0 = members[0], flatten(members[0]["config"])
        c = r0["config"]
        metrics = sorted({k for r in members for k in r["metrics"] if _shown(k)} | {"time/wall_s"}, key=natural)
        for key in metrics:
            xs = [(r["metrics"].get(key) if key != "time/wall_s" else r["provenance"].get("wall_s"), r)
                  for r in members]
            xs = [(x, r) for x, r in xs if x is not None]
            if not xs:
                continue
            ci = example_ci(xs[0][1], key) if len(xs) == 1 else None  # one seed: resample its eval examples
            s = summary([x * scale(key) for x, _ in xs], ci=ci and tuple(v * scale(key) for v in ci))
            match = pv.find_for(r0, c["method"].get("variant"), key.split("/", 1)[1]) \
                if not key.startswith("time/") else None
            if match is not None and match.via:
                via.update(match.via)
            paper = None if match is None else match.value
            legacy = sum(1 for _, r in xs if legacy_reason(r))
            rows.append([label(c["task"]["name"], c["task"].get("stand_in_for")),
                         label(c["model"]["name"], c["model"].get("stand_in_for")),
                         f"{c['method']['name']}-{c['method'].get('variant')}", *[_cell(f0.get(k)) for k in extra],
                         key + arrow(key), s, paper, delta(s.mean, paper), c["hardware"]["name"],
                         ",".join(sorted((str(r["config"]["seed"]) for _, r in xs), key=natural)),
                         f"{legacy} of {len(xs)}" if legacy else "no"])
    t.rows = sorted(rows, key=lambda row: natural(tuple(str(x) for x in row[:3 + len(extra) + 1])))
    t.notes = [*caps(runs), *([f"Paper numbers reached through a stand-in: {'; '.join(sorted(via))}."] if via else [])]
    return t


def generic_figure(table: Table, runs: list[dict], out: Path) -> str | None:
    """Each task's objective per row group, mean ± sd over seeds; None (and no file) when nothing is plottable."""
    objectives = {r["config"]["task"]["objective"] for r in runs}
    i_metric, i_ours = table.columns.index("metric"), table.columns.index("ours (mean ± sd, n)")
    rows = [row for row in table.rows if row[i_metric].split(" ")[0] in objectives]
    if not rows:
        return None
    plt = pyplot()
    tasks = sorted({row[0] for row in rows}, key=natural)
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.4 * len(tasks), 3.4), squeeze=False)
    data = []
    for ax, task in zip(axes[0], tasks):
        rs = [row for row in rows if row[0] == task]
        names = [" ".join([row[2], *(f"{c}={v}" for c, v in zip(table.columns[3:i_metric], row[3:i_metric]))])
                 for row in rs]
        ax.bar(range(len(rs)), [row[i_ours].mean for row in rs], yerr=[row[i_ours].sd for row in rs], capsize=3,
               color="#4c72b0")
        ax.set_xticks(range(len(rs)), [n.replace(" ", "\n") for n in names], fontsize=7)
        ax.set_ylabel(rs[0][i_metric], fontsize=8)
        ax.set_title(task.replace(" (", "\n("), fontsize=8)
        data += [{"task": task, "group": n, "metric": row[i_metric].split(" ")[0], "mean": row[i_ours].mean,
                  "sd": row[i_ours].sd, "n": row[i_ours].n} for n, row in zip(names, rs)]
    return save_figure(fig, out, table.name, data)


# ---- one paper ---------------------------------------------------------------------------------------------------

SHARED_REPORTS = {"store": "experiments.bench_store"}  # a results/<paper> whose report lives in experiments/


def _package_report(paper: str):
    if paper in SHARED_REPORTS:
        return importlib.import_module(SHARED_REPORTS[paper])
    if importlib.util.find_spec(paper) is None or importlib.util.find_spec(f"{paper}.report") is None:
        return None
    return importlib.import_module(f"{paper}.report")


def generic_experiments(paper: str, exp_ids: list[str]) -> list[str]:
    """The experiments that get a generic table: those the package's GENERIC_TABLES patterns name, or all of them
    for a paper without a package."""
    pkg = _package_report(paper)
    if pkg is None:
        return exp_ids
    patterns = getattr(pkg, "GENERIC_TABLES", ())
    return [e for e in exp_ids if any(fnmatch.fnmatchcase(e, p) for p in patterns)]


def _group_name(records: list[dict]) -> str:
    c = records[0]["config"]
    return f"{c['task']['name']} {c['model']['name']} {c['method']['name']}-{c['method'].get('variant')}"


def _clean(out: Path) -> None:
    """tables/ and figures/ hold generated files only: drop the previous build, so a table whose runs are gone (or
    a figure no longer drawn) does not linger."""
    for sub, exts in (("tables", (".md", ".csv")), ("figures", (".png", ".csv"))):
        for p in (out / sub).glob("*"):
            if p.is_file() and p.suffix in exts:
                p.unlink()


def report(paper: str, results_dir: Path, rebuild: str | None = None) -> list[str]:
    """Build one paper's tables, figures and README; returns the table files written (tables/<name>.md). `rebuild`:
    the command of a --runs report (a user's own runs), which gives every experiment a generic table and shows every
    swept lr, where the report of results/ shows the lr chosen on dev."""
    runs = [r for r in load_runs(results_dir, paper) if r.get("status") == "ok"]
    out = Path(results_dir) / paper
    _clean(out)
    pv = paper_values(paper)
    legacy = sum(1 for r in runs if legacy_reason(r))
    lines = [f"# {paper}: results", "", GENERATED, "",
             f"Built by `{rebuild or f'python -m experiments.report {paper}'}` from {len(runs)} run records under "
             "`runs/`" + (f" ({legacy} of them legacy: see the note under each table)." if legacy else "."), ""]
    pkg = _package_report(paper)
    if pkg is not None:
        lines += [f"## The paper's tables ({paper}/report.py)", "", *pkg.build(runs, out)]
    exp_ids = sorted({r["exp_id"] for r in runs}, key=natural)
    generic = exp_ids if rebuild else generic_experiments(paper, exp_ids)
    if generic:
        lines += ["## Per-experiment tables", "", "Every metric of each experiment, one row per group of runs that "
                  "share their whole config but the seed.", ""]
    for exp_id in generic:
        # an lr sweep with dev scores is shown at each group's dev-chosen lr (evidence/selection.py); a user's own
        # sweep shows every lr it tried, with the dev choice as a note
        rs = [r for r in runs if r["exp_id"] == exp_id]
        chosen, lr_note = selection.for_table(rs, _group_name)
        if not rebuild:
            rs = chosen
        elif lr_note:
            lr_note = [f"Every swept lr has its own rows here (a --runs report selects nothing); the report of "
                       f"results/ would keep only the {lr_note[0]}"]
        table = generic_table(rs, exp_id, pv)
        table.notes += lr_note
        fig = generic_figure(table, rs, out)
        section = table.write(out)  # [heading, "", links to the .md and .csv, "", table, notes...]
        section[2] += f" · {len(rs)} runs" + (f" · figure: {figure_link(fig)}" if fig else "")
        lines += section
    (out / "README.md").write_text("\n".join(lines).rstrip() + "\n")
    return sorted(p.name for p in (out / "tables").glob("*.md"))


# ---- the index ---------------------------------------------------------------------------------------------------

def papers_with_runs(results_dir: Path) -> list[str]:
    """Papers with run records, and the shared benchmarks whose numbers are still only a committed benchmark.json."""
    have = {p.parent.name for p in Path(results_dir).glob("*/runs") if any(p.rglob("*.json"))}
    return sorted(have | {p for p in SHARED_REPORTS if (Path(results_dir) / p / "benchmark.json").is_file()})


def papers_section(results_dir: Path, built: dict[str, list[str]]) -> list[str]:
    lines = ["## Papers", "", "Each README: ours (mean ± sd over seeds) beside the paper's number; CLAIMS.md: every "
             "claim.", ""]
    for paper, tables in sorted(built.items()):
        claims = Path(results_dir) / paper / "CLAIMS.md"
        lines.append(f"- [{paper}]({paper}/README.md): {len(tables)} table{'s' * (len(tables) != 1)}"
                     + (f" · [claims]({paper}/CLAIMS.md)" if claims.is_file() else ""))
    return lines


def benchmarks_section(results_dir: Path) -> list[str]:
    benches = sorted(Path(results_dir).glob("*/tables/benchmark_*.md"))
    if not benches:
        return []
    return ["## Benchmarks", "", "Ratios measured side by side in one process: " + ", ".join(
        f"[{b.parent.parent.name}: {b.stem}]({b.parent.parent.name}/tables/{b.name})" for b in benches) + "."]


# ---- the claims: REPORT.md's summary and index, results/<paper>/CLAIMS.md, results/claims.json ------------------

REPORT_BYTES = 15_000  # REPORT.md is read as one page: past this, the index keeps the paper's claims, then gets cut
SHORT = {"holds": "holds", "does not hold": "fails", "inconclusive": "open", "partly tested": "partly",
         "not testable here": "n/t", "not run": "not run"}
KIND_TITLES = {"paper": "The paper's claims", "target": "Our targets", "premise": "Premise checks",
               "by-construction": "Holds by construction", "implementation": "Implementation checks"}
KIND_WORDS = {"paper": "paper claim", "target": "target of ours", "premise": "premise check",
              "by-construction": "holds by construction", "implementation": "implementation check"}
KIND_TAGS = {"target": "target", "premise": "premise", "by-construction": "by constr.", "implementation": "impl."}
OPEN = ("not testable here", "not run")  # rows the index collapses to one line per reason class
ORDER = ("does not hold", "holds", "partly tested", "inconclusive", *OPEN)  # the index: failures first


def _num(x, ref=None, sign: bool = False) -> str:
    """A number with decimals set by the magnitude of `ref` (default x), so an estimate and its interval match."""
    if x is None or not math.isfinite(x):
        return "n/a"
    r = abs(x if ref is None or not math.isfinite(ref) else ref)
    digits = 0 if r >= 100 else 1 if r >= 10 else 2 if r >= 0.01 or r == 0 else min(8, 1 - math.floor(math.log10(r)))
    if round(x, digits) == 0:
        x = 0.0  # no "-0.00"
    return fmt(float(x), digits, sign=sign)


def _md(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _anchor(text: str) -> str:
    """The id GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _hw(row) -> str:
    return row.scale.split(",")[0].split(";")[0].strip() if row.scale not in ("", "-") else "—"


def _paper_scale(row) -> bool:
    return row.scale.split(";")[0].strip().endswith("paper scale")


def _comparison(row, o):
    """The registry's comparison behind an outcome: by label, or by position when every comparison has one."""
    comps = row.claim.comparisons
    same = [c for c in comps if c.label == o.label]
    if len(same) == 1:
        return same[0]
    if len(row.outcomes) == len(comps):
        return next((c for c, x in zip(comps, row.outcomes) if x is o), None)
    return None


def statistic(row, o) -> str:
    """What an outcome's estimate is, in words and units: the evaluator's words, else read off its comparison."""
    if o.statistic:
        return o.statistic
    c = _comparison(row, o)
    if c is None:
        return "estimate"
    if c.test.kind == "correlation":
        return "r (Pearson)"
    metric = c.metric or "objective"
    units = " points" if c.units == "points" else ""
    if c.test.kind == "spread":
        return f"max − min over {c.across} ({metric}{units})"
    if c.statistic == "value":
        return f"{metric}{units}"
    b = "paper" if c.expected is not None and c.b is None else "b"
    return f"a {'/' if c.statistic == 'ratio' else '−'} {b} ({metric}{units})"


def _symbol(stat: str) -> str:
    """The statistic without its units: 'a − b (objective points)' -> 'a − b'."""
    return re.split(r" \(|, ", stat, maxsplit=1)[0]


def _signed(stat: str) -> bool:
    return bool(re.search(r"\s[−-]\s|difference", _symbol(stat)))


def _ci(o) -> tuple[float, float] | None:
    ci = o.ci
    if ci is None or not all(x is not None and math.isfinite(x) for x in ci) or ci[0] == ci[1]:
        return None
    return ci


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _with_ci(est: float, ci: tuple[float, float] | None, sign: bool) -> tuple[str, str]:
    """(estimate, '[lo, hi]' or '') with shared decimals: the estimate's, more where those print both ends alike."""
    r = abs(est) if _finite(est) else max(abs(ci[0]), abs(ci[1])) if ci else 0.0
    while ci and _num(ci[0], r, sign) == _num(ci[1], r, sign) and r > 1e-8:
        r /= 10
    return _num(est, r, sign), f"[{_num(ci[0], r, sign)}, {_num(ci[1], r, sign)}]" if ci else ""


def _units(stat: str, short: bool = False) -> str:
    """The units a statistic names ('a − b (dev/entity_f1 points)' -> 'dev/entity_f1 points'); short: the metric's
    last name and 'pts' ('entity_f1 pts'), for the index."""
    unit = stat[len(_symbol(stat)):].strip(" ,()")
    if not short or not unit:
        return unit
    words = [re.split(r"[/.:]", w)[-1] if re.search(r"[a-z][/.:][a-z]", w) else w for w in unit.split()]
    return " ".join(words).replace("points", "pts")


def ours_text(row, o, interval: bool = True, units: bool = True, short: bool = False) -> str:
    """'a − b = -2.17 [-4.34, -0.08] (objective points)': the estimate named by its statistic, never bare."""
    stat = statistic(row, o)
    if not _finite(o.estimate):
        return f"{_symbol(stat)}: no estimate"
    est, ci = _with_ci(o.estimate, _ci(o), _signed(stat))
    text = o.shown or f"{_symbol(stat)} = {est}"
    if interval and ci:
        text += " " + ci
    unit = _units(stat, short)
    return text + (f" ({unit})" if units and unit and not o.shown else "")


def _how(o) -> str:
    if o.interval:
        return o.interval
    if _ci(o):
        return "95 % percentile bootstrap"
    return "none: one measurement" if _finite(o.estimate) else "—"


def _p(o) -> str:
    if o.p is None:
        return "—"
    return "p < 0.001" if o.p < 0.001 else f"p = {o.p:.2g}"


def _n(o, short: bool = False) -> str:
    n = re.sub(r"^n=", "", o.n or "").replace(" x ", " × ")
    n = n.replace("the run's bootstrap replicates", "replicates")
    return (n.replace(" examples", " ex") if short else n) or "—"


def _claimed(row, o) -> str:
    """The side of the test the claim predicts (the paper's number where the test compares with it)."""
    def _g(x) -> str:  # the registry's constants as written: 1e-06, 0.5, -1
        return f"{x:g}"
    c = _comparison(row, o) if o is not None else None
    if c is None:
        return "—"
    if isinstance(c.expected, (int, float)) and not isinstance(c.expected, bool):
        return f"paper {_g(c.expected)}"
    t = c.test
    if t.kind == "direction":
        return f"{'>' if t.sign == '+' else '<'} {_g(t.target)}"
    if t.kind in ("equal_within", "exact"):
        return f"{_g(t.target)} ± {_g(t.tolerance)}"
    if t.at_least is not None and t.at_most is not None:
        return f"[{_g(t.at_least)}, {_g(t.at_most)}]"
    return f"≥ {_g(t.at_least)}" if t.at_least is not None else f"≤ {_g(t.at_most)}" if t.at_most is not None \
        else "—"


def _strength(row, o) -> float:
    """How far the evidence sits from the claim's threshold, as -log10 of a one-sided p (the evaluator's p, else one
    read off the interval's half-width); 0 without an interval."""
    if o.p is not None:
        return -math.log10(max(o.p, 1e-300))
    ci = _ci(o)
    if not ci or not _finite(o.estimate):
        return 0.0
    c = _comparison(row, o)
    bounds = [] if c is None else [c.test.target] if c.test.kind == "direction" else \
        [b for b in c.test.bounds() if b is not None]
    t = min(bounds, key=lambda b: abs(o.estimate - b)) if bounds else 0.0
    z = abs(o.estimate - t) / max((ci[1] - ci[0]) / (2 * 1.96), 1e-12)
    return -math.log10(max(math.erfc(z / math.sqrt(2)) / 2, 1e-300))


def lead(row):
    """The comparison that carries a row's verdict: the weakest of those that hold (all must), the clearest of those
    that fail or stay open; None without an estimate."""
    est = [o for o in row.outcomes if _finite(o.estimate)]
    if row.verdict in ("holds", "partly tested"):
        pool = [o for o in est if o.verdict == "holds"] or est
        return min(pool, key=lambda o: _strength(row, o), default=None)
    pool = [o for o in est if o.verdict == row.verdict] or est
    return max(pool, key=lambda o: _strength(row, o), default=None)


def _unfit(row) -> list[str]:
    return list(dict.fromkeys(w for o in row.outcomes for w in o.unfit))


def _fragile(row) -> list[str]:
    return list(dict.fromkeys([*row.fragile, *(f"{o.label}: {f}" if o.label else f
                                               for o in row.outcomes for f in o.fragile)]))


def _ran(row) -> bool:
    """Some records reached the row (a row without any has no scale)."""
    return row.scale not in ("", "-")


def open_class(row) -> str | None:
    """Why a row is undecided, as a class the summaries group by; None for a decided row."""
    if row.verdict == "not run":
        return "not run"
    if row.verdict == "not testable here" and not row.outcomes:
        return "declared not testable here" if not _ran(row) else "not computable from the records"
    if row.verdict == "not testable here":
        if any(o.baseline_failed for o in row.outcomes):
            return "whose baseline arm failed to train"
        return "with an arm not doing its task" if _unfit(row) else "not computable from the records"
    if row.verdict == "inconclusive" and not any(_ci(o) for o in row.outcomes if o.verdict == "inconclusive"):
        return "without an interval"
    return None


def _flags(row) -> str:
    return ("*" if _fragile(row) else "") + ("†" if row.post_hoc else "") + ("‡" if row.holm is False else "")


FLAGS = "* fragile (flips under a check on the page) · † post hoc (records older than the claim) · ‡ fails Holm"


def _ids(rows, multi_hw: bool, limit: int | None = None) -> str:
    seen: dict[str, list[str]] = {}
    for r in rows:
        seen.setdefault(r.claim.id, []).extend([_hw(r)] if r.outcomes else [])
    names = [f"{i} ({', '.join(hw)})" if multi_hw and hw else i for i, hw in seen.items()]
    if limit is not None and len(names) > limit:
        return ", ".join(names[:limit]) + f" and {len(names) - limit} more"
    return ", ".join(names)


def _join(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _stand_ins(rows, stand_ins: dict | None, short: bool) -> list[str]:
    """'ours for theirs' for the stand-ins the rows name (short: the paper's side without its parenthesis)."""
    text = " ".join(r.scale for r in rows)
    out = []
    for ours, theirs in (stand_ins or {}).items():
        if re.search(rf"(?<![\w-]){re.escape(str(ours))}(?![\w-])", text):
            theirs = re.sub(r"\s*\(.*\)", "", str(theirs)) if short else theirs
            out.append(f"{ours} for {theirs}")
    return out


def _scale_phrase(rows) -> str:
    ran = [r for r in rows if _ran(r)]
    parts = []
    for paper, words in ((True, "paper"), (False, "offline stand-in")):
        c = Counter(_hw(r) for r in ran if _paper_scale(r) == paper)
        if c:
            parts.append(f"at {words} scale ({', '.join(f'{hw} {n}' for hw, n in c.items())})")
    left = len(rows) - len(ran)
    if not parts:
        return "none of them run"
    return " and ".join(parts) + (" only" if len(parts) == 1 else "") + (f"; {left} without records" if left else "")


def _best(rows):
    """The row whose carrying comparison is furthest from the claim's threshold, and that comparison."""
    top = max(rows, key=lambda r: _strength(r, lead(r)) if lead(r) is not None else -1.0)
    return top, lead(top)


def summary_sentences(paper: str, rows, stand_ins: dict | None = None, limit: int | None = 2,
                      name_stand_ins: bool = True) -> list[str]:
    """Scope, results and what could not be tested, in three sentences generated from the rows (limit: how many
    ids and stand-ins a list names before it says how many more; None for all, as on the paper's page)."""
    kinds = {k: list(dict.fromkeys(r.claim.id for r in rows if r.claim.kind == k)) for k in KIND_WORDS}
    words = (("target", "target of ours", "targets of ours"), ("premise", "premise check", None),
             ("implementation", "implementation check", None),
             ("by-construction", "claim that holds by construction", "claims that hold by construction"))
    extra = [_count(len(kinds[k]), one, many) for k, one, many in words if kinds[k]]
    names = _stand_ins(rows, stand_ins, short=limit is not None) if name_stand_ins else []
    if limit is not None and len(names) > 4:
        names = names[:4] + [f"{len(names) - 4} more"]
    scope = (_join([f"{_count(len(kinds['paper']), 'claim')} of the paper", *extra])
             + f" in {_count(len(rows), 'row')}, " + _scale_phrase(rows)
             + (f"; stand-ins: {', '.join(names)}" if names else "") + ".")
    mine = [r for r in rows if r.claim.kind == "paper"]
    multi = len({_hw(r) for r in rows if r.outcomes}) > 1
    by = {v: [r for r in mine if r.verdict == v] for v in SHORT}
    said = []
    for v, verbs, best in (("holds", ("holds", "hold"), "strongest"),
                           ("does not hold", ("does not hold", "do not hold"), "clearest")):
        if by[v]:
            top, o = _best(by[v])
            rest = [r for r in by[v] if r.claim.id != top.claim.id]
            said.append(f"{len(by[v])} {verbs[len(by[v]) > 1]} ({best}: {top.claim.id}"
                        + (f", {ours_text(top, o, short=limit is not None)}" if o is not None else "")
                        + (f"; also {_ids(rest, multi, limit)}" if rest and limit != 0 else "") + ")")
    for v, words in (("inconclusive", "inconclusive"), ("partly tested", "partly tested")):
        if by[v]:
            said.append(f"{len(by[v])} {'is' if len(by[v]) == 1 else 'are'} {words}"
                        + (f" ({_ids(by[v], multi, limit)})" if limit != 0 else ""))
    if said:
        results = f"Of the {_count(len(mine), 'row')} on the paper's claims, {_join(said)}."
    else:
        results = "None of the paper's claims could be decided here." if mine else \
            "No claim of the paper itself is registered."
    classes: dict[str, list] = {}
    for r in mine:
        if (c := open_class(r)) is not None:
            classes.setdefault(c, []).append(r)
    if classes:
        untested = "Not decided: " + "; ".join(f"{_count(len(rs), 'row')} {c} ({_ids(rs, multi, limit)})"
                                               for c, rs in classes.items()) + "."
    else:
        untested = "Every claim of the paper registered here was decided." if mine else \
            "Nothing registered for the paper itself."
    return [scope[0].upper() + scope[1:], results, untested]


def paper_counts(paper: str, rows, link: str) -> str:
    """One table line: the paper's claims by verdict, then the other kinds, fragile, post hoc and Holm."""
    mine = [r for r in rows if r.claim.kind == "paper"]
    counts = Counter(r.verdict for r in mine)

    def kind_cell(kind: str) -> str:
        rs = [r for r in rows if r.claim.kind == kind]
        if not rs:
            return "–"
        c = Counter(r.verdict for r in rs)
        words = {"holds": "pass", "does not hold": "fail"} if kind == "implementation" else SHORT
        return f"{len(rs)}: " + ", ".join(f"{c[v]} {words.get(v, SHORT[v])}" for v in SHORT if c[v])
    holm = [r.holm for r in rows if r.holm is not None]
    cells = [f"[{paper}]({link})", *(str(counts.get(v, 0)) for v in SHORT),
             *(kind_cell(k) for k in ("target", "premise", "implementation", "by-construction")),
             str(sum(1 for r in mine if _fragile(r))), str(sum(1 for r in mine if r.post_hoc)),
             f"{sum(holm)} of {len(holm)}" if holm else "–"]
    return "| " + " | ".join(cells) + " |"


COUNTS_HEAD = ["| paper | holds | fails | open | partly | n/t | not run | our targets | premises | impl. checks "
               "| by constr. | fragile | post hoc | Holm |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
INDEX_HEAD = ["| verdict | paper · claim | ours: statistic = estimate [95 % CI] (units) | claimed | n | hw |",
              "|---|---|---|---|---|---|"]
PAGE_HEAD = [INDEX_HEAD[0].replace("paper · claim", "claim"), INDEX_HEAD[1]]


def index_line(paper: str, row, page: str) -> str:
    """One narrow line per (claim, scale): the comparison that carries the verdict, its statistic named."""
    o = lead(row)
    more = len(row.outcomes) - 1
    kind = f" ({KIND_TAGS[row.claim.kind]})" if row.claim.kind in KIND_TAGS else ""
    name = f"[{paper + ' · ' if paper else ''}{row.claim.id}]({page}#{_anchor(row.claim.id)}){kind}" + \
        (f" (+{more})" if more > 0 else "")
    n = _n(o, short=True) if o is not None else "—"
    if _unfit(row):
        n += f"; {_count(len(_unfit(row)), 'arm')} out"
    ours = ours_text(row, o, short=True) if o is not None else open_class(row) or row.verdict
    cells = (SHORT[row.verdict] + _flags(row), name, ours or "—", _claimed(row, o), n, _hw(row))
    return "| " + " | ".join(_md(x) for x in cells) + " |"


def open_lines(paper: str, rows, page: str) -> list[str]:
    """The rows nobody could decide, one line per reason class."""
    classes: dict[str, list] = {}
    for r in rows:
        if r.verdict in OPEN:
            classes.setdefault(open_class(r) or "not testable here", []).append(r)
    out = []
    for c, rs in classes.items():
        verdicts = "/".join(dict.fromkeys(SHORT[r.verdict] for r in rs))
        ids = _ids(rs, False, 3)
        out.append(f"| {verdicts} ×{len(rs)} | [{paper}]({page}) · {_md(ids)} | {c} | | | |")
    return out


def claims_summary(rows_by_paper: dict, stand_ins: dict | None = None, index: str = "all",
                   link=lambda p: f"{p}/CLAIMS.md") -> list[str]:
    """REPORT.md's claims part: the scale banner, one counts line per paper, three sentences per paper, then the
    index (`index`: all rows, "paper" (the paper's claims only), or "none")."""
    stand_ins = stand_ins or {}
    rows = [r for rs in rows_by_paper.values() for r in rs]
    if not rows:
        return []
    ran = [r for r in rows if _ran(r)]
    at_paper = Counter(p for p, rs in rows_by_paper.items() for r in rs if _ran(r) and _paper_scale(r))
    offline = Counter(p for p, rs in rows_by_paper.items() for r in rs if _ran(r) and not _paper_scale(r))
    hws = Counter(_hw(r) for r in ran if not _paper_scale(r))
    banner = ("**Scale.** At paper scale: " + (f"{_count(sum(at_paper.values()), 'row')} ("
                                               + ", ".join(f"{p} {n}" for p, n in at_paper.items()) + ")"
                                               if at_paper else "no rows")
              + ". At offline stand-in scale: " + (f"{len(ran) - sum(at_paper.values())} rows ("
                                                  + ", ".join(f"{p} {n}" for p, n in offline.items()) + "; "
                                                  + ", ".join(f"{hw} {n}" for hw, n in hws.items()) + ")"
                                                  if offline else "no rows")
              + f". Without records (not run, or declared not testable here): {len(rows) - len(ran)} rows. "
              + "Offline rows use stand-in models and data (smaller models, other datasets, capped examples) and do "
                "not test the paper's numbers directly: they ask whether the claimed effect shows on the stand-ins.")
    out = [banner, "", "## Claims by paper", "",
           "Rows (one per claim and scale) of the paper's own claims by verdict, then the other kinds apart. "
           "fragile, post hoc: rows of the paper's claims; Holm: decided tests that survive it.", "",
           *COUNTS_HEAD, *(paper_counts(p, rs, link(p)) for p, rs in rows_by_paper.items()), "",
           "## In three sentences", ""]
    for p, rs in rows_by_paper.items():
        out += [f"- **{p}** ([claims]({link(p)})): " + " ".join(summary_sentences(p, rs, stand_ins.get(p), 1)), ""]
    return out if index == "none" else out + claims_index(rows_by_paper, index, link)


def claims_index(rows_by_paper: dict, index: str = "all", link=lambda p: f"{p}/CLAIMS.md",
                 budget: int | None = None) -> list[str]:
    """The narrow index: a heading, a legend, then one line per decided row and per reason class of the rest. Past
    `budget` bytes each paper keeps an equal share of lines (a paper that needs less gives the rest to the others)
    and a line saying how many more its page has."""
    kinds = "Every row" if index == "all" else "The paper's own claims (the other kinds on each paper's page)"
    out = ["## Claims index", "", f"{kinds}, one line per claim and scale; undecided rows one line per reason. "
           "ours: the comparison carrying the verdict, (+k) more on the page; claimed: the side the claim predicts; "
           "ex: eval examples; arms out: not doing their task. " + FLAGS + ".", "", *INDEX_HEAD]
    lines, undecided = {}, {}
    for p, rs in rows_by_paper.items():
        keep = [r for r in rs if index == "all" or r.claim.kind == "paper"]
        decided = sorted((r for r in keep if r.verdict not in OPEN), key=lambda r: ORDER.index(r.verdict))
        lines[p] = [index_line(p, r, link(p)) for r in decided]
        undecided[p] = open_lines(p, keep, link(p))
    if budget is not None:  # the undecided stay (one line per reason); the decided are cut from the open end
        left = budget - _size(out)
        for i, p in enumerate(sorted(lines, key=lambda p: _size(lines[p] + undecided[p]))):
            share = left // (len(lines) - i)
            if _size(lines[p] + undecided[p]) > share:
                more = f"| … | [{p}]({link(p)}) · {{}} more rows on its page | | | | |"
                n = len(lines[p])
                while lines[p] and _size(lines[p] + [more.format(n)] + undecided[p]) > share:
                    lines[p].pop()
                lines[p].append(more.format(n - len(lines[p])))
            left -= _size(lines[p] + undecided[p])
    return out + [line for p in rows_by_paper for line in lines[p] + undecided[p]]


def _values_lines(values, depth: int = 0) -> list[str]:
    """The paper's values in full, as a nested list."""
    pad = "  " * depth
    if isinstance(values, dict):
        out = []
        for k, v in values.items():
            if isinstance(v, (dict, list)) and any(isinstance(x, (dict, list)) for x in
                                                   (v.values() if isinstance(v, dict) else v)):
                out += [f"{pad}- {k}:", *_values_lines(v, depth + 1)]
            elif isinstance(v, dict):
                out.append(f"{pad}- {k}: " + ", ".join(f"{a} {b}" for a, b in v.items()))
            elif isinstance(v, list):
                out.append(f"{pad}- {k}: " + " / ".join(str(x) for x in v))
            else:
                out.append(f"{pad}- {k}: {v}")
        return out
    if isinstance(values, list):
        if any(isinstance(x, (dict, list)) for x in values):
            return [line for x in values for line in _values_lines(x, depth)]
        return [f"{pad}- " + " / ".join(str(x) for x in values)]
    return [] if values is None else [f"{pad}- {values}"]


def _outcome_table(row) -> list[str]:
    out = ["| comparison | statistic (units) | ours | 95 % interval | how | n | p | verdict |",
           "|---|---|---|---|---|---|---|---|"]
    for o in row.outcomes:
        stat = statistic(row, o)
        ci = _with_ci(o.estimate, _ci(o), _signed(stat))[1] if _finite(o.estimate) else ""
        iv = f"{ci} ({_units(stat) or _symbol(stat)})" if ci else "—"
        label = o.label or "—"
        if o.parts and o.parts[1]:
            label += f" ({o.parts[0]} of {o.parts[1]} parts)"
        out.append("| " + " | ".join(_md(x) for x in (label, stat, ours_text(row, o, interval=False), iv, _how(o),
                                                      _n(o), _p(o), o.verdict)) + " |")
    return out


def _row_block(row, page_dir: Path) -> list[str]:
    out = [f"**{row.scale.split(';')[0]}: {row.verdict}**" if row.outcomes else f"**{row.verdict}**", ""]
    if row.outcomes:
        out += [f"Scale: {row.scale}.", "", *_outcome_table(row), ""]
    notes = []
    if row.reason:
        notes.append(row.reason)
    for o in row.outcomes:
        why = "; ".join([o.reason] * bool(o.reason) + list(o.notes))
        if why:
            notes.append(f"{o.label}: {why}" if o.label and len(row.outcomes) > 1 else why)
    if row.parts and row.parts[1] and "decided on" not in row.reason:
        notes.append(f"decided on {row.parts[0]} of {row.parts[1]} parts (groups: a task, a model, an N)")
    failed = [o.label or "the comparison" for o in row.outcomes if o.baseline_failed]
    if failed:
        notes.append("the claim's baseline arm failed to train in " + ", ".join(failed)
                     + ": the other arm did its task, the comparison cannot")
    for f in _fragile(row):
        notes.append(f"fragile: {f}")
    if row.post_hoc:
        notes.append(f"post hoc: {row.post_hoc}")
    if row.holm is not None:
        notes.append("survives the paper's Holm correction" if row.holm else
                     "does not survive the paper's Holm correction")
    if row.legacy:
        notes.append("rests on legacy records")
    out += [f"- {n}" for n in dict.fromkeys(notes)]
    unfit = _unfit(row)
    if unfit and notes:
        out.append("")
    if unfit:
        against = sorted({o.baseline for o in row.outcomes if o.baseline})
        out += [f"<details><summary>{_count(len(unfit), 'arm')} left out, not doing their task (less than "
                f"{SIGNAL_MARGIN_POINTS:g} points above {' / '.join(against) or 'the trivial baseline'}, or constant)"
                "</summary>", "", *(f"- {w}" for w in unfit), "", "</details>"]
    if row.evidence:
        out += ["", "Evidence: " + ", ".join(f"[{p.name}]({_rel(p, page_dir)})" for p in row.evidence)]
    return out + [""]


def _claim_block(rows, page_dir: Path) -> list[str]:
    c = rows[0].claim
    kind = KIND_WORDS.get(c.kind, c.kind) + (f": {c.why}" if c.kind == "by-construction" and c.why else "")
    out = [f"### {c.id}", "", f"> {c.claim}", "", f"Kind: {kind}. Paper: {c.where or '—'}."]
    values = _values_lines(c.values)
    if values:
        out += ["", *values]
    out += ["", f"Registered at commit `{c.registered}`." if c.registered else "Registration commit: not recorded.",
            ""]
    if c.exact:
        out += [f"Decided without an interval: {c.exact}.", ""]
    for r in rows:
        out += _row_block(r, page_dir)
    return out


def _checks_table(rows) -> list[str]:
    out = ["| check | what it checks | paper | ours | result | hw |", "|---|---|---|---|---|---|"]
    for r in rows:
        paper = (r.claim.where or "—") + (": " + "; ".join(x.strip("- ") for x in _values_lines(r.claim.values))
                                          if r.claim.values is not None else "")
        ours = "; ".join((f"{o.label}: " if o.label else "") + ours_text(r, o) for o in r.outcomes) or r.reason or "—"
        result = {"holds": "pass", "does not hold": "fail"}.get(r.verdict, r.verdict)
        # a table line has no heading: an explicit anchor takes the index's links
        out.append("| " + " | ".join(_md(x) for x in (f'<a id="{_anchor(r.claim.id)}"></a>{r.claim.id}', r.claim.claim,
                                                      paper, ours, result, _hw(r))) + " |")
    return out


def claims_page(paper: str, rows, stand_ins: dict | None, page_dir: Path, registry: Path | None = None) -> list[str]:
    """results/<paper>/CLAIMS.md: an MLRC-style summary, every row in one narrow table, one block per claim, and
    the implementation checks as pass/fail."""
    scope, results, untested = summary_sentences(paper, rows, stand_ins, limit=None, name_stand_ins=False)
    budgets = list(dict.fromkeys(f"{_hw(r)}: {p}" for r in rows for p in r.scale.split("; ")[1:]
                                 if "examples" in p))
    hws = Counter(f"{_hw(r)}, {'paper scale' if _paper_scale(r) else 'offline stand-ins'}" for r in rows
                  if r.outcomes)
    names = _stand_ins(rows, stand_ins, short=False)
    src = f" and [{paper}/claims.yaml]({_rel(registry, page_dir)})" if registry is not None else ""
    out = [f"# {paper}: claims", "", GENERATED, "",
           f"Built by `python -m experiments.report` from the run records under `runs/`{src}. Every paper: "
           f"[REPORT.md]({_rel(page_dir.parent / 'REPORT.md', page_dir)}); for machines: "
           f"[claims.json]({_rel(page_dir.parent / 'claims.json', page_dir)}).", "",
           "## Summary", "", f"**Scope.** {scope}", "",
           "**Stand-ins and budget.** " + ("; ".join(f"{k}: {_count(n, 'row')}" for k, n in hws.items()) or
                                           "nothing ran") + "."
           + (f" Stand-ins: {'; '.join(names)}." if names else "")
           + (f" Budget: {'; '.join(budgets)}." if budgets else "")
           + " Offline rows do not test the paper's numbers directly: they ask whether the claimed effect shows on "
             "the stand-ins.", "",
           f"**Results.** {results}", "", f"**What could not be tested.** {untested}"]
    reasons = [r for r in rows if not r.outcomes and r.reason]
    out += [f"- {r.claim.id}: {r.reason}" for r in reasons]
    out += ["", "**Reading the rows.** Verdicts: holds (the whole 95 % interval on the claimed side), fails (the "
            "whole interval on the other side), open (it straddles), partly (holds on the parts decided, others "
            "untested), n/t (not testable here), not run. p: one-sided, for the decided direction. Intervals over "
            "eval examples of one seed cover test-set noise only, not the training seed or the lr chosen on dev: "
            "they are statements about these trained models. " + FLAGS + ".",
            "", "## Rows", "", *PAGE_HEAD]
    out += [index_line("", r, "") for r in rows]
    out.append("")
    for kind, title in KIND_TITLES.items():
        mine = [r for r in rows if r.claim.kind == kind]
        if not mine:
            continue
        out += [f"## {title}", ""]
        if kind == "implementation":
            out += ["Checks of our code against the paper's numbers or exact identities: pass or fail, not evidence "
                    "about the method.", "", *_checks_table(mine), ""]
            continue
        by_claim: dict[str, list] = {}
        for r in mine:
            by_claim.setdefault(r.claim.id, []).append(r)
        for rs in by_claim.values():
            out += _claim_block(rs, page_dir)
    return out


def _json_num(x):
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None if not isinstance(x, (int, bool)) else x
    return float(f"{x:.6g}")  # 6 significant digits: a diff shows verdicts, not float noise


def claims_records(rows_by_paper: dict) -> list[dict]:
    """results/claims.json: one object per row and comparison (a row without comparisons: one object, comparison
    null), keys in a fixed order."""
    out = []
    for paper, rows in rows_by_paper.items():
        for r in rows:
            base = {"paper": paper, "id": r.claim.id, "kind": r.claim.kind, "scale": r.scale, "verdict": r.verdict,
                    "holm": r.holm, "fragile": _fragile(r), "post_hoc": r.post_hoc, "parts": list(r.parts)}
            for o in r.outcomes or [None]:
                ci = _ci(o) if o is not None else None
                out.append({**base, **({"comparison": None} if o is None else {
                    "comparison": o.label, "comparison_verdict": o.verdict, "statistic": statistic(r, o),
                    "estimate": _json_num(o.estimate), "ci": [_json_num(x) for x in ci] if ci else None,
                    "interval": _how(o), "n": o.n, "p": _json_num(o.p), "comparison_parts": list(o.parts),
                    "unfit": len(o.unfit), "baseline_failed": o.baseline_failed})})
    return out


def claims_rows(results_dir: Path) -> tuple[dict, dict]:
    """({paper: rows}, {paper: stand-ins}) for every paper with runs and a claims.yaml."""
    from experiments.evidence.claims import baseline_runs, claims_path, load_claims
    from experiments.evidence.verdicts import evaluate_claims
    rows, stand_ins = {}, {}
    for paper in papers_with_runs(results_dir):
        if claims_path(paper).exists():
            rows[paper] = evaluate_claims(paper, load_runs(results_dir, paper) + baseline_runs(paper, results_dir),
                                          results_dir)
            stand_ins[paper] = dict(load_claims(paper).stand_ins)
    return rows, stand_ins


def write_claims(results_dir: Path, rows_by_paper: dict, stand_ins: dict) -> list[Path]:
    """results/<paper>/CLAIMS.md per paper with claims and results/claims.json; a CLAIMS.md whose paper lost its
    claims is removed."""
    from experiments.evidence.claims import claims_path
    results_dir = Path(results_dir)
    written = []
    for paper, rows in rows_by_paper.items():
        page_dir = results_dir / paper
        path = page_dir / "CLAIMS.md"
        path.write_text("\n".join(claims_page(paper, rows, stand_ins.get(paper), page_dir,
                                              claims_path(paper))).rstrip() + "\n")
        written.append(path)
    for stale in results_dir.glob("*/CLAIMS.md"):
        if stale.parent.name not in rows_by_paper:
            stale.unlink()
    path = results_dir / "claims.json"
    if rows_by_paper:
        # one object a line: a diff between two builds shows which rows changed
        objects = [json.dumps(o, ensure_ascii=False) for o in claims_records(rows_by_paper)]
        path.write_text("[\n" + ",\n".join(objects) + "\n]\n")
        written.append(path)
    elif path.exists():
        path.unlink()
    return written


def _size(lines: list[str]) -> int:
    return len("\n".join(lines).encode()) + 1


def claims_sections(results_dir: Path, claims: tuple[dict, dict] | None = None,
                    budget: int | None = None) -> list[str]:
    """REPORT.md's claims part (`claims_summary`) from `claims_rows`, within `budget` bytes: the index first keeps
    the paper's own claims only, then an equal share of lines per paper."""
    rows, stand_ins = claims if claims is not None else claims_rows(results_dir)
    if not rows:
        return []
    head = claims_summary(rows, stand_ins, "none")
    for index in ("all", "paper"):
        lines = head + claims_index(rows, index)
        if budget is None or _size(lines) <= budget:
            return lines
    return head + claims_index(rows, "paper", budget=budget - _size(head))


def index_sections(results_dir: Path, built: dict[str, list[str]], claims: tuple[dict, dict] | None = None,
                   reserve: int = 0) -> list[list[str]]:
    """REPORT.md's sections, in order, each a list of markdown lines: the claims first, within REPORT_BYTES less
    `reserve` (the page's head) and the other sections."""
    rest = [papers_section(results_dir, built), benchmarks_section(results_dir)]
    budget = REPORT_BYTES - reserve - sum(_size(s) + 1 for s in rest if s)
    return [claims_sections(results_dir, claims, budget), *rest]


def write_index(results_dir: Path, built: dict[str, list[str]], rebuild: str = "python -m experiments.report",
                read: list[str] = ()) -> Path:
    claims = claims_rows(results_dir)
    write_claims(results_dir, *claims)
    lines = ["# strata: results", "", GENERATED, "", f"Rebuild with `{rebuild}`.", "", *read]
    for section in index_sections(results_dir, built, claims, reserve=_size(lines)):
        if section:
            lines += [*section, ""]
    path = Path(results_dir) / "REPORT.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def read_folders(paths: list[Path]) -> list[str]:
    """Which folders a --runs report read, one line each with its count of records: `<sweep>/<hardware>` for the
    `<sweep>/<hardware>/<run_id>/result.json` of a sweep (or of outputs/runs/<exp_id>)."""
    counts: dict[Path, int] = {}
    for p in paths:
        counts[p.parent.parent] = counts.get(p.parent.parent, 0) + 1
    return [f"- `{d}`: {n} record{'s' * (n != 1)}" for d, n in sorted(counts.items(), key=lambda x: natural(str(x[0])))]


def report_runs(runs_dir: Path, out: Path, rebuild: str | None = None) -> Path:
    """A user's own records (outputs/runs, outputs/sweeps: no publish needed) laid out as results/ under `out`,
    then every paper's tables and an index, as for the committed records but with every swept value shown; says
    which folders it read (every record under runs_dir, whichever sweep wrote it)."""
    rebuild = rebuild or f"python -m experiments.report --runs {runs_dir} --out {out}"
    found = [(p, r) for p in sorted(Path(runs_dir).rglob("result.json")) if (r := read_json(p))]
    if not found:
        raise SystemExit(f"no result.json under {runs_dir}")
    read = [f"Built from {len(found)} run records (result.json) under `{runs_dir}`, not from results/: every record "
            "there, whichever sweep wrote it; the per-experiment tables show every value a sweep tried (no lr is "
            "selected on dev there). Folders read:", "",
            *read_folders([p for p, _ in found]), ""]
    print("\n".join(line.replace("`", "") for line in read[:1] + read[2:-1]))
    for _, r in found:
        write_json(published_path(out, r["paper"], r["exp_id"], r["provenance"]["hardware"], r["run_id"]), r)
    built = {p: report(p, out, rebuild) for p in sorted({r["paper"] for _, r in found})}
    return write_index(out, built, rebuild, read)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("papers", nargs="*", help="default: every results/<paper> with runs")
    ap.add_argument("--results-dir", default="results")
    ap.add_argument("--runs", type=Path, help="render your own runs instead: every result.json under this folder "
                    "(e.g. outputs/sweeps/<exp_id>), laid out as results/ into --out")
    ap.add_argument("--out", type=Path, help="with --runs: where the tables go (default <runs>/report)")
    args = ap.parse_args(argv)
    if args.runs is not None:
        rebuild = f"python -m experiments.report --runs {args.runs}" + (f" --out {args.out}" if args.out else "")
        print(f"report: {report_runs(args.runs, args.out or args.runs / 'report', rebuild)}")
        return
    results_dir = Path(args.results_dir)
    have = papers_with_runs(results_dir)
    if not have:
        raise SystemExit(f"report: no runs found under {results_dir} (no {results_dir}/<paper>/runs/**/*.json); "
                         "for your own runs: python -m experiments.report --runs outputs")
    unknown = [p for p in args.papers if p not in have]
    if unknown:
        raise SystemExit(f"report: no paper {', '.join(unknown)} with runs under {results_dir}; valid: "
                         + ", ".join(have))
    papers = args.papers or have
    built = {p: report(p, results_dir) for p in papers}
    for p in have:  # the index lists every paper, also those not rebuilt now
        built.setdefault(p, sorted(x.name for x in (results_dir / p / "tables").glob("*.md")))
    print(f"report: {write_index(results_dir, built)}")
    if results_dir.resolve() == (REPO / "results").resolve():  # a copy of results/ elsewhere leaves them alone
        from experiments.evidence import readme
        for path in readme.write(REPO, results_dir):
            print(f"report: {path.relative_to(REPO)} (its generated block)")


if __name__ == "__main__":
    main()
