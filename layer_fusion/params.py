"""DWAtt Table 2: the parameters each fusion adds to a backbone, counted exactly from configs alone (every module built
on the meta device: no weights read or allocated), beside the paper's closed forms.

Fusions other than Base+n need only the backbone's depth L and width d; Base+n (`deeper`) builds the backbone itself
from its architecture config (experiments.models.architecture: conf/model/<name>.yaml `from_config` with a
`model_type`, else the offline asset's or a cached hub model's config.json) and counts the blocks ExtraLayers adds.
Decoders get no Base+n row (neither paper has one)."""
from __future__ import annotations

import torch
from omegaconf import DictConfig
from transformers import AutoModel, PretrainedConfig

from experiments.config import ModelConfig, load_group
from experiments.context import RunContext
from experiments.models import architecture
from layer_fusion.config import check
from layer_fusion.fusion import MODES, DepthFusion, ExtraLayers, default_extra_layers

# the paper's names and closed forms (DWAtt Table 2). Base+n: the paper prints 7n(d+d²), which matches no layer; a
# Transformer block holds ≈ 12d² (4d² attention + 8d² feed-forward at the usual 4d), which is the column given here
NAMES = {"last": "Base", "mean": "Average", "scalar_mix": "scalar mix (P-32)", "concat": "Concat", "dwatt": "DWAtt",
         "deeper": "Base+{n}"}


def formula(fusion: str, L: int, d: int, n: int | None = None) -> tuple[str, int]:
    """(the closed form, its value): the O(·) column of Table 2."""
    forms = {"last": ("-", 0), "mean": ("-", 0), "scalar_mix": ("L", L), "concat": ("Ld²", L * d * d),
             "dwatt": ("Ld² + d² + Ld", L * d * d + d * d + L * d), "deeper": ("12nd²", 12 * (n or 0) * d * d)}
    return forms[fusion]


def count(config: PretrainedConfig, fusion: str, extra_layers: int | None = None) -> int:
    """New parameters of `fusion` (a DepthFusion mode, or `deeper` = Base+n with n = `extra_layers`, default 2 for
    >= 24-layer backbones, else 1) on the backbone `config` describes. Buffers (DWAtt's static keys) are not
    parameters and are not counted."""
    L, d = config.num_hidden_layers, config.hidden_size
    with torch.device("meta"):
        if fusion == "deeper":
            backbone = AutoModel.from_config(config)
            module = ExtraLayers(backbone, extra_layers or default_extra_layers(L))
        elif fusion in MODES:
            module = DepthFusion(fusion, L, d)
        else:
            raise ValueError(f"fusion={fusion!r} is not one of {', '.join((*MODES, 'deeper'))}")
    return sum(p.numel() for p in module.parameters())


def shape_only(model: DictConfig) -> PretrainedConfig:
    """A config carrying only depth and width: all that the fusions other than Base+n read."""
    return PretrainedConfig(num_hidden_layers=model.num_layers, hidden_size=model.hidden_size)


def rows(model: DictConfig) -> list[dict]:
    """Table 2's rows for one model config: every fusion, and Base+n for n = 1, 2 and the paper's default."""
    L, d = model.num_layers, model.hidden_size
    plan = [(f, None) for f in MODES]
    config = shape_only(model)
    if model.kind != "causal":
        config = architecture(model)
        if (config.num_hidden_layers, config.hidden_size) != (L, d):
            raise ValueError(f"conf/model/{model.name}.yaml says num_layers={L}, hidden_size={d} but its architecture "
                             f"has {config.num_hidden_layers} x {config.hidden_size}: correct the yaml")
        plan += [("deeper", n) for n in sorted({1, 2, default_extra_layers(L)})]
    out = []
    for fusion, n in plan:
        expr, closed = formula(fusion, L, d, n)
        out.append({"model": model.name, "hf_id": model.hf_id, "num_layers": L, "hidden_size": d, "fusion": fusion,
                    "name": NAMES[fusion].format(n=n), "extra_layers": n,
                    "default": n is None or n == default_extra_layers(L),
                    "new_params": count(config, fusion, n), "formula": closed, "formula_expr": expr})
    return out


def table(names: list[str]) -> list[dict]:
    models = [load_group("model", name, ModelConfig, "method.models") for name in names]  # every name, before work
    return [row for model in models for row in rows(model)]


def metric_key(row: dict) -> str:
    """params/<model>/<fusion>; Base+n also as deeper_<n> (`deeper` alone is the paper's default n)."""
    return f"params/{row['model']}/{row['fusion']}" + (f"_{row['extra_layers']}" if row["extra_layers"] else "")


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    """method=layer_fusion_params: the rows of every model in method.models (ctx.extra['params'])."""
    check(cfg)
    table_rows = table(list(cfg.method.models))
    ctx.extra["params"] = table_rows
    out = {metric_key(r): r["new_params"] for r in table_rows}
    out.update({f"params/{r['model']}/deeper": r["new_params"] for r in table_rows
                if r["fusion"] == "deeper" and r["default"]})
    return out
