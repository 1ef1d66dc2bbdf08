"""What a frozen source model contributes per token [P §3.1]: its hidden states at every layer, per sub-token (the
sources share a tokenizer) or pooled to words (they do not), reduced to one vector per position by the extraction
variant.

States are `hidden_states` of the HF model, stacked (L+1, W, d): index 0 the embedding output, index l the output of
layer l. Model truncation after layer l gives exactly `hidden_states[l]` ([R] `encoder.layer = layer[:l]`), so every
variant is a read of the same stored stack.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.nn import functional

from reverse_probing.config import check_variant


def extract(states: torch.Tensor, variant: str, layer: int | None = None, concat_n: int | None = None) -> torch.Tensor:
    """(L+1, ..., d) → (..., d) (concat: (..., n·d), the last n layers in order, as [R] concatenates them)."""
    return read_variant(states.__getitem__, states.shape[0] - 1, variant, layer, concat_n)


def read_variant(read: Callable[[int], torch.Tensor], num_layers: int, variant: str, layer: int | None = None,
                 concat_n: int | None = None) -> torch.Tensor:
    """The variant from `read(k)` = hidden_states[k], reading only the layers it needs (a lazy store view)."""
    L = num_layers
    check_variant(variant, L, layer, concat_n)
    if variant == "full":
        return read(L)
    if variant == "trunc":
        return read(layer)
    if variant == "norm":
        last = read(L)
        return functional.normalize(last.float(), p=2, dim=-1).to(last.dtype)
    return torch.cat([read(k) for k in range(L - concat_n + 1, L + 1)], -1)


def width(variant: str, d: int, concat_n: int | None = None) -> int:
    return d * concat_n if variant == "concat" else d


def word_pool(pieces: torch.Tensor, word_ids: list[int | None], n_words: int, how: str = "mean") -> torch.Tensor:
    """(..., T, d) sub-token states → (..., n_words, d): the mean of each word's pieces, or its first piece.
    Sources with different tokenizers (a trimmed vocabulary splits words differently) meet at the word, so any
    sources can be aggregated token-wise."""
    if how not in ("mean", "first"):
        raise ValueError(f"word pooling {how!r}: use mean or first")
    idx = [(t, w) for t, w in enumerate(word_ids) if w is not None]
    if {w for _, w in idx} != set(range(n_words)):
        missing = sorted(set(range(n_words)) - {w for _, w in idx})
        raise ValueError(f"words {missing[:5]} have no sub-token (cut by the max length?); every word needs one")
    if how == "first":
        first = {}
        for t, w in idx:
            first.setdefault(w, t)
        return pieces[..., [first[w] for w in range(n_words)], :]
    tok = torch.tensor([t for t, _ in idx])
    word = torch.tensor([w for _, w in idx])
    out = torch.zeros(*pieces.shape[:-2], n_words, pieces.shape[-1], dtype=torch.float32)
    out.index_add_(-2, word, pieces[..., tok, :].float())
    counts = torch.bincount(word, minlength=n_words).clamp_min(1).to(out.dtype)
    return (out / counts.unsqueeze(-1)).to(pieces.dtype)


def positions(pieces: torch.Tensor, word_ids: list[int | None], n_words: int, unit: str, how: str = "mean"
              ) -> torch.Tensor:
    """(..., T, d) a segment's sub-token states → the head's positions (reverse_probing/documents.py): its words
    (unit=word: word_pool) or its sub-tokens as they are, [CLS], [SEP] and padding left out (unit=subtoken: every
    source shares the tokenizer, so every source has the same pieces; coref-hoi reads the encoder output per
    sub-token)."""
    if unit == "word":
        return word_pool(pieces, word_ids, n_words, how)
    if unit != "subtoken":
        raise ValueError(f"unit {unit!r}: use word or subtoken")
    if {w for w in word_ids if w is not None} != set(range(n_words)):
        raise ValueError("a word has no sub-token (cut by the max length?); every word needs one")
    return pieces[..., [t for t, w in enumerate(word_ids) if w is not None], :]
