"""Models: the one place that resolves `model=` to a tokenizer, an encoder or a causal LM (offline asset, hub id, or
random init from config), fingerprints tokenizers, and puts a task head on the encoder. Heads read the encoder's last
hidden states, so methods that produce hidden states another way (a cache, a fused stack of layers) reuse them
unchanged."""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn
from transformers import (AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig,
                          PreTrainedTokenizerFast)

from experiments.assets import USED, cache_dir, hub_revision, require
from experiments.config import ConfigError, in_hf_cache, hub_offline, offline_refusal

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (260 ids, no merges) for random tiny models: any text, no files, no downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_max_length=512,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def weights_path(model: DictConfig) -> str:
    """Where a pretrained model's files are: its verified offline asset directory, or its hub id."""
    if model.source == "offline":
        return str(require("models", model.offline))
    if model.source == "hub":
        refusal = offline_refusal("model", model.name, model.hf_id, "model") if model.hf_id else None
        if refusal:  # before transformers' ~100-line traceback that ends in "check your internet connection"
            raise ConfigError(refusal)
        USED[f"hub/{model.hf_id}"] = hub_revision(model.hf_id)  # no manifest: the cached revision names its files
        return model.hf_id
    raise ValueError(f"model.source={model.source!r} names no pretrained files; valid: offline, hub "
                     "(config builds random weights from model.from_config)")


def max_positions(model: DictConfig) -> int | None:
    """The longest input (tokens) the model's position table takes, from its config without loading weights: the
    offline asset's config.json (read, not `require`d: no provenance, no verification), the `from_config` fields of a
    random or hub model, else a cached or reachable hub config.json. None where nothing caps the length (relative
    positions only) or no config is at hand (a missing asset or uncached hub model: its load refuses with the fix)."""
    fields = OmegaConf.to_container(model.from_config, resolve=True) if model.get("from_config") else {}
    path = cache_dir() / "models" / str(model.offline) / "config.json"
    # a sweep checks thousands of jobs over a handful of models: each config is read once per process (the file's
    # mtime and the offline switch are in the key, so a rebuilt asset or a change of mind is seen)
    stamp = path.stat().st_mtime_ns if model.source == "offline" and path.is_file() else None
    return _max_positions(model.source, str(path), stamp, model.get("hf_id"), model.family,
                          json.dumps(fields, sort_keys=True), hub_offline())


@functools.lru_cache(maxsize=256)
def _max_positions(source: str, path: str, stamp: int | None, hf_id: str | None, family: str, fields: str,
                   offline: bool) -> int | None:
    fields = json.loads(fields)
    if source == "offline":
        if stamp is None:
            return None
        config = AutoConfig.from_pretrained(Path(path).parent)
    elif source == "config" or "model_type" in fields:
        config = AutoConfig.for_model(fields.pop("model_type", None) or family, **fields)
    elif hf_id and not (offline and not in_hf_cache(hf_id)):
        config = AutoConfig.from_pretrained(hf_id)
    else:
        return None
    config = config.get_text_config()
    n = getattr(config, "max_position_embeddings", None)
    if not isinstance(n, int) or n <= 0 or getattr(config, "position_biased_input", True) is False:
        return None  # DeBERTa-v2/v3 without absolute positions reads any length
    if config.model_type in ("roberta", "xlm-roberta", "camembert"):  # positions start after the padding index
        n -= (config.pad_token_id or 0) + 1
    return n


def load_tokenizer(model: DictConfig) -> PreTrainedTokenizerFast:
    """The model's tokenizer alone (no weights): the byte tokenizer for random models."""
    if model.source == "config":
        return byte_tokenizer()
    tok = AutoTokenizer.from_pretrained(weights_path(model))
    if tok.pad_token is None:  # causal LMs ship without one; padding is masked anyway
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"  # pool("last") and the store read mask.sum() - 1; Gemma's tokenizer ships "left"
    return tok


def _random_config(model: DictConfig, tok) -> PretrainedConfig:
    """source=config: the architecture of model.from_config, its vocabulary sized to the byte tokenizer."""
    model_type = {"bert": "bert", "llama": "llama"}.get(model.family)
    if model_type is None:
        raise ValueError(f"source=config builds bert or llama families, not {model.family!r}")
    kwargs = OmegaConf.to_container(model.from_config, resolve=True)
    return AutoConfig.for_model(model_type, vocab_size=len(tok), pad_token_id=tok.pad_token_id, **kwargs)


def load_encoder(model: DictConfig) -> tuple[PreTrainedTokenizerFast, nn.Module]:
    """(tokenizer, base model without any head) for a model config. A causal LM is loaded whole and its decoder stack
    returned: the packaged decoders tie the input embedding to lm_head, which a bare AutoModel load would leave
    randomly initialised."""
    if model.get("kind") == "causal":
        tok, lm = load_causal_lm(model)
        return tok, lm.get_decoder()
    tok = load_tokenizer(model)
    # heads read token states; BERT's pooler would be computed on every forward and some assets ship no pooler weights
    extra = {"add_pooling_layer": False} if model.family == "bert" else {}
    if model.source == "config":
        return tok, AutoModel.from_config(_random_config(model, tok), **extra)
    return tok, AutoModel.from_pretrained(weights_path(model), **extra)


