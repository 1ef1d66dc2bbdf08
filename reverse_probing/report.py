"""Reverse probing's own tables and figures, built from results/reverse_probing/runs/**/*.json by
`python -m experiments.report reverse_probing` (never edited by hand). Records are grouped by what they computed
(target task, hardware, method.sources, method.variant, method.aggregate, layers), not by experiment, and every table
keeps its targets apart: winogrande-coref (the offline coreference target, CoNLL F1) and quoref (the stand-in target,
labelled so: frozen MiniLM carries no WinoGrande signal, so the comparisons run on Quoref with the suite's QA head,
SQuAD F1 0-100):

    tables/signal            is there anything to probe? accuracy (or F1) against the majority class / a trivial
                             answerer per source, CoNLL F1, WSC273
    tables/table1_single     Table 1: single sources × {mean, attention} × {full, norm, trunc} and concat-n+attention,
                             ours beside the paper's row (stand-ins labelled)          (+ figures/fig2_sources)
    tables/table2_pairs      Table 2: pairs; tables/table3_multi: Table 3, three sources and more
    tables/layer_sweep       the sweep behind "trunc" (Fig. 5): eval F1 per layer (the final layer = the full
                             record), the layer chosen on dev per source, the best intermediate layer (dev) against
                             the final one, the paper's sweep beside it                (+ figures/fig5_layer_sweep)
    tables/mean_vs_attention Fig. 4: mean vs attention over the full embeddings, paired by seed
    tables/single_vs_pairs   Fig. 8: each pair beside its two single sources, pair − best single (chosen on dev)
    tables/cossim            Fig. 3: mean cosine of each source's token embeddings to the CorefTarget encoder's
    figures/fig9_alpha       Fig. 9: the attention weight per source over training, 3+ sources (tables/alpha)
    tables/sum_vs_mean       §4.3: sum vs mean aggregation, paired by seed
    tables/source_tasks      each source fine-tune scored on its own task (is it a trained source at all?)
    tables/bench             head-only training per epoch vs one encoder forward over the same documents

Every score is the target's objective on its eval split (CoNLL F1 ×100 for coreference, SQuAD F1 for quoref), scored
once at the weights dev chose; a cell is mean [95 % t interval over seeds] (n). Layers and concat depths are chosen on
dev, never on eval. A section without records says which command makes them."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.evidence import selection
from experiments.evidence.paper_values import paper_values
from experiments.evidence.tables import (PERCENT, SEED_INTERVAL, Estimate, Table, figure_link, fmt, hardware_label,
                                         metric_cell, natural, page, pyplot, runs_of, save_figure, seed_interval)
from experiments.evidence.tables import caps as table_caps
from experiments.evidence.tables import config_value as _c

PAPER = "reverse_probing"
PAPER_TASK = "CoNLL-2012"
PAPER_BLOCK = f"paper: {PAPER_TASK} dev, bert-base-cased sources"
PAPER_ROWS = ("MRPC", "NER", "RE", "QA", "BERT", "Coref")  # Table 1's order
VARIANTS = ("full", "norm", "trunc")
AGGS = {"mean": "mean", "attention": "attn"}
T1_CONCAT = (4, 6, 12)  # the paper's concat depths
PERCENT_KEYS = PERCENT | {"conll_f1", "muc_f1", "b3_f1", "ceafe_f1"}  # fractions, shown ×100
RUN_ALL = "`make reverse_probing-cpu` (the CPU tier; `make reverse_probing` at paper scale)"
STAND_IN_TARGETS = {"quoref": "stand-in target, QA head, SQuAD F1"}  # labelled wherever a row or a block names it
TRIVIAL_COL = "trivial answer"
TRIVIAL_NOTE = ("Trivial answer: what an answer that reads no features scores on the same eval split, the baseline "
                "the claims hold every arm to (needs_signal): on winogrande-coref the best constant clustering "
                "(eval/majority_conll_f1), on quoref a question-blind answerer, the passage's most frequent "
                "capitalised word (eval/majority_f1). A cell at or below it is no evidence that the source transfers "
                "anything, however close it sits to the paper's number.")


def caps(runs: list[dict]) -> list[str]:
    """The kit's caps line, told where a coreference probe keeps its limits: documents (n_samples *_docs) and the
    epoch budget and patience of method.* (the shared train.* group is the QA probe's and the fine-tunes')."""
    def told(r: dict) -> dict:
        c, m = r["config"], r["config"].get("method", {})
        if c.get("task", {}).get("type") != "coref" or "max_epochs" not in m:
            return r
        n = {f"{s}_examples": v for s, v in ((k[:-5], v) for k, v in r.get("n_samples", {}).items()
                                              if k.endswith("_docs")) if s in ("train", "dev", "eval")}
        return {**r, "n_samples": n, "config": {**c, "train": {"epochs": m["max_epochs"], "patience": m.get("patience"),
                                                                "max_steps": 0}}}
    return table_caps([told(r) for r in runs])


def run_exp(name: str) -> str:
    """How to make a section's records: the quoref_* grid runs after the tier (outside its 15 minutes)."""
    how = f"`python -m experiments.run -m experiment=reverse_probing/{name}`"
    return how + ("" if name.startswith("quoref") else f" or {RUN_ALL}")


# ---- records ------------------------------------------------------------------------------------------------------

def sources(r: dict) -> tuple[str, ...]:
    return tuple(_c(r, "method.sources") or [_c(r, "model.name")])


def _group(r: dict) -> tuple[str, str]:
    """A block of rows: the target task and the hardware (scales never mix)."""
    return _c(r, "task.name"), hardware_label(r)


def target_label(task: str) -> str:
    """'quoref (stand-in target, QA head, SQuAD F1)', 'winogrande-coref (CoNLL F1)'."""
    return f"{task} ({STAND_IN_TARGETS[task]})" if task in STAND_IN_TARGETS else f"{task} (CoNLL F1)"


