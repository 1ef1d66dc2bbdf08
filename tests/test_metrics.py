"""Known-answer tests for experiments.metrics; expected values are worked by hand in the comments."""
import numpy as np
import pytest

from experiments import metrics
from experiments.metrics import (
    HIGHER_IS_BETTER,
    accuracy,
    classification_metrics,
    ece,
    f1_macro,
    f1_micro,
    higher_is_better,
    mcc,
    pearson,
    seqeval_f1,
    spearman,
    squad_em_f1,
    token_f1,
)

approx = pytest.approx


# ---------------------------------------------------------------- classification / regression

def test_accuracy():
    assert accuracy([1, 0, 2, 2], [1, 0, 2, 1]) == 0.75


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="length"):
        accuracy([1, 0, 1], [1, 0])


def test_f1_macro_and_micro_three_class():
    labels = [0, 0, 1, 1, 2, 2]
    preds = [0, 1, 1, 1, 2, 0]
    # class 0: tp1 P1/2 R1/2 F1/2; class 1: tp2 P2/3 R1 F4/5; class 2: tp1 P1 R1/2 F2/3
    # macro = (1/2 + 4/5 + 2/3) / 3 = 59/90
    assert f1_macro(preds, labels) == approx(59 / 90)
    # single-label micro F1 = accuracy = 4/6
    assert f1_micro(preds, labels) == approx(2 / 3)


def test_mcc():
    assert mcc([0, 1, 1, 0], [0, 1, 1, 0]) == approx(1.0)
    assert mcc([1, 0, 0, 1], [0, 1, 1, 0]) == approx(-1.0)
    # TP=2 TN=1 FP=1 FN=0: (2*1 - 0) / sqrt(3*2*2*1) = 2/sqrt(12)
    assert mcc([1, 1, 1, 0], [1, 1, 0, 0]) == approx(2 / np.sqrt(12))


def test_pearson_spearman():
    x = [1.0, 2.0, 3.0, 4.0]
    assert pearson([2 * v + 1 for v in x], x) == approx(1.0)
    assert pearson([-v for v in x], x) == approx(-1.0)
    # monotone but not linear: spearman 1, pearson below 1
    assert spearman([v**3 for v in x], x) == approx(1.0)
    assert pearson([v**3 for v in x], x) < 0.99
    # ranks 1,3,2,4 vs 1,2,3,4: sum d^2 = 2, rho = 1 - 6*2 / (4*15) = 0.8
    assert spearman([1, 3, 2, 4], [1, 2, 3, 4]) == approx(0.8)


# ---------------------------------------------------------------- ECE

def test_ece_perfectly_calibrated_is_zero():
    # four at confidence 0.75 with 3 correct, two at 1.0 both correct
    probs = [[0.75, 0.25]] * 4 + [[0.0, 1.0]] * 2
    labels = [0, 0, 0, 1, 1, 1]
    assert ece(probs, labels) == approx(0.0, abs=1e-12)


def test_ece_overconfident():
    # bin of conf 0.9: 2 samples, acc 1/2 -> gap 0.4, weight 2/5
    # bin of conf 0.6: 3 samples, acc 1/3 -> gap 0.2667, weight 3/5
    # ECE = 0.16 + 0.16 = 0.32
    probs = [[0.9, 0.1]] * 2 + [[0.6, 0.4]] * 3
    labels = [0, 1, 0, 1, 1]
    assert ece(probs, labels) == approx(0.32)


def test_ece_bins_are_separate():
    # conf 0.9 x2 with acc 1/2 (over by 0.4); conf 0.6 x3 all correct (under by 0.4)
    # 15 bins: 2/5*0.4 + 3/5*0.4 = 0.4; one bin: |4/5 - 0.72| = 0.08 (gaps cancel)
    probs = [[0.9, 0.1]] * 2 + [[0.6, 0.4]] * 3
    labels = [0, 1, 0, 0, 0]
    assert ece(probs, labels) == approx(0.4)
    assert ece(probs, labels, n_bins=1) == approx(0.08)


def test_ece_rejects_logits():
    with pytest.raises(ValueError, match="logits"):
        ece([[2.0, -1.0], [0.5, 0.1]], [0, 1])


