"""`pema.enabled=true`, the option any fine-tuning method composes with. Imports nothing from the suite, so the root
config schema (experiments/config.py) can hold it without an import cycle.
Tags: [P] the paper, [R] the official code, [S] the spec (pema/SPEC.md), ours = a choice of this suite."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PemaConfig:
    """`pema.enabled=true`: fine-tune with the partial embedding matrix E' instead of E (any fine-tuning method that
    calls `pema.hook.attach` after building its model; `method=finetune` does)."""
    enabled: bool = False  # [P §4] off = ordinary fine-tuning
    splits: list[str] = field(default_factory=lambda: ["train", "eval"])  # [R] V' = ids of every split the run touches (train + eval); [S §5.2]
    keep_special: bool = True  # ours: keep every special id (pad/cls/sep/unk/mask) in V' even if unused; [R] keeps only the used ones
    tied: str = "untie"  # ours [S §1.4]: tied input/output embeddings: untie (output keeps the full matrix; exact) | restrict (softmax over V'; approximate)
    offload: bool = True  # [P §4] the full matrix waits on disk (the run's output dir) while E' trains; false keeps it in CPU memory
    check_merge: bool = True  # ours: logits of one eval batch before and after the merge-back, recorded as pema/merge_max_abs_diff
