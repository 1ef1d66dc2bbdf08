"""Configs of reverse probing and their refusals before any work (torch-free: the registry imports this to validate
`method=reverse_probing*`). Tags: [P] the paper, [R] its official code, ours where neither says."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import DictConfig

from experiments.config import ConfigError, MethodConfig, ModelConfig, TaskConfig, load_group

VARIANTS = ("full", "trunc", "norm", "concat")  # what a source contributes per token [P §3.1, Fig. 1]
MODES = ("mean", "sum", "attention", "attention_literal")  # how the sources' features join [P §3.2]


@dataclass
class ReverseProbingConfig(MethodConfig):
    """method=reverse_probing: k frozen source encoders (method.sources, conf/model names) read every layer of every
    document from the activation store once; a run trains only the aggregator and the coreference head on the target
    task (task=winogrande-coref offline, conll2012 at paper scale). `model=` names the first source's
    architecture for the record; the sources list is what runs."""
    name: str = "reverse_probing"
    variant: str = "full"  # full | trunc | norm | concat [P §3.1, Fig. 1]
    sources: list[str] = field(default_factory=lambda: ["minilm-l6"])
    trunc: Optional[list[int]] = None  # variant=trunc: hidden_states index per source (one per source) [P Tables 1-3]
    # a layer per source name, for experiment files that sweep source sets at fixed per-source layers (a Hydra sweep
    # cannot pair two keys): method.trunc: ['${method.trunc_layers.${method.sources.0}}', ...]; read by nothing else
    trunc_layers: dict[str, int] = field(default_factory=dict)
    concat_n: Optional[int] = None  # variant=concat: the last n layers joined (4, 6, 12 in the paper) [P Table 1]
    aggregate: str = "mean"  # mean | sum | attention ([R] form) | attention_literal (the paper's formula) [P §3.2]
    key_size: int = 128  # attention keys/query width [R hidden_size]
    word_pooling: str = "mean"  # sub-tokens → words: mean | first [ours: sources with different tokenizers meet]
    gold_mentions: bool = True  # candidates = the corpus's gold mentions (WinoGrande, WSC); false: coref-hoi's spans
    # the head: coref-hoi `bert_base` [R]; the CPU tier shrinks ffnn_size
    ffnn_size: int = 3000
    feature_size: int = 20
    max_span_width: int = 30
    dropout: float = 0.3
    top_span_ratio: float = 0.4
    max_top_antecedents: int = 50
    max_segment_len: int = 384  # sub-tokens per segment [R english.384]
    max_training_segments: int = 11  # longer training documents: 11 consecutive segments at a random offset [R]
    # optimisation [R]: two optimisers, clipping 1.0 each; the aggregator sits in the encoder group
    head_lr: float = 1e-4  # Adam, eps 1e-6, no decay, linear decay to 0 over max_epochs x docs [P §3.3, R]
    aggregator_lr: float = 1e-5  # AdamW, eps 1e-6, wd 0.01, 10% warm-up then linear decay [R]
    aggregator_warmup: float = 0.1
    aggregator_weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_epochs: int = 100  # [P]
    min_epochs: int = 5  # [R]
    patience: int = 5  # epochs without a better dev CoNLL F1 before stopping, not before min_epochs; 0: never [P]
    docs_per_step: int = 1  # [R] one document a step; the CPU tier batches 3-mention documents [ours]
    feature_batch: int = 64  # segments per source forward when filling the activation store
    extra_eval: dict[str, str] = field(default_factory=dict)  # metric prefix -> task name, scored at the best epoch
    log_alpha: bool = True  # attention: mean α per source on dev after every epoch [R attention_logger, Fig. 9]


@dataclass
class SourceConfig(ReverseProbingConfig):
    """method=reverse_probing_source: build one frozen source encoder and save it into the asset cache as
    models/<method.save_as> (MANIFEST last, so an interrupted build is never used). kind=finetune: the suite's Full
    fine-tune of `model=` on `task=` (its own task score recorded: evidence the source learned its task).
    kind=coref_target: the CorefTarget upper bound [P §4]: the encoder trained with the coreference head on the
    target task (`task=` a coref task), then frozen."""
    name: str = "reverse_probing_source"
    kind: str = "finetune"  # finetune | coref_target | data (the coref task's offline data: reverse_probing.conll2012)
    save_as: str = ""  # the asset name the probes load (conf/model/<save_as>.yaml points at it)
    encoder_lr: float = 1e-5  # coref_target: the encoder's learning rate [coref-hoi bert_base]; the probe fields
    # above configure its head (the aggregator is the identity: one source, mean)


@dataclass
class CossimConfig(ReverseProbingConfig):
    """method=reverse_probing_cossim: Fig. 3, the mean cosine between each source's token embeddings and the
    CorefTarget encoder's (`method.reference`), padding masked, over the documents of one split."""
    name: str = "reverse_probing_cossim"
    reference: str = "minilm-l6-coref"
    split: str = "dev"
    layer: Optional[int] = None  # null: the last layer


