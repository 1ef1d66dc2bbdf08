"""Embedding Recycling's own tables and figures from its run records (`python -m experiments.report recycling`):
Tables 1 and 2 and the depth ablation (Tables 8-15, with a figure) from method=recycling, each model beside the
paper's row for it; Tables 4, 5 and 7 and the cache's storage from method=recycling_bench (speedup figure).

Paper numbers come from paper_values.yaml by (model, task, column, metric): a paper-scale run finds its own row or
none; minilm-l6 and the offline tasks reach a row only through the twins declared there, and say so. Full is
computed once: `method=finetune` trains every weight exactly as `variant=full`, so the Full rows come from the
finetune tier's records wherever they were trained like our variants (experiments.evidence.selection.same_training),
with our own variant=full records where they exist. Every variant is shown at the lr its dev split chose
(experiments.evidence.selection), named under the tables."""
from __future__ import annotations

from pathlib import Path
from statistics import mean

from experiments.evidence import selection
from experiments.evidence.paper_values import paper_values
from experiments.evidence.tables import (Table, caps, delta, fmt, hardware_label, label, pyplot, run_label, runs_of,
                                         save_figure, scale, sections, summary)
from experiments.results import load_runs
from recycling.cost import months_to_break_even

# experiments that also get the generic per-experiment table (every eval/ metric, not only the objective)
GENERIC_TABLES = ("recycling/table1*", "recycling/table2*", "recycling/table3*", "recycling/depth*",
                  "recycling/offline_gpu*")
FAMILIES = ("cls-avg", "ner-avg", "qa-avg")
BESIDE_PAPER = ["ours", "ours − full", "paper row", "paper", "paper − full", "hardware"]  # Setting.cells


def _variant(r: dict) -> str:
    m = r["config"]["method"]
    return "full" if m["name"] == "finetune" else m["variant"]


def _trainable_pct(r: dict) -> float:
    m = r["metrics"]  # a finetune record trains everything and records the counts only
    return m["params/trainable_pct"] if "params/trainable_pct" in m else \
        100.0 * m["params/trainable"] / m["params/total"]


def _selected(runs: list[dict], out: Path) -> tuple[list[dict], list[str]]:
    """Our accuracy records plus our Full arm, each group at its dev-chosen lr; and the note naming the lr chosen per
    variant. Our Full arm: the finetune tier's records trained like one of our runs (same model, task, dev split,
    caps, schedule, hardware), at any lr."""
    acc = runs_of(runs, method="recycling")
    acc += [f for f in runs_of(load_runs(Path(out).parent, "finetune"), method="finetune", variant="full")
            if any(selection.same_training(f, r) for r in acc)]
    choices = selection.choose(acc, require_dev=False)

    def name(rs):
        c, k = rs[0]["config"], rs[0]["metrics"].get("recycling/k")
        return f"{c['task']['name']} {_variant(rs[0])}" + (f" k={int(k)}" if k is not None else "")
    notes = selection.lr_notes(choices, name)
    if any(r["config"]["method"]["name"] == "finetune" for c in choices for r in c.records):
        notes.append("Full: the finetune tier's records (results/finetune/runs, method=finetune, which trains every "
                     "weight as variant=full does), trained with the same model, task, dev split and caps.")
    return [r for c in choices for r in c.records], notes


# ---- accuracy: Tables 1, 2 and the depth ablation, over one grouping of the records -------------------------------

