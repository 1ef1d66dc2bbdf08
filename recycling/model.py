"""The cached reduced model: layers k+1..N of a pretrained encoder (and the task head), fed with h^k read from the
cache instead of running the embeddings and layers 1..k [P].

h^k is HF's `hidden_states[k]`, the output of block k (not its input). Plain torch; no Hydra, no I/O."""
from __future__ import annotations

import copy

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask

from experiments.models import HeadOutput, TaskModel
from recycling.adapters import add_adapters

# BERT-style blocks take (hidden, 4-D mask); DeBERTa-v2's also take relative positions and embeddings, which its
# encoder computes from the states themselves, so the upper stack rebuilds them. T5 computes a position
# bias in block 0 and passes it upward, DistilBERT's blocks have another signature: not supported.
SUPPORTED = ("bert", "roberta", "xlm-roberta", "deberta-v2")


def blocks(encoder: nn.Module) -> nn.ModuleList:
    kind = getattr(encoder.config, "model_type", None)
    if kind not in SUPPORTED:
        raise NotImplementedError(f"recycling supports {', '.join(SUPPORTED)} encoders, not {kind!r} (T5 passes a "
                                  "position bias up from block 0; other families have other block signatures)")
    return encoder.encoder.layer


def resolve_k(k: int | None, n_layers: int) -> int:
    """k = N/2 by default (the paper's main setting); 1 <= k < N."""
    k = n_layers // 2 if k is None else int(k)
    if not 1 <= k < n_layers:
        raise ValueError(f"recycling.k={k} must be in 1..{n_layers - 1} (the model has {n_layers} layers)")
    return k


class UpperStack(nn.Module):
    """Blocks k+1..N of `encoder` (shared, not copied), taking (B, T, d) states of layer k and a (B, T) mask."""

    def __init__(self, encoder: nn.Module, k: int):
        super().__init__()
        layers = blocks(encoder)
        self.k = resolve_k(k, len(layers))
        self.config = encoder.config
        self.layers = nn.ModuleList(layers[self.k:])
        self.deberta = encoder.config.model_type == "deberta-v2"
        if self.deberta:
            # the relative-position embeddings (and their LayerNorm) serve every block, so they train with the upper
            # ones; the encoder's helpers are called unregistered, so the lower blocks stay out of this module
            enc = encoder.encoder
            self.rel = nn.ModuleDict({n: getattr(enc, n) for n in ("rel_embeddings", "LayerNorm") if hasattr(enc, n)})
            self._helpers = [enc]

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.deberta:
            enc = self._helpers[0]
            mask = enc.get_attention_mask(attention_mask)
            rel_pos, rel_emb = enc.get_rel_pos(hidden), enc.get_rel_embedding()
            for layer in self.layers:  # h^k (k >= 1) already includes the conv applied after block 1
                hidden, _ = layer(hidden, mask, relative_pos=rel_pos, rel_embeddings=rel_emb)
            return hidden
        # the same mask the full model builds from its embedding output (None when nothing is padded)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return hidden


class RecycledModel(nn.Module):
    """UpperStack + task head: `forward(hidden, attention_mask, **targets)` with hidden = cached h^k."""

    def __init__(self, upper: UpperStack, head: nn.Module):
        super().__init__()
        self.upper, self.head = upper, head

    def forward(self, hidden, attention_mask, **targets) -> HeadOutput:
        return self.head(self.upper(hidden, attention_mask), attention_mask, **targets)


def lower_model(encoder: nn.Module, k: int) -> nn.Module:
    """A frozen copy of the embeddings and blocks 1..k: its last hidden state is the full model's h^k. It builds
    the cache (computing only what is cached) and has its own fingerprint, so every variant, seed and task on the
    same text shares one cache."""
    layers = blocks(encoder)
    k = resolve_k(k, len(layers))
    full = encoder.encoder.layer
    encoder.encoder.layer = nn.ModuleList()  # deep-copy everything but the blocks, then take the first k
    try:
        lower = copy.deepcopy(encoder)
    finally:
        encoder.encoder.layer = full
    lower.encoder.layer = copy.deepcopy(nn.ModuleList(full[:k]))
    lower.config.num_hidden_layers = k
    lower.requires_grad_(False)
    return lower.eval()


def freeze(module: nn.Module) -> None:
    module.requires_grad_(False)


def apply_variant(model: TaskModel, variant: str, k: int, bottleneck: int, act: str) -> nn.Module:
    """The model a variant trains, with exactly its trainable parameters:
    full: everything; frozen: all but embeddings and blocks 1..k; reduced: blocks k+1..N + head, fed from the cache;
    half_adapters: adapters in blocks k+1..N + head, fed from the cache; full_adapters: adapters everywhere + head.
    LayerNorms stay frozen under adapters, as in the paper's code [R]."""
    enc, head = model.encoder, model.head
    layers = blocks(enc)
    k = resolve_k(k, len(layers))
    d = enc.config.hidden_size
    if variant == "full":
        return model
    if variant == "frozen":
        freeze(enc.embeddings)
        for layer in layers[:k]:
            freeze(layer)
        return model
    if variant == "full_adapters":
        freeze(enc)
        add_adapters(layers, d, bottleneck, act)
        return model
    if variant in ("reduced", "half_adapters"):
        upper = UpperStack(enc, k)
        if variant == "half_adapters":
            freeze(upper)
            add_adapters(upper.layers, d, bottleneck, act)
        return RecycledModel(upper, head)
    raise ValueError(f"unknown recycling variant {variant!r}; valid: full, frozen, reduced, half_adapters, "
                     "full_adapters")
