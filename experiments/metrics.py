"""Evaluation metrics shared by every paper in the suite: plain functions over lists / numpy arrays that return
floats (or dicts of floats), plus the one table saying which direction is better for each reported name.

No Hydra and no I/O here, so callers (runner, reports, sweeps' best-checkpoint selection) can import it freely.
Coreference metrics (MUC, B³, CEAF-e, CoNLL F1) follow the reference scorer v8.01 at the end.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from scipy import stats
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import f1_score, matthews_corrcoef
from seqeval.metrics.sequence_labeling import get_entities as _get_entities
from seqeval.metrics.sequence_labeling import precision_recall_fscore_support as _seqeval_prfs

__all__ = [
    "HIGHER_IS_BETTER",
    "CLASSIFICATION_METRICS",
    "higher_is_better",
    "declared",
    "accuracy",
    "f1_micro",
    "f1_macro",
    "f1_binary",
    "mcc",
    "pearson",
    "spearman",
    "ece",
    "calibration_bins",
    "class_scores",
    "seqeval_f1",
    "token_f1",
    "token_macro_f1",
    "squad_em_f1",
    "squad_scores",
    "entity_counts",
    "token_counts",
    "majority_baselines",
    "classification_metrics",
    "muc",
    "b_cubed",
    "ceaf_e",
    "coref_counts",
    "coref_scores",
]

# Declared once: model selection and reports read the direction from here rather than guessing from the name.
HIGHER_IS_BETTER: dict[str, bool] = {
    "accuracy": True,
    "f1_micro": True,
    "f1_macro": True,
    "f1_binary": True,
    "mcc": True,
    "pearson": True,
    "spearman": True,
    "entity_f1": True,
    "entity_precision": True,
    "entity_recall": True,
    "token_f1": True,
    "token_macro_f1": True,
    "em": True,
    "f1": True,
    "ece": False,
    "loss": False,
}
# Every other recorded key, by pattern over the whole key (first match wins). None = declared to have no better side:
# counts, sizes, settings echoed into the record, intrinsic dimensions, agreement checks whose target is 1.
KEY_DIRECTIONS: tuple[tuple[re.Pattern, bool | None], ...] = tuple((re.compile(p), d) for p, d in (
    (r"/majority_", None),               # what always answering the majority class scores: a baseline
    (r"_(lo|hi)$", None),                # the bounds of an interval recorded beside its estimate
    (r"^(long/)?speedup/", True),
    (r"^(long/)?(acc|delta_acc)/|accuracy_no_exit$|exit_head_accuracy$", True),
    (r"^(long/)?latency/|^scaling/", False),  # ms, and log-log cost slopes
    (r"^(long/)?throughput/", True),
    (r"^(long/)?(depth|retention)/|avg_(depth|retention)$", False),  # compute left: less is cheaper
    (r"^calib/ece", False),
    (r"^(eat/tau|calib/(fitted_)?temperature|long/tokens_mean)$", None),
    (r"hit_rate$", True),
    (r"tokens_per_s$", True),
    (r"^mem/measured_over_analytic$", None),
    (r"^mem/.*saving", True),
    (r"^mem/", False),
    (r"^time/", False),
    (r"^cost/", False),                  # break-even months: sooner is better
    (r"^fidelity/|max_abs_diff$", False),
    (r"bytes", False),
    (r"_computed$", False),              # cache entries recomputed instead of read
    (r"loss$", False),
    (r"^reduction/|_reduction_pct$|^pema/params_removed$", True),
    (r"auc_", None),
    (r"(accuracy|f1|f1_macro|mcc|pearson|spearman)_final$", True),  # the last evaluation, beside the best one
    (r"^lambda/", None),                 # the shape of learned layer weights (entropy, early-block share)
    (r"^extract/layer$", None),
    (r"^bench/ratio", True),             # how many head-only epochs one encoder pass costs: the store's saving
    (r"^bench/.*_s$", False),          # which hidden state a probe read (reverse probing's truncation layer)
    (r"^cossim/", None),                 # similarity of two models' embeddings: a description, not a score
    (r"^bench/runs_to_break_even$", False),  # runs after which a cache's one-off fill has paid for itself
    (r"^bench/dev_gap$", None),          # |Δ best dev score| between two arms that should train alike: a check
    (r"(^|/)((muc|b3|ceafe)_(p|r|f1)|conll_f1)$", True),  # coreference (coref_scores), under any split prefix
    (r"^(params|sizes|vocab|id|sft|train|recycling|storage|cache|pema)/", None),
))


def _key_direction(key: str) -> tuple[bool, bool | None]:
    name = key.rsplit("/", 1)[-1]
    if name in HIGHER_IS_BETTER:
        return True, HIGHER_IS_BETTER[name]
    for pattern, d in KEY_DIRECTIONS:
        if pattern.search(key):
            return True, d
    return False, None


def higher_is_better(key: str) -> bool | None:
    """Direction for a metric name or a logged key such as 'eval/accuracy' (the split prefix is dropped) or
    'time/step_ms'. None for keys with no better side and for undeclared names (runtime, ...): see `declared`."""
    return _key_direction(key)[1]


def declared(key: str) -> bool:
    """Whether a key's direction (or its lack of one) is declared above; reports mark the undeclared ones."""
    return _key_direction(key)[0]


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


