"""The target head: coref-hoi's coarse-to-fine model without higher-order inference (Xu & Choi 2020).

Plain torch over word features (B, W, d), a batch of documents (coref-hoi trains on one document a step: B = 1).
candidates → span representation g = [h_start; h_end; φ(width); head-attention mean] → mention score (FFNN + width
prior) → pruning to k = min(max_spans, ratio·units) non-crossing spans (units: the document's words, or its
sub-tokens where the sources share a tokenizer) → coarse antecedent score s_m(i) + s_m(j) + g_iᵀW_c g_j + a prior on
the rank offset i − j among the kept spans, top c → fine score FFNN([g_i; g_j; g_i∘g_j; features]) → marginal
log-likelihood of the gold antecedents, a dummy antecedent scored 0 → greedy clustering. Gold-mention mode: the
candidates are the gold mentions and none is pruned (antecedents are still scored and decoded the same way).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


def bucket_distance(d: torch.Tensor, buckets: int = 10) -> torch.Tensor:
    """coref-hoi's buckets: 0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+ (for 10 buckets)."""
    d = d.clamp_min(0)
    log = torch.floor(torch.log2(d.clamp_min(1).float())).long() + 3
    return torch.where(d <= 4, d, log).clamp(max=buckets - 1)


def ffnn(d_in: int, hidden: int, dropout: float) -> nn.Sequential:
    """coref-hoi's FFNN with ffnn_depth 1: Linear → ReLU → dropout → Linear to one score."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))


def candidate_spans(sentence_of: list[int], max_width: int) -> list[tuple[int, int]]:
    """Every span (start, end inclusive) of at most `max_width` words inside one sentence, sorted."""
    n = len(sentence_of)
    return [(i, j) for i in range(n) for j in range(i, min(n, i + max_width))
            if sentence_of[j] == sentence_of[i]]


def prune(scores: list[float], spans: list[tuple[int, int]], k: int) -> list[int]:
    """The k best-scoring spans that cross no better one (nesting is allowed), in (start, end) order [coref-hoi
    `_extract_top_spans`]."""
    kept: list[int] = []
    max_end: dict[int, int] = {}  # start -> the largest end kept from it
    min_start: dict[int, int] = {}  # end -> the smallest start kept to it
    for i in sorted(range(len(spans)), key=lambda i: -scores[i]):
        if len(kept) >= k:
            break
        s, e = spans[i]
        crosses = any(max_end.get(s2, -1) > e for s2 in range(s + 1, e + 1)) or \
            any(0 <= min_start.get(e2, e + 1) < s for e2 in range(s, e))
        if crosses:
            continue
        kept.append(i)
        max_end[s] = max(max_end.get(s, -1), e)
        min_start[e] = min(min_start.get(e, e + 1), s)
    return sorted(kept, key=lambda i: spans[i])


@dataclass
class CorefOutput:
    loss: torch.Tensor | None  # summed over a document's spans, averaged over the batch's documents
    spans: torch.Tensor  # (B, K, 2) the kept spans, (start, end) in (start, end) order
    span_mask: torch.Tensor  # (B, K)
    antecedents: torch.Tensor  # (B, K, c) indices into the kept spans
    antecedent_mask: torch.Tensor  # (B, K, c)
    scores: torch.Tensor  # (B, K, c + 1): column 0 the dummy (0), then the antecedents' coarse + fine scores

    def clusters(self, singletons: bool = False) -> list[list[tuple[tuple[int, int], ...]]]:
        """Per document, greedy clusters from each span's best-scoring antecedent (the dummy: none) [coref-hoi
        `get_predicted_clusters`]; `singletons` adds every kept span left alone (gold-mention mode)."""
        best = self.scores.masked_fill(~torch.cat([torch.ones_like(self.antecedent_mask[..., :1]),
                                                    self.antecedent_mask], -1), float("-inf")).argmax(-1)
        out = []
        for b in range(self.spans.shape[0]):
            spans = [tuple(s) for s in self.spans[b].tolist()]
            of: dict[tuple[int, int], int] = {}
            clusters: list[list[tuple[int, int]]] = []
            for i in range(int(self.span_mask[b].sum())):
                if best[b, i] == 0:
                    continue
                ante = spans[int(self.antecedents[b, i, best[b, i] - 1])]
                if ante not in of:
                    of[ante] = len(clusters)
                    clusters.append([ante])
                of[spans[i]] = of[ante]
                clusters[of[ante]].append(spans[i])
            if singletons:
                clusters += [[s] for s in spans[:int(self.span_mask[b].sum())] if s not in of]
            out.append([tuple(c) for c in clusters])
        return out

    def pair_score(self, b: int, i: int, j: int) -> float:
        """The score of kept span j as the antecedent of kept span i (j < i); -inf when j is not among i's top c."""
        hit = ((self.antecedents[b, i] == j) & self.antecedent_mask[b, i]).nonzero()
        return float(self.scores[b, i, 1 + int(hit[0])].detach()) if len(hit) else float("-inf")


