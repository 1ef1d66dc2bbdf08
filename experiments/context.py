"""What a method's `run(cfg, ctx)` gets besides its config: where to write, which device, counters for the run
record, an optional wandb stream, and the shared activation store."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)


@dataclass
class RunContext:
    output_dir: Path
    device: torch.device
    device_name: str
    store_dir: Path | None = None
    store_dtype: str = "fp16"
    n_samples: dict[str, int] = field(default_factory=dict)  # filled by the method, copied into result.json
    extra: dict[str, Any] = field(default_factory=dict)  # per-run details worth keeping (e.g. eval history)
    wandb_run: Any = None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)

    def store(self):
        """The shared activation store (imported lazily: methods that never cache pay nothing)."""
        from experiments.store import ActivationStore
        dtype = {"fp16": torch.float16, "fp32": torch.float32}[self.store_dtype]
        return ActivationStore(self.store_dir, dtype=dtype)
