"""Layer fusion's own tables and figures, built from results/layer_fusion/runs/**/*.json by
`python -m experiments.report layer_fusion` (never edited by hand). Records are grouped by what they computed
(model, task, regime, hardware), not by experiment, so the CPU tier, a GPU run and a user's sweep land in the same
tables:

    tables/params            DWAtt Table 2: new parameters per fusion and backbone, exact, beside the paper's 25.19M /
                             25.18M / 26.38M and the exact counts (method=layer_fusion_params)
    tables/fewshot_grid      Fig. 3 / 8: best dev F1 per fusion, N and epoch budget, mean [95% CI over trials]
                             (+ figures/fewshot_grid*, 4 panels = budgets, x = N on log2; tables/fewshot_trials.csv)
    tables/relative_gains    gains vs Base+n, absolute (points) AND relative (%): the paper mixes them
    tables/sample_auc        (ours) area under mean F1 over log2 N, per budget
    tables/learning_curves   Fig. 4: dev F1 vs step at N = 8 and 128 (50 epochs), with a step-efficiency AUC and
                             the steps to 90% of the best dev F1 (ours)           (+ figures/learning_curves*)
    tables/fe_vs_ft          Fig. 5: feature extraction vs fine-tuning where both exist
    tables/p32               P-32 Tables 2 / 6: baseline / P-32 / Avg.Pool per task (in the paper's metric for it: MCC,
                             F1, Spearman or accuracy; MNLI-mm from the mnli model) and model beside the paper's rows
                             (stand-ins labelled), Δ with CIs; tables/truncation (Tables 3 / 4) where records exist
    figures/lambda_heatmap   Fig. 2: raw λ row-normalised (min-max), rows sorted by train size, and softmax(λ)
    tables/bench             cached block outputs vs recomputing the frozen backbone (method=layer_fusion_bench)

A section without records says which command makes them."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from experiments.evidence import selection
from experiments.evidence.paper_values import paper_values
from experiments.evidence.tables import (SEED_INTERVAL, Estimate, Table, caps, figure_link, fmt, hardware_label,
                                         label_axes, metric_cell, model_label, natural, page, paired_diff, pyplot,
                                         run_label, runs_of, save_figure, seed_interval)
from experiments.evidence.tables import config_value as _c
from layer_fusion.config import LAMBDA_UNIFORM, PAPER_METRICS

PAPER = "layer_fusion"
FUSIONS = ("deeper", "last", "mean", "scalar_mix", "concat", "dwatt")  # plotting and row order
NAMES = {"deeper": "Base+n", "last": "Base (last)", "mean": "Average", "scalar_mix": "P-32 (scalar mix)",
         "concat": "Concat", "dwatt": "DWAtt"}
COLORS = {"deeper": "tab:gray", "last": "k", "mean": "tab:olive", "scalar_mix": "tab:purple", "concat": "tab:orange",
          "dwatt": "tab:blue"}
REGIMES = {"fe": "FE (frozen backbone)", "ft": "FT (full fine-tuning)", "lora": "LoRA"}
P32_ARMS = (("last", "baseline"), ("scalar_mix", "p32"), ("mean", "avgpool"))  # our fusion, the paper's column
P32_TASKS = tuple(PAPER_METRICS)  # Table 2's rows, in its order; its "Avg." is their unweighted mean [P §2]
CURVE_SHOTS = (8, 128)
CURVE_EPOCHS = 50  # Fig. 4
RUN_ALL = "`make layer_fusion-cpu` (the CPU tier; `make layer_fusion` at paper scale)"
RUN_FEWSHOT = "`python -m experiments.run -m experiment=layer_fusion/fewshot_cpu`"
RUN_P32 = "`python -m experiments.run -m experiment=layer_fusion/p32_cpu`"


# ---- records ------------------------------------------------------------------------------------------------------

def _fewshot(runs: list[dict]) -> list[dict]:
    return [r for r in runs_of(runs, {"method.protocol": "fewshot"}, method=PAPER) if "dev/entity_f1" in r["metrics"]]


def _p32(runs: list[dict], truncated: bool = False) -> list[dict]:
    """P-32 records that hold their task's paper metric, plus one MNLI-mm record (mnli-mismatched) per mnli record
    scored on the mismatched split too."""
    recs = [r for r in runs_of(runs, {"method.protocol": "p32", "method.truncate": {"not": None} if truncated else None,
                                      "method.lambda_lr": None}, method=PAPER) if _key(r) in r["metrics"]]
    return recs + [_mismatched(r) for r in recs if "eval_mismatched/accuracy" in r["metrics"]]


def paper_task(r: dict) -> str | None:
    """The P-32 Table 2 row a record speaks for: its task, or the task it stands in for (mnli-mismatched: mnli-mm)."""
    for name in (_c(r, "task.name"), _c(r, "task.stand_in_for")):
        name = "mnli-mm" if name == "mnli-mismatched" else name
        if name in PAPER_METRICS:
            return name
    return None


def _metric(r: dict) -> str:
    """The metric P-32 scores the record's task by [P §2] (its stand-in's, offline); accuracy off the paper's tasks."""
    return PAPER_METRICS.get(paper_task(r), "accuracy")


def _key(r: dict) -> str:
    return f"eval/{_metric(r)}"


