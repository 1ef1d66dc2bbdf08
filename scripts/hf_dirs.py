"""Write converted weights as a Hugging Face BertModel dir (fp32 safetensors + config.json)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def save_bert(state: dict[str, np.ndarray], config_kwargs: dict, out: Path) -> int:
    """Save `state` (BertModel names, no pooler) under `out`; returns the parameter count.

    The model is built on the meta device and the arrays are assigned in place: no random init and no second
    copy of the weights (e5's 96M-entry embedding matrix makes that matter). `strict=True` fails on any
    missing, extra, misnamed or misshapen tensor.
    """
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(**config_kwargs)
    with torch.device("meta"):
        model = BertModel(config, add_pooling_layer=False)
    tensors = {k: torch.from_numpy(np.require(v, np.float32, ["C", "W"])) for k, v in state.items()}
    model.load_state_dict(tensors, strict=True, assign=True)
    model.save_pretrained(out)
    return sum(t.numel() for t in tensors.values())