def test_calibration_bins_known_table():
    # 4 bins with float-exact edges .25/.5/.75: conf .6 x2 (1 right), .7 (wrong), .9 x2 (right), 1.0 (right)
    # bin 2 (.5, .75]: n 3, acc 1/3, conf (.6+.6+.7)/3 = 19/30; bin 3 (.75, 1]: n 3, acc 1, conf 2.8/3; bins 0-1 empty
    probs = [[0.6, 0.4], [0.4, 0.6], [0.7, 0.3], [0.1, 0.9], [0.9, 0.1], [0.0, 1.0]]
    labels = [0, 0, 1, 1, 0, 1]
    t = metrics.calibration_bins(probs, labels, n_bins=4)
    assert t["lo"].tolist() == [0, 0.25, 0.5, 0.75] and t["hi"].tolist() == [0.25, 0.5, 0.75, 1.0]
    assert t["count"].tolist() == [0, 0, 3, 3]
    assert np.isnan(t["accuracy"][:2]).all() and np.isnan(t["confidence"][:2]).all()  # empty bins
    assert t["accuracy"][2:] == approx([1 / 3, 1.0]) and t["confidence"][2:] == approx([19 / 30, 2.8 / 3])
    # ECE = 3/6 * |1/3 - 19/30| + 3/6 * |1 - 2.8/3| = 0.5 * 0.3 + 0.5 * 0.2/3 = 0.18333...; empty bins add nothing
    assert ece(probs, labels, n_bins=4) == approx(0.5 * 0.3 + 0.5 * 0.2 / 3)


def test_ece_edge_confidences_go_to_the_lower_bin_and_one_to_the_last():
    # conf exactly 0.5 with 2 bins belongs to (0, .5]; exactly .25 with 4 bins to (0, .25]; 1.0 to the last bin
    assert metrics.calibration_bins([[0.5, 0.5]], [0], n_bins=2)["count"].tolist() == [1, 0]
    assert metrics.calibration_bins([[0.25, 0.25, 0.25, 0.25]], [0], n_bins=4)["count"].tolist() == [1, 0, 0, 0]
    assert metrics.calibration_bins([[1.0, 0.0]], [0], n_bins=15)["count"].tolist() == [0] * 14 + [1]
    # a hair above the edge moves up one bin
    assert metrics.calibration_bins([[0.5 + 1e-12, 0.5 - 1e-12]], [0], n_bins=2)["count"].tolist() == [0, 1]
    # conf .5 (right) alone in bin 0; .6 (right), .6 (wrong), .9 (right) in bin 1:
    # 1/4 * |1 - .5| + 3/4 * |2/3 - .7| = .125 + .025 = .15 (with the .5 in bin 1 it would be |3/4 - .65| = .1)
    probs = [[0.5, 0.5], [0.4, 0.6], [0.6, 0.4], [0.9, 0.1]]
    assert ece(probs, [0, 1, 1, 0], n_bins=2) == approx(0.15)


def test_ece_all_correct_is_one_minus_mean_confidence():
    # accuracy 1 >= confidence in every bin, so the weighted gaps sum to 1 - mean(conf), whatever the binning
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1.0, 500)
    probs = np.stack([conf, 1 - conf], 1)
    for n_bins in (1, 4, 15):
        assert ece(probs, np.zeros(500, int), n_bins=n_bins) == approx(1 - conf.mean())
    assert ece([[1.0, 0.0]] * 3, [0, 0, 0]) == 0.0


def test_ece_of_sampled_calibrated_predictions_is_near_zero():
    # each example is right with probability equal to its confidence: ECE -> 0 as n grows (binning noise ~ 1/sqrt n;
    # within a bin conf varies, but acc tracks mean conf exactly in expectation)
    rng = np.random.default_rng(1)
    n = 200_000
    probs = rng.dirichlet(np.ones(3), n)
    labels = np.minimum((probs.cumsum(1) < rng.uniform(size=(n, 1))).sum(1), 2)  # y ~ Categorical(probs)
    assert ece(probs, labels) < 0.005
    # and an overconfident version of the same data (probs sharpened) is clearly miscalibrated
    sharp = probs ** 3 / (probs ** 3).sum(1, keepdims=True)
    assert ece(sharp, labels) > 0.05


