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

from experiments import provenance
from experiments.assets import cache_dir, hub_revision, require
from experiments.config import ConfigError, in_hf_cache, hub_offline, offline_refusal
from experiments.data import is_regression
from experiments.memo import Memo

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
BYTE_VOCAB = len(SPECIALS) + 256  # byte_tokenizer's ids: its specials and one per byte


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
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                  sep_token="[SEP]", model_max_length=512,
                                  model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    provenance.note_tokenizer(tok)
    return tok


def weights_path(model: DictConfig) -> str:
    """Where a pretrained model's files are: its verified offline asset directory, or its hub id."""
    if model.source == "offline":
        return str(require("models", model.offline))
    if model.source == "hub" and model.get("local_dir"):  # the repo's files already on disk (tests, a copy)
        return str(model.local_dir)
    if model.source == "hub":
        pin = model.get("revision")
        refusal = offline_refusal("model", model.name, model.hf_id, "model", revision=pin) if model.hf_id else None
        if refusal:  # before transformers' ~100-line traceback that ends in "check your internet connection"
            raise ConfigError(refusal)
        # no manifest: the cached revision names its files
        provenance.note_asset(f"hub/{model.hf_id}" + (f"@{pin}" if pin else ""), hub_revision(model.hf_id, pin))
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
    return _max_positions(model.source, str(path), stamp, model.get("local_dir") or model.get("hf_id"), model.family,
                          json.dumps(fields, sort_keys=True), hub_offline(), model.get("revision"))


@functools.lru_cache(maxsize=256)
def _max_positions(source: str, path: str, stamp: int | None, hf_id: str | None, family: str, fields: str,
                   offline: bool, revision: str | None = None) -> int | None:
    fields = json.loads(fields)
    if source == "offline":
        if stamp is None:
            return None
        config = AutoConfig.from_pretrained(Path(path).parent)
    elif source == "config" or "model_type" in fields:
        config = AutoConfig.for_model(fields.pop("model_type", None) or family, **fields)
    elif hf_id and (Path(hf_id).is_dir() or not (offline and not in_hf_cache(hf_id, revision))):
        config = AutoConfig.from_pretrained(hf_id, revision=revision)  # the pinned files', not main's
    else:
        return None
    config = config.get_text_config()
    n = getattr(config, "max_position_embeddings", None)
    if not isinstance(n, int) or n <= 0 or getattr(config, "position_biased_input", True) is False:
        return None  # DeBERTa-v2/v3 without absolute positions reads any length
    if config.model_type in ("roberta", "xlm-roberta", "camembert"):  # positions start after the padding index
        n -= (config.pad_token_id or 0) + 1
    return n


def load_tokenizer(model: DictConfig, pre_split: bool = False) -> PreTrainedTokenizerFast:
    """The model's tokenizer alone (no weights): the byte tokenizer for random models. pre_split: the task hands it
    words already split (NER), which a byte-level BPE tokenizer then marks as running text marks them."""
    if model.source == "config":
        return byte_tokenizer()
    tok = AutoTokenizer.from_pretrained(weights_path(model), revision=model.get("revision"))
    if pre_split:
        mark_word_starts(tok)
    if tok.pad_token is None:  # causal LMs ship without one; padding is masked anyway
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"  # pool("last") and the store read mask.sum() - 1; Gemma's tokenizer ships "left"
    provenance.note_tokenizer(tok)
    return tok


def mark_word_starts(tok) -> None:
    """Byte-level BPE (RoBERTa, MiniLMv2, GPT-2) marks a word's start with the space before it (Ġ). Its hub
    tokenizers ship add_prefix_space false, so each pre-split word would be encoded as if it began the text, without
    the mark, into other pieces than the same word gets in a sentence (transformers 5 no longer refuses this). Turns
    the prefix space on in place, as Hugging Face's token-classification scripts load these tokenizers; running text
    must not get it (its first word would change), so only pre-split tasks call this."""
    pre = json.loads(tok.backend_tokenizer.to_str()).get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space"):
        return
    from tokenizers import pre_tokenizers
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=True, trim_offsets=pre.get("trim_offsets", True), use_regex=pre.get("use_regex", True))
    tok.add_prefix_space = True


