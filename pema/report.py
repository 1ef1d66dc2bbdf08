"""PEMA's own tables, built from the run records by `python -m experiments.report pema`:
results/pema/tables/<name>.{md,csv} (+ figures/fig2*.png) beside the paper's numbers and Δ = ours − paper.

Paper numbers come from paper_values.yaml by (model, task, column, metric): each run is compared with the paper's row
for its own model (a paper-scale bert-base-cased with BERT, roberta-base with RoBERTa), or through a twin or stand-in
declared there and labelled in the table; never with a row chosen for every model."""
from __future__ import annotations

import statistics
from pathlib import Path

from experiments.evidence.paper_values import paper_values
from experiments.evidence.stats import percentile_ci
from experiments.evidence.tables import (Estimate, Table, delta, devices, example_replicates, fmt, page, pyplot,
                                         run_label, runs_of, save_figure, scale)

GLUE = ("cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli")
GENERIC_TABLES = ("pema/scores*",)  # every eval/ metric of the pema_scores runs (both arms)
INTRO = (  # the page's opening paragraph
         "Generated from the run records (`pema/report.py`); each table also lies in `tables/` as .md and .csv. "
         "Offline stand-ins are labelled; Δ = ours − paper.")


def _f(x, digits=1) -> str:
    """Thousands separators, as the paper prints sizes."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return fmt(x, digits, thousands=True)
    return fmt(x, digits)


def _v(match):
    return None if match is None else match.value


def _d(ours, match, digits=1) -> str:
    return delta(ours, _v(match), digits)


def _via(*matches) -> set[str]:
    return {v for m in matches if m is not None for v in m.via}


def _via_note(via: set[str]) -> list[str]:
    return [f"Paper rows reached through twins or stand-ins (paper_values.yaml): {'; '.join(sorted(via))}."] if via \
        else []


def build(runs: list[dict], out: Path) -> list[str]:
    return page(INTRO, (table5, table2, table3, table4, fig2, table1, runtime, table9, table10), runs, out)


# ---- Tables 5/6 ------------------------------------------------------------------------------------------------
SIZES = ("sizes/rows", "sizes/n_emb_m", "sizes/n_m", "sizes/ratio_pct")


def table5(runs, out):
    rs = runs_of(runs, exp_id="pema/table5*", method="pema_sizes")
    if not rs:
        return []
    pv = paper_values("pema")
    t = Table("table5_6_sizes", "Tables 5/6: vocabulary and parameter counts",
              ["model", "paper row", "|V|", "paper", "N_emb (M)", "paper", "Δ", "N (M)", "paper", "Δ", "N_emb/N (%)",
               "paper", "Δ", "layers/heads/d"], runs=rs)
    via = set()
    for r in sorted(rs, key=lambda r: r["config"]["model"]["name"]):
        m = r["metrics"]
        rows, emb, n, ratio = (pv.find_for(r, None, k, task=False) for k in SIZES)
        via |= _via(rows, emb, n, ratio)
        found = [x for x in (rows, emb, n, ratio) if x is not None]
        row = f"{found[0].cell.model} ({', '.join(sorted({x.cell.where for x in found}))})" if found else "—"
        t.add(r["config"]["model"]["name"], row, _f(int(m["sizes/rows"])), _f(_v(rows)), _f(m["sizes/n_emb_m"]),
              _f(_v(emb)), _d(round(m["sizes/n_emb_m"], 1), emb), _f(m["sizes/n_m"]), _f(_v(n)),
              _d(round(m["sizes/n_m"], 1), n), _f(m["sizes/ratio_pct"]), _f(_v(ratio)),
              _d(round(m["sizes/ratio_pct"], 1), ratio),
              f"{int(m['sizes/layers'])}/{int(m['sizes/heads'])}/{int(m['sizes/d'])}")
    t.notes = ["Computed from the architecture fields in `conf/model/*.yaml` on the meta device (no weights); N = "
               "AutoModelForSequenceClassification with a 2-label head, as the official code counts. Δ compares at the "
               "paper's rounding (0.1). Table 6 (the DeBERTaV3 family) gives no |V|. Device: "
               f"{devices(rs)}.", *_via_note(via), *cased_question(rs)]
    return t.write(out)


def cased_question(rs) -> list[str]:
    """Table 5 lists cased BERT sizes, but Table 2's model-% rows follow from the uncased ones: both are computed,
    and the notes say which matches."""
    pv = paper_values("pema")
    sz = {r["config"]["model"]["name"]: r["metrics"] for r in rs}
    pairs = [("BERT", "bert-base-cased", "bert-base-uncased"), ("DistilBERT", "distilbert-base-cased",
                                                                  "distilbert-base-uncased")]
    out = []
    for row, cased, uncased in pairs:
        if cased not in sz or uncased not in sz:
            continue
        emb = [pv.get(row, task, None, "reduction/embedding_pct").value for task in GLUE]
        model = [pv.get(row, task, None, "reduction/model_pct").value for task in GLUE]
        err = {}
        for name in (cased, uncased):
            ratio = sz[name]["sizes/ratio_pct"] / 100
            err[name] = max(abs(round(e * ratio, 1) - mp) for e, mp in zip(emb, model))
        c, u = err[cased], err[uncased]
        out.append(f"- Cased or uncased? Table 2's {row} model-% row recomputed as embedding-% × N_emb/N: largest "
                   f"deviation {c:.1f} points with {cased} (|V| {int(sz[cased]['sizes/rows']):,}), {u:.1f} with "
                   f"{uncased} (|V| {int(sz[uncased]['sizes/rows']):,}): Table 2's model-% row follows the "
                   f"{'uncased' if u < c else 'cased'} model, while Table 5 lists the cased sizes.")
    return ["\n".join(out)] if out else []


# ---- Tables 2/3/4 ----------------------------------------------------------------------------------------------
VOCAB_HEAD = ["model (vocabulary)", "task", "|V|", "|V'|", "embedding red. (%)", "paper", "Δ", "model red. (%)",
              "paper", "Δ", "removed (M params)", "paper row compared"]


def table2(runs, out):
    pv = paper_values("pema")
    lines = []
    for exp, name in (("pema/table2_cpu", "table2_cpu"), ("pema/table2", "table2")):
        rs = runs_of(runs, exp_id=exp, method="pema_vocab")
        if not rs:
            continue
        t = Table(name, f"Table 2 ({'offline' if name.endswith('cpu') else 'paper scale'}): parameter reduction",
                  VOCAB_HEAD, runs=rs)
        via = set()
        for r in sorted(rs, key=lambda r: (r["config"]["task"]["name"], r["config"]["model"]["name"])):
            m = r["metrics"]
            pe, pm = (pv.find_for(r, None, k) for k in ("reduction/embedding_pct", "reduction/model_pct"))
            via |= _via(pe, pm)
            t.add(r["config"]["model"]["name"], run_label(r, "task"), _f(int(m["vocab/rows"])),
                  _f(int(m["vocab/used"])),
                  _f(m["reduction/embedding_pct"]), _f(_v(pe)), _d(m["reduction/embedding_pct"], pe),
                  _f(m["reduction/model_pct"]), _f(_v(pm)), _d(m["reduction/model_pct"], pm),
                  _f(m["reduction/params_removed_m"], 2), (pe or pm).row if (pe or pm) else "—")
        t.notes = ["V' = ids of train + eval after each task's tokenization (its max length, truncation, special "
                   "tokens kept). An offline row is compared with the paper row of the same vocabulary family on the "
                   "GLUE task the offline task stands in for, for the embedding reduction only (the model reduction "
                   "also depends on the model's size): different data, so Δ shows the gap, not an error.",
                   *_via_note(via),
                   *largest(rs)]
        lines += t.write(out)
    return lines


def largest(rs) -> list[str]:
    by_task = {}
    for r in rs:
        by_task.setdefault(r["config"]["task"]["name"], []).append(r)
    out = []
    for task, group in sorted(by_task.items()):
        best = max(group, key=lambda r: r["metrics"]["reduction/embedding_pct"])
        best_m = max(group, key=lambda r: r["metrics"]["reduction/model_pct"])
        out.append(f"- {task}: largest embedding reduction {best['config']['model']['name']} "
                   f"({best['metrics']['reduction/embedding_pct']:.1f}%), largest model reduction "
                   f"{best_m['config']['model']['name']} ({best_m['metrics']['reduction/model_pct']:.1f}%)")
    return ["\n".join(out)] if out else []


def table3(runs, out):
    pv = paper_values("pema")
    lines = []
    for exp, name in (("pema/table3_cpu", "table3_cpu"), ("pema/table3", "table3")):
        rs = runs_of(runs, exp_id=exp, method="pema_vocab")
        if not rs:
            continue
        t = Table(name, "Table 3: model-parameter reduction in millions, one vocabulary, several sizes",
                  ["model", "task", "d", "|V'|", "removed (M)", "paper", "Δ", "model red. (%)"], runs=rs)
        via = set()
        for r in sorted(rs, key=lambda r: (r["config"]["task"]["name"], r["config"]["model"]["name"])):
            m = r["metrics"]
            p = pv.find_for(r, None, "reduction/params_removed_m")
            via |= _via(p)
            t.add(r["config"]["model"]["name"], run_label(r, "task"), int(m["params/d"]), _f(int(m["vocab/used"])),
                  _f(m["reduction/params_removed_m"], 2), _f(_v(p)), _d(m["reduction/params_removed_m"], p),
                  _f(m["reduction/model_pct"]))
        t.notes = ["Models that share a vocabulary and d remove the same number of parameters (paper: DeBERTaV3 Small "
                   "= Base); the share of the model differs with depth.", *_via_note(via)]
        lines += t.write(out)
    return lines


def table4(runs, out):
    pv = paper_values("pema")
    lines = []
    for exp, name in (("pema/table4_cpu", "table4_cpu"), ("pema/table4", "table4")):
        rs = runs_of(runs, exp_id=exp, method="pema_vocab")
        if not rs:
            continue
        t = Table(name, "Table 4: reduction as the corpus grows",
                  ["model", "corpus", "examples", "|V'|", "embedding red. (%)", "paper", "Δ", "model red. (%)", "paper",
                   "Δ"], runs=rs)
        for r in sorted(rs, key=lambda r: (r["config"]["model"]["name"], sum(r["extra"]["corpus"].values()))):
            m, c = r["metrics"], r["config"]
            sub = c["method"]["variant"]  # an XNLI language set at paper scale
            pe, pm = (pv.find(c["model"]["name"], f"xnli/{sub}", None, k, model_for=c["model"].get("stand_in_for"))
                      for k in ("reduction/embedding_pct", "reduction/model_pct"))
            t.add(c["model"]["name"], sub, _f(sum(r["extra"]["corpus"].values())), _f(int(m["vocab/used"])),
                  _f(m["reduction/embedding_pct"]), _f(_v(pe)), _d(m["reduction/embedding_pct"], pe),
                  _f(m["reduction/model_pct"]), _f(_v(pm)), _d(m["reduction/model_pct"], pm))
        t.notes = ["Offline analogue of XNLI's growing language sets: a growing union of the offline tasks (all "
                   "English)." if name.endswith("cpu") else "XNLI language configs concatenated as one corpus [R]."]
        lines += t.write(out)
    return lines


# ---- Fig. 2 and Table 1 ----------------------------------------------------------------------------------------
def fig2(runs, out):
    rs = runs_of(runs, exp_id="pema/fig2*", method="pema_vocab")
    lines = []
    for exp in sorted({r["exp_id"] for r in rs}):
        group = sorted((r for r in rs if r["exp_id"] == exp),
                       key=lambda r: (r["config"]["model"]["name"], r["metrics"]["vocab/total"]))
        name = exp.replace("pema/", "")
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(5.5, 4))
        data = [{"model": r["config"]["model"]["name"], "task": r["config"]["task"]["name"],
                 "total_tokens": r["metrics"]["vocab/total"], "unique_tokens": r["metrics"]["vocab/unique"],
                 "vocab_rows": int(r["metrics"]["vocab/rows"])} for r in group]
        for mod in sorted({d["model"] for d in data}):
            pts = [d for d in data if d["model"] == mod]
            ax.plot([d["total_tokens"] for d in pts], [d["unique_tokens"] for d in pts], "o-",
                    label=f"{mod} (|V| {pts[0]['vocab_rows']:,})")
            for d in pts:
                ax.annotate(d["task"], (d["total_tokens"], d["unique_tokens"]), fontsize=6)
        ax.set_xscale("log")
        ax.set_xlabel("total tokens")
        ax.set_ylabel("unique tokens")
        ax.legend(fontsize=7)
        ax.set_title(f"Fig. 2 style: vocabulary usage ({name})", fontsize=9)
        png = save_figure(fig, out, name, data)
        t = Table(name, f"Fig. 2 style: unique vs total tokens ({name})",
                  ["tokenizer (model)", "task", "total tokens", "unique", "|V|", "unique (% of |V|)"], runs=group)
        for r in group:
            m = r["metrics"]
            t.add(r["config"]["model"]["name"], run_label(r, "task"), _f(int(m["vocab/total"])),
                  _f(int(m["vocab/unique"])), _f(int(m["vocab/rows"])), _f(m["vocab/unique_pct"]))
        t.notes = [f"Figure: [{png}]({png}). Untruncated text, no special tokens, train + eval. Paper: GPT-2 "
                   "vocabulary on the nine GLUE tasks, 6 of 9 use < 50% of it, WNLI < 4%."]
        lines += t.write(out)
    return lines


def table1(runs, out):
    rs = runs_of(runs, exp_id="pema/table4*", method="pema_vocab")
    if not rs:
        return []
    pv = paper_values("pema")
    widest = {}
    for r in rs:  # per tokenizer, the run over the largest corpus
        mod = r["config"]["model"]["name"]
        if mod not in widest or sum(r["extra"]["corpus"].values()) > sum(widest[mod]["extra"]["corpus"].values()):
            widest[mod] = r
    t = Table("table1_zero_count", "Table 1 style: tokens that never occur in the corpus",
              ["tokenizer (model)", "corpus (all splits counted)", "examples", "tokens", "zero-count", "zero-count (%)",
               "longest zero-count tokens"], runs=list(widest.values()))
    for mod, r in sorted(widest.items()):
        m = r["metrics"]
        ex = ", ".join(f"{e['id']} `{e['token']}`" for e in r["extra"]["zero_count_examples"][:6])
        tasks = list(dict.fromkeys(k.split("/")[0] for k in r["extra"]["corpus"]))
        splits = list(dict.fromkeys(k.split("/")[1] for k in r["extra"]["corpus"]))
        t.add(mod, f"{' + '.join(tasks)} ({' + '.join(splits)})", _f(sum(r["extra"]["corpus"].values())),
              _f(int(m["vocab/tokenizer_size"])), _f(int(m["vocab/zero_count"])),
              _f(100 * m["vocab/zero_count"] / m["vocab/tokenizer_size"]), ex)
    examples = ", ".join(f"{c.column} `{c.value}`" for c in pv.select(model="GPT-2", metric="zero_count_token"))
    total = pv.get("GPT-2", "wikipedia", None, "vocab/zero_count")
    t.notes = ["Corpus: the offline tasks named (not the paper's >20 GB English Wikipedia). Paper (GPT-2 on "
               f"Wikipedia): \"{total.note}\" tokens never occur, e.g. {examples}. A task corpus is far smaller, so "
               "most of each vocabulary is unused here."]
    return t.write(out)


# ---- runtime, memory, Tables 9/10 ------------------------------------------------------------------------------
def runtime(runs, out):
    rs = runs_of(runs, exp_id="pema/runtime*", method="pema_bench")
    if not rs:
        return []
    t = Table("memory_runtime", "Memory and step time with and without PEMA (MiB, ms)",
              ["model", "task", "|V|", "|V'|", "saving analytic", "saving measured", "measured/analytic", "state full",
               "state PEMA", "peak saving", "step full", "step PEMA", "ratio PEMA/full", "PEMA prep (s)", "device"],
              runs=rs)
    for r in sorted(rs, key=lambda r: r["config"]["task"]["name"]):
        m = r["metrics"]
        t.add(r["config"]["model"]["name"], run_label(r, "task"), _f(int(m["pema/vocab_rows"])),
              _f(int(m["pema/vocab_used"])), _f(m["mem/analytic_saving_mb"]), _f(m["mem/measured_saving_mb"]),
              f"{m['mem/measured_over_analytic']:.3f}", _f(m["mem/state_full_mb"]), _f(m["mem/state_pema_mb"]),
              _f(m["mem/peak_saving_mb"]), _f(m["time/step_ms_full"]), _f(m["time/step_ms_pema"]),
              f"{m['time/step_ratio']:.3f}", f"{m['time/pema_prepare_s']:.3f}", r["provenance"]["device"])
    t.notes = ["Analytical saving = (|V| − |V'|)·d·4 bytes × (weights + grads + 2 AdamW moments). Measured: training "
               "state right after an optimizer step (weights + grads + moments alive, activations freed), fresh copy "
               "per arm, both arms in one process, median of paired rounds; on CPU the process's resident set with "
               "glibc set to map every tensor ≥ 64 KiB separately, on CUDA allocated bytes. Peak saving: the peak over "
               "the steps, activations included. Step time: optimizer steps of both arms interleaved in one process "
               "after a warm-up, median of repeats; other work shared this machine while it ran, so absolute times "
               "are noisy and only the ratio is meaningful."]
    return t.write(out)


def _scores(runs) -> dict[tuple, dict[int, dict]]:
    """method=pema_scores records (both arms in each) by (experiment, model, task), then seed."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in runs_of(runs, exp_id="pema/scores*", method="pema_scores"):
        c = r["config"]
        groups.setdefault((r["exp_id"], c["model"]["name"], c["task"]["name"]), {})[c["seed"]] = r
    return groups