def _mismatched(r: dict) -> dict:
    """An mnli record read as the paper's MNLI-mm row: the same model scored on validation_mismatched. Its
    per-example scores are the matched ones', so it keeps none (no paired bootstrap over the wrong examples)."""
    m = dict(r["metrics"], **{"eval/accuracy": r["metrics"]["eval_mismatched/accuracy"]})
    m.pop("eval/majority_accuracy", None)
    if "eval_mismatched/majority_accuracy" in m:
        m["eval/majority_accuracy"] = m["eval_mismatched/majority_accuracy"]
    task = dict(r["config"]["task"], name="mnli-mismatched")
    return {**r, "metrics": m, "per_example": {}, "config": {**r["config"], "task": task},
            "run_id": f"{r.get('run_id')}--mismatched"}


def _group(r: dict) -> tuple:
    """What a few-shot panel shares: model, task, regime, hardware."""
    return _c(r, "model.name"), _c(r, "task.name"), _c(r, "method.regime"), hardware_label(r)


def _model_label(r: dict) -> str:
    return model_label(r, paper_values(PAPER))


def _slug(*parts) -> str:
    return "_".join(str(p).replace("/", "-") for p in parts)


def _f1(r: dict, key: str = "dev/entity_f1") -> float | None:
    v = r["metrics"].get(key)
    return None if v is None else 100 * float(v)


# ---- numbers ------------------------------------------------------------------------------------------------------

def curve_stats(curve: list[dict], key: str, total: int) -> tuple[float, int, float]:
    """(step-efficiency AUC, steps to 90% of the best, that as a fraction of the budget) of one dev curve (ours).
    AUC: the area under F1 (points) over the fraction of the budget trained, from (0, 0), i.e. the mean F1 over the
    run; 100 = perfect from the first step. Steps to 90%: the first evaluation at >= 0.9 x the curve's best (the
    same rule as layer_fusion/run.py's train/to90_frac)."""
    steps = np.array([0.0] + [float(p["step"]) for p in curve])
    f1 = np.array([0.0] + [100 * float(p[key]) for p in curve])
    x = steps / max(total, 1)
    auc = float(np.trapezoid(f1, x) / x[-1]) if x[-1] > 0 else float("nan")
    peak = f1[1:].max()
    first = int(next(s for s, v in zip(steps[1:], f1[1:]) if v >= 0.9 * peak))
    return auc, first, first / max(total, 1)


# ---- DWAtt Table 2 ------------------------------------------------------------------------------------------------

def params(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method="layer_fusion_params") if (r.get("extra") or {}).get("params")]
    if not recs:
        return ["_Table 2 (parameters): no method=layer_fusion_params records; run "
                f"`python -m experiments.run method=layer_fusion_params` or {RUN_ALL}._", ""]
    pv = paper_values(PAPER)
    in_runs: dict[tuple, set] = {}
    for r in runs_of(runs, method=PAPER):
        if "params/fusion" in r["metrics"]:
            key = (_c(r, "model.name"), _c(r, "method.fusion"))
            in_runs.setdefault(key, set()).add(int(r["metrics"]["params/fusion"]))
    t = Table("params", "DWAtt Table 2: new parameters per fusion (exact, from configs; no weights)",
              ["model", "L", "d", "fusion", "new params", "closed form", "closed form value", "paper (M)",
               "spec exact", "ours − spec", "in runs (params/fusion)"], runs=recs)
    seen = set()
    for r in recs:
        for row in r["extra"]["params"]:
            key = (row["model"], row["fusion"], row.get("extra_layers"))
            if key in seen:
                continue
            seen.add(key)
            col = "base_n" if row["fusion"] == "deeper" else row["fusion"]
            default = row["fusion"] != "deeper" or row.get("default", True)
            paper = pv.get("RoBERTa-large", None, col, "new_params_m") if row["model"] == "roberta-large" \
                and default else None
            spec = pv.get("RoBERTa-large", None, col, "new_params") if row["model"] == "roberta-large" \
                and default else None
            runs_n = in_runs.get((row["model"], row["fusion"])) if default else None
            t.add(row["model"], row["num_layers"], row["hidden_size"],
                  row.get("name") or NAMES.get(row["fusion"], row["fusion"]),
                  fmt(int(row["new_params"]), thousands=True),
                  row.get("formula_expr", "—"), fmt(row.get("formula"), thousands=True) if isinstance(
                      row.get("formula"), int) else fmt(row.get("formula")),
                  "—" if paper is None else f"{paper.value}M",
                  "—" if spec is None else fmt(int(spec.value), thousands=True),
                  "—" if spec is None else fmt(int(row["new_params"]) - int(spec.value), sign=True, thousands=True),
                  ", ".join(fmt(n, thousands=True) for n in sorted(runs_n)) if runs_n else "—")
    t.notes = ["The paper prints millions (25.19M / 25.18M / 26.38M on RoBERTa-large); the spec derives the exact "
               "counts over z_1..z_24 (the embedding output excluded): Base+2 25,192,448 (two real layers), Concat "
               "25,190,400 (a bias per W_n), DWAtt 26,353,152 (its 26.38M is 0.1% higher; nobody can explain the "
               "gap). The paper's Base+n formula 7n(d+d²) matches no layer; the closed-form column shows ≈ 12nd². "
               "'in runs' counts the fusion (and extra blocks) of method=layer_fusion records: it must equal the "
               "table."]
    return t.write(out)


# ---- DWAtt Fig. 3 / 8: the few-shot grid --------------------------------------------------------------------------

def _cells(recs: list[dict]) -> dict[tuple, list[dict]]:
    """(group, fusion, N, epochs) -> the trials."""
    out: dict[tuple, list[dict]] = {}
    for r in recs:
        out.setdefault((_group(r), _c(r, "method.fusion"), _c(r, "method.shots"), float(_c(r, "train.epochs"))),
                       []).append(r)
    return out


