"""The Efficient Adaptive Transformer [P] on a pretrained encoder's own weights, as the official code loads it [R]:
the encoder's layers are run here, one by one, so that

  * pruning after chosen layers removes tokens from the sequence (`prune_mode="remove"`: later layers run on fewer
    tokens) or zero-masks them in place (`"mask"`: the official code, nothing gets shorter);
  * attention is local (±window original positions, plus a global [CLS]) through a banded kernel whose cost is linear
    in length (`kernel="banded"`), or through a dense (T, T) mask (`"masked"`: the official code, still O(T^2));
  * an exit head after `exit_layer` ends each example whose max probability (exit logits / temperature) reaches tau
    (`exit_mode="example"`), or the whole batch only when every example is confident (`"batch"`: the official code);
    `patience=True` also asks the layer-`patience_layer` head to agree. A layer that both prunes and holds a head
    (layer 4) prunes first, as the official code does: the head reads the pruned tokens, and an example that exits
    there has been through both pruning steps.

Every switch lives in `Settings`, swapped at run time (`model.using(...)`), so one trained model is evaluated with any
subset of the three components (the ablation). With pruning off, no window and no exit, the model computes exactly
what the encoder computes (tests/eat/test_model.py: <= 1e-5 against the Hugging Face forward).

Heads: one `nn.Linear(d, C)` per exit point on the raw [CLS] state, no pooler or tanh, as the official code [R]
(`pooling="mean"`: on the mean of the tokens still in the sequence, for encoders trained as mean-pooled sentence
encoders, whose intermediate [CLS] carries little).
Loss (training): CE(final) + exit_weight * CE(exit head) [P Eq. 1] (+ the same weight on the patience head, which is
built only for the patience rule).
Plain torch: no Hydra, no I/O.
"""
from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from eat import attention, prune
from eat.config import SCORERS

KERNELS = ("banded", "masked")
PRUNE_MODES = ("remove", "mask")
EXIT_MODES = ("example", "batch")


@dataclass(frozen=True)
class Settings:
    """What a forward pass does; the weights do not depend on it."""
    prune_after: tuple[int, ...] = (2, 4)  # layers (1-based) after which tokens are pruned [P]
    prune_ratio: float = 0.3  # p: share of the scored tokens removed at each step [P]
    prune_rule: str = "paper"  # paper | repo (eat/prune.py)
    prune_mode: str = "remove"  # remove (physical) | mask (zero-masking, the official code)
    scorer: str = "l2"  # l2 (||h_i||) | attention (attention mass the token receives; computed densely)
    window: int | None = 16  # ±window original positions (+ global [CLS]); None = full attention
    kernel: str = "banded"  # banded (linear in length) | masked (dense mask, the official code)
    tau: float | None = None  # exit threshold on max probability; None = no early exit
    exit_mode: str = "example"  # example | batch (exit only when the whole batch is confident)
    patience: bool = False  # also require the patience head's argmax to agree [P §7]

    def __post_init__(self):
        for key, value, valid in (("prune_rule", self.prune_rule, prune.RULES), ("scorer", self.scorer, SCORERS),
                                  ("prune_mode", self.prune_mode, PRUNE_MODES), ("kernel", self.kernel, KERNELS),
                                  ("exit_mode", self.exit_mode, EXIT_MODES)):
            if value not in valid:
                raise ValueError(f"{key}={value!r} is not one of {', '.join(valid)}")
        if not 0.0 <= self.prune_ratio < 1.0:
            raise ValueError(f"prune_ratio={self.prune_ratio} must be in [0, 1)")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window={self.window} must be >= 1 or None (full attention)")
        if self.tau is not None and not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau={self.tau} must be in (0, 1] or None (no early exit)")

    @property
    def prunes(self) -> bool:
        return self.prune_ratio > 0 and bool(self.prune_after)

    def dense(self) -> "Settings":
        """The same model with all three components off: what the encoder alone computes."""
        return replace(self, prune_ratio=0.0, window=None, tau=None)


