"""PEMA's partial embedding on tiny random models: the id map, E' in place of E, checkpoints, merge-back, error paths,
PEFT (LoRA on attention and on the embedding) and tied input/output embeddings."""
import numpy as np
import pytest
import torch
from torch import nn
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

from pema import vocab
from pema.partial import PartialEmbedding, PemaError, VocabMap



def tiny_bert(seed=0, vocab_size=50):
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, pad_token_id=0)
    return BertModel(cfg, add_pooling_layer=False)


def tiny_llama(seed=0, vocab_size=40, tie=True):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=32, max_position_embeddings=32, pad_token_id=0,
                      tie_word_embeddings=tie)
    return LlamaForCausalLM(cfg)


IDS = torch.tensor([[2, 7, 9, 30, 7, 0, 0], [2, 11, 9, 12, 41, 30, 3]])
MASK = (IDS != 0).long()


def vmap_for(ids, rows, keep=(0,)):
    counts = vocab.count([ids.flatten().numpy()], rows)
    return VocabMap.from_selected(vocab.select(counts, keep), rows)


def test_counts_select_and_reduction_known_answers():
    counts = vocab.count([np.array([3, 3, 5]), np.array([0, 5, 9])], 10)
    assert counts.tolist() == [1, 0, 0, 2, 0, 2, 0, 0, 0, 1]
    assert vocab.select(counts).tolist() == [0, 3, 5, 9]
    assert vocab.select(counts, keep=[1, 3]).tolist() == [0, 1, 3, 5, 9]
    u = vocab.usage(counts)
    assert (u.total, u.unique, u.rows) == (6, 4, 10)
    r = vocab.Reduction(rows=10, used=4, d=8, n_params=200)
    assert r.embedding_pct == pytest.approx(60.0) and r.removed == 48 and r.model_pct == pytest.approx(24.0)
    assert vocab.zero_count(counts, n_tokens=8).tolist() == [1, 2, 4, 6, 7]  # rows 8, 9: not tokens
    with pytest.raises(ValueError, match="outside the embedding matrix of 10 rows"):
        vocab.count([np.array([10])], 10)


def test_id_map_is_order_preserving_and_rejects_bad_input():
    m = VocabMap.from_selected([0, 2, 7], rows=9)
    assert m.index.tolist() == [0, -1, 1, -1, -1, -1, -1, 2, -1] and (m.used, m.rows) == (3, 9)
    with pytest.raises(PemaError, match="ascending"):
        VocabMap.from_selected([0, 7, 2], rows=9)
    with pytest.raises(PemaError, match="empty"):
        VocabMap.from_selected([], rows=9)


def test_partial_forward_equals_full_and_merge_round_trips_exactly(tmp_path):
    model = tiny_bert().eval()
    full = model.get_input_embeddings().weight.detach().clone()
    ref = model(input_ids=IDS, attention_mask=MASK).last_hidden_state
    vm = vmap_for(IDS, 50)
    p = PartialEmbedding(model, vm, offload_dir=tmp_path, pad_id=0)
    emb = model.get_input_embeddings()
    assert isinstance(emb, nn.Embedding) and emb.weight.shape == (vm.used, 16) and emb.num_embeddings == vm.used
    assert p.path.exists() and sum(t.numel() for t in model.parameters()) == \
        sum(t.numel() for t in tiny_bert().parameters()) - (50 - vm.used) * 16
    assert torch.equal(model(input_ids=IDS, attention_mask=MASK).last_hidden_state, ref)  # original ids go in
    # checkpoints hold the full matrix; loading a full matrix slices it
    sd = model.state_dict()
    assert sd["embeddings.word_embeddings.weight"].shape == (50, 16)
    assert torch.equal(sd["embeddings.word_embeddings.weight"], full)
    with torch.no_grad():
        emb.weight.add_(1.0)
    model.load_state_dict(sd)
    assert torch.equal(emb.weight, full[vm.selected])
    p.merge()
    assert not p.path.exists() and model.get_input_embeddings().weight.shape == (50, 16)
    assert torch.equal(model.get_input_embeddings().weight, full)
    assert torch.equal(model(input_ids=IDS, attention_mask=MASK).last_hidden_state, ref)


