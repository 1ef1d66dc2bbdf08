"""Configs of the Efficient Adaptive Transformer and their refusals (torch-free: the registry imports this to
validate `method=eat*` before any work). Tags: [P] the paper, [R] the official code, ours: the suite's choice."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from experiments.config import ConfigError, MethodConfig, TaskConfig, load_group

VARIANTS = ("dense", "eat", "paper_code")  # method=eat's training arms
BENCH_VARIANTS = ("latency", "length", "scaling")  # method=eat_bench's benchmarks
PRUNE_RULES = ("paper", "repo")  # keep rules (eat/prune.py)
SCORERS = ("l2", "attention")  # token scores for pruning (eat/prune.py)


@dataclass
class EatConfig(MethodConfig):
    """method=eat: fine-tune one arm on a classification task, then calibrate its exit head and choose tau on dev,
    and score eval once. variant: dense (the encoder fine-tuned alone: the baseline), eat (physical pruning, banded
    local attention, per-example exit: what the three ideas are when built for real) or paper_code (the official
    code's behaviour: zero-masked pruning under its keep rule, a dense (T, T) window mask, batch-level exit).
    Trained weights are cached (keyed by everything that determines them), so method=eat_bench reuses them."""
    name: str = "eat"
    variant: str = "eat"
    exit_layer: Optional[int] = 4  # the early-exit head [P]; null: none
    # the patience rule's head [P §7; absent from the code R], built and trained only when patience=true (read only
    # then); null: the layer below exit_layer (3 at the paper's exit layer 4)
    patience_layer: Optional[int] = None
    exit_weight: float = 0.3  # lambda of the exit head's CE (Eq. 1: CE_L + 0.3 CE_4) [P, R]; the patience head's too
    pooling: Optional[str] = None  # what every head reads: cls (raw [CLS] [R]) | mean; null: model.pooling
    prune_after: list[int] = field(default_factory=lambda: [2, 4])  # [P]
    prune_ratio: float = 0.3  # [P]
    prune_rule: str = "paper"  # paper: 1 + ceil(0.7 (t-1)) | repo: ceil(0.7 t) (paper_code uses repo)
    scorer: str = "l2"  # l2 [P] | attention (attention mass received, the Alg. 1 alternative)
    window: Optional[int] = 16  # ±16 positions + global [CLS] [P, R]; null: full attention
    anneal: str = "epoch"  # epoch: epoch e of E prunes p (e-1)/(E-1) (epoch 1 none) [P §4, R] | none: p throughout
    taus: list[float] = field(default_factory=lambda: [0.8, 0.85, 0.9, 0.95])  # swept on dev [P]
    # ours: thresholds off the paper's grid, scored on eval for the frontier only (extra.frontier_extension, each
    # point labelled); never chosen on dev, never the headline
    extension_taus: list[float] = field(default_factory=list)
    tau_tolerance: float = 1.0  # ours: the smallest tau whose dev accuracy is within this many points of no exit
    patience: bool = False  # exit only when the patience head agrees [P §7]
    calibrate: bool = True  # temperature-scale the exit head on dev when its ECE exceeds ece_threshold [P §7.2]
    ece_threshold: float = 0.02  # [P]
    ece_bins: int = 15  # [P]
    distill: bool = False  # KD from the dense arm (same model, same recipe) on the final head [P Eq. 2; not in R]
    distill_temperature: float = 2.0  # [P]
    distill_mu: float = 0.5  # [P]
    checkpoint_dir: Optional[str] = None  # default: $STRATA_CACHE/eat-checkpoints


@dataclass
class EatBenchConfig(EatConfig):
    """method=eat_bench: speed measured side by side in one process (the suite's interleaved timing).
    variant latency: per-example latency (p50/p90/p99) at batch 1 and throughput at `batch_size`, for the dense arm
    (our loop and the Hugging Face forward), every subset of EAT's three components on the trained EAT weights (the
    ablation the paper lacks), the paper-code mode and `baseline_model` (a shallower encoder fine-tuned as the dense
    arm: the DistilBERT-style baseline). variant length: the same at length, the arms reading `long_task`'s
    documents zero-shot (accuracy, speed and retention at up to 512 tokens). variant scaling: cost vs sequence length
    on a random-init encoder of `scaling_shape` (the packaged encoders stop at 512 positions), dense vs EAT vs
    paper-code, log-log slopes."""
    name: str = "eat_bench"
    variant: str = "latency"
    baseline_model: Optional[str] = "minilm-l3"  # conf/model/<name>; null: no baseline arm
    # the paper's latency is the average of 3 timing runs with different random seeds [P §6]: each seed here draws
    # its own timed examples and their order (the trained weights are cfg.seed's; training three seeds would triple
    # the CPU tier). length: each seed times its own 1/len(timing_seeds) share of the documents.
    timing_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    n_latency: int = 100  # eval examples timed one at a time per timing seed (each contender in turn on each)
    warmup: int = 20  # untimed examples first (per timing seed)
    n_dev_latency: int = 100  # dev examples timed to choose the best component subset (eat:best) [ours]
    batch_size: int = 32  # throughput [P]
    throughput_rounds: int = 3  # interleaved passes over each seed's timed examples in batches
    bootstrap: int = 1000  # resamples of the timed examples for the speed-up intervals
    long_task: str = "movie-reviews"  # length: conf/task/<name> read zero-shot by the arms trained on `task`
    n_long: int = 100  # length: its eval documents timed and scored
    lengths: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096])  # scaling
    repeats: int = 5  # scaling: timed rounds per length (medians)
    scaling_shape: dict = field(default_factory=lambda: {"hidden_size": 256, "num_hidden_layers": 4,
                                                         "num_attention_heads": 4, "intermediate_size": 1024})


def patience_layer_of(m: DictConfig) -> int | None:
    """The layer of the patience head, or None: it exists only for the patience rule (method.patience=true)."""
    if m.variant == "dense" or not m.patience:
        return None
    return m.patience_layer if m.patience_layer is not None else m.exit_layer - 1


def check(cfg: DictConfig) -> None:
    """Refusals before any work, for method=eat (one training arm) and method=eat_bench (the arms it trains)."""
    if cfg.method.name == "eat_bench":
        _check_bench(cfg)
    else:
        _check_arm(cfg)


def _check_arm(cfg: DictConfig) -> None:
    m = cfg.method
    if m.variant not in VARIANTS:
        raise ConfigError(f"method.variant={m.variant!r} is not one of {', '.join(VARIANTS)}")
    if cfg.task.type not in ("cls", "pair"):
        raise ConfigError(f"method={m.name} classifies sentences (pairs); task={cfg.task.name} is type "
                          f"{cfg.task.type}: use a cls/pair task (rt-polarity, vitaminc, movie-reviews)")
    if m.anneal not in ("epoch", "none"):
        raise ConfigError(f"method.anneal={m.anneal!r} is not one of epoch, none")
    if not m.taus or any(not 0 < t <= 1 for t in m.taus):
        raise ConfigError(f"method.taus={list(m.taus)}: give thresholds in (0, 1]")
    ext = list(m.get("extension_taus") or [])
    if any(not 0 < t <= 1 for t in ext) or set(ext) & set(m.taus):
        raise ConfigError(f"method.extension_taus={ext}: give thresholds in (0, 1] that are not already in "
                          f"method.taus={list(m.taus)}")
    if m.variant != "dense" and m.exit_layer is not None and m.exit_layer >= cfg.model.num_layers:
        raise ConfigError(f"method.exit_layer={m.exit_layer} but model={cfg.model.name} has {cfg.model.num_layers} "
                          "layers: pick a layer below the last")
    if m.variant != "dense":  # the settings the arm's model runs under (dense runs with all three off)
        for key, valid in (("prune_rule", PRUNE_RULES), ("scorer", SCORERS)):
            if m[key] not in valid:
                raise ConfigError(f"method.{key}={m[key]!r} is not one of {', '.join(valid)}")
        if not 0.0 <= m.prune_ratio < 1.0:
            raise ConfigError(f"method.prune_ratio={m.prune_ratio} must be in [0, 1)")
        if m.window is not None and m.window < 1:
            raise ConfigError(f"method.window={m.window} must be >= 1 or null (full attention)")
    if m.variant != "dense" and m.patience:
        if m.exit_layer is None:
            raise ConfigError("method.patience=true compares the patience head with the exit head, but "
                              "method.exit_layer=null: set method.exit_layer or method.patience=false")
        p = patience_layer_of(m)
        if not 1 <= p < m.exit_layer:
            raise ConfigError(f"method.patience_layer={p} must be in 1..{m.exit_layer - 1} (below method.exit_layer="
                              f"{m.exit_layer}): set method.patience_layer to a layer below the exit")


def _check_bench(cfg: DictConfig) -> None:
    m = cfg.method
    if m.variant not in BENCH_VARIANTS:
        raise ConfigError(f"method.variant={m.variant!r} is not one of {', '.join(BENCH_VARIANTS)} for "
                          "method=eat_bench (the training arms dense | eat | paper_code are method=eat's)")
    seeds = list(m.timing_seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"method.timing_seeds={seeds}: give one or more distinct seeds (the paper averages three "
                          "timing runs: [0, 1, 2])")
    if m.variant == "scaling":  # a random-init encoder: no trained arm
        return
    _check_arm(arm(cfg, "eat"))
    if m.variant == "length":
        long_task = load_group("task", m.long_task, TaskConfig, "method.long_task")
        if len(long_task.label_names) != len(cfg.task.label_names):
            raise ConfigError(f"method.long_task={m.long_task} has {len(long_task.label_names)} labels, task="
                              f"{cfg.task.name} {len(cfg.task.label_names)}: the arms cannot read it")


def arm(cfg: DictConfig, variant: str, model: DictConfig | None = None) -> DictConfig:
    """The method=eat config of one training arm the benchmark reads (on `model`, default cfg.model)."""
    out = OmegaConf.merge(cfg, {"method": {"variant": variant, "name": "eat"}})
    if model is not None:
        out.model = model
    return out
