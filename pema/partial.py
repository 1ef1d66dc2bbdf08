"""The partial embedding matrix: E' (|V'| x d, the rows of the used tokens) trains in place of E (|V| x d), and is
merged back into the full matrix afterwards (paper §4). Plain torch; no Hydra. The only I/O is the one the paper
prescribes and the caller asks for: the full matrix is written to `offload_dir` while E' trains.

    vmap = VocabMap.from_selected(selected_ids, rows=E.shape[0])
    pema = PartialEmbedding(hf_model, vmap, offload_dir=run_dir, pad_id=tok.pad_token_id)
    ... build the optimizer now, train (feed the ORIGINAL token ids), evaluate, checkpoint ...
    pema.merge()   # hf_model holds the full E again, rows of V' fine-tuned, the rest bit-identical to pre-training

- Ids: the model keeps taking original token ids; a forward pre-hook on the model maps them through the
  order-preserving id map f (the paper's D' = f(D), applied as a batch enters the model). An id outside V' is an error
  (its split was not counted). The pad id must map to itself [R] (RoBERTa-style models derive positions from it).
- Checkpoints: `state_dict()` returns the merged full matrix and `load_state_dict()` accepts a full matrix (slices
  it), so every checkpoint is a full-vocabulary one [R].
- PEFT (peft): apply PEMA before `get_peft_model`. LoRA on the embedding then gets A in R^{r x |V'|}; merge the
  adapter first (`merge_and_unload()`), then `merge()` scatters the rows. LoRA on attention only: E' is a smaller
  frozen matrix and the merge restores E.
- Tied input/output embeddings (`get_output_embeddings().weight is E`): `tied="untie"` keeps the full matrix as a
  separate output matrix (full softmax; exactly the untied model without PEMA), `tied="restrict"` ties the output to
  E' too, so the softmax (and the vocab-sized output bias) covers V' only: an approximation the caller must label.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

TIED_MODES = ("untie", "restrict")


class PemaError(ValueError):
    """PEMA cannot be applied (or merged) as asked; the message names the problem and the fix."""


@dataclass
class VocabMap:
    """The order-preserving bijection f: V' -> {0..|V'|-1}."""
    selected: torch.Tensor  # (|V'|,) int64, ascending original ids
    index: torch.Tensor  # (|V|,) int64, f(id) or -1 for ids outside V'

    @classmethod
    def from_selected(cls, selected, rows: int) -> VocabMap:
        sel = torch.as_tensor(selected, dtype=torch.long).flatten()
        if sel.numel() == 0:
            raise PemaError("V' is empty: no token ids were counted (are the splits empty?)")
        if sel.numel() > 1 and not bool((sel[1:] > sel[:-1]).all()):
            raise PemaError("selected ids must be strictly ascending (an order-preserving map)")
        if int(sel[0]) < 0 or int(sel[-1]) >= rows:
            raise PemaError(f"selected ids span [{int(sel[0])}, {int(sel[-1])}] but the vocabulary has {rows} rows")
        index = torch.full((rows,), -1, dtype=torch.long)
        index[sel] = torch.arange(sel.numel())
        return cls(sel, index)

    @property
    def rows(self) -> int:
        return self.index.numel()

    @property
    def used(self) -> int:
        return self.selected.numel()


def find_owner(model: nn.Module) -> nn.Module:
    """The module that owns the input embedding (a Hugging Face model): `model` itself or its first submodule with
    `get_input_embeddings` (e.g. the encoder of the suite's TaskModel)."""
    for m in model.modules():
        if callable(getattr(m, "get_input_embeddings", None)):
            return m
    raise PemaError(f"{type(model).__name__} has no module with get_input_embeddings(); PEMA needs a Hugging Face "
                    "model (or a module that contains one)")


def input_embedding(owner: nn.Module) -> nn.Embedding:
    emb = owner.get_input_embeddings()
    if not isinstance(emb, nn.Embedding):
        raise PemaError(f"PEMA replaces the weight of an nn.Embedding, but "
                        f"{type(owner).__name__}.get_input_embeddings() is a {type(emb).__name__}. Apply PEMA to the "
                        "plain model, before wrapping its embedding (e.g. before peft.get_peft_model), or use a model "
                        "with an nn.Embedding input layer.")
    return emb


class PartialEmbedding:
    """E' in place of E inside `owner` (see the module docstring). `merge()` undoes it, keeping the trained rows."""

    def __init__(self, owner: nn.Module, vmap: VocabMap, *, tied: str = "untie", offload_dir: str | Path | None = None,
                 pad_id: int | None = None, strict: bool = True):
        if tied not in TIED_MODES:
            raise PemaError(f"tied={tied!r}; valid: {', '.join(TIED_MODES)}")
        owner = find_owner(owner)
        emb = input_embedding(owner)
        full = emb.weight
        if full.shape[0] != vmap.rows:
            raise PemaError(f"the id map covers {vmap.rows} ids but the input embedding has {full.shape[0]} rows; "
                            "count ids with minlength = the number of embedding rows")
        if pad_id is not None and int(vmap.index[pad_id]) != pad_id:
            why = "not in V'" if vmap.index[pad_id] < 0 else "ids below it are unused"
            raise PemaError(f"the pad id {pad_id} would move to {int(vmap.index[pad_id])} ({why}): "
                            "PEMA keeps the pad id fixed (RoBERTa-style models derive positions from it) [R]. Keep the "
                            "special tokens (pema.keep_special=true), which precede the pad id in BERT/RoBERTa/XLM-R "
                            "vocabularies.")
        self.owner, self.emb, self.vmap, self.strict = owner, emb, vmap, strict
        self.mode = tied
        self.rows, self.d = full.shape
        self.requires_grad = full.requires_grad
        self._pad_idx = emb.padding_idx
        self._config_vocab = getattr(getattr(owner, "config", None), "vocab_size", None)
        out = owner.get_output_embeddings() if callable(getattr(owner, "get_output_embeddings", None)) else None
        self.tied = out is not None and getattr(out, "weight", None) is full
        self.out = out if self.tied else None
        self._tie_flag = getattr(getattr(owner, "config", None), "tie_word_embeddings", None)

        # the full pre-trained matrix waits outside the model: on disk (the paper) or as a CPU copy
        full_cpu = full.detach().to("cpu", copy=True)
        self.path: Path | None = None
        self._full: torch.Tensor | None = None
        if offload_dir is not None:
            Path(offload_dir).mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="pema-full-embedding-", suffix=".pt", dir=str(offload_dir))
            os.close(fd)
            self.path = Path(name)
            torch.save(full_cpu, self.path)
            del full_cpu
        else:
            self._full = full_cpu
        self._full_bias = None

        sel = vmap.selected.to(full.device)
        reduced = nn.Parameter(full.detach()[sel].clone(), requires_grad=full.requires_grad)
        emb.weight = reduced
        emb.num_embeddings = vmap.used
        if emb.padding_idx is not None:
            emb.padding_idx = int(vmap.index[emb.padding_idx]) if vmap.index[emb.padding_idx] >= 0 else None
        emb.register_buffer("pema_index", vmap.index.to(full.device), persistent=False)
        emb.register_buffer("pema_selected", sel, persistent=False)

        if self.tied:
            if tied == "untie":  # the output layer keeps the old full Parameter (now its own); never re-tie it
                owner.config.tie_word_embeddings = False
            else:  # restrict: output tied to E', bias and vocab size cut to V'
                out.weight = reduced
                out.out_features = vmap.used
                if getattr(out, "bias", None) is not None:
                    self._full_bias = out.bias.detach().to("cpu", copy=True)
                    out.bias = nn.Parameter(out.bias.detach()[sel].clone(), requires_grad=out.bias.requires_grad)
                if self._config_vocab is not None:
                    owner.config.vocab_size = vmap.used  # HF causal-LM losses reshape logits by config.vocab_size
        del full
        # torch tags hook functions with attributes, which bound methods cannot carry: wrap them
        def full_state(*a):
            return self._full_state(*a)

        def slice_state(*a):
            return self._slice_state(*a)
        self._handles = [
            owner.register_forward_pre_hook(lambda *a: self._map_inputs(*a), with_kwargs=True),
            emb.register_state_dict_post_hook(full_state),
            emb.register_load_state_dict_pre_hook(slice_state),
        ]
        if self.tied and tied == "restrict":
            self._handles += [out.register_state_dict_post_hook(full_state),
                              out.register_load_state_dict_pre_hook(slice_state)]
        self.merged = False

    # ---- ids --------------------------------------------------------------------------------------------------
    def map_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Original token ids -> ids into E'."""
        index = self.emb.pema_index
        mapped = index[ids.to(index.device)]
        if self.strict and bool((mapped < 0).any()):
            bad = ids[mapped.to(ids.device) < 0].unique()[:8].tolist()
            raise PemaError(f"token ids {bad} are not in V' (|V'|={self.vmap.used}): the data they come from was not "
                            "counted. Count every split the run feeds the model (pema.splits).")
        return mapped.to(ids.device)

    def _map_inputs(self, module, args, kwargs):
        if kwargs.get("input_ids") is not None:
            kwargs["input_ids"] = self.map_ids(kwargs["input_ids"])
        elif args and torch.is_tensor(args[0]) and not args[0].is_floating_point():
            args = (self.map_ids(args[0]), *args[1:])
        if self.tied and self.mode == "restrict" and kwargs.get("labels") is not None:
            labels = kwargs["labels"]
            keep = labels != -100
            mapped = labels.clone()
            mapped[keep] = self.map_ids(labels[keep])
            kwargs["labels"] = mapped
        return args, kwargs

    # ---- the full matrix --------------------------------------------------------------------------------------
    def full_weight(self) -> torch.Tensor:
        """The pre-trained full matrix (CPU; memory-mapped from disk when offloaded)."""
        if self.path is not None:
            return torch.load(self.path, mmap=True, weights_only=True)
        return self._full

    def merged_weight(self) -> torch.Tensor:
        """Full matrix with the current rows of E' scattered in (CPU, a new tensor): what a checkpoint holds."""
        merged = self.full_weight().clone()
        merged[self.vmap.selected] = self.emb.weight.detach().to("cpu", merged.dtype)
        return merged

    def _merged_bias(self) -> torch.Tensor:
        merged = self._full_bias.clone()
        merged[self.vmap.selected] = self.out.bias.detach().to("cpu", merged.dtype)
        return merged

    def _full_state(self, module, state_dict, prefix, local_metadata):
        if self.merged:
            return
        key = prefix + "weight"
        if key in state_dict:
            state_dict[key] = self.merged_weight()
        if module is self.out and self._full_bias is not None and prefix + "bias" in state_dict:
            state_dict[prefix + "bias"] = self._merged_bias()

    def _slice_state(self, module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        if self.merged:
            return
        for key in (prefix + "weight", prefix + "bias"):
            t = state_dict.get(key)
            if t is not None and t.shape[0] == self.rows and self.rows != self.vmap.used:
                state_dict[key] = t[self.vmap.selected.to(t.device)]

    # ---- merge back -------------------------------------------------------------------------------------------
    def merge(self) -> nn.Module:
        """Put the full matrix back (trained rows of V', pre-trained rows elsewhere), remove hooks, delete the file."""
        if self.merged:
            return self.owner
        if self.owner.get_input_embeddings() is not self.emb:
            raise PemaError("the input embedding is wrapped (by peft?): merge the adapter into E' first "
                            "(peft_model.merge_and_unload()), then merge PEMA")
        weight = self.emb.weight
        full = nn.Parameter(self.merged_weight().to(weight.device), requires_grad=self.requires_grad)
        bias = self._merged_bias() if self._full_bias is not None else None
        for h in self._handles:
            h.remove()
        self.emb.weight = full
        self.emb.num_embeddings = self.rows
        self.emb.padding_idx = self._pad_idx
        del self.emb.pema_index, self.emb.pema_selected
        if self.tied and self.mode == "restrict":
            self.out.weight = full  # tied again, to the full matrix
            self.out.out_features = self.rows
            if bias is not None:
                self.out.bias = nn.Parameter(bias.to(weight.device), requires_grad=self.out.bias.requires_grad)
            if self._config_vocab is not None:
                self.owner.config.vocab_size = self._config_vocab
        # untie: input and output were trained apart, so the model stays untied (config says so)
        self.merged = True
        self.close()
        return self.owner

    def close(self) -> None:
        """Delete the offloaded file (merge() does this)."""
        if self.path is not None and self.path.exists():
            self.path.unlink()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def stats(self) -> dict[str, float]:
        return {"vocab_rows": self.rows, "vocab_used": self.vmap.used, "d": self.d,
                "embedding_params_full": self.rows * self.d, "embedding_params_partial": self.vmap.used * self.d,
                "embedding_reduction_pct": 100.0 * (1 - self.vmap.used / self.rows)}