def _block(g: tuple) -> str:
    return f"{target_label(g[0])}, {g[1]}"


def objective(r: dict, split: str = "eval") -> str:
    return (_c(r, "task.objective") or "eval/conll_f1").replace("eval/", f"{split}/", 1)


def score(r: dict, split: str = "eval") -> float | None:
    """The target's objective in points (a fraction ×100; SQuAD-style f1/em are points already)."""
    return points(r, objective(r, split))


def arm(recs: list[dict], srcs: tuple, variant: str, agg: str, **fields) -> list[dict]:
    """The records of one configuration (all seeds)."""
    return [r for r in recs if sorted(sources(r)) == sorted(srcs) and _c(r, "method.variant") == variant
            and _c(r, "method.aggregate") == agg and all(_c(r, f"method.{k}") == v for k, v in fields.items())]


def best_on_dev(recs: list[dict], field: str) -> tuple[list[dict], object]:
    """The records at the value of `field` with the best mean dev objective (experiments.evidence.selection), and that
    value."""
    if not recs:
        return [], None
    chosen = selection.best_dev_over(recs, field)
    return chosen, _c(chosen[0], field)


def layer_of(trunc) -> int | None:
    return trunc[0] if isinstance(trunc, list) and trunc else trunc


def final_layer(recs: list[dict]) -> int | None:
    """The hidden_states index full records read (their extract/layer: 6 for MiniLM, 12 for BERT)."""
    got = {r["metrics"].get("extract/layer") for r in recs} - {None}
    return int(max(got)) if got else None


def layer_arms(block: list[dict], src: str, agg: str = "mean") -> dict[int, list[dict]]:
    """{layer: records} of one source: its trunc records by layer and, at the final layer, its full records (trunc at
    the last index is the full computation: the paper's Coref(12) mean-trunc is its mean-full). {} without a sweep."""
    out: dict[int, list[dict]] = {}
    for r in arm(block, (src,), "trunc", agg):
        out.setdefault(layer_of(_c(r, "method.trunc")), []).append(r)
    full = arm(block, (src,), "full", agg)
    final = final_layer(full)
    if out and full and final is not None and final not in out:
        out[final] = full
    return dict(sorted(out.items()))


def chosen_layer(arms: dict[int, list[dict]], candidates=None) -> int | None:
    """The layer with the best mean dev objective over seeds (ties: the lower layer); eval never chooses."""
    dev = {L: mean_of(rs, "dev") for L, rs in arms.items() if candidates is None or L in candidates}
    dev = {L: v for L, v in dev.items() if v is not None}
    return min(dev, key=lambda L: (-dev[L], L)) if dev else None


# ---- the paper's names for our sources ----------------------------------------------------------------------------

def paper_name(source: str) -> str | None:
    pv = paper_values(PAPER)
    twin = pv.twins["models"].get(source)
    return pv.models.get(source) or (twin.paper if twin else None)


def source_label(source: str) -> str:
    pv = paper_values(PAPER)
    if source in pv.models:
        return source
    p = paper_name(source)
    return f"{source} (stand-in for {p}{' / BERT' if p == 'MRPC' else ''})" if p else source


def ordered(srcs: tuple) -> tuple:
    """Our sources in the order of the paper's row for the same set (RE+MRPC), else as given."""
    row = paper_combo(srcs, "Table 2") or paper_combo(srcs, "Table 3") or ""
    pos = {name: i for i, name in enumerate(row.split("+"))}
    return tuple(sorted(srcs, key=lambda s: pos.get(paper_name(s), len(pos))))


def combo_label(srcs: tuple, layers: dict | None = None) -> str:
    """'NER(2)+MRPC(4) [minilm-l6-ner, minilm-l6]': the paper's names, the layer per source when truncated, ours."""
    srcs = ordered(srcs)
    names = [paper_name(s) or s for s in srcs]
    if layers:
        names = [f"{n}({layers[s]})" for n, s in zip(names, srcs)]
    return "+".join(names) + f" [{', '.join(srcs)}]"


def paper_cell(row: str | None, column: str, metric: str = "conll_f1"):
    return paper_values(PAPER).get(row, PAPER_TASK, column, metric) if row else None


def paper_combo(srcs: tuple, where: str) -> str | None:
    """The paper's row of a combination of our sources (as a set of paper names), in Table `where`."""
    want = sorted(paper_name(s) or "?" for s in srcs)
    for c in paper_values(PAPER).select(metric="conll_f1", where=where):
        if sorted(c.model.split("+")) == want:
            return c.model
    return None


def paper_text(row: str | None, column: str) -> str:
    m, sd = paper_cell(row, column), paper_cell(row, column, "conll_f1_std")
    return "—" if m is None else f"{fmt(m.value)}" + (f" ± {fmt(sd.value)}" if sd else "")


# ---- numbers with their intervals ---------------------------------------------------------------------------------

def mean_of(recs: list[dict], split: str = "eval") -> float | None:
    v = [s for r in recs if (s := score(r, split)) is not None]
    return float(np.mean(v)) if v else None


def paired(a: list[dict], b: list[dict]) -> list[float]:
    """a − b per seed, over the seeds both arms have."""
    by_seed = {_c(r, "seed"): score(r) for r in b}
    return [score(r) - by_seed[_c(r, "seed")] for r in a
            if _c(r, "seed") in by_seed and score(r) is not None and by_seed[_c(r, "seed")] is not None]


def _blocks(recs: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in recs:
        out.setdefault(_group(r), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: natural(kv[0])))


def _sets(recs: list[dict], k: range) -> list[tuple]:
    """The source sets of size in `k` among the records, in the paper's row order."""
    order = {n: i for i, n in enumerate(PAPER_ROWS)}
    sets = {tuple(sorted(sources(r))) for r in recs if len(sources(r)) in k}
    return sorted(sets, key=lambda s: (len(s), [order.get(paper_name(x), 9) for x in s], s))


# ---- Table 1 ------------------------------------------------------------------------------------------------------

