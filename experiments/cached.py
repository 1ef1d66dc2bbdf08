"""Frozen-model states held in memory as model inputs: per example one tensor (T_i, ...) of cached hidden states,
served in padded batches as `states` + `attention_mask` (+ the training targets), in the shape the shared trainer
(`experiments.train.fit`) and evaluator (`experiments.evaluate`, its `inputs(i, j)`) take."""
from __future__ import annotations

import torch

from experiments import data


class Cached:
    """`states[i]`: (T_i, ...) for example i. `targets`: name -> per-example values: a list per example (token
    labels, padded with -100) or a scalar (a class, a start position)."""

    def __init__(self, states: list[torch.Tensor], targets: dict[str, list] | None = None):
        self.states, self.targets = states, targets or {}

    def batch(self, idx) -> dict[str, torch.Tensor]:
        T = max(self.states[i].shape[0] for i in idx)
        x = torch.zeros(len(idx), T, *self.states[idx[0]].shape[1:])
        mask = torch.zeros(len(idx), T, dtype=torch.long)
        for b, i in enumerate(idx):
            t = self.states[i].shape[0]
            x[b, :t], mask[b, :t] = self.states[i], 1
        out = {"states": x, "attention_mask": mask}
        for name, values in self.targets.items():
            if isinstance(values[idx[0]], list):  # per-token targets
                y = torch.full((len(idx), T), -100, dtype=torch.long)
                for b, i in enumerate(idx):
                    y[b, :len(values[i])] = torch.tensor(values[i])
            else:
                y = torch.tensor([values[i] for i in idx])
            out[name] = y
        return out

    def inputs(self, i: int, j: int) -> dict[str, torch.Tensor]:
        batch = self.batch(list(range(i, j)))
        return {k: batch[k] for k in ("states", "attention_mask")}

    def batches(self, batch_size: int, seed: int):
        order = data.epoch_order([s.shape[0] for s in self.states], batch_size, seed)
        return (lambda epoch: (self.batch(chunk) for chunk in order(epoch))), -(-len(self.states) // batch_size)