def test_rows_outside_v_prime_stay_bit_identical_after_training():
    model = tiny_bert()
    full = model.get_input_embeddings().weight.detach().clone()
    vm = vmap_for(IDS, 50)
    p = PartialEmbedding(model, vm, pad_id=0)  # offload_dir=None: full copy kept in CPU memory
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        model(input_ids=IDS, attention_mask=MASK).last_hidden_state.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    merged = p.merge().get_input_embeddings().weight.detach()
    outside = torch.ones(50, dtype=torch.bool)
    outside[vm.selected] = False
    assert torch.equal(merged[outside], full[outside])
    assert not torch.equal(merged[vm.selected[1:]], full[vm.selected[1:]])  # used rows trained (0 = pad, no grad)


def test_error_paths_name_the_problem():
    model = tiny_bert().eval()
    with pytest.raises(PemaError, match=r"token ids \[5\] are not in V'"):
        p = PartialEmbedding(model, vmap_for(IDS, 50), pad_id=0)
        model(input_ids=torch.tensor([[2, 5]]))
    p.merge()
    with pytest.raises(PemaError, match="pad id 4 would move"):
        PartialEmbedding(tiny_bert(), VocabMap.from_selected([2, 4, 9], 50), pad_id=4)
    with pytest.raises(PemaError, match="covers 40 ids but the input embedding has 50 rows"):
        PartialEmbedding(tiny_bert(), VocabMap.from_selected([0, 3], 40), pad_id=0)
    with pytest.raises(PemaError, match="tied='both'"):
        PartialEmbedding(tiny_bert(), vmap_for(IDS, 50), tied="both")

    class Convolved(nn.Module):  # an input layer that is not an nn.Embedding
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def get_input_embeddings(self):
            return self.layer
    with pytest.raises(PemaError, match="nn.Embedding, but Convolved.get_input_embeddings.. is a Linear"):
        PartialEmbedding(Convolved(), VocabMap.from_selected([0, 1], 4))
    with pytest.raises(PemaError, match="no module with get_input_embeddings"):
        PartialEmbedding(nn.Linear(2, 2), VocabMap.from_selected([0, 1], 4))


def _train_lora(pema: bool, target, init=None, steps=4):
    """LoRA (peft) with or without PEMA. `init`: the adapter weights to start from, so both arms start alike: peft
    draws randn(r, num_embeddings) for the embedding's A before zeroing it, so the random stream after it (B and the
    attention adapters) depends on |V| and a seed alone does not give equal adapters."""
    from peft import LoraConfig, get_peft_model
    model = tiny_bert(seed=1)
    p = PartialEmbedding(model, vmap_for(IDS, 50), pad_id=0) if pema else None
    pm = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=target, lora_dropout=0.0))
    lora = {k: v for k, v in pm.named_parameters() if "lora_" in k}
    if init is None:
        init = {k: v.detach().clone() for k, v in lora.items()}
    with torch.no_grad():
        for k, v in lora.items():
            v.copy_(init[k][:, p.vmap.selected] if v.shape != init[k].shape else init[k])  # A: (r, |V|) -> (r, |V'|)
    opt = torch.optim.AdamW([t for t in pm.parameters() if t.requires_grad], lr=1e-2, weight_decay=0.0)
    torch.manual_seed(3)  # the same dropout masks in both arms
    for _ in range(steps):
        pm(input_ids=IDS, attention_mask=MASK).last_hidden_state.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    merged = pm.merge_and_unload()
    if p is not None:
        p.merge()
    return merged.eval(), init


@pytest.mark.parametrize("target", [["query", "value"], ["query", "value", "word_embeddings"]],
                         ids=["lora-attention", "lora-attention+embedding"])