@pytest.mark.parametrize("probs, labels, n_bins, message", [
    ([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]], [0, 1], 15, "probs has 3 rows but labels has shape (2,)"),
    ([[0.7, 0.2], [0.5, 0.5]], [0, 1], 15, "probs row 0 is [0.7, 0.2] (sum 0.9); 1 row(s) are not probabilities"),
    ([[1.2, -0.2]], [0], 15, "probs row 0"),
    ([0.5, 0.5], [0, 1], 15, "probs must be (N, C)"),
    ([[0.5, 0.5]], [2], 15, "labels must be class ids in [0, 2)"),
    ([[0.5, 0.5]], [0.5], 15, "labels must be integer class ids"),
    ([[np.nan, 0.5]], [0], 15, "NaN"),
    ([[0.5, 0.5]], [0], 0, "n_bins must be an integer >= 1, got 0"),
    ([], [], 15, "probs must be (N, C)"),
])
def test_ece_bad_input_names_the_problem(probs, labels, n_bins, message):
    with pytest.raises(ValueError) as e:
        metrics.calibration_bins(probs, labels, n_bins)
    assert message in str(e.value)
    with pytest.raises(ValueError):
        ece(probs, labels, n_bins)


# ---------------------------------------------------------------- classification_metrics and directions

def test_classification_metrics_selects_and_orders():
    out = classification_metrics(["mcc", "accuracy"], [1, 0, 1, 1], [1, 0, 0, 1])
    assert list(out) == ["mcc", "accuracy"]
    assert out["accuracy"] == 0.75
    assert all(isinstance(v, float) for v in out.values())


def test_classification_metrics_ece_uses_probs():
    probs = np.array([[0.9, 0.1]] * 2 + [[0.6, 0.4]] * 3)
    out = classification_metrics(["ece", "accuracy"], probs.argmax(1), [0, 1, 0, 1, 1], probs=probs)
    assert out["ece"] == approx(0.32)
    assert out["accuracy"] == approx(2 / 5)
    with pytest.raises(ValueError, match="probs"):
        classification_metrics(["ece"], [0], [0])


def test_classification_metrics_unknown_name_lists_valid():
    with pytest.raises(ValueError) as exc:
        classification_metrics(["accuracy", "bleu"], [0], [0])
    msg = str(exc.value)
    assert "bleu" in msg
    for name in ["accuracy", "f1_micro", "f1_macro", "mcc", "pearson", "spearman", "ece"]:
        assert name in msg


def test_higher_is_better():
    assert HIGHER_IS_BETTER["ece"] is False and HIGHER_IS_BETTER["loss"] is False
    assert higher_is_better("eval/ece") is False
    assert higher_is_better("train/loss") is False
    assert higher_is_better("eval/accuracy") is True
    assert higher_is_better("test/entity_f1") is True
    assert higher_is_better("f1") is True
    assert higher_is_better("eval/runtime") is None
    # every key a metric function emits has a declared direction
    emitted = set(metrics.CLASSIFICATION_METRICS) | {"token_f1"}
    emitted |= set(seqeval_f1([["O"]], [["O"]])) | set(squad_em_f1(["a"], [["a"]]))
    assert emitted <= set(HIGHER_IS_BETTER)


# ---------------------------------------------------------------- sequence labelling

def test_seqeval_wrong_boundary():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O", "B-MISC"]]
    # gold entities: PER(0-1) LOC(3) ORG(0) = 3; pred: PER(0) LOC(3) ORG(0) MISC(2) = 4
    # PER boundary is wrong, so tp = 2: P = 2/4, R = 2/3, F1 = 2*(1/2)(2/3)/(7/6) = 4/7
    out = seqeval_f1(pred, gold)
    assert out["entity_precision"] == approx(0.5)
    assert out["entity_recall"] == approx(2 / 3)
    assert out["entity_f1"] == approx(4 / 7)