def _random_config(model: DictConfig, tok) -> PretrainedConfig:
    """source=config: the architecture of model.from_config, its vocabulary sized to the byte tokenizer."""
    model_type = {"bert": "bert", "llama": "llama"}.get(model.family)
    if model_type is None:
        raise ValueError(f"source=config builds bert or llama families, not {model.family!r}")
    kwargs = OmegaConf.to_container(model.from_config, resolve=True)
    return AutoConfig.for_model(model_type, vocab_size=len(tok), pad_token_id=tok.pad_token_id, **kwargs)


def load_encoder(model: DictConfig, pre_split: bool = False,
                 dtype: torch.dtype = torch.float32) -> tuple[PreTrainedTokenizerFast, nn.Module]:
    """(tokenizer, base model without any head) for a model config, weights in `dtype` (fp32: the master weights
    training updates). A causal LM is loaded whole and its decoder stack returned: the packaged decoders tie the
    input embedding to lm_head, which a bare AutoModel load would leave randomly initialised. pre_split: the task's
    input is pre-split words (load_tokenizer)."""
    if model.get("kind") == "causal":
        tok, lm = load_causal_lm(model, dtype)
        if pre_split:
            mark_word_starts(tok)
        return tok, lm.get_decoder()
    tok = load_tokenizer(model, pre_split)
    config = _random_config(model, tok) if model.source == "config" else AutoConfig.from_pretrained(
        weights_path(model), revision=model.get("revision"))
    # heads read token states; BERT's pooler would be computed on every forward and some assets ship no pooler weights.
    # The architecture decides, not model.family: DistilBERT's configs say bert, and its model takes no such argument
    extra = {"add_pooling_layer": False} if config.model_type == "bert" else {}
    if model.source == "config":
        return tok, AutoModel.from_config(config, dtype=dtype, **extra)
    # an explicit dtype: transformers 5 otherwise keeps the dtype the checkpoint is stored in, and the DeBERTa repos
    # store fp16 with none named in config.json (AdamW on fp16 weights rounds most updates away)
    return tok, AutoModel.from_pretrained(weights_path(model), config=config, dtype=dtype,
                                          revision=model.get("revision"), **extra)


_FROZEN = Memo(4)  # a sweep in one process loads each frozen backbone once


def frozen_encoder(model: DictConfig, pre_split: bool = False) -> tuple[PreTrainedTokenizerFast, nn.Module]:
    """`load_encoder` in eval mode with no gradients, once per process and model config: the feature extractor that
    the runs of a sweep share (never train it; a method that fine-tunes loads its own)."""
    def load():
        tok, enc = load_encoder(model, pre_split=pre_split)
        return tok, enc.eval().requires_grad_(False)
    return _FROZEN(("frozen", OmegaConf.to_yaml(model), pre_split), load)


def architecture(model: DictConfig) -> PretrainedConfig:
    """The model's transformers config without its weights or the network: conf/model's `from_config` fields (with a
    `model_type`: a hub model's config.json copied into the repo), the random tiny models' fields, else the offline
    asset's (or a cached hub model's) config.json."""
    fields = OmegaConf.to_container(model.from_config, resolve=True) if model.from_config else {}
    if model.source == "config":
        return AutoConfig.for_model(model.family, vocab_size=BYTE_VOCAB, **fields)
    if "model_type" in fields:
        return AutoConfig.for_model(**fields)
    return AutoConfig.from_pretrained(weights_path(model), revision=model.get("revision"))