def _fusions(present) -> list[str]:
    return [f for f in FUSIONS if f in present] + sorted(set(present) - set(FUSIONS))


def fewshot_grid(runs: list[dict], out: Path) -> list[str]:
    recs = _fewshot(runs)
    if not recs:
        return [f"_Few-shot grid (Figs. 3, 8): no method=layer_fusion protocol=fewshot records; run {RUN_FEWSHOT} or "
                f"{RUN_ALL}._", ""]
    cells = _cells(recs)
    t = Table("fewshot_grid", "Few-shot grid (DWAtt Figs. 3 / 8): best dev F1 over the run, mean [95% CI over trials]",
              ["model", "task", "regime", "fusion", "N", "epochs", "best dev F1", "final dev F1",
               "eval F1 at best dev (ours)", "best step / steps", "hardware"], runs=recs)
    for (g, fusion, n, ep), rs in sorted(cells.items(), key=lambda kv: natural((*kv[0][0], FUSIONS.index(kv[0][1])
                                                                               if kv[0][1] in FUSIONS else 9,
                                                                               kv[0][2], kv[0][3]))):
        t.add(_model_label(rs[0]), run_label(rs[0], "task"), REGIMES.get(g[2], g[2]), NAMES.get(fusion, fusion), n,
              f"{ep:g}",
              seed_interval([_f1(r) for r in rs]), seed_interval([_f1(r, "dev/entity_f1_final") for r in rs]),
              seed_interval([_f1(r, "eval/entity_f1") for r in rs]),
              seed_interval([r["metrics"].get("train/best_step", 0) / max(r["metrics"].get("train/steps", 1), 1)
                     for r in rs], 2), g[3])
    figs = _grid_figures(recs, cells, out)
    _trials_csv(recs, out)
    t.notes = ["Best dev F1 = the best dev score seen over the run (the paper's 'best observed dev score': dev both "
               "chooses and reports, so it is optimistic); final = the last evaluation; eval F1 is scored once at the "
               "best-dev weights (ours, never used to choose). Trials re-draw the N·C sentences (uniform, not "
               "stratified) and the new weights; intervals: the " + SEED_INTERVAL + " (a trial per seed). "
               "Per-trial rows: [tables/fewshot_trials.csv](tables/fewshot_trials.csv).",
               "Figures: " + ", ".join(figure_link(p) for p in figs) + ".", *caps(recs)]
    return t.write(out)


def _grid_figures(recs: list[dict], cells: dict, out: Path) -> list[str]:
    plt = pyplot()
    groups = sorted({_group(r) for r in recs}, key=natural)
    paths = []
    for g in groups:
        budgets = sorted({k[3] for k in cells if k[0] == g})
        fig, axes = plt.subplots(1, len(budgets), figsize=(3.6 * len(budgets), 3.4), squeeze=False, sharey=True)
        data = []
        for ax, ep in zip(axes[0], budgets):
            for fusion in _fusions({k[1] for k in cells if k[0] == g}):
                pts = []
                for n in sorted({k[2] for k in cells if k[0] == g and k[1] == fusion and k[3] == ep}):
                    e = seed_interval([_f1(r) for r in cells[(g, fusion, n, ep)]])
                    m, lo, hi = e.value, e.lo, e.hi
                    pts.append((n, m, lo if lo is not None else m, hi if hi is not None else m))
                    data.append({"model": g[0], "task": g[1], "regime": g[2], "hardware": g[3], "epochs": ep,
                                 "fusion": fusion, "N": n, "trials": len(cells[(g, fusion, n, ep)]),
                                 "best_dev_f1_mean": m, "ci_lo": lo, "ci_hi": hi})
                if not pts:
                    continue
                xs, ms, los, his = zip(*pts)
                ax.plot(xs, ms, "o-", color=COLORS.get(fusion), label=NAMES.get(fusion, fusion), ms=3)
                ax.fill_between(xs, los, his, color=COLORS.get(fusion), alpha=0.15)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{ep:g} epochs", fontsize=9)
            ax.set_xlabel("N-shot (sentences per entity type)")
        axes[0][0].set_ylabel("best dev F1 (%)")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle(f"{g[1]} / {g[0]} / {REGIMES.get(g[2], g[2])} ({g[3]}): mean ± 95% CI over trials", fontsize=9)
        name = "fewshot_grid" if len(groups) == 1 else f"fewshot_grid_{_slug(g[1], g[0], g[2], g[3])}"
        paths.append(save_figure(fig, out, name, data))
    return paths


def _trials_csv(recs: list[dict], out: Path) -> None:
    """tables/fewshot_trials.csv: one row per trial (method, N, N_epochs, seed, best_dev_f1, best_step)."""
    path = Path(out) / "tables" / "fewshot_trials.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["model", "task", "regime", "hardware", "fusion", "N", "epochs", "seed", "best_dev_f1",
                    "final_dev_f1", "eval_f1_at_best_dev", "best_step", "steps", "run_id"])
        for r in sorted(recs, key=lambda r: natural((*_group(r), _c(r, "method.fusion"), _c(r, "method.shots"),
                                                     _c(r, "train.epochs"), _c(r, "seed")))):
            m = r["metrics"]
            w.writerow([*_group(r)[:3], _group(r)[3], _c(r, "method.fusion"), _c(r, "method.shots"),
                        _c(r, "train.epochs"), _c(r, "seed"), _f1(r), _f1(r, "dev/entity_f1_final"),
                        _f1(r, "eval/entity_f1"), m.get("train/best_step"), m.get("train/steps"), r.get("run_id")])


