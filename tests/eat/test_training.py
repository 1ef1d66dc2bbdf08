"""eat/training.py: the arm it builds trains the loss the paper writes (Eq. 1), and the patience rule gets a head of
its own below the exit."""
import pytest
import torch
import torch.nn.functional as F

from eat import config, training
from eat.model import Settings


def test_the_default_arm_trains_eq_1_final_plus_0_3_exit_and_nothing_else(smoke_cfg):
    # Eq. 1: CE_L + 0.3 CE_exit. A patience head is built only for the patience rule; trained by default, it added
    # 0.3 CE of another layer to every arm's loss
    cfg = smoke_cfg("method=eat")  # debug=smoke still names a patience_layer: unread without patience=true
    torch.manual_seed(0)
    m = training.build(cfg).train()
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    m.attn_dropout = m.hidden_dropout = 0.0
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, m.encoder.config.vocab_size, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    labels = torch.tensor([0, 1, 1, 0])
    with torch.no_grad(), m.using(Settings().dense()):
        out = m(ids, mask, labels=labels)  # training: every head's loss, no exit
        hs = m.eval().encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert sorted(out.layer_logits) == [3, 4] and m.patience_classifier is None
    valid = mask.bool()
    want = F.cross_entropy(m.classifier(m.pool(hs[4], valid)), labels) + 0.3 * F.cross_entropy(
        m.exit_classifier(m.pool(hs[3], valid)), labels)
    assert torch.isclose(out.loss, want, atol=1e-5)


def test_the_patience_rule_builds_its_head_below_the_exit(smoke_cfg):
    cfg = smoke_cfg("method=eat", "method.patience=true", "method.patience_layer=null")
    config.check(cfg)
    assert training.build(cfg).patience_layer == 2  # the layer below the exit head (3 at the paper's exit layer 4)
    bad = smoke_cfg("method=eat", "method.patience=true", "method.patience_layer=3")
    with pytest.raises(ValueError, match=r"method.patience_layer=3 must be in 1..2 .*set method.patience_layer"):
        config.check(bad)
