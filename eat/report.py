"""EAT's own tables and figures, built from results/eat/runs/**/*.json by `python -m experiments.report eat` (never
edited by hand):

    tables/table<n>_<task>   Tables 1-3: the paper's rows (model, tau, latency_ms, acc, speed-up vs dense, Δacc,
                             avg_depth, avg_retention) above ours for the same task, stand-ins labelled, our 95%
                             intervals, and the normalised FLOPs of each accuracy run
    tables/ablation          every contender of each latency benchmark (dense, every subset of prune/window/exit,
                             paper-code, the shallower baseline): p50/p90/p99, throughput, speed-up [CI], Δacc [CI]
    tables/scaling           cost vs sequence length per arm, log-log slope [CI]       (+ figures/scaling)
    tables/calibration       ECE of the exit head before/after temperature scaling, T  (+ figures/reliability)
    tables/paper_vs_repro    ours − paper wherever the paper has the number (offline models through the twins of
                             paper_values.yaml: relative columns and retention only)
    tables/retention_by_layer  Fig. 2 from the records: scheduled vs observed retention per layer and arm, with
                             the share of examples running each layer              (+ figures/retention_by_layer)
    figures/frontier         accuracy vs p50 latency (benchmarks) and vs average depth over tau (Fig. 4)
    figures/retention_vs_length (Fig. 5), figures/exit_layers (Fig. 6)

Every row of Tables 1-3 is one record at one batch regime: the accuracy runs (method=eat) carry accuracy, Δacc, depth,
retention and the analytic 'norm. FLOPs' (eat/flops.py over the per-layer counts in extra.layers), the latency
benchmarks (method=eat_bench) their own rows with latency and speed-up at batch 1.

A section without records says which command makes them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import numpy as np

from eat import flops
from eat.prune import keep_count
from experiments.evidence import selection
from experiments.evidence.paper_values import paper_values
from experiments.evidence.signal import run_name
from experiments.evidence.stats import N_BOOT, example_ci
from experiments.evidence.tables import (Estimate, Table, delta, figure_link, fmt, hardware_label, label_axes,
                                         metric_cell, model_label, natural, page, paired_diff, pyplot, replicate_cell,
                                         run_label, runs_of, save_figure, seed_sd)
from experiments.evidence.tables import config_value as _c

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

TABLE_COLUMNS = (*COLUMNS, "norm_flops")
ACC_COMPARED = ("accuracy", "delta_acc_pp", "avg_depth", "avg_retention")  # what an accuracy run can be held to
TIMED_COMPARED = ("latency_ms", "speedup_vs_bert")  # what a benchmark row adds
# a latency benchmark's contenders that Tables 1-3 show, each a row of its own: (contender, arm)
TIMED = (("dense", "dense"), (EAT_ARM, "EAT (ours)"), ("paper_code", "paper-code mode on the EAT weights"),
         ("baseline", "baseline (dense)"))
BENCH_REGIME = "method=eat_bench, batch 1"


@dataclass
class Row:
    """One of our rows of Tables 1-3. Every number of a row comes from one record, an accuracy run (method=eat) or
    a latency benchmark (method=eat_bench), at one batch regime: never an accuracy of one and a latency of the
    other. `compare` names the columns paper_vs_repro holds against the paper."""
    model: str  # the model whose weights the row runs
    arm: str
    tau: float | None
    record: dict
    column: str  # the paper's column this row compares with
    regime: str = ""  # the record kind and batch regime behind every number of the row
    chosen: bool = True  # the tau chosen on dev (False: another point of the frontier, or a tau-sweep benchmark)
    values: dict = field(default_factory=dict)  # TABLE_COLUMNS -> Estimate
    compare: tuple[str, ...] = ()
    label: str = ""  # the model as tables show it


def _latency(bench: dict | None, name: str) -> Estimate:
    return Estimate(None if bench is None else bench["metrics"].get(f"latency/{name}_p50_ms"))


def _bench_for(benches: list[dict], task: str, hw: str, model: str, tau: float | None = None) -> dict | None:
    """The latency benchmark of this task and model; with `tau`, one that timed EAT at that tau."""
    cands = [b for b in benches if _where(b) == (task, hw) and _c(b, "model.name") == model]
    if tau is not None:
        cands = [b for b in cands if _same_tau(_tau(b), tau)]
    return cands[0] if cands else None


def _sweep(b: dict) -> bool:
    """A benchmark of a tau sweep (experiments eat/frontier*), not the one at the tau chosen on dev."""
    return fnmatch(str(b.get("exp_id") or ""), "eat/frontier*")


def _acc_regime(r: dict) -> str:
    """Where an accuracy run's numbers come from. A batch-exit arm (paper-code) computes what its whole batch allows,
    so the batch its exits were scored at is part of the number (extra.exit_scored_at_batch; records without it
    scored at the eval batch size); per-example arms compute the same at any batch size."""
    if _c(r, "method.variant") == "paper_code":
        b = (r.get("extra") or {}).get("exit_scored_at_batch") or _c(r, "hardware.eval_batch_size")
        return f"method=eat, batch exit at batch {b}"
    return "method=eat"


# ---- analytic FLOPs (eat/flops.py) from the per-layer loads a method=eat record keeps ----------------------------

def _layers(r: dict) -> list[dict] | None:
    ls = (r.get("extra") or {}).get("layers")
    return sorted(ls, key=lambda x: x["layer"]) if isinstance(ls, list) and ls else None


def _window(r: dict) -> int | None:
    """The attention window the FLOPs count: only the EAT arm's banded kernel skips pairs; the paper-code arm's dense
    (T, T) mask computes every pair and the dense arm has none."""
    dims = (r.get("extra") or {}).get("model_dims") or {}
    return dims.get("window") if _c(r, "method.variant") == "eat" else None


def _loads(layers: list[dict]) -> list[flops.Layer]:
    # a layer no example computes has no mean token count: it costs nothing
    return [flops.Layer(float(x["running"]), float(x["tokens_in"]) if x["running"] and x["tokens_in"] is not None
                    else 0.0) for x in sorted(layers, key=lambda x: x["layer"])]


def _count(layers, dims: dict | None, window: int | None, r: dict, heads_at: tuple[int, ...] = ()) -> float | None:
    """eat/flops.py's count over per-layer loads, with the final head and a head at each of `heads_at`; None
    without the loads or the model's sizes."""
    if not layers or not dims or not dims.get("hidden") or not dims.get("intermediate"):
        return None
    loads = _loads(layers)
    n_out = len(_c(r, "task.label_names") or []) or 2
    heads = [(at, n_out) for at in (len(loads), *heads_at) if at and 1 <= at <= len(loads)]
    return flops.encoder_flops(loads, dims["hidden"], dims["intermediate"], window, heads)


