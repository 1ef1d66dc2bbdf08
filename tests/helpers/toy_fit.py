"""A linearly separable toy problem for the training loop (experiments.train.fit): its settings, a one-layer model,
the data, its batches and the accuracy fit selects on."""
from types import SimpleNamespace

import torch
from torch import nn

from experiments.models import HeadOutput


def cfg(**kw):
    """The train settings fit reads, with their values overridden by `kw`."""
    base = dict(lr=0.05, weight_decay=0.0, epochs=1.0, max_steps=-1, warmup_ratio=0.0, grad_accum=1,
                max_grad_norm=0.0, eval_every=0, patience=0, progress=False)
    return SimpleNamespace(**{**base, **kw})


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x, labels):
        logits = self.lin(x)
        return HeadOutput(logits, nn.functional.cross_entropy(logits, labels))


def data(n=64, seed=0):
    """n points in 4-D labelled by the sign of their first coordinate."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long()


def batches(x, y, bs):
    """(batches(epoch), batches per epoch), as fit takes them."""
    return (lambda epoch: ({"x": x[i:i + bs], "labels": y[i:i + bs]} for i in range(0, len(x), bs))), len(x) // bs


def accuracy(model, x, y):
    return {"eval/acc": (model(x, y).logits.argmax(1) == y).float().mean().item()}
