"""What the EAT tests build their models and batches from: a tiny random BERT encoder, a padded batch of token ids,
and an exit threshold that no example's confidence sits near."""
import numpy as np
import torch
from transformers import BertConfig, BertModel


def bert(layers=6, seed=0, dropout=0.1):
    """A random BERT encoder (hidden 32, 4 heads, vocabulary 100, 256 positions) in eval mode."""
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=256, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout)
    return BertModel(cfg, add_pooling_layer=False).eval()


def batch(seed=1, B=3, T=70):
    """(ids, mask) of B rows of T tokens, [CLS] (id 2) first; row 1 is padded after 50 tokens and row 2 after 10."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (B, T), generator=g)
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 50:] = 0
    mask[2, 10:] = 0
    return ids, mask


def threshold(conf, lo: int, hi: int) -> tuple[float, int]:
    """A tau in the widest gap between sorted confidences k and k + 1 for k in lo..hi - 1 (no example sits near it,
    so rounding cannot flip one) and how many examples reach it."""
    c = np.sort(np.asarray(conf, dtype=float))
    k = lo + int(np.argmax(np.diff(c)[lo:hi]))
    return float(c[k:k + 2].mean()), len(c) - k - 1
