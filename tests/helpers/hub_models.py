"""Tiny random stand-ins for hub model repos, laid out as the hub ships them, so a test can load what a GPU run would
download: the config's model_type and stated torch_dtype (or none), the weights' stored dtype and file format, the
tokenizer's class and files (an spm.model alone, vocab.json + merges.txt with add_prefix_space false, ...), no pad
token where the hub sets none, max_position_embeddings as on the hub. Weights and vocabularies are tiny and random
(hidden 32, 2 layers, a vocabulary of a few hundred pieces trained here); only the layout is the hub's.

conf/hub_manifest.yaml describes each repo and decides (weights_dtype: the dtype the weight file stores). The
built-in table below fills what an entry leaves null or does not record (DeBERTa's relative-attention fields), and
stands in where no manifest exists; an id in neither is refused with the fix.

    path = save_hub_model("FacebookAI/roberta-base", tmp_path)            # a directory from_pretrained loads
    compose(*hub_model_overrides("roberta-base", tmp_path), "task=...")   # a job that loads it, no download
"""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import torch
import yaml

from experiments import REPO

MANIFEST = REPO / "conf" / "hub_manifest.yaml"

# the dims that make a model tiny, per config naming scheme; every other field of the hub config is kept
TINY = {"distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
        "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 64}}
TINY_DEFAULT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
SIZE_KEYS = {k for d in (*TINY.values(), TINY_DEFAULT) for k in d} | {
    "num_key_value_heads", "head_dim", "pooler_hidden_size", "vocab_size", "embedding_size"}

def _bert(files=("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"),
          model_type="bert", tokenizer_class="BertTokenizer", **config):
    return {"model_type": model_type, "tokenizer_class": tokenizer_class, "files": list(files), "torch_dtype": None,
            "add_prefix_space": None, "extras": [],
            "config": {"max_position_embeddings": 512, "type_vocab_size": 2, **config}}


def _roberta(**config):
    return {"model_type": "roberta", "tokenizer_class": "RobertaTokenizer", "torch_dtype": None,
            "files": ["config.json", "merges.txt", "model.safetensors", "tokenizer.json", "vocab.json"],
            "add_prefix_space": False, "extras": [],
            "config": {"max_position_embeddings": 514, "type_vocab_size": 1, **config}}


def _deberta(v3=True):
    extra = {"position_biased_input": False, "relative_attention": True, "position_buckets": 256,
             "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": ["p2c", "c2p"],
             "max_relative_positions": -1, "type_vocab_size": 0}
    extra.update({"layer_norm_eps": 1e-7} if v3 else {"conv_kernel_size": 3, "conv_act": "gelu"})
    return {"model_type": "deberta-v2", "tokenizer_class": None, "torch_dtype": None, "weights_dtype": "float16",
            "add_prefix_space": None,
            "files": ["config.json", "pytorch_model.bin", "spm.model", "tokenizer_config.json"],
            "extras": ["sentencepiece"], "config": {"max_position_embeddings": 512, **extra}}


def _llama(tokenizer_class, max_positions, files, model_type="llama", torch_dtype="float16", **config):
    return {"model_type": model_type, "tokenizer_class": tokenizer_class, "torch_dtype": torch_dtype,
            "add_prefix_space": None, "files": files, "extras": [],
            "config": {"max_position_embeddings": max_positions, "num_key_value_heads": 1, **config}}


_LLAMA_FILES = ["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                "tokenizer.json", "tokenizer.model", "tokenizer_config.json"]

# the layouts the tests use, transcribed from the hub repos (conf/hub_manifest.yaml supersedes it)
BUILTIN = {
    "bert-base-cased": _bert(),
    "bert-base-uncased": _bert(),
    "distilbert-base-cased": _bert(model_type="distilbert", tokenizer_class="DistilBertTokenizer"),
    "distilbert-base-uncased": _bert(model_type="distilbert", tokenizer_class="DistilBertTokenizer"),
    "distilbert/distilbert-base-multilingual-cased": _bert(model_type="distilbert",
                                                           tokenizer_class="DistilBertTokenizer"),
    "FacebookAI/roberta-base": _roberta(),
    "FacebookAI/roberta-large": _roberta(),
    "distilbert/distilroberta-base": _roberta(),
    "nreimers/MiniLMv2-L6-H384-distilled-from-RoBERTa-Large": {
        **_roberta(), "files": ["config.json", "merges.txt", "pytorch_model.bin", "special_tokens_map.json",
                                "tokenizer_config.json", "vocab.json"]},
    "nreimers/MiniLMv2-L6-H768-distilled-from-RoBERTa-Large": {
        **_roberta(), "files": ["config.json", "merges.txt", "pytorch_model.bin", "special_tokens_map.json",
                                "tokenizer_config.json", "vocab.json"]},
    "FacebookAI/xlm-roberta-base": {
        "model_type": "xlm-roberta", "tokenizer_class": "XLMRobertaTokenizer", "torch_dtype": None,
        "add_prefix_space": None, "extras": [],
        "files": ["config.json", "model.safetensors", "sentencepiece.bpe.model", "tokenizer.json"],
        "config": {"max_position_embeddings": 514, "type_vocab_size": 1}},
    **{f"microsoft/deberta-v3-{s}": _deberta() for s in ("xsmall", "small", "base", "large")},
    "microsoft/deberta-v2-xlarge": _deberta(v3=False),
    "meta-llama/Llama-2-7b-hf": _llama("LlamaTokenizer", 4096, _LLAMA_FILES),
    "meta-llama/Llama-2-13b-hf": _llama("LlamaTokenizer", 4096, _LLAMA_FILES),
    "meta-llama/Meta-Llama-3-8B": _llama("PreTrainedTokenizerFast", 8192, [
        "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"], torch_dtype="bfloat16", rope_theta=500000.0),
    "mistralai/Mistral-7B-v0.3": _llama("LlamaTokenizer", 32768, _LLAMA_FILES, model_type="mistral",
                                        torch_dtype="bfloat16", sliding_window=None),
    "openai-community/gpt2": {
        "model_type": "gpt2", "tokenizer_class": "GPT2Tokenizer", "torch_dtype": None, "add_prefix_space": None,
        "extras": [], "files": ["config.json", "merges.txt", "model.safetensors", "tokenizer.json", "vocab.json"],
        "config": {"n_positions": 1024, "n_ctx": 1024}},
}

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "ber", "an", "en", "on", "ing", "ed", "st", "pl"]
_WORDS = ("the a of to and in is was for on with as by at from that it he she they we EU rejects German call "
          "to boycott British lamb Peter Blackburn running runs ran question answer context where who what when "
          "Paris London Berlin New York city river movie film good bad great terrible").split()
# the intrinsic_dim verbalizers, frequent enough that each word (after a space and at a text's start) is one piece of
# its own, as in a real vocabulary: the answer is scored by its first piece
_VERBALIZERS = "yes no Yes No Maybe positive negative World Sports Business Science A B C D E"


def corpus() -> list[str]:
    """A few hundred words in short lines: the fixed words tests use and syllable compounds, deterministic."""
    words = list(_WORDS)
    for i, a in enumerate(_SYLLABLES):
        for b in _SYLLABLES[i % 5::3]:
            words.append(a + b)
    words += [w.capitalize() for w in words[::7]] + [str(n) for n in range(0, 100, 7)] + list(".,;:!?'()-")
    lines = [" ".join(words[i:i + 9]) for i in range(0, len(words), 9)]
    return lines * 4 + [_VERBALIZERS] * 40 + _VERBALIZERS.split() * 20


DEFAULT_FILES = {  # per tokenizer recipe, where an entry lists no files
    "wordpiece": ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"],
    "byte_bpe": ["config.json", "merges.txt", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "vocab.json"],
    "deberta_spm": ["config.json", "pytorch_model.bin", "spm.model", "tokenizer_config.json"],
    "xlmr_spm": ["config.json", "model.safetensors", "sentencepiece.bpe.model", "tokenizer.json",
                 "tokenizer_config.json"],
    "llama_spm": _LLAMA_FILES,
    "bpe_json": ["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                 "tokenizer.json", "tokenizer_config.json"],
}


def tokenizer_recipe(entry: dict) -> str:
    """Which vocabulary files the repo ships: by its tokenizer class, else by its model_type."""
    by_class = {"BertTokenizer": "wordpiece", "DistilBertTokenizer": "wordpiece", "RobertaTokenizer": "byte_bpe",
                "GPT2Tokenizer": "byte_bpe", "XLMRobertaTokenizer": "xlmr_spm", "LlamaTokenizer": "llama_spm",
                "GemmaTokenizer": "llama_spm", "PreTrainedTokenizerFast": "bpe_json"}
    by_type = {"bert": "wordpiece", "distilbert": "wordpiece", "roberta": "byte_bpe", "gpt2": "byte_bpe",
               "deberta-v2": "deberta_spm", "xlm-roberta": "xlmr_spm", "llama": "llama_spm", "mistral": "llama_spm"}
    cls, mt = entry.get("tokenizer_class"), entry["model_type"]
    recipe = by_class.get(cls) or by_class.get((cls or "").removesuffix("Fast")) or by_type.get(mt)
    if recipe is None:
        raise ValueError(f"no tiny tokenizer recipe for tokenizer_class={cls!r}, model_type={mt!r}")
    return recipe


def hub_entry(hf_id: str) -> dict:
    """The repo's layout: conf/hub_manifest.yaml's entry where that file exists (fields it leaves null, and config
    fields it does not list, from the built-in table), else the built-in table's."""
    builtin = BUILTIN.get(hf_id, {})
    if MANIFEST.is_file():
        models = (yaml.safe_load(MANIFEST.read_text()) or {}).get("models") or {}
        if hf_id not in models:
            raise KeyError(f"{hf_id!r} is not under models: in {MANIFEST}; add its entry (model_type, "
                           f"tokenizer_class, files, torch_dtype, add_prefix_space, config) to build its fixture")
        entry = {k: v for k, v in models[hf_id].items() if v is not None}
        entry = {**builtin, **entry, "config": {**builtin.get("config", {}), **(entry.get("config") or {})}}
    elif builtin:
        entry = dict(builtin)
    else:
        raise KeyError(f"{hf_id!r} has no built-in layout and {MANIFEST} does not exist; known: "
                       f"{', '.join(sorted(BUILTIN))}")
    entry.setdefault("files", DEFAULT_FILES[tokenizer_recipe(entry)])
    return entry


def _spm(path: Path, model_type: str, vocab_size: int = 200, **ids) -> None:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), model_writer=buf, vocab_size=vocab_size,
                                   model_type=model_type, character_coverage=1.0, minloglevel=2,
                                   hard_vocab_limit=False, **ids)
    path.write_bytes(buf.getvalue())


