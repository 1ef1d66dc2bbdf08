"""What a method's `run(cfg, ctx)` gets besides its config: where to write, which device, counters for the run
record, an optional wandb stream, and the shared activation store."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from experiments.config import ConfigError
from experiments.provenance import Reads

log = logging.getLogger(__name__)
STORE_DTYPES = {"fp16": torch.float16, "fp32": torch.float32}


@dataclass
class RunContext:
    output_dir: Path
    device: torch.device
    device_name: str
    store_dir: Path | None = None
    store_dtype: str = "fp16"
    n_samples: dict[str, int] = field(default_factory=dict)  # filled by the method, copied into result.json
    extra: dict[str, Any] = field(default_factory=dict)  # per-run details worth keeping (e.g. eval history)
    # split -> per-example scores behind the reported metrics (experiments.evaluate.Scores.per_example); copied into
    # the record's "per_example" so experiments.evidence.claims can bootstrap over examples
    per_example: dict[str, Any] = field(default_factory=dict)
    wandb_run: Any = None
    reads: Reads = field(default_factory=Reads)  # the assets and tokenizers the run read (experiments.provenance)

    _step_base: int = field(default=0, init=False, repr=False)  # log_metrics' offset for a new training phase
    _last_step: int = field(default=-1, init=False, repr=False)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Stream metrics to the run's logger (nothing without one). `step` counts the caller's optimizer steps; a
        method that trains more than once in a run (PEMA's two arms) starts again from 0, which wandb would drop as
        going back in time, so each new phase continues after the last step logged."""
        if self.wandb_run is None:
            return
        if step is not None:
            if self._step_base + step < self._last_step:
                self._step_base = self._last_step + 1 - step
            step = self._last_step = self._step_base + step
        self.wandb_run.log(metrics, step=step)

    @property
    def sink(self) -> Callable[[dict[str, float], int | None], None] | None:
        """`log_metrics` when a logger listens, else None: training loops then skip their curves' bookkeeping (no
        device sync for a loss nobody reads)."""
        return self.log_metrics if self.wandb_run is not None else None

    def store(self, dtype: str | None = None, root: Path | None = None):
        """The shared activation store (imported lazily: methods that never cache pay nothing). `dtype` (fp16 | fp32)
        overrides store.dtype for a method that fixes its own; `root` opens a store elsewhere (a benchmark's
        temporary one)."""
        from experiments.store import ActivationStore
        dtype = dtype or self.store_dtype
        if dtype not in STORE_DTYPES:
            raise ValueError(f"activation-store dtype {dtype!r} is not one of {', '.join(STORE_DTYPES)}")
        return ActivationStore(root or self.store_dir, dtype=STORE_DTYPES[dtype])


def pick_device(name: str) -> torch.device:
    """hardware.device as a torch device, refused when this machine lacks it. It lives here, not in experiments.run:
    run.py is __main__, whose functions a submitit launcher pickles by value, and torch.backends.mps does not pickle."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"hardware.device={name} but CUDA is not available here: use hardware=cpu (or "
                          "hardware.device=auto, which takes CUDA only when present)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("hardware.device=mps but Apple's MPS backend is not available here: use hardware=cpu")
    return torch.device(name)
