"""Supervised fine-tuning with LoRA [P]: peft adapters on q/k/v/o of every layer, a causal-LM loss over the whole
`input\\noutput` text (the official trl.SFTTrainer has no completion-only collator [C]), HF-Trainer defaults for the
rest (AdamW without weight decay, linear warmup then linear decay, gradient clipping at 1.0), and a callback after
every epoch, where the caller measures accuracy and ID on a checkpoint. Plain torch + peft; no I/O.

Why a loop of its own beside `experiments.train.fit` (which could take this optimizer and the HF schedule, warmup
rounded up and a first step at lr 0, as an `Optimization`): fit trains on `model(**batch).loss` and keeps the
weights that score best on an objective it evaluates; this loop can train on the label tokens alone, projecting onto
the vocabulary only at those positions (`completion_loss`: a 262k-row lm_head over every position would dominate),
and it keeps every epoch's weights, handing each to the caller in eval mode and outside the training time
(`on_epoch`) to be measured and cached, with no selection and no early stopping. The optimizer step is fit's own
(`experiments.train.optimizer_step`)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from experiments.data import epoch_order
from experiments.optim import adamw, linear_schedule, warmup_steps
from experiments.timing import StepTimer
from experiments.train import TrainLog, optimizer_step
from intrinsic_dim.extract import backbone, head


def add_lora(lm: nn.Module, r: int, alpha: int, dropout: float, targets: Sequence[str]) -> nn.Module:
    """The causal LM wrapped with fresh LoRA adapters (B = 0: the wrapped model computes what the base did)."""
    from peft import LoraConfig, get_peft_model
    missing = [t for t in targets if not any(n.endswith(t) for n, _ in lm.named_modules())]
    if missing:
        raise ValueError(f"LoRA targets {missing} name no module of {type(lm).__name__}; "
                         "set method.lora_targets to its attention projection names")
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets), bias="none",
                     task_type="CAUSAL_LM")
    return get_peft_model(lm, cfg)


def lora_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights alone (a CPU copy): what one checkpoint is."""
    from peft import get_peft_model_state_dict
    return {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(model).items()}


def load_lora_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    from peft import set_peft_model_state_dict
    res = set_peft_model_state_dict(model, state)
    unexpected = getattr(res, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"checkpoint has {len(unexpected)} keys this model lacks, e.g. {unexpected[0]}")


