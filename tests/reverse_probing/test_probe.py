"""Reverse probing's pieces on tiny inputs: the aggregator's forms computed by hand, truncation = the truncated model,
word pooling, segment packing, the coref head's pruning, loss and decoding, and the exactness of reading only the
gold mentions' words."""
import itertools
import math

import numpy as np
import pytest
import torch

from experiments.config import ModelConfig, load_group
from experiments.models import load_encoder
from reverse_probing.aggregate import Aggregator
from reverse_probing.coref import CorefHead, bucket_distance, candidate_spans, prune
from reverse_probing.documents import collate, pack, prepare, window
from reverse_probing.extract import extract, word_pool
from reverse_probing.model import ReverseProbe


def test_mean_of_one_source_is_the_identity_and_sum_adds():
    x, y = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    assert torch.equal(Aggregator("mean", [8], 8)([x])[0], x)
    torch.testing.assert_close(Aggregator("sum", [8, 8], 8)([x, y])[0], x + y)
    torch.testing.assert_close(Aggregator("mean", [8, 8], 8)([x, y])[0], (x + y) / 2)


def test_attention_is_the_official_form_by_hand():
    torch.manual_seed(0)
    agg = Aggregator("attention", [8, 12], 8, key_size=4)
    h = [torch.randn(3, 8), torch.randn(3, 12)]
    out, alpha = agg(h)
    for t in range(3):
        s = torch.stack([agg.keys[i](h[i][t]) @ agg.query for i in range(2)]) / math.sqrt(4)
        a = torch.softmax(s, 0)
        want = sum(a[i] * agg.values[i](h[i][t]) for i in range(2))
        torch.testing.assert_close(alpha[t], a)
        torch.testing.assert_close(out[t], want)
    one, a1 = Aggregator("attention", [8], 8, key_size=4)([h[0]])
    assert torch.allclose(a1, torch.ones(3, 1))  # k = 1: all weight on the one source, but a value projection


def test_literal_attention_has_no_value_projection():
    torch.manual_seed(0)
    agg = Aggregator("attention_literal", [6, 6], 6)
    h = [torch.randn(4, 6), torch.randn(4, 6)]
    out, alpha = agg(h)
    a = torch.softmax(torch.stack([agg.score(x).squeeze(-1) for x in h], -1), -1)
    torch.testing.assert_close(alpha, a)
    torch.testing.assert_close(out, a[:, :1] * h[0] + a[:, 1:] * h[1])


def test_aggregation_is_position_wise():
    torch.manual_seed(0)
    agg = Aggregator("attention", [8, 8], 8)
    h = [torch.randn(1, 7, 8), torch.randn(1, 7, 8)]
    perm = torch.randperm(7)
    torch.testing.assert_close(agg([x[:, perm] for x in h])[0], agg(h)[0][:, perm])


@pytest.mark.parametrize("mode", ["mean", "sum", "attention_literal"])
def test_adding_widths_that_differ_is_refused(mode):
    with pytest.raises(ValueError, match="use aggregate=attention"):
        Aggregator(mode, [8, 16], 8)


def test_truncation_equals_the_model_cut_after_layer_l():
    """[R] truncation sets encoder.layer = layer[:L]; its output is hidden_states[L] of the whole model."""
    _, enc = load_encoder(load_group("model", "tiny-bert", ModelConfig, "test"))
    enc.eval()
    ids = torch.tensor([[2, 17, 33, 45, 3]])
    with torch.no_grad():
        states = torch.stack(enc(input_ids=ids, output_hidden_states=True).hidden_states)[:, 0]
        for L in range(1, enc.config.num_hidden_layers + 1):
            layers = enc.encoder.layer
            enc.encoder.layer = layers[:L]
            try:
                cut = enc(input_ids=ids).last_hidden_state[0]
            finally:
                enc.encoder.layer = layers
            torch.testing.assert_close(extract(states, "trunc", L), cut)
    torch.testing.assert_close(extract(states, "full"), states[-1])
    assert torch.allclose(extract(states, "norm").norm(dim=-1), torch.ones(5))
    L = states.shape[0] - 1
    torch.testing.assert_close(extract(states, "concat", concat_n=2), torch.cat([states[L - 1], states[L]], -1))
    with pytest.raises(ValueError, match="method.trunc"):
        extract(states, "trunc", 0)
    with pytest.raises(ValueError, match="concat_n"):
        extract(states, "concat", concat_n=L + 1)


