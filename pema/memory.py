"""Bytes of training state, analytical and measured (ours: the paper counts parameters only, §5).

Analytical: weights + gradients of the trainable weights + AdamW's two moments. PEMA saves
(|V| - |V'|) * d * (1 + 1 + 2) * bytes-per-element for a trainable embedding.
Measured (`Probe`): on CUDA the allocator's peak (`max_memory_allocated`); on CPU the process's peak resident set
(VmHWM, reset through /proc/self/clear_refs), with glibc told to give every tensor of 64 KiB or more its own mapping so
memory freed by one arm is returned to the system before the next arm starts.
"""
from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import torch
from torch import nn


def training_bytes(model: nn.Module) -> dict[str, int]:
    """weights (all), grads and AdamW exp_avg + exp_avg_sq (trainable ones), in bytes."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return {"weights": weights, "grads": trainable, "adam": 2 * trainable, "total": weights + 3 * trainable}


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


class Probe:
    """Peak memory of a stretch of code on one device: settle(); base = now(); ...; reset_peak(); ...; peak()."""

    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.libc = _libc() if self.device.type == "cpu" else None
        if self.libc is not None:  # fixed thresholds: freed tensors leave the process at once, not the heap
            self.libc.mallopt(self.M_MMAP_THRESHOLD, 1 << 16)
            self.libc.mallopt(self.M_TRIM_THRESHOLD, 1 << 16)
        self.kind = "cuda max_memory_allocated" if self.device.type == "cuda" else "cpu peak RSS (VmHWM)"

    def close(self) -> None:
        """Give glibc back large thresholds (the upper end of its own dynamic ones), so the rest of the process does
        not pay an mmap per tensor."""
        if self.libc is not None:
            self.libc.mallopt(self.M_MMAP_THRESHOLD, 32 << 20)
            self.libc.mallopt(self.M_TRIM_THRESHOLD, 64 << 20)

    def settle(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
        elif self.libc is not None:
            self.libc.malloc_trim(0)

    def now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return _status("VmRSS")

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        except OSError as e:
            raise RuntimeError(f"cannot reset the peak RSS through /proc/self/clear_refs ({e}); measure on Linux "
                               "or on a CUDA device (hardware=gpu)") from e

    def peak(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device)
        return _status("VmHWM")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}; the CPU memory probe needs Linux")