def relative_gains(runs: list[dict], out: Path) -> list[str]:
    recs = _fewshot(runs)
    cells = _cells(recs)
    bases = {k: v for k, v in cells.items() if k[1] == "deeper"}
    if not bases:
        return [f"_Relative gains: no few-shot Base+n (method.fusion=deeper) records to compare with; run "
                f"{RUN_FEWSHOT}._", ""]
    pv = paper_values(PAPER)
    t = Table("relative_gains", "Gains over Base+n (the deeper baseline): absolute (F1 points) and relative (%)",
              ["model", "task", "regime", "N", "epochs", "fusion", "Base+n F1", "fusion F1", "gain (points)",
               "relative gain (%)", "paper (RoBERTa-large, CoNLL-03)"], runs=recs)
    for (g, _, n, ep), base in sorted(bases.items(), key=lambda kv: natural((*kv[0][0], kv[0][2], kv[0][3]))):
        by_seed = {_c(r, "seed"): _f1(r) for r in base}
        for fusion in _fusions({k[1] for k in cells if k[0] == g and k[2] == n and k[3] == ep} - {"deeper"}):
            arm = cells[(g, fusion, n, ep)]
            pairs = [(_f1(r), by_seed[_c(r, "seed")]) for r in arm if _c(r, "seed") in by_seed]
            if not pairs:
                continue
            mb = float(np.mean([b for _, b in pairs]))
            mf = float(np.mean([a for a, _ in pairs]))
            rel = 100 * (mf / mb - 1) if mb > 0 else None
            col = f"N{n}-ep{ep:g}"
            paper = [c for c in (pv.get("RoBERTa-large", "CoNLL-03", col, f"gain_{fusion}_vs_base_n"),
                                 pv.get("RoBERTa-large", "CoNLL-03", col, f"rel_gain_{fusion}_vs_base_n"),
                                 pv.get("RoBERTa-large", "CoNLL-03", col, f"gain_{fusion}_fe_vs_base_n"))
                     if c and g[2] == "fe"]  # the paper's gains are all feature extraction
            t.add(_model_label(arm[0]), run_label(arm[0], "task"), REGIMES.get(g[2], g[2]), n, f"{ep:g}",
                  NAMES.get(fusion, fusion), fmt(mb), fmt(mf), seed_interval([a - b for a, b in pairs], sign=True),
                  "—" if rel is None else fmt(rel, 1, sign=True),
                  "; ".join(f"{c.value:+g}{'%' if c.metric.startswith('rel_') else ' points'} ({c.where})"
                            for c in paper) or "—")
    t.notes = ["gain = fusion − Base+n in F1 points, paired by trial (mean [95% CI over trials]); relative = mean "
               "fusion / mean Base+n − 1. The paper mixes the two: Fig. 2's +5.28 / +3.68 / +1.6 are absolute points "
               "at N = 128, 100 epochs; Fig. 3's 58% (N = 8, 25 epochs) is relative. The paper's numbers are "
               "RoBERTa-large on CoNLL-03 (Base+2), beside our offline backbone and task (stand-ins labelled)."]
    return t.write(out)


def sample_auc(runs: list[dict], out: Path) -> list[str]:
    recs = _fewshot(runs)
    cells = _cells(recs)
    t = Table("sample_auc", "Sample efficiency (ours): area under mean best dev F1 over log2 N, per budget",
              ["model", "task", "regime", "epochs", "fusion", "N range", "sample AUC (F1 points)"], runs=recs)
    keys = sorted({(k[0], k[3], k[1]) for k in cells}, key=lambda k: natural((*k[0], k[1], FUSIONS.index(k[2])
                                                                              if k[2] in FUSIONS else 9)))
    for g, ep, fusion in keys:
        ns = sorted(k[2] for k in cells if k[0] == g and k[3] == ep and k[1] == fusion)
        if len(ns) < 2:
            continue
        ms = [seed_interval([_f1(r) for r in cells[(g, fusion, n, ep)]]).value for n in ns]
        x = np.log2(ns)
        auc = float(np.trapezoid(ms, x) / (x[-1] - x[0]))
        r0 = cells[(g, fusion, ns[0], ep)][0]
        t.add(_model_label(r0), run_label(r0, "task"), REGIMES.get(g[2], g[2]), f"{ep:g}", NAMES.get(fusion, fusion),
              f"{ns[0]}-{ns[-1]}", fmt(auc))
    t.notes = ["Our addition (spec §4): the trapezoid area under the mean best dev F1 over log2 N, divided by the "
               "log2 range, i.e. the mean F1 over the N axis; compare rows of the same N range only."]
    return t.write(out) or ["_Sample AUC: needs at least two N per fusion and budget._", ""]


# ---- DWAtt Fig. 4: learning curves --------------------------------------------------------------------------------

