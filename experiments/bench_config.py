"""Schemas of the shared layer's own benchmark methods (torch-free: the registry imports this while composing)."""
from __future__ import annotations

from dataclasses import dataclass

from experiments.config import MethodConfig


@dataclass
class StoreBenchConfig(MethodConfig):
    """method=store_bench (experiments/bench_store.py): computing every layer's hidden states vs reading them back
    from the activation store in fp32 and fp16, interleaved in one process; `model=` and `task=` pick what is run."""
    name: str = "store_bench"
    variant: str = "default"
    n: int = 512  # sentences, a seeded random sample of the task's train split
    batch_size: int = 32
    max_length: int = 128
    repeats: int = 5  # interleaved timed rounds (medians reported)
    warmup: int = 1  # untimed rounds first


@dataclass
class FinetuneBenchConfig(MethodConfig):
    """method=finetune_bench (experiments/bench_finetune.py): the suite's training step vs transformers' Trainer on
    the same model, batches and optimizer, interleaved in one process; `model=`, `task=`, `hardware=` pick what."""
    name: str = "finetune_bench"
    variant: str = "trainer"
    steps: int = 10  # optimizer steps per arm and round (the first batches of epoch 0)
    repeats: int = 5  # interleaved timed rounds (per-step medians reported)
    warmup: int = 1  # untimed rounds first
