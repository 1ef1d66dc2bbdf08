"""eat/inference.py on tiny random encoders: the batch exit rule scored at batch 1, the choice of tau among identical
candidates, and the per-layer counts the report's Fig. 2 and FLOPs read, against hand counts."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from eat import inference
from eat.model import EatModel, Settings
from experiments import data
from tests.helpers.eat_inputs import bert, threshold


def _feats(n=64, seed=0, vocab=100):
    """n examples of 5..40 tokens as the runner's features ([CLS] = 2 first)."""
    from datasets import Dataset
    g = torch.Generator().manual_seed(seed)
    ids = []
    for _ in range(n):
        t = int(torch.randint(5, 41, (1,), generator=g))
        ids.append([2] + torch.randint(5, vocab, (t - 1,), generator=g).tolist())
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids],
                              "labels": torch.randint(0, 3, (n,), generator=g).tolist()})


def test_the_batch_exit_rule_is_scored_at_batch_1():
    # the paper scored (and timed) the official code at batch 1, where "exit only when the whole batch is confident"
    # is a per-example exit; scored on batches of 64 nothing exits, a quantity the paper never measured
    m = EatModel(bert(), 3, exit_layer=4).eval().double()
    with torch.no_grad():
        m.exit_classifier.weight.mul_(30)
    feats = _feats()
    paper = Settings(prune_rule="repo", prune_mode="mask", kernel="masked", exit_mode="batch", window=8)
    conf = _softmax_max(inference.predict(m, feats, 0, 64, torch.device("cpu"), paper)["exit_logits"])
    tau, n_exit = threshold(conf, 8, 24)
    s = replace(paper, tau=tau)  # about 3 in 4 examples are confident
    by_one = []
    with torch.no_grad(), m.using(s):
        for row in data.rows_of(feats):
            o = m(**{k: v for k, v in data.collate([row], 0).items() if k != "labels"})
            by_one.append((o.logits[0], int(o.depth[0])))
    scored = inference.predict(m, feats, 0, 64, torch.device("cpu"), s)
    assert scored["depth"].tolist() == [d for _, d in by_one]
    assert (scored["depth"] == 4).sum() == n_exit
    assert np.abs(scored["logits"] - torch.stack([z for z, _ in by_one]).numpy()).max() <= 1e-5  # fp32 out
    batched = inference.predict(m, feats, 0, 64, torch.device("cpu"), s, batch1=False)  # the batch rule on 64 at once
    assert batched["depth"].tolist() == [6] * 64


def _softmax_max(z):
    return torch.softmax(torch.as_tensor(z), -1).amax(-1).numpy()


def test_tau_chosen_among_identical_candidates_says_so():
    from omegaconf import OmegaConf
    m = EatModel(bert(), 3, exit_layer=4).eval()
    with torch.no_grad():
        m.exit_classifier.weight.zero_()  # uniform: 1/3 < every tau, nothing ever exits
    cfg = OmegaConf.create({"method": {"taus": [0.95, 0.8, 0.9], "tau_tolerance": 1.0},
                            "hardware": {"eval_batch_size": 16}})
    feats = _feats(20)
    base = inference.accuracy(inference.predict(m, feats, 0, 16, torch.device("cpu"), m.settings))
    tau, accs, why = inference.choose_tau(cfg, m, feats, 0, base, torch.device("cpu"))
    assert tau == 0.8 and set(accs) == {0.8, 0.9, 0.95}
    assert why.startswith("all candidates identical on dev") and "lowest tau on the grid, 0.8" in why


def _keep(t):
    """The paper rule by hand, in integers: [CLS] + ceil(0.7 (t - 1)) others."""
    return 1 + (7 * (t - 1) + 9) // 10


@pytest.mark.parametrize("mode,kernel", [("remove", "banded"), ("mask", "masked")])
def test_per_layer_statistics_match_a_hand_count(mode, kernel):
    # the contract eat/report.py (Fig. 2) and eat/flops.py read: extra.layers, one dict per encoder layer
    m = EatModel(bert(), 3, exit_layer=4).eval().double()
    with torch.no_grad():
        m.exit_classifier.weight.mul_(30)
    feats = _feats(40, seed=1)
    s = Settings(window=8, prune_mode=mode, kernel=kernel)
    tau, n_exit = threshold(_softmax_max(inference.predict(m, feats, 0, 16, torch.device("cpu"), s)["exit_logits"]), 15, 30)
    s = replace(s, tau=tau)  # some exit after layer 4, the others run on
    p = inference.predict(m, feats, 0, 16, torch.device("cpu"), s)
    stats = inference.layer_stats(p, s)
    n = np.asarray([len(r) for r in feats["input_ids"]])
    k2 = np.asarray([_keep(t) for t in n])
    k4 = np.asarray([_keep(t) for t in k2])
    full = p["depth"] == 6
    assert (~full).sum() == n_exit and 0 < n_exit < 40
    slots = {"remove": [n, n, k2, k2, k4, k4], "mask": [n] * 6}[mode]
    left = [n, k2, k2, k4, k4, k4]
    t = int(round(n.mean()))
    sched = [1, _keep(t) / t, _keep(t) / t, _keep(_keep(t)) / t, _keep(_keep(t)) / t, _keep(_keep(t)) / t]
    assert [d["layer"] for d in stats] == [1, 2, 3, 4, 5, 6]
    for i, d in enumerate(stats):
        on = full if i >= 4 else np.ones(40, bool)
        assert d["running"] == pytest.approx(on.mean())
        assert d["tokens_in"] == pytest.approx(slots[i][on].mean())
        assert d["retention_observed"] == pytest.approx((left[i][on] / n[on]).mean())
        assert d["retention_scheduled"] == pytest.approx(sched[i])
    shape = inference.shape_of(p, m, s)
    assert shape["seq_len_mean"] == pytest.approx(n.mean())
    assert shape["model_dims"] == {"layers": 6, "hidden": 32, "intermediate": 64, "heads": 4, "window": 8}