def test_lora_with_pema_equals_lora_without(target):
    base, init = _train_lora(False, target)
    pema, _ = _train_lora(True, target, init)
    e0, e1 = base.get_input_embeddings().weight, pema.get_input_embeddings().weight
    assert e1.shape == e0.shape and (e1 - e0).abs().max() <= 1e-6
    if "word_embeddings" in target:
        assert not torch.equal(e0, tiny_bert(seed=1).get_input_embeddings().weight)  # the adapter moved E
    out0 = base(input_ids=IDS, attention_mask=MASK).last_hidden_state
    out1 = pema(input_ids=IDS, attention_mask=MASK).last_hidden_state
    assert (out0 - out1).abs().max() <= 1e-6


def test_merge_refuses_while_lora_wraps_the_embedding():
    from peft import LoraConfig, get_peft_model
    model = tiny_bert()
    p = PartialEmbedding(model, vmap_for(IDS, 50), pad_id=0)
    pm = get_peft_model(model, LoraConfig(r=2, target_modules=["word_embeddings"]))
    assert pm.base_model.model.get_input_embeddings().lora_embedding_A["default"].shape == (2, p.vmap.used)
    with pytest.raises(PemaError, match="merge_and_unload"):
        p.merge()


LM_IDS = torch.tensor([[1, 5, 9, 5, 22, 3], [1, 7, 9, 30, 3, 3]])


def _train_lm(model, steps=3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=LM_IDS, labels=LM_IDS).loss
        loss.backward()
        losses.append(loss.item())
        opt.step()
        opt.zero_grad()
    return losses


def test_tied_untie_is_exact_for_the_untied_model():
    untied = tiny_llama()  # the baseline: the same weights, input and output as two matrices
    untied.config.tie_word_embeddings = False
    untied.lm_head.weight = nn.Parameter(untied.lm_head.weight.detach().clone())
    model = tiny_llama()
    assert model.lm_head.weight is model.get_input_embeddings().weight
    p = PartialEmbedding(model, vmap_for(LM_IDS, 40, keep=(0,)), tied="untie", pad_id=0)
    assert p.tied and model.lm_head.weight.shape == (40, 16) and not model.config.tie_word_embeddings
    assert _train_lm(untied) == pytest.approx(_train_lm(model), abs=1e-6)
    p.merge()
    for a, b in ((untied.get_input_embeddings().weight, model.get_input_embeddings().weight),
                 (untied.lm_head.weight, model.lm_head.weight)):
        assert (a - b).abs().max() <= 1e-6
    logits = model(input_ids=LM_IDS).logits
    assert logits.shape[-1] == 40 and (logits - untied(input_ids=LM_IDS).logits).abs().max() <= 1e-5


def test_tied_restrict_is_an_approximation_and_says_how_much():
    """restrict: the softmax covers V' only. Before training the restricted logits are the full logits at V's columns
    (exact); the loss drops by the probability mass of the excluded tokens, so training differs from the tied model."""
    tied = tiny_llama()
    ref_logits = tied(input_ids=LM_IDS).logits.detach()
    ref_loss = tied(input_ids=LM_IDS, labels=LM_IDS).loss.item()
    model = tiny_llama()
    vm = vmap_for(LM_IDS, 40, keep=(0,))
    p = PartialEmbedding(model, vm, tied="restrict", pad_id=0)
    assert model.lm_head.weight is model.get_input_embeddings().weight and model.config.vocab_size == vm.used
    out = model(input_ids=LM_IDS, labels=LM_IDS)
    assert out.logits.shape[-1] == vm.used
    assert (out.logits - ref_logits[..., vm.selected]).abs().max() <= 1e-5
    assert out.loss.item() < ref_loss  # normalised over fewer tokens: not the paper's (exact) setting
    sd = model.state_dict()
    assert sd["lm_head.weight"].shape == (40, 16) and torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])
    _train_lm(model)
    _train_lm(tied)
    p.merge()
    assert model.lm_head.weight is model.get_input_embeddings().weight and model.config.vocab_size == 40
    diff = (model.get_input_embeddings().weight - tied.get_input_embeddings().weight).abs().max().item()
    assert diff > 1e-4  # documented difference from the tied baseline (rows outside V' trained there, not here)