def load_causal_lm(model: DictConfig, dtype: torch.dtype = torch.float32) -> tuple[PreTrainedTokenizerFast, nn.Module]:
    """(tokenizer, causal LM with its LM head) in eval mode, weights in `dtype`."""
    if model.kind != "causal":
        raise ValueError(f"model={model.name} is model.kind={model.kind}; this method needs a causal LM "
                         "(a model config with kind: causal, e.g. model=smollm2-135m or model=tiny-llama)")
    tok = load_tokenizer(model)
    if model.source == "config":
        lm = AutoModelForCausalLM.from_config(_random_config(model, tok), dtype=dtype)
    else:
        lm = AutoModelForCausalLM.from_pretrained(weights_path(model), dtype=dtype)
    return tok, lm.eval()


def tokenizer_fingerprint(tok) -> str:
    """What decides a tokenizer's ids, hashed (16 hex digits): the fast tokenizer's vocabulary, merges or model type,
    added tokens, normalizer, pre-tokenizer and post-processor, and the special-token map. Never a path, so the same
    files give the same fingerprint wherever the cache lives; the truncation and padding a call leaves set are not
    part of it. It names the tokenizer in activation-store keys and in the run record."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("truncation", None)
        state.pop("padding", None)
    else:  # a slow (python) tokenizer: its class and vocabulary
        state = {"class": type(tok).__name__, "vocab": sorted(tok.get_vocab().items())}
    state["special_tokens_map"] = tok.special_tokens_map
    blob = json.dumps(state, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pool(hidden: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """(B, T, d) -> (B, d). Right padding: the last real token sits at mask.sum() - 1."""
    if how == "cls":
        return hidden[:, 0]
    if how == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1)
    if how == "last":
        return hidden[torch.arange(hidden.size(0), device=hidden.device), mask.sum(1) - 1]
    raise ValueError(f"unknown pooling {how!r}; valid: cls, mean, last")


@dataclass
class HeadOutput:
    logits: torch.Tensor  # cls: (B, C); ner: (B, T, C); qa: (B, T, 2)
    loss: torch.Tensor | None = None


class SequenceHead(nn.Module):
    """Sentence (pair) classification: pooled state -> dense -> tanh -> linear (the RoBERTa/BERT-pooler head)."""

    def __init__(self, d: int, n_labels: int, pooling: str, dropout: float = 0.1):
        super().__init__()
        self.pooling = pooling
        self.dense, self.out, self.drop = nn.Linear(d, d), nn.Linear(d, n_labels), nn.Dropout(dropout)

    def forward(self, hidden, mask, labels=None, **_):
        x = self.drop(pool(hidden, mask, self.pooling))
        logits = self.out(self.drop(torch.tanh(self.dense(x))))
        return HeadOutput(logits, F.cross_entropy(logits.float(), labels) if labels is not None else None)


class TokenHead(nn.Module):
    """Token classification (NER): a linear layer per token; label -100 is ignored."""

    def __init__(self, d: int, n_labels: int, dropout: float = 0.1):
        super().__init__()
        self.out, self.drop = nn.Linear(d, n_labels), nn.Dropout(dropout)

    def forward(self, hidden, mask, labels=None, **_):
        logits = self.out(self.drop(hidden))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        return HeadOutput(logits, loss)


class SpanHead(nn.Module):
    """Extractive QA: start and end logits per token; the loss is their mean cross-entropy (BERT)."""

    def __init__(self, d: int):
        super().__init__()
        self.out = nn.Linear(d, 2)

    def forward(self, hidden, mask, start_positions=None, end_positions=None, **_):
        logits = self.out(hidden).masked_fill(~mask.bool().unsqueeze(-1), torch.finfo(hidden.dtype).min)
        loss = None
        if start_positions is not None:
            loss = (F.cross_entropy(logits[..., 0].float(), start_positions)
                    + F.cross_entropy(logits[..., 1].float(), end_positions)) / 2
        return HeadOutput(logits, loss)


def make_head(task: DictConfig, model: DictConfig) -> nn.Module:
    d = model.hidden_size
    if task.type in ("cls", "pair"):
        return SequenceHead(d, len(task.label_names), model.pooling)
    if task.type == "ner":
        return TokenHead(d, len(task.label_names))
    if task.type == "qa":
        return SpanHead(d)
    raise ValueError(f"no head for task type {task.type!r}; valid: cls, pair, ner, qa")


class TaskModel(nn.Module):
    """encoder + head. Extra batch keys (labels, positions) go to the head."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder, self.head = encoder, head
        self._types = "token_type_ids" in inspect.signature(encoder.forward).parameters

    def forward(self, input_ids, attention_mask, token_type_ids=None, **targets) -> HeadOutput:
        kw = {"token_type_ids": token_type_ids} if self._types and token_type_ids is not None else {}
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
        return self.head(hidden, attention_mask, **targets)


def build(model: DictConfig, task: DictConfig) -> tuple[PreTrainedTokenizerFast, TaskModel]:
    tok, enc = load_encoder(model)
    if enc.config.hidden_size != model.hidden_size:
        raise ValueError(f"model.hidden_size={model.hidden_size} but {model.name} has {enc.config.hidden_size}")
    return tok, TaskModel(enc, make_head(task, model))


def count_parameters(module: nn.Module) -> dict[str, int]:
    total = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return {"params/total": total, "params/trainable": trainable}