def load_causal_lm(model: DictConfig, dtype: torch.dtype = torch.float32) -> tuple[PreTrainedTokenizerFast, nn.Module]:
    """(tokenizer, causal LM with its LM head) in eval mode, weights in `dtype`."""
    if model.kind != "causal":
        raise ValueError(f"model={model.name} is model.kind={model.kind}; this method needs a causal LM "
                         "(a model config with kind: causal, e.g. model=smollm2-135m or model=tiny-llama)")
    tok = load_tokenizer(model)
    if model.source == "config":
        lm = AutoModelForCausalLM.from_config(_random_config(model, tok), dtype=dtype)
    else:
        lm = AutoModelForCausalLM.from_pretrained(weights_path(model), dtype=dtype, revision=model.get("revision"))
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


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor | None, regression: bool) -> torch.Tensor | None:
    """Cross-entropy over the classes, or for a regression (one output) the mean squared error, as Hugging Face's
    *ForSequenceClassification computes it for num_labels=1."""
    if labels is None:
        return None
    if regression:
        return F.mse_loss(logits.float().squeeze(-1), labels.float())
    return F.cross_entropy(logits.float(), labels)


class SequenceHead(nn.Module):
    """Sentence (pair) classification: pooled state -> [dropout] -> dense -> tanh -> dropout -> linear. With the
    leading dropout it is RoBERTa's classification head; without it, BERT's pooler (dense + tanh on [CLS]) followed
    by BertForSequenceClassification's dropout and classifier. regression: one output trained with MSE."""

    note = "fresh dense+tanh+linear"  # what a run record says about the head (layer_fusion's extra.head)

    def __init__(self, d: int, n_labels: int, pooling: str, dropout: float = 0.1, regression: bool = False,
                 pre_dropout: bool = True):
        super().__init__()
        self.pooling, self.regression, self.pre_dropout = pooling, regression, pre_dropout
        self.dense, self.out, self.drop = nn.Linear(d, d), nn.Linear(d, n_labels), nn.Dropout(dropout)

    def forward(self, hidden, mask, labels=None, **_):
        x = pool(hidden, mask, self.pooling)
        if self.pre_dropout:
            x = self.drop(x)
        logits = self.out(self.drop(torch.tanh(self.dense(x))))
        return HeadOutput(logits, sequence_loss(logits, labels, self.regression))


class ScoreHead(nn.Module):
    """A decoder's sequence head as Hugging Face builds it (LlamaForSequenceClassification and the like): one
    bias-free linear `score` read at the last real token (right padding: mask.sum() - 1)."""

    note = "score: bias-free linear on the last real token"

    def __init__(self, d: int, n_labels: int, pooling: str = "last", regression: bool = False):
        super().__init__()
        self.pooling, self.regression = pooling, regression
        self.score = nn.Linear(d, n_labels, bias=False)

    def forward(self, hidden, mask, labels=None, **_):
        logits = self.score(pool(hidden, mask, self.pooling))
        return HeadOutput(logits, sequence_loss(logits, labels, self.regression))


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
        logits = self.out(hidden)
        # the fill must fit the logits' dtype: under autocast the Linear returns bf16/fp16 from fp32 states
        logits = logits.masked_fill(~mask.bool().unsqueeze(-1), torch.finfo(logits.dtype).min)
        loss = None
        if start_positions is not None:
            loss = (F.cross_entropy(logits[..., 0].float(), start_positions)
                    + F.cross_entropy(logits[..., 1].float(), end_positions)) / 2
        return HeadOutput(logits, loss)


def make_head(task: DictConfig, model: DictConfig) -> nn.Module:
    d = model.hidden_size
    if task.type in ("cls", "pair"):
        if is_regression(task):
            return SequenceHead(d, 1, model.pooling, regression=True)
        return SequenceHead(d, len(task.label_names), model.pooling)
    if task.type == "ner":
        return TokenHead(d, len(task.label_names))
    if task.type == "qa":
        return SpanHead(d)
    raise ValueError(f"no head for task type {task.type!r}; valid: cls, pair, ner, qa")


