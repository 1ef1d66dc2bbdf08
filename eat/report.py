"""EAT's own tables and figures, built from results/eat/runs/**/*.json by `python -m experiments.report eat` (never
edited by hand):

    tables/table<n>_<task>   Tables 1-3: the paper's rows (model, tau, latency_ms, acc, speed-up vs dense, Δacc,
                             avg_depth, avg_retention) above ours for the same task, stand-ins labelled; latency from
                             the method=eat_bench record of the same task and model, our 95% intervals
    tables/ablation          every contender of each latency benchmark (dense, every subset of prune/window/exit,
                             paper-code, the shallower baseline): p50/p90/p99, throughput, speed-up [CI], Δacc [CI]
    tables/scaling           cost vs sequence length per arm, log-log slope [CI]       (+ figures/scaling)
    tables/calibration       ECE of the exit head before/after temperature scaling, T  (+ figures/reliability)
    tables/paper_vs_repro    ours − paper wherever the paper has the number (offline models through the twins of
                             paper_values.yaml: relative columns and retention only)
    figures/frontier         accuracy vs p50 latency (benchmarks) and vs average depth over tau (Fig. 4)
    figures/retention_vs_length (Fig. 5), figures/exit_layers (Fig. 6)

A section without records says which command makes them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eat.prune import keep_count
from experiments.evidence import selection
from experiments.evidence.paper_values import paper_values
from experiments.evidence.stats import N_BOOT, example_ci
from experiments.evidence.tables import (Estimate, Table, delta, figure_link, fmt, hardware_label, metric_cell,
                                         model_label, natural, paired_diff, pyplot, replicate_cell, run_label,
                                         runs_of, save_figure, sections, seed_sd)
from experiments.evidence.tables import config_value as _c

GENERIC_TABLES = ()
TABLE_OF = {"SST-2": 1, "QQP": 2, "MNLI-m": 3}  # the paper's table per task
EAT_ARM = "eat:prune+window+exit"  # our EAT as the benchmark names it (all three components)
COLUMNS = ("latency_ms", "accuracy", "speedup_vs_bert", "delta_acc_pp", "avg_depth", "avg_retention")
RUN_ACC = "python -m experiments.run method=eat method.variant=dense,eat,paper_code -m task={task} model={model}"
RUN_BENCH = "python -m experiments.run method=eat_bench task={task} model={model}"
RUN_ALL = "`make eat-cpu` (the CPU tier; `make eat` at paper scale)"


# ---- records ------------------------------------------------------------------------------------------------------

def _where(r: dict) -> tuple[str, str]:
    return _c(r, "task.name"), hardware_label(r)


def _tau(r: dict) -> float | None:
    t = r["metrics"].get("eat/tau")
    return None if t is None or (isinstance(t, float) and math.isnan(t)) else float(t)


def _same_tau(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, abs_tol=1e-9))


def _tau_text(t: float | None) -> str:
    return "none (no exit)" if t is None else f"{t:.2f}"


def _paper_task(pv, r: dict) -> str | None:
    for name in (_c(r, "task.name"), _c(r, "task.stand_in_for")):
        if name in pv.tasks:
            return pv.tasks[name]
        if name in TABLE_OF:
            return name
    return None


# ---- numbers with their intervals --------------------------------------------------------------------------------

def _acc(recs: list[dict]) -> Estimate:
    """eval/accuracy in percent: mean ± sd over seeds, or one seed's 95% CI over its eval examples."""
    vals = [100 * r["metrics"]["eval/accuracy"] for r in recs if "eval/accuracy" in r["metrics"]]
    if len(vals) == 1:
        ci = example_ci(recs[0], "eval/accuracy")
        return Estimate(vals[0], *(100 * x for x in ci), how="examples") if ci else Estimate(vals[0])
    return seed_sd(vals)


def _delta_acc(arm: list[dict], ref: list[dict]) -> Estimate:
    """Δacc (points) of an arm vs the dense reference, paired by seed."""
    by_seed = {_c(r, "seed"): r for r in ref}
    pairs = [(a, by_seed[_c(a, "seed")]) for a in arm if _c(a, "seed") in by_seed]
    if len(pairs) == 1:
        return paired_diff(*pairs[0])
    return seed_sd([100 * (a["metrics"]["eval/accuracy"] - b["metrics"]["eval/accuracy"]) for a, b in pairs])