def learning_curves(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in _fewshot(runs) if _c(r, "method.shots") in CURVE_SHOTS and (r.get("extra") or {}).get("curve")]
    if not recs:
        return [f"_Learning curves (Fig. 4): no few-shot record at N = 8 or 128 with a dev curve; run {RUN_FEWSHOT}._",
                ""]
    budgets: dict[tuple, float] = {}
    for g in {_group(r) for r in recs}:
        have = {float(_c(r, "train.epochs")) for r in recs if _group(r) == g}
        budgets[g] = CURVE_EPOCHS if CURVE_EPOCHS in have else max(have)
    recs = [r for r in recs if float(_c(r, "train.epochs")) == budgets[_group(r)]]
    cells = _cells(recs)
    t = Table("learning_curves", "Learning curves (DWAtt Fig. 4): dev F1 over training; step efficiency (ours)",
              ["model", "task", "regime", "N", "epochs", "fusion", "best dev F1", "step AUC (ours)",
               "steps to 90% of best (ours)", "fraction of budget (ours)", "steps"], runs=recs)
    plt = pyplot()
    panels = sorted({(k[0], k[2]) for k in cells}, key=natural)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4), squeeze=False)
    data = []
    for ax, (g, n) in zip(axes[0], panels):
        ep = budgets[g]
        for fusion in _fusions({k[1] for k in cells if k[0] == g and k[2] == n}):
            rs = cells[(g, fusion, n, ep)]
            stats = [curve_stats(r["extra"]["curve"], "dev/entity_f1", r["extra"].get("total_steps")
                                 or r["metrics"].get("train/steps", 1)) for r in rs]
            total = rs[0]["extra"].get("total_steps") or rs[0]["metrics"].get("train/steps")
            t.add(_model_label(rs[0]), run_label(rs[0], "task"), REGIMES.get(g[2], g[2]), n, f"{ep:g}",
                  NAMES.get(fusion, fusion), seed_interval([_f1(r) for r in rs]), seed_interval([s[0] for s in stats]),
                  seed_interval([s[1] for s in stats], 0), seed_interval([s[2] for s in stats]), total)
            grid = sorted({p["step"] for r in rs for p in r["extra"]["curve"]})
            ys = np.array([np.interp(grid, [p["step"] for p in r["extra"]["curve"]],
                                     [100 * p["dev/entity_f1"] for p in r["extra"]["curve"]]) for r in rs])
            band = [(e.value, e.lo, e.hi) for e in (seed_interval(ys[:, i]) for i in range(len(grid)))]
            ms = [b[0] for b in band]
            ax.plot(grid, ms, "-", color=COLORS.get(fusion), label=NAMES.get(fusion, fusion))
            if len(rs) > 1:
                ax.fill_between(grid, [b[1] for b in band], [b[2] for b in band], color=COLORS.get(fusion), alpha=0.15)
            data += [{"model": g[0], "task": g[1], "regime": g[2], "hardware": g[3], "N": n, "epochs": ep,
                      "fusion": fusion, "step": s, "dev_f1_mean": b[0], "ci_lo": b[1], "ci_hi": b[2],
                      "trials": len(rs)} for s, b in zip(grid, band)]
        label_axes(ax, "training step", "dev F1 (%)", f"{g[1]} / {g[0]} / {g[2]}: N = {n}, {ep:g} epochs", 7)
    path = save_figure(fig, out, "learning_curves", data)
    t.notes = [f"Figure: {figure_link(path)} (mean ± 95% CI over trials; trials interpolated onto the union of their "
               "evaluation steps). Ours, not the paper's: step AUC = area under dev F1 (points) over the fraction "
               "of the budget trained, from (0, 0), i.e. the mean F1 over the run; steps to 90% = the first "
               "evaluation at >= 90% of that trial's best dev F1 (the paper: Concat at N = 8 'converging in 30% of "
               f"training time'). Budget {CURVE_EPOCHS} epochs as in Fig. 4, else the largest run."]
    return t.write(out)


def fe_vs_ft(runs: list[dict], out: Path) -> list[str]:
    recs = _fewshot(runs)
    by: dict[tuple, dict[str, list[dict]]] = {}
    for r in recs:
        key = (_c(r, "model.name"), _c(r, "task.name"), hardware_label(r), _c(r, "method.fusion"),
               _c(r, "method.shots"), float(_c(r, "train.epochs")))
        by.setdefault(key, {}).setdefault(_c(r, "method.regime"), []).append(r)
    both = {k: v for k, v in by.items() if "fe" in v and len(v) > 1}
    if not both:
        return ["_FE vs FT (Fig. 5): needs few-shot records of the same model, fusion, N and budget in both regimes; "
                "the fine-tuning grid is GPU work (`experiment=layer_fusion/offline_gpu_fewshot`)._", ""]
    t = Table("fe_vs_ft", "Feature extraction vs fine-tuning (DWAtt Fig. 5): best dev F1",
              ["model", "task", "hardware", "fusion", "N", "epochs", "FE", "regime", "tuned", "tuned − FE (points)"],
              runs=[r for v in both.values() for rs in v.values() for r in rs])
    for key, arms in sorted(both.items(), key=lambda kv: natural(kv[0])):
        fe = {_c(r, "seed"): _f1(r) for r in arms["fe"]}
        for regime, rs in sorted(arms.items()):
            if regime == "fe":
                continue
            diffs = [_f1(r) - fe[_c(r, "seed")] for r in rs if _c(r, "seed") in fe]
            t.add(_model_label(rs[0]), run_label(rs[0], "task"), key[2], NAMES.get(key[3], key[3]), key[4],
                  f"{key[5]:g}",
                  seed_interval(list(fe.values())), REGIMES.get(regime, regime), seed_interval([_f1(r) for r in rs]),
                  seed_interval(diffs, sign=True))
    t.notes = ["Paired by trial (the same seed draws the same sentences). The paper: FT beats every FE configuration, "
               "even Base+n fine-tuned; at N = 8 Concat-FE already gets most of FT's improvement."]
    return t.write(out)


# ---- P-32 Tables 2 / 6 --------------------------------------------------------------------------------------------

def _acc(rs: list[dict]) -> list[float]:
    """Each record's paper metric (accuracy, MCC, F1 or Spearman), x 100."""
    return [100 * r["metrics"][_key(r)] for r in rs]