def _byte_bpe(out: Path, specials: list[str]) -> None:
    from tokenizers import ByteLevelBPETokenizer

    tk = ByteLevelBPETokenizer()
    tk.train_from_iterator(corpus(), vocab_size=1000, min_frequency=1, special_tokens=specials, show_progress=False)
    tk.save_model(str(out))


def _wordpiece(out: Path, lower: bool) -> None:
    from tokenizers import BertWordPieceTokenizer

    tk = BertWordPieceTokenizer(lowercase=lower)
    tk.train_from_iterator(corpus(), vocab_size=300, min_frequency=1, show_progress=False,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tk.save_model(str(out))


def _tokenizer_files(hf_id: str, entry: dict, out: Path) -> dict:
    """Writes the vocabulary files the hub repo ships; returns the tokenizer_config.json the hub ships."""
    mt, cls, recipe = entry["model_type"], entry.get("tokenizer_class"), tokenizer_recipe(entry)
    conf = {} if cls is None else {"tokenizer_class": cls}
    if entry.get("add_prefix_space") is not None:
        conf["add_prefix_space"] = entry["add_prefix_space"]
    if recipe == "wordpiece":
        lower = "uncased" in hf_id
        _wordpiece(out, lower)
        conf.update(do_lower_case=lower, model_max_length=512)
    elif recipe == "byte_bpe":
        roberta = mt == "roberta" or cls == "RobertaTokenizer"
        _byte_bpe(out, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] if roberta else ["<|endoftext|>"])
        if roberta:
            conf["model_max_length"] = 512
    elif recipe == "deberta_spm":
        _spm(out / "spm.model", "unigram", pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
             bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]", user_defined_symbols=["[MASK]"])
        conf = {"do_lower_case": False, "vocab_type": "spm"}  # all the hub's tokenizer_config.json says
    elif recipe == "xlmr_spm":
        _spm(out / "sentencepiece.bpe.model", "unigram", unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    elif recipe == "llama_spm":
        _spm(out / "tokenizer.model", "bpe", 400, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, byte_fallback=True)
        conf.update(bos_token="<s>", eos_token="</s>", unk_token="<unk>", add_bos_token=True, add_eos_token=False)
    elif recipe == "bpe_json":  # Llama 3: one byte-level BPE tokenizer.json, no sentencepiece model
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tk.train_from_iterator(corpus(), trainers.BpeTrainer(
            vocab_size=1000, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        tk.save(str(out / "tokenizer.json"))
        conf.update(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", model_max_length=1000000)
    return conf


def _tiny_config(entry: dict, tok):
    from transformers import AutoConfig

    mt = entry["model_type"]
    fields = {k: v for k, v in entry["config"].items() if k not in SIZE_KEYS}
    fields.update(TINY.get(mt, TINY_DEFAULT))
    if "num_key_value_heads" in entry["config"]:
        fields["num_key_value_heads"] = 1
    if mt == "deberta-v2":
        fields["pooler_hidden_size"] = 32
    ids = {f"{name}_token_id": tok.convert_tokens_to_ids(getattr(tok, f"{name}_token"))
           for name in ("pad", "bos", "eos") if getattr(tok, f"{name}_token", None) is not None}
    return AutoConfig.for_model(mt, vocab_size=len(tok), **fields, **ids)


def _weights_class(config):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForPreTraining

    if config.model_type in ("llama", "mistral", "gpt2", "gemma3_text"):
        return AutoModelForCausalLM
    if config.model_type == "bert":  # the hub's BERT checkpoints carry the pooler (BertForPreTraining)
        return AutoModelForPreTraining
    return AutoModelForMaskedLM


def save_hub_model(hf_id: str, root: Path) -> Path:
    """A tiny random model directory laid out as hub repo `hf_id` is (see the module docstring), under root; built
    once per root (a finished directory is reused). Returns the directory."""
    from transformers import AutoTokenizer

    entry = hub_entry(hf_id)
    out = Path(root) / hf_id.replace("/", "--")
    if (out / ".complete").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    files = set(entry["files"])
    tok_conf = _tokenizer_files(hf_id, entry, out)
    (out / "config.json").write_text(json.dumps({"model_type": entry["model_type"]}))  # AutoTokenizer reads it
    (out / "tokenizer_config.json").write_text(json.dumps(tok_conf))
    tok = AutoTokenizer.from_pretrained(out)  # converts the vocabulary files, as a load from the hub would
    if "tokenizer.json" in files and not (out / "tokenizer.json").is_file():
        tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    if "special_tokens_map.json" in files:
        (out / "special_tokens_map.json").write_text(json.dumps(tok.special_tokens_map))

    torch.manual_seed(0)
    config = _tiny_config(entry, tok)
    model = _weights_class(config).from_config(config)
    stored = getattr(torch, entry.get("weights_dtype") or entry.get("torch_dtype") or "float32")
    scratch = out / ".weights"
    model.to(stored).save_pretrained(scratch)
    saved = json.loads((scratch / "config.json").read_text())
    saved.pop("dtype", None)
    saved.pop("torch_dtype", None)
    if entry.get("torch_dtype"):
        saved["torch_dtype"] = entry["torch_dtype"]
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    if "model.safetensors" in files:
        shutil.move(scratch / "model.safetensors", out / "model.safetensors")
    else:
        from safetensors.torch import load_file
        torch.save(load_file(scratch / "model.safetensors"), out / "pytorch_model.bin")
    if "generation_config.json" in files and (scratch / "generation_config.json").is_file():
        shutil.move(scratch / "generation_config.json", out / "generation_config.json")
    shutil.rmtree(scratch)
    for path in out.iterdir():  # what this writer made that the hub repo does not ship
        if path.name not in files | {"config.json"}:
            path.unlink()
    (out / ".complete").touch()
    return out


def _hydra_value(v) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if isinstance(v, str):
        return "'" + v.replace("'", "\\'") + "'"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(map(_hydra_value, v)) + "]"
    return repr(v)


def hub_model_overrides(model_name: str, root: Path) -> list[str]:
    """Hydra overrides that make a composed job load conf/model/<model_name> from its tiny fixture under root
    instead of the hub: the model, the fixture directory, its dims, and from_config's fields (what parameter counts
    read without loading) as the fixture's config.json has them. Drop the first (`model=...`) where an experiment
    file already picks the model."""
    conf = yaml.safe_load((REPO / "conf" / "model" / f"{model_name}.yaml").read_text())
    if conf.get("source") != "hub" or not conf.get("hf_id"):
        raise ValueError(f"model={model_name} is source={conf.get('source')!r} with hf_id={conf.get('hf_id')!r}: "
                         "only hub models have a hub layout to copy")
    path = save_hub_model(conf["hf_id"], root)
    out = [f"model={model_name}", f"model.local_dir={path}", "model.hidden_size=32", "model.num_layers=2"]
    if conf.get("from_config"):
        saved = json.loads((path / "config.json").read_text())
        fields = {k: saved[k] for k in conf["from_config"] if k in saved}
        out.append("model.from_config={" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in fields.items()) + "}")
    return out