def _speedup(bench: dict | None, name: str) -> Estimate:
    return replicate_cell(bench or {}, f"speedup/{name}_p50", suffix="x")


def _boot_note() -> str:
    return (f"Intervals: 95% paired bootstrap ({N_BOOT} resamples) over eval examples (accuracy, Δacc) or the "
            "benchmark's own bootstrap over timed examples (speed-up); ± sd over seeds where there are several.")


# ---- Tables 1-3 ---------------------------------------------------------------------------------------------------

@dataclass
class Row:
    """One of our rows of Tables 1-3, with the numbers paper_vs_repro compares."""
    model: str
    arm: str
    tau: float | None
    record: dict
    column: str  # the paper's column this row compares with
    chosen: bool = True  # the tau chosen on dev (False: another point of the frontier)
    values: dict = field(default_factory=dict)  # COLUMNS -> Estimate


def _latency(bench: dict | None, name: str) -> Estimate:
    return Estimate(None if bench is None else bench["metrics"].get(f"latency/{name}_p50_ms"))


def _bench_for(benches: list[dict], task: str, hw: str, model: str, tau: float | None = None) -> dict | None:
    """The latency benchmark of this task and model; with `tau`, one that timed EAT at that tau."""
    cands = [b for b in benches if _where(b) == (task, hw) and _c(b, "model.name") == model]
    if tau is not None:
        cands = [b for b in cands if _same_tau(_tau(b), tau)]
    return cands[0] if cands else None


def _rows_for_model(pv, accs, benches, task, hw, model, ref_dense, baseline_of) -> list[Row]:
    def recs(variant):
        return [r for r in accs if _where(r) == (task, hw) and _c(r, "model.name") == model
                and _c(r, "method.variant") == variant]
    rows = []
    dense = recs("dense")
    ref = ref_dense or dense
    if dense:
        host = baseline_of.get((task, hw, model))  # this model is another model's benchmark baseline
        bench, name = (host, "baseline") if host is not None else (_bench_for(benches, task, hw, model), "dense")
        row = Row(model, "baseline (dense)" if host is not None else "dense", None, dense[0], "dense")
        n_layers = _c(dense[0], "model.num_layers")
        row.values = {"latency_ms": _latency(bench, name), "accuracy": _acc(dense),
                      "speedup_vs_bert": _speedup(bench, name),
                      "delta_acc_pp": _delta_acc(dense, ref) if ref is not dense else Estimate(0.0),
                      "avg_depth": Estimate(float(n_layers) if n_layers else None), "avg_retention": Estimate(1.0)}
        rows.append(row)
    for variant, contender in (("eat", EAT_ARM), ("paper_code", "paper_code")):
        arm = recs(variant)
        if not arm:
            continue
        chosen = _tau(arm[0])
        frontier = (arm[0].get("extra") or {}).get("frontier") or []
        taus = [f["tau"] for f in frontier] if variant == "eat" else []
        if not any(_same_tau(t, chosen) for t in taus):
            taus.append(chosen)
        for t in taus:
            is_chosen = _same_tau(t, chosen)
            bench = _bench_for(benches, task, hw, model, t)
            row = Row(model, "EAT (ours)" if variant == "eat" else "paper-code", t, arm[0],
                      f"eat-tau{t:.2f}" if t is not None else "eat-tau0.95", chosen=is_chosen)
            if is_chosen:
                acc, dacc = _acc(arm), _delta_acc(arm, ref) if ref else Estimate(None)
                depth = seed_sd([r["metrics"]["eval/avg_depth"] for r in arm])
                ret = seed_sd([r["metrics"]["eval/avg_retention"] for r in arm], 3)
            else:
                pts = [f for r in arm for f in (r.get("extra") or {}).get("frontier") or [] if _same_tau(f["tau"], t)]
                acc = seed_sd([100 * f["accuracy"] for f in pts])
                dacc = Estimate(acc.value - _acc(ref).value) if ref and acc.value is not None else Estimate(None)
                depth = seed_sd([f["avg_depth"] for f in pts])
                ret = seed_sd([f["avg_retention"] for f in pts], 3)
            row.values = {"latency_ms": _latency(bench, contender), "accuracy": acc,
                          "speedup_vs_bert": _speedup(bench, contender), "delta_acc_pp": dacc,
                          "avg_depth": depth, "avg_retention": ret}
            rows.append(row)
    return rows