def _flops(r: dict) -> float | None:
    """Encoder FLOPs per eval example of a method=eat record at its chosen tau (extra.layers, extra.model_dims);
    None for records made before the per-layer accounting."""
    m, heads = r["config"].get("method") or {}, ()
    if _c(r, "method.variant") != "dense":  # the dense arm is the encoder and its final head alone
        exit_at = m.get("exit_layer") if _tau(r) is not None else None
        patience_at = (m.get("patience_layer") or (m.get("exit_layer") or 1) - 1) if m.get("patience") else None
        heads = (exit_at, patience_at)
    return _count(_layers(r), (r.get("extra") or {}).get("model_dims"), _window(r), r, heads)


def _bench_flops(b: dict, name: str) -> float | None:
    """FLOPs per eval example of a benchmark contender on the EAT weights (or dense) from the per-layer loads the
    benchmark kept for it (extra.layers_by_contender); the baseline is another model, which model_dims do not
    describe."""
    extra = b.get("extra") or {}
    if name == "baseline":
        return None
    layers = (extra.get("layers_by_contender") or {}).get(name)
    dims = extra.get("model_dims")
    # only the banded kernel of an eat:* subset with the window skips pairs; paper-code's mask computes them all
    window = (dims or {}).get("window") if name.startswith("eat:") and "window" in name else None
    exits = ("exit" in name or name == "paper_code") and _tau(b) is not None
    return _count(layers, dims, window, b, (_c(b, "method.exit_layer"),) if exits else ())


def _ratio(arm: float | None, dense: float | None) -> Estimate:
    return Estimate(None if arm is None or not dense else flops.normalised(arm, dense))