class Setting:
    """One (task, model, hardware, objective) of ours: its runs per variant and k over seeds, the k of the paper's main
    setting, our Full, and the paper's cells for it (remembering the stand-in mappings used, for the notes)."""

    def __init__(self, groups: dict[tuple, list[dict]], key: tuple, pv, n_layers: int):
        task, task_for, model, model_for, self.hw, self.metric = key
        self.groups, self.where, self.pv, self.via = groups, key[:5], pv, set()
        # the k of its runs of a variant trained at a depth (whatever their stand-ins and objective)
        self.ks = {g[6] for g in groups if (g[0], g[2], g[4]) == (task, model, self.hw)
                   and g[5] in ("reduced", "half_adapters", "frozen")}
        self.find = dict(model=model, task=task, model_for=model_for, task_for=task_for)
        self.half_k = n_layers // 2  # the paper's main setting; other k are the depth ablation
        self.main_k = self.half_k if self.half_k in self.ks else (min(self.ks) if self.ks else None)
        self.base = dict(task=label(task, task_for), model=label(model, model_for), metric=self.metric)
        self.full, self.paper_full = self.score("full"), self.paper("full", "score")

    def members(self, variant: str, k: int | None = None) -> list[dict]:
        return [r for g, rs in self.groups.items() for r in rs
                if g[:5] == self.where and g[5] == variant and (k is None or g[6] == k)]

    def score(self, variant: str, k: int | None = None):  # each record on its own objective's scale
        return summary([r["metrics"][o] * scale(o) for r in self.members(variant, k)
                        for o in [r["config"]["task"]["objective"]]])

    def paper(self, column: str, metric: str):
        m = self.pv.find(column=column, metric=metric, **self.find)
        if m is not None:
            self.via.update(m.via)
        return m

    def cells(self, ours, paper, paper_full) -> dict:
        """Ours, its gap to our Full, the paper's row and number, and the paper's gap to its Full."""
        value = None if paper is None else paper.value
        return {"ours": ours, "ours − full": delta(ours.mean, self.full.mean), "paper row": paper.row if paper else "—",
                "paper": value, "paper − full": delta(value, paper_full.value if paper_full else None),
                "hardware": self.hw}


def settings(runs: list[dict], pv) -> tuple[list[Setting], list[dict]]:
    """Our settings in table order, and the records behind them."""
    groups: dict[tuple, list[dict]] = {}  # (task, its stand-in, model, its stand-in, hw, variant, k, objective)
    for r in runs:
        c = r["config"]
        g = (c["task"]["name"], c["task"].get("stand_in_for"), c["model"]["name"], c["model"].get("stand_in_for"),
             hardware_label(r), _variant(r), int(r["metrics"].get("recycling/k", 0)), c["task"]["objective"])
        groups.setdefault(g, []).append(r)
    used = [r for rs in groups.values() for r in rs]
    n_layers = {r["config"]["model"]["name"]: r["config"]["model"]["num_layers"] for r in used}
    return [Setting(groups, key, pv, n_layers[key[2]]) for key in sorted({g[:5] + (g[7],) for g in groups})], used


def table1(sets: list[Setting], used: list[dict]) -> Table:
    t = Table("table1_standard", "Table 1: standard fine-tuning, Rdc vs Full (and F)",
              ["task", "model", "metric", "variant", "k", *BESIDE_PAPER],
              runs=runs_of(used, variant=["full", "frozen", "reduced"]))
    for s in sets:
        for v in ("full", "frozen", "reduced"):
            ours = s.score(v, None if v == "full" else s.main_k)
            if not ours.n:
                continue
            # Table 1's Rdc is k = N/2; F (frozen, no cache) is an efficiency baseline without an accuracy column
            p = s.paper(v, "score") if v == "full" or (v == "reduced" and s.main_k == s.half_k) else None
            t.add(**s.base, variant=v, k="—" if v == "full" else s.main_k, **s.cells(ours, p, s.paper_full))
    return t


def table2(sets: list[Setting], used: list[dict]) -> Table:
    t = Table("table2_adapters", "Table 2: adapters (Rdc + Half Adpt, Full Adpt) vs Full",
              ["task", "model", "metric", "variant", "ours", "ours − full", "trainable %", "paper row", "paper",
               "paper − full", "hardware"], runs=runs_of(used, variant=["full", "half_adapters", "full_adapters"]))
    for s in sets:
        for v in ("half_adapters", "full_adapters", "full"):
            ours = s.score(v, s.main_k if v == "half_adapters" else None)
            if not ours.n:
                continue
            pct = [_trainable_pct(r) for r in s.members(v)]
            t.add(**s.base, variant=v, **{"trainable %": fmt(mean(pct)) if pct else "—"},
                  **s.cells(ours, s.paper(v, "score"), s.paper_full))
    return t