def _paper_rows(pv, ptask: str) -> list[list]:
    """The paper's rows of one task: BERT, DistilBERT (its repeated timing rows as a range), EAT per tau."""
    cols: dict[tuple, dict] = {}
    for c in pv.select(task=ptask):
        cols.setdefault((c.model, c.column), {})[c.metric] = c.value
    where = f"paper (Table {TABLE_OF.get(ptask, '?')})"
    out = []
    for model in ("BERT-base", "DistilBERT"):
        base = cols.get((model, "dense"), {})
        runs = [v for (m, col), v in cols.items() if m == model and col.startswith("dense-run")]
        if not base and not runs:
            continue

        def rng(metric):
            vals = [v[metric] for v in runs if metric in v] or ([base[metric]] if metric in base else [])
            return None if not vals else vals[0] if len(vals) == 1 else f"{min(vals):.2f}–{max(vals):.2f}"
        out.append([where, model, "dense", "—", rng("latency_ms"), base.get("accuracy"), rng("speedup_vs_bert"),
                    base.get("delta_acc_pp"), base.get("avg_depth"), base.get("avg_retention"), "RTX 2080 Ti"])
    for (model, col), v in cols.items():
        if not col.startswith("eat-tau") or col.endswith("-later"):
            continue
        tau = col[len("eat-tau"):].replace("-bs32", " (bs 32)")
        out.append([where, model, "EAT (official code)", tau, *(v.get(k) for k in COLUMNS), "RTX 2080 Ti"])
    return out


def paper_tables(runs: list[dict], out: Path) -> tuple[list[str], list[Row]]:
    pv = paper_values("eat")
    accs, benches = runs_of(runs, method="eat"), runs_of(runs, method="eat_bench", variant="latency")
    if not accs and not benches:
        return [f"_Tables 1-3: no method=eat records; run {RUN_ALL}._", ""], []
    lines, all_rows = [], []
    # a model that another model's benchmark times as its baseline: its Δacc and speed-up are against that model
    baseline_of = {(*_where(b), _c(b, "method.baseline_model")): b for b in benches
                   if _c(b, "method.baseline_model") not in (None, _c(b, "model.name"))}
    for task, hw in sorted({_where(r) for r in accs + benches}, key=natural):
        here = [r for r in accs + benches if _where(r) == (task, hw)]
        ptask = _paper_task(pv, here[0])
        n, task_label = TABLE_OF.get(ptask), run_label(here[0], "task")
        t = Table(f"table{n or ''}_{task}" if n else f"tables_{task}",
                  f"Table {n} ({ptask}): {task_label}" if n else f"Tables 1-3 columns: {task_label}",
                  ["source", "model", "arm", "tau", "latency_ms (p50)", "acc (%)", "speed-up vs dense",
                   "Δacc (pp)", "avg_depth", "avg_retention", "hardware"], runs=here)
        if ptask:
            for row in _paper_rows(pv, ptask):
                t.add(*row)
        mains = sorted({_c(r, "model.name") for r in here if _c(r, "method.variant") in ("eat", "paper_code")
                        or _c(r, "method.name") == "eat_bench"}, key=natural)
        others = sorted({_c(r, "model.name") for r in here} - set(mains), key=natural)
        notes = []
        for model in mains + others:
            ref_model = model
            if model not in mains:
                host = baseline_of.get((task, hw, model))
                ref_model = _c(host, "model.name") if host is not None else (mains[0] if mains else model)
            ref = [r for r in accs if _where(r) == (task, hw) and _c(r, "model.name") == ref_model
                   and _c(r, "method.variant") == "dense"]
            rows = _rows_for_model(pv, accs, benches, task, hw, model, ref, baseline_of)
            for row in rows:
                v = row.values
                dense_row = row.column == "dense"
                t.add("ours", model_label(row.record, pv), row.arm,
                      "—" if dense_row else _tau_text(row.tau) + (" (dev)" if row.chosen else ""),
                      *(str(v[k]) for k in COLUMNS), hw)
            all_rows += rows
            if model in mains and _bench_for(benches, task, hw, model) is None:
                notes.append(f"No latency benchmark for {task} / {model}: run "
                             f"`{RUN_BENCH.format(task=task, model=model)}`.")
            if model in mains and not any(_c(r, "model.name") == model for r in accs if _where(r) == (task, hw)):
                notes.append(f"No accuracy records for {task} / {model}: run "
                             f"`{RUN_ACC.format(task=task, model=model)}`.")
        t.notes = [*notes,
                   "Ours: speed-up = the dense path's p50 latency / the arm's, both timed in one process at batch 1 "
                   "(the faster of our dense loop and the Hugging Face forward is the reference); the paper's "
                   "latency_ms is a mean over 1,000 examples on an RTX 2080 Ti, so compare speed-ups, not "
                   "milliseconds. Δacc vs the dense model of the same row group (a baseline model: vs the model "
                   "whose benchmark timed it). 'EAT (ours)' = physical pruning + banded window + per-example exit, "
                   "one row per swept tau, '(dev)' the tau chosen on dev (only it has per-example intervals); "
                   "paper-code = zero-masked pruning, dense window mask, batch exit (its latency: the EAT weights "
                   "run in paper-code mode). The paper's EAT rows are 12-layer bert-base-uncased (its code), its "
                   "'τ .90 (bs 32)' row a batch-32 run.", _boot_note()]
        lines += t.write(out)
    return lines, all_rows


