"""python -m experiments.report [paper ...]: results/<paper>/runs/**/*.json -> tables/*.{md,csv}, figures/*.{png,csv},
results/<paper>/README.md, and the index results/REPORT.md.

Two kinds of tables. Generic per-experiment tables, for the experiments a paper package lists in `GENERIC_TABLES`
(every experiment of a paper without a package, e.g. finetune): one row per group of runs that share every config
field except the seed, and per metric, ours as mean ± sd over seeds (n), the paper's number where
`<paper>/paper_values.yaml` has one, Δ = ours − paper, the hardware; fields that differ inside an experiment (e.g.
method.k) are columns of their own. Then the paper's own tables: `<paper>/report.py`'s `build(runs, out)`, written with
the kit in experiments/evidence/tables.py. tables/ and figures/ are rebuilt from scratch each time: never edit them by hand."""
from __future__ import annotations

import argparse
import fnmatch
import importlib
import importlib.util
import json
from pathlib import Path

from experiments.evidence import selection
from experiments.evidence.stats import example_ci
from experiments.metrics import declared, higher_is_better
from experiments.evidence.paper_values import PaperValues, paper_values
from experiments.identity import published_path
from experiments.results import NOT_HASHED, legacy_reason, load_runs, read_json, write_json
from experiments.evidence.tables import (GENERATED, Table, arrow, caps, delta, figure_link, label, natural, pyplot,
                                save_figure, scale, summary)

SHOWN = ("eval/", "test/", "time/")          # metric families of a generic table
IDENTITY = ("task.name", "model.name", "method.name", "method.variant", "hardware.name")
NOT_GROUPED = {"seed", *NOT_HASHED, "store.dir"}  # bookkeeping, not what a run computes


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

def _package_report(paper: str):
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
        # an lr sweep with dev scores is shown at each group's dev-chosen lr (experiments/evidence/selection.py); a user's own
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
    return sorted(p.parent.name for p in Path(results_dir).glob("*/runs") if any(p.rglob("*.json")))


def papers_section(results_dir: Path, built: dict[str, list[str]]) -> list[str]:
    lines = ["## Papers", "", "Each paper's README shows ours (mean ± sd over seeds) beside the paper's number and "
             "Δ; offline stand-ins are labelled, legacy records are marked.", ""]
    for paper, tables in sorted(built.items()):
        lines.append(f"- [{paper}]({paper}/README.md): " + ", ".join(
            f"[{t[:-3]}]({paper}/tables/{t})" for t in tables))
    return lines


def benchmarks_section(results_dir: Path) -> list[str]:
    benches = sorted(Path(results_dir).glob("*/benchmark.md"))
    if not benches:
        return []
    return ["## Benchmarks", "", "Ratios measured side by side in one process:", "",
            *[f"- [{b.parent.name}]({b.parent.name}/benchmark.md)" for b in benches]]


def claims_sections(results_dir: Path) -> list[str]:
    """The claims table of every paper with a claims.yaml (experiments/evidence/claims.py), from its run records."""
    from experiments.evidence.claims import claims_path, claims_section
    papers = [p for p in papers_with_runs(results_dir) if claims_path(p).exists()]
    if not papers:
        return []
    lines = ["## Claims", "", "Does each headline claim of the paper hold here? One row per claim and scale; ours with "
             "its 95 % bootstrap interval; offline stand-ins named; rows from legacy records say so.", ""]
    for paper in papers:
        lines += claims_section(paper, load_runs(results_dir, paper), results_dir, link_root=results_dir)
    return lines


def index_sections(results_dir: Path, built: dict[str, list[str]]) -> list[list[str]]:
    """REPORT.md's sections, in order, each a list of markdown lines: the claims first."""
    return [claims_sections(results_dir), papers_section(results_dir, built), benchmarks_section(results_dir)]


def write_index(results_dir: Path, built: dict[str, list[str]], rebuild: str = "python -m experiments.report",
                read: list[str] = ()) -> Path:
    lines = ["# strata: results", "", GENERATED, "", f"Rebuild with `{rebuild}`.", "", *read]
    for section in index_sections(results_dir, built):
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


if __name__ == "__main__":
    main()