class _Parts(NamedTuple):
    """One transformer block's modules, named the same for every supported encoder family."""
    q: nn.Module
    k: nn.Module
    v: nn.Module
    o: nn.Module
    ln_attn: nn.Module
    ffn_in: nn.Module
    act: object
    ffn_out: nn.Module
    ln_out: nn.Module


def _blocks(encoder: nn.Module) -> tuple[nn.Module, list[_Parts], int, float, float]:
    """(embeddings, per-layer parts, heads, attention dropout, hidden dropout) of a BERT or DistilBERT encoder."""
    cfg = encoder.config
    if hasattr(encoder, "encoder") and hasattr(encoder.encoder, "layer"):  # BERT family
        parts = [_Parts(l.attention.self.query, l.attention.self.key, l.attention.self.value,
                        l.attention.output.dense, l.attention.output.LayerNorm, l.intermediate.dense,
                        l.intermediate.intermediate_act_fn, l.output.dense, l.output.LayerNorm)
                 for l in encoder.encoder.layer]
        return (encoder.embeddings, parts, cfg.num_attention_heads, cfg.attention_probs_dropout_prob,
                cfg.hidden_dropout_prob)
    if hasattr(encoder, "transformer"):  # DistilBERT
        parts = [_Parts(l.attention.q_lin, l.attention.k_lin, l.attention.v_lin, l.attention.out_lin,
                        l.sa_layer_norm, l.ffn.lin1, l.ffn.activation, l.ffn.lin2, l.output_layer_norm)
                 for l in encoder.transformer.layer]
        return encoder.embeddings, parts, cfg.n_heads, cfg.attention_dropout, cfg.dropout
    raise ValueError(f"EAT runs BERT-style encoders (BERT, MiniLM, e5, DistilBERT), not {type(encoder).__name__}")


@dataclass
class EatOutput:
    logits: torch.Tensor  # (B, C): the head each example left through
    loss: torch.Tensor | None = None
    depth: torch.Tensor | None = None  # (B,) layers executed per example
    retention: torch.Tensor | None = None  # (B,) tokens left / tokens in, at the exit point
    layer_logits: dict[int, torch.Tensor] | None = None  # training: every head's logits, by layer
    # trace=True: (B, L) per example and layer i (column i - 1); 0 where the example left before layer i
    tokens_in: torch.Tensor | None = None  # token slots layer i computes (mask mode: every original valid slot)
    tokens_kept: torch.Tensor | None = None  # valid tokens after layer i (after its pruning step, if any)