# ---- paper vs repro -----------------------------------------------------------------------------------------------

def _paper_cell(pv, r: dict, model: str, column: str, metric: str):
    """(value, row label) of the paper for our row; DistilBERT's repeated timing rows give a range."""
    kw = dict(model_for=None, task_for=_c(r, "task.stand_in_for"))
    m = pv.find(model, _c(r, "task.name"), column, metric, **kw)
    if m is not None:
        return m.value, m.row
    if column == "dense":
        hits = [m for i in range(1, 9) if (m := pv.find(model, _c(r, "task.name"), f"dense-run{i}", metric, **kw))]
        if hits:
            vals = [h.value for h in hits]
            return f"{min(vals):.2f}–{max(vals):.2f}", hits[0].row
    return None, None


def paper_vs_repro(rows: list[Row], out: Path) -> list[str]:
    pv = paper_values("eat")
    t = Table("paper_vs_repro", "Paper vs reproduction (Tables 1-3)",
              ["task", "model", "arm", "tau", "metric", "paper", "paper row", "ours", "ours − paper"],
              runs=[r.record for r in rows])
    for row in rows:
        if not row.chosen:
            continue
        for metric in COLUMNS:
            paper, where = _paper_cell(pv, row.record, row.model, row.column, metric)
            ours = row.values.get(metric)
            if paper is None or ours is None or ours.value is None:
                continue
            t.add(run_label(row.record, "task"), model_label(row.record, pv), row.arm, _tau_text(row.tau), metric,
                  paper, where, str(ours), delta(ours.value, paper))
    t.notes = ["Offline models reach a paper row only through the twins of eat/paper_values.yaml, which admit the "
               "relative columns (speed-up, Δacc) and retention, never absolute latency or accuracy (other "
               "hardware, other data). Our EAT and paper-code rows are compared with the paper's EAT at our "
               "dev-chosen tau (tau .95 when ours exits nowhere); a range is the paper's repeated timing rows."]
    return t.write(out) or ["_Paper vs reproduction: no row of ours has a paper number yet (needs Tables 1-3 "
                            f"records: {RUN_ALL})._", ""]


# ---- the ablation -------------------------------------------------------------------------------------------------