def test_word_pooling_known_answer():
    pieces = torch.arange(12.0).view(1, 4, 3)  # [CLS] a ##b c
    wids = [None, 0, 0, 1]
    torch.testing.assert_close(word_pool(pieces, wids, 2), torch.tensor([[[4.5, 5.5, 6.5], [9.0, 10.0, 11.0]]]))
    torch.testing.assert_close(word_pool(pieces, wids, 2, "first"), pieces[:, [1, 3]])
    with pytest.raises(ValueError, match="no sub-token"):
        word_pool(pieces, wids, 3)


def test_segments_pack_whole_sentences_and_cut_only_an_overlong_one():
    assert pack([1] * 7, [0, 0, 0, 1, 1, 2, 2], 6) == [(0, 3), (3, 7)]
    assert pack([1] * 10, [0] * 10, 6) == [(0, 4), (4, 8), (8, 10)]
    segs = pack([2, 1, 3, 1, 1, 2], [0, 0, 1, 1, 2, 2], 7)
    assert segs[0][0] == 0 and segs[-1][1] == 6 and all(a < b for a, b in segs)
    with pytest.raises(ValueError, match="sub-tokens"):
        pack([9], [0], 6)


DOC = {"doc_key": "wg/x/0", "sentences": [["The", "cat", "saw", "the", "big", "dog", "because", "_", "was", "up", "."]],
       "clusters": [[[4, 5], [7, 7]], [[1, 1]]], "mentions": [[1, 1], [4, 5], [7, 7]],
       "candidates": [[1, 1], [4, 5]], "blank": [7, 7], "answer": 1}


def test_prepare_keeps_the_mentions_words_and_their_clusters():
    d = prepare(DOC, [1] * 11, 64, gold_mentions=True, max_width=30)
    assert d.keep == [1, 4, 5, 7]
    assert d.spans == [(0, 0), (1, 2), (3, 3)]
    assert d.cluster_ids == [2, 1, 1]
    assert d.choice == (2, 1, 0)
    full = prepare(DOC, [1] * 11, 64, gold_mentions=False, max_width=3)
    assert full.keep == list(range(11)) and (4, 5) in full.spans and (7, 9) in full.spans and (8, 11) not in full.spans


def test_window_cuts_long_training_documents_to_consecutive_segments():
    doc = {"doc_key": "nw/1", "sentences": [["a", "b"], ["c", "d"], ["e", "f"]],
           "clusters": [[[0, 0], [4, 4]], [[2, 3], [5, 5]]]}
    d = prepare(doc, [1] * 6, 4, gold_mentions=False, max_width=2)  # one sentence per segment
    assert d.segments == [(0, 2), (2, 4), (4, 6)]
    offsets = set()
    for seed in range(20):
        cut, rows = window(d, 2, np.random.default_rng(seed))
        assert len(cut.segments) == 2 and cut.segment_of[0] == 0
        lo, hi = cut.segments[0][0], cut.segments[-1][1]
        assert all(lo <= cut.keep[s] and cut.keep[e] < hi for s, e in cut.spans)
        offsets.add(lo)
    assert offsets == {0, 2}
    assert window(d, 3, np.random.default_rng(0))[0] is d


def test_bucketed_distances():
    d = torch.tensor([0, 1, 4, 5, 7, 8, 15, 16, 63, 64, 1000])
    assert bucket_distance(d).tolist() == [0, 1, 4, 5, 5, 6, 6, 7, 8, 9, 9]


def test_candidates_stay_in_a_sentence_and_pruning_never_keeps_crossing_spans():
    spans = candidate_spans([0, 0, 0, 1, 1], 2)
    assert spans == [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (3, 3), (3, 4), (4, 4)]
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = 8
        cands = candidate_spans([0] * n, 4)
        scores = rng.normal(size=len(cands)).tolist()
        kept = prune(scores, cands, 5)
        chosen = [cands[i] for i in kept]
        assert chosen == sorted(chosen) and len(kept) <= 5
        for (s1, e1), (s2, e2) in itertools.combinations(chosen, 2):
            assert not (s1 < s2 <= e1 < e2 or s2 < s1 <= e2 < e1)
        # greedy: the best span is always kept
        assert int(np.argmax(scores)) in kept