def _norm_flops(arm: dict, dense: dict | None) -> Estimate:
    """The arm's FLOPs over the dense model's, both method=eat records on the same eval data."""
    if dense is None or arm["config"].get("data") != dense["config"].get("data") or _where(arm) != _where(dense):
        return Estimate(None)
    return _ratio(_flops(arm), _flops(dense))


def _acc_rows(pv, accs, task, hw, model, ref_dense, baseline_of) -> list[Row]:
    """The accuracy runs of one model: dense, EAT at every swept tau, paper-code; not timed (latency '—')."""
    def recs(variant):
        return [r for r in accs if _where(r) == (task, hw) and _c(r, "model.name") == model
                and _c(r, "method.variant") == variant]
    rows = []
    dense = recs("dense")
    ref = ref_dense or dense
    ref0 = ref[0] if ref else None
    untimed = {"latency_ms": Estimate(None), "speedup_vs_bert": Estimate(None)}
    if dense:
        host = baseline_of.get((task, hw, model))  # this model is another model's benchmark baseline
        row = Row(model, "baseline (dense)" if host is not None else "dense", None, dense[0], "dense",
                  _acc_regime(dense[0]), compare=ACC_COMPARED, label=model_label(dense[0], pv))
        n_layers = _c(dense[0], "model.num_layers")
        row.values = {**untimed, "accuracy": _acc(dense),
                      "delta_acc_pp": _delta_acc(dense, ref) if ref is not dense else Estimate(0.0),
                      "avg_depth": Estimate(float(n_layers) if n_layers else None), "avg_retention": Estimate(1.0),
                      "norm_flops": _norm_flops(dense[0], ref0)}
        rows.append(row)
    for variant in ("eat", "paper_code"):
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
            row = Row(model, "EAT (ours)" if variant == "eat" else "paper-code", t, arm[0],
                      f"eat-tau{t:.2f}" if t is not None else "eat-tau0.95", _acc_regime(arm[0]), chosen=is_chosen,
                      compare=ACC_COMPARED, label=model_label(arm[0], pv))
            if is_chosen:
                acc, dacc = _acc(arm), _delta_acc(arm, ref) if ref else Estimate(None)
                depth = seed_sd([r["metrics"]["eval/avg_depth"] for r in arm])
                ret = seed_sd([r["metrics"]["eval/avg_retention"] for r in arm], 3)
                norm_flops = _norm_flops(arm[0], ref0)
            else:
                pts = [f for r in arm for f in (r.get("extra") or {}).get("frontier") or [] if _same_tau(f["tau"], t)]
                acc = seed_sd([100 * f["accuracy"] for f in pts])
                dacc = Estimate(acc.value - _acc(ref).value) if ref and acc.value is not None else Estimate(None)
                depth = seed_sd([f["avg_depth"] for f in pts])
                ret = seed_sd([f["avg_retention"] for f in pts], 3)
                norm_flops = Estimate(None)  # the per-layer loads are kept at the chosen tau only
            row.values = {**untimed, "accuracy": acc, "delta_acc_pp": dacc, "avg_depth": depth,
                          "avg_retention": ret, "norm_flops": norm_flops}
            rows.append(row)
    return rows


def _timed_rows(pv, benches, task, hw, model) -> list[Row]:
    """One row per contender of each latency benchmark of this model, every number from that benchmark: latency and
    speed-up at batch 1, accuracy, Δacc (vs its dense arm), depth and retention as it scored them."""
    rows = []
    mine = sorted((b for b in benches if _where(b) == (task, hw) and _c(b, "model.name") == model),
                  key=lambda b: (_sweep(b), _tau(b) if _tau(b) is not None else 2.0))
    for b in mine:
        m, tau, sweep = b["metrics"], _tau(b), _sweep(b)
        for name, arm in TIMED:
            if f"latency/{name}_p50_ms" not in m or (sweep and name != EAT_ARM):
                continue
            weights = _c(b, "method.baseline_model") if name == "baseline" else model
            if name == "paper_code" and m.get("calib/temperature") not in (None, 1.0):
                arm = f"{arm} (T = {m['calib/temperature']:.2f})"
            exits = name in (EAT_ARM, "paper_code")
            row = Row(weights, arm, tau if exits else None, b,
                      "dense" if not exits else f"eat-tau{tau:.2f}" if tau is not None else "eat-tau0.95",
                      BENCH_REGIME, chosen=not sweep,
                      # the paper-code contender runs the EAT arm's weights: not the official code's EAT
                      compare=() if name == "paper_code" else TIMED_COMPARED,
                      label=model_label({"config": {"model": {"name": weights, "stand_in_for": None}}}, pv)
                      if name == "baseline" else model_label(b, pv))
            row.values = {"latency_ms": _latency(b, name), "accuracy": Estimate(m.get(f"acc/{name}")),
                          "speedup_vs_bert": _speedup(b, name), "delta_acc_pp": metric_cell(m, f"delta_acc/{name}"),
                          "avg_depth": Estimate(m.get(f"depth/{name}")),
                          "avg_retention": Estimate(m.get(f"retention/{name}"), digits=3),
                          "norm_flops": _ratio(_bench_flops(b, name), _bench_flops(b, "dense"))}
            rows.append(row)
    return rows