def _diff(a: list[dict], b: list[dict]) -> Estimate:
    """a − b in points, paired by seed: mean [t interval over seeds], or one seed's paired bootstrap over eval
    examples."""
    by_seed = {_c(r, "seed"): r for r in b}
    pairs = [(r, by_seed[_c(r, "seed")]) for r in a if _c(r, "seed") in by_seed]
    if not pairs:
        return Estimate(None)
    key = _key(pairs[0][0])
    if len(pairs) == 1:
        return paired_diff(*pairs[0], key=key, n=1, sign=True)
    return seed_interval([100 * (x["metrics"][key] - y["metrics"][key]) for x, y in pairs], sign=True)


def p32(runs: list[dict], out: Path) -> list[str]:
    recs = _p32(runs)
    if not recs:
        return [f"_P-32 (Tables 2 / 6): no method=layer_fusion protocol=p32 records; run {RUN_P32} or {RUN_ALL}._", ""]
    pv = paper_values(PAPER)
    groups: dict[tuple, dict[str, dict[str, list[dict]]]] = {}
    for r in recs:
        g = (_c(r, "model.name"), _c(r, "method.regime"), _c(r, "method.prenorm_handling"), hardware_label(r))
        groups.setdefault(g, {}).setdefault(_c(r, "task.name"), {}).setdefault(_c(r, "method.fusion"), []).append(r)
    t = Table("p32", "P-32 (Tables 2 / 6): each task's paper metric (MCC for CoLA, F1 for MRPC and QQP, Spearman for "
              "STS-B, accuracy for the rest) for the last-layer baseline, P-32 and Avg.Pool beside the paper's rows",
              ["model", "regime", "task", "metric", "majority", "baseline", "P-32", "Avg.Pool", "P-32 − baseline",
               "Avg.Pool − baseline", "P-32 − Avg.Pool", "paper row", "paper baseline / P-32 / Avg.Pool", "paper Δ",
               "λ entropy / log L"], runs=recs)
    notes, still = set(), []
    for g, tasks in sorted(groups.items(), key=lambda kv: natural(kv[0])):
        means = {arm: {} for arm, _ in P32_ARMS}  # arm -> paper task -> our mean
        paper_rows = {}  # paper task -> {column: the paper's value}
        causal = _c(next(iter(next(iter(tasks.values())).values()))[0], "model.kind") == "causal"
        regime = _regime_label(g[1]) + (f", {g[2]}" if causal else "")
        for task, arms in sorted(tasks.items(), key=lambda kv: natural(kv[0])):
            r0 = next(iter(arms.values()))[0]
            metric, ptask = _metric(r0), paper_task(r0)
            cols = {col: pv.find_for(r0, col, metric) for _, col in P32_ARMS}
            paper_row = next((m.row for m in cols.values() if m), "—")
            notes.update(v for m in cols.values() if m for v in m.via)
            paper_vals = " / ".join(fmt(m.value) if m else "—" for m in cols.values())
            pd = cols["p32"].value - cols["baseline"].value if cols["p32"] and cols["baseline"] else None
            for arm, col in P32_ARMS:
                if arms.get(arm):
                    means[arm][ptask or task] = float(np.mean(_acc(arms[arm])))
                if cols[col]:
                    paper_rows.setdefault(ptask or task, {})[col] = cols[col].value
            maj = r0["metrics"].get(f"eval/majority_{metric}")
            ent = [r["metrics"]["lambda/entropy_ratio"] for r in arms.get("scalar_mix", [])
                   if "lambda/entropy_ratio" in r["metrics"]]
            if ent and min(ent) >= LAMBDA_UNIFORM:
                still.append(f"{g[0]} ({g[1]}{', ' + g[2] if causal else ''}) / {task}")
            t.add(_model_label(r0), regime, run_label(r0, "task"), metric, fmt(None if maj is None else 100 * maj),
                  *(seed_interval(_acc(arms[a])) if arms.get(a) else "—" for a, _ in P32_ARMS),
                  *(_diff(arms[a], arms[b]) if arms.get(a) and arms.get(b) else "—"
                    for a, b in (("scalar_mix", "last"), ("mean", "last"), ("scalar_mix", "mean"))),
                  paper_row, paper_vals, fmt(pd, sign=True), seed_interval(ent, 3))
        if len(tasks) > 1:
            t.add(*_avg_row(g, tasks, means, paper_rows, regime, pv))
    t.notes = ["Each task in its paper metric x 100 on the task's eval split at the dev-chosen checkpoint (the "
               "checkpoint is chosen on the same metric at paper scale), mean [95% CI over seeds] (n); Δ paired by "
               "seed, or for one seed a paired bootstrap over the eval examples. mnli-mm is the mnli model scored "
               "on validation_mismatched (one model, both columns, as the paper). `majority` = always answering "
               "the majority class: an arm within 2 points of it is not doing the task and its claims are not "
               "testable. Avg. averages the paper's Table 2 tasks we have, each in its own metric, and the paper "
               "column averages the paper's rows for the SAME tasks (its printed Avg. only when all 9 are there): "
               "a mean over fewer tasks is never set beside the 9-task one. Regime fe is our **frozen-backbone "
               "probe** (the cached block outputs, only λ and the head train): the cheap CPU version of the "
               "comparison, **not the paper's fine-tuning** (QLoRA for decoders, full for BERT). The paper scores "
               "every row once (one seed, NaN runs re-seeded). The paper's columns are its own models and GLUE "
               "tasks, reached through stand-ins (labelled; offline models are compared on the Δ columns only): "
               + "; ".join(sorted(notes)) + ".",
               "Decoders: the hidden states of pre-LN blocks 1..L−1 are raw residual-stream states while HF's last "
               "one is final-normed; the regime column names how the run handled it (as_is | norm_each | "
               "norm_pooled, P-32 spec §5.1).", *caps(recs)]
    if still:
        t.notes.append(f"λ did not learn (softmax(λ) entropy ≥ {LAMBDA_UNIFORM} of uniform in every seed) for "
                       + ", ".join(still) + ": there P-32 is Avg.Pool, so P-32 vs Avg.Pool and the λ-vs-train-size "
                       "correlation (claims p32-beats-avgpool*, larger-data-less-early-weight*) are not testable on "
                       "these records, whatever their rows in CLAIMS.md say.")
    return t.write(out)