class EatModel(nn.Module):
    def __init__(self, encoder: nn.Module, n_labels: int, exit_layer: int | None = 4,
                 patience_layer: int | None = None, exit_weight: float = 0.3, settings: Settings = Settings(),
                 pooling: str = "cls"):
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling={pooling!r} is not one of cls, mean")
        self.pooling = pooling  # cls: the raw [CLS] state [R]; mean: over the tokens still in the sequence
        self.encoder = encoder
        emb, self._parts, self.heads, self.attn_dropout, self.hidden_dropout = _blocks(encoder)
        self._embeddings = (emb,)  # a tuple: the encoder already registers it (state_dict keys stay unique)
        self._types = "token_type_ids" in inspect.signature(emb.forward).parameters  # not DistilBERT
        self.num_layers = n = len(self._parts)
        if exit_layer is not None and not 1 <= exit_layer < n:
            raise ValueError(f"exit_layer={exit_layer} must be in 1..{n - 1} for a {n}-layer encoder (or None)")
        if patience_layer is not None and (exit_layer is None or not 1 <= patience_layer < exit_layer):
            raise ValueError(f"patience_layer={patience_layer} must be below exit_layer={exit_layer}")
        self.exit_layer, self.patience_layer, self.exit_weight = exit_layer, patience_layer, exit_weight
        d = encoder.config.hidden_size
        self.classifier = nn.Linear(d, n_labels)
        self.exit_classifier = nn.Linear(d, n_labels) if exit_layer is not None else None
        self.patience_classifier = nn.Linear(d, n_labels) if patience_layer is not None else None
        self.register_buffer("temperature", torch.ones(()))  # of the exit head, fitted on dev (eat/calibration.py)
        self.settings = settings
        self.check(settings)

    def check(self, s: Settings) -> None:
        bad = [l for l in s.prune_after if not 1 <= l < self.num_layers]
        if s.prunes and bad:
            raise ValueError(f"prune_after={list(s.prune_after)}: layers {bad} are not in 1..{self.num_layers - 1}")
        if s.tau is not None and self.exit_layer is None:
            raise ValueError(f"tau={s.tau} needs an exit head: build the model with exit_layer set")
        if s.patience and self.patience_classifier is None:
            raise ValueError("patience=True needs a patience head: build the model with patience_layer set")

    @contextlib.contextmanager
    def using(self, settings: Settings):
        """Run with other settings inside the block (an ablation arm, an annealed training ratio)."""
        self.check(settings)
        old, self.settings = self.settings, settings
        try:
            yield self
        finally:
            self.settings = old

    def dims(self) -> dict:
        """The encoder's shape, as FLOP counts need it."""
        p = self._parts[0]
        return {"layers": self.num_layers, "hidden": p.q.in_features, "intermediate": p.ffn_in.out_features,
                "heads": self.heads}

    # -- one block ------------------------------------------------------------------------------------------------
    def _layer(self, p: _Parts, h, pos, valid, received: bool):
        s, (B, T, d) = self.settings, h.shape
        dh = d // self.heads
        q, k, v = (m(h).view(B, T, self.heads, dh).transpose(1, 2) for m in (p.q, p.k, p.v))
        drop = self.attn_dropout if self.training else 0.0
        mass = None
        if received:  # the attention-received score needs the probabilities: computed densely
            mask = (attention.window_mask(pos, valid, s.window) if s.window is not None
                    else valid[:, None, :].expand(B, T, T))
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
            probs = scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
            ctx = F.dropout(probs, drop, self.training) @ v
            mass = (probs.mean(1) * valid[:, :, None]).sum(1)  # (B, T): received from valid queries
        elif s.window is None:
            ctx = attention.dense_attention(q, k, v, valid, drop)
        elif s.kernel == "masked":
            ctx = attention.masked_attention(q, k, v, attention.window_mask(pos, valid, s.window), drop)
        else:
            ctx = attention.banded_attention(q, k, v, pos, valid, s.window, drop)
        ctx = ctx.transpose(1, 2).reshape(B, T, d)
        a = p.ln_attn(h + F.dropout(p.o(ctx), self.hidden_dropout, self.training))
        out = p.ln_out(a + F.dropout(p.ffn_out(p.act(p.ffn_in(a))), self.hidden_dropout, self.training))
        return out, mass

    def _prune(self, h, pos, valid, mass):
        s = self.settings
        scores = mass if mass is not None else prune.l2_scores(h)
        idx, new_valid = prune.kept_indices(scores, valid, s.prune_ratio, s.prune_rule)
        if s.prune_mode == "remove":
            return prune.gather_rows(h, idx), prune.gather_rows(pos, idx), new_valid
        kept = torch.zeros_like(valid).scatter_(1, idx, True)  # idx pads with slot 0, which is always kept
        return h * kept[..., None].to(h.dtype), pos, kept

    def _embed(self, input_ids, token_type_ids):
        emb = self._embeddings[0]
        if token_type_ids is not None and self._types:
            return emb(input_ids=input_ids, token_type_ids=token_type_ids)
        return emb(input_ids=input_ids)

    def pool(self, h, valid):
        """What a head reads: the [CLS] state or the mean of the valid tokens."""
        if self.pooling == "cls":
            return h[:, 0]
        m = valid[..., None].to(h.dtype)
        return (h * m).sum(1) / m.sum(1)

    # -- forward --------------------------------------------------------------------------------------------------
    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None, trace: bool = False) -> EatOutput:
        """trace=True also counts, per example and layer, the token slots computed and the tokens kept."""
        s = self.settings
        h = self._embed(input_ids, token_type_ids)
        B, T = input_ids.shape
        valid = attention_mask.bool()
        pos = torch.arange(T, device=h.device).expand(B, T)
        n_in = valid.sum(1)
        exits = self.training is False and s.tau is not None
        rows = torch.arange(B, device=h.device)  # batch index of each row still running
        logits = h.new_zeros(B, self.classifier.out_features)
        depth = torch.full((B,), self.num_layers, device=h.device)
        left = n_in.clone()
        layer_logits, agree = {}, None
        tokens = kept = None
        if trace:
            tokens, kept = (torch.zeros(B, self.num_layers, dtype=torch.long, device=h.device) for _ in range(2))
        for i, p in enumerate(self._parts, 1):
            prune_here = s.prunes and i in s.prune_after  # never the last layer (check())
            if trace:  # zero-masked tokens keep their slots: the layer still computes them
                tokens[rows, i - 1] = n_in[rows] if s.prune_mode == "mask" else valid.sum(1)
            h, mass = self._layer(p, h, pos, valid, prune_here and s.scorer == "attention")
            if prune_here:  # before the heads of this layer read it, as the official code orders them [R]
                h, pos, valid = self._prune(h, pos, valid, mass)
            if trace:
                kept[rows, i - 1] = valid.sum(1)
            if i == self.patience_layer:
                z = self.patience_classifier(self.pool(h, valid))
                layer_logits[i] = z
                agree = z.argmax(-1)
            if i == self.exit_layer:
                z = self.exit_classifier(self.pool(h, valid))
                layer_logits[i] = z
                if exits:
                    done = (z.float() / self.temperature).softmax(-1).amax(-1) >= s.tau
                    if s.patience:
                        done &= agree == z.argmax(-1)
                    if s.exit_mode == "batch":
                        done = done.all().expand_as(done)
                    if done.any():
                        at = rows[done]
                        logits[at], depth[at], left[at] = z[done].to(logits.dtype), i, valid[done].sum(1)
                        live = ~done
                        if not live.any():
                            return EatOutput(logits, depth=depth, retention=left / n_in, tokens_in=tokens,
                                             tokens_kept=kept)
                        rows, h, pos, valid = rows[live], h[live], pos[live], valid[live]
                        if s.prune_mode == "remove":  # drop the padding the exited rows needed
                            t = int(valid.sum(1).max())
                            h, pos, valid = h[:, :t], pos[:, :t], valid[:, :t]
        z = self.classifier(self.pool(h, valid))
        logits = logits.to(z.dtype)
        logits[rows], left[rows] = z, valid.sum(1)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(z.float(), labels[rows])
            if self.training:
                for zl in layer_logits.values():
                    loss = loss + self.exit_weight * F.cross_entropy(zl.float(), labels)
        return EatOutput(logits, loss, depth, left / n_in, {**layer_logits, self.num_layers: z}, tokens, kept)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float, mu: float) -> torch.Tensor:
    """mu * T^2 * KL(softmax(teacher / T) || softmax(student / T)) [P Eq. 2], averaged over the batch."""
    t = temperature
    return mu * t * t * F.kl_div(F.log_softmax(student.float() / t, -1), F.log_softmax(teacher.float() / t, -1),
                                 reduction="batchmean", log_target=True)


class Distilled(nn.Module):
    """A student trained against its labels and a frozen teacher's logits on its final head [P Eq. 2-3]."""

    def __init__(self, student: nn.Module, teacher: nn.Module, temperature: float = 2.0, mu: float = 0.5):
        super().__init__()
        self.student, self.temperature, self.mu = student, temperature, mu
        self._teacher = [teacher.eval().requires_grad_(False)]  # a list: not a submodule (not saved, not trained)

    def forward(self, labels=None, **inputs) -> EatOutput:
        out = self.student(labels=labels, **inputs)
        if self.training and labels is not None:
            with torch.no_grad():
                teacher = self._teacher[0](**inputs).logits
            out.loss = out.loss + distillation_loss(out.layer_logits[self.student.num_layers], teacher,
                                                    self.temperature, self.mu)
        return out
