"""Schemas of PEMA's own methods (torch-free: the registry imports this while composing configs).

Tags: [P] the paper (section/table), [R] the official code (not in the paper), ours = a choice of this suite where
the paper leaves one open. The `pema:` option every fine-tuning method composes with is `pema.options.PemaConfig`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from experiments.config import MethodConfig


@dataclass
class PemaVocabConfig(MethodConfig):
    """method=pema_vocab: V' of one tokenizer (the model's) on one task's splits; Fig. 2, Tables 1-4 rows.
    No weights are loaded: only the tokenizer and the model's architecture config (|V| = embedding rows, d, N)."""
    name: str = "pema_vocab"
    variant: str = "default"
    # [R] run_glue: truncation to the task's max length; false = raw counts (Fig. 2: the paper does not say, and
    # GPT-2's tokenizer adds no special tokens, so its plot most likely counts untruncated text)
    truncation: bool = True
    special_tokens: bool = True  # [R] ids include [CLS]/[SEP]/<s>; false = text tokens only (Fig. 2, as above)
    # [R] '+'-joined hub config names concatenated as one corpus (XNLI languages, e.g. en+de); "" = task.hf.name
    hub_configs: str = ""
    # ours: '+'-joined names of further conf/task configs whose splits join the corpus (offline analogue of Table 4)
    union: str = ""
    # classification-head size counted in N; None = the task's label count (2 if it has none)
    num_labels: Optional[int] = None
    zero_examples: int = 12  # ours: Table-1-style zero-count tokens listed in the run record (longest first)
    # ours: count V' with this offline model's tokenizer (conf/model/<name>), which must have the model's vocabulary;
    # for a hub model whose architecture (|V|, d, N) is in its from_config
    tokenizer_of: Optional[str] = None
    # ours: keep per-split counts in $STRATA_CACHE/pema/counts (keyed by tokenizer, data, tokenization)
    cache: bool = True


@dataclass
class PemaSizesConfig(MethodConfig):
    """method=pema_sizes: |V|, N_emb, N and N_emb/N of the model from its architecture config alone (Tables 5/6
    [P App. A]); N counts AutoModelForSequenceClassification with its head [R ParameterTracker]."""
    name: str = "pema_sizes"
    variant: str = "default"
    num_labels: int = 2  # head size in N [R]; Tables 5/6 do not depend on it at their rounding (0.1M)


@dataclass
class PemaBenchConfig(MethodConfig):
    """method=pema_bench: PEMA preparation time, optimizer-step time with and without PEMA (interleaved in one
    process), and bytes of weights + gradients + AdamW state, analytical and measured (Table 9 style [P App. F];
    memory: ours)."""
    name: str = "pema_bench"
    variant: str = "default"
    steps: int = 8  # ours: optimizer steps per timed repeat (one repeat = `steps` steps of one arm)
    repeats: int = 5  # ours: interleaved repeats per arm (median reported); the first round is a warm-up
    prepare_repeats: int = 5  # ours: repeats of the PEMA preparation (count + map + reduce), median reported
    memory_steps: int = 2  # ours: optimizer steps per arm in the memory measurement (AdamW state exists after step 1)
    # ours: rounds of (full, PEMA) memory measurements; the median of the paired differences is reported
    memory_rounds: int = 3


@dataclass
class PemaScoresConfig(MethodConfig):
    """method=pema_scores: fine-tuning without and with PEMA in one process from one built model, one batch order and
    one RNG state (Table 10 [P App. E]); records both arms' scores and the largest |Δ logit| and |Δ weight| between
    them (ours). Reads the `pema:` option's settings (splits, keep_special, tied, offload); `pema.enabled` plays no
    part: the PEMA arm always has it."""
    name: str = "pema_scores"
    variant: str = "default"
    # ours: torch.use_deterministic_algorithms (warn_only) and CUBLAS_WORKSPACE_CONFIG for the run (GPU; CPU kernels
    # already are)
    deterministic: bool = False
    # ours: train the full arm twice and record the same maxima between those two runs (pema/floor_*): what
    # non-deterministic kernels (GPU) alone produce
    noise_floor: bool = False