def arm_intervals(recs: list[dict], key: str, n_boot: int | None = None) -> dict[str, tuple[float, float]] | None:
    """95% percentile intervals of the seed-mean of `key` for each arm (eval_full = without, eval = with PEMA),
    resampling the eval examples (the same draws for both arms and every seed: one eval set). None when a record
    kept no per-example scores it can be recomputed from."""
    pes = [(r.get("per_example") or {}) for r in recs]
    if not all(pe.get("eval") and pe.get("eval_full") for pe in pes):
        return None
    reps = {arm: example_replicates(key, [pe[arm] for pe in pes], n_boot) for arm in ("eval_full", "eval")}
    if any(r is None for r in reps.values()):
        return None
    return {arm: percentile_ci(r.mean(0) * scale(key)) for arm, r in reps.items()}


def table9(runs, out):
    groups = _scores(runs)
    if not groups:
        return []
    pv = paper_values("pema")
    t = Table("table9_runtime", "Table 9 style: PEMA preparation vs fine-tuning time (s, mean (sd) over seeds)",
              ["model", "task", "PEMA prep", "fine-tuning", "PEMA (% of FT)", "paper PEMA", "paper FT", "paper %",
               "paper row", "n", "device"])
    via = set()
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0  # noqa: E731
    for (exp, mod, task), by_seed in sorted(groups.items()):
        pema = list(by_seed.values())
        t.runs += pema
        prep = [r["metrics"]["time/pema_prepare_s"] for r in pema]
        train = [r["metrics"]["time/train_s"] for r in pema]
        pct = [100 * p / tr for p, tr in zip(prep, train)]
        pp, pf, pc = (pv.find_for(pema[0], None, k) for k in ("time/pema_prepare_s", "time/train_s", "pema_pct_of_ft"))
        via |= _via(pp, pf, pc)
        t.add(mod, run_label(pema[0], "task"), f"{statistics.mean(prep):.3f} ({sd(prep):.3f})",
              f"{statistics.mean(train):.1f} ({sd(train):.1f})", f"{statistics.mean(pct):.2f}", _f(_v(pp)), _f(_v(pf)),
              _f(_v(pc)), pp.row if pp else "—", len(pema), pema[0]["provenance"]["device"])
    paper_pct = [c.value for c in pv.select(metric="pema_pct_of_ft")]
    t.notes = ["PEMA prep = counting V' over the run's tokenized splits + the id map + E' in place of E (the full "
               "matrix written to disk); fine-tuning = the optimizer steps of the same run (time/train_s). The paper's "
               "times are a V100 with full GLUE training sets; ours are capped CPU runs. The paper columns hold the "
               "paper's row for the run's own model only (Table 9 has RoBERTa alone): for orientation, its PEMA takes "
               f"{min(paper_pct)}-{max(paper_pct)}% of fine-tuning over the nine GLUE tasks.", *_via_note(via)]
    return t.write(out)


