"""`pema:`, the training option any fine-tuning method composes with (`pema.enabled=true`), registered in
experiments.registry.OPTIONS, which adds it to the root config schema; `pema.hook` applies it. Kept apart from the
method schemas in pema/config.py because it is a node of every run's config, not a method's.
Tags: [P] the paper, [R] the official code, ours = a choice of this suite."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PemaConfig:
    """`pema.enabled=true`: fine-tune with the partial embedding matrix E' instead of E (any fine-tuning method that
    calls `pema.hook.attach` after building its model; `method=finetune` does)."""
    enabled: bool = False  # [P §4] off = ordinary fine-tuning
    # [R] V' = ids of every split the run touches (train + eval; dev joins train where the run has one, pema.hook);
    # the paper says only "the fine-tuning dataset"
    splits: list[str] = field(default_factory=lambda: ["train", "eval"])
    # ours: keep every special id (pad/cls/sep/unk/mask) in V' even if unused; [R] keeps only the used ones
    keep_special: bool = True
    # ours: tied input/output embeddings (the paper runs encoders only): untie (the output keeps the full matrix;
    # exact) | restrict (softmax over V'; approximate)
    tied: str = "untie"
    # [P §4] the full matrix waits on disk (the run's output dir) while E' trains; false keeps it in CPU memory
    offload: bool = True
    # ours: logits of one eval batch before and after the merge-back, recorded as pema/merge_max_abs_diff
    check_merge: bool = True
