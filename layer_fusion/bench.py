"""method=layer_fusion_bench: what the activation store buys feature extraction. One few-shot run (the same sample,
seed, budget and dev evaluations) trained twice in one process: fed the frozen backbone's cached block outputs, and
recomputing the backbone on every step and evaluation. Arms alternate, `repeats` rounds after a warm-up
(experiments.timing.interleaved); medians of whole-run wall time (each call builds, trains and scores one model), and
the per-step medians. The one-off cost of filling the store is measured too, so the number of runs after which caching
pays is known."""
from __future__ import annotations

import shutil
import statistics
import time

import torch
from omegaconf import DictConfig

from experiments import data
from experiments.context import RunContext
from experiments.evaluate import evaluate
from experiments.models import load_encoder, tokenizer_fingerprint
from experiments.recipe import token_batches
from experiments.timing import interleaved
from experiments.train import fit
from layer_fusion.assemble import build
from layer_fusion.config import check
from layer_fusion.features import cached_blocks, split_inputs
from layer_fusion.protocols import entity_types, few_shot_sample, train_config


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    m, task = cfg.method, cfg.task
    # its own backbone, not the sweep's shared frozen one (models.frozen_encoder): training the recompute arm puts it
    # in train mode
    tok, backbone = load_encoder(cfg.model)
    backbone.eval()
    tok_key = tokenizer_fingerprint(tok)  # keys this tokenizer's ids in the activation store
    raw = data.load_splits(task, cfg.data)
    sample = few_shot_sample(len(raw["train"]), m.shots, m.classes or entity_types(task.label_names), cfg.seed)
    raw["train"] = raw["train"].select(sample)
    ctx.extra["sample"] = sample
    n_len = data.max_length(task, cfg.data)
    feats = {s: data.encode(raw[s], tok, task, n_len, train=(s == "train")) for s in ("train", "dev")}

    # the one-off fill: every block of every example, into an empty store beside the run
    fill_store = ctx.store(root=ctx.output_dir / "bench-store")
    t0 = time.perf_counter()
    for split in ("train", "dev"):
        cached_blocks(cfg, ctx, fill_store, backbone, feats[split], tok_key, "all")
    fill_s = time.perf_counter() - t0
    shutil.rmtree(fill_store.root)

    store = ctx.store()
    cached = {s: split_inputs(cfg, ctx, store, backbone, feats[s], tok_key, "all", False) for s in ("train", "dev")}

    def arm(use_cache: bool):
        torch.manual_seed(cfg.seed)
        model = build(cfg, backbone, len(task.label_names), pooled=False)
        model.backbone.requires_grad_(False)
        if use_cache:
            model.backbone = None
            batches, n_batches = cached["train"][0].batches(cfg.hardware.batch_size, cfg.seed)
            dev_feats, dev_inputs = cached["dev"][1], cached["dev"][0].inputs
        else:
            batches, n_batches = token_batches(cfg, ctx, feats["train"], tok.pad_token_id)
            dev_feats, dev_inputs = feats["dev"], None
        score = lambda mdl: evaluate(mdl, dev_feats, raw["dev"], task, cfg.hardware.eval_batch_size,  # noqa: E731
                                     ctx.device, tok.pad_token_id, dev_inputs).as_split("dev")
        res = fit(model, batches, n_batches, train_config(cfg, n_batches), evaluate=score,
                  objective=task.objective.replace("eval/", "dev/", 1), higher_is_better=True, device=ctx.device)
        if model.backbone is not None:
            model.backbone.to("cpu")  # the next round builds on the shared backbone where it was loaded
        return res

    arm(True)  # warm-up (allocators, kernels); not timed, and one arm is enough for it
    runs = {"cached": [], "recompute": []}
    wall = interleaved({name: lambda name=name: runs[name].append(arm(name == "cached")) for name in runs},
                       repeats=m.repeats, warmup=0, device=ctx.device)
    step = {k: statistics.median(r.step_ms for r in v) for k, v in runs.items()}
    ratios = [r / c for r, c in zip(wall["recompute"], wall["cached"])]  # paired by round
    key = task.objective.replace("eval/", "dev/", 1)
    gap = max(abs(a.best[key] - b.best[key]) for a, b in zip(runs["cached"], runs["recompute"]))
    saved = statistics.median(wall["recompute"]) - statistics.median(wall["cached"])
    ctx.extra.update(device=ctx.device_name, threads=torch.get_num_threads(), wall_s=wall,
                     steps=runs["cached"][0].steps)
    return {"speedup/cached_vs_recompute": statistics.median(ratios),
            "speedup/cached_vs_recompute_lo": min(ratios), "speedup/cached_vs_recompute_hi": max(ratios),
            "time/cached_run_s": statistics.median(wall["cached"]),
            "time/recompute_run_s": statistics.median(wall["recompute"]),
            "time/cached_step_ms": step["cached"], "time/recompute_step_ms": step["recompute"],
            "time/store_fill_s": fill_s, "bench/runs_to_break_even": fill_s / saved if saved > 0 else float("inf"),
            "bench/dev_gap": gap}
