"""The model a config describes: fusion, [extra blocks] and head on a backbone (layer_fusion/model.py), the regime
that decides what of it trains, and the new parameters it adds."""
from __future__ import annotations

import torch
from omegaconf import DictConfig
from torch import nn

from experiments import data
from experiments.models import SequenceHead, TokenHead, paper_head
from experiments.optim import own_lr
from layer_fusion.fusion import DepthFusion, ExtraLayers, default_extra_layers, final_norm_of
from layer_fusion.model import FusionModel


def blocks_of(cfg: DictConfig) -> int:
    """How many block outputs the fusion reads: z_1..z_n with n = method.truncate, else all of them."""
    return cfg.method.truncate or cfg.model.num_layers


def build(cfg: DictConfig, backbone: nn.Module, n_labels: int, pooled: bool) -> FusionModel:
    """Fusion + [extra blocks] + head on `backbone`. pooled: the head reads one state per example (P-32 fe)."""
    m, d = cfg.method, cfg.model.hidden_size
    gen = torch.Generator().manual_seed(cfg.seed)  # DWAtt's static keys: re-drawn per trial, as every new weight
    fusion = DepthFusion("last" if m.fusion == "deeper" else m.fusion, blocks_of(cfg), d,
                         scalar_mix_init=m.scalar_mix_init, gamma_q=m.gamma_q, gamma_v=m.gamma_v, d_pos=m.d_pos,
                         scale=m.dwatt_scale, generator=gen)
    if m.lambda_lr is not None:
        own_lr(fusion.lam, m.lambda_lr)
    extra = None
    if m.fusion == "deeper":
        extra = ExtraLayers(backbone, m.extra_layers or default_extra_layers(cfg.model.num_layers))
    regression = data.is_regression(cfg.task)
    if cfg.task.type == "ner":
        head = TokenHead(d, len(cfg.task.label_names))
    elif m.head == "paper":  # pooled or not, it reads the one token HF's head reads (check() holds model.pooling to it)
        head = paper_head(cfg.model, backbone.config, n_labels, regression)
    else:
        head = SequenceHead(d, n_labels, "cls" if pooled else cfg.model.pooling, regression=regression)
    norm = final_norm_of(backbone)
    if norm is not None:
        norm.requires_grad_(False)
    return FusionModel(fusion, head, backbone, extra, norm, m.prenorm_handling)


def new_parameters(model: FusionModel) -> dict[str, int]:
    count = lambda mods: sum(p.numel() for mod in mods if mod is not None for p in mod.parameters())  # noqa: E731
    return {"params/new": count(model.new_modules()), "params/fusion": count([model.fusion, model.extra]),
            "params/trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def apply_regime(cfg: DictConfig, model: FusionModel) -> None:
    m = cfg.method
    if m.regime == "fe":
        model.backbone.requires_grad_(False)
    elif m.regime == "lora":
        from peft import LoraConfig, get_peft_model  # only this regime needs peft
        targets = [t for t in m.lora_targets if any(n.endswith(t) for n, _ in model.backbone.named_modules())]
        if not targets:
            raise ValueError(f"method.lora_targets={list(m.lora_targets)} match no module of model={cfg.model.name}; "
                             "name its projection layers (e.g. query,value for BERT; q_proj,v_proj for Llama)")
        model.backbone = get_peft_model(model.backbone, LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha,
                                                                   lora_dropout=m.lora_dropout,
                                                                   target_modules=targets))