def _layers(r: dict) -> dict:
    """{source: truncation layer} of a trunc record (method.trunc runs parallel to method.sources)."""
    return dict(zip(sources(r), _c(r, "method.trunc") or []))


def _trunc_cells(recs: list[dict], srcs: tuple) -> tuple[list[dict], list[dict], dict | None]:
    """(mean-trunc records, attention-trunc records, {source: layer}): the layers chosen on dev under mean aggregation
    and reused for attention, as the paper does (attention chosen on its own dev when it was not run there). A single
    source chooses among its sweep and its final layer (the full record; attention then reads attn-full)."""
    if len(srcs) == 1:
        arms = layer_arms(recs, srcs[0])
        layer = chosen_layer(arms)
        if layer is not None:
            final = final_layer(arm(recs, srcs, "full", "mean"))
            att = arm(recs, srcs, "full", "attention") if layer == final else [
                r for r in arm(recs, srcs, "trunc", "attention") if layer_of(_c(r, "method.trunc")) == layer]
            if not att:
                att, _ = best_on_dev(arm(recs, srcs, "trunc", "attention"), "method.trunc")
            return arms[layer], att, {srcs[0]: layer}
    mean, _ = best_on_dev(arm(recs, srcs, "trunc", "mean"), "method.trunc")
    layers = _layers(mean[0]) if mean else None
    att = [r for r in arm(recs, srcs, "trunc", "attention") if _layers(r) == layers]
    if not att:
        att, _ = best_on_dev(arm(recs, srcs, "trunc", "attention"), "method.trunc")
    return mean, att, layers or (_layers(att[0]) if att else None)


def table1(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method=PAPER) if len(sources(r)) == 1]
    if not recs:
        return [f"_Table 1 (single sources): no single-source method=reverse_probing records; run "
                f"{run_exp('quoref_single')} (and {run_exp('signal_cpu')} for winogrande-coref)._", ""]
    ours_n = sorted({n for r in recs if (n := _c(r, "method.concat_n")) is not None})
    concat = sorted(set(T1_CONCAT) | set(ours_n))
    cols = [f"{AGGS[a]}-{v}" for a in AGGS for v in VARIANTS] + [f"concat{n}-attn" for n in concat]
    t = Table("table1_single", "Table 1: single sources (ours: eval F1 of each target, mean [95% CI] (n); paper: dev "
              "CoNLL F1, mean ± std)", ["target (hardware)", "source", "row", TRIVIAL_COL, "trunc layer", *cols],
              runs=recs)
    bars = []
    for g, block in _blocks(recs).items():
        ours = {s[0]: s for s in _sets(block, range(1, 2))}
        placed = set()
        for row in PAPER_ROWS:
            for src in [s for s in ours if paper_name(s) == row]:
                t.add(_block(g), source_label(src), "ours", *_table1_row(block, ours[src], concat))
                placed.add(src)
            best = paper_cell(row, "trunc", "best_layer")
            t.add(PAPER_BLOCK, row, "paper", "—", best.value if best else "—", *(paper_text(row, c) for c in cols))
        for src in sorted(set(ours) - placed):
            t.add(_block(g), source_label(src), "ours", *_table1_row(block, ours[src], concat))
        bars += [(g, s, arm(block, ours[s], "full", "mean")) for s in ours]
    fig = _fig2(bars, out)
    t.notes = ["Ours: the target's F1 on its eval split at the dev-chosen epoch (CoNLL F1 ×100 on winogrande-coref; "
               "SQuAD F1 on quoref, the stand-in target: the suite's QA head on the frozen features; its 'Coref' row "
               "is minilm-l6-quoref, minilm-l6 fine-tuned on quoref itself); trunc = the layer (hidden_states index, "
               "the final one being the full record) with the best mean dev F1 under mean aggregation, reused for "
               "attention (the paper's protocol); concat-n = the last n layers concatenated, attention only. "
               "Paper: dev F1 of bert-base-cased sources "
               "on CoNLL-2012, mean ± std over 3 seeds (mean-full and Coref mean-trunc: 5). The offline sources "
               "are MiniLM-L6-H384 fine-tunes on other tasks standing for the paper's (labelled): compare the "
               "pattern of a row, never an absolute number.", TRIVIAL_NOTE,
               *([f"Figure (Fig. 2, full, mean): {figure_link(fig)}."] if fig else []), *caps(recs)]
    return t.write(out)


def trivial(recs: list[dict]) -> str:
    """The trivial answer's score on the records' target (the mean over the records: one value per eval set), in
    points: what the claims' needs_signal compares every arm with (eval/majority_<objective>)."""
    return _mean_cell(recs, objective(recs[0]).replace("eval/", "eval/majority_", 1)) if recs else "—"


def _table1_row(block: list[dict], srcs: tuple, concat: list[int]) -> list[str]:
    mean_t, att_t, layers = _trunc_cells(block, srcs)
    cells = []
    for agg in AGGS:
        for v in VARIANTS:
            rs = (mean_t if agg == "mean" else att_t) if v == "trunc" else arm(block, srcs, v, agg)
            cells.append(seed_interval([score(r) for r in rs]))
    cells += [seed_interval([score(r) for r in arm(block, srcs, "concat", "attention", concat_n=n)]) for n in concat]
    return [trivial(arm_any(block, srcs)), layers[srcs[0]] if layers else "—", *cells]


def arm_any(recs: list[dict], srcs: tuple) -> list[dict]:
    """Every record of one source set, whatever its variant or aggregation."""
    return [r for r in recs if sorted(sources(r)) == sorted(srcs)]


