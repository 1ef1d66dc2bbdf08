"""Depth-wise fusion of a backbone's block outputs: what a task head reads in place of the last block's output.

One module for both papers. It reads the block outputs z_1..z_L stacked on the second-to-last axis, `(..., L, d)`
(HF `hidden_states[1:]`: the embedding output is excluded, as both papers' parameter counts imply), and returns
`(..., d)`. It works on any leading shape, so token heads (B, T, L, d) and pooled heads (B, L, d) use the same code;
every mode is position-wise, so fusing only the positions a head reads gives the same result as fusing them all (what
lets feature extraction train on cached states).

modes:
    last        z_L (the baseline)
    mean        (1/L) Σ z_n (DWAtt's "Average", P-32's Avg.Pool)
    scalar_mix  Σ softmax(λ)_n z_n, one λ per block, λ = 0 at init (P-32, eq. 1; no gamma)
    concat      Σ W_n z_n, each W_n affine (DWAtt eq. 2) = one Linear over the concatenation
    dwatt       z_L + softmax_n(q·k_n) v_n (DWAtt eqs. 3-11): static keys W^K k^pos with k^pos ~ U(0,1) (d_pos=24)
                a frozen buffer, values LN_n(f_n(z_n)), query 1 + elu(z_L + f^Q(z_L)), f(x) = W·LN(GELU(U x)) with
                bottleneck γd; no 1/√d unless `scale`
`ExtraLayers` is the deeper baseline (Base+n): n fresh blocks of the backbone's own kind on top of z_L.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("last", "mean", "scalar_mix", "concat", "dwatt")
PRENORM = ("as_is", "norm_each", "norm_pooled")


class Bottleneck(nn.Module):
    """f(x) = W·LN(GELU(U x)), U: d -> γd, W: γd -> d (DWAtt eqs. 6 and 11)."""

    def __init__(self, d: int, gamma: float):
        super().__init__()
        h = max(1, round(gamma * d))
        self.up, self.norm, self.down = nn.Linear(d, h), nn.LayerNorm(h), nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.norm(F.gelu(self.up(x))))


class Concat(nn.Module):
    """h = Σ_n W_n z_n with each W_n affine (DWAtt eq. 2): one Linear over the concatenated blocks. Each W_n keeps
    its own bias, as the paper's parameter count implies (L·(d² + d)), though the biases only add up."""

    def __init__(self, num_layers: int, d: int):
        super().__init__()
        maps = [nn.Linear(d, d) for _ in range(num_layers)]  # nn.Linear's init, per W_n (fan-in d)
        self.weight = nn.Parameter(torch.stack([m.weight.detach() for m in maps]))  # (L, d_out, d_in)
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in maps]))  # (L, d)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.einsum("...li,loi->...o", z, self.weight) + self.bias.sum(0)


