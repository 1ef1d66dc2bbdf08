"""method=pema_bench: what PEMA costs and saves, measured side by side in one process (Table 9's runtime [P App. F];
the memory measurement is ours, as the paper counts parameters only [P §5]):

1. `prepare_time`: PEMA's preparation (count V' over the run's splits, build the id map, put E' in place and write
   the full matrix to disk);
2. `step_times`: the optimizer-step time without and with PEMA, interleaved (experiments.timing);
3. `memory`: the bytes of weights + gradients + AdamW state, analytical and measured (peak RSS on CPU, peak
   allocated on CUDA), each arm in turn.
"""
from __future__ import annotations

import copy
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from experiments import data, recipe
from experiments.context import RunContext
from experiments.optim import adamw
from experiments.timing import interleaved, summarize
from pema.memory import Probe, training_bytes
from pema.hook import attach

MB = 1 / 2**20


@dataclass
class Setup:
    """What every part measures on: the built model (each arm deep-copies it), the tokenizer, the run's features,
    the first batches of the run and the directory the offloaded full matrices go to."""
    cfg: DictConfig
    device: torch.device
    tok: object
    template: torch.nn.Module
    features: dict
    batches: list[dict]
    offload_dir: Path

    def attached(self, model: torch.nn.Module):
        return attach(self.cfg.pema, model, self.tok, self.features, self.offload_dir)


def optimizer_steps(model: torch.nn.Module, train_cfg, device: torch.device):
    """(steps(batches, after_step=None), optimizer): optimizer steps as experiments.train.fit takes them (its AdamW,
    its clipping) over a fixed batch list. Not `fit` itself: the benchmark calls the same model and optimizer again
    for every timed repeat (fit builds both anew and runs a schedule, evaluation and checkpoint selection), and reads
    memory between the optimizer step and zero_grad (`after_step`), when weights, gradients and AdamW moments are
    all alive and the activations are freed."""
    model.to(device).train()
    opt = adamw(model, train_cfg.lr, train_cfg.weight_decay, device)

    def steps(batches, after_step=None):
        for batch in batches:
            loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
            loss.backward()
            del loss
            if train_cfg.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.max_grad_norm)
            opt.step()
            if after_step is not None:
                after_step()
            opt.zero_grad(set_to_none=True)
    return steps, opt


def prepare_time(s: Setup, repeats: int) -> list[float]:
    """Seconds of each of `repeats` preparations, each on a fresh copy of the model."""
    out = []
    for _ in range(repeats):
        model = copy.deepcopy(s.template)
        t0 = time.perf_counter()
        a = s.attached(model)
        out.append(time.perf_counter() - t0)
        a.partial.close()
        del model, a
    return out


def step_times(s: Setup, steps: int, repeats: int) -> tuple[dict[str, list[float]], int, int]:
    """(seconds per call of `steps` optimizer steps, per arm: full A, PEMA B, A, B ... after a warm-up round; |V|;
    |V'|). Runs before the memory probe, which changes how glibc allocates."""
    full_model = copy.deepcopy(s.template)
    pema_model = copy.deepcopy(s.template)
    a = s.attached(pema_model)
    run_full, _ = optimizer_steps(full_model, s.cfg.train, s.device)
    run_pema, _ = optimizer_steps(pema_model, s.cfg.train, s.device)
    times = interleaved({"full": lambda: run_full(s.batches[:steps]), "pema": lambda: run_pema(s.batches[:steps])},
                        repeats=repeats, warmup=1, device=s.device)
    a.partial.close()
    return times, a.partial.rows, a.partial.vmap.used


@dataclass
class Memory:
    """Bytes per arm ("full", "pema"), one entry per round, measured from the process's level before the arm's copy
    was made."""
    kind: str  # what the probe reads
    state: dict[str, list[float]] = field(default_factory=lambda: {"full": [], "pema": []})  # after the last step
    peaks: dict[str, list[float]] = field(default_factory=lambda: {"full": [], "pema": []})  # over the steps
    weights: dict[str, list[float]] = field(default_factory=lambda: {"full": [], "pema": []})  # the model alone
    analytic: dict[str, dict[str, int]] = field(default_factory=dict)  # training_bytes of each arm

    def paired_median(self, of: dict[str, list[float]]) -> float:
        """The median over rounds of each round's full minus PEMA (the process's heap drifts between rounds)."""
        return statistics.median(f - p for f, p in zip(of["full"], of["pema"]))