def _fig2(bars: list, out: Path) -> str | None:
    bars = [b for b in bars if b[2]]
    if not bars:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.1 * len(bars) + 2, 3.4))
    data = []
    for i, (g, src, rs) in enumerate(bars):
        v = [score(r) for r in rs]
        ax.bar(i, np.mean(v), yerr=np.std(v, ddof=1) if len(v) > 1 else 0, capsize=3, color="tab:blue")
        data.append({"target": g[0], "hardware": g[1], "source": src, "paper_row": paper_name(src),
                     "eval_f1_mean": float(np.mean(v)), "seeds": len(v)})
    ax.set_xticks(range(len(bars)), [f"{b[1]}\n{b[0][0]}" + ("*" * (b[0][0] in STAND_IN_TARGETS)) for b in bars],
                  fontsize=7, rotation=30)
    ax.set_ylabel("eval F1 (CoNLL ×100 / SQuAD)")
    ax.set_title("Fig. 2: single sources, full, mean aggregation (mean ± sd over seeds; * quoref, the stand-in "
                 "target)", fontsize=8)
    return save_figure(fig, out, "fig2_sources", data)


# ---- Tables 2 and 3 -----------------------------------------------------------------------------------------------

def combos(runs: list[dict], out: Path, name: str, where: str, k: range) -> list[str]:
    recs = [r for r in runs_of(runs, method=PAPER) if len(sources(r)) in k]
    what = "pairs" if k.start == 2 and k.stop == 3 else "three sources and more"
    if not recs:
        return [f"_{where} ({what}): no method=reverse_probing records with {what}; run "
                f"{run_exp('quoref_pairs' if k.start == 2 and k.stop == 3 else 'quoref_multi')}._", ""]
    cols = [f"{AGGS[a]}-{v}" for a in AGGS for v in VARIANTS]
    t = Table(name, f"{where}: {what} (ours: eval F1 of each target, mean [95% CI] (n); paper: dev CoNLL F1, "
              "mean ± std)",
              ["target (hardware)", "sources", "row", *cols], runs=recs)
    for g, block in _blocks(recs).items():
        for srcs in _sets(block, k):
            mean_t, att_t, layers = _trunc_cells(block, srcs)
            cells = [seed_interval([score(r) for r in ((mean_t if a == "mean" else att_t) if v == "trunc"
                                                  else arm(block, srcs, v, a))]) for a in AGGS for v in VARIANTS]
            t.add(_block(g), combo_label(srcs, layers), "ours", *cells)
            row = paper_combo(srcs, where)
            if row:
                t.add(PAPER_BLOCK, row, "paper", *(paper_text(row, c) for c in cols))
    t.notes = ["Rows: our source set (the paper's names first, our sources in brackets, the truncation layer per "
               "source in parentheses: chosen on dev under mean aggregation, as a set of layers for the whole "
               "combination), then the paper's row for the same set of paper sources where it has one. The paper "
               "truncates each source at its own single-model best layer (MRPC 9, RE 9, NER 6, QA 8).", *caps(recs)]
    return t.write(out)


def table2(runs: list[dict], out: Path) -> list[str]:
    return combos(runs, out, "table2_pairs", "Table 2", range(2, 3))


def table3(runs: list[dict], out: Path) -> list[str]:
    return combos(runs, out, "table3_multi", "Table 3", range(3, 99))


# ---- the layer sweep (Fig. 5) -------------------------------------------------------------------------------------

def layer_sweep(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method=PAPER) if len(sources(r)) == 1 and _c(r, "method.aggregate") == "mean"
            and _c(r, "method.variant") in ("trunc", "full")]
    if not any(_c(r, "method.variant") == "trunc" for r in recs):
        return [f"_Layer sweep (Fig. 5): no single-source trunc records with mean aggregation; run "
                f"{run_exp('quoref_layers')} (with {run_exp('quoref_single')} for the final layer)._", ""]
    rows = []
    for g, block in _blocks(recs).items():
        for srcs in _sets([r for r in block if _c(r, "method.variant") == "trunc"], range(1, 2)):
            arms = layer_arms(block, srcs[0])
            final = final_layer(arm(block, srcs, "full", "mean"))
            rows.append((g, srcs[0], arms, final, chosen_layer(arms),
                         chosen_layer(arms, [L for L in arms if L != final])))
    layers = sorted({L for row in rows for L in row[2]})
    t = Table("layer_sweep", "Layer sweep (Fig. 5): eval F1 per layer (mean aggregation; the final layer is the full "
              "record), the layer chosen on dev", ["target (hardware)", "source", *[f"L{L}" for L in layers],
                                                   "layer chosen on dev", "dev F1 there", "best intermediate (dev)",
                                                   "intermediate − final (paired)", "paper best layer",
                                                   "paper sweep L6..L12"], runs=recs)
    for g, src, arms, final, best, inter in rows:
        row = paper_name(src)
        pl = paper_cell(row, "trunc", "best_layer")
        sweep = [paper_cell(row, f"trunc-L{L}") for L in range(6, 13)]
        gain = paired(arms[inter], arms[final]) if inter is not None and final in arms else []
        t.add(_block(g), source_label(src), *[seed_interval([score(r) for r in arms.get(L, [])]) for L in layers],
              best if best is not None else "—", fmt(mean_of(arms[best], "dev")) if best is not None else "—",
              inter if inter is not None else "—", seed_interval(gain, sign=True), pl.value if pl else "—",
              " / ".join(fmt(c.value) for c in sweep) if all(sweep) else "—")
    fig = _fig5([(g, src, arms, best) for g, src, arms, _, best, _ in rows], out)
    t.notes = ["L = hidden_states index (1 = the first block's output); the final layer's cell is the source's full "
               "record (MiniLM: L6; the sweeps run L1-5 offline, L6-11 at paper scale). The layer is chosen on the "
               "dev split (mean over seeds) and scored on eval, so the choice is not optimistic as the paper's is (it "
               "picks on the dev set it reports); 'best intermediate' is chosen on dev among the layers below the "
               "final one, and 'intermediate − final' pairs seeds (the claim intermediate-layer-beats-final). The "
               "paper's sweep covers L = 6..12 of 12 layers (NER still rising at 6); its argmax layers: MRPC 9, RE 9, "
               "QA 8, NER 6, BERT 10, Coref 12.",
               f"Figure: {figure_link(fig)} (mean ± 95% CI over seeds; the star marks the layer chosen on dev)."]
    return t.write(out)