def head_and_batch(seed=0):
    torch.manual_seed(seed)
    head = CorefHead(8, ffnn_size=16, feature_size=4, max_width=4, dropout=0.0)
    head.eval()
    return head


def test_loss_is_the_marginal_log_likelihood_of_the_gold_antecedents():
    head = head_and_batch()
    h = torch.randn(1, 6, 8)
    spans = torch.tensor([[[0, 0], [2, 3], [5, 5]]])
    cid = torch.tensor([[1, 2, 1]])
    out = head(h, spans, torch.ones(1, 3, dtype=torch.bool), torch.tensor([6]), cluster_ids=cid, gold_mentions=True)
    s = out.scores[0]
    # span 0: only the dummy; span 1 (cluster 2): no gold antecedent -> dummy; span 2: gold antecedent span 0
    def nll(i, gold_cols):
        return torch.logsumexp(s[i][torch.isfinite(s[i])], 0) - torch.logsumexp(s[i][gold_cols], 0)
    col0 = 1 + int((out.antecedents[0, 2] == 0).nonzero()[0])
    want = nll(0, [0]) + nll(1, [0]) + nll(2, [col0])
    torch.testing.assert_close(out.loss, want)
    assert out.clusters(singletons=True)[0]  # decodes without error


def test_reading_only_the_mentions_words_is_the_whole_document_computation():
    """Gold-mention mode reads the mentions' words alone: the same scores as the head over every word (the aggregator
    is position-wise, distances are rank offsets among the kept spans; nothing else reads the other words)."""
    head = head_and_batch(1)
    h = torch.randn(1, 11, 8)
    full = prepare(DOC, [1] * 11, 64, gold_mentions=True, max_width=4)
    whole = head(h, torch.tensor([[[1, 1], [4, 5], [7, 7]]]), torch.ones(1, 3, dtype=torch.bool), torch.tensor([11]),
                 gold_mentions=True)
    b = collate([full], [[h[0, full.keep]]])
    part = head(b.pop("sources")[0], **{k: v for k, v in b.items() if k != "cluster_ids"}, gold_mentions=True)
    torch.testing.assert_close(part.scores, whole.scores)


def test_a_batch_scores_each_document_as_alone():
    torch.manual_seed(0)
    probe = ReverseProbe(Aggregator("attention", [8, 8], 8), CorefHead(8, 16, 4, 4, 0.0)).eval()
    docs = [prepare(DOC, [1] * 11, 64, True, 4),
            prepare({**DOC, "sentences": [DOC["sentences"][0][:9]], "clusters": [[[1, 1], [7, 7]], [[4, 5]]]},
                    [1] * 9, 64, True, 4)]
    feats = [[torch.randn(len(d.keep), 8) for d in docs] for _ in range(2)]
    both = probe(**_inputs(collate(docs, feats)), gold_mentions=True)
    for i, d in enumerate(docs):
        alone = probe(**_inputs(collate([d], [[f[i]] for f in feats])), gold_mentions=True)
        n = len(d.spans)
        torch.testing.assert_close(both.scores[i, :n, :n], alone.scores[0, :n, :n])
        assert both.clusters(True)[i] == alone.clusters(True)[0]


def _inputs(batch):
    batch = dict(batch)
    batch.pop("cluster_ids")
    return {"sources": batch.pop("sources"), **batch}


def test_decoding_follows_the_best_antecedent_greedily():
    head = head_and_batch()
    out = head(torch.randn(1, 6, 8), torch.tensor([[[0, 0], [2, 3], [5, 5]]]), torch.ones(1, 3, dtype=torch.bool),
               torch.tensor([6]), gold_mentions=True)
    out.scores = torch.tensor([[[0.0, -math.inf, -math.inf, -math.inf], [0.0, -1.0, -math.inf, -math.inf],
                                [0.0, 2.0, 1.0, -math.inf]]])
    out.antecedents = torch.tensor([[[0, 0, 0], [0, 0, 0], [0, 1, 0]]])
    out.antecedent_mask = torch.tensor([[[False] * 3, [True, False, False], [True, True, False]]])
    assert out.clusters() == [[((0, 0), (5, 5))]]
    assert out.clusters(singletons=True) == [[((0, 0), (5, 5)), ((2, 3),)]]