def ablation(runs: list[dict], out: Path) -> list[str]:
    benches = runs_of(runs, method="eat_bench", variant="latency")
    if not benches:
        return [f"_Ablation: no method=eat_bench variant=latency records; run "
                f"`{RUN_BENCH.format(task='rt-polarity', model='minilm-l6')}` or {RUN_ALL}._", ""]
    pv = paper_values("eat")
    t = Table("ablation", "Ablation: every component alone, in pairs and together (batch 1, interleaved)",
              ["task", "model", "tau", "contender", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput_per_s",
               "speed-up (p50) [CI]", "acc (%)", "Δacc (pp) [CI]", "avg_depth", "avg_retention", "device"],
              runs=benches)
    notes = []
    for b in sorted(benches, key=lambda b: natural((_c(b, "task.name"), _c(b, "model.name"), hardware_label(b)))):
        m = b["metrics"]
        names = (b.get("extra") or {}).get("contenders") or sorted(
            {k[len("latency/"):-len("_p50_ms")] for k in m if k.startswith("latency/") and k.endswith("_p50_ms")})
        for name in names:
            shown = f"baseline ({_c(b, 'method.baseline_model')})" if name == "baseline" else name
            if name == "eat:best":  # the subset chosen on dev, timed again as a contender of its own
                shown = f"eat:best (= {(b.get('extra') or {}).get('best_setting')}, chosen on dev)"
            t.add(run_label(b, "task"), model_label(b, pv), _tau_text(_tau(b)), shown,
                  *(m.get(f"latency/{name}_{q}_ms") for q in ("p50", "p90", "p99", "mean")),
                  fmt(m.get(f"throughput/{name}_per_s"), 1), str(_speedup(b, name)), m.get(f"acc/{name}"),
                  str(metric_cell(m, f"delta_acc/{name}")), m.get(f"depth/{name}"), fmt(m.get(f"retention/{name}"), 3),
                  b["provenance"].get("device"))
        n = b.get("n_samples") or {}
        notes.append(f"{_c(b, 'task.name')} / {_c(b, 'model.name')}: speed-up reference = "
                     f"{(b.get('extra') or {}).get('reference', '?')} (the faster dense path); {n.get('timed', '?')} "
                     f"timed examples after {n.get('warmup', '?')} warm-up, each contender in turn per example; "
                     f"throughput at batch {n.get('batch_size', '?')}; accuracy on all {n.get('eval_examples', '?')} "
                     "eval examples.")
    t.notes = [*notes, "eat:<components> = the trained EAT weights with only those components on (none = the EAT "
               "weights run dense); paper-code = the same weights with zero-masked pruning (repo keep rule), a dense "
               "window mask and batch exit; Δacc vs the dense model with a paired bootstrap over eval examples, "
               "speed-up with a bootstrap over the timed examples. The paper has no such ablation (its Table 4 "
               "repeats Table 1)."]
    return t.write(out)


# ---- figures: frontier, retention vs length, exit layers -----------------------------------------------------------