def table10(runs, out):
    groups = _scores(runs)
    if not groups:
        return []
    pv = paper_values("pema")
    t = Table("table10_scores", "Table 10 style: scores without and with PEMA (both arms in one run per seed)",
              ["model", "task", "metric", "seeds", "without [95% CI]", "with PEMA [95% CI]", "majority class",
               "max abs Δ logit", "max abs Δ weight", "identical scores per seed", "per seed (without / with)",
               "paper metric", "paper without", "paper with", "paper row"])
    via, mismatch = set(), []
    for (exp, mod, task), by_seed in sorted(groups.items()):
        seeds = sorted(by_seed)
        recs = [by_seed[s] for s in seeds]
        r0 = recs[0]
        t.runs += recs
        pb, pp = (pv.find_for(r0, arm, None) for arm in ("without", "with"))  # the paper's metric for the task
        via |= _via(pb, pp)
        paper_key = f"eval/{pb.cell.metric}" if pb else None
        # score by the paper's metric when the run recorded it (QQP: F1), else by the task's objective
        key = paper_key if paper_key in r0["metrics"] else r0["config"]["task"]["objective"]
        if pb and key != paper_key:
            mismatch.append(f"{mod} on {task}: the paper scores {pb.cell.metric}, the run recorded no {paper_key}")
            pb = pp = None
        full_key = key.replace("eval/", "eval_full/", 1)
        metric_keys = [k for k in r0["metrics"] if k.startswith("eval/")]
        b = [r["metrics"][full_key] * scale(key) for r in recs]
        p = [r["metrics"][key] * scale(key) for r in recs]
        diff = max(abs(r["metrics"][k.replace("eval/", "eval_full/", 1)] - r["metrics"][k])
                   for r in recs for k in metric_keys)
        ci = arm_intervals(recs, key)
        shown = {arm: Estimate(statistics.mean(v), *(ci[arm] if ci else ()), how="examples")
                 for arm, v in (("eval_full", b), ("eval", p))}
        maj = r0["metrics"].get(key.replace("eval/", "eval/majority_", 1))
        per_seed = "; ".join(f"s{s}: {x:.2f} / {y:.2f}" for s, x, y in zip(seeds, b, p))
        dl = max(r["metrics"]["pema/max_abs_dlogit"] for r in recs)
        dw = max(r["metrics"]["pema/max_abs_dweight"] for r in recs)
        t.add(mod, run_label(r0, "task"), key, len(seeds), shown["eval_full"], shown["eval"],
              "—" if maj is None else f"{maj * scale(key):.2f}", f"{dl:.3g}", f"{dw:.3g}",
              "yes" if diff == 0 else f"no (max Δ {diff:.2g})", per_seed, pb.cell.metric if pb else "—", _f(_v(pb)),
              _f(_v(pp)), pb.row if pb else "—")
    paper_gap = max(abs(c.value - pv.get(c.model, c.task, "with", c.metric).value)
                    for c in pv.select(column="without", where="Table 10"))
    t.notes = ["Each seed is one `method=pema_scores` run: the model is built once and both arms start from it, with "
               "one batch order and one RNG state (the same dropout masks); weight decay 0 (spec §5.5). Max abs Δ "
               "logit: over every eval example and class, the arms at their restored best weights; max abs Δ weight: "
               "over every parameter, PEMA's merged input embedding included (largest over seeds). Means over seeds; "
               "the interval resamples the eval examples (2000 resamples, the same draws for both arms). 'identical' "
               "compares every eval/ metric of each seed exactly. The paper columns hold the paper's row for the run's "
               "own model (5 seeds, V100; Matthews corr. for CoLA, F1 for QQP, Spearman for STS-B, accuracy "
               "otherwise), scored by the same metric as ours; a model the paper did not run has none. For "
               f"orientation, the paper's own rows differ between the arms by at most {paper_gap:.1f} points.",
               *_via_note(via),
               *([f"Not compared: {'; '.join(mismatch)}."] if mismatch else [])]
    return t.write(out)
