"""method=intrinsic_dim: the schema and its refusals (no torch import: the registry loads it for every config
composition, and `check` refuses a config before the model loads).

Tags: [P] the paper says it, [C] only the official code says it, [S] a reading of ours where both are silent, ours = a
choice of this implementation."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING, DictConfig

from experiments.config import RANGES, ConfigError, MethodConfig

VARIANT = re.compile(r"^(icl|icl_unique)-(\d+)$|^sft$")
SFT_LOSSES = ("full", "completion")
SFT_PRECISIONS = ("fp32", "bf16")  # fp16 would need a loss scaler; bf16 has fp32's range


@dataclass
class IntrinsicDimConfig(MethodConfig):
    """One run = one paradigm on one (model, task): `variant` is `icl-<k>` (k demos from the 1000-example pool,
    reused across prompts), `icl_unique-<k>` (no demo used twice, App. D) or `sft` (LoRA, checkpoint per epoch)."""

    name: str = "intrinsic_dim"
    variant: str = MISSING  # icl-<k> | icl_unique-<k> | sft  [P §4-§7]; also names the run
    # --- data [P] ---
    n_train: int = 1000  # [P] the training pool: ICL demos and SFT data
    n_eval: int = 5000  # [P] validation prompts per setting (ID is computed over these N points)
    dev: bool = False  # ours: measure n_eval train rows after the pool instead of the eval split (choose lr/epochs)
    split_seed: Optional[int] = None  # [C] shuffle seed of the split recipe; None = the task's own (prompts.RECIPES)
    demo_seed: int = 42  # [C] random.seed(42); random.sample(range(n_train), k) per validation item
    unique_pool: int = 100_000  # [C] unique-demo control: demos drawn without reuse from this many train items
    csqa_five_choices: bool = False  # ours: show option E in CommonsenseQA (the paper's template drops it)
    max_prompt_tokens: int = 4096  # ours: a longer prompt is an error (never silently truncated)
    label_space: bool = False  # ours: write and score each label with a leading space (" positive"), the token a
    #   BPE/SentencePiece LM predicts after "\n"; [C] false: encode(label)[0] (offline tiers set true, README)
    # --- estimators [P §3] ---
    discard_fraction: float = 0.1  # [C] TwoNN: drop the largest 10% of mu = r2/r1
    dedup: bool = True  # [S] drop exact duplicate states (r1 = 0) before estimating; counted in the record
    mle_ks: list[int] = field(default_factory=lambda: [50])  # [P App. F] Levina-Bickel neighbourhood(s); [] = off
    auc_norm: str = "L"  # [P] L (paper formula) | L_minus_1 (official code); both are recorded
    auc_include_embedding: bool = False  # [C] the curve and AUC run over layers 1..L (embedding output dropped)
    bootstrap: int = 0  # ours: >0 = that many bootstrap replicates over points for a 95% CI of each layer's TwoNN
    bootstrap_seed: int = 0  # ours
    auc_bootstrap: int = 0  # ours: >0 = that many replicates of the eval AUC (and curve) for the claims' CIs:
    #   each prompt's mu = r2/r1 kept, prompts resampled (same indices in every arm: paired), TwoNN refitted
    id_device: str = "auto"  # ours: where the estimators run (auto = cuda when present)
    # --- extraction ---
    batch_size: int = 32  # ours: prompts per forward pass (length-sorted batches)
    extract_token_budget: Optional[int] = None  # ours: also at most this many padded tokens per forward (batch size
    #   x longest prompt), so long k-shot prompts go in smaller batches; None = batch_size alone
    store_dtype: str = "fp32"  # ours: activation-store dtype; fp16 perturbs nearest-neighbour distances
    # --- SFT [P] ---
    lora_r: int = 64  # [P] (the official code's detailed-FT yaml says 128)
    lora_alpha: int = 16  # [P]
    lora_dropout: float = 0.1  # [P]
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])  # [P]
    sft_epochs: int = 4  # [P] §7 "Finetune 1K" = 4 epochs; §5 dynamics = 15
    sft_lr: float = 1e-4  # [P]
    sft_loss: str = "full"  # [C] full = LM loss over the whole input\noutput text (trl.SFTTrainer); ours:
    #   completion = loss on the label token(s) only (logits computed at those positions alone)
    sft_batch_size: int = 16  # [P]
    sft_warmup_ratio: float = 0.1  # [C] linear schedule, HF default AdamW (no weight decay)
    sft_max_length: int = 1024  # [C] max_seq_length
    sft_precision: Optional[str] = None  # ours: None = hardware.precision (fp32 on CPU, bf16 autocast on GPU),
    #   fp32 or bf16; fp16 is refused (no loss scaling here). None, not a word: a null key leaves the config hash as
    #   it was before the key existed (experiments.results.NULL_AS_ABSENT)
    sft_gradient_checkpointing: Optional[bool] = None  # ours: recompute block activations in backward (same
    #   gradients, a fraction of the memory; the paper-scale configs turn it on); None = off
    sft_group_by_length: bool = True  # ours: length-grouped batches (less padding on CPU); [C] shuffles plainly
    sft_eval_train_n: Optional[int] = None  # ours: cap on train prompts measured per checkpoint (None = all n_train)
    checkpoint_dir: Optional[str] = None  # ours: LoRA checkpoint cache (default: $STRATA_CACHE/lora-checkpoints)


@dataclass
class IntrinsicDimBenchConfig(MethodConfig):
    """method=intrinsic_dim_bench (intrinsic_dim/bench.py): TwoNN speed vs scikit-dimension on synthetic layers of
    the given shape, extraction speed of `model=` on ICL-1 prompts of `task=` (ours vs the official recipe), and bf16's
    effect on the last-token states; one Llama-scale layer on CUDA. All ours."""

    name: str = "intrinsic_dim_bench"
    variant: str = "default"
    est_layers: int = 31  # synthetic layers x points x dimension: smollm2-135m's shape (30 blocks + embedding)
    est_points: int = 2000
    est_dim: int = 576
    est_repeats: int = 3  # interleaved timed rounds (medians reported)
    extraction: bool = True  # time extraction (loads `model=`; smollm2-135m needs `make assets`)
    extract_prompts: int = 128
    extract_batch_size: int = 32
    extract_repeats: int = 2
    demo_pool: int = 1000  # the ICL-1 demo is drawn from the task's first demo_pool train rows; prompts come after
    gpu: bool = True  # on a CUDA device, also time one Llama-scale layer's TwoNN (N=5000, D=4096)


def parse_variant(variant: str) -> tuple[str, int]:
    """(paradigm, k) of `method.variant`: ("icl", 5) for icl-5, ("icl_unique", 2), ("sft", 0)."""
    m = VARIANT.match(variant or "")
    if not m:
        raise ConfigError(f"method.variant={variant!r} is not a paradigm; use icl-<k> (e.g. icl-5), "
                          "icl_unique-<k> or sft")
    return (m.group(1), int(m.group(2))) if m.group(1) else ("sft", 0)


def sft_precision(cfg: DictConfig) -> str:
    """The precision SFT trains in: method.sft_precision, or the hardware's when it is null or `hardware`."""
    m = cfg.method
    return cfg.hardware.precision if m.sft_precision in (None, "hardware") else m.sft_precision


def check(cfg: DictConfig) -> None:
    """method=intrinsic_dim's refusals, before the model loads: each names the key, the value and what is valid."""
    from intrinsic_dim.auc import NORMS  # numpy: imported only when a run is checked, not at composition
    m = cfg.method
    paradigm, _ = parse_variant(m.variant)
    if m.auc_norm not in NORMS:
        raise ConfigError(f"method.auc_norm={m.auc_norm!r}; valid: {', '.join(NORMS)}")
    if m.sft_loss not in SFT_LOSSES:
        raise ConfigError(f"method.sft_loss={m.sft_loss!r}; valid: full (the paper's whole-text loss), completion "
                          "(the label tokens only)")
    ok, valid = RANGES["store.dtype"]  # the activation store's dtypes
    if not ok(m.store_dtype):
        raise ConfigError(f"method.store_dtype={m.store_dtype!r}; valid: {valid}")
    precision = sft_precision(cfg)
    if paradigm == "sft" and precision not in SFT_PRECISIONS:
        raise ConfigError(f"method.sft_precision={m.sft_precision!r} gives {precision!r}; valid: hardware (fp32 or "
                          "bf16 there), fp32, bf16 (fp16 has no loss scaling here)")
