"""The paper's own tables and figures, from run records only (`experiments.report` calls `build`).

Tables (results/intrinsic_dim/tables/): Table 1 (accuracy per paradigm), the normalized-AUC table per (model,
dataset, paradigm) the paper does not give, the Fig. 4 matrix, the SFT checkpoints, the benchmark (method=
intrinsic_dim_bench: TwoNN against scikit-dimension, extraction against the official recipe). Verdicts on the paper's
claims are CLAIMS.md's (experiments/evidence/claims.py), never made here. Figures (figures/, each with the
plotted numbers as .csv): Fig. 1/29-36 triptychs (accuracy, ID curves, AUC per paradigm), Fig. 3/7-12 (against k),
Fig. 2 and 13-28 (SFT checkpoints), the Fig. 4 heatmap, the Fig. 5 boxplot, the Figs. 6/40-45 boxplots per model
and the Fig. 46 scatter with Pearson r.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from experiments.evidence.paper_values import paper_values
from experiments.evidence.tables import (LEGACY_BENCHMARK, Table, benchmarks, fmt, pyplot, run_label, runs_of,
                                         save_figure)
from intrinsic_dim.auc import heatmap_difference

ORDER = re.compile(r"^(icl|icl_unique)-(\d+)$")
TABLE1 = ["icl-0", "icl-1", "icl-2", "icl-5", "icl-10", "sft"]
GENERIC_TABLES = ()  # Table 1 and the AUC table below cover every metric of these runs
# the experiments (at any scale: <name>, <name>_cpu, <name>_gpu) behind each set of tables and figures
ICL_VS_SFT = ("intrinsic_dim/icl_vs_sft*", "intrinsic_dim/offline*")
VS_K = ("intrinsic_dim/icl_vs_k*", "intrinsic_dim/unique_demos*")


# ---- reading run records ---------------------------------------------------------------------------------------

def _artifact(r: dict) -> str:
    return r["exp_id"].split("/", 1)[-1]


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


def _slug(*parts: str) -> str:
    return "__".join(re.sub(r"[^A-Za-z0-9_.-]+", "-", p.split(" (")[0]) for p in parts)


def _link(png: str) -> str:
    return f"[{png}]({png})"


# ---- tables ----------------------------------------------------------------------------------------------------

def _groups(runs: list[dict], experiments: tuple[str, ...]) -> dict[tuple, dict[str, dict]]:
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in runs_of(runs, exp_id=list(experiments)):
        out[_key(r)][_variant(r)] = r
    return out


def table1(runs: list[dict], out: Path) -> list[str]:
    groups = _groups(runs, ICL_VS_SFT)
    if not groups:
        return []
    pv = paper_values("intrinsic_dim")
    t = Table("table1_accuracy", "Table 1: logit accuracy (%) per paradigm",
              ["artifact", "model", "task", *[_display(v) for v in TABLE1], "majority class", "paper row",
               "paper (same columns)"], runs=[r for by in groups.values() for r in by.values()])
    via = set()
    for (art, model, task), by in sorted(groups.items()):
        accs = [fmt(100 * result(by[v])["accuracy"], 1) if v in by else "—" for v in TABLE1]
        maj = next((result(r)["majority_rate"] for r in by.values() if "majority_rate" in result(r)), None)
        any_run = next(iter(by.values()))
        matches = [pv.find_for(any_run, v, "accuracy") for v in TABLE1]
        found = [m for m in matches if m is not None]
        via |= {v for m in found for v in m.via}
        t.add(art, model, task, *accs, fmt(None if maj is None else 100 * maj, 1), found[0].row if found else "—",
              " / ".join(fmt(None if m is None else m.value, 1) for m in matches) if found else "—")
    t.notes = ["Logit accuracy over the labels' first tokens; fine-tune = the SFT run's last checkpoint; majority "
               "class = the accuracy of always answering the most frequent gold label. The paper's Table 1 gives only "
               "the mean over its four 7-13B models, shown for orientation."
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
        t.add(*_key(r), _display(_variant(r)), res["n_prompts"], fmt(100 * res["accuracy"], 1),
              ", ".join(f"{lab} {n}" for lab, n in zip(labels, preds)) if preds else "—",
              fmt(a["twonn"]["L"]), fmt(a["twonn"]["L_minus_1"]), fmt(a["mle_k50"]["L"]) if "mle_k50" in a else "—",
              max(res["n_duplicates"][1:] or [0]), fmt(res["mean_prompt_tokens"], 1))
    t.notes = ["Layers 1..L (the embedding output is excluded; its last-token vector is the same newline embedding for "
               "every prompt, so it has no dimension). Both normalizations: the paper's 1/L and the official code's "
               "1/(L-1); max duplicates = the largest number of duplicate states dropped in a layer."]
    section = t.write(out)
    if not section:
        return []
    return [*section[:3], "", *[x for n in t.all_notes() for x in (n, "")]]  # linked, not inlined: a row per run


def fig4_matrix(runs: list[dict], out: Path) -> list[str]:
    """Mean over (model, dataset) pairs that have every paradigm of np.trapz(ID_a - ID_b)[layers 2..L] / L."""
    groups = [by for by in _groups(runs, ICL_VS_SFT).values()]
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
    for (art, model, task), by in sorted(_groups(runs, ICL_VS_SFT).items()):
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
    for (art, model, task), by in sorted(_groups(runs, VS_K).items()):
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
    sft = sorted(runs_of(runs, exp_id="intrinsic_dim/sft_dynamics*"), key=_key)
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
                t.add(art, model, task, split, c["epoch"], c["step"], fmt(100 * c["accuracy"], 1), fmt(_auc(c, r)),
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
    groups = _groups(runs, ICL_VS_SFT)
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
    groups = _groups(runs, ICL_VS_SFT)
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
            t.add(_display(v), mo, len(xs), fmt(min(xs)), fmt(max(xs)), fmt(max(xs) - min(xs)))
        ax.set_title(_display(v), fontsize=8)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    axes[0][0].set_ylabel("normalized AUC")
    fig.suptitle("Figs. 6, 40-45: AUC per model, one point per dataset", fontsize=9)
    png = save_figure(fig, out, "fig6_auc_per_model", data, dpi=110)
    t.notes = [f"Figure: {_link(png)}. The paper: for ICL-5 every model's AUCs fall within a range of 20 (L2030)."]
    return t.write(out)


def fig46(runs: list[dict], out: Path) -> list[str]:
    """MLE(k=50) vs TwoNN over every (paradigm, dataset, model, layer >= 1), with the Pearson r."""
    use = runs_of(runs, exp_id="intrinsic_dim/mle_check*") or runs_of(runs, exp_id="intrinsic_dim/icl_vs_sft*")
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


def benchmark(runs: list[dict], out: Path) -> list[str]:
    """method=intrinsic_dim_bench: TwoNN (ours vs scikit-dimension) and hidden-state extraction (ours vs the official
    recipe), one row per contender and run."""
    found = benchmarks(runs, "intrinsic_dim_bench", out)
    recs = [r for _, r in found if r is not None]
    est = Table("benchmark_twonn", "Benchmark: TwoNN, ours vs scikit-dimension (medians of interleaved repeats)",
                ["shape", "what", "median s", "speed-up vs skdim", "device"], runs=recs)
    ext = Table("benchmark_extraction", "Benchmark: hidden-state extraction in fp32, ours vs the official recipe",
                ["model", "prompts", "task", "mean tokens", "batch", "what", "median s", "real tokens/s", "speed-up",
                 "device"], runs=recs)
    diffs, bf16, gpu = [], [], []
    for b, _ in found:
        e, x, g = b["estimator"], b.get("extraction"), b.get("gpu")
        for what, v in e["timing"].items():
            est.add(e["shape"], what, fmt(v["median_s"], 3), f"{fmt(v['speedup_vs_baseline'])}x", b["device"])
        diffs.append(f"{b['device']}: {e['max_rel_diff_vs_skdim']:.2e} (float64 input); "
                     f"{e['max_rel_diff_vs_skdim_float32_input']:.2e} with float32 input")
        for what, v in (x or {}).get("timing", {}).items():
            ext.add(x["model"], x["prompts"], x["task"], fmt(x["mean_tokens"], 1), x["batch_size"], what,
                    fmt(v["median_s"]), fmt(v["real_tokens_per_s"], 0), f"{fmt(v['speedup_vs_baseline'])}x",
                    b["device"])
        if x:
            bf16.append(f"{b['device']}, over {x['bf16_prompts']} prompts: autocast by up to "
                        f"{100 * x['bf16_autocast_rel_l2_diff_max']:.1f}% (median "
                        f"{100 * x['bf16_autocast_rel_l2_diff_median']:.1f}%), bf16 weights by up to "
                        f"{100 * x['bf16_weights_rel_l2_diff_max']:.1f}% (median "
                        f"{100 * x['bf16_weights_rel_l2_diff_median']:.1f}%)")
        gpu.append(f"{g['median_s']:.3f} s on {g['device']}" if g else f"not measured ({b['device']}: no CUDA device)")
    legacy = [LEGACY_BENCHMARK] if found and not recs else []
    est.notes = [f"Largest relative difference of the estimates vs skdim: {'; '.join(diffs)} (ours casts to float64 "
                 "first, skdim's distances stay float32). One Llama-scale layer's TwoNN (N=5000, D=4096): "
                 f"{'; '.join(gpu)}.", *legacy]
    ext.notes = ["Ours: the backbone only (no LM head), length-sorted right-padded batches (what the activation store "
                 "runs); the official recipe: the full causal LM with its vocabulary projection at every position, "
                 "left-padded batches in data order; real (non-pad) tokens/s. bf16 moves the last-token state "
                 f"(relative L2 of the worst layer): {'; '.join(bf16)}: extraction stays fp32.", *legacy]
    return est.write(out) + ext.write(out)


def build(runs: list[dict], out: Path) -> list[str]:
    """Every table and figure above from the run records; returns markdown lines for results/intrinsic_dim/README."""
    out = Path(out)
    bench = benchmark(runs, out)
    runs = [r for r in runs if r.get("status") == "ok" and r.get("extra", {}).get("paradigm")]
    if not runs:
        return bench
    lines = [*table1(runs, out), "### The paper's headline claims", "",
             "SFT above every ICL accuracy, ICL k >= 5 above SFT and zero-shot in normalized AUC: judged in "
             "[CLAIMS.md](CLAIMS.md), with their intervals and the guard against a model that does not do the task.",
             "", *auc_table(runs, out), *fig4_matrix(runs, out)]
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
    return lines + bench
