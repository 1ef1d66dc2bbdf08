"""Write converted weights as a Hugging Face BertModel dir (fp32 safetensors + config.json)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def save_bert(state: dict[str, np.ndarray], config_kwargs: dict, out: Path, head: str | None = None) -> int:
    """Save `state` (BertModel names, no pooler) under `out`; returns the parameter count. With `head` (a transformers
    class name such as "BertForTokenClassification") that class is saved instead, and `state` uses its names.

    The model is built on the meta device and the arrays are assigned in place: no random init and no second
    copy of the weights (e5's 96M-entry embedding matrix makes that matter). `strict=True` fails on any
    missing, extra, misnamed or misshapen tensor.
    """
    import torch
    import transformers
    from transformers import BertConfig, BertModel

    config = BertConfig(**config_kwargs)
    with torch.device("meta"):
        model = BertModel(config, add_pooling_layer=False) if head is None else getattr(transformers, head)(config)
    tensors = {k: torch.from_numpy(np.require(v, np.float32, ["C", "W"])) for k, v in state.items()}
    model.load_state_dict(tensors, strict=True, assign=True)
    model.save_pretrained(out)
    return sum(t.numel() for t in tensors.values())
