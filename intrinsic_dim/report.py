"""The paper's own tables and figures, from run records only (`experiments.report` calls `build`).

Tables (results/intrinsic_dim/tables/): Table 1 (accuracy per paradigm), the normalized-AUC table per (model,
dataset, paradigm) the paper does not give, the Fig. 4 matrix, the SFT checkpoints. Figures (figures/, each with the
plotted numbers as .csv): Fig. 1/29-36 triptychs (accuracy, ID curves, AUC per paradigm), Fig. 3/7-12 (against k),
Fig. 2 and 13-28 (SFT checkpoints), the Fig. 4 heatmap, the Fig. 5 boxplot, the Figs. 6/40-45 boxplots per model
and the Fig. 46 scatter with Pearson r.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.evidence.paper_values import paper_values
from experiments.evidence.tables import Table, fmt, legacy_note, pyplot, run_label, save_figure
from intrinsic_dim.auc import heatmap_difference

ORDER = re.compile(r"^(icl|icl_unique)-(\d+)$")
TABLE1 = ["icl-0", "icl-1", "icl-2", "icl-5", "icl-10", "sft"]
GENERIC_TABLES = ()  # Table 1 and the AUC table below cover every metric of these runs


# ---- reading run records ---------------------------------------------------------------------------------------

def _artifact(r: dict) -> str:
    return r["exp_id"].split("/", 1)[-1]


def _family(r: dict) -> str:
    """The experiment an artifact reproduces (icl_vs_sft_cpu -> icl_vs_sft)."""
    a = _artifact(r)
    return a[:-4] if a.endswith(("_cpu", "_gpu")) else a


def _key(r: dict) -> tuple[str, str, str]:
    return _artifact(r), run_label(r, "model"), run_label(r, "task")


def _variant(r: dict) -> str:
    return r["config"]["method"]["variant"]


def _sort_variant(v: str) -> tuple:
    m = ORDER.match(v)
    return (0, m.group(1), int(m.group(2))) if m else (1, v, 0)


def _display(v: str) -> str:
    return "fine-tune" if v == "sft" else v


def result(r: dict, split: str = "eval") -> dict:
    """{accuracy, curves, auc, n_prompts, n_duplicates} of a run: an ICL run's own, an SFT run's last checkpoint."""
    x = r["extra"]
    if x.get("paradigm") == "sft":
        return [c for c in x["checkpoints"] if c["split"] == split][-1]
    return x


def _auc(res: dict, r: dict, est: str = "twonn") -> float:
    m = r["config"]["method"]
    return res["auc"][est][f"{m['auc_norm']}{'_emb' if m['auc_include_embedding'] else ''}"]


def _layers(curve: list[float]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(curve, dtype=float)[1:]  # the embedding output is not on the paper's curves
    return np.arange(1, len(y) + 1), y


def _f(x, d=2) -> str:
    return fmt(x, d)


def _slug(*parts: str) -> str:
    return "__".join(re.sub(r"[^A-Za-z0-9_.-]+", "-", p.split(" (")[0]) for p in parts)


def _link(png: str) -> str:
    return f"[{png}]({png})"


# ---- tables ----------------------------------------------------------------------------------------------------

def _groups(runs: list[dict], families: tuple[str, ...]) -> dict[tuple, dict[str, dict]]:
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in runs:
        if _family(r) in families:
            out[_key(r)][_variant(r)] = r
    return out


def table1(runs: list[dict], out: Path) -> list[str]:
    groups = _groups(runs, ("icl_vs_sft", "offline"))
    if not groups:
        return []
    pv = paper_values("intrinsic_dim")
    t = Table("table1_accuracy", "Table 1: logit accuracy (%) per paradigm",
              ["artifact", "model", "task", *[_display(v) for v in TABLE1], "majority class", "paper row",
               "paper (same columns)"], runs=[r for by in groups.values() for r in by.values()])
    via = set()
    for (art, model, task), by in sorted(groups.items()):
        accs = [_f(100 * result(by[v])["accuracy"], 1) if v in by else "—" for v in TABLE1]
        maj = next((result(r)["majority_rate"] for r in by.values() if "majority_rate" in result(r)), None)
        any_run = next(iter(by.values()))
        matches = [pv.find_for(any_run, v, "accuracy") for v in TABLE1]
        found = [m for m in matches if m is not None]
        via |= {v for m in found for v in m.via}
        t.add(art, model, task, *accs, _f(None if maj is None else 100 * maj, 1), found[0].row if found else "—",
              " / ".join(_f(None if m is None else m.value, 1) for m in matches) if found else "—")
    t.notes = ["Logit accuracy over the labels' first tokens; fine-tune = the SFT run's last checkpoint; majority class "
               "= the accuracy of always answering the most frequent gold label. The paper's Table 1 gives only the "
               "mean over its four 7-13B models, shown for orientation."
               + (f" Reached through: {'; '.join(sorted(via))}." if via else "")]
    return t.write(out)


def auc_table(runs: list[dict], out: Path) -> list[str]:
    t = Table("auc", "Normalized AUC per (model, dataset, paradigm) (not in the paper)",
              ["artifact", "model", "task", "paradigm", "N", "accuracy %", "predictions per label", "AUC TwoNN (1/L)",
               "AUC TwoNN (1/(L-1))", "AUC MLE k=50 (1/L)", "max duplicates/layer", "mean prompt tokens"], runs=runs)
    for r in sorted(runs, key=lambda r: (*_key(r), _sort_variant(_variant(r)))):
        res = result(r)
        a = res["auc"]
        preds = res.get("pred_counts")
        labels = r["extra"].get("labels", [])
        t.add(*_key(r), _display(_variant(r)), res["n_prompts"], _f(100 * res["accuracy"], 1),
              ", ".join(f"{lab} {n}" for lab, n in zip(labels, preds)) if preds else "—",
              _f(a["twonn"]["L"]), _f(a["twonn"]["L_minus_1"]), _f(a["mle_k50"]["L"]) if "mle_k50" in a else "—",
              max(res["n_duplicates"][1:] or [0]), _f(res["mean_prompt_tokens"], 1))
    t.notes = ["Layers 1..L (the embedding output is excluded; its last-token vector is the same newline embedding for "
               "every prompt, so it has no dimension). Both normalizations: the paper's 1/L and the official code's "
               "1/(L-1); max duplicates = the largest number of duplicate states dropped in a layer."]
    section = t.write(out)
    if not section:
        return []
    return [*section[:3], "", *[x for n in t.all_notes() for x in (n, "")]]  # linked, not inlined: a row per run


NEAR_MAJORITY = 0.02  # accuracies this close to the majority-label rate say the model does not do the task


def headlines(runs: list[dict]) -> list[str]:
    """The paper's two headline claims checked per (model, dataset) of the ICL-vs-SFT comparison."""
    lines, used = [], []
    for (art, model, task), by in sorted(_groups(runs, ("icl_vs_sft", "offline")).items()):
        used += by.values()
        icl = {v: result(r) for v, r in by.items() if ORDER.match(v) and v.startswith("icl-")}
        if "sft" not in by or not icl:
            continue
        sft = result(by["sft"])
        best_icl = max(icl.items(), key=lambda kv: kv[1]["accuracy"])
        a = sft["accuracy"] > best_icl[1]["accuracy"]
        big = {v: _auc(res, by[v]) for v, res in icl.items() if int(v.split("-")[1]) >= 5}
        zero = _auc(icl["icl-0"], by["icl-0"]) if "icl-0" in icl else float("nan")
        sft_auc = _auc(sft, by["sft"])
        b = bool(big) and all(x > sft_auc and x > zero for x in big.values())
        epochs = by["sft"]["config"]["method"]["sft_epochs"]
        accs = [sft["accuracy"], *(x["accuracy"] for x in icl.values())]
        maj = sft.get("majority_rate")
        gap = max(abs(x - maj) for x in accs) if maj is not None else math.inf
        near = gap <= NEAR_MAJORITY
        lines += [f"- **{art}, {model}, {task}**:",
                  f"  (a) SFT accuracy > every ICL accuracy: **{'holds' if a else 'does not hold'}** "
                  f"(SFT {epochs} epochs {100 * sft['accuracy']:.1f}% vs best ICL {_display(best_icl[0])} "
                  f"{100 * best_icl[1]['accuracy']:.1f}%)."
                  + (f" Every paradigm is within {100 * gap:.1f} points of always answering the majority "
                     f"label ({100 * maj:.1f}%): the model does not do the task at this scale, so (a) is not a test "
                     "of the claim here." if near else ""),
                  f"  (b) ICL k>=5 normalized AUC > SFT and zero-shot: **{'holds' if b else 'does not hold'}** "
                  f"({', '.join(f'{v} {x:.2f}' for v, x in big.items()) or 'no k>=5 run'}; "
                  f"SFT {sft_auc:.2f}; icl-0 {_f(zero)})."
                  + (" Not a test either, for the same reason." if near else "")
                  + " Point estimates; the claims table (results/REPORT.md) gives the CIs and the per-arm guard."]
    if not lines:
        return []
    notes = [x for n in legacy_note(used, "these checks") for x in (n, "")]
    return ["### The paper's headlines at this scale", "", *lines, "", *notes]


