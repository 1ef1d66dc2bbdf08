"""Evaluation metrics shared by every paper in the suite: plain functions over lists / numpy arrays that return
floats (or dicts of floats), plus the one table saying which direction is better for each reported name.

No Hydra and no I/O here, so callers (runner, reports, sweeps' best-checkpoint selection) can import it freely.
Coreference metrics live elsewhere (not yet written).
"""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import stats
from sklearn.metrics import f1_score, matthews_corrcoef
from seqeval.metrics.sequence_labeling import precision_recall_fscore_support as _seqeval_prfs

__all__ = [
    "HIGHER_IS_BETTER",
    "CLASSIFICATION_METRICS",
    "higher_is_better",
    "accuracy",
    "f1_micro",
    "f1_macro",
    "mcc",
    "pearson",
    "spearman",
    "ece",
    "seqeval_f1",
    "token_f1",
    "squad_em_f1",
    "classification_metrics",
]

# Declared once: model selection and reports read the direction from here rather than guessing from the name.
HIGHER_IS_BETTER: dict[str, bool] = {
    "accuracy": True,
    "f1_micro": True,
    "f1_macro": True,
    "mcc": True,
    "pearson": True,
    "spearman": True,
    "entity_f1": True,
    "entity_precision": True,
    "entity_recall": True,
    "token_f1": True,
    "em": True,
    "f1": True,
    "ece": False,
    "loss": False,
}


def higher_is_better(key: str) -> bool | None:
    """Direction for a metric name or a logged key such as 'eval/accuracy' (the split prefix is dropped).
    None for names that are not metrics (runtime, samples_per_second, ...), so callers must decide explicitly."""
    return HIGHER_IS_BETTER.get(key.rsplit("/", 1)[-1])


def _pair(preds, labels) -> tuple[np.ndarray, np.ndarray]:
    # Numpy would broadcast or compare unequal lengths silently; a length mismatch is always a caller bug.
    p, y = np.asarray(preds), np.asarray(labels)
    if len(p) != len(y):
        raise ValueError(f"preds and labels differ in length: {len(p)} vs {len(y)}")
    if len(p) == 0:
        raise ValueError("empty preds/labels")
    return p, y


# ---------------------------------------------------------------- classification / regression

def accuracy(preds, labels) -> float:
    p, y = _pair(preds, labels)
    return float(np.mean(p == y))


def f1_micro(preds, labels) -> float:
    p, y = _pair(preds, labels)
    return float(f1_score(y, p, average="micro", zero_division=0))


def f1_macro(preds, labels) -> float:
    # Averaged over the classes present in labels or preds (sklearn's default), unweighted.
    p, y = _pair(preds, labels)
    return float(f1_score(y, p, average="macro", zero_division=0))


def mcc(preds, labels) -> float:
    p, y = _pair(preds, labels)
    return float(matthews_corrcoef(y, p))


def pearson(preds, labels) -> float:
    # NaN (with scipy's warning) when either side is constant: the correlation is undefined, not zero.
    p, y = _pair(preds, labels)
    return float(stats.pearsonr(p.astype(float), y.astype(float)).statistic)


def spearman(preds, labels) -> float:
    p, y = _pair(preds, labels)
    return float(stats.spearmanr(p.astype(float), y.astype(float)).statistic)


def ece(probs, labels, n_bins: int = 15) -> float:
    """Expected calibration error (Guo et al., 2017): confidence = max class probability, n_bins equal-width
    bins (lo, hi] over [0, 1], ECE = sum_b |B_b|/N * |acc(B_b) - conf(B_b)|."""
    probs = np.asarray(probs, dtype=float)
    y = np.asarray(labels)
    if probs.ndim != 2:
        raise ValueError(f"probs must be (N, C), got shape {probs.shape}")
    _pair(probs, y)
    # Logits or unnormalised scores would give a meaningless number without any error; catch them here.
    # The tolerance is loose enough for half-precision softmax outputs.
    if probs.min() < 0 or probs.max() > 1 or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-2):
        raise ValueError("probs must be probabilities (rows in [0, 1] summing to 1), not logits")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == y).astype(float)
    # Counting the inner edges strictly below conf puts conf in bin (lo, hi]; conf == 0 falls into bin 0.
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.searchsorted(edges[1:-1], conf, side="left")
    n = len(conf)
    total = 0.0
    for b in np.unique(bins):
        m = bins == b
        total += m.sum() / n * abs(correct[m].mean() - conf[m].mean())
    return float(total)


