"""The two training protocols: DWAtt's few-shot NER sample and budget [D §5.2], and P-32's classification on the
task's train split (the shared training settings as they are)."""
from __future__ import annotations

import math

import numpy as np
from omegaconf import DictConfig, OmegaConf


def few_shot_sample(n_train: int, shots: int, classes: int, seed: int) -> list[int]:
    """N·C training sentences drawn uniformly without replacement, not stratified [D §5.2]; each trial (seed)
    draws its own."""
    k = shots * classes
    if k > n_train:
        raise ValueError(f"method.shots={shots} x {classes} classes = {k} sentences, but the train split has "
                         f"{n_train}: lower method.shots (or method.classes)")
    return sorted(np.random.default_rng(seed).choice(n_train, size=k, replace=False).tolist())


def entity_types(label_names) -> int:
    """C in N·C: the task's entity types, one per B- tag."""
    return sum(1 for name in label_names if str(name).startswith("B-"))


def train_config(cfg: DictConfig, n_batches: int) -> DictConfig:
    """cfg.train with evaluations spread `evals_per_run` times over the whole budget (fewshot)."""
    t = OmegaConf.to_container(cfg.train, resolve=True)
    if cfg.method.protocol == "fewshot":
        total = max(1, math.ceil(n_batches * t["epochs"] / t["grad_accum"])) if t["max_steps"] <= 0 else t["max_steps"]
        t["eval_every"] = max(1, total // cfg.method.evals_per_run)
    return OmegaConf.create(t)
