"""Prediction and scoring for each task type: batched forward over encoded eval features, then the task's
metrics on the original examples (NER at word level, QA at answer-text level), as `eval/<metric>` keys, with the
per-example scores behind them (`Scores.per_example`) and, for classification, the majority-class baselines."""
from __future__ import annotations

from collections.abc import Callable

import datasets
import numpy as np
import torch
from omegaconf import DictConfig

from experiments import metrics
from experiments.batches import TokenInputs, eval_batches
from experiments.data import is_regression, tag_ids
from experiments.progress import Progress

Inputs = Callable[[int, int], dict[str, torch.Tensor]]


class Scores(dict):
    """`eval/<metric>` -> value, plus `per_example`: the per-example quantities the metrics are means or sums of,
    in eval-example order (experiments.evidence.claims bootstraps over them; a run record keeps them as
    record["per_example"]["eval"]):
      cls, pair: {"pred": [class id], "label": [class id]} (none for a regression)
      ner: {"tp", "fp", "fn"} entities per sentence (seqeval) and {"token_tp", "token_fp", "token_fn"}
      qa: {"em": [0-100], "f1": [0-100]} per question
    It travels with the metrics it belongs to, so the trainer's best-checkpoint choice keeps the matching one."""
    per_example: dict[str, list]

    def as_split(self, split: str) -> "Scores":
        """The same scores under another split's prefix (`dev/accuracy`); per-example scores stay with `eval`."""
        out = Scores({f"{split}/{k.split('/', 1)[1]}": v for k, v in self.items()})
        out.per_example = self.per_example
        return out


def token_inputs(features: datasets.Dataset, pad_id: int) -> TokenInputs:
    """(start, stop) -> the padded model inputs of features[start:stop] (`experiments.batches.INPUTS`)."""
    return TokenInputs(features, pad_id)


def forward_logits(model, n: int, inputs: Inputs, batch_size: int, device, num_workers: int = 0) -> list[np.ndarray]:
    """Logits per feature (unpadded along the sequence for token-level heads). `inputs(i, j)` gives the model
    inputs of features i..j-1 (token ids, or anything else the model takes, e.g. cached hidden states); token inputs
    are padded by `num_workers` DataLoader workers (experiments.batches), pinned for a CUDA device."""
    pin = torch.device(device).type == "cuda"
    if isinstance(inputs, TokenInputs) and n == len(inputs.rows):
        batches = inputs.loader(batch_size, num_workers, pin)
    else:
        batches = eval_batches(inputs, n, batch_size, num_workers, pin)
    out = []
    with Progress(n, "evaluate", unit="ex") as bar:
        for batch in batches:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            logits = model(**batch).logits.float().cpu().numpy()
            lengths = batch["attention_mask"].sum(1).tolist()
            out.extend(lg if lg.ndim == 1 else lg[:t] for lg, t in zip(logits, lengths))
            bar.update(len(logits))
    return out


def evaluate(model, features: datasets.Dataset, examples: datasets.Dataset, task: DictConfig, batch_size: int,
             device, pad_id: int, inputs: Inputs | None = None, num_workers: int = 0) -> Scores:
    """`inputs`: how to feed the model (default: the features' token ids, see `token_inputs`; pass one built once to
    keep its loader's workers across evaluations)."""
    inputs = inputs or token_inputs(features, pad_id)
    logits = forward_logits(model, len(features), inputs, batch_size, device, num_workers)
    scores, per_example = {"cls": _classification, "pair": _classification, "ner": _ner, "qa": _qa}[task.type](
        logits, features, examples, task)
    out = Scores({f"eval/{k}": float(v) for k, v in scores.items()})
    out.per_example = per_example
    return out


def _classification(logits, features, examples, task):
    lg = np.stack(logits)
    if is_regression(task):  # one output per example: the predicted number itself (no classes, no majority)
        return metrics.classification_metrics(list(task.metrics), lg[:, 0], np.asarray(features["labels"])), {}
    probs = np.exp(lg - lg.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    labels = np.asarray(features["labels"])
    preds = lg.argmax(1)
    scores = metrics.classification_metrics(list(task.metrics), preds, labels, probs=probs)
    # what a constant predictor scores: a claim whose arm does not beat it is not testable (experiments.evidence.claims)
    scores.update(metrics.majority_baselines(labels, ["accuracy", *task.metrics]))
    per_example = {"pred": preds.tolist(), "label": labels.tolist()} if np.issubdtype(labels.dtype, np.integer) else {}
    return scores, per_example


def _ner(logits, features, examples, task):
    names = list(task.label_names)
    gold = [[names[i] for i in tag_ids(t, names)] for t in examples[task.label_field]]
    # words cut off by max_length get "O": they count as missed entities rather than vanishing from the score
    pred = [["O"] * len(g) for g in gold]
    for i, (lg, words) in enumerate(zip(logits, features["word_index"])):
        for pos, w in enumerate(words[:len(lg)]):
            if w >= 0:
                pred[i][w] = names[int(lg[pos].argmax())]
    scores = metrics.seqeval_f1(pred, gold)
    scores["token_f1"] = metrics.token_f1(pred, gold)
    if "token_macro_f1" in task.metrics:  # the recycling paper's NER score (O included), see conf/task/bc5cdr.yaml
        scores["token_macro_f1"] = metrics.token_macro_f1(pred, gold)
    return ({k: v for k, v in scores.items() if k in task.metrics or k == "token_f1"},
            {**metrics.entity_counts(pred, gold), **metrics.token_counts(pred, gold)})


def best_span(start: np.ndarray, end: np.ndarray, offsets: list, max_len: int, top: int = 20):
    """(score, char_start, char_end) of the best valid span in one window, or None: both ends in the context,
    end >= start, at most max_len tokens."""
    best = None
    for s in np.argsort(start)[::-1][:top]:
        for e in np.argsort(end)[::-1][:top]:
            if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                continue
            if e < s or e - s + 1 > max_len:
                continue
            score = start[s] + end[e]
            if best is None or score > best[0]:
                best = (score, offsets[s][0], offsets[e][1])
    return best


def _qa(logits, features, examples, task):
    context_field = task.text_fields[1]
    best: dict[int, tuple] = {}
    for lg, ex, offs in zip(logits, features["example_index"], features["offset_mapping"]):
        span = best_span(lg[:, 0], lg[:, 1], offs, task.max_answer_length)
        if span and (ex not in best or span[0] > best[ex][0]):
            best[ex] = span
    contexts, answers = examples[context_field], examples[task.label_field]
    preds = [contexts[i][best[i][1]:best[i][2]] if i in best else "" for i in range(len(examples))]
    per = metrics.squad_scores(preds, [a["text"] for a in answers])
    return {k: float(np.mean(v)) for k, v in per.items()}, per