def _fig5(curves: list, out: Path) -> str:
    plt = pyplot()
    blocks = sorted({c[0] for c in curves}, key=natural)
    fig, axes = plt.subplots(1, len(blocks), figsize=(5.2 * len(blocks), 3.6), squeeze=False)
    data = []
    for ax, g in zip(axes[0], blocks):
        for _, src, arms, best in [c for c in curves if c[0] == g]:
            xs = list(arms)
            band = [_band([score(r) for r in arms[L]]) for L in xs]
            line, = ax.plot(xs, [b[0] for b in band], "o-", ms=3, label=source_label(src))
            ax.fill_between(xs, [b[1] for b in band], [b[2] for b in band], alpha=0.15, color=line.get_color())
            if best in xs:
                ax.plot([best], [band[xs.index(best)][0]], "*", ms=12, color=line.get_color())
            data += [{"target": g[0], "hardware": g[1], "source": src, "layer": L, "eval_f1_mean": b[0],
                      "ci_lo": b[1], "ci_hi": b[2], "chosen_on_dev": L == best} for L, b in zip(xs, band)]
        ax.set_xlabel("layer L (hidden_states index; the last = full)")
        ax.set_ylabel("eval F1")
        ax.set_title(f"{_block(g)}: mean aggregation", fontsize=8)
        ax.legend(fontsize=6)
    return save_figure(fig, out, "fig5_layer_sweep", data)


def _band(values) -> tuple[float, float, float]:
    e = seed_interval(values)
    return (e.value, e.value, e.value) if e.lo is None else (e.value, e.lo, e.hi)


# ---- Fig. 4: mean vs attention ------------------------------------------------------------------------------------

def mean_vs_attention(runs: list[dict], out: Path) -> list[str]:
    recs = runs_of(runs, {"method.variant": "full", "method.aggregate": list(AGGS)}, method=PAPER)
    rows = []
    for g, block in _blocks(recs).items():
        for srcs in _sets(block, range(1, 99)):
            m, a = arm(block, srcs, "full", "mean"), arm(block, srcs, "full", "attention")
            if m and a:
                rows.append((g, srcs, m, a))
    if not rows:
        return [f"_Mean vs attention (Fig. 4): needs full-variant records of one source set under both mean and "
                f"attention; run {run_exp('quoref_single')} and {run_exp('quoref_pairs')}._", ""]
    t = Table("mean_vs_attention", "Mean vs attention over the full embeddings (Fig. 4): eval F1",
              ["target (hardware)", "sources", "mean", "attention", "attention − mean (paired)",
               "paper mean / attention", "paper Δ"], runs=[r for row in rows for r in row[2] + row[3]])
    data = []
    for g, srcs, m, a in rows:
        prow = paper_name(srcs[0]) if len(srcs) == 1 else paper_combo(srcs, "Table 2") or paper_combo(srcs, "Table 3")
        pm, pa = paper_cell(prow, "mean-full"), paper_cell(prow, "attn-full")
        t.add(_block(g), combo_label(srcs), seed_interval([score(r) for r in m]), seed_interval([score(r) for r in a]),
              seed_interval(paired(a, m), sign=True), f"{fmt(pm.value)} / {fmt(pa.value)}" if pm and pa else "—",
              fmt(pa.value - pm.value, sign=True) if pm and pa else "—")
        data += [{"target": g[0], "hardware": g[1], "sources": "+".join(srcs), "k": len(srcs), "aggregate": agg,
                  "eval_f1_mean": mean_of(rs), "seeds": len(rs)} for agg, rs in (("mean", m), ("attention", a))]
    fig = _grouped_bars(data, "aggregate", ("mean", "attention"), out, "fig4_mean_vs_attention",
                        "Fig. 4: full embeddings, mean vs attention ((a) pairs, (b) single sources)")
    t.notes = ["Attention is the official code's form (learned constant query, per-source keys and value "
               "projections) unless method.aggregate says attention_literal; for one source it still adds a "
               f"value projection. Figure: {figure_link(fig)}."]
    return t.write(out)


def _grouped_bars(data: list[dict], key: str, arms: tuple, out: Path, name: str, title: str) -> str:
    plt = pyplot()
    panels = [(lbl, [d for d in data if sel(d["k"])]) for lbl, sel in (("pairs and more", lambda k: k >= 2),
                                                                        ("single sources", lambda k: k == 1))]
    panels = [p for p in panels if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.6), squeeze=False)
    for ax, (lbl, rows) in zip(axes[0], panels):
        names = list(dict.fromkeys((d["target"], d["hardware"], d["sources"]) for d in rows))
        w = 0.8 / len(arms)
        for j, a in enumerate(arms):
            ys = [next((d["eval_f1_mean"] for d in rows if (d["target"], d["hardware"], d["sources"]) == n
                        and d[key] == a), np.nan) for n in names]
            ax.bar(np.arange(len(names)) + (j - (len(arms) - 1) / 2) * w, ys, w, label=str(a))
        ax.set_xticks(range(len(names)), [n[2].replace("+", "+\n") for n in names], fontsize=6)
        ax.set_ylabel("eval F1")
        ax.set_title(lbl, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, out, name, data)


# ---- Fig. 8: single vs pairs --------------------------------------------------------------------------------------