def memory(s: Setup, steps: int, rounds: int) -> Memory:
    """Each arm in turn, `rounds` times: a fresh copy, `steps` optimizer steps; the training state (weights + grads +
    AdamW moments) is read right after the last optimizer step, before zero_grad, when the activations are gone; the
    peak over the steps (activations included) is kept too."""
    probe = Probe(s.device)
    out = Memory(probe.kind)
    for arm in ("full", "pema") * rounds:
        probe.settle()
        base = probe.now()
        model = copy.deepcopy(s.template)
        am = s.attached(model) if arm == "pema" else None
        model.to(s.device)
        probe.settle()
        out.weights[arm].append(probe.now() - base)
        out.analytic[arm] = training_bytes(model)
        run_steps, opt = optimizer_steps(model, s.cfg.train, s.device)
        probe.reset_peak()
        after_step = []
        run_steps(s.batches[:steps], after_step=lambda: (probe.settle(), after_step.append(probe.now() - base)))
        out.peaks[arm].append(probe.peak() - base)
        out.state[arm].append(after_step[-1])
        if am is not None:
            am.partial.close()
        del model, am, run_steps, opt
    probe.close()
    return out


def first_batches(cfg: DictConfig, ctx: RunContext, train, pad_id: int, n: int) -> list[dict]:
    """The first `n` batches of the run, over epochs if the split is small."""
    gen, _ = recipe.token_batches(cfg, ctx, train, pad_id)
    out, epoch = [], 0
    while len(out) < n:
        out += list(gen(epoch))
        epoch += 1
    return out[:n]


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    tok, template, splits = recipe.prepare(cfg)
    # V' of train and eval: the benchmark never reads dev (it selects no checkpoint)
    features = {"train": splits.train, "eval": splits.evals}
    batches = first_batches(cfg, ctx, splits.train, tok.pad_token_id, max(m.steps, m.memory_steps))
    ctx.n_samples.update(train_examples=len(splits.raw["train"]), eval_examples=len(splits.raw["eval"]),
                         max_length=data.max_length(cfg.task, cfg.data), batch_size=cfg.hardware.batch_size)
    Path(ctx.output_dir).mkdir(parents=True, exist_ok=True)
    s = Setup(cfg, ctx.device, tok, template, features, batches,
              Path(tempfile.mkdtemp(prefix="pema-bench-", dir=ctx.output_dir)))

    prep = prepare_time(s, m.prepare_repeats)
    times, rows, used = step_times(s, m.steps, m.repeats)
    summary = summarize(times, baseline="full")
    step_full = summary["full"]["median_s"] / m.steps
    step_pema = summary["pema"]["median_s"] / m.steps
    mem = memory(s, m.memory_steps, m.memory_rounds)
    shutil.rmtree(s.offload_dir, ignore_errors=True)

    saving_measured = mem.paired_median(mem.state)
    saving_analytic = mem.analytic["full"]["total"] - mem.analytic["pema"]["total"]
    ctx.extra.update(device=ctx.device_name, probe=mem.kind, prepare_s=prep, peaks_bytes=mem.peaks,
                     state_bytes=mem.state, model_bytes=mem.weights, analytic_bytes=mem.analytic, step_times_s=times,
                     note="ratios measured side by side in one process; other work may share the machine")
    return {"time/pema_prepare_s": statistics.median(prep), "time/step_ms_full": 1e3 * step_full,
            "time/step_ms_pema": 1e3 * step_pema, "time/step_ratio": step_pema / step_full,
            "pema/vocab_rows": rows, "pema/vocab_used": used,
            "mem/analytic_full_mb": mem.analytic["full"]["total"] * MB,
            "mem/analytic_pema_mb": mem.analytic["pema"]["total"] * MB,
            "mem/analytic_saving_mb": saving_analytic * MB, "mem/measured_saving_mb": saving_measured * MB,
            "mem/measured_over_analytic": saving_measured / saving_analytic if saving_analytic else float("nan"),
            "mem/state_full_mb": statistics.median(mem.state["full"]) * MB,
            "mem/state_pema_mb": statistics.median(mem.state["pema"]) * MB,
            "mem/peak_full_mb": statistics.median(mem.peaks["full"]) * MB,
            "mem/peak_pema_mb": statistics.median(mem.peaks["pema"]) * MB,
            "mem/peak_saving_mb": mem.paired_median(mem.peaks) * MB,
            "mem/weights_full_mb": statistics.median(mem.weights["full"]) * MB,
            "mem/weights_pema_mb": statistics.median(mem.weights["pema"]) * MB}