class CorefHead(nn.Module):
    """coref-hoi c2f, coref_depth 1 (no higher-order), fine_grained, with its features (speaker, genre, segment
    distance, antecedent distance). Sizes default to coref-hoi's `bert_base` config."""

    def __init__(self, d: int, ffnn_size: int = 3000, feature_size: int = 20, max_width: int = 30,
                 dropout: float = 0.3, genres: int = 7, max_segments: int = 11, top_span_ratio: float = 0.4,
                 max_spans: int = 3900, max_antecedents: int = 50, distance_buckets: int = 10):
        super().__init__()
        self.max_width, self.top_span_ratio, self.max_spans = max_width, top_span_ratio, max_spans
        self.max_antecedents, self.buckets, self.max_segments = max_antecedents, distance_buckets, max_segments
        g = 3 * d + feature_size
        self.drop = nn.Dropout(dropout)
        self.width = nn.Embedding(max_width, feature_size)
        self.width_prior = nn.Embedding(max_width, feature_size)
        self.head_attention = nn.Linear(d, 1)
        self.mention = ffnn(g, ffnn_size, dropout)
        self.width_score = ffnn(feature_size, ffnn_size, dropout)
        self.distance_prior = nn.Embedding(distance_buckets, feature_size)
        self.distance_score = nn.Linear(feature_size, 1)
        self.coarse = nn.Linear(g, g)
        self.same_speaker = nn.Embedding(2, feature_size)
        self.genre = nn.Embedding(genres, feature_size)
        self.segment_distance = nn.Embedding(max_segments, feature_size)
        self.antecedent_distance = nn.Embedding(distance_buckets, feature_size)
        self.fine = ffnn(3 * g + 4 * feature_size, ffnn_size, dropout)

    # -- spans ------------------------------------------------------------------------------------------------------
    def span_embeddings(self, h: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """g for spans (B, S, 2) over words h (B, W, d): (B, S, 3d + feature_size)."""
        start, end = spans[..., 0], spans[..., 1]
        width = (end - start).clamp(0, self.max_width - 1)
        gather = lambda idx: torch.gather(h, 1, idx.unsqueeze(-1).expand(*idx.shape, h.shape[-1]))  # noqa: E731
        offsets = torch.arange(self.max_width, device=h.device)
        words = (start.unsqueeze(-1) + offsets).clamp(max=h.shape[1] - 1)  # (B, S, max_width)
        inside = (start.unsqueeze(-1) + offsets) <= end.unsqueeze(-1)
        attn = self.head_attention(h).squeeze(-1)  # (B, W)
        a = torch.gather(attn, 1, words.flatten(1)).view_as(words).masked_fill(~inside, float("-inf"))
        w = torch.softmax(a, -1)
        tokens = gather(words.flatten(1)).view(*words.shape, h.shape[-1])
        head = (w.unsqueeze(-1) * tokens).sum(-2)
        return torch.cat([gather(start), gather(end), self.drop(self.width(width)), head], -1)

    def mention_scores(self, g: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        width = (spans[..., 1] - spans[..., 0]).clamp(0, self.max_width - 1)
        return self.mention(g).squeeze(-1) + self.width_score(self.width_prior(width)).squeeze(-1)

    # -- the model ----------------------------------------------------------------------------------------------------
    def forward(self, h: torch.Tensor, spans: torch.Tensor, span_mask: torch.Tensor, units: torch.Tensor,
                cluster_ids: torch.Tensor | None = None, speakers: torch.Tensor | None = None,
                genre: torch.Tensor | None = None, segments: torch.Tensor | None = None,
                gold_mentions: bool = False) -> CorefOutput:
        """h (B, W, d) word features; spans (B, S, 2) candidates (gold mode: the gold mentions) with span_mask;
        units (B,) per document the count pruning keeps top_span_ratio of (its words, or its sub-tokens: coref-hoi's
        num_words, reverse_probing/documents.py); cluster_ids (B, S): a gold cluster id > 0 per candidate (0: none)
        for the loss; speakers, segments (B, W) and genre (B,) feed the fine features (zeros when not given). Only
        the order of the words matters, never their distance in the document (distances are rank offsets among the
        kept spans), so h may hold a subset of a document's words (the gold mentions')."""
        B, W = h.shape[:2]
        zeros_w = torch.zeros(B, W, dtype=torch.long, device=h.device)
        speakers = zeros_w if speakers is None else speakers
        segments = zeros_w if segments is None else segments
        genre = torch.zeros(B, dtype=torch.long, device=h.device) if genre is None else genre
        # no dropout on the input features: coref-hoi drops the width embedding, the coarse bilinear's inputs, the
        # pair features and inside the FFNNs, never mention_doc (model.py:121-125)
        g = self.span_embeddings(h, spans)
        s_m = self.mention_scores(g, spans).masked_fill(~span_mask, float("-inf"))
        keep = self._keep(s_m, spans, span_mask, units, gold_mentions)  # (B, K), -1 pads
        kmask = keep >= 0
        idx = keep.clamp_min(0)

        def pick(x):  # the kept spans' rows of a (B, S, ...) tensor
            return torch.gather(x, 1, idx.view(B, -1, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))
        g, top_spans, s_top = pick(g), pick(spans), pick(s_m).masked_fill(~kmask, 0.0)
        K = g.shape[1]

        # coarse: every earlier kept span, the top c by s_m(i) + s_m(j) + bilinear + distance prior
        order = torch.arange(K, device=h.device)
        earlier = (order.view(1, -1) < order.view(-1, 1)) & kmask.unsqueeze(1) & kmask.unsqueeze(2)
        # the prior buckets j's rank offset among the kept spans, i - j, not a distance in the document
        # [coref-hoi model.py:187-188, 198 antecedent_offsets = top_span_range_i - top_span_range_j]
        offsets = order.view(-1, 1) - order.view(1, -1)  # (K, K)
        prior = self.distance_score(self.drop(self.distance_prior(bucket_distance(offsets, self.buckets)))).squeeze(-1)
        coarse = s_top.unsqueeze(2) + s_top.unsqueeze(1) + self.drop(self.coarse(g)) @ self.drop(g).transpose(1, 2) \
            + prior
        coarse = coarse.masked_fill(~earlier, float("-inf"))
        c = max(1, min(self.max_antecedents, K))
        coarse_top, ante = coarse.topk(c, -1)  # (B, K, c)
        amask = torch.isfinite(coarse_top)
        coarse_top = coarse_top.masked_fill(~amask, 0.0)

        # fine: FFNN over the pair and its features
        g_j = torch.gather(g.unsqueeze(1).expand(B, K, K, g.shape[-1]), 2,
                           ante.unsqueeze(-1).expand(-1, -1, -1, g.shape[-1]))
        g_i = g.unsqueeze(2).expand_as(g_j)
        start_of = lambda x: torch.gather(x, 1, top_spans[..., 0])  # noqa: E731  per kept span, from its first word
        spk, seg = start_of(speakers), start_of(segments)
        take = lambda x: torch.gather(x.unsqueeze(1).expand(B, K, K), 2, ante)  # noqa: E731
        same = (spk.unsqueeze(2) == take(spk)).long()
        seg_dist = (seg.unsqueeze(2) - take(seg)).clamp(0, self.max_segments - 1)
        offset = bucket_distance(order.view(1, -1, 1) - ante, self.buckets)
        feats = torch.cat([self.same_speaker(same), self.genre(genre).view(B, 1, 1, -1).expand(B, K, c, -1),
                           self.segment_distance(seg_dist), self.antecedent_distance(offset)], -1)
        pair = torch.cat([g_i, g_j, g_i * g_j, self.drop(feats)], -1)
        scores = coarse_top + self.fine(pair).squeeze(-1)
        scores = torch.cat([torch.zeros(B, K, 1, device=h.device, dtype=scores.dtype),
                            scores.masked_fill(~amask, float("-inf"))], -1)

        loss = None
        if cluster_ids is not None:
            cid = torch.gather(cluster_ids, 1, idx).masked_fill(~kmask, 0)
            gold = (take(cid) == cid.unsqueeze(2)) & (cid.unsqueeze(2) > 0) & amask
            gold = torch.cat([~gold.any(-1, keepdim=True), gold], -1)  # the dummy is gold when no antecedent is
            marginal = torch.logsumexp(scores.masked_fill(~gold, float("-inf")), -1)
            per_span = (torch.logsumexp(scores, -1) - marginal).masked_fill(~kmask, 0.0)
            loss = per_span.sum(1).mean()
        return CorefOutput(loss, top_spans, kmask, ante, amask, scores)

    def top_k(self, units: int) -> int:
        """How many spans pruning keeps: top_span_ratio of the document's units, at most max_spans, at least one
        [coref-hoi model.py:176 min(max_num_extracted_spans, top_span_ratio * num_words)]."""
        return max(1, min(self.max_spans, int(self.top_span_ratio * units)))

    def _keep(self, s_m, spans, span_mask, units, gold_mentions: bool) -> torch.Tensor:
        """Indices of the kept candidates per document, -1 padded: all of them (gold mentions) or the pruned top k."""
        B = s_m.shape[0]
        if gold_mentions:
            keep = torch.arange(s_m.shape[1], device=s_m.device).expand(B, -1)
            return keep.masked_fill(~span_mask, -1)
        rows = []
        for b in range(B):
            n = int(span_mask[b].sum())
            k = self.top_k(int(units[b]))
            rows.append(prune(s_m[b, :n].tolist(), [tuple(s) for s in spans[b, :n].tolist()], k))
        K = max(map(len, rows))
        keep = torch.full((B, K), -1, dtype=torch.long, device=s_m.device)
        for b, r in enumerate(rows):
            keep[b, :len(r)] = torch.tensor(r, dtype=torch.long)
        return keep
