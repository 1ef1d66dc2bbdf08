"""Regression tasks (STS-B): a cls/pair task that lists no label_names predicts one number, trained as Hugging Face
trains num_labels=1 (one output, MSE loss) and scored by Pearson and Spearman on the predicted numbers; the
correlations agree with scipy.stats (average ranks for ties) and with their definitions."""
import math

import datasets
import numpy as np
import pytest
import torch
from scipy import stats

from experiments import data, metrics
from experiments.config import compose
from experiments.evaluate import _classification
from experiments.models import ScoreHead, SequenceHead, byte_tokenizer, make_head

RNG = np.random.default_rng(0)
# ties on both sides, integer labels, all-tied blocks, a reversed order, float32 predictions, huge offsets
ADVERSARIAL = [
    ([1, 1, 1, 2, 2, 3, 3, 3, 3, 4], [0.0, 0.0, 5.0, 5.0, 5.0, 2.5, 2.5, 1.0, 1.0, 1.0]),
    ([5.0, 4.0, 3.0, 2.0, 1.0], [1, 2, 3, 4, 5]),
    ([0.2, 0.2, 0.2, 0.2, 0.9], [3.8, 3.8, 1.0, 3.8, 5.0]),
    (np.float32([0.1, 0.3, 0.3, 0.7, 0.7, 0.7]), [0, 1, 1, 2, 2, 2]),
    ([1e9 + 1, 1e9 + 2, 1e9 + 2, 1e9 + 3], [1.0, 2.0, 3.0, 4.0]),
    (RNG.integers(0, 3, 50).astype(float), RNG.integers(0, 6, 50).astype(float)),
    (RNG.normal(size=40).round(1), (RNG.normal(size=40) * 5).round(0)),
]


def by_definition(x, y):
    """Pearson: centred cross product over the product of norms; Spearman: Pearson of average ranks."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xc, yc = x - x.mean(), y - y.mean()
    return float(xc @ yc / math.sqrt((xc @ xc) * (yc @ yc)))


def average_ranks(v):
    v = np.asarray(v, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    i = 0
    while i < len(v):  # a block of equal values shares the mean of the ranks it spans
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@pytest.mark.parametrize("preds,labels", ADVERSARIAL)
def test_pearson_and_spearman_agree_with_scipy_and_their_definitions(preds, labels):
    assert metrics.pearson(preds, labels) == pytest.approx(stats.pearsonr(np.asarray(preds, float),
                                                                          np.asarray(labels, float)).statistic,
                                                           abs=1e-12)
    assert metrics.spearman(preds, labels) == pytest.approx(stats.spearmanr(preds, labels).statistic, abs=1e-12)
    assert metrics.pearson(preds, labels) == pytest.approx(by_definition(preds, labels), abs=1e-9)
    assert metrics.spearman(preds, labels) == pytest.approx(by_definition(average_ranks(preds), average_ranks(labels)),
                                                            abs=1e-12)


def test_a_constant_side_has_no_correlation():
    with pytest.warns(stats.ConstantInputWarning):
        assert math.isnan(metrics.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="differ in length"):
        metrics.spearman([1.0, 2.0], [1.0, 2.0, 3.0])


def test_stsb_is_the_one_regression_task():
    assert data.is_regression(compose("task=stsb").task)
    assert not data.is_regression(compose("task=rte").task) and not data.is_regression(compose("task=wnut16").task)
    task = compose("task=stsb").task
    assert task.objective == "eval/spearman" and list(task.metrics) == ["pearson", "spearman"]


def test_labels_are_checked_for_their_kind():
    stsb, rte = compose("task=stsb").task, compose("task=rte").task
    ds = lambda labels: datasets.DatasetDict({"train": datasets.Dataset.from_dict({"label": labels})})  # noqa: E731
    data.check_labels(stsb, ds([0.5, 4, 3.8]))
    data.check_labels(rte, ds([0.0, 1.0]))  # whole-number floats are class ids still
    with pytest.raises(ValueError, match=r"task stsb lists no task.label_names, so it is a regression.*'low'"):
        data.check_labels(stsb, ds(["low", "high"]))
    with pytest.raises(ValueError, match=r"task rte has label 0.5, not a class id.*lists no label_names"):
        data.check_labels(rte, ds([0.5, 1.0]))


def test_regression_labels_encode_as_floats():
    task = compose("task=stsb").task
    rows = datasets.Dataset.from_dict({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "label": [4, 2]})
    enc = data.encode(rows, byte_tokenizer(), task, 16, train=True)
    assert enc["labels"] == [4.0, 2.0] and all(isinstance(y, float) for y in enc["labels"])


@pytest.mark.parametrize("head", [SequenceHead(8, 1, "cls", regression=True), ScoreHead(8, 1, regression=True)])
def test_a_one_output_head_trains_with_hfs_regression_loss(head):
    torch.manual_seed(0)
    hidden, mask = torch.randn(4, 5, 8), torch.ones(4, 5, dtype=torch.long)
    labels = torch.tensor([0.5, 4.0, 3.8, 5.0])
    head.eval()
    out = head(hidden, mask, labels=labels)
    assert out.logits.shape == (4, 1)
    expected = torch.nn.MSELoss()(out.logits.squeeze(), labels.squeeze())  # BertForSequenceClassification, 1 label
    torch.testing.assert_close(out.loss, expected)


def test_make_head_gives_a_regression_task_one_output():
    cfg = compose("task=stsb", "model=tiny-bert")
    head = make_head(cfg.task, cfg.model)
    assert head.out.out_features == 1 and head.regression
    cls = make_head(compose("task=rte", "model=tiny-bert").task, cfg.model)
    assert cls.out.out_features == 2 and not cls.regression


def test_a_regression_is_scored_on_the_predicted_numbers():
    task = compose("task=stsb").task
    preds, labels = [0.3, 2.0, 2.0, 4.9, 1.1], [0.5, 2.5, 2.5, 5.0, 3.8]
    scores, per_example = _classification([np.array([p], np.float32) for p in preds], {"labels": labels}, None, task)
    assert scores["spearman"] == pytest.approx(stats.spearmanr(np.float32(preds), labels).statistic)
    assert scores["pearson"] == pytest.approx(stats.pearsonr(np.float32(preds), labels).statistic)
    assert set(scores) == {"pearson", "spearman"} and per_example == {}  # no classes: no majority baseline
