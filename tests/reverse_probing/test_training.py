"""The coreference probe trains through the suite's loop (experiments.train.fit) exactly as the official code's loop
does: two optimizers each clipped on its own, the documents' order and windows drawn epoch by epoch, an evaluation
after every epoch, early stopping on dev CoNLL F1 with patience and a minimum of epochs, eval scored once at the best
epoch's weights."""
import copy

import numpy as np
import pytest
import torch

from experiments.context import RunContext
from reverse_probing import training
from reverse_probing.documents import collate, prepare, window
from experiments.config import compose

WORDS = [["The", "cat", "saw", "the", "dog", "."], ["It", "was", "up", "."], ["Then", "it", "left", "."]]


def documents(n: int) -> list:
    """n three-sentence documents, each sentence its own segment (max_len 8), with the pronoun's gold link."""
    out = []
    for i in range(n):
        doc = {"doc_key": f"nw/{i}", "sentences": WORDS, "clusters": [[[1 + i % 2 * 3, 1 + i % 2 * 3], [6, 6]]],
               "mentions": [[1, 1], [4, 4], [6, 6]]}
        out.append(prepare(doc, [1] * 14, 8, gold_mentions=True, max_width=4))
    return out


def setup(**method):
    cfg = compose("experiment=reverse_probing/smoke", "method.aggregate=attention", "method.docs_per_step=2",
                  "method.max_training_segments=2", *(f"method.{k}={v}" for k, v in method.items()))
    g = torch.Generator().manual_seed(0)
    data = {}
    for split, n in (("train", 5), ("dev", 3), ("eval", 3)):
        docs = documents(n)
        data[split] = (docs, [[torch.randn(len(d.keep), 32, generator=g) for d in docs] for _ in range(2)])
    torch.manual_seed(0)
    return cfg, training.build(cfg, [32, 32], 32), data


def context(tmp_path) -> RunContext:
    return RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu")


def test_the_probe_trains_as_the_official_loop_does(tmp_path):
    """The official loop written out: per step, the documents' features cut to their window, every optimizer's
    gradients zeroed, the loss backpropagated, then each optimizer clips its own parameters, steps and schedules."""
    cfg, probe, data = setup(max_epochs=3, min_epochs=1, patience=10)
    reference, dropout = copy.deepcopy(probe), torch.get_rng_state()
    ctx = context(tmp_path)
    metrics = training.train(cfg, ctx, probe, data)
    torch.set_rng_state(dropout)  # the reference draws the same dropout masks
    m = cfg.method
    docs, feats = data["train"]
    rng = np.random.default_rng(cfg.seed)
    per_epoch = -(-len(docs) // m.docs_per_step)
    opts = training.optimizers(cfg, reference, m.max_epochs * per_epoch)
    assert len(opts) == 2  # the head's Adam and the attention aggregator's AdamW
    epochs, states = [], []
    for _ in range(m.max_epochs):
        reference.train()
        losses = []
        for idx in training.batches(len(docs), m.docs_per_step, rng):
            cut = [window(docs[i], m.max_training_segments, rng) for i in idx]
            batch = collate([d for d, _ in cut], training.take(feats, idx, [rows for _, rows in cut]))
            out = reference(batch.pop("sources"), **batch, gold_mentions=m.gold_mentions)
            for o in opts:
                o.optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            for o in opts:
                torch.nn.utils.clip_grad_norm_(o.params, m.grad_clip)
                o.optimizer.step()
                o.schedule.step()
            losses.append(out.loss.item())
        dev = training.score(reference, *data["dev"], m.gold_mentions)
        epochs.append({"epoch": len(epochs) + 1, "train_loss": float(np.mean(losses)), "dev_conll_f1": dev["conll_f1"]})
        states.append(copy.deepcopy(reference.state_dict()))
    assert ctx.extra["curve"] == epochs
    assert len(ctx.extra["alpha"]) == 3 and metrics["train/epochs"] == 3
    best = max(range(3), key=lambda e: (epochs[e]["dev_conll_f1"], -e))  # the first of equals
    assert metrics["train/best_epoch"] == best + 1 and metrics["dev/conll_f1"] == epochs[best]["dev_conll_f1"]
    for k, v in probe.state_dict().items():
        assert torch.equal(v, states[best][k]), k
    reference.load_state_dict(states[best])
    expected = training.score(reference, *data["eval"], m.gold_mentions)
    assert metrics["eval/conll_f1"] == expected["conll_f1"] and metrics["eval/muc_f1"] == expected["muc_f1"]
    assert metrics["time/train_s"] >= metrics["time/epoch_s"] > 0


@pytest.mark.parametrize("dev_f1,min_epochs,patience,stopped_at,best", [
    ([0.5, 0.4, 0.3, 0.2, 0.1, 0.0], 3, 1, 3, 1),  # patience is spent at epoch 2, but no stop before epoch 3
    ([0.5, 0.4, 0.6, 0.6, 0.2, 0.0], 1, 2, 5, 3),  # a tie is no improvement
    ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 1, 1, 6, 6),  # every epoch improves: max_epochs
])
def test_training_stops_after_patience_not_before_min_epochs(dev_f1, min_epochs, patience, stopped_at, best,
                                                            tmp_path, monkeypatch):
    cfg, probe, data = setup(max_epochs=6, min_epochs=min_epochs, patience=patience)
    scores, snapshots, real = iter(dev_f1), [], training.score

    def scripted(model, docs, feats, gold_mentions, batch_size=64):
        if docs is not data["dev"][0]:
            return real(model, docs, feats, gold_mentions, batch_size)
        snapshots.append(copy.deepcopy(model.state_dict()))
        return {"conll_f1": next(scores)}
    monkeypatch.setattr(training, "score", scripted)
    metrics = training.train(cfg, context(tmp_path), probe, data)
    assert (metrics["train/epochs"], metrics["train/best_epoch"]) == (stopped_at, best)
    assert len(snapshots) == stopped_at and metrics["dev/conll_f1"] == dev_f1[best - 1]
    for k, v in probe.state_dict().items():  # eval was scored at the best epoch's weights
        assert torch.equal(v, snapshots[best - 1][k]), k