# ---- the head as coref-hoi computes it ------------------------------------------------------------------------------

def _hand_bucket(d: int) -> int:
    """coref-hoi util.bucket_distance, written out: 0-4 as is, then 5-7, 8-15, 16-31, 32-63, 64+."""
    return d if d <= 4 else 5 if d <= 7 else 6 if d <= 15 else 7 if d <= 31 else 8 if d <= 63 else 9


def _only_the_distance_prior(head):
    """Zero every score but the coarse distance prior, whose score for bucket b is then b itself."""
    with torch.no_grad():
        for ff in (head.mention, head.width_score, head.fine):
            ff[-1].weight.zero_()
            ff[-1].bias.zero_()
        head.coarse.weight.zero_()
        head.coarse.bias.zero_()
        head.distance_prior.weight.zero_()
        head.distance_prior.weight[:, 0] = torch.arange(head.buckets, dtype=torch.float)
        head.distance_score.weight.zero_()
        head.distance_score.weight[0, 0] = 1.0
        head.distance_score.bias.zero_()
    return head


def test_the_coarse_prior_buckets_the_rank_offset_among_kept_spans():
    """coref-hoi model.py:187-199: antecedent_offsets = rank_i - rank_j among the kept spans, bucketed. Spans at
    uneven word positions, so a word distance would land in other buckets."""
    torch.manual_seed(0)
    head = _only_the_distance_prior(CorefHead(8, 16, 4, 4, 0.0, max_antecedents=80)).eval()
    starts = [3 * i + (i * i) % 7 for i in range(70)]  # rank offset i - j, word distance ~3x that
    h = torch.randn(1, starts[-1] + 1, 8)
    spans = torch.tensor([[[s, s] for s in starts]])
    out = head(h, spans, torch.ones(1, 70, dtype=torch.bool), torch.tensor([h.shape[1]]), gold_mentions=True)
    checked = 0
    for i in range(70):
        for c in range(out.antecedents.shape[-1]):
            if out.antecedent_mask[0, i, c]:
                j = int(out.antecedents[0, i, c])
                assert float(out.scores[0, i, 1 + c].detach()) == _hand_bucket(i - j), (i, j)
                checked += 1
    assert checked == 70 * 69 // 2  # every earlier span is an antecedent (c = 80 > 69)


def test_antecedent_scores_do_not_depend_on_how_far_apart_the_spans_are():
    """The same three kept spans, in the same order, 1 word or 40 words apart: identical scores (coref-hoi's coarse
    prior reads rank offsets, its fine feature too)."""
    torch.manual_seed(0)
    head = CorefHead(8, 16, 4, 4, 0.0).eval()
    g = torch.randn(3, 8)
    scores = []
    for gap in (1, 40):
        h = torch.randn(1, 2 * gap + 1, 8)
        at = [0, gap, 2 * gap]
        h[0, at] = g
        out = head(h, torch.tensor([[[a, a] for a in at]]), torch.ones(1, 3, dtype=torch.bool),
                   torch.tensor([h.shape[1]]), gold_mentions=True)
        scores.append(out.scores)
    torch.testing.assert_close(scores[0], scores[1], rtol=0, atol=0)


def test_the_input_features_are_not_dropped():
    """In training mode with dropout, the span representation's start and end parts and the head attention read the
    features exactly as given: coref-hoi drops the width embedding, the coarse and pair inputs and inside the FFNNs,
    never mention_doc (model.py:121-164)."""
    torch.manual_seed(0)
    head = CorefHead(8, 16, 4, 4, dropout=0.5).train()
    h = torch.randn(1, 6, 8) + 3.0  # no zeros of its own: a dropped element would show
    spans = torch.tensor([[[0, 0], [2, 3], [5, 5]]])
    seen = {}
    head.head_attention.register_forward_hook(lambda m, inp, out: seen.update(attn=inp[0]))  # returns None: no change
    head.mention.register_forward_hook(lambda m, inp, out: seen.update(g=inp[0]))
    head(h, spans, torch.ones(1, 3, dtype=torch.bool), torch.tensor([6]), cluster_ids=torch.tensor([[1, 0, 1]]),
         gold_mentions=True)
    assert torch.equal(seen["attn"], h)
    assert torch.equal(seen["g"][0, :, :8], h[0, spans[0, :, 0]])
    assert torch.equal(seen["g"][0, :, 8:16], h[0, spans[0, :, 1]])