def f1_binary(preds, labels) -> float:
    """F1 of the positive class (id 1) of a two-class task: GLUE's F1 for MRPC and QQP (sklearn average="binary")."""
    p, y = _pair(preds, labels)
    other = sorted((set(np.unique(y).tolist()) | set(np.unique(p).tolist())) - {0, 1})
    if other:
        raise ValueError(f"f1_binary needs two-class labels 0/1, got classes {other}; use f1_macro for more classes")
    return float(f1_score(y, p, average="binary", pos_label=1, zero_division=0))


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


def class_scores(scores, labels, name: str = "probs") -> tuple[np.ndarray, np.ndarray]:
    """Checked (N, C) float scores (probabilities or logits, C >= 2) and (N,) int class ids in [0, C), as numpy;
    a ValueError naming `name` and the fix otherwise. Torch tensors are accepted (detached, moved to the CPU)."""
    s = np.asarray(scores.detach().cpu() if hasattr(scores, "detach") else scores, dtype=np.float64)
    y = np.asarray(labels.detach().cpu() if hasattr(labels, "detach") else labels)
    if s.ndim != 2 or s.shape[1] < 2:
        raise ValueError(f"{name} must be (N, C) with C >= 2 classes, got shape {s.shape}")
    if y.ndim != 1 or len(y) != len(s):
        raise ValueError(f"{name} has {len(s)} rows but labels has shape {y.shape}; give one class id per row")
    if len(y) == 0:
        raise ValueError(f"empty {name}/labels")
    if not np.isfinite(s).all():
        raise ValueError(f"{name} holds {int((~np.isfinite(s)).sum())} NaN/inf values")
    integral = np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating) and (y == np.round(y)).all())
    if not integral:
        raise ValueError(f"labels must be integer class ids, got dtype {y.dtype}: {y[:5].tolist()}...")
    y = y.astype(np.int64)
    if y.min() < 0 or y.max() >= s.shape[1]:
        raise ValueError(f"labels must be class ids in [0, {s.shape[1]}) for {name} with {s.shape[1]} columns, "
                         f"got min {y.min()} max {y.max()}")
    return s, y


def _confidences(probs, labels, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, correct, bin index) per example, after checking every input (nothing is computed on bad ones)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    probs, y = class_scores(probs, labels, "probs")
    # Logits or unnormalised scores would give a meaningless number without any error; catch them here.
    # The tolerance is loose enough for half-precision softmax outputs.
    sums = probs.sum(axis=1)
    bad = np.flatnonzero((probs < 0).any(axis=1) | (probs > 1).any(axis=1) | ~np.isclose(sums, 1.0, rtol=0, atol=1e-2))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"probs row {i} is {probs[i].tolist()} (sum {sums[i]:.4g}); {len(bad)} row(s) are not "
                         "probabilities (each in [0, 1], summing to 1): pass softmax(logits), not logits")
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == y).astype(float)
    # Bin b is (b/n, (b+1)/n]: counting the inner edges strictly below conf puts a conf that equals an inner edge
    # (as a float, e.g. 0.5 with 2 bins) into the bin below it; conf = 0 falls into bin 0 and conf = 1 into the last.
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return conf, correct, np.searchsorted(edges[1:-1], conf, side="left")