def depth_table(sets: list[Setting]) -> tuple[Table, list[dict]]:
    """Rdc at every k a setting ran more than one of, and the figure's points."""
    t = Table("depth_ablation", "Depth ablation (Tables 8-15): Rdc vs layers reduced",
              ["task", "model", "metric", "layers reduced", *BESIDE_PAPER])
    points = []
    for s in (s for s in sets if len(s.ks) > 1):
        paper_full = s.paper("full", "appendix-avg")
        for k in sorted(s.ks):
            ours = s.score("reduced", k)
            if not ours.n:
                continue
            t.runs += s.members("reduced", k)
            p = s.paper(f"reduced-k{k}", "appendix-avg")
            t.add(**s.base, **{"layers reduced": k}, **s.cells(ours, p, paper_full))
            points.append({**{c: s.base[c] for c in ("task", "model", "metric")}, "k": k, "ours": ours.mean,
                           "ours_sd": ours.sd, "ours_full": s.full.mean, "paper": None if p is None else p.value,
                           "paper_row": p.row if p else None})
        t.runs += s.members("full")
    return t, points


def accuracy_tables(runs: list[dict], out: Path) -> list[str]:
    pv = paper_values("recycling")
    runs, lr_note = _selected(runs, out)
    sets, used = settings(runs, pv)
    t1, t2, (depth, points) = table1(sets, used), table2(sets, used), depth_table(sets)
    via = sorted(set().union(*(s.via for s in sets)))
    via = [f"Paper rows reached through stand-ins (paper_values.yaml): {'; '.join(via)}. Our offline tasks are not the "
           "paper's: compare the gaps to Full, not the absolute numbers."] if via else []
    cap = [*caps(used), *lr_note]
    t1.notes = [*via, *cap]
    t2.notes = [*via, "trainable % = trainable parameters / the full model's parameters.", *_adapter_gaps(pv, t2),
                *cap]
    lines = t1.write(out) + t2.write(out)
    if depth.rows:
        fig = _depth_figure(points, out)
        depth.notes = [*via, "Paper columns: the appendix averages, which average the Micro and Macro F-1 rows (so "
                       f"they differ from Table 1's). Figure: [{fig}]({fig}).", *cap]
        lines += depth.write(out)
    return lines


def _adapter_gaps(pv, t2: Table) -> list[str]:
    """When none of our models has an adapter row in the paper, say what the paper's own rows show."""
    if any(row[t2.columns.index("paper")] is not None for row in t2.rows
           if row[t2.columns.index("variant")] != "full"):
        return []
    parts = []
    for fam in FAMILIES:
        for c in pv.select(task=fam, column="half_adapters", metric="score"):
            full = pv.get(c.model, fam, "full", "score")
            fa = pv.get(c.model, fam, "full_adapters", "score")
            parts.append(f"{c.model} {fam} {fmt(c.value - full.value, 1, sign=True)}"
                         + (f" / {fmt(fa.value - full.value, 1, sign=True)}" if fa else ""))
    return ["None of our models has an adapter row in the paper (it ran none on distilled models, footnote 2). Its "
            "own gaps to Full, Rdc + Half Adpt / Full Adpt (Table 2): " + "; ".join(parts) + "."] if parts else []