def frontier(runs: list[dict], out: Path) -> list[str]:
    accs, benches = runs_of(runs, method="eat"), runs_of(runs, method="eat_bench", variant="latency")
    keys = sorted({(*_where(r), _c(r, "model.name")) for r in runs_of(accs, variant="eat") + benches}, key=natural)
    if not keys:
        return [f"_Frontier (Fig. 4): no EAT records; run {RUN_ALL}._", ""]
    plt = pyplot()
    fig, axes = plt.subplots(len(keys), 2, figsize=(9, 3.3 * len(keys)), squeeze=False)
    data = []
    for (task, hw, model), (ax_l, ax_d) in zip(keys, axes):
        bs = [b for b in benches if _where(b) == (task, hw) and _c(b, "model.name") == model]
        marks = {"dense": ("k", "s"), "baseline": ("tab:blue", "^"), "paper_code": ("tab:red", "x"),
                 EAT_ARM: ("tab:orange", "o")}
        for name, (color, marker) in marks.items():
            pts = sorted((b["metrics"][f"latency/{name}_p50_ms"], b["metrics"][f"acc/{name}"], _tau(b)) for b in bs
                         if f"latency/{name}_p50_ms" in b["metrics"])
            if not pts:
                continue
            shown = "EAT (ours)" if name == EAT_ARM else name
            ax_l.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, ls="-" if
                      len(pts) > 1 else "", label=shown)
            for x, y, tau in pts:
                if name in (EAT_ARM, "paper_code") and tau is not None:
                    ax_l.annotate(f"τ {tau:.2f}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
                data.append({"panel": "latency", "task": task, "hardware": hw, "model": model, "arm": shown,
                             "tau": tau, "x_latency_p50_ms": x, "accuracy_pct": y})
        ax_l.set_xlabel("p50 latency, batch 1 (ms)")
        ax_l.set_ylabel("accuracy (%)")
        ax_l.set_title(f"{task} / {model} ({hw})" + ("" if bs else ": no benchmark"), fontsize=8)
        for variant, color in (("eat", "tab:orange"), ("paper_code", "tab:red")):
            for r in [r for r in accs if _where(r) == (task, hw) and _c(r, "model.name") == model
                      and _c(r, "method.variant") == variant][:1]:
                fr = sorted((r.get("extra") or {}).get("frontier") or [], key=lambda f: f["tau"])
                if not fr:
                    continue
                ax_d.plot([f["avg_depth"] for f in fr], [100 * f["accuracy"] for f in fr], "o-", color=color,
                          label="EAT (ours)" if variant == "eat" else variant)
                for f in fr:
                    ax_d.annotate(f"{f['tau']:.2f}", (f["avg_depth"], 100 * f["accuracy"]), fontsize=6,
                                  xytext=(3, 3), textcoords="offset points")
                    data.append({"panel": "depth", "task": task, "hardware": hw, "model": model, "arm": variant,
                                 "tau": f["tau"], "x_avg_depth": f["avg_depth"], "accuracy_pct": 100 * f["accuracy"]})
        for d in [r for r in accs if _where(r) == (task, hw) and _c(r, "method.variant") == "dense"]:
            x, y = d["metrics"]["eval/avg_depth"], 100 * d["metrics"]["eval/accuracy"]
            ax_d.plot([x], [y], "s" if _c(d, "model.name") == model else "^",
                      color="k" if _c(d, "model.name") == model else "tab:blue", label=f"dense {_c(d, 'model.name')}")
            data.append({"panel": "depth", "task": task, "hardware": hw, "model": _c(d, "model.name"), "arm": "dense",
                         "x_avg_depth": x, "accuracy_pct": y})
        ax_d.set_xlabel("average executed layers")
        ax_d.set_ylabel("accuracy (%)")
        ax_d.set_title(f"{task} / {model}: accuracy vs depth over τ", fontsize=8)
        for ax in (ax_l, ax_d):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
    path = save_figure(fig, out, "frontier", data)
    return ["### Fig. 4: the accuracy-latency frontier over τ", "",
            f"{figure_link(path)}: left, each benchmark's contenders (latency needs a benchmark per τ; one point "
            "per benchmark record); right, accuracy vs average executed layers at every swept τ of the method=eat "
            "records (the dense models at full depth).", ""]


def _kept(t: int, ratio: float, n_prunes: int, rule: str) -> int:
    """Tokens left after `n_prunes` pruning steps under the paper's or the official code's keep rule (eat/prune.py)."""
    for _ in range(n_prunes):
        t = int(keep_count(t, ratio, rule))
    return t


def retention_vs_length(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method="eat") if _c(r, "method.variant") in ("eat", "paper_code")
            and ((r.get("extra") or {}).get("detail") or {}).get("length")]
    if not recs:
        return [f"_Fig. 5 (retention vs input length): no method=eat records of the eat or paper_code arm; run "
                f"{RUN_ALL}._", ""]
    plt = pyplot()
    tasks = sorted({_where(r) for r in recs}, key=natural)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.6), squeeze=False)
    data = []
    for ax, (task, hw) in zip(axes[0], tasks):
        for r in [r for r in recs if _where(r) == (task, hw)]:
            d = r["extra"]["detail"]
            rule = "repo" if _c(r, "method.variant") == "paper_code" else _c(r, "method.prune_rule") or "paper"
            length, ret = np.asarray(d["length"]), np.asarray(d["retention"], dtype=float)
            xs = np.unique(length)
            means = [float(ret[length == x].mean()) for x in xs]
            name = f"{_c(r, 'model.name')} {_c(r, 'method.variant')} ({rule} rule)"
            ax.plot(xs, means, ".", alpha=0.7, label=f"{name}: mean per length")
            n_prunes = len([p for p in _c(r, "method.prune_after") or [] if p < (_c(r, "model.num_layers") or 99)])
            ax.plot(xs, [_kept(int(x), _c(r, "method.prune_ratio"), n_prunes, rule) / x for x in xs], ":", lw=1,
                    label=f"{rule} rule, {n_prunes} steps (no exit)")
            data += [{"task": task, "hardware": hw, "model": _c(r, "model.name"), "variant": _c(r, "method.variant"),
                      "rule": rule, "length": int(x), "retention_mean": y, "n": int((length == x).sum())}
                     for x, y in zip(xs, means)]
        _label(ax, "input length (tokens)", "final retention", f"{task} ({hw})")
    path = save_figure(fig, out, "retention_vs_length", data)
    return ["### Fig. 5: retention vs input length", "",
            f"{figure_link(path)}: measured final retention per input length at the chosen τ (dots), and what "
            "each keep rule leaves after its pruning steps (dotted). The paper's text says EAT 'prunes more "
            "aggressively on shorter inputs'; its own figure (and the rule's ceiling) show the opposite: short "
            "inputs keep more (claim `prunes-more-on-short-inputs`).", ""]


def _label(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6)