def _paper_rows(pv, ptask: str) -> list[list]:
    """The paper's rows of one task: BERT, DistilBERT (its repeated timing rows as a range), EAT per tau; each row's
    latency and accuracy come from one timing run (accuracy on the timed examples)."""
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
        out.append([where, model, "dense", "—", "timing run, batch 1", rng("latency_ms"), base.get("accuracy"),
                    rng("speedup_vs_bert"), base.get("delta_acc_pp"), base.get("avg_depth"), base.get("avg_retention"),
                    "—", "RTX 2080 Ti"])
    for (model, col), v in cols.items():
        if not col.startswith("eat-tau") or col.endswith("-later"):
            continue
        tau = col[len("eat-tau"):].replace("-bs32", " (bs 32)")
        regime = "timing run, batch 32" if col.endswith("-bs32") else "timing run, batch 1"
        out.append([where, model, "EAT (official code)", tau, regime, *(v.get(k) for k in COLUMNS), "—",
                    "RTX 2080 Ti"])
    return out


def paper_tables(runs: list[dict], out: Path) -> tuple[list[str], list[Row]]:
    pv = paper_values("eat")
    accs, benches = runs_of(runs, method="eat"), runs_of(runs, method="eat_bench", variant="latency")
    if not accs and not benches:
        return [f"_Tables 1-3: no method=eat records; run {RUN_ALL}._", ""], []
    lines, all_rows = [], []
    # a model that another model's benchmark times as its baseline: its Δacc and FLOPs are against that model
    baseline_of = {(*_where(b), _c(b, "method.baseline_model")): b for b in benches
                   if _c(b, "method.baseline_model") not in (None, _c(b, "model.name"))}
    for task, hw in sorted({_where(r) for r in accs + benches}, key=natural):
        here = [r for r in accs + benches if _where(r) == (task, hw)]
        ptask = _paper_task(pv, here[0])
        n, task_label = TABLE_OF.get(ptask), run_label(here[0], "task")
        t = Table(f"table{n or ''}_{task}" if n else f"tables_{task}",
                  f"Table {n} ({ptask}): {task_label}" if n else f"Tables 1-3 columns: {task_label}",
                  ["source", "model", "arm", "tau", "record (regime)", "latency_ms (p50)", "acc (%)",
                   "speed-up vs dense", "Δacc (pp)", "avg_depth", "avg_retention", "norm. FLOPs", "hardware"],
                  runs=here)
        if ptask:
            for row in _paper_rows(pv, ptask):
                t.add(*row)
        mains = sorted({_c(r, "model.name") for r in here if _c(r, "method.variant") in ("eat", "paper_code")
                        or _c(r, "method.name") == "eat_bench"}, key=natural)
        others = sorted({_c(r, "model.name") for r in here} - set(mains), key=natural)
        notes, rows = [], []
        for model in mains + others:
            ref_model = model
            if model not in mains:
                host = baseline_of.get((task, hw, model))
                ref_model = _c(host, "model.name") if host is not None else (mains[0] if mains else model)
            ref = [r for r in accs if _where(r) == (task, hw) and _c(r, "model.name") == ref_model
                   and _c(r, "method.variant") == "dense"]
            rows += _acc_rows(pv, accs, task, hw, model, ref, baseline_of)
            if model in mains and _bench_for(benches, task, hw, model) is None:
                notes.append(f"No latency benchmark for {task} / {model}: run "
                             f"`{RUN_BENCH.format(task=task, model=model)}`.")
            if model in mains and not any(_c(r, "model.name") == model for r in accs if _where(r) == (task, hw)):
                notes.append(f"No accuracy records for {task} / {model}: run "
                             f"`{RUN_ACC.format(task=task, model=model)}`.")
        for model in mains:  # the benchmarks after the accuracy runs: two kinds of record, never one row
            rows += _timed_rows(pv, benches, task, hw, model)
        for row in rows:
            v = row.values
            t.add("ours", row.label, row.arm, "—" if row.tau is None and row.column == "dense"
                  else _tau_text(row.tau) + (" (dev)" if row.chosen else ""), row.regime,
                  *(str(v[k]) for k in TABLE_COLUMNS[:-1]), str(v["norm_flops"]), hw)
        all_rows += rows
        no_layers = sorted({run_name(r) for r in here if _c(r, "method.name") == "eat" and _flops(r) is None})
        t.notes = [*notes,
                   "Each row is one record at one batch regime. 'method=eat' rows are accuracy runs: accuracy, "
                   "Δacc (paired with the dense run of the row group), avg_depth, avg_retention and norm. FLOPs, "
                   "untimed (latency —). 'method=eat_bench' rows are one latency benchmark each: p50 latency and "
                   "speed-up at batch 1 with accuracy, Δacc (vs the benchmark's own dense arm), depth and retention "
                   "as that benchmark scored them (the batch-exit paper-code mode at batch 1, where its result "
                   "depends on the batch; per-example arms compute the same at any batch size). An arm's accuracy "
                   "run and a benchmark are never merged into one row: the benchmark's 'paper-code mode on the EAT "
                   "weights' runs the EAT arm's weights, temperature and tau in paper-code mode, not the paper-code "
                   "arm of the row above, and is held to no paper row.",
                   "Speed-up = the dense path's p50 latency / the arm's, both timed in one process (the faster of our "
                   "dense loop and the Hugging Face forward is the reference); the paper's latency_ms is a mean over "
                   "1,000 examples on an RTX 2080 Ti, so compare speed-ups, not milliseconds. 'EAT (ours)' = "
                   "physical pruning + banded window + per-example exit, one accuracy row per swept tau, '(dev)' the "
                   "tau chosen on dev (only it has per-example intervals); paper-code = zero-masked pruning, dense "
                   "window mask, batch exit. The paper's EAT rows are 12-layer bert-base-uncased (its code), its "
                   "'τ .90 (bs 32)' row a batch-32 run.",
                   "norm. FLOPs = analytic encoder FLOPs per eval example (eat/flops.py, from the per-layer exit "
                   "fractions and token counts a record keeps: extra.layers of an accuracy run, "
                   "extra.layers_by_contender of a benchmark) over those of the dense model of the same record kind "
                   "on the same data (the dense run of the row group; the benchmark's own dense arm), at the chosen "
                   "tau only, as the paper's Fig. 3 'normalised compute'; the benchmark's baseline is another model "
                   "and gets none" + (f"; — for records without the per-layer counts (made before them: "
                                      f"{', '.join(no_layers)})" if no_layers else "") + ".",
                   _boot_note()]
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
              ["task", "model", "arm", "tau", "our record (regime)", "metric", "paper", "paper row", "ours",
               "ours − paper"], runs=[r.record for r in rows])
    for row in rows:
        if not row.chosen:
            continue
        for metric in row.compare:
            paper, where = _paper_cell(pv, row.record, row.model, row.column, metric)
            ours = row.values.get(metric)
            if paper is None or ours is None or ours.value is None:
                continue
            t.add(run_label(row.record, "task"), row.label or model_label(row.record, pv), row.arm,
                  _tau_text(row.tau), row.regime, metric, paper, where, str(ours), delta(ours.value, paper))
    t.notes = ["Offline models reach a paper row only through the twins of eat/paper_values.yaml, which admit the "
               "relative columns (speed-up, Δacc) and retention, never absolute latency or accuracy (other "
               "hardware, other data). Our EAT and paper-code rows are compared with the paper's EAT at our "
               "dev-chosen tau (tau .95 when ours exits nowhere); a range is the paper's repeated timing rows. "
               "Accuracy runs answer for accuracy, Δacc, depth and retention, benchmarks for latency and speed-up "
               "(each row of Tables 1-3 is one record); the benchmark's paper-code mode runs the EAT arm's weights, "
               "so it is held to no paper row."]
    return t.write(out) or ["_Paper vs reproduction: no row of ours has a paper number yet (needs Tables 1-3 "
                            f"records: {RUN_ALL})._", ""]