LONG = {"doc_key": "nw/long", "sentences": [[f"w{i}" for i in range(30)]], "clusters": [[[0, 0], [5, 5]]]}


@pytest.mark.parametrize("unit,units", [("word", 30), ("subtoken", 2 * 30 + 2)])
def test_pruning_keeps_a_ratio_of_the_documents_units(unit, units):
    """k = int(0.4 x units): words, or sub-tokens with [CLS] and [SEP] (coref-hoi model.py:125 and 176 count every
    token under the input mask) where the sources share a tokenizer."""
    d = prepare(LONG, [2] * 30, 64, gold_mentions=False, max_width=3, unit=unit)
    assert d.segments == [(0, 30)] and d.units == units
    head = CorefHead(8, 16, 4, 3, 0.0).eval()
    b = collate([d], [[torch.randn(len(d.keep), 8)]])
    assert b["units"].tolist() == [units]
    out = head(b.pop("sources")[0], **{k: v for k, v in b.items() if k != "cluster_ids"})
    assert int(out.span_mask.sum()) == int(0.4 * units) == head.top_k(units)


def test_a_cut_training_document_counts_the_units_of_its_own_segments():
    doc = {"doc_key": "nw/1", "sentences": [["a", "b"], ["c", "d"], ["e", "f"]], "clusters": [[[0, 0], [4, 4]]]}
    d = prepare(doc, [1, 3, 1, 1, 2, 2], 6, gold_mentions=False, max_width=2, unit="subtoken")
    assert d.segments == [(0, 2), (2, 4), (4, 6)] and d.segment_units == [6, 4, 6] and d.units == 16
    for seed in range(10):
        cut, _ = window(d, 2, np.random.default_rng(seed))
        assert cut.units == sum(d.segment_units[k] for k, s in enumerate(d.segments) if s in cut.segments)
    assert prepare(doc, [1, 3, 1, 1, 2, 2], 6, False, 2).units == 6  # unit=word: the words


DOC_GOLD = [((4, 5), (7, 7)), ((1, 1),)]


def test_sub_token_positions_map_the_gold_mentions_to_their_pieces_and_back():
    """With one shared tokenizer the head reads sub-tokens, as coref-hoi: a mention runs from its first word's first
    piece to its last word's last piece, and predicted spans are scored against the gold mentions' sub-token spans
    (coref-hoi's evaluator)."""
    pieces = [1, 2, 1, 1, 1, 3, 1, 1, 1, 1, 1]  # "cat" 2 pieces, "dog" 3
    d = prepare(DOC, pieces, 64, gold_mentions=True, max_width=30, unit="subtoken")
    assert d.word_of == [w for w in range(11) for _ in range(pieces[w])]
    assert d.keep == [1, 2, 5, 6, 7, 8, 10]  # cat: 1-2; big dog: 5-8; _: 10
    assert d.spans == [(0, 1), (2, 5), (6, 6)] and d.cluster_ids == [2, 1, 1] and d.choice == (2, 1, 0)
    assert [(d.keep[s], d.keep[e]) for s, e in d.spans] == [(1, 2), (5, 8), (10, 10)]
    assert d.gold == [((4, 5), (7, 7)), ((1, 1),)] and d.gold_positions() == [((5, 8), (10, 10)), ((1, 2),)]
    assert d.n_words == 11 and d.segment_of == [0] * 7 and d.units == sum(pieces) + 2
    full = prepare(DOC, pieces, 64, gold_mentions=False, max_width=4, unit="subtoken")
    assert full.keep == list(range(sum(pieces)))
    assert (3, 3) in full.spans and (2, 4) in full.spans  # a span may start or end inside a word (coref-hoi)
    assert max(e - s for s, e in full.spans) == 3  # max_span_width counts sub-tokens
    assert prepare(DOC, pieces, 64, True, 30).gold_positions() == DOC_GOLD  # unit=word: the words themselves