def _depth_figure(data: list[dict], out: Path) -> str:
    plt = pyplot()
    tasks = sorted({d["task"] for d in data})
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rs = [d for d in data if d["task"] == task]
        ax.plot([d["k"] for d in rs], [d["ours"] for d in rs], "o-", label="ours: Rdc")
        if rs[0]["ours_full"] is not None:
            ax.axhline(rs[0]["ours_full"], color="gray", ls="--", label="ours: Full")
        ax.set_xlabel("layers reduced (k)")
        ax.set_ylabel(f"ours: {rs[0]['metric']}")
        ax.set_title(task, fontsize=8)
        handles = ax.get_legend_handles_labels()
        if any(d["paper"] is not None for d in rs):
            ax2 = ax.twinx()
            ax2.plot([d["k"] for d in rs], [d["paper"] for d in rs], "s:", color="#c44e52",
                     label=f"paper: {next(d['paper_row'] for d in rs if d['paper_row'])}")
            ax2.set_ylabel("paper", color="#c44e52")
            h2 = ax2.get_legend_handles_labels()
            handles = (handles[0] + h2[0], handles[1] + h2[1])
        ax.legend(*handles, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return save_figure(fig, out, "depth_ablation", data)


# ---- efficiency: Tables 4, 5 and 7, and the cache's storage ------------------------------------------------------

def _bench(runs: list[dict], variant: str) -> list[dict]:
    return sorted(runs_of(runs, method="recycling_bench", variant=variant),
                  key=lambda r: (r["provenance"]["device"], r["config"]["model"]["num_layers"],
                                 r["config"]["model"]["name"]))


def _setup(r: dict) -> list:
    """model, layers, k, device, batch and seq_len of a benchmark record (older records keep k in n_samples)."""
    c = r["config"]
    k = r["metrics"]["recycling/k"] if "recycling/k" in r["metrics"] else r["n_samples"]["k"]
    return [c["model"]["name"], c["model"]["num_layers"], int(k), r["provenance"]["device"], c["method"]["batch_size"],
            c["method"]["seq_len"]]


def _paper_cells(named, *cells) -> list:
    """The paper model whose row `named` is ('(twin)' when a declared twin's), then the cells' numbers (— for none)."""
    return ["—" if named is None else named.cell.model + (" (twin)" if named.via else ""),
            *(fmt(getattr(c, "value", None), 0) for c in cells)]


def training_table(runs: list[dict], pv, via: set[str]) -> Table:
    rs = _bench(runs, "training")
    t = Table("timing_training", "Training timing (Table 5 style)",
              ["model", "layers", "k", "device", "batch", "seq_len", "NR_ms", "F_ms", "SR_ms", "R_ms", "R_ram_ms",
               "save_ms", "NR_vs_SR_pct", "F_vs_SR_pct", "NR_vs_R_pct", "speedup_pct", "paper_model",
               "paper_NR_vs_R_pct_A10G", "paper_NR_vs_R_pct_A6000"], runs=rs)
    for r in rs:
        m = r["metrics"]
        pa, p6 = (pv.find_for(r, gpu, "speedup/NR_vs_R_pct", task=False) for gpu in ("A10G", "A6000"))
        via.update(pa.via if pa else ())
        t.add(*_setup(r), *(fmt(m[f"time/{x}_ms"], 1) for x in ("NR", "F", "SR", "R", "R_ram", "save")),
              *(fmt(m[f"speedup/{x}_pct"], 1) for x in ("NR_vs_SR", "F_vs_SR", "NR_vs_R", "NR_vs_R")),
              *_paper_cells(pa, pa, p6))
    return t


def inference_table(runs: list[dict], pv, via: set[str]) -> Table:
    rs = _bench(runs, "inference")
    t = Table("timing_inference", "Inference timing (Table 4 style)",
              ["model", "layers", "k", "device", "batch", "seq_len", "baseline_ms", "fp32_ms", "fp32_speedup_pct",
               "fp16_ms", "fp16_speedup_pct", "fp32_no_prefetch_pct", "fp16_no_prefetch_pct", "fp32_ram_pct",
               "fp16_ram_pct", "fp16_max_abs_score", "fp32_max_abs_logit", "speedup_pct", "paper_model",
               "paper_fp32_pct_A10G", "paper_fp16_pct_A10G"], runs=rs)
    for r in rs:
        m = r["metrics"]
        p32, p16 = (pv.find_for(r, "A10G", f"speedup/{x}_disk_prefetch_pct", task=False) for x in ("fp32", "fp16"))
        via.update(p16.via if p16 else ())
        t.add(*_setup(r), *(fmt(m[k], 1) for k in (
            "time/baseline_ms", "time/fp32_disk_prefetch_ms", "speedup/fp32_disk_prefetch_pct",
            "time/fp16_disk_prefetch_ms", "speedup/fp16_disk_prefetch_pct", "speedup/fp32_disk_pct",
            "speedup/fp16_disk_pct", "speedup/fp32_ram_pct", "speedup/fp16_ram_pct")),
              f"{m['fidelity/fp16_max_abs_score']:.1e}", f"{m['fidelity/fp32_max_abs_logit']:.1e}",
              fmt(m["speedup/fp16_disk_prefetch_pct"], 1), *_paper_cells(p16, p32, p16))
    return t


def timing_tables(runs: list[dict], out: Path) -> list[str]:
    pv, via = paper_values("recycling"), set()
    train, infer = training_table(runs, pv, via), inference_table(runs, pv, via)
    cpu = ("CPU timings: ratios measured interleaved in one process; not comparable to the paper's GPU milliseconds. "
           "speedup = T_base / T_method − 1 (spec §4). 'disk' = memory-mapped shards (served from the page cache once "
           "read).")
    twins = [f"paper_model: the paper's row for the model, or its declared twin: {'; '.join(sorted(via))}."] \
        if via else []
    train.notes = [cpu, "NR full model; F lower half frozen, no cache; R cache-fed upper half (memory-mapped; R_ram: "
                   "in RAM); SR = (one cache-building epoch + 5 recycling epochs) / 6; speedup_pct = NR vs R. Each "
                   "step is the suite's trainer step (AdamW), batch fetching included.", *twins]
    infer.notes = [cpu, "fp32/fp16 columns: cache read from memory-mapped shards with the prefetch thread on (the "
                   "paper's setting); speedup_pct = fp16 cache, prefetch on. max |Δ| vs the full model.", *twins]
    lines = train.write(out) + infer.write(out)
    if train.rows or infer.rows:
        fig = _speedup_figure(train, infer, out)
        lines += [f"Figure: [{fig}]({fig})", ""]
    return lines


def _speedup_figure(train: Table, infer: Table, out: Path) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    data = []
    for ax, t, pcol, title in ((axes[0], train, "paper_NR_vs_R_pct_A10G", "training: NR vs R"),
                               (axes[1], infer, "paper_fp16_pct_A10G", "inference: fp16 cache")):
        rows = sorted((dict(zip(t.columns, row)) for row in t.rows), key=lambda r: r["layers"])
        x = range(len(rows))
        ours = [float(r["speedup_pct"]) for r in rows]
        paper = [float(r[pcol]) if r[pcol] != "—" else None for r in rows]
        ax.bar([i - 0.2 for i in x], ours, 0.4, label="ours (CPU)")
        ax.bar([i + 0.2 for i in x], [p or 0 for p in paper], 0.4, label="paper (A10G, row of the model)",
               color="#c44e52")
        ax.set_xticks(list(x), [f"{r['model']}\n{r['layers']} layers, k={r['k']}\n~{r['paper_model']}" for r in rows],
                      fontsize=7)
        ax.set_ylabel("speedup %")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        data += [{"panel": title, "model": r["model"], "layers": r["layers"], "k": r["k"], "ours_speedup_pct": o,
                  "paper_model": r["paper_model"], "paper_speedup_pct_A10G": p} for r, o, p in zip(rows, ours, paper)]
    return save_figure(fig, out, "speedup_vs_depth", data)


def storage_table(runs: list[dict], out: Path) -> list[str]:
    pv = paper_values("recycling")
    rs = _bench(runs, "storage")
    t = Table("storage", "Storage of the layer-k cache",
              ["model", "d", "k", "task", "sequences", "tokens", "fp32 B/token", "fp16 B/token", "fp32 KB/sequence",
               "fp16 KB/sequence", "distinct sequences / tokens", "fp16 on disk = Σ distinct tokens·d·2",
               "fp16 disk MB", "epoch-2 hit rate", "epoch-2 computed", "device"], runs=rs)
    for r in rs:
        m = {k.removeprefix("storage/"): v for k, v in r["metrics"].items()}
        t.add(r["config"]["model"]["name"], int(m["d"]), int(m["k"]), run_label(r, "task"),
              *(int(m[x]) for x in ("sequences", "tokens", "fp32_bytes_per_token", "fp16_bytes_per_token")),
              *(fmt(m[f"{x}_bytes_per_sequence"] / 1e3, 1) for x in ("fp32", "fp16")),
              f"{int(m['unique_sequences'])} / {int(m['unique_tokens'])}",
              "yes" if m["fp16_disk_bytes"] == m["unique_tokens"] * m["d"] * 2 else
              f"no ({int(m['fp16_disk_bytes'])} B)",
              fmt(m["fp16_disk_bytes"] / 1e6, 3), fmt(100 * m["epoch2_hit_rate"], 1) + "%", int(m["epoch2_computed"]),
              r["provenance"]["device"])
    fp32, fp16 = (pv.get(None, None, p, "storage/512x768_MB") for p in ("fp32", "fp16"))
    t.notes = [f"The paper's unit example ({fp32.where}): 512 tokens at d=768 take {fp32.value} MB (fp32) / "
               f"{fp16.value} MB (fp16); ours for the same shape: 512·768·4 B = 1.57 MB and 0.79 MB. Epoch 2: a "
               "second, reshuffled pass over the cache with a fresh store object; every read counted."]
    return t.write(out)


def cost_table(runs: list[dict], out: Path) -> list[str]:
    pv = paper_values("recycling")
    rs = _bench(runs, "cost")
    via = set()
    t = Table("cost", "Table 7: break-even storage time (months)",
              ["model", "source", "T_base_ms", "T_fp16_ms", "cloud months", "paper cloud", "local months",
               "paper local"], runs=rs)
    for cloud in pv.select(column="cloud", metric="cost/months"):
        m = cloud.model
        base, fp16 = (pv.get(m, None, "A10G", k).value for k in ("time/baseline_ms", "time/fp16_disk_prefetch_ms"))
        d = pv.get(m, None, None, "hidden_size").value
        local = pv.get(m, None, "local", "cost/months").value
        t.add(m, "paper (Table 4 A10G timings)", base, fp16, fmt(months_to_break_even(base, fp16, d, "cloud")),
              fmt(cloud.value), fmt(months_to_break_even(base, fp16, d, "local"), 1), fmt(local, 1))
    for r in rs:
        m, c = r["metrics"], r["config"]
        bs = c["method"]["batch_size"]
        pc, pl = (pv.find_for(r, col, "cost/months", task=False) for col in ("cloud", "local"))
        via.update(pc.via if pc else ())
        t.add(c["model"]["name"],
              f"ours: {r['provenance']['device']}, batch {bs}, scaled to 128",
              fmt(128 / bs * m["time/baseline_ms"], 0), fmt(128 / bs * m["time/fp16_disk_prefetch_ms"], 0),
              fmt(m["cost/cloud_months"]), fmt(getattr(pc, "value", None), 2), fmt(m["cost/local_months"], 1),
              fmt(getattr(pl, "value", None), 1))
    t.notes = ["months = (T_base − T_fp16) per 128 × 512-token batch × $5.67/4 per GPU-hour ÷ (128·512·d·2 B / 2^30 × "
               "$/GB/month), cloud $0.01, local $0.23/1000 (recycling/cost.py). Our rows price CPU milliseconds at the "
               "paper's A10G rate: illustrative only.",
               *([f"Paper columns of our rows: the paper's row for the model or its declared twin: "
                  f"{'; '.join(sorted(via))}."] if via else [])]
    return t.write(out)


def build(runs: list[dict], out: Path) -> list[str]:
    return sections([accuracy_tables, timing_tables, storage_table, cost_table], runs, Path(out))