def exit_layers(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method="eat") if (r.get("extra") or {}).get("frontier")]
    if not recs:
        return [f"_Fig. 6 (exit-layer histogram): no method=eat record with an exit frontier; run {RUN_ALL}._", ""]
    plt = pyplot()
    recs = sorted(recs, key=lambda r: natural((*_where(r), _c(r, "model.name"), _c(r, "method.variant"))))
    fig, axes = plt.subplots(1, len(recs), figsize=(4 * len(recs), 3.4), squeeze=False)
    data = []
    for ax, r in zip(axes[0], recs):
        fr = sorted(r["extra"]["frontier"], key=lambda f: f["tau"])
        layers = sorted({int(k) for f in fr for k in f["exit_hist"]})
        width = 0.8 / len(fr)
        for i, f in enumerate(fr):
            total = sum(f["exit_hist"].values()) or 1
            fracs = [f["exit_hist"].get(str(l), f["exit_hist"].get(l, 0)) / total for l in layers]
            chosen = _same_tau(f["tau"], _tau(r))
            ax.bar(np.arange(len(layers)) + i * width, fracs, width, label=f"τ {f['tau']:.2f}" + (" (dev)" if chosen
                                                                                                 else ""),
                   edgecolor="k" if chosen else None)
            data += [{"task": _c(r, "task.name"), "model": _c(r, "model.name"), "variant": _c(r, "method.variant"),
                      "tau": f["tau"], "chosen": chosen, "exit_layer": l, "fraction": x}
                     for l, x in zip(layers, fracs)]
        ax.set_xticks(np.arange(len(layers)) + 0.4 - width / 2, [str(l) for l in layers])
        _label(ax, "exit layer", "fraction of eval examples",
               f"{_c(r, 'task.name')} / {_c(r, 'model.name')} / {_c(r, 'method.variant')}")
    path = save_figure(fig, out, "exit_layers", data)
    return ["### Fig. 6: exit-layer histogram", "",
            f"{figure_link(path)}: where eval examples leave the network at each swept τ (per example for EAT, "
            "per batch for paper-code). The paper's Fig. 6 is titled τ = 0.90 but plots a later τ = 0.95 run and "
            "matches no table.", ""]


# ---- scaling, calibration -----------------------------------------------------------------------------------------

def scaling(runs: list[dict], out: Path) -> list[str]:
    recs = runs_of(runs, method="eat_bench", variant="scaling")
    if not recs:
        return ["_Scaling: no method=eat_bench variant=scaling records; run "
                "`python -m experiments.run method=eat_bench method.variant=scaling` or " + RUN_ALL + "._", ""]
    lengths = sorted({int(k.rsplit("@", 1)[1]) for r in recs for k in r["metrics"] if "_ms@" in k})
    t = Table("scaling", "Cost vs sequence length (random-init encoder, one sequence of T real tokens)",
              ["arm", *(f"ms@{T}" for T in lengths), "log-log slope [CI]", "shape", "device"], runs=recs)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(recs), figsize=(5 * len(recs), 3.8), squeeze=False)
    data = []
    for ax, r in zip(axes[0], recs):
        m, extra = r["metrics"], r.get("extra") or {}
        shape = extra.get("shape") or _c(r, "method.scaling_shape") or {}
        shape_text = f"d={shape.get('hidden_size')}, L={shape.get('num_hidden_layers')}"
        for arm in ("dense", "window", "eat", "paper_code"):
            if f"scaling/{arm}_slope" not in m:
                continue
            slope = replicate_cell(r, f"scaling/{arm}_slope")
            t.add(arm, *(m.get(f"scaling/{arm}_ms@{T}") for T in lengths), str(slope), shape_text,
                  r["provenance"].get("device"))
            xs = [T for T in lengths if f"scaling/{arm}_ms@{T}" in m]
            ax.loglog(xs, [m[f"scaling/{arm}_ms@{T}"] for T in xs], "o-", label=f"{arm}: slope {slope}")
            data += [{"arm": arm, "length": T, "ms": m[f"scaling/{arm}_ms@{T}"], "slope": slope.value} for T in xs]
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel("forward time (ms, median)")
        ax.set_title(f"{shape_text}, prune after {extra.get('prune_after')}", fontsize=8)
        ax.legend(fontsize=6)
    path = save_figure(fig, out, "scaling", data)
    t.notes = [f"Figure: {figure_link(path)}. Slope = least squares of log(median ms) on log T; CI from the "
               "benchmark's bootstrap over timed repeats. Dense attention tends to slope 2 only past T ≈ 6d (spec "
               "§5); EAT (physical pruning + banded window) should stay near 1; paper-code (zero-masking, a dense "
               "(T, T) mask) stays quadratic."]
    return t.write(out)