def single_vs_pairs(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method=PAPER) if _c(r, "method.variant") == "full"]
    t = Table("single_vs_pairs", "Single sources vs their pair (Fig. 8), full embeddings: eval F1",
              ["target (hardware)", "aggregate", "pair", "source 1", "source 2", "both", "best single (dev)",
               "pair − best single (paired)", "paper: 1 / 2 / pair"], runs=recs)
    data = []
    for g, block in _blocks(recs).items():
        for pair in map(ordered, _sets(block, range(2, 3))):
            for agg, short in AGGS.items():
                p = arm(block, pair, "full", agg)
                singles = [arm(block, (s,), "full", agg) for s in pair]
                if not p or not all(singles):
                    continue
                best = max(singles, key=lambda rs: mean_of(rs, "dev") if mean_of(rs, "dev") is not None
                           else -np.inf)
                prow = paper_combo(pair, "Table 2")
                paper = [paper_cell(x, f"{short}-full") for x in (*(paper_name(s) for s in pair), prow)]
                t.add(_block(g), agg, combo_label(pair),
                      *(seed_interval([score(r) for r in rs]) for rs in (*singles, p)),
                      sources(best[0])[0], seed_interval(paired(p, best), sign=True),
                      " / ".join(fmt(c.value) if c else "—" for c in paper))
                data += [{"target": g[0], "hardware": g[1], "aggregate": agg, "pair": "+".join(pair), "bar": bar,
                          "eval_f1_mean": mean_of(rs), "seeds": len(rs)}
                         for bar, rs in ((pair[0], singles[0]), (pair[1], singles[1]), ("pair", p))]
    if not t.rows:
        return [f"_Single vs pairs (Fig. 8): needs full-variant pairs and both of their single sources under one "
                f"aggregation; run {run_exp('quoref_pairs')} and {run_exp('quoref_single')}._", ""]
    fig = _fig8(data, out)
    t.notes = ["The best single source is the one with the higher mean dev F1 (eval never chooses); 'pair − best "
               "single' pairs seeds. The paper's pairs beat their better single source under attention in every "
               "row, under mean in 4 of 6 (NER+MRPC and QA+MRPC fall below MRPC alone). The paper's MRPC column "
               f"stands beside minilm-l6. Figure: {figure_link(fig)}."]
    return t.write(out)


def _fig8(data: list[dict], out: Path) -> str:
    plt = pyplot()
    aggs = [a for a in AGGS if any(d["aggregate"] == a for d in data)]
    fig, axes = plt.subplots(1, len(aggs), figsize=(6.5 * len(aggs), 3.6), squeeze=False)
    for ax, agg in zip(axes[0], aggs):
        rows = [d for d in data if d["aggregate"] == agg]
        pairs = list(dict.fromkeys((d["target"], d["hardware"], d["pair"]) for d in rows))
        for i, key in enumerate(pairs):
            bars = [d for d in rows if (d["target"], d["hardware"], d["pair"]) == key]
            ax.bar([i - 0.27, i, i + 0.27], [d["eval_f1_mean"] for d in bars], 0.26,
                   color=["tab:gray", "tab:olive", "tab:blue"])
        ax.set_xticks(range(len(pairs)), [p[2].replace("+", "+\n") for p in pairs], fontsize=6)
        ax.set_ylabel("eval F1")
        ax.set_title(f"({'ab'[aggs.index(agg)]}) {agg}: source 1 / source 2 / pair", fontsize=9)
    return save_figure(fig, out, "fig8_single_vs_pairs", data)


# ---- Fig. 3: cosine to the CorefTarget encoder --------------------------------------------------------------------

def cossim(runs: list[dict], out: Path) -> list[str]:
    recs = runs_of(runs, method="reverse_probing_cossim")
    if not recs:
        return [f"_Cosine to the CorefTarget encoder (Fig. 3): no method=reverse_probing_cossim records; run "
                f"{run_exp('cossim_cpu')}._", ""]
    t = Table("cossim", "Mean cosine of each source's token embeddings to the CorefTarget encoder's (Fig. 3)",
              ["target (hardware)", "source", "cosine", "paper"], runs=recs)
    data = []
    for g, block in _blocks(recs).items():
        keys = sorted({k for r in block for k in r["metrics"] if k.startswith("cossim/")}, key=natural)
        for k in keys:
            src = k.split("/", 1)[1]
            vals = [r["metrics"][k] for r in block if k in r["metrics"]]
            t.add(_block(g), source_label(src), seed_interval(vals), "high" if paper_name(src) in ("BERT", "MRPC")
                  else "low" if paper_name(src) in ("QA", "NER") else "—")
            data.append({"target": g[0], "hardware": g[1], "source": src, "cosine_mean": float(np.mean(vals)),
                         "seeds": len(vals)})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1 + 1.1 * len(data), 3.4))
    ax.bar(range(len(data)), [d["cosine_mean"] for d in data], color="tab:purple")
    ax.set_xticks(range(len(data)), [d["source"] for d in data], fontsize=7, rotation=30)
    ax.set_ylabel("mean cosine to CorefTarget")
    path = save_figure(fig, out, "fig3_cossim", data)
    where = sorted({f"{_c(r, 'task.name')} {_c(r, 'method.split') or 'dev'}" for r in recs})
    refs = sorted({str(_c(r, "method.reference")) for r in recs})
    t.notes = [f"Per word over the {', '.join(where)} documents (sub-tokens pooled to words, padding masked; the "
               "official code includes padding positions), the last layer of each source against the CorefTarget "
               f"encoder's ({', '.join(refs)}) last layer. Frozen encoders, no training: one deterministic number per "
               "source. The paper gives no numbers: 'BERT, MRPC highest; QA, NER lowest'. "
               f"Figure: {figure_link(path)}."]
    return t.write(out)


# ---- Fig. 9: α over training -------------------------------------------------------------------------------------