def _avg_row(g: tuple, tasks: dict, means: dict, paper_rows: dict, regime: str, pv) -> list:
    """The Avg. row of one (model, regime) group: our mean of each arm over the paper's Table 2 tasks we have (each
    in its paper metric), beside the paper's mean over the same tasks; which of its 9 tasks are missing."""
    r0 = next(iter(next(iter(tasks.values())).values()))[0]
    have = [t for t in P32_TASKS if all(t in means[a] for a, _ in P32_ARMS if means[a])]
    off_paper = sorted(set(means["last"]) - set(P32_TASKS))
    missing = [t for t in P32_TASKS if t not in have]
    avg = {a: (float(np.mean([means[a][t] for t in have])) if have and all(t in means[a] for t in have) else None)
           for a, _ in P32_ARMS}
    twin = pv.twins["models"].get(g[0])
    paper_model = twin.paper if twin else pv.models.get(g[0])
    if not missing:
        pav = {col: pv.get(paper_model, "avg", col, "score") for _, col in P32_ARMS} if paper_model else {}
        pav = {col: c.value if c else None for col, c in pav.items()}
        label, where = "Avg. of the paper's 9 tasks", f"{paper_model}, Avg. (printed)" if paper_model else "—"
    else:
        pav = {col: (float(np.mean([paper_rows[t][col] for t in have]))
                     if have and all(col in paper_rows.get(t, {}) for t in have) else None) for _, col in P32_ARMS}
        label = f"Avg. over {len(have)} of the paper's 9 tasks (missing: {', '.join(missing)})" if have else \
            f"no Avg.: none of the paper's 9 tasks (ours: {', '.join(off_paper)})"
        where = f"{paper_model}, mean of its rows for the same {len(have)} tasks" if paper_model and have else "—"
    if off_paper and have:
        label += f"; not in it: {', '.join(off_paper)}"
    return [_model_label(r0), regime, label, "paper metrics", "—",
            *(fmt(avg[a]) for a, _ in P32_ARMS),
            *(fmt(avg[a] - avg[b], sign=True) if avg[a] is not None and avg[b] is not None else "—"
              for a, b in (("scalar_mix", "last"), ("mean", "last"), ("scalar_mix", "mean"))),
            where, " / ".join(fmt(v) for v in pav.values()) if pav else "—",
            fmt(pav["p32"] - pav["baseline"], sign=True) if pav.get("p32") is not None and
            pav.get("baseline") is not None else "—", ""]


def _regime_label(regime: str) -> str:
    return "frozen-backbone probe (fe; not the paper's fine-tuning)" if regime == "fe" else REGIMES.get(regime, regime)


def truncation(runs: list[dict], out: Path) -> list[str]:
    recs = _p32(runs, truncated=True)
    if not recs:
        return []  # the §5.1 sweep is paper-scale work (experiment=layer_fusion/p32_truncation)
    full = {(_c(r, "model.name"), _c(r, "task.name"), _c(r, "method.regime"), hardware_label(r)): r for r in _p32(runs)
            if _c(r, "method.fusion") == "last"}
    pv = paper_values(PAPER)
    t = Table("truncation", "P-32 §5.1 (Tables 3 / 4): the baseline on its first n blocks",
              ["model", "regime", "task", "n blocks", "score (paper metric)", "paper (same n)"], runs=recs)
    by: dict[tuple, list[dict]] = {}
    for r in recs:
        if _c(r, "method.fusion") == "last":
            by.setdefault((_c(r, "model.name"), _c(r, "task.name"), _c(r, "method.regime"), hardware_label(r),
                           _c(r, "method.truncate")), []).append(r)
    for k, rs in sorted(by.items(), key=lambda kv: natural(kv[0])):
        m = pv.find_for(rs[0], f"first{k[4]}", _metric(rs[0]))
        t.add(_model_label(rs[0]), _regime_label(k[2]), run_label(rs[0], "task"), k[4], seed_interval(_acc(rs)),
              "—" if m is None else f"{fmt(m.value)} ({m.row})")
        f = full.get(k[:4])
        if f is not None and not any(row[3] == _c(f, "model.num_layers") and row[2] == run_label(f, "task")
                                     for row in t.rows):
            t.add(_model_label(f), _regime_label(k[2]), run_label(f, "task"), _c(f, "model.num_layers"),
                  seed_interval(_acc([f])),
                  "(full model: the Table 2 baseline)")
    t.notes = ["The paper truncates to the first n blocks and fine-tunes a head there ('overthinking'): BERT rises "
               "strictly with depth except on RTE; LLaMA-2-7B rises then falls."]
    return t.write(out)


# ---- P-32 Fig. 2: the learned λ -----------------------------------------------------------------------------------