# ---- the ablation -------------------------------------------------------------------------------------------------

def _subset(name: str | None) -> str:
    """A component subset as what it is ('eat:exit' -> 'exit only'): the subset chosen on dev can be one component
    alone, so it is not called EAT."""
    if not name:
        return "none (no subset within the dev tolerance)"
    on = [c for c in name.removeprefix("eat:").split("+") if c != "none"]
    if not on:
        return "no component (the EAT weights run dense)"
    if len(on) == 1:
        return f"{on[0]} only"
    off = [c for c in ("prune", "window", "exit") if c not in on]
    return " + ".join(on) + (f" (no {', '.join(off)})" if off else " (all three)")


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
            if name == "paper_code":
                shown = "paper_code (paper-code mode on the EAT weights)"
            if name == "eat:best":  # the subset chosen on dev, timed again as a contender of its own
                shown = f"eat:best = {_subset((b.get('extra') or {}).get('best_setting'))} (the subset chosen on dev)"
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
            shown = {EAT_ARM: "EAT (ours)", "paper_code": "paper-code mode (EAT weights)"}.get(name, name)
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


def _paper_fig2(pv) -> str:
    """The paper's Fig. 2 series as eat/paper_values.yaml transcribes them (hard-coded in its LaTeX, not data)."""
    series = []
    for column, name in (("fig2-target", "target"), ("fig2-observed-example", "'observed (example)'")):
        cells = sorted(pv.select(column=column), key=lambda c: natural(c.metric))
        if cells:
            series.append(f"{name} {'/'.join(fmt(c.value) for c in cells)} %")
    if not series:
        return ""
    return (f"The paper's Fig. 2 draws both of its series from hard-coded values ({'; '.join(series)}: the share of "
            "tokens layer i computes, i.e. ours after layer i - 1), not from data.")