def fig4_matrix(runs: list[dict], out: Path) -> list[str]:
    """Mean over (model, dataset) pairs that have every paradigm of np.trapz(ID_a - ID_b)[layers 2..L] / L."""
    groups = [by for by in _groups(runs, ("icl_vs_sft", "offline")).values()]
    paradigms = [v for v in TABLE1 if groups and all(v in by for by in groups)]
    if len(paradigms) < 2:
        return []
    M = np.zeros((len(paradigms), len(paradigms)))
    for by in groups:
        curves = {v: result(by[v])["curves"]["twonn"] for v in paradigms}
        for i, a in enumerate(paradigms):
            for j, b in enumerate(paradigms):
                M[i, j] += heatmap_difference(curves[a], curves[b]) / len(groups)
    names = [_display(v) for v in paradigms]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    lim = np.abs(M).max() or 1.0
    im = ax.imshow(M, cmap="coolwarm", vmin=-lim, vmax=lim)
    ax.set_xticks(range(len(names)), names, rotation=45)
    ax.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("Type 2")
    ax.set_ylabel("Type 1")
    ax.set_title(f"Fig. 4: mean AUC(Type1) - AUC(Type2), {len(groups)} (model, dataset)", fontsize=8)
    fig.colorbar(im, ax=ax)
    png = save_figure(fig, out, "fig4_auc_difference", [{"type1": a, "type2": b, "difference": float(M[i, j])}
                                                         for i, a in enumerate(names) for j, b in enumerate(names)],
                      dpi=110)
    t = Table("fig4_auc_difference", "Fig. 4 matrix: mean AUC(Type 1) − AUC(Type 2)", ["type1 \\ type2", *names],
              runs=[r for by in groups for r in by.values()])
    for n, row in zip(names, M):
        t.add(n, *[f"{x:.4f}" for x in row])
    t.notes = [f"Figure: {_link(png)}. Entry = mean over (model, dataset) of trapz(ID_Type1 - ID_Type2) over layers "
               "2..L, / L (the official heatmap's variant, spec §1.7)."]
    return t.write(out)


