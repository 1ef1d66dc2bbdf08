"""Configs of depth-wise layer fusion and their refusals before any work (torch-free: the registry imports this to
validate `method=layer_fusion*`). Tags: [D] the DWAtt paper, [P] the P-32 paper, ours where neither says."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import DictConfig

from experiments.config import ConfigError, MethodConfig

PROTOCOLS = ("fewshot", "p32")
REGIMES = ("fe", "ft", "lora")
FUSIONS = ("last", "mean", "scalar_mix", "concat", "dwatt", "deeper")
# P-32 scores each GLUE task by its own metric [P Table 2]: MCC for CoLA (its caption says accuracy, its numbers are
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
    # cls/pair tasks: paper = the head HF's *ForSequenceClassification puts on the backbone [P §3] (BERT: its
    # pretrained pooler + dropout + a new linear; RoBERTa: a new dense+tanh+linear; decoders: a bias-free linear on the
    # last real token; experiments.models.paper_head); fresh = a new dense+tanh+linear on every backbone
    head: str = "paper"
    truncate: Optional[int] = None  # p32 [P §5.1]: keep only the first n blocks (the fusion then reads z_1..z_n)
    prenorm_handling: str = "as_is"  # decoders [ours]: as_is (HF hidden_states) | norm_each | norm_pooled
    scalar_mix_init: float = 0.0  # λ at init: 0 = uniform = Avg.Pool at step 0 [P, ours]
    lambda_lr: Optional[float] = None  # λ's own learning rate; null: the global one [P §5.2, future work]
    # p32 on a GLUE task chooses its checkpoint on the metric the paper reports it by [P Table 2] (PAPER_METRICS): the
    # p32 experiments set task.objective from this map (conf/task/mrpc.yaml keeps accuracy for PEMA); check() refuses
    # a GLUE task whose objective differs
    paper_objectives: dict[str, str] = field(default_factory=lambda: {
        t: f"eval/{m}" for t, m in PAPER_METRICS.items() if t != "mnli-mm"})
    gamma_q: float = 0.5  # DWAtt query bottleneck [D Table 4]
    gamma_v: float = 0.5  # DWAtt value bottleneck [D Table 4]
    d_pos: int = 24  # DWAtt static key width [D Table 4]
    dwatt_scale: bool = False  # 1/sqrt(d) on DWAtt's scores; the paper writes none [D eq. 7]
    lora_r: int = 16  # lora regime; the P-32 paper gives no LoRA settings [P §4]
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


def check(cfg: DictConfig) -> None:
    """Refusals before any work, for method=layer_fusion (one run), method=layer_fusion_bench (the run it times
    twice) and method=layer_fusion_params (the models it counts)."""
    if cfg.method.name == "layer_fusion_params":
        _check_params(cfg)
        return
    _check_run(cfg)
    if cfg.method.name == "layer_fusion_bench":
        _check_bench(cfg)


def _check_run(cfg: DictConfig) -> None:
    m, task, model = cfg.method, cfg.task, cfg.model
    for key, value, valid in (("protocol", m.protocol, PROTOCOLS), ("regime", m.regime, REGIMES),
                              ("fusion", m.fusion, FUSIONS), ("head", m.head, HEADS)):
        if value not in valid:
            raise ConfigError(f"method.{key}={value!r} is not one of {', '.join(valid)}")
    want = ("ner",) if m.protocol == "fewshot" else ("cls", "pair")
    if task.type not in want:
        raise ConfigError(f"method.protocol={m.protocol} needs a {' or '.join(want)} task; task={task.name} is "
                          f"{task.type} (fewshot: e.g. task=wnut16; p32: task=rt-polarity, vitaminc, winogrande)")
    causal = model.get("kind") == "causal"
    token = "last" if causal else "cls"
    if m.head == "paper" and task.type in ("cls", "pair") and model.pooling != token:
        # the frozen probe pools each block by model.pooling before the head: it must be the token HF's head reads
        raise ConfigError(f"method.head=paper reads {'the last real' if causal else 'the first'} token, as Hugging "
                          f"Face's head does, but model.pooling={model.pooling} (model={model.name}): set "
                          f"model.pooling={token}, or method.head=fresh")
    if m.fusion == "deeper" and causal:
        raise ConfigError(f"method.fusion=deeper adds encoder blocks; model={model.name} is a decoder (the P-32 "
                          "paper has no deeper baseline): use last, mean, scalar_mix, concat or dwatt")
    if m.truncate is not None and not 1 <= m.truncate <= model.num_layers:
        raise ConfigError(f"method.truncate={m.truncate} must lie in 1..{model.num_layers} (model={model.name}) "
                          "or be null")
    if m.protocol == "fewshot" and m.shots < 1:
        raise ConfigError(f"method.shots={m.shots}: N must be >= 1")
    if m.regime == "fe" and m.protocol == "fewshot" and cfg.train.patience:
        raise ConfigError(f"train.patience={cfg.train.patience}: the few-shot protocol trains each epoch budget to "
                          "its end and reports the best dev score seen; set train.patience=0")
    if m.lambda_lr is not None and m.fusion != "scalar_mix":
        raise ConfigError(f"method.lambda_lr={m.lambda_lr} applies to fusion=scalar_mix only (fusion={m.fusion})")
    # P-32 on a GLUE task: the checkpoint is chosen on the metric the paper reports the task by (MRPC: F1, not the
    # accuracy its task config keeps for PEMA)
    paper = m.paper_objectives.get(task.name) if m.protocol == "p32" else None
    if paper is not None and task.objective != paper:
        raise ConfigError(f"task.objective={task.objective}: P-32 reports task={task.name} by {paper}, so its "
                          f"checkpoint is chosen on it: set task.objective={paper} (the p32 experiments set it from "
                          "method.paper_objectives)")
    # both protocols choose on dev (fewshot: the paper's best dev F1) and score eval once: without a dev split the
    # run would choose on the split it reports, so a config without one is refused here, before any work
    if "dev" not in task.splits and not task.get("dev_from_train"):
        raise ConfigError(f"task={task.name} has no dev split (task.splits={dict(task.splits)}, task.dev_from_train="
                          "null): name one in task.splits (e.g. dev: validation) or set task.dev_from_train=0.1")


def _check_bench(cfg: DictConfig) -> None:
    m = cfg.method
    if m.protocol != "fewshot" or m.regime != "fe":
        raise ConfigError(f"method=layer_fusion_bench times the few-shot feature-extraction run; got "
                          f"method.protocol={m.protocol}, method.regime={m.regime} (set fewshot and fe)")


def _check_params(cfg: DictConfig) -> None:
    if not cfg.method.models:
        raise ConfigError("method.models is empty: name model configs to count, e.g. [roberta-large, roberta-base]")
