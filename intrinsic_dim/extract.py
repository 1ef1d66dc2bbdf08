"""Representations and accuracy [P]: the last prompt token's hidden state at every layer, read
through the shared activation store, and logit accuracy over the first token of each label.

Padding. The official code batches with left padding (pad = EOS) and takes position T-1. The store batches with
right padding and keeps the last *real* token. For a causal model with absolute-free (RoPE) positions both equal the
unpadded single-prompt forward: right padding exactly (pads come after the token and are masked), left padding up
to float rounding (every position shifts by the same offset, which RoPE's relative attention cancels). We rely on
the right-padded states and test both equalities (tests/intrinsic_dim/test_extract.py).

Only the backbone runs during extraction (no LM head over every position); the last-position logits are the
final hidden state (HF's hidden_states[-1], after the final norm) through `lm_head`.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


class LabelTokenCollision(ValueError):
    """Two labels share their first token, so logit accuracy cannot tell them apart."""


def backbone(lm: nn.Module) -> nn.Module:
    """The decoder stack of a causal LM (also inside a peft wrapper): what produces `hidden_states`."""
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    if not hasattr(base, "get_decoder"):
        raise TypeError(f"{type(base).__name__} is not a causal LM with a decoder (need *ForCausalLM)")
    return base.get_decoder()


def head(lm: nn.Module) -> nn.Module:
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    return base.get_output_embeddings()


def label_tokens(tokenizer, label: str, in_context: bool = False) -> list[int]:
    """The tokens of `label`: [C] tokenizer.encode(label) alone, or (`in_context`) as they follow the prompt's final
    "\n" (what the model is asked to predict: " positive" -> one token for BPE and SentencePiece alike)."""
    if not in_context:
        return tokenizer.encode(label, add_special_tokens=False)
    prefix = tokenizer.encode("\n", add_special_tokens=False)
    ids = tokenizer.encode("\n" + label, add_special_tokens=False)
    if ids[:len(prefix)] != prefix:
        raise ValueError(f"label {label!r} merges with the preceding newline under this tokenizer; "
                         "set method.label_space=false")
    return ids[len(prefix):]


def label_token_ids(tokenizer, labels: Sequence[str], in_context: bool = False) -> list[int]:
    """The first token of each label (see label_tokens); distinct or an error."""
    ids = []
    for lab in labels:
        enc = label_tokens(tokenizer, lab, in_context)
        if not enc:
            raise ValueError(f"label {lab!r} encodes to no tokens")
        ids.append(enc[0])
    seen: dict[int, str] = {}
    for lab, t in zip(labels, ids):
        if t in seen:
            raise LabelTokenCollision(
                f"labels {seen[t]!r} and {lab!r} share their first token {t} "
                f"({tokenizer.convert_ids_to_tokens(t)!r}) under this tokenizer, so logit accuracy cannot tell them "
                "apart; change the verbalizers in intrinsic_dim/prompts.py so their first tokens differ")
        seen[t] = lab
    return ids


def tokenize(tokenizer, prompts: Sequence[str], max_tokens: int, limit_by: str | None = None) -> list[dict]:
    """Store examples ({"input_ids"}), tokenizer defaults (BOS where the tokenizer adds one); never truncated.
    `limit_by` names what sets `max_tokens` (default method.max_prompt_tokens), for the error."""
    out = []
    for i, p in enumerate(prompts):
        ids = tokenizer(p)["input_ids"]
        if len(ids) > max_tokens:
            if limit_by and not limit_by.startswith("method."):
                raise ValueError(f"prompt {i} has {len(ids)} tokens > the model's context ({limit_by}); "
                                 "use fewer demos (smaller k) or a model with a longer context")
            raise ValueError(f"prompt {i} has {len(ids)} tokens > method.max_prompt_tokens={max_tokens}; "
                             "raise the cap (the model's context permitting) or use fewer demos (smaller k)")
        out.append({"input_ids": list(ids)})
    return out


def lora_key(base_key: str, lora_state: dict[str, torch.Tensor]) -> str:
    """A model key for base + adapter without hashing the base weights again."""
    h = hashlib.sha256(base_key.encode())
    for name in sorted(lora_state):
        t = lora_state[name].detach().cpu().contiguous()
        h.update(f"\n{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def last_token_states(store, lm: nn.Module, examples: Sequence[dict], *, tok_key: str, max_length: int,
                      batch_size: int, device: torch.device, model_key: str | None = None,
                      token_budget: int | None = None) -> np.ndarray:
    """(L+1, N, d) float32: the last token's hidden state of every prompt at every HF hidden-state index
    (0 = embedding output, L = after the final norm), computed once per (model, prompt) by the store, which holds
    only the last position while computing; `token_budget` bounds the padded tokens per forward."""
    view = store.hidden_states(backbone(lm), examples, "all", tokenizer_key=tok_key, max_length=max_length,
                               select="last", batch_size=batch_size, device=device, model_key=model_key,
                               token_budget=token_budget)
    n_layers, N = len(view.layers), len(examples)
    first = view._get(0, 0)
    out = np.empty((n_layers, N, first.shape[-1]), dtype=np.float32)
    for i in range(N):
        for j in range(n_layers):
            out[j, i] = view._get(i, j)[0]
    return out


def last_logits(lm: nn.Module, final_states: np.ndarray, label_ids: Sequence[int], device: torch.device,
                chunk: int = 1024) -> np.ndarray:
    """(N, n_labels) logits of the labels' first tokens at the last position, from the final hidden states."""
    lm_head = head(lm)
    out = []
    with torch.inference_mode():
        w = lm_head.weight[list(label_ids)]  # only the label rows of the vocabulary projection
        b = lm_head.bias[list(label_ids)] if getattr(lm_head, "bias", None) is not None else None
        for s in range(0, len(final_states), chunk):
            h = torch.from_numpy(final_states[s:s + chunk]).to(device=w.device, dtype=w.dtype)
            z = h @ w.T
            out.append((z + b if b is not None else z).float().cpu().numpy())
    return np.concatenate(out)


def logit_accuracy(logits: np.ndarray, gold: Sequence[int]) -> tuple[float, np.ndarray]:
    """[P §4] correct when the gold label's first token has the highest logit among the labels' first tokens."""
    pred = logits.argmax(1)
    correct = pred == np.asarray(gold)
    return float(correct.mean()), correct
