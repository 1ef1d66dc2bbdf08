"""|V|, N_emb, N and N_emb/N from an architecture config alone (Tables 5/6 [P App. A]): the model is built on the
`meta` device, so no weights are read or allocated. N counts AutoModelForSequenceClassification, head included, as the
official code's ParameterTracker does [R]. `run` is method=pema_sizes."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from experiments.context import RunContext
from experiments.models import architecture


@dataclass(frozen=True)
class Sizes:
    rows: int  # |V| = input-embedding rows (config.vocab_size), not len(tokenizer): DeBERTaV3's 128,100 [P Table 5]
    d: int  # embedding width
    n_emb: int  # |V| * d
    n: int  # every parameter of the classification model

    @property
    def ratio_pct(self) -> float:
        return 100.0 * self.n_emb / self.n


def sizes(config, num_labels: int = 2) -> Sizes:
    """Parameter counts of AutoModelForSequenceClassification(config) built on the meta device."""
    from transformers import AutoModelForSequenceClassification
    config.num_labels = num_labels
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    emb = model.get_input_embeddings().weight
    return Sizes(rows=emb.shape[0], d=emb.shape[1], n_emb=emb.numel(), n=sum(p.numel() for p in model.parameters()))


def _first(config, *names: str):
    """The first of `names` the config sets (architectures name their depth and heads differently)."""
    return next((getattr(config, n) for n in names if getattr(config, n, None) is not None), None)


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    """method=pema_sizes: the model's sizes from its architecture config (conf/model's `from_config`, no network)."""
    arch = architecture(cfg.model)
    sz = sizes(arch, cfg.method.num_labels)
    ctx.extra.update(model_type=arch.model_type, hf_id=cfg.model.hf_id)
    return {"sizes/rows": sz.rows, "sizes/d": sz.d, "sizes/n_emb_m": sz.n_emb / 1e6, "sizes/n_m": sz.n / 1e6,
            "sizes/ratio_pct": sz.ratio_pct, "sizes/layers": _first(arch, "num_hidden_layers", "n_layers"),
            "sizes/heads": _first(arch, "num_attention_heads", "n_heads")}
