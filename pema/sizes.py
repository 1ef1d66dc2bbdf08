"""|V|, N_emb, N and N_emb/N from an architecture config alone (Tables 5/6, paper App. A): the model is built on the
`meta` device, so no weights are read or allocated. N counts AutoModelForSequenceClassification, head included, as the
official code's ParameterTracker does [R]."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sizes:
    rows: int  # |V| = input-embedding rows (config.vocab_size), not len(tokenizer) [S §5.7]
    d: int  # embedding width
    n_emb: int  # |V| * d
    n: int  # every parameter of the classification model

    @property
    def ratio_pct(self) -> float:
        return 100.0 * self.n_emb / self.n


def architecture(model_type: str | None = None, hf_id: str | None = None, **kwargs):
    """A transformers config: from explicit architecture fields (`model_type` + config.json keys; no network) or,
    without them, from `hf_id` (the hub or its local cache)."""
    from transformers import AutoConfig
    if model_type:
        return AutoConfig.for_model(model_type, **kwargs)
    if hf_id:
        return AutoConfig.from_pretrained(hf_id, **kwargs)
    raise ValueError("an architecture needs model_type (+ config fields) or an hf_id")


def sizes(config, num_labels: int = 2) -> Sizes:
    """Parameter counts of AutoModelForSequenceClassification(config) built on the meta device."""
    from transformers import AutoModelForSequenceClassification
    config.num_labels = num_labels
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    emb = model.get_input_embeddings().weight
    return Sizes(rows=emb.shape[0], d=emb.shape[1], n_emb=emb.numel(), n=sum(p.numel() for p in model.parameters()))