CLASSIFICATION_METRICS = {
    "accuracy": accuracy,
    "f1_micro": f1_micro,
    "f1_macro": f1_macro,
    "mcc": mcc,
    "pearson": pearson,
    "spearman": spearman,
    "ece": ece,
}


def classification_metrics(names: list[str], preds, labels, probs=None) -> dict[str, float]:
    """The named metrics, in the order given. `ece` reads `probs` (N, C); the others read `preds`
    (class ids, or scores for pearson/spearman). Names are validated before anything is computed."""
    unknown = [n for n in names if n not in CLASSIFICATION_METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; valid names: {sorted(CLASSIFICATION_METRICS)}")
    if "ece" in names and probs is None:
        raise ValueError("metric 'ece' needs probs (N, C)")
    out: dict[str, float] = {}
    for name in names:
        out[name] = ece(probs, labels) if name == "ece" else CLASSIFICATION_METRICS[name](preds, labels)
    return out


# ---------------------------------------------------------------- sequence labelling

def _check_tags(pred_tags: Sequence[Sequence[str]], gold_tags: Sequence[Sequence[str]]) -> None:
    if len(pred_tags) != len(gold_tags):
        raise ValueError(f"pred and gold differ in number of sequences: {len(pred_tags)} vs {len(gold_tags)}")
    for i, (p, g) in enumerate(zip(pred_tags, gold_tags)):
        if len(p) != len(g):
            raise ValueError(f"sequence {i}: pred has {len(p)} tags, gold has {len(g)}")


def seqeval_f1(pred_tags: list[list[str]], gold_tags: list[list[str]]) -> dict[str, float]:
    """Entity-level micro precision/recall/F1 (seqeval default = conlleval-style: an I-X after O or another
    type starts a new entity rather than being dropped). 0.0 where a denominator is empty."""
    _check_tags(pred_tags, gold_tags)
    p, r, f, _ = _seqeval_prfs(
        [list(s) for s in gold_tags], [list(s) for s in pred_tags], average="micro", zero_division=0
    )
    return {"entity_precision": float(p), "entity_recall": float(r), "entity_f1": float(f)}


def token_f1(pred_tags: list[list[str]], gold_tags: list[list[str]], ignore: str = "O") -> float:
    """Token-level micro F1 over tokens whose tag is not `ignore`: a predicted non-O tag counts as a positive,
    a true positive is an exact tag match on a gold non-O token (same as sklearn micro F1 with O left out of
    `labels`). 0.0 when there are no non-O tokens on either side."""
    _check_tags(pred_tags, gold_tags)
    tp = n_pred = n_gold = 0
    for ps, gs in zip(pred_tags, gold_tags):
        for p, g in zip(ps, gs):
            n_pred += p != ignore
            n_gold += g != ignore
            tp += p == g and g != ignore
    if tp == 0:
        return 0.0
    precision, recall = tp / n_pred, tp / n_gold
    return float(2 * precision * recall / (precision + recall))


# ---------------------------------------------------------------- extractive QA (SQuAD v1.1 official script)

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _normalize_answer(s: str) -> str:
    # Same steps and order as evaluate-v1.1.py: lower, drop punctuation, drop articles, collapse whitespace.
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _squad_f1(prediction: str, truth: str) -> float:
    pred_tokens = _normalize_answer(prediction).split()
    truth_tokens = _normalize_answer(truth).split()
    # Multiset overlap, as in the official script; v1.1 scores two empty answers 0 (v2.0 would say 1).
    same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_em_f1(predictions: list[str], references: list[list[str]]) -> dict[str, float]:
    """Official SQuAD v1.1 exact match and F1, each the max over an example's gold answers, averaged over
    examples and reported in percent (0-100) like the official script."""
    if len(predictions) != len(references):
        raise ValueError(f"predictions and references differ in length: {len(predictions)} vs {len(references)}")
    if not predictions:
        raise ValueError("empty predictions")
    em = f1 = 0.0
    for i, (pred, golds) in enumerate(zip(predictions, references)):
        if isinstance(golds, str) or not golds:
            # A bare string would be iterated character by character and score nonsense.
            raise ValueError(f"example {i}: references must be a non-empty list of answer strings")
        norm_pred = _normalize_answer(pred)
        em += max(float(norm_pred == _normalize_answer(g)) for g in golds)
        f1 += max(_squad_f1(pred, g) for g in golds)
    n = len(predictions)
    return {"em": 100.0 * em / n, "f1": 100.0 * f1 / n}