class DWAtt(nn.Module):
    def __init__(self, num_layers: int, d: int, gamma_q: float = 0.5, gamma_v: float = 0.5, d_pos: int = 24,
                 scale: bool = False, generator: torch.Generator | None = None):
        super().__init__()
        # static positional keys: drawn once, never trained [DWAtt §9.2]; saved with the weights
        self.register_buffer("k_pos", torch.rand(num_layers, d_pos, generator=generator))
        self.key = nn.Linear(d_pos, d)
        self.query = Bottleneck(d, gamma_q)
        self.values = nn.ModuleList(Bottleneck(d, gamma_v) for _ in range(num_layers))
        self.value_norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(num_layers))  # LN_n: nothing shared
        self.scale = 1 / math.sqrt(d) if scale else 1.0  # the paper writes none

    def weights(self, z_last: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., L): the attention over blocks at each position."""
        q = 1 + F.elu(z_last + self.query(z_last))
        return (q @ self.key(self.k_pos).T * self.scale).softmax(-1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z_last = z[..., -1, :]
        v = torch.stack([ln(f(z[..., n, :])) for n, (f, ln) in enumerate(zip(self.values, self.value_norms))], -2)
        return z_last + (self.weights(z_last).unsqueeze(-2) @ v).squeeze(-2)


class DepthFusion(nn.Module):
    def __init__(self, mode: str, num_layers: int, d: int, *, scalar_mix_init: float = 0.0, gamma_q: float = 0.5,
                 gamma_v: float = 0.5, d_pos: int = 24, scale: bool = False, generator: torch.Generator | None = None):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"fusion mode {mode!r} is not one of {', '.join(MODES)}")
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers}: fusion needs at least one block")
        self.mode, self.num_layers, self.d = mode, num_layers, d
        if mode == "scalar_mix":
            self.lam = nn.Parameter(torch.full((num_layers,), float(scalar_mix_init)))
        elif mode == "concat":
            self.concat = Concat(num_layers, d)
        elif mode == "dwatt":
            self.dwatt = DWAtt(num_layers, d, gamma_q, gamma_v, d_pos, scale, generator)

    def extra_repr(self) -> str:
        return f"mode={self.mode}, num_layers={self.num_layers}, d={self.d}"

    @torch.no_grad()
    def layer_weights(self, z: torch.Tensor | None = None) -> torch.Tensor | None:
        """The weights over blocks: softmax(λ) (scalar_mix), 1/L (mean), one-hot (last), DWAtt's per-position
        weights (needs z); None for concat (matrices, not weights)."""
        L = self.num_layers
        if self.mode == "scalar_mix":
            return self.lam.softmax(0)
        if self.mode == "mean":
            return torch.full((L,), 1 / L)
        if self.mode == "last":
            return F.one_hot(torch.tensor(L - 1), L).float()
        if self.mode == "dwatt" and z is not None:
            return self.dwatt.weights(z[..., -1, :])
        return None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.size(-2) != self.num_layers or z.size(-1) != self.d:
            raise ValueError(f"DepthFusion({self.mode}) expects (..., {self.num_layers}, {self.d}) block outputs, "
                             f"got {tuple(z.shape)}")
        if self.mode == "last":
            return z[..., -1, :]
        if self.mode == "mean":
            return z.mean(-2)
        if self.mode == "scalar_mix":
            # the weights stay fp32 and the sum runs in fp32 (a bf16 tensor times an fp32 one promotes): cast to bf16,
            # softmax(λ) near 1/L moves in steps of ~0.4%, so a λ that has moved less than that would not show at all
            w = self.lam.float().softmax(0).unsqueeze(-1)
            return (w * z).sum(-2).to(z.dtype)
        if self.mode == "concat":
            return self.concat(z)
        return self.dwatt(z)


def final_norm_of(backbone: nn.Module) -> nn.Module | None:
    """A pre-LN decoder's final norm (Llama/Gemma `model.norm`, GPT-NeoX `final_layer_norm`); None for post-LN
    encoders, whose every block output is already normed."""
    for path in ("norm", "final_layer_norm", "model.norm", "gpt_neox.final_layer_norm", "ln_f", "transformer.ln_f"):
        m = backbone
        for part in path.split("."):
            m = getattr(m, part, None)
        if isinstance(m, nn.Module):
            return m
    return None


def prenorm(z: torch.Tensor, norm: nn.Module | None, how: str) -> torch.Tensor:
    """HF's hidden_states of a pre-LN decoder are raw residual states for blocks 1..L-1 and the final-normed state
    for block L (the P-32 paper, which fuses a decoder's, is silent on it). norm_each applies the final norm to
    blocks 1..L-1 (block L is normed already); as_is and norm_pooled leave them (norm_pooled norms the fused state:
    `FusionModel`)."""
    if how not in PRENORM:
        raise ValueError(f"prenorm_handling={how!r} is not one of {', '.join(PRENORM)}")
    if how != "norm_each" or norm is None:
        return z
    return torch.cat([norm(z[..., :-1, :]), z[..., -1:, :]], -2)


class ExtraLayers(nn.Module):
    """Base+n: n freshly initialised blocks of the backbone's own class and config on top of z_L (DWAtt §4.1).
    BERT-family encoders (BERT, RoBERTa, XLM-R, MiniLM, e5); the papers use no deeper baseline for decoders."""

    def __init__(self, backbone: nn.Module, n: int):
        super().__init__()
        blocks = _encoder_blocks(backbone)
        self.layers = nn.ModuleList(type(blocks[0])(backbone.config) for _ in range(n))
        for layer in self.layers:
            layer.apply(backbone._init_weights)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """h: (B, T, d); mask: (B, T) with 1 on real tokens."""
        bias = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        for layer in self.layers:
            out = layer(h, attention_mask=bias)
            h = out[0] if isinstance(out, tuple) else out
        return h


def _encoder_blocks(backbone: nn.Module) -> nn.ModuleList:
    enc = getattr(backbone, "encoder", None)
    if enc is None or not hasattr(enc, "layer"):
        raise ValueError(f"the deeper baseline (Base+n) adds BERT-family blocks; {type(backbone).__name__} has no "
                         "encoder.layer (use fusion=last/mean/scalar_mix/concat/dwatt for decoders)")
    return enc.layer


def default_extra_layers(num_layers: int) -> int:
    """n = 2 for 24-layer backbones (the paper's R26), 1 for 12- and 6-layer ones (DWAtt §4.1)."""
    return 2 if num_layers >= 24 else 1
