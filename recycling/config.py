"""Configs of Embedding Recycling and their refusals (torch-free: the registry imports this to validate
`method=recycling*` before any work). Tags: [P] the paper, [R] its official code, [S] our choice."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import DictConfig

from experiments.config import ConfigError, MethodConfig

VARIANTS = ("full", "frozen", "reduced", "half_adapters", "full_adapters")  # method=recycling's training arms
CACHED = ("reduced", "half_adapters")  # variants that read layer-k states from the cache
ADAPTERS = ("half_adapters", "full_adapters")  # variants that train at method.adapter_lr
BENCHMARKS = ("training", "inference", "storage", "cost")  # method=recycling_bench's tables


@dataclass
class RecyclingConfig(MethodConfig):
    """method=recycling: train/evaluate one of the paper's variants (`variant`):
    full (Full), frozen (F: lower k layers + embeddings frozen, no cache), reduced (Rdc: cached h^k, layers k+1..N
    and the head train), half_adapters (Rdc + Half Adpt: cached h^k, layers k+1..N frozen with adapters in them),
    full_adapters (whole model frozen, adapters in every layer)."""
    name: str = "recycling"
    variant: str = "reduced"
    k: Optional[int] = None  # layers recycled = hidden_states[k], the output of block k; None = N/2 [P §1]
    bottleneck: int = 256  # adapter width; grid {24, 64, 256}, 256 generally best [P A.2]
    adapter_act: str = "gelu_new"  # the paper names none; OpenDelta 0.4's default non-linearity [R]
    adapter_lr: Optional[float] = 1e-3  # lr of the adapter variants (None: train.lr); the paper picks per task
    #   from {1e-3, 2e-3, 1e-4, 2e-4, ...} [P A.1]; adapters need the larger ones at our short CPU budgets [S].
    #   The tiers set it to null and sweep train.lr over an explicit grid, chosen on dev
    #   (experiments/evidence/selection.py)
    cache_in_ram: bool = False  # copy the cache into RAM before training (A.5) instead of reading the mmap [S]


@dataclass
class RecyclingBenchConfig(MethodConfig):
    """method=recycling_bench: the paper's efficiency tables, measured side by side in one process.
    variant: training (Table 5: NR, F, SR, R), inference (Table 4: baseline vs fp32/fp16 cache, RAM vs disk,
    prefetch on/off), storage (bytes per token/sequence, fp32 vs fp16, max |Δ score| of fp16), cost (Table 7
    inputs: inference at 512 tokens)."""
    name: str = "recycling_bench"
    variant: str = "training"
    k: Optional[int] = None  # None = N/2 [P]
    batch_size: int = 16  # training: 16 [P fn. 4]; inference: 128 [P §4] (64 in the repo's script [R])
    seq_len: int = 128  # every sequence padded/truncated to this many tokens [S]
    n_batches: int = 8  # distinct batches per timed pass (the cache holds n_batches * batch_size sequences)
    steps: int = 4  # training: optimizer steps per timed pass
    repeats: int = 5  # timed rounds, interleaved; medians reported [ours]
    warmup: int = 1  # untimed rounds first [R: the first 2 batches are not timed]
    sr_epochs: int = 6  # SR = (T_save + (sr_epochs - 1) * T_R) / sr_epochs [P §4: 1 saving + 5 recycling epochs]
    prefetch_ahead: int = 16  # batches read ahead by the prefetch thread [R: fetch_ahead 16 in the benchmark]


def check(cfg: DictConfig) -> None:
    """Refusals before any work, for method=recycling (one variant) and method=recycling_bench (one benchmark)."""
    m = cfg.method
    valid = BENCHMARKS if m.name == "recycling_bench" else VARIANTS
    if m.variant not in valid:
        raise ConfigError(f"unknown {m.name} variant {m.variant!r}; valid: {', '.join(valid)}")
