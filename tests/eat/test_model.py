"""EAT's model: with its components off it is the encoder; physical removal equals the official zero-masking; per-example
exit is independent of the batch; the keep rules leave the token counts worked out by hand."""
import pytest
import torch
import torch.nn.functional as F
from transformers import DistilBertConfig, DistilBertModel

from eat import prune
from eat.model import EatModel, Settings, distillation_loss
from tests.helpers.eat_inputs import batch, bert, threshold


def run(model, settings, ids, mask):
    with torch.no_grad(), model.using(settings):
        return model(ids, mask)


@pytest.mark.parametrize("window", [None, 512])
def test_components_off_equal_the_encoder(window):
    enc = bert()
    m = EatModel(enc, 3).eval()
    ids, mask = batch()
    with torch.no_grad():
        ref = m.classifier(enc(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
    out = run(m, Settings(prune_ratio=0.0, window=window, tau=None), ids, mask)
    assert (out.logits - ref).abs().max() <= 1e-5
    assert out.depth.tolist() == [6, 6, 6] and out.retention.tolist() == [1.0, 1.0, 1.0]


def test_distilbert_components_off_equal_the_encoder():
    torch.manual_seed(0)
    enc = DistilBertModel(DistilBertConfig(vocab_size=100, dim=32, n_layers=4, n_heads=4, hidden_dim=64)).eval()
    m = EatModel(enc, 2, exit_layer=2, settings=Settings(prune_after=(2,))).eval()
    ids, mask = batch(T=40)
    with torch.no_grad():
        ref = m.classifier(enc(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
    out = run(m, Settings(prune_after=(), window=None), ids, mask)
    assert (out.logits - ref).abs().max() <= 1e-5


@pytest.mark.parametrize("rule", prune.RULES)
@pytest.mark.parametrize("window", [None, 8])
def test_physical_removal_equals_zero_masking(rule, window):
    # float64: in fp32 the two paths round differently and a near-tie of L2 scores could flip a kept token
    m = EatModel(bert(), 3).eval().double()
    ids, mask = batch()
    kw = dict(prune_ratio=0.3, prune_rule=rule, window=window)
    a = run(m, Settings(prune_mode="remove", kernel="banded", **kw), ids, mask)
    b = run(m, Settings(prune_mode="mask", kernel="masked", **kw), ids, mask)
    assert (a.logits - b.logits).abs().max() <= 1e-9
    assert torch.equal(a.retention, b.retention)
    assert a.retention[0] < 1.0


def test_pruning_changes_something_and_keeps_cls():
    m = EatModel(bert(), 3).eval()
    ids, mask = batch()
    dense = run(m, Settings().dense(), ids, mask)
    pruned = run(m, Settings(window=None), ids, mask)
    assert (dense.logits - pruned.logits).abs().max() > 1e-3
    idx, valid = prune.kept_indices(torch.randn(2, 9), torch.ones(2, 9, dtype=torch.bool), 0.5, "paper")
    assert (idx[:, 0] == 0).all() and (idx[:, 1:] > idx[:, :-1]).where(valid[:, 1:], True).all()


@pytest.mark.parametrize("rule,expected", [
    ("paper", {8: 5, 10: 6, 16: 9, 24: 13, 32: 17, 64: 33, 128: 64, 256: 127}),
    ("repo", {8: 5, 10: 5, 16: 9, 24: 12, 32: 17, 64: 32, 128: 63, 256: 126}),
])
def test_keep_rules_leave_the_counts_worked_out_by_hand(rule, expected):
    """Tokens left after two pruning steps at p = 0.3 under each rule [P Alg. 1, R]."""
    t = torch.tensor(list(expected))
    left = prune.keep_count(prune.keep_count(t, 0.3, rule), 0.3, rule)
    assert dict(zip(expected, left.tolist())) == expected


def test_exit_logits_are_the_exit_heads_on_layer_4():
    enc = bert()
    m = EatModel(enc, 3, exit_layer=4).eval()
    ids, mask = batch()
    out = run(m, Settings(prune_ratio=0.0, window=None, tau=0.01), ids, mask)  # everyone is confident
    with torch.no_grad():
        h4 = enc(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[4]
        ref = m.exit_classifier(h4[:, 0])
    assert out.depth.tolist() == [4, 4, 4]
    assert (out.logits - ref).abs().max() <= 1e-5


def test_per_example_exit_does_not_depend_on_the_batch():
    m = EatModel(bert(), 3, exit_layer=4).eval().double()  # fp64: no rounding near the threshold
    with torch.no_grad():
        m.exit_classifier.weight.mul_(30)  # a random head is unsure of everything; spread its confidences
    ids, mask = batch()
    s = Settings(window=4, tau=1.0, prune_after=(2,))  # prune before the exit, so exit rows differ in length
    conf = run(m, s, ids, mask).layer_logits[4].softmax(-1).amax(-1).sort().values
    s = Settings(window=4, tau=float(conf[1:].mean()), prune_after=(2,))  # between the 2 lower and the top one
    together = run(m, s, ids, mask)
    assert 4 in together.depth.tolist() and 6 in together.depth.tolist()
    for b in range(3):
        n = int(mask[b].sum())
        alone = run(m, s, ids[b:b + 1, :n], mask[b:b + 1, :n])
        assert (alone.logits[0] - together.logits[b]).abs().max() <= 1e-5
        assert alone.depth[0] == together.depth[b] and torch.isclose(alone.retention[0], together.retention[b])
    batch_rule = run(m, Settings(window=4, tau=s.tau, prune_after=(2,), exit_mode="batch"), ids, mask)
    assert batch_rule.depth.tolist() == [6, 6, 6]  # one unconfident example keeps the whole batch going


def test_patience_needs_agreement():
    m = EatModel(bert(), 3, exit_layer=4, patience_layer=3).eval()
    ids, mask = batch()
    with torch.no_grad():
        hs = m.encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        agree = m.patience_classifier(hs[3][:, 0]).argmax(-1) == m.exit_classifier(hs[4][:, 0]).argmax(-1)
    out = run(m, Settings(prune_ratio=0.0, window=None, tau=0.01, patience=True), ids, mask)
    assert (out.depth == 4).tolist() == agree.tolist()


def test_training_loss_is_final_plus_weighted_exit():
    enc = bert(dropout=0.0)
    m = EatModel(enc, 3, exit_layer=4, exit_weight=0.3).train()
    ids, mask = batch()
    labels = torch.tensor([0, 1, 2])
    with torch.no_grad(), m.using(Settings().dense()):
        out = m(ids, mask, labels=labels)
        hs = enc(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    want = F.cross_entropy(m.classifier(hs[6][:, 0]), labels) + 0.3 * F.cross_entropy(
        m.exit_classifier(hs[4][:, 0]), labels)
    assert torch.isclose(out.loss, want, atol=1e-5)


def test_distillation_loss_is_zero_for_the_teacher_itself_and_positive_otherwise():
    z = torch.randn(4, 3)
    assert distillation_loss(z, z, 2.0, 0.5).abs() < 1e-6
    assert distillation_loss(z, z.flip(0), 2.0, 0.5) > 0


@pytest.mark.parametrize("settings,match", [
    (dict(prune_after=(6,)), "prune_after"),
    (dict(tau=0.9), "exit head"),
    (dict(patience=True), "patience head"),
])
def test_bad_settings_are_refused(settings, match):
    m = EatModel(bert(), 3, exit_layer=None)
    with pytest.raises(ValueError, match=match):
        m.check(Settings(**settings))


@pytest.mark.parametrize("kw,match", [(dict(kernel="flash"), "kernel"), (dict(prune_ratio=1.0), "prune_ratio"),
                                      (dict(tau=0.0), "tau"), (dict(prune_rule="x"), "prune_rule")])
def test_settings_validate(kw, match):
    with pytest.raises(ValueError, match=match):
        Settings(**kw)


def test_mean_pooling_reads_the_tokens_still_in_the_sequence():
    enc = bert()
    m = EatModel(enc, 3, pooling="mean").eval()
    ids, mask = batch()
    with torch.no_grad():
        h = enc(input_ids=ids, attention_mask=mask).last_hidden_state
        ref = m.classifier((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
    assert (run(m, Settings().dense(), ids, mask).logits - ref).abs().max() <= 1e-5
    # pruned: remove and mask modes pool over the same kept tokens
    md = m.double()
    kw = dict(prune_ratio=0.3, window=8)
    a = run(md, Settings(prune_mode="remove", **kw), ids, mask)
    b = run(md, Settings(prune_mode="mask", kernel="masked", **kw), ids, mask)
    assert (a.logits - b.logits).abs().max() <= 1e-9
    with pytest.raises(ValueError, match="pooling"):
        EatModel(bert(), 3, pooling="max")


def test_attention_received_scorer_keeps_the_most_attended_tokens():
    m = EatModel(bert(), 3).eval().double()
    ids, mask = batch()
    kw = dict(prune_ratio=0.3, window=8, scorer="attention")
    a = run(m, Settings(prune_mode="remove", **kw), ids, mask)
    b = run(m, Settings(prune_mode="mask", kernel="masked", **kw), ids, mask)
    assert (a.logits - b.logits).abs().max() <= 1e-9  # the same tokens kept either way
    l2 = run(m, Settings(prune_mode="remove", prune_ratio=0.3, window=8), ids, mask)
    assert (a.logits - l2.logits).abs().max() > 1e-6  # another score keeps other tokens
    assert torch.equal(a.retention, l2.retention)  # but as many of them


def _spread_exit_head(m):
    """A random exit head is unsure of everything: scale it so its confidences spread around any threshold."""
    with torch.no_grad():
        m.exit_classifier.weight.mul_(30)
    return m


@pytest.mark.parametrize("mode,kernel", [("remove", "banded"), ("mask", "masked")])
def test_attention_scorer_with_partial_exits_equals_each_example_alone(mode, kernel):
    # the exit layer is also a pruning layer: the attention mass that scores its tokens must follow the rows still
    # running when some examples have left (it kept the whole batch's rows and crashed)
    m = _spread_exit_head(EatModel(bert(), 3, exit_layer=4).eval().double())
    ids, mask = batch(seed=3, B=6)
    kw = dict(scorer="attention", window=8, prune_after=(2, 4), prune_mode=mode, kernel=kernel)
    tau, n_exit = threshold(run(m, Settings(**kw), ids, mask).layer_logits[4].softmax(-1).amax(-1), 0, 5)
    s = Settings(tau=tau, **kw)
    together = run(m, s, ids, mask)
    assert together.depth.tolist().count(4) == n_exit and 0 < n_exit < 6  # some exit, some run on
    for b in range(6):
        n = int(mask[b].sum())
        alone = run(m, s, ids[b:b + 1, :n], mask[b:b + 1, :n])
        assert (alone.logits[0] - together.logits[b]).abs().max() <= 1e-9
        assert alone.depth[0] == together.depth[b] and torch.isclose(alone.retention[0], together.retention[b])


def _official_exit(m, ids, n):
    """The official order by hand for one example of n tokens: layers 1-4 on the valid tokens, after layers 2 and 4
    zero-mask all but [CLS] and the top 1 + ceil(0.7 (t - 1)) others by L2 norm (integer arithmetic), then the exit
    head on the mean of the tokens left. -> (exit logits, tokens left)."""
    valid = torch.ones(1, n, dtype=torch.bool)
    pos = torch.arange(n)[None]
    with torch.no_grad(), m.using(Settings(prune_ratio=0.0, window=None)):
        h = m._embed(ids[None, :n], None)
        for i in range(1, 5):
            h, _ = m._layer(m._parts[i - 1], h, pos, valid, False)
            if i in (2, 4):
                t = int(valid.sum())
                k = 1 + (7 * (t - 1) + 9) // 10
                score = h.norm(dim=-1).masked_fill(~valid, float("-inf"))
                score[0, 0] = float("inf")
                valid = torch.zeros_like(valid).scatter_(1, score.topk(k, dim=1).indices, True)
                h = h * valid[..., None]
        z = m.exit_classifier((h * valid[..., None]).sum(1) / valid.sum())[0]
    return z, int(valid.sum())


@pytest.mark.parametrize("mode,kernel", [("remove", "banded"), ("mask", "masked")])
def test_the_exit_head_reads_the_tokens_left_after_the_exit_layers_pruning(mode, kernel):
    m = EatModel(bert(), 3, exit_layer=4, pooling="mean").eval().double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # at init every LayerNorm output has norm sqrt(d): spread the L2 scores, or ties decide
        for part in m._parts:
            part.ln_out.weight.uniform_(0.5, 1.5, generator=g)
    ids, mask = batch()
    out = run(m, Settings(window=None, tau=0.01, prune_mode=mode, kernel=kernel), ids, mask)  # everyone exits at 4
    assert out.depth.tolist() == [4, 4, 4]
    for b in range(3):
        n = int(mask[b].sum())
        want, left = _official_exit(m, ids[b], n)
        assert (out.logits[b] - want).abs().max() <= 1e-9
        assert out.retention[b].item() == pytest.approx(left / n)  # both pruning steps
    assert out.retention[0].item() == pytest.approx(36 / 70)  # 70 -> 50 -> 36 tokens