def retention_by_layer(runs: list[dict], out: Path) -> list[str]:
    """Fig. 2 from the records: per layer, the retention the keep rule schedules at the mean input length and the
    retention observed on eval, per arm at its chosen tau (with the share of examples still running the layer)."""
    accs = runs_of(runs, method="eat")
    recs = sorted((r for r in accs if _layers(r)),
                  key=lambda r: natural((*_where(r), _c(r, "model.name"), _c(r, "method.variant"))))
    without = sorted({run_name(r) for r in accs if not _layers(r)})
    missing = (f"{len(without)} method=eat record(s) without per-layer counts (extra.layers; made before the "
               f"per-layer accounting): {', '.join(without)}") if without else ""
    if not recs:
        return [f"_Fig. 2 (scheduled vs observed retention per layer): no method=eat record keeps per-layer token "
                f"counts{'; ' + missing if missing else ''}; rerun {RUN_ALL}._", ""]
    t = Table("retention_by_layer", "Fig. 2: scheduled vs observed token retention per layer",
              ["task", "model", "arm", "tau", "layer", "running (%)", "tokens in", "retention scheduled",
               "retention observed", "MFLOPs per example", "hardware"], runs=recs)
    pv, plt = paper_values("eat"), pyplot()
    panels = sorted({(*_where(r), _c(r, "model.name")) for r in recs}, key=natural)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    colors = {"dense": "k", "eat": "tab:orange", "paper_code": "tab:red"}
    data = []
    for ax, (task, hw, model) in zip(axes[0], panels):
        for r in [r for r in recs if (*_where(r), _c(r, "model.name")) == (task, hw, model)]:
            variant, layers = _c(r, "method.variant"), _layers(r)
            dims = (r.get("extra") or {}).get("model_dims") or {}
            xs = [x["layer"] for x in layers]
            color = colors.get(variant, "tab:gray")
            for key, style, what in (("retention_scheduled", "--", "scheduled"), ("retention_observed", "o-",
                                                                                     "observed")):
                ys = [math.nan if x[key] is None else x[key] for x in layers]  # a layer no example reaches
                ax.plot(xs, ys, style, color=color, ms=3, lw=1 if what == "scheduled" else 1.5,
                        label=f"{variant}: {what}")
            for x, load in zip(layers, _loads(layers)):
                mflops = (1e-6 * flops.FLOPS_PER_MAC * load.running
                          * flops.layer_macs(load.tokens, dims["hidden"], dims["intermediate"], _window(r))
                          if dims.get("hidden") and dims.get("intermediate") else None)
                t.add(run_label(r, "task"), model_label(r, pv), variant, _tau_text(_tau(r)),
                      x["layer"], fmt(100 * x["running"], 1), fmt(x["tokens_in"], 1),
                      fmt(x["retention_scheduled"], 3), fmt(x["retention_observed"], 3), fmt(mflops, 2), hw)
                data.append({"task": task, "hardware": hw, "model": model, "variant": variant, "tau": _tau(r),
                             "layer": x["layer"], "running": x["running"], "tokens_in": x["tokens_in"],
                             "retention_scheduled": x["retention_scheduled"],
                             "retention_observed": x["retention_observed"]})
        ax.set_ylim(0, 1.05)
        ax.set_xticks(sorted({x["layer"] for r in recs for x in _layers(r)
                              if (*_where(r), _c(r, "model.name")) == (task, hw, model)}))
        label_axes(ax, "layer", "retention after the layer's pruning", f"{task} / {model} ({hw})")
    path = save_figure(fig, out, "retention_by_layer", data)
    t.notes = [f"Figure: {figure_link(path)}. Per layer i: running = the share of eval examples that compute it "
               "(the rest exited); tokens in = the mean token slots entering it over those examples; retention "
               "observed = the mean kept / original tokens after layer i's pruning; retention scheduled = what the "
               "arm's keep rule leaves at the mean input length (extra.seq_len_mean); MFLOPs = eat/flops.py's count "
               "for the layer, weighted by running. " + _paper_fig2(pv), *([missing + "."] if missing else [])]
    return t.write(out)


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
        label_axes(ax, "input length (tokens)", "final retention", f"{task} ({hw})")
    path = save_figure(fig, out, "retention_vs_length", data)
    return ["### Fig. 5: retention vs input length", "",
            f"{figure_link(path)}: measured final retention per input length at the chosen τ (dots), and what "
            "each keep rule leaves after its pruning steps (dotted). The paper's text says EAT 'prunes more "
            "aggressively on shorter inputs'; its own figure (and the rule's ceiling) show the opposite: short "
            "inputs keep more (claim `prunes-more-on-short-inputs`).", ""]


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
        label_axes(ax, "exit layer", "fraction of eval examples",
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
        label_axes(ax, "sequence length T (tokens)", "forward time (ms, median)",
                   f"{shape_text}, prune after {extra.get('prune_after')}")
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
            label_axes(ax, "confidence (max prob)", "accuracy",
                       f"{_c(r, 'task.name')} / {_c(r, 'model.name')} / {_c(r, 'method.variant')}")
        path = save_figure(fig, out, "reliability", data)
        fig_note = [f"Reliability diagram of the exit head on eval (before/after): {figure_link(path)}."]
    t.notes = ["ECE in percent, 15 equal-width bins over the exit head's max probability [P §7.2]; the temperature "
               "is fitted on dev (NLL) only when dev ECE exceeds 2% (scaled = yes), then applied before τ is chosen "
               "on dev; eval is held out from both. The official code has neither ECE nor temperature scaling.",
               *fig_note]
    return t.write(out)


# ---- the report ---------------------------------------------------------------------------------------------------

INTRO = (  # the page's opening paragraph
         "Generated from the run records (`eat/report.py`); each table also lies in `tables/` as .md and .csv. "
         "Offline stand-ins are labelled (rt-polarity for SST-2, vitaminc for MNLI-m, minilm-l6 for BERT-base, "
         "minilm-l3 for DistilBERT).")


def build(runs: list[dict], out: Path) -> list[str]:
    rows: list[Row] = []  # Tables 1-3's rows of ours, which paper_vs_repro compares

    def tables(r, o):
        section, found = paper_tables(r, o)
        rows.extend(found)
        return section

    def vs_repro(r, o):
        return paper_vs_repro(rows, o)
    tables.__name__, vs_repro.__name__ = "paper_tables", "paper_vs_repro"
    return page(INTRO, (tables, vs_repro, ablation, frontier, scaling, calibration, retention_by_layer,
                retention_vs_length, exit_layers), selection.dedupe(runs), out)