def test_seqeval_i_without_b_starts_entity():
    # conlleval-style default: a leading I-PER opens a PER entity, so PER(0-1) matches gold exactly
    out = seqeval_f1([["I-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])
    assert out["entity_f1"] == approx(1.0)
    # I-LOC after B-PER changes type, so it opens a separate LOC entity: pred PER(0) LOC(1), gold PER(0-1)
    out = seqeval_f1([["B-PER", "I-LOC"]], [["B-PER", "I-PER"]])
    assert out["entity_precision"] == 0.0 and out["entity_recall"] == 0.0


def test_seqeval_no_entities_is_zero_not_error():
    assert seqeval_f1([["O", "O"]], [["B-PER", "O"]])["entity_f1"] == 0.0


def test_token_f1():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["B-PER", "O", "O", "B-ORG"]]
    # non-O: gold 3, pred 2, exact matches 1 (B-PER): P 1/2, R 1/3, F1 = 2*(1/6)/(5/6) = 0.4
    assert token_f1(pred, gold) == approx(0.4)
    assert token_f1(gold, gold) == approx(1.0)
    assert token_f1([["O", "O"]], [["O", "O"]]) == 0.0


def test_tag_length_mismatch_raises():
    with pytest.raises(ValueError, match="sequence 0"):
        token_f1([["O"]], [["O", "O"]])
    with pytest.raises(ValueError, match="sequence 0"):
        seqeval_f1([["O"]], [["O", "O"]])


# ---------------------------------------------------------------- SQuAD

def test_squad_normalization_exact_match():
    assert squad_em_f1(["The Cat!"], [["cat"]]) == {"em": 100.0, "f1": 100.0}
    assert squad_em_f1(["an  apple."], [["Apple"]])["em"] == 100.0
    # articles are whole words only: 'theatre' keeps its 'the'
    assert squad_em_f1(["theatre"], [["atre"]])["em"] == 0.0
    # punctuation is deleted, not spaced: U.S. -> us
    assert squad_em_f1(["U.S."], [["us"]])["em"] == 100.0


def test_squad_partial_f1():
    # pred [red, dog], gold [big, red, dog] -> P 1, R 2/3, F1 0.8
    out = squad_em_f1(["red dog"], [["the big red dog"]])
    assert out["em"] == 0.0
    assert out["f1"] == approx(80.0)
    # multiset overlap: pred [dog, dog] vs [dog] -> P 1/2, R 1, F1 2/3
    assert squad_em_f1(["the dog dog"], [["a dog"]])["f1"] == approx(200 / 3)


def test_squad_max_over_golds_and_mean():
    preds = ["red dog", "red dog"]
    refs = [["blue cat", "Red Dog."], ["dog", "big red dog"]]
    # ex1: EM 1 (second gold), F1 1; ex2: EM 0, F1 max(2/3, 0.8) = 0.8 -> EM 50, F1 90
    out = squad_em_f1(preds, refs)
    assert out["em"] == approx(50.0)
    assert out["f1"] == approx(90.0)


def test_squad_rejects_bare_string_reference():
    with pytest.raises(ValueError, match="list"):
        squad_em_f1(["cat"], ["cat"])


# ---------------------------------------------------------------- paper-specific scores

def test_f1_binary_is_the_positive_class_f1():
    from sklearn.metrics import f1_score
    labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    # class 1: tp 2, fp 1, fn 1 -> P 2/3, R 2/3, F1 2/3 (class 0 would give 1/2; macro 7/12)
    assert metrics.f1_binary(preds, labels) == approx(2 / 3) == approx(f1_score(labels, preds))
    assert f1_macro(preds, labels) == approx(7 / 12)
    assert metrics.f1_binary([0, 0], [0, 0]) == 0.0  # no positives anywhere: 0, not a warning
    with pytest.raises(ValueError, match=r"two-class.*\[2\].*f1_macro"):
        metrics.f1_binary([0, 1, 2], [0, 1, 1])


def test_token_macro_f1_counts_o_as_a_class():
    from sklearn.metrics import f1_score
    gold = [["O", "B-D", "I-D", "O"], ["B-D", "O"]]
    pred = [["O", "B-D", "O", "O"], ["O", "O"]]
    # O: tp 3, pred 5, gold 3 -> F1 3/4; B-D: tp 1, pred 1, gold 2 -> 2/3; I-D: tp 0 -> 0; macro = 17/36
    assert metrics.token_macro_f1(pred, gold) == approx(17 / 36)
    flat = lambda tags: [t for s in tags for t in s]  # noqa: E731
    assert metrics.token_macro_f1(pred, gold) == approx(f1_score(flat(gold), flat(pred), average="macro"))
    assert token_f1(pred, gold) == approx(0.5)  # without O: tp 1, pred 1, gold 3 -> P 1, R 1/3, F1 1/2
    # a tag only predicted (never gold) is a class too: sklearn's union of labels
    noisy = [["O", "B-D", "I-X", "O"], ["B-D", "O"]]
    assert metrics.token_macro_f1(noisy, gold) == approx(f1_score(flat(gold), flat(noisy), average="macro"))
    assert "token_macro_f1" in HIGHER_IS_BETTER and "f1_binary" in HIGHER_IS_BETTER
    with pytest.raises(ValueError, match="sequence 0"):
        metrics.token_macro_f1([["O"]], [["O", "O"]])