def batches(texts_ids: Sequence[list[int]], batch_size: int, seed: int, epoch: int, group_by_length: bool,
            pad_id: int, prompt_lens: Sequence[int] | None = None) -> list[dict[str, torch.Tensor]]:
    """One epoch of right-padded batches (labels = input ids, pads -100; with `prompt_lens` the first that many
    tokens of each text are -100 too: the completion-only loss). Reshuffled per epoch from the seed;
    group_by_length sorts within windows of 50 batches, then shuffles the batches (less padding, same epochs)."""
    chunks = epoch_order([len(t) for t in texts_ids], batch_size, seed, group_by_length)(epoch)
    out = []
    for chunk in chunks:
        T = max(len(texts_ids[i]) for i in chunk)
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)
        mask = torch.zeros(len(chunk), T, dtype=torch.long)
        for b, i in enumerate(chunk):
            ids[b, :len(texts_ids[i])] = torch.as_tensor(texts_ids[i])
            mask[b, :len(texts_ids[i])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        if prompt_lens is not None:
            for b, i in enumerate(chunk):
                labels[b, :prompt_lens[i]] = -100
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def completion_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The causal-LM loss (mean cross-entropy of each labelled token given what precedes it) with the vocabulary
    projection computed only where a label is predicted: a 262k-row lm_head over every position would dominate."""
    labels = batch["labels"]
    h = backbone(model)(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    target = labels[:, 1:]
    where = target != -100
    if not bool(where.any()):
        raise ValueError("a batch has no labelled token: every completion is empty")
    logits = head(model)(h[:, :-1][where]).float()
    cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if cap:  # Gemma-style soft-capping, as the model's own forward applies it
        logits = torch.tanh(logits / cap) * cap
    return nn.functional.cross_entropy(logits, target[where])


PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}  # fp16 would need a GradScaler; bf16 has fp32's range


def step_loss(model: nn.Module, batch: dict[str, torch.Tensor], precision: str = "fp32",
              prompt_lens: Sequence[int] | None = None) -> torch.Tensor:
    """One batch's loss under `precision` (autocast over fp32 master weights; fp32 = autocast off)."""
    if precision not in PRECISIONS:
        raise ValueError(f"SFT precision {precision!r}; valid: {', '.join(PRECISIONS)} (set method.sft_precision)")
    device = batch["input_ids"].device
    dtype = PRECISIONS[precision]
    with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        return model(**batch).loss if prompt_lens is None else completion_loss(model, batch)


def set_checkpointing(model: nn.Module, on: bool) -> None:
    """Gradient checkpointing of the decoder blocks (recomputed in backward: activations of one block at a time
    instead of all); non-reentrant, so no input needs requires_grad under frozen embeddings. Same gradients."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if on:
        base.activation_checkpointing_enable({"use_reentrant": False})
    elif getattr(base, "is_activation_checkpointing", False):
        base.activation_checkpointing_disable()


def train(model: nn.Module, texts_ids: Sequence[list[int]], *, epochs: int, lr: float, batch_size: int,
          warmup_ratio: float, seed: int, device: torch.device, pad_id: int, group_by_length: bool = True,
          max_grad_norm: float = 1.0, on_epoch: Callable[[int, int], None] | None = None,
          log: Callable[[str], None] | None = None, prompt_lens: Sequence[int] | None = None,
          log_metrics: Callable[[dict, int], None] | None = None, precision: str = "fp32",
          gradient_checkpointing: bool = False) -> dict[str, float]:
    """Train the LoRA parameters for `epochs` epochs; `on_epoch(epoch, step)` after each (model in eval mode
    during the call, back in train mode after). Returns timing and the last loss. `prompt_lens`: the loss covers
    only the tokens after each text's prompt (completion_loss); None: the whole text (the model's own loss).
    `log_metrics`: the run's training curves (experiments.train.TrainLog: loss, learning rate, examples/s, tokens/s).
    `precision`: fp32, or bf16 autocast; `gradient_checkpointing`: recompute block activations in backward."""
    if precision not in PRECISIONS:
        raise ValueError(f"SFT precision {precision!r}; valid: {', '.join(PRECISIONS)} (set method.sft_precision)")
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters: wrap the model with add_lora first")
    n_batches = math.ceil(len(texts_ids) / batch_size)
    total = n_batches * epochs
    opt = adamw(model, lr, weight_decay=0.0)  # HF Trainer: torch's default AdamW, no decay [C]
    sched = linear_schedule(opt, warmup_steps(warmup_ratio, total, hf=True), total, hf=True)
    scaler = torch.amp.GradScaler(device.type, enabled=False)  # fp32 or bf16: no loss scaling, every step updates
    timer = StepTimer(device)
    curve = TrainLog(log_metrics, total)
    set_checkpointing(model, gradient_checkpointing)
    step, loss_v = 0, float("nan")
    try:
        for epoch in range(1, epochs + 1):
            model.train()
            for batch in batches(texts_ids, batch_size, seed, epoch, group_by_length, pad_id, prompt_lens):
                curve.batch(batch)
                lrs = TrainLog.rates(opt)
                with timer:
                    batch = {k: v.to(device) for k, v in batch.items()}
                    loss = step_loss(model, batch, precision, prompt_lens)
                    loss.backward()
                    if max_grad_norm:
                        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                    if optimizer_step([opt], scaler):
                        sched.step()
                    opt.zero_grad(set_to_none=True)
                step += 1
                loss_v = float(loss.detach())
                curve.step(step, loss_v, lrs, **{"train/epoch": step / n_batches})
            if log:
                log(f"sft epoch {epoch}/{epochs}: step {step}, loss {loss_v:.4f}, {timer.total_s:.0f} s training")
            if on_epoch:
                model.eval()
                with curve.paused():  # the per-epoch measurement is not training time
                    on_epoch(epoch, step)
    finally:
        set_checkpointing(model, False)
    model.eval()
    return {"train_s": timer.total_s, "step_ms": timer.median_ms, "steps": step, "last_loss": loss_v}