def calibration_bins(probs, labels, n_bins: int = 15) -> dict[str, np.ndarray]:
    """The reliability-diagram table behind `ece`, one entry per equal-width confidence bin over [0, 1] (binned as
    `ece` bins): `lo`, `hi` (edges), `count`, `accuracy` (fraction correct) and `confidence` (mean max-probability);
    accuracy and confidence are NaN in an empty bin."""
    conf, correct, bins = _confidences(probs, labels, n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    count = np.bincount(bins, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 -> NaN marks an empty bin
        acc = np.bincount(bins, weights=correct, minlength=n_bins) / count
        mean_conf = np.bincount(bins, weights=conf, minlength=n_bins) / count
    return {"lo": edges[:-1], "hi": edges[1:], "count": count, "accuracy": acc, "confidence": mean_conf}


def ece(probs, labels, n_bins: int = 15) -> float:
    """Expected calibration error (Guo et al., 2017) as a fraction in [0, 1]: confidence = max class probability,
    n_bins equal-width bins (lo, hi] over [0, 1] (see `calibration_bins`),
    ECE = sum_b |B_b|/N * |acc(B_b) - conf(B_b)|."""
    t = calibration_bins(probs, labels, n_bins)
    filled = t["count"] > 0
    weight = t["count"][filled] / t["count"].sum()
    return float(np.sum(weight * np.abs(t["accuracy"][filled] - t["confidence"][filled])))


CLASSIFICATION_METRICS = {
    "accuracy": accuracy,
    "f1_micro": f1_micro,
    "f1_macro": f1_macro,
    "f1_binary": f1_binary,
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


def token_macro_f1(pred_tags: list[list[str]], gold_tags: list[list[str]]) -> float:
    """Token-level macro F1 over every tag INCLUDING O: each word's tag is one classification, F1 per tag averaged
    unweighted over the tags seen in gold or predictions (sklearn f1_score(average="macro") on the flattened tags).
    The recycling paper's NER "Macro F-1" (its NER tables), not seqeval's entity F1."""
    _check_tags(pred_tags, gold_tags)
    gold = [t for s in gold_tags for t in s]
    if not gold:
        raise ValueError("no tokens to score")
    return float(f1_score(gold, [t for s in pred_tags for t in s], average="macro", zero_division=0))


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
    per = squad_scores(predictions, references)
    return {"em": float(np.mean(per["em"])), "f1": float(np.mean(per["f1"]))}


def squad_scores(predictions: list[str], references: list[list[str]]) -> dict[str, list[float]]:
    """Per-example SQuAD v1.1 exact match and F1 (0-100), each the max over the example's gold answers: the
    quantities `squad_em_f1` averages (a bootstrap over examples resamples these)."""
    if len(predictions) != len(references):
        raise ValueError(f"predictions and references differ in length: {len(predictions)} vs {len(references)}")
    if not predictions:
        raise ValueError("empty predictions")
    em, f1 = [], []
    for i, (pred, golds) in enumerate(zip(predictions, references)):
        if isinstance(golds, str) or not golds:
            # A bare string would be iterated character by character and score nonsense.
            raise ValueError(f"example {i}: references must be a non-empty list of answer strings")
        norm_pred = _normalize_answer(pred)
        em.append(100.0 * max(float(norm_pred == _normalize_answer(g)) for g in golds))
        f1.append(100.0 * max(_squad_f1(pred, g) for g in golds))
    return {"em": em, "f1": f1}


# ---------------------------------------------------------------- per-example counts and trivial baselines
# The corpus-level scores above are sums of per-example counts; keeping the counts lets experiments.evidence.claims
# bootstrap a score over examples exactly (resampled sums), and the baselines tell a model that learned the task
# from one that predicts a constant.

def entity_counts(pred_tags: list[list[str]], gold_tags: list[list[str]]) -> dict[str, list[int]]:
    """Per sentence: entity true positives, false positives and false negatives (seqeval's default entity
    extraction), whose sums give `seqeval_f1` exactly."""
    _check_tags(pred_tags, gold_tags)
    tp, fp, fn = [], [], []
    for p, g in zip(pred_tags, gold_tags):
        pe, ge = set(_get_entities(list(p))), set(_get_entities(list(g)))
        hit = len(pe & ge)
        tp.append(hit)
        fp.append(len(pe) - hit)
        fn.append(len(ge) - hit)
    return {"tp": tp, "fp": fp, "fn": fn}


def token_counts(pred_tags: list[list[str]], gold_tags: list[list[str]], ignore: str = "O") -> dict[str, list[int]]:
    """Per sentence: the true positives, false positives and false negatives behind `token_f1`."""
    _check_tags(pred_tags, gold_tags)
    tp, fp, fn = [], [], []
    for ps, gs in zip(pred_tags, gold_tags):
        hit = sum(p == g and g != ignore for p, g in zip(ps, gs))
        tp.append(hit)
        fp.append(sum(p != ignore for p in ps) - hit)
        fn.append(sum(g != ignore for g in gs) - hit)
    return {"token_tp": tp, "token_fp": fp, "token_fn": fn}


def majority_baselines(labels, names: Sequence[str]) -> dict[str, float]:
    """What always answering the most frequent label scores: `majority_<name>` for each of `names` among
    accuracy, f1_micro, f1_macro (others are skipped). Empty for non-integer labels (regression)."""
    y = np.asarray(labels)
    if len(y) == 0 or not np.issubdtype(y.dtype, np.integer):
        return {}
    values, counts = np.unique(y, return_counts=True)
    constant = np.full_like(y, values[counts.argmax()])
    return {f"majority_{n}": CLASSIFICATION_METRICS[n](constant, y) for n in names
            if n in ("accuracy", "f1_micro", "f1_macro")}


# ---------------------------------------------------------------- coreference (CoNLL-2012: MUC, B³, CEAF-e)
# Conventions of the reference scorer v8.01 (Pradhan et al. 2014), checked against it in tests/test_coref_scorer.py:
# mentions match on exact identity; a gold mention missing from the response and a response mention missing from
# the gold ("twinless") each count as their own singleton on the other side; MUC has no links in a singleton, so it
# ignores them, while B³ and CEAF-e count singleton clusters on both sides (a spurious singleton costs precision).
# Every metric sums numerators and denominators over the documents before dividing (the scorer's TOTALS, coref-hoi's
# CorefEvaluator): a long document weighs more than a short one, unlike a mean of per-document F1.

COREF_METRICS = ("muc", "b3", "ceafe")
_COREF_COUNTS = tuple(f"{m}_{q}" for m in COREF_METRICS for q in ("r_num", "r_den", "p_num", "p_den"))


def _coref_clusters(clusters, side: str, doc: int) -> tuple[list[frozenset], dict]:
    """Non-empty clusters as frozensets of mentions (a JSON [start, end] list becomes a tuple) and mention -> cluster
    index; a mention listed twice on one side is an error (the scorer would drop the repeat with only a warning)."""
    if isinstance(clusters, (str, bytes)) or not isinstance(clusters, Iterable):
        raise ValueError(f"document {doc}: {side} clusters must be a list of clusters, got {clusters!r}")
    out, where = [], {}
    for i, cluster in enumerate(clusters):
        members = []
        for m in cluster:
            m = tuple(m) if isinstance(m, list) else m
            if m in where:
                raise ValueError(f"document {doc}: {side} mention {m!r} appears twice (clusters {where[m]} and {i}); "
                                 "each mention belongs to one cluster: merge the clusters or drop the repeat")
            where[m] = len(out)
            members.append(m)
        if members:  # an empty cluster has nothing to score (the scorer's files cannot even express one)
            out.append(frozenset(members))
    return out, where


def _coref_doc_counts(predicted, gold, doc: int) -> dict[str, float]:
    pred, pred_of = _coref_clusters(predicted, "predicted", doc)
    key, gold_of = _coref_clusters(gold, "gold", doc)
    # |K ∩ R| for every overlapping (gold cluster, predicted cluster) pair
    overlap = Counter((gold_of[m], pred_of[m]) for m in gold_of.keys() & pred_of.keys())
    # MUC (Vilain et al. 1995): correct links = sum over overlapping pairs of |K∩R| - 1, the same count for recall
    # (partitions of each K by the response) and precision (partitions of each R by the key)
    muc_correct = sum(n - 1 for n in overlap.values())
    # B³: each mention's |K∩R| / |K| (recall) or / |R| (precision), summed
    b3_r = sum(n * n / len(key[k]) for (k, _), n in overlap.items())
    b3_p = sum(n * n / len(pred[r]) for (_, r), n in overlap.items())
    # CEAF-e: phi4(K, R) = 2|K∩R| / (|K| + |R|), best one-to-one alignment of entities
    ceafe = 0.0
    if overlap:
        sim = np.zeros((len(key), len(pred)))
        for (k, r), n in overlap.items():
            sim[k, r] = 2 * n / (len(key[k]) + len(pred[r]))
        rows, cols = linear_sum_assignment(sim, maximize=True)
        ceafe = float(sim[rows, cols].sum())
    return {"muc_r_num": muc_correct, "muc_r_den": sum(len(k) - 1 for k in key),
            "muc_p_num": muc_correct, "muc_p_den": sum(len(r) - 1 for r in pred),
            "b3_r_num": b3_r, "b3_r_den": len(gold_of), "b3_p_num": b3_p, "b3_p_den": len(pred_of),
            "ceafe_r_num": ceafe, "ceafe_r_den": len(key), "ceafe_p_num": ceafe, "ceafe_p_den": len(pred)}


def coref_counts(docs) -> dict[str, list[float]]:
    """Per document, the recall and precision numerators and denominators of MUC, B³ and CEAF-e (keys
    `<metric>_<r|p>_<num|den>`), whose sums give `coref_scores` exactly (a bootstrap over documents resamples these).
    `docs`: one (predicted_clusters, gold_clusters) pair per document; a cluster is an iterable of hashable mentions
    (e.g. (start, end) tuples; [start, end] lists are read as tuples)."""
    if isinstance(docs, (str, bytes)) or not isinstance(docs, Iterable):
        raise ValueError(f"docs must be a list of (predicted_clusters, gold_clusters) pairs, got {type(docs).__name__}")
    out: dict[str, list[float]] = {k: [] for k in _COREF_COUNTS}
    for i, pair in enumerate(docs):
        if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise ValueError(f"document {i}: expected a (predicted_clusters, gold_clusters) pair, got {pair!r:.80}")
        for k, v in _coref_doc_counts(pair[0], pair[1], i).items():
            out[k].append(v)
    if not out["muc_r_den"]:
        raise ValueError("no documents to score")
    return out


def _prf(r_num: float, r_den: float, p_num: float, p_den: float) -> dict[str, float]:
    # An empty denominator scores 0 (the scorer's ShowRPF), so an empty response gets P = R = F1 = 0.
    r = r_num / r_den if r_den else 0.0
    p = p_num / p_den if p_den else 0.0
    return {"p": float(p), "r": float(r), "f1": float(2 * p * r / (p + r)) if p + r else 0.0}


def _coref_metric(name: str, docs) -> dict[str, float]:
    c = coref_counts(docs)
    return _prf(*(sum(c[f"{name}_{q}"]) for q in ("r_num", "r_den", "p_num", "p_den")))


def muc(docs) -> dict[str, float]:
    """MUC (Vilain et al. 1995) link-based P/R/F1 accumulated over `docs` ((predicted, gold) cluster pairs)."""
    return _coref_metric("muc", docs)


def b_cubed(docs) -> dict[str, float]:
    """B³ (Bagga and Baldwin 1998) mention-based P/R/F1 accumulated over `docs`, singletons included."""
    return _coref_metric("b3", docs)


def ceaf_e(docs) -> dict[str, float]:
    """Entity-level CEAF (Luo 2005) with phi4 similarity and the optimal (Hungarian) entity alignment, accumulated
    over `docs`."""
    return _coref_metric("ceafe", docs)


def coref_scores(docs) -> dict[str, float]:
    """muc_p/r/f1, b3_p/r/f1, ceafe_p/r/f1 (fractions in [0, 1]) and conll_f1, their three F1s' mean: the CoNLL-2012
    score as the reference scorer v8.01 computes it over a corpus of (predicted_clusters, gold_clusters) pairs."""
    c = coref_counts(docs)
    out: dict[str, float] = {}
    for name in COREF_METRICS:
        s = _prf(*(sum(c[f"{name}_{q}"]) for q in ("r_num", "r_den", "p_num", "p_den")))
        out.update({f"{name}_p": s["p"], f"{name}_r": s["r"], f"{name}_f1": s["f1"]})
    out["conll_f1"] = float(np.mean([out[f"{name}_f1"] for name in COREF_METRICS]))
    return out