def alpha(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method=PAPER) if len(sources(r)) >= 3 and (r.get("extra") or {}).get("alpha")]
    if not recs:
        return [f"_Attention weights over training (Fig. 9): no attention record with 3 or more sources and "
                f"extra.alpha; run {run_exp('quoref_multi')}._", ""]
    t = Table("alpha", "Attention weight per source over training (Fig. 9): mean over seeds",
              ["target (hardware)", "sources", "variant", "source", "α first dev evaluation", "α last",
               "last − first (paired)"], runs=recs)
    cells: dict[tuple, list[dict]] = {}
    for r in recs:
        cells.setdefault((_group(r), sources(r), _c(r, "method.variant"), json_layers(r)), []).append(r)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(cells), figsize=(4.6 * len(cells), 3.4), squeeze=False)
    data = []
    for ax, ((g, srcs, variant, _), rs) in zip(axes[0], sorted(cells.items(), key=lambda kv: natural(kv[0][:3]))):
        n = min(len(r["extra"]["alpha"]) for r in rs)  # early stopping ends seeds at different evaluations
        arr = np.array([np.asarray(r["extra"]["alpha"][:n], dtype=float) for r in rs])  # (seeds, evaluations, k)
        for i, src in enumerate(srcs):
            t.add(_block(g), combo_label(srcs), variant, source_label(src), seed_interval(arr[:, 0, i]),
                  seed_interval(arr[:, -1, i]), seed_interval(arr[:, -1, i] - arr[:, 0, i], sign=True))
            ax.plot(range(1, n + 1), arr[:, :, i].mean(0), "o-", ms=3, label=src)
            data += [{"target": g[0], "hardware": g[1], "sources": "+".join(srcs), "variant": variant, "source": src,
                      "evaluation": e + 1, "alpha_mean": float(arr[:, e, i].mean()), "seeds": len(rs)}
                     for e in range(n)]
        ax.axhline(1 / len(srcs), color="k", lw=0.5, ls=":")
        ax.set_xlabel("dev evaluation (one per epoch)")
        ax.set_ylabel("mean attention weight α")
        ax.set_title(f"{g[0]}: {'+'.join(srcs)} ({variant})", fontsize=7)
        ax.legend(fontsize=6)
    path = save_figure(fig, out, "fig9_alpha", data)
    t.notes = ["α: the per-token softmax weight of each source, averaged over the target's tokens (quoref: the real "
               "sub-tokens of the first 256 dev windows; coreference: the mentions' words) at each dev evaluation; up "
               "to the shortest seed. Records with three or more sources (quoref_multi's attention runs). The paper "
               "(MRPC+RE+NER, full): all start near 1/3, MRPC rises, NER falls steadily, RE falls slowly. "
               f"Figure: {figure_link(path)}."]
    return t.write(out)


def json_layers(r: dict) -> str:
    return str((_c(r, "method.trunc"), _c(r, "method.concat_n"), _c(r, "method.aggregate")))


# ---- §4.3: sum vs mean --------------------------------------------------------------------------------------------

def sum_vs_mean(runs: list[dict], out: Path) -> list[str]:
    sums = [r for r in runs_of(runs, method=PAPER) if _c(r, "method.aggregate") == "sum"]
    if not sums:
        return [f"_Sum vs mean (§4.3): no method.aggregate=sum records; run {run_exp('quoref_sum')} (its mean: "
                f"{run_exp('quoref_pairs')})._", ""]
    recs = runs_of(runs, method=PAPER)
    t = Table("sum_vs_mean", "Sum vs mean aggregation (§4.3): eval F1",
              ["target (hardware)", "sources", "variant", "sum", "mean", "sum − mean (paired)", "paper sum / mean"],
              runs=sums)
    pm, ps = paper_cell("MRPC+BERT", "mean-full"), paper_cell("MRPC+BERT", "sum-full")
    seen = set()
    for r in sums:
        key = (_group(r), tuple(sorted(sources(r))), _c(r, "method.variant"), json_layers(r))
        if key in seen:
            continue
        seen.add(key)
        fields = {k: _c(r, f"method.{k}") for k in ("trunc", "concat_n")}
        s = arm([x for x in recs if _group(x) == key[0]], key[1], key[2], "sum", **fields)
        m = arm([x for x in recs if _group(x) == key[0]], key[1], key[2], "mean", **fields)
        t.add(_block(key[0]), combo_label(key[1]), key[2], seed_interval([score(x) for x in s]),
              seed_interval([score(x) for x in m]), seed_interval(paired(s, m), sign=True),
              f"{fmt(ps.value)} / {fmt(pm.value)} (MRPC+BERT, full)")
    t.notes = ["For one source sum and mean are the same computation; the paper compares them once, on frozen MRPC + "
               "BERT (−0.92 points, 'slightly worse'); offline the two sentence-pair-trained sources (minilm-l6, "
               "minilm-l6-nli) stand for them."]
    return t.write(out)


# ---- the sources on their own tasks -------------------------------------------------------------------------------

def source_tasks(runs: list[dict], out: Path) -> list[str]:
    recs = runs_of(runs, method="reverse_probing_source")
    if not recs:
        return [f"_Source fine-tunes on their own tasks: no method=reverse_probing_source records; run {RUN_ALL} "
                f"(and {run_exp('offline_gpu_build_quoref')})._", ""]
    t = Table("source_tasks", "Each source fine-tune on its own task (evidence that it learned the task)",
              ["source", "task", "metric", "score", "majority / trivial baseline"], runs=recs)
    by: dict[tuple, list[dict]] = {}
    for r in recs:  # model.name is the base architecture; the source is what the run saved
        by.setdefault((_c(r, "method.save_as") or _c(r, "model.name"), _c(r, "task.name")), []).append(r)
    for (src, task), rs in sorted(by.items(), key=lambda kv: natural(kv[0])):
        shown = [objective(rs[0])] + [k for k in ("eval/accuracy", "eval/conll_f1", "eval/em")
                                      if k != objective(rs[0]) and any(k in r["metrics"] for r in rs)]
        for k in shown:
            t.add(source_label(src), task, k, _col(rs, k), _mean_cell(rs, k.replace("eval/", "eval/majority_", 1)))
    t.notes = ["A source that does not beat its task's majority or trivial baseline is not a fine-tuned source: its "
               "probing rows say nothing about that task's transfer. Fractions are shown ×100; SQuAD-style F1/EM are "
               "0-100 already. minilm-l6-coref's own task is the coreference target (winogrande-coref), "
               "minilm-l6-quoref's the stand-in target (quoref).", *caps(recs)]
    return t.write(out)


