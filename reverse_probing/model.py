"""The probe: k frozen sources' word features → aggregator → coreference head (plain torch, no I/O)."""
from __future__ import annotations

import torch
from torch import nn

from reverse_probing.aggregate import Aggregator
from reverse_probing.coref import CorefHead, CorefOutput


class ReverseProbe(nn.Module):
    """Only this trains: the aggregator (attention: query, keys, values) and the head. The sources' features arrive
    already extracted (reverse_probing/extract.py), one (B, W, d_i) tensor per source at the same words."""

    def __init__(self, aggregator: Aggregator, head: CorefHead):
        super().__init__()
        self.aggregator, self.head = aggregator, head
        self.last_alpha: torch.Tensor | None = None  # (B, W, k) of the last forward (Fig. 9's weights)

    def forward(self, sources: list[torch.Tensor], **batch) -> CorefOutput:
        h, alpha = self.aggregator([x.float() for x in sources])
        self.last_alpha = None if alpha is None else alpha.detach()
        return self.head(h, **batch)


class SpanProbe(nn.Module):
    """The stand-in QA target (Quoref): the aggregator, then the suite's extractive-QA head (start/end logits per
    sub-token). The sources arrive stacked, states (B, T, k, d_in), one column per source (same tokenizer)."""

    def __init__(self, aggregator: Aggregator, head: nn.Module):
        super().__init__()
        self.aggregator, self.head = aggregator, head
        self.last_alpha: torch.Tensor | None = None

    def forward(self, states: torch.Tensor, attention_mask: torch.Tensor, **targets):
        h, alpha = self.aggregator(list(states.float().unbind(2)))
        self.last_alpha = None if alpha is None else alpha.detach()
        return self.head(h, attention_mask, **targets)


def parameter_counts(probe: ReverseProbe | SpanProbe) -> dict[str, int]:
    """The record's params/aggregator and params/head: the only parts of a probe that train."""
    return {f"params/{name}": sum(p.numel() for p in part.parameters())
            for name, part in (("aggregator", probe.aggregator), ("head", probe.head))}
