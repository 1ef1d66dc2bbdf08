"""The cache of trained arms: one directory per training, named by a hash of everything that determines the weights,
so method=eat_bench times exactly the models method=eat scored, and a rerun of the same arm reads them instead of
training again. A changed config, encoder, tokenizer or data asset is a new entry, never a stale hit."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from eat.config import patience_layer_of
from eat.model import EatModel
from experiments import files
from experiments.assets import data_fingerprint
from experiments.context import RunContext
from experiments.models import tokenizer_fingerprint
from experiments.store import model_fingerprint

log = logging.getLogger(__name__)
TRAINING_KEYS = ("variant", "exit_layer", "patience_layer", "exit_weight", "pooling", "prune_after", "prune_ratio",
                 "prune_rule", "scorer", "window", "anneal", "distill", "distill_temperature", "distill_mu")
# bump when training semantics change: old checkpoints are then never read (2: an arm's training is seeded by its
# own config, no longer by whatever ran before it in the process; 3: no patience head unless patience=true, so the
# loss is Eq. 1, and layer 4 prunes before its exit head reads it; 4: the data settings (limit_train, max_length, …)
# are part of the key, which a run with fewer training rows used to share)
CHECKPOINT_VERSION = 4
KEY_CHARS = 20  # the length every cached checkpoint's name carries


def checkpoint_path(cfg: DictConfig, ctx: RunContext, model: EatModel, tok) -> Path:
    """Keyed by everything that determines the training: the configs, the untrained encoder's weights and the
    tokenizer (fingerprints, so a rebuilt asset is a new key) and the data asset's manifest."""
    m = cfg.method
    what = {"version": CHECKPOINT_VERSION, "model": OmegaConf.to_container(cfg.model, resolve=True),
            "task": OmegaConf.to_container(cfg.task, resolve=True),
            "train": {k: v for k, v in OmegaConf.to_container(cfg.train, resolve=True).items() if k != "progress"},
            # the patience layer as built: a patience_layer that patience=false never reads trains nothing
            "method": {**{k: OmegaConf.to_container(m, resolve=True)[k] for k in TRAINING_KEYS},
                       "patience_layer": patience_layer_of(m)},
            "seed": cfg.seed, "batch_size": cfg.hardware.batch_size, "precision": cfg.hardware.precision,
            "device": ctx.device.type, "weights": model_fingerprint(model.encoder),
            "tokenizer": tokenizer_fingerprint(tok), "data": data_fingerprint(cfg.task, cfg.data),
            "data_settings": OmegaConf.to_container(cfg.data, resolve=True)}
    root = files.cache_root("eat-checkpoints", m.checkpoint_dir)
    return root / f"{m.variant}-{cfg.model.name}-{cfg.task.name}-{files.config_key(what, KEY_CHARS)}"


def save(path: Path, model: EatModel, info: dict) -> None:
    """The weights, then train.json: its presence says the weights beside it are complete."""
    from safetensors.torch import save_file
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.json").unlink(missing_ok=True)  # a replaced checkpoint is incomplete until its new train.json
    with files.replacing(path / "weights.safetensors") as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
    files.write_json(path / "train.json", info)


def load(path: Path, model: EatModel) -> dict | None:
    """The cached training's summary, its weights loaded into `model`; None when absent, incomplete or unreadable
    (then it is retrained, never used)."""
    from safetensors.torch import load_file
    try:
        info = json.loads((path / "train.json").read_text())
        model.load_state_dict(load_file(str(path / "weights.safetensors")), strict=True)
        return info
    except FileNotFoundError:
        return None
    except Exception as e:  # a truncated or foreign file
        log.warning("eat: ignoring the unreadable checkpoint %s (%s); retraining", path, e)
        return None
