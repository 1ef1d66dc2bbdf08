"""A backbone whose block outputs are fused before the task head: backbone -> z_1..z_L -> [prenorm] -> DepthFusion
-> [ExtraLayers] -> head. Without a backbone it reads the stacked block outputs directly (feature extraction from the
activation store), through the same fusion and head, so the two paths are one model."""
from __future__ import annotations

import inspect

import torch
from torch import nn

from layer_fusion.fusion import DepthFusion, ExtraLayers, prenorm


def stack_blocks(hidden_states, n: int, norm: nn.Module | None = None) -> torch.Tensor:
    """HF `hidden_states` (embedding output, block 1, ..., block L) -> z_1..z_n stacked as (..., n, d).
    A pre-LN decoder's HF state L is final-normed and 1..L-1 are raw; truncated to n < L blocks, block n gets the
    final norm, as the model rebuilt with `num_hidden_layers = n` would give it (P-32 §5.1, truncation)."""
    z = torch.stack(tuple(hidden_states[1:n + 1]), -2)
    return renorm_last(z, norm) if norm is not None and n < len(hidden_states) - 1 else z


def renorm_last(z: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """Apply the final norm to the last of the stacked blocks (a truncated pre-LN decoder's output)."""
    return torch.cat([z[..., :-1, :], norm(z[..., -1:, :])], -2)


class FusionModel(nn.Module):
    def __init__(self, fusion: DepthFusion, head: nn.Module, backbone: nn.Module | None = None,
                 extra: ExtraLayers | None = None, final_norm: nn.Module | None = None,
                 prenorm_handling: str = "as_is"):
        super().__init__()
        prenorm(torch.zeros(1, 1), None, prenorm_handling)  # validates the name before any work
        self.backbone, self.fusion, self.extra, self.head = backbone, fusion, extra, head
        # a pre-LN decoder's final norm (frozen: part of the backbone); kept here too so the cached path can use it
        self.final_norm = final_norm
        self.prenorm_handling = prenorm_handling
        self._types = backbone is not None and "token_type_ids" in inspect.signature(backbone.forward).parameters

    def new_modules(self) -> list[nn.Module]:
        """What the method adds to the backbone: fusion, extra blocks, head (their parameters are the new ones)."""
        return [m for m in (self.fusion, self.extra, self.head) if m is not None]

    def blocks(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """(B, T, L, d): the backbone's block outputs z_1..z_L (L = the fusion's)."""
        kw = {"token_type_ids": token_type_ids} if self._types and token_type_ids is not None else {}
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **kw)
        return stack_blocks(out.hidden_states, self.fusion.num_layers, self.final_norm)

    def fuse(self, z: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, L, d) block outputs -> (B, T, d), what the head reads."""
        h = self.fusion(prenorm(z, self.final_norm, self.prenorm_handling))
        if self.prenorm_handling == "norm_pooled" and self.final_norm is not None and self.fusion.mode != "last":
            h = self.final_norm(h)
        return self.extra(h, attention_mask) if self.extra is not None else h

    def forward(self, attention_mask, input_ids=None, token_type_ids=None, states=None, **targets):
        """Token ids through the backbone, or `states` (B, T, L, d) read from the activation store."""
        if states is None:
            if self.backbone is None:
                raise ValueError("this FusionModel has no backbone: pass states= (the cached block outputs)")
            states = self.blocks(input_ids, attention_mask, token_type_ids)
        return self.head(self.fuse(states.to(self.head_dtype), attention_mask), attention_mask, **targets)

    @property
    def head_dtype(self) -> torch.dtype:
        return next(self.head.parameters()).dtype