# ---- is there anything to probe? ----------------------------------------------------------------------------------

def points(r: dict, key: str) -> float | None:
    """A metric in points (a fraction ×100; SQuAD-style f1/em and the majority versions of each alike)."""
    v = r["metrics"].get(key)
    short = key.rsplit("/", 1)[-1].removeprefix("majority_")
    return None if v is None else float(v) * (100 if short in PERCENT_KEYS else 1)


def _signal_key(r: dict) -> str:
    """What a trivial answer is compared on: forced-choice accuracy on a coreference target (chance 50%), the
    objective (SQuAD F1) on a QA target."""
    return "eval/accuracy" if _c(r, "task.type") == "coref" or "eval/accuracy" in r["metrics"] else objective(r)


def _col(rs: list[dict], key: str) -> Estimate:
    return seed_interval([points(r, key) for r in rs])


def _mean_cell(rs: list[dict], key: str) -> str:
    v = [x for r in rs if (x := points(r, key)) is not None]
    return fmt(float(np.mean(v))) if v else "—"


def signal(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method=PAPER) if len(sources(r)) == 1 and _c(r, "method.variant") == "full"
            and _c(r, "method.aggregate") == "mean"]
    t = Table("signal", "Is there anything to probe? Each frozen source (full, mean) against the majority class or a "
              "trivial answerer", ["target (hardware)", "source", "metric", "ours", "majority / trivial",
                                   "ours − majority (paired)", "signal", "CoNLL F1", "majority CoNLL F1",
                                   "WSC273 accuracy", "WSC273 CoNLL F1"], runs=recs)
    for g, block in _blocks(recs).items():
        for srcs in _sets(block, range(1, 2)):
            rs = arm(block, srcs, "full", "mean")
            key = _signal_key(rs[0])
            base_key = key.replace("eval/", "eval/majority_", 1)
            pairs = [(v, b) for r in rs if (v := points(r, key)) is not None and (b := points(r, base_key)) is not None]
            if not pairs:
                continue
            gain = seed_interval([v - b for v, b in pairs], sign=True)
            verdict = "one seed: no interval" if gain.lo is None else "yes (CI above)" if gain.lo > 0 else \
                "no (CI at or below)" if gain.hi <= 0 else "not shown (CI crosses 0)"
            t.add(_block(g), source_label(srcs[0]), key, _col(rs, key), _mean_cell(rs, base_key), gain, verdict,
                  _col(rs, "eval/conll_f1"), _mean_cell(rs, "eval/majority_conll_f1"), _col(rs, "wsc/accuracy"),
                  _col(rs, "wsc/conll_f1"))
    if not t.rows:
        return [f"_Signal (is there anything to probe?): no single-source full/mean records with a majority baseline; "
                f"run {run_exp('signal_cpu')} and {run_exp('quoref_single')}._", ""]
    t.notes = ["The issue's first measurement: a frozen source carries signal on a target when it beats what a "
               "constant answer scores there by a " + SEED_INTERVAL + ". winogrande-coref: forced-choice "
               "accuracy (the blank linked to the right candidate; chance 50%, the majority the best constant answer "
               "on the eval documents) beside CoNLL F1 (on 3-mention documents they move together) and WSC273 "
               "scored at the dev-chosen epoch; quoref (the stand-in target): SQuAD F1 against a trivial answerer "
               "(the passage's most frequent capitalised word). The claims treat an arm less than 2 points above "
               "the baseline as not doing the task (not testable).", *caps(recs)]
    return t.write(out)


# ---- head-only training vs an encoder forward ---------------------------------------------------------------------

def bench(runs: list[dict], out: Path) -> list[str]:
    recs = runs_of(runs, method="reverse_probing_bench")
    if not recs:
        return [f"_Head-only training speed: no method=reverse_probing_bench records; run {run_exp('bench')}._", ""]
    t = Table("bench", "Head-only training from the activation store vs one encoder forward (same process)",
              ["target", "sources", "ratio [CI]", "head epoch (s)", "encoder forward (s)", "device"], runs=recs)
    for r in recs:
        m = r["metrics"]
        t.add(_c(r, "task.name"), "+".join(sources(r)), str(metric_cell(m, "bench/ratio")),
              fmt(m.get("bench/head_epoch_s"), 3), fmt(m.get("bench/encoder_forward_s"), 3),
              r["provenance"].get("device"))
    t.notes = ["ratio = one encoder forward over the documents / one head-only training epoch over the same documents, "
               "interleaved in one process (its interval from the benchmark's repeats): how much a probing run saves "
               "by reading the store instead of running the frozen encoders."]
    return t.write(out)


# ---- the report ---------------------------------------------------------------------------------------------------

INTRO = (  # the page's opening paragraph
         "Generated from the run records (`reverse_probing/report.py`); each table also lies in `tables/` as .md "
         "and .csv. Offline sources are MiniLM-L6-H384 models labelled with the paper source they stand for "
         "(minilm-l6 for MRPC and vanilla BERT, minilm-l6-ner for NER, minilm-l6-qa for QA, minilm-l6-nli for "
         "RE, minilm-l6-pii for NER-dslim, minilm-l6-coref / minilm-l6-quoref for the CorefTarget). Two "
         "offline targets stand for CoNLL-2012, never mixed in one cell: WinoGrande cast as coreference "
         "(winogrande-coref, CoNLL F1 ×100), and, because frozen MiniLM features carry no WinoGrande signal "
         "(the signal table), Quoref, the **stand-in target** (quoref: the suite's QA head on the frozen "
         "features, SQuAD F1 0-100), where the comparisons run.")


def build(runs: list[dict], out: Path) -> list[str]:
    return page(INTRO, (signal, table1, table2, table3, layer_sweep, mean_vs_attention, single_vs_pairs, cossim,
                alpha, sum_vs_mean, source_tasks, bench), selection.dedupe(runs), out)
