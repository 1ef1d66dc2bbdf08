"""Configs of reverse probing (torch-free: the registry imports this to validate `method=reverse_probing*`).
Tags: [P] the paper, [R] its official code (spec reverse_probing/SPEC.md), ours where neither says."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from experiments.config import MethodConfig


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
    patience: int = 5  # early stopping on dev CoNLL F1 [P]
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
    CorefTarget encoder's (`method.reference`), padding masked [S §5.8], over the documents of one split."""
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