POOLER = ("pooler.dense.weight", "pooler.dense.bias")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def checkpoint_pooler(model: DictConfig) -> dict[str, torch.Tensor] | None:
    """A BERT-family checkpoint's pretrained pooler as {"weight", "bias"} of its dense layer, read from the weight
    files alone (load_encoder builds the encoder without the pooler), or None where the checkpoint has none (a random
    model; an asset saved as a bare encoder). Keys may carry the model prefix (`bert.pooler.dense.weight`)."""
    if model.source == "config":
        return None
    from safetensors import safe_open
    from transformers.utils import cached_file

    path = weights_path(model)
    found = None
    for name in WEIGHT_FILES:
        found = cached_file(path, name, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
        if found:
            break
    if not found:
        raise FileNotFoundError(f"model={model.name}: none of {', '.join(WEIGHT_FILES)} in {path}")
    files = [found]
    if found.endswith(".index.json"):  # sharded: the index names the file that holds each tensor
        weight_map = json.loads(Path(found).read_text())["weight_map"]
        files = [cached_file(path, f) for f in sorted({f for k, f in weight_map.items() if _pooler_key(k)})]
    out = {}
    for f in files:
        if f.endswith(".safetensors"):
            with safe_open(f, "pt") as st:
                out.update({_pooler_key(k): st.get_tensor(k).float() for k in st.keys() if _pooler_key(k)})
        else:
            state = torch.load(f, map_location="cpu", weights_only=True)
            out.update({_pooler_key(k): v.float() for k, v in state.items() if _pooler_key(k)})
    return out if set(out) == {"weight", "bias"} else None


def _pooler_key(key: str) -> str | None:
    """'weight' / 'bias' for the pooler's dense layer, bare or under one model prefix (bert.pooler...); else None."""
    for full in POOLER:
        if key == full or (key.endswith("." + full) and key.count(".") == full.count(".") + 1):
            return full.rsplit(".", 1)[1]
    return None


def _hf_init(*layers: nn.Linear, std: float) -> None:
    """A new linear layer as Hugging Face initialises it: weight ~ N(0, initializer_range), bias 0."""
    for layer in layers:
        nn.init.normal_(layer.weight, 0.0, std)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)


def paper_head(model: DictConfig, config: PretrainedConfig, n_labels: int, regression: bool = False) -> nn.Module:
    """The head Hugging Face's AutoModelForSequenceClassification puts on this backbone, new layers initialised as it
    initialises them; its `note` says which it is (a run records it).
      BERT (MiniLM, E5): the checkpoint's pretrained pooler (dense + tanh on the first token), dropout, a new
        linear (BertForSequenceClassification). A checkpoint without pooler weights gets a new dense layer.
      decoders (kind: causal): one bias-free linear `score` on the last real token.
      RoBERTa and any other encoder: dropout, a new dense + tanh, dropout, a new linear on the first token
        (RobertaClassificationHead, new in Hugging Face too).
    Dropout is config.classifier_dropout, else hidden_dropout_prob, as Hugging Face's heads read it."""
    d, std = config.hidden_size, getattr(config, "initializer_range", 0.02)
    if model.get("kind") == "causal":
        head = ScoreHead(d, n_labels, "last", regression)
        _hf_init(head.score, std=std)
        return head
    dropout = getattr(config, "classifier_dropout", None)
    dropout = getattr(config, "hidden_dropout_prob", 0.1) if dropout is None else dropout
    if config.model_type != "bert":  # the architecture, not model.family (DistilBERT's configs say bert)
        head = SequenceHead(d, n_labels, "cls", dropout, regression)
        _hf_init(head.dense, head.out, std=std)
        head.note = f"fresh dense+tanh+linear on the first token (RobertaClassificationHead; {config.model_type})"
        return head
    head = SequenceHead(d, n_labels, "cls", dropout, regression, pre_dropout=False)
    _hf_init(head.dense, head.out, std=std)
    pooler = checkpoint_pooler(model)
    if pooler is None:
        head.note = ("fresh pooler (random model, no checkpoint)" if model.source == "config"
                     else "fresh pooler (checkpoint has none)")
    else:
        head.dense.load_state_dict(pooler)
        head.note = "pretrained pooler + dropout + new linear (BertForSequenceClassification)"
    return head


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
    tok, enc = load_encoder(model, pre_split=task.type == "ner")
    if enc.config.hidden_size != model.hidden_size:
        raise ValueError(f"model.hidden_size={model.hidden_size} but {model.name} has {enc.config.hidden_size}")
    return tok, TaskModel(enc, make_head(task, model))


def count_parameters(module: nn.Module) -> dict[str, int]:
    total = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return {"params/total": total, "params/trainable": trainable}