def lambda_heatmap(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, {"method.fusion": "scalar_mix"}, method=PAPER)
            if (r.get("extra") or {}).get("lambda")]
    if not recs:
        return [f"_λ heatmap (P-32 Fig. 2): no scalar_mix record with its learned λ; run {RUN_P32}._", ""]
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in recs:
        g = (_c(r, "model.name"), _c(r, "method.protocol"), _c(r, "method.regime"), hardware_label(r))
        groups.setdefault(g, {}).setdefault(_c(r, "task.name"), []).append(r)
    plt = pyplot()
    order = sorted(groups, key=natural)
    fig, axes = plt.subplots(len(order), 2, figsize=(11, 1.2 + 0.45 * max(len(v) for v in groups.values())
                                                     * len(order) + 0.6 * len(order)), squeeze=False)
    data = []
    for row, g in zip(axes, order):
        tasks = sorted(groups[g], key=lambda t: (_train_size(groups[g][t][0]), t))
        raw = np.array([np.mean([r["extra"]["lambda"] for r in groups[g][t]], axis=0) for t in tasks])
        weights = np.array([np.mean([r["extra"].get("layer_weights") or _softmax(r["extra"]["lambda"])
                                     for r in groups[g][t]], axis=0) for t in tasks])
        span = raw.max(1, keepdims=True) - raw.min(1, keepdims=True)
        norm = np.divide(raw - raw.min(1, keepdims=True), span, out=np.full_like(raw, 0.5), where=span > 0)
        for ax, mat, title in ((row[0], norm, "raw λ, min-max per row"), (row[1], weights, "softmax(λ)")):
            im = ax.imshow(mat, aspect="auto", cmap="viridis")
            ax.set_yticks(range(len(tasks)), [f"{t} ({_train_size(groups[g][t][0])})" for t in tasks], fontsize=7)
            ax.set_xticks(range(mat.shape[1]), [str(i + 1) for i in range(mat.shape[1])], fontsize=6)
            ax.set_xlabel("block")
            ax.set_title(f"{g[0]} / {_regime_label(g[2]) if g[1] == 'p32' else g[1] + ' ' + g[2]}: {title}",
                         fontsize=8)
            fig.colorbar(im, ax=ax)
        for t, rv, nv, wv in zip(tasks, raw, norm, weights):
            data += [{"model": g[0], "protocol": g[1], "regime": g[2], "hardware": g[3], "task": t,
                      "train_examples": _train_size(groups[g][t][0]),
                      "seeds": len(groups[g][t]), "block": i + 1, "lambda_raw_mean": float(a),
                      "lambda_rownorm": float(b), "weight": float(c)} for i, (a, b, c) in enumerate(zip(rv, nv, wv))]
    path = save_figure(fig, out, "lambda_heatmap", data)
    return ["### P-32 Fig. 2: the learned weights over blocks", "",
            f"{figure_link(path)}: per model and regime, rows = tasks sorted by train size (smallest on top, the "
            "size in brackets), columns = blocks 1..L. Left: raw λ (mean over seeds), min-max normalised per row (the "
            "paper normalises rows without saying how); right: softmax(λ), the weights the fusion applies (uniform = "
            "1/L, λ starts at 0). The paper reads Fig. 2 as 'larger datasets put less weight on the first blocks' "
            "(claims `larger-data-less-early-weight*`); λ barely moves at the global learning rate (spec §5.4), see "
            "`lambda/entropy_ratio` in the P-32 table.", ""]


def _train_size(r: dict) -> int:
    return (r.get("n_samples") or {}).get("train_examples") or 0


def _softmax(x) -> list[float]:
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max())
    return (e / e.sum()).tolist()


# ---- feature-extraction speed -------------------------------------------------------------------------------------

def bench(runs: list[dict], out: Path) -> list[str]:
    recs = runs_of(runs, method="layer_fusion_bench")
    if not recs:
        return ["_Feature-extraction speed: no method=layer_fusion_bench records; run "
                "`python -m experiments.run method=layer_fusion_bench` or " + RUN_ALL + "._", ""]
    keys = sorted({k for r in recs for k in r["metrics"] if not k.endswith(("_lo", "_hi"))}, key=natural)
    t = Table("bench", "Few-shot run from the activation store vs recomputing the frozen backbone (same process)",
              ["model", "task", "fusion", "metric", "value [CI]", "device"], runs=recs)
    for r in recs:
        m = r["metrics"]
        for k in keys:
            if k not in m:
                continue
            t.add(_model_label(r), run_label(r, "task"), NAMES.get(_c(r, "method.fusion"), _c(r, "method.fusion")), k,
                  str(metric_cell(m, k)), r["provenance"].get("device"))
    t.notes = ["Both arms train the same fusion and head on the same sentences, interleaved in one process; the "
               "ratio is the cached arm's speed-up (its interval from the benchmark's own repeats)."]
    return t.write(out)


# ---- the report ---------------------------------------------------------------------------------------------------

INTRO = (  # the page's opening paragraph
         "Generated from the run records (`layer_fusion/report.py`); each table also lies in `tables/` as .md and "
         ".csv. Offline stand-ins are labelled (wnut16 for CoNLL-03, e5-small / minilm-l6 for the paper's "
         "encoders, smollm2-135m and gemma3-270m for LLaMA-2, rt-polarity for SST-2, vitaminc for MNLI, winogrande "
         "for RTE); regime fe of the P-32 protocol is a frozen-backbone probe, not the paper's fine-tuning.")


def build(runs: list[dict], out: Path) -> list[str]:
    return page(INTRO, (params, fewshot_grid, relative_gains, sample_auc, learning_curves, fe_vs_ft, p32,
                truncation, lambda_heatmap, bench), selection.dedupe(runs), out)

