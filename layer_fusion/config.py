"""Configs of depth-wise layer fusion (torch-free: the registry imports this to validate `method=layer_fusion*`).
Tags: [D] the DWAtt paper / its spec (layer_fusion/SPEC_DWATT.md), [P] the P-32 paper / its spec
(layer_fusion_p32.md), ours where neither says."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from experiments.config import MethodConfig

PROTOCOLS = ("fewshot", "p32")
REGIMES = ("fe", "ft", "lora")
FUSIONS = ("last", "mean", "scalar_mix", "concat", "dwatt", "deeper")
# P-32 Table 2 scores each GLUE task by its own metric [P §2]: MCC for CoLA (its caption says accuracy, its numbers are
# MCC), F1 of the positive class for MRPC and QQP, Spearman for STS-B, accuracy for the rest; MNLI matched and
# mismatched come from one model (mnli-mm: the mnli task's eval_mismatched split)
PAPER_METRICS = {"rte": "accuracy", "mrpc": "f1_binary", "cola": "mcc", "stsb": "spearman", "sst2": "accuracy",
                 "qnli": "accuracy", "qqp": "f1_binary", "mnli": "accuracy", "mnli-mm": "accuracy"}
# softmax(λ) entropy / log L at or above this: λ never left uniform, so P-32 is Avg.Pool and its weights say nothing
LAMBDA_UNIFORM = 0.999
HEADS = ("paper", "fresh")


@dataclass
class LayerFusionConfig(MethodConfig):
    """method=layer_fusion: a backbone whose block outputs z_1..z_L are fused (layer_fusion/fusion.py) before the task
    head, trained under one regime: fe (backbone frozen: every block output read from the activation store, so only
    the fusion and the head train), ft (everything trains) or lora (peft adapters on the backbone; fusion and head
    train in full). protocol fewshot (DWAtt): N·C training sentences drawn uniformly from the train split, one epoch
    budget per run, the best dev F1 seen over the run. protocol p32: classification on the task's train split, the
    checkpoint chosen on dev, eval scored once."""
    name: str = "layer_fusion"
    variant: str = "default"
    protocol: str = "fewshot"
    fusion: str = "dwatt"  # last (Base) | mean | scalar_mix (P-32) | concat | dwatt | deeper (Base+n)
    regime: str = "fe"
    extra_layers: Optional[int] = None  # deeper: blocks added; null: 2 for >= 24-layer backbones, else 1 [D §4.1]
    shots: int = 8  # fewshot: N; the run trains on N·C sentences, C = the task's entity types [D §5.2]
    classes: Optional[int] = None  # fewshot: C; null: the number of B- tags of the task
    evals_per_run: int = 10  # fewshot: dev evaluations spread over the budget (the paper does not say) [ours]
    # cls/pair tasks: paper = the head HF's *ForSequenceClassification puts on the backbone [P §5.2] (BERT: its
    # pretrained pooler + dropout + a new linear; RoBERTa: a new dense+tanh+linear; decoders: a bias-free linear on the
    # last real token; experiments.models.paper_head); fresh = a new dense+tanh+linear on every backbone
    head: str = "paper"
    truncate: Optional[int] = None  # p32 §5.1: keep only the first n blocks (the fusion then reads z_1..z_n)
    prenorm_handling: str = "as_is"  # decoders [P §5.1]: as_is (HF hidden_states) | norm_each | norm_pooled
    scalar_mix_init: float = 0.0  # λ at init: 0 = uniform = Avg.Pool at step 0 [P, ours]
    lambda_lr: Optional[float] = None  # λ's own learning rate; null: the global one [P §6 future work]
    # p32 on a GLUE task chooses its checkpoint on the metric the paper reports it by [P §2] (PAPER_METRICS): the p32
    # experiments set task.objective from this map (conf/task/mrpc.yaml keeps accuracy for PEMA); check() refuses a
    # GLUE task whose objective differs
    paper_objectives: dict[str, str] = field(default_factory=lambda: {
        t: f"eval/{m}" for t, m in PAPER_METRICS.items() if t != "mnli-mm"})
    gamma_q: float = 0.5  # DWAtt query bottleneck [D Table 4]
    gamma_v: float = 0.5  # DWAtt value bottleneck [D Table 4]
    d_pos: int = 24  # DWAtt static key width [D Table 4]
    dwatt_scale: bool = False  # 1/sqrt(d) on DWAtt's scores; the paper writes none [D eq. 7]
    lora_r: int = 16  # lora regime; the P-32 paper gives no LoRA settings [P §2]
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    feature_batch: int = 64  # fe: examples per backbone forward when filling the activation store


@dataclass
class LayerFusionParamsConfig(MethodConfig):
    """method=layer_fusion_params: new-parameter counts of every fusion for each named backbone, from configs alone
    (modules built on the meta device: no weights, no data) [D Table 2]."""
    name: str = "layer_fusion_params"
    variant: str = "default"
    models: list[str] = field(default_factory=lambda: ["roberta-large", "roberta-base", "minilm-l6", "e5-small"])


@dataclass
class LayerFusionBenchConfig(LayerFusionConfig):
    """method=layer_fusion_bench: one few-shot feature-extraction run trained from the activation store vs the same
    run recomputing the frozen backbone every step, side by side in one process (steps/s, the ratio)."""
    name: str = "layer_fusion_bench"
    steps: int = 60  # timed optimizer steps per arm (after warm-up)
    warmup: int = 5
    repeats: int = 3  # interleaved rounds; medians