@dataclass
class BenchConfig(ReverseProbingConfig):
    """method=reverse_probing_bench: one epoch of head-only training from the store vs one forward of the source
    encoders over the same documents, interleaved in one process (medians, the ratio)."""
    name: str = "reverse_probing_bench"
    repeats: int = 5
    warmup: int = 1


def check_variant(variant: str, num_layers: int, layer: int | None = None, concat_n: int | None = None) -> None:
    """The paper's combinations only: norm on the last layer, trunc at one layer, concat of the last n."""
    if variant not in VARIANTS:
        raise ValueError(f"method.variant={variant!r} is not one of {', '.join(VARIANTS)}")
    if variant == "trunc" and (layer is None or not 1 <= layer <= num_layers):
        raise ValueError(f"method.variant=trunc reads hidden_states[L] with 1 <= L <= {num_layers}; got "
                         f"method.trunc={layer!r}: give one layer per source")
    if variant == "concat" and (concat_n is None or not 1 <= concat_n <= num_layers):
        raise ValueError(f"method.variant=concat joins the last n layers, 1 <= n <= {num_layers}; got "
                         f"method.concat_n={concat_n!r}")


def sources_of(cfg: DictConfig) -> list[DictConfig]:
    if not cfg.method.sources:
        raise ConfigError("method.sources is empty: name at least one source model (conf/model), e.g. [minilm-l6]")
    return [load_group("model", name, ModelConfig, "method.sources") for name in cfg.method.sources]


def extra_tasks(cfg: DictConfig) -> dict[str, DictConfig]:
    tasks = {p: load_group("task", name, TaskConfig, f"method.extra_eval.{p}")
             for p, name in cfg.method.extra_eval.items()}
    for p, t in tasks.items():
        if t.type != "coref":
            raise ConfigError(f"method.extra_eval.{p}={t.name} is a {t.type} task; extra evaluations are coref tasks")
    return tasks


def layers_of(cfg: DictConfig, models: list[DictConfig]) -> list[int | None]:
    m = cfg.method
    if m.variant != "trunc":
        if m.trunc is not None:
            raise ConfigError(f"method.trunc={list(m.trunc)} applies to variant=trunc only (variant={m.variant}); "
                              "set method.trunc=null")
        return [None] * len(models)
    if m.trunc is None or len(m.trunc) != len(models):
        raise ConfigError(f"method.variant=trunc needs one layer per source: method.trunc={m.trunc} for "
                          f"{len(models)} source(s) {list(m.sources)}")
    return list(m.trunc)


def check(cfg: DictConfig) -> tuple[list[DictConfig], list[int | None], dict[str, DictConfig]]:
    """Refuse a probe the paper does not define; returns (the sources' model configs, the layer each reads under
    variant=trunc, the extra evaluation tasks by metric prefix)."""
    m = cfg.method
    if cfg.task.type not in ("coref", "qa"):
        raise ConfigError(f"method=reverse_probing trains a coreference head (or, on the stand-in target quoref, the "
                          f"suite's QA head): task={cfg.task.name} is {cfg.task.type}; use task=winogrande-coref "
                          "(offline), conll2012 (paper scale) or quoref")
    if cfg.task.type == "qa" and m.extra_eval:
        raise ConfigError(f"method.extra_eval={dict(m.extra_eval)} scores coref tasks; a qa target has none: set "
                          "method.extra_eval={}")
    models = sources_of(cfg)
    layers = layers_of(cfg, models)
    if m.aggregate not in MODES:
        raise ConfigError(f"method.aggregate={m.aggregate!r} is not one of {', '.join(MODES)}")
    for model, layer in zip(models, layers):
        try:
            check_variant(m.variant, model.num_layers, layer, m.concat_n)
        except ValueError as e:
            raise ConfigError(f"{e} (source {model.name})") from None
    if m.variant == "concat" and m.aggregate != "attention":
        raise ConfigError(f"method.variant=concat is combined with aggregate=attention only [P Table 1] (its value "
                          f"projections map n·d back to d); got aggregate={m.aggregate}")
    if m.concat_n is not None and m.variant != "concat":
        raise ConfigError(f"method.concat_n={m.concat_n} applies to variant=concat only; set method.concat_n=null")
    if m.aggregate != "attention" and len({x.hidden_size for x in models}) > 1:
        raise ConfigError(f"aggregate={m.aggregate} adds vectors of sources of widths "
                          f"{[x.hidden_size for x in models]}: use aggregate=attention")
    if m.word_pooling not in ("mean", "first"):
        raise ConfigError(f"method.word_pooling={m.word_pooling!r}: use mean or first")
    return models, layers, extra_tasks(cfg)
