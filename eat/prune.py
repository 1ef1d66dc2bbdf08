"""Progressive token pruning [P Alg. 1]: score the tokens after a layer, always keep [CLS], keep the top ones and
either remove the rest from the sequence (later layers run on fewer tokens) or zero-mask them in place (the official
code: nothing gets shorter).

Two keep rules over t valid tokens ([CLS] included) at prune ratio p:
    paper  1 + ceil((1 - p)(t - 1))   Algorithm 1: [CLS] plus the top share of the others  [P]
    repo   ceil((1 - p) t)            prune_tokens_vectorized: [CLS] counted among the kept  [R]
"""
from __future__ import annotations

import torch

from eat.config import PRUNE_RULES as RULES  # the one list: the config refuses any other rule before any work

EPS = 1e-9  # (1 - p) t is exact in decimal but not in binary: 0.7 * 10 = 7.000000000000001 must keep 7, not 8


def keep_count(t: torch.Tensor | int, ratio: float, rule: str) -> torch.Tensor:
    """How many of t valid tokens survive one pruning step (at least 1: [CLS]); t a tensor of counts or one int."""
    keep = 1.0 - ratio
    t = torch.as_tensor(t).to(torch.float64)
    if rule == "paper":
        n = 1 + torch.ceil(keep * (t - 1) - EPS)
    elif rule == "repo":
        n = torch.ceil(keep * t - EPS)
    else:
        raise ValueError(f"prune rule {rule!r} is not one of {', '.join(RULES)}")
    return n.clamp(min=1).minimum(t.clamp(min=1)).long()


def kept_indices(scores: torch.Tensor, valid: torch.Tensor, ratio: float, rule: str):
    """(B, T) scores and validity -> (idx (B, K), new_valid (B, K)): the kept slots of each row in their original
    order (so [CLS] stays at 0 and positions stay increasing), rows shorter than K padded with slot 0 and invalid."""
    s = scores.float().masked_fill(~valid, float("-inf"))
    s[:, 0] = float("inf")  # [CLS] always survives
    k = keep_count(valid.sum(1), ratio, rule)
    rank = s.argsort(dim=1, descending=True, stable=True).argsort(dim=1, stable=True)  # 0 = highest score
    keep = (rank < k[:, None]) & valid
    keep[:, 0] = True
    K = int(k.max())
    # kept slots first, in their original order (a stable sort on the "dropped" flag)
    idx = (~keep).to(torch.int8).argsort(dim=1, stable=True)[:, :K]
    new_valid = torch.arange(K, device=idx.device)[None, :] < k[:, None]
    return idx.masked_fill(~new_valid, 0), new_valid


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, T, ...) -> x[b, idx[b]] (B, K, ...)."""
    shape = idx.shape + x.shape[2:]
    return x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(shape))


def l2_scores(h: torch.Tensor) -> torch.Tensor:
    """s_i = ||h_i||_2 [P Algorithm 1]."""
    return h.float().norm(dim=-1)


def scheduled_retention(t: int, prune_after, ratio: float, rule: str, layers: int) -> list[float]:
    """The keep rule's schedule for an input of t valid tokens: the share of them left after each layer 1..layers
    (after that layer's pruning step, if any): 1, 1, 0.7, 0.7, 0.49, 0.49 in the limit of long inputs [P Fig. 2]."""
    out, n = [], t
    for i in range(1, layers + 1):
        if ratio > 0 and i in prune_after:
            n = int(keep_count(n, ratio, rule))
        out.append(n / t)
    return out
