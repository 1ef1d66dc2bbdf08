"""method=finetune_bench: the suite's training step (experiments.train.fit) against transformers' Trainer on the same
model, data, batches and optimizer, interleaved in one process.

    python -m experiments.run experiment=finetune/bench_trainer              (minilm-l6 on rt-polarity, the CPU)
    python -m experiments.run experiment=finetune/bench_trainer hardware=gpu model=e5-small

Each arm starts from a copy of one freshly built model (`experiments.recipe.prepare`: the finetune config's model
with its task head) and trains method.steps optimizer steps on the first method.steps batches of the run's epoch 0
(`experiments.batches`, padded in advance and handed to both), with one AdamW and linear schedule built the suite's
way (experiments.optim), the run's grad_accum, max_grad_norm and hardware.precision. A step is timed from its
first micro-batch to the end of its optimizer update, device synced at both ends: `StepTimer` in the suite's
loop, a `TrainerCallback` from on_step_begin to on_step_end in Trainer's. Arms alternate (`timing.interleaved`)
after method.warmup untimed rounds; the headline is median step time ours / Trainer's (`time/step_ratio`, at most 1.1
is the goal). Setup (Trainer's accelerate preparation, the suite's final evaluation and weight restore) is timed
apart, per call. Every number goes into the run record (extra.benchmark).
"""
from __future__ import annotations

import copy
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from experiments.batches import train_batches
from experiments.context import RunContext
from experiments.recipe import prepare, record_samples
from experiments.optim import adamw, linear_schedule, warmup_steps
from experiments.timing import StepTimer, interleaved, summarize
from experiments.train import fit


class _StepClock(transformers.TrainerCallback):
    def __init__(self, timer: StepTimer):
        self.timer = timer

    def on_step_begin(self, args, state, control, **kw):
        self.timer.start()

    def on_step_end(self, args, state, control, **kw):
        self.timer.stop()


class _Trainer(transformers.Trainer):
    """Trainer fed the suite's padded batches as they are, and reading the suite's model output (`HeadOutput`)."""

    def __init__(self, *a, batches: list[dict], **kw):
        super().__init__(*a, **kw)
        self.batches = batches

    def get_train_dataloader(self) -> DataLoader:
        return DataLoader(self.batches, batch_size=None, collate_fn=_as_is)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(**inputs)
        return (out.loss, out) if return_outputs else out.loss


def _as_is(batch):
    return batch


def measure(cfg: DictConfig, ctx: RunContext) -> dict:
    m, hw, tc, device = cfg.method, cfg.hardware, cfg.train, ctx.device
    if m.steps < 1 or m.repeats < 1 or m.warmup < 0:
        raise ValueError(f"method.steps={m.steps}, method.repeats={m.repeats}, method.warmup={m.warmup}: steps and "
                         "repeats must be >= 1, warmup >= 0")
    load_before = os.getloadavg()
    tok, template, splits = prepare(cfg)
    record_samples(cfg, ctx, splits)
    need = m.steps * tc.grad_accum
    gen, n_batches = train_batches(splits.train, hw.batch_size, tok.pad_token_id, cfg.seed, tc.group_by_length)
    if n_batches < need:
        raise ValueError(f"method.steps={m.steps} x train.grad_accum={tc.grad_accum} needs {need} batches but the "
                         f"train split makes {n_batches} of hardware.batch_size={hw.batch_size}: lower method.steps "
                         "or raise data.limit_train")
    batches = [b for _, b in zip(range(need), gen(0))]
    # one schedule over the timed steps, as a run of that length would have
    train_cfg = OmegaConf.merge(OmegaConf.to_container(tc), {"max_steps": m.steps, "eval_every": m.steps + 1,
                                                              "patience": 0, "progress": False})
    timers = {"ours": StepTimer(device), "trainer": StepTimer(device)}
    Path(ctx.output_dir).mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-finetune-", dir=ctx.output_dir)  # Trainer's output_dir; nothing is saved

    def ours() -> None:
        model = copy.deepcopy(template)
        r = fit(model, lambda epoch: iter(batches), len(batches), train_cfg, evaluate=lambda _: {"bench/none": 0.0},
                objective="bench/none", higher_is_better=True, device=device, precision=hw.precision)
        timers["ours"].times += r.step_s

    def trainer() -> None:
        model = copy.deepcopy(template).to(device)
        opt = adamw(model, tc.lr, tc.weight_decay, device)
        sched = linear_schedule(opt, warmup_steps(tc.warmup_ratio, m.steps), m.steps)
        args = transformers.TrainingArguments(
            output_dir=tmp, max_steps=m.steps, per_device_train_batch_size=hw.batch_size,
            gradient_accumulation_steps=tc.grad_accum, max_grad_norm=tc.max_grad_norm, report_to="none",
            logging_strategy="no", save_strategy="no", eval_strategy="no", disable_tqdm=True, seed=cfg.seed,
            use_cpu=device.type == "cpu", bf16=hw.precision == "bf16", fp16=hw.precision == "fp16",
            remove_unused_columns=False, dataloader_num_workers=0)
        t = _Trainer(model=model, args=args, optimizers=(opt, sched), batches=batches,
                     callbacks=[_StepClock(timers["trainer"])])
        t.remove_callback(transformers.trainer_callback.PrinterCallback)  # its end-of-training metrics line
        t.train()

    try:
        times = interleaved({"ours": ours, "trainer": trainer}, repeats=m.repeats, warmup=m.warmup, device=device)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    warm = m.warmup * m.steps  # the warm-up rounds' steps are dropped
    steps = {k: t.times[warm:] for k, t in timers.items()}
    med = {k: statistics.median(v) for k, v in steps.items()}
    lens = [int(b["attention_mask"].sum(1).max()) if "attention_mask" in b else 0 for b in batches]
    return {
        "config": {"model": cfg.model.name, "task": cfg.task.name, "seed": cfg.seed, "precision": hw.precision,
                   "batch_size": hw.batch_size, **{k: m[k] for k in ("steps", "repeats", "warmup")},
                   "train": OmegaConf.to_container(tc)},
        "device": ctx.device_name,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loadavg_1m": {"before": load_before[0], "after": os.getloadavg()[0], "cpus": os.cpu_count()},
        "data": {"batches": len(batches), "padded_lengths": lens},
        "timing": {"step_median_s": med, "step_times_s": steps, "step_ratio": med["ours"] / med["trainer"],
                   "call": summarize(times, baseline="trainer"), "call_times_s": times},
    }


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    r = measure(cfg, ctx)
    ctx.extra.update(benchmark=r)
    t = r["timing"]
    return {"time/ours_step_ms": 1e3 * t["step_median_s"]["ours"],
            "time/trainer_step_ms": 1e3 * t["step_median_s"]["trainer"], "time/step_ratio": t["step_ratio"],
            "time/ours_call_s": t["call"]["ours"]["median_s"], "time/trainer_call_s": t["call"]["trainer"]["median_s"]}