def calibration(runs: list[dict], out: Path) -> list[str]:
    recs = [r for r in runs_of(runs, method="eat") if "calib/ece_eval_before" in r["metrics"]]
    if not recs:
        return [f"_Calibration: no method=eat record with an exit head; run {RUN_ALL}._", ""]
    recs = sorted(recs, key=lambda r: natural((*_where(r), *(_c(r, k) for k in ("model.name", "method.variant",
                                                                                   "seed")))))
    t = Table("calibration", "Calibration of the exit head: ECE (15 bins) before and after temperature scaling",
              ["task", "model", "variant", "seed", "ECE dev before", "ECE dev after", "ECE eval before",
               "ECE eval after", "temperature", "scaled"], runs=recs)
    pv = paper_values("eat")
    for r in recs:
        m = r["metrics"]
        t.add(run_label(r, "task"), model_label(r, pv), _c(r, "method.variant"), _c(r, "seed"),
              *(fmt(100 * m[k], 2) if k in m else "—" for k in ("calib/ece_dev_before", "calib/ece_dev_after",
                                                                "calib/ece_eval_before", "calib/ece_eval_after")),
              fmt(m.get("calib/temperature"), 3), "yes" if m.get("calib/temperature", 1.0) != 1.0 else "no")
    shown = [r for r in recs if (r.get("extra") or {}).get("reliability")][:6]
    fig_note = []
    if shown:
        plt = pyplot()
        fig, axes = plt.subplots(1, len(shown), figsize=(3.6 * len(shown), 3.6), squeeze=False)
        data = []
        for ax, r in zip(axes[0], shown):
            ax.plot([0, 1], [0, 1], ":", color="gray")
            for when, style in (("before", "o-"), ("after", "s-")):
                b = r["extra"]["reliability"].get(when)
                if not b:
                    continue
                keep = [i for i, c in enumerate(b["count"]) if c > 0]
                ax.plot([b["confidence"][i] for i in keep], [b["accuracy"][i] for i in keep], style, ms=3, label=when)
                data += [{"task": _c(r, "task.name"), "model": _c(r, "model.name"), "variant": _c(r, "method.variant"),
                          "when": when, "lo": b["lo"][i], "hi": b["hi"][i], "count": b["count"][i],
                          "confidence": b["confidence"][i], "accuracy": b["accuracy"][i]} for i in keep]
            ax.set_xlabel("confidence (max prob)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"{_c(r, 'task.name')} / {_c(r, 'model.name')} / {_c(r, 'method.variant')}", fontsize=8)
            ax.legend(fontsize=6)
        path = save_figure(fig, out, "reliability", data)
        fig_note = [f"Reliability diagram of the exit head on eval (before/after): {figure_link(path)}."]
    t.notes = ["ECE in percent, 15 equal-width bins over the exit head's max probability [P §7.2]; the temperature "
               "is fitted on dev (NLL) only when dev ECE exceeds 2% (scaled = yes), then applied before τ is chosen "
               "on dev; eval is held out from both. The official code has neither ECE nor temperature scaling.",
               *fig_note]
    return t.write(out)


# ---- the report ---------------------------------------------------------------------------------------------------

def build(runs: list[dict], out: Path) -> list[str]:
    out = Path(out)
    runs = selection.dedupe(runs)
    lines = ["Generated from the run records (`eat/report.py`); each table also lies in `tables/` as .md and .csv. "
             "Offline stand-ins are labelled (rt-polarity for SST-2, vitaminc for MNLI-m, minilm-l6 for BERT-base, "
             "minilm-l3 for DistilBERT).", ""]
    rows: list[Row] = []  # Tables 1-3's rows of ours, which paper_vs_repro compares

    def tables(r, o):
        section, found = paper_tables(r, o)
        rows.extend(found)
        return section

    def vs_repro(r, o):
        return paper_vs_repro(rows, o)
    tables.__name__, vs_repro.__name__ = "paper_tables", "paper_vs_repro"
    return lines + sections((tables, vs_repro, ablation, frontier, scaling, calibration, retention_vs_length,
                             exit_layers), runs, out)