# ---- figures ---------------------------------------------------------------------------------------------------

def _cmap(n: int):
    plt = pyplot()
    return [plt.get_cmap("coolwarm")(x) for x in np.linspace(0, 1, max(n, 2))]


def _curve_rows(panel: str, series: str, curve: list[float]) -> list[dict]:
    return [{"panel": panel, "series": series, "x": int(x), "y": float(y)} for x, y in zip(*_layers(curve))]


def _three_panels(out: Path, name: str, title: str, xs: list[str], res: list[dict], aucs: list[float],
                  labels: list[str], xlabel: str | None, auc_line: bool) -> str:
    """The paper's accuracy | ID curves | AUC layout (Figs. 1 and 3): one entry of `xs` per paradigm or k."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    ax[0].bar(xs, [r["accuracy"] for r in res], color="#4c72b0")
    ax[0].set_ylabel("accuracy")
    data = [{"panel": "accuracy", "series": "", "x": x, "y": r["accuracy"]} for x, r in zip(xs, res)]
    for c, r, label in zip(_cmap(len(res)), res, labels):
        ax[1].plot(*_layers(r["curves"]["twonn"]), color=c, label=label, lw=1.3)
        data += _curve_rows("id_twonn", label, r["curves"]["twonn"])
    ax[1].set_xlabel("layer")
    ax[1].set_ylabel("ID (TwoNN)")
    ax[1].legend(fontsize=7)
    if auc_line:
        ax[2].plot([int(x) for x in xs], aucs, marker="o", color="#dd8452")
    else:
        ax[2].bar(xs, aucs, color="#dd8452")
    data += [{"panel": "normalized_auc", "series": "", "x": x, "y": a} for x, a in zip(xs, aucs)]
    ax[2].set_ylabel("normalized AUC")
    if xlabel:
        ax[0].set_xlabel(xlabel)
        ax[2].set_xlabel(xlabel)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, out, name, data, dpi=110)


def triptych(runs: list[dict], out: Path) -> list[str]:
    """Figs. 1 and 29-36: accuracy bars, ID curves and AUC bars per paradigm, one figure per (model, dataset)."""
    made = []
    for (art, model, task), by in sorted(_groups(runs, ("icl_vs_sft", "offline")).items()):
        vs = sorted(by, key=_sort_variant)
        res = [result(by[v]) for v in vs]
        names = [_display(v) for v in vs]
        made.append(_three_panels(out, f"fig1_{_slug(art, model, task)}",
                                  f"{model} / {task} ({art}, N={res[0]['n_prompts']})", names, res,
                                  [_auc(r, by[v]) for r, v in zip(res, vs)], names, None, auc_line=False))
    return made


def vs_k(runs: list[dict], out: Path) -> list[str]:
    """Figs. 3, 7-12 and 37-39: accuracy vs k, ID curves per k, AUC vs k."""
    made = []
    for (art, model, task), by in sorted(_groups(runs, ("icl_vs_k", "unique_demos")).items()):
        vs = sorted((v for v in by if ORDER.match(v)), key=_sort_variant)
        if not vs:
            continue
        ks = [v.split("-")[1] for v in vs]
        res = [result(by[v]) for v in vs]
        made.append(_three_panels(out, f"fig3_{_slug(art, model, task)}", f"{model} / {task} ({art})", ks, res,
                                  [_auc(r, by[v]) for r, v in zip(res, vs)], [f"k={k}" for k in ks], "k",
                                  auc_line=True))
    return made


def sft_panels(runs: list[dict], out: Path) -> tuple[list[str], list[str]]:
    """Figs. 2 and 13-28: train and validation ID curves per checkpoint, accuracy and AUC against the step."""
    sft = sorted((r for r in runs if _family(r) == "sft_dynamics"), key=_key)
    made = []
    t = Table("sft_checkpoints", "SFT checkpoints (Fig. 2 layout; epoch 0 = base model)",
              ["artifact", "model", "task", "split", "epoch", "step", "accuracy %", "AUC TwoNN", "N"], runs=sft)
    for r in sft:
        art, model, task = _key(r)
        ck = r["extra"]["checkpoints"]
        plt = pyplot()
        fig, ax = plt.subplots(1, 4, figsize=(15, 3.4))
        data = []
        for i, split in enumerate(("train", "eval")):
            cs = [c for c in ck if c["split"] == split]
            for col, c in zip(_cmap(len(cs)), cs):
                ax[i].plot(*_layers(c["curves"]["twonn"]), color=col, lw=1.2, label=f"step {c['step']}")
                data += _curve_rows(f"id_twonn_{split}", f"step {c['step']}", c["curves"]["twonn"])
            ax[i].set_title(f"{'validation' if split == 'eval' else 'train'} split", fontsize=8)
            ax[i].set_xlabel("layer")
            ax[i].set_ylabel("ID (TwoNN)")
            ax[i].legend(fontsize=6)
            steps = [c["step"] for c in cs]
            ax[2].plot(steps, [c["accuracy"] for c in cs], marker="o", label=split)
            ax[3].plot(steps, [_auc(c, r) for c in cs], marker="o", label=split)
            data += [{"panel": "accuracy", "series": split, "x": c["step"], "y": c["accuracy"]} for c in cs]
            data += [{"panel": "normalized_auc", "series": split, "x": c["step"], "y": _auc(c, r)} for c in cs]
            for c in cs:
                t.add(art, model, task, split, c["epoch"], c["step"], _f(100 * c["accuracy"], 1), _f(_auc(c, r)),
                      c["n_prompts"])
        ax[2].set_xlabel("step")
        ax[2].set_ylabel("accuracy")
        ax[3].set_xlabel("step")
        ax[3].set_ylabel("normalized AUC")
        ax[2].legend(fontsize=7)
        ax[3].legend(fontsize=7)
        fig.suptitle(f"SFT {model} / {task} ({art})", fontsize=9)
        made.append(save_figure(fig, out, f"fig2_{_slug(art, model, task)}", data, dpi=110))
    return made, t.write(out)


def fig5(runs: list[dict], out: Path) -> str | None:
    groups = _groups(runs, ("icl_vs_sft", "offline"))
    data = {v: [_auc(result(by[v]), by[v]) for by in groups.values() if v in by] for v in TABLE1}
    data = {v: x for v, x in data.items() if x}
    if not data:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.boxplot(list(data.values()), tick_labels=[_display(v) for v in data])
    for i, x in enumerate(data.values(), 1):
        ax.scatter([i] * len(x), x, s=10, color="k", zorder=3)
    ax.set_ylabel("normalized AUC")
    ax.set_title(f"Fig. 5: AUC per paradigm, one point per (model, dataset); n={len(groups)}", fontsize=8)
    return save_figure(fig, out, "fig5_auc_boxplot", [{"paradigm": _display(v), "normalized_auc": a}
                                                      for v, xs in data.items() for a in xs], dpi=110)


def fig6(runs: list[dict], out: Path) -> list[str]:
    """Figs. 6 and 40-45: for each paradigm, the normalized AUC per model, one point per dataset (the paper: all
    within a range of 20); one panel per paradigm, the spread per model in the table."""
    groups = _groups(runs, ("icl_vs_sft", "offline"))
    by_v: dict[str, dict[str, list[float]]] = {}
    for (_, model, _), by in sorted(groups.items()):
        for v, r in by.items():
            by_v.setdefault(v, {}).setdefault(model, []).append(_auc(result(r), r))
    vs = [v for v in TABLE1 if v in by_v]
    if not vs:
        return []
    plt = pyplot()
    fig, axes = plt.subplots(1, len(vs), figsize=(2.6 * len(vs), 3.2), squeeze=False)
    data = []
    t = Table("fig6_auc_per_model", "Figs. 6, 40-45: normalized AUC per model over datasets (range = max - min)",
              ["paradigm", "model", "datasets", "min", "max", "range"],
              runs=[r for by in groups.values() for r in by.values()])
    for ax, v in zip(axes[0], vs):
        models = sorted(by_v[v])
        ax.boxplot([by_v[v][mo] for mo in models], tick_labels=models)
        for i, mo in enumerate(models, 1):
            xs = by_v[v][mo]
            ax.scatter([i] * len(xs), xs, s=10, color="k", zorder=3)
            data += [{"paradigm": _display(v), "model": mo, "normalized_auc": x} for x in xs]
            t.add(_display(v), mo, len(xs), _f(min(xs)), _f(max(xs)), _f(max(xs) - min(xs)))
        ax.set_title(_display(v), fontsize=8)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    axes[0][0].set_ylabel("normalized AUC")
    fig.suptitle("Figs. 6, 40-45: AUC per model, one point per dataset", fontsize=9)
    png = save_figure(fig, out, "fig6_auc_per_model", data, dpi=110)
    t.notes = [f"Figure: {_link(png)}. The paper: for ICL-5 every model's AUCs fall within a range of 20 (L2030)."]
    return t.write(out)


def fig46(runs: list[dict], out: Path) -> list[str]:
    """MLE(k=50) vs TwoNN over every (paradigm, dataset, model, layer >= 1), with the Pearson r."""
    use = [r for r in runs if _family(r) == "mle_check"] or [r for r in runs if _family(r) == "icl_vs_sft"]
    xs, ys = [], []
    for r in use:
        res = [result(r)] if r["extra"].get("paradigm") != "sft" else r["extra"]["checkpoints"]
        for c in res:
            if "mle_k50" in c["curves"]:
                xs += c["curves"]["mle_k50"][1:]
                ys += c["curves"]["twonn"][1:]
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3:
        return []
    r_ = float(np.corrcoef(x, y)[0, 1])
    slope, icpt = np.polyfit(x, y, 1)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4))
    ax.scatter(x, y, s=6, alpha=0.5)
    xx = np.linspace(x.min(), x.max(), 10)
    ax.plot(xx, slope * xx + icpt, color="r", lw=1, label=f"fit; r = {r_:.2f}")
    ax.set_xlabel("MLE (k=50)")
    ax.set_ylabel("TwoNN")
    ax.legend(fontsize=8)
    ax.set_title(f"Fig. 46: {len(x)} (setting, layer) points", fontsize=8)
    png = save_figure(fig, out, "fig46_mle_vs_twonn", [{"mle_k50": float(a), "twonn": float(b)} for a, b in zip(x, y)],
                      dpi=110)
    return ["### Fig. 46: MLE vs TwoNN", "",
            f"Pearson r = **{r_:.3f}** over {len(x)} (setting, layer) points (paper: r = 0.7 over its grid); "
            f"fit TwoNN = {slope:.2f} x MLE + {icpt:.2f}. Figure: {_link(png)}.", ""]


def build(runs: list[dict], out: Path) -> list[str]:
    """Every table and figure above from the run records; returns markdown lines for results/intrinsic_dim/README."""
    out = Path(out)
    runs = [r for r in runs if r.get("status") == "ok" and r.get("extra", {}).get("paradigm")]
    if not runs:
        return []
    lines = [*table1(runs, out), *headlines(runs), *auc_table(runs, out), *fig4_matrix(runs, out)]
    f5 = fig5(runs, out)
    if f5:
        lines += ["### Fig. 5", "", f"Figure: {_link(f5)}", ""]
    lines += fig6(runs, out)
    figs = triptych(runs, out) + vs_k(runs, out)
    sft_figs, sft_lines = sft_panels(runs, out)
    lines += sft_lines + fig46(runs, out)
    figs += sft_figs
    if figs:
        lines += ["### Figures", "", *[f"- {_link(f)}" for f in figs], ""]
    return lines
