"""SFT losses: the completion-only loss equals the cross-entropy at the label positions computed by hand from the
full forward, and the whole-text loss is the model's own."""
import pytest
import torch

from intrinsic_dim import sft


def _data(tok):
    prompts = ["a dull film\nAnswer:\n", "fine\nAnswer:\n", "a long, long and quite good film\nAnswer:\n"]
    labels = [" negative", " positive", " positive"]
    texts = [tok(p + lab)["input_ids"] for p, lab in zip(prompts, labels)]
    return texts, [len(tok(p)["input_ids"]) for p in prompts]


def test_completion_loss_equals_cross_entropy_at_the_label_positions(lm_tok):
    lm, tok = lm_tok
    texts, starts = _data(tok)
    (batch,) = sft.batches(texts, 3, seed=0, epoch=1, group_by_length=False, pad_id=tok.pad_token_id,
                           prompt_lens=starts)
    with torch.no_grad():
        got = sft.completion_loss(lm, batch)
        logits = lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    terms = []
    for b, i in enumerate(batch["input_ids"].tolist()):
        n = int(batch["attention_mask"][b].sum())
        text = texts[[t[:n] for t in texts].index(i[:n])]
        start = starts[texts.index(text)]
        for pos in range(start, len(text)):  # token pos is predicted at pos - 1
            terms.append(-torch.log_softmax(logits[b, pos - 1], -1)[text[pos]])
    assert len(terms) == sum(len(t) - s for t, s in zip(texts, starts)) >= 3  # every label token, no prompt token
    assert torch.allclose(got, torch.stack(terms).mean(), atol=1e-5)
    full = sft.batches(texts, 3, seed=0, epoch=1, group_by_length=False, pad_id=tok.pad_token_id)[0]
    with torch.no_grad():  # without prompt_lens the loss is the model's own over the whole text
        assert torch.allclose(sft.completion_loss(lm, full), lm(**full).loss, atol=1e-5)


def test_completion_loss_refuses_a_batch_without_labels(lm_tok):
    lm, tok = lm_tok
    texts, _ = _data(tok)
    (batch,) = sft.batches(texts, 3, 0, 1, False, tok.pad_token_id, prompt_lens=[len(t) for t in texts])
    with pytest.raises(ValueError, match="no labelled token"):
        sft.completion_loss(lm, batch)


def _lora_grads(lm, batch, checkpointing: bool, precision: str = "fp32", prompt_lens=None):
    """(loss, {lora param: grad}) of one training step of a fresh LoRA wrap (same init seed every call)."""
    import copy
    torch.manual_seed(1)
    model = sft.add_lora(copy.deepcopy(lm), r=4, alpha=8, dropout=0.0, targets=["q_proj", "v_proj"])
    for n, p in model.named_parameters():
        if "lora_B" in n:  # B = 0 would make every A gradient zero: nothing to compare
            torch.nn.init.normal_(p, std=0.02)
    sft.set_checkpointing(model, checkpointing)
    model.train()
    loss = sft.step_loss(model, batch, precision, prompt_lens)
    loss.backward()
    sft.set_checkpointing(model, False)
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("completion", [False, True])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(lm_tok, completion):
    lm, tok = lm_tok
    texts, starts = _data(tok)
    starts = starts if completion else None
    (batch,) = sft.batches(texts, 3, seed=0, epoch=1, group_by_length=False, pad_id=tok.pad_token_id,
                           prompt_lens=starts)
    base = lm.get_decoder()
    recomputed = []
    hook = base.layers[0].input_layernorm.register_forward_hook(lambda *a: recomputed.append(1))
    try:
        loss0, g0 = _lora_grads(lm, batch, False, prompt_lens=starts)
        n_plain = len(recomputed)
        loss1, g1 = _lora_grads(lm, batch, True, prompt_lens=starts)
    finally:
        hook.remove()
    assert len(recomputed) - n_plain == 2 * n_plain  # with checkpointing the block ran again in backward
    assert torch.allclose(loss0, loss1, atol=1e-6)
    assert g0.keys() == g1.keys() and len(g0) == 12  # A and B of q and v in 3 layers
    for n in g0:
        assert torch.allclose(g0[n], g1[n], rtol=1e-4, atol=1e-7), n


def test_bf16_autocast_trains_on_cpu_close_to_fp32(lm_tok):
    lm, tok = lm_tok
    texts, _ = _data(tok)
    (batch,) = sft.batches(texts, 3, seed=0, epoch=1, group_by_length=False, pad_id=tok.pad_token_id)
    loss32, g32 = _lora_grads(lm, batch, False)
    loss16, g16 = _lora_grads(lm, batch, True, precision="bf16")
    assert loss16.dtype == torch.float32 and torch.isfinite(loss16)  # the loss is fp32 (cross-entropy autocasts up)
    assert abs(float(loss16 - loss32)) < 0.05 * float(loss32)
    assert all(g.dtype == torch.float32 for g in g16.values())  # fp32 master weights keep fp32 gradients
    cos = [torch.nn.functional.cosine_similarity(g16[n].flatten(), g32[n].flatten(), 0) for n in g32]
    assert min(cos) > 0.9
    with pytest.raises(ValueError, match="method.sft_precision"):
        sft.step_loss(lm, batch, "fp16")


def test_train_runs_bf16_with_checkpointing_and_leaves_it_off(lm_tok):
    import copy
    lm, tok = lm_tok
    texts, _ = _data(tok)
    model = sft.add_lora(copy.deepcopy(lm), r=4, alpha=8, dropout=0.1, targets=["q_proj", "v_proj"])
    out = sft.train(model, texts, epochs=1, lr=1e-3, batch_size=2, warmup_ratio=0.0, seed=0,
                    device=torch.device("cpu"), pad_id=tok.pad_token_id, precision="bf16",
                    gradient_checkpointing=True)
    assert out["steps"] == 2 and out["last_loss"] == out["last_loss"]  # finite, not NaN
    assert not model.get_base_model().is_activation_checkpointing  # extraction after training runs plainly
    with pytest.raises(ValueError, match="method.sft_precision"):
        sft.train(model, texts, epochs=1, lr=1e-3, batch_size=2, warmup_ratio=0.0, seed=0,
                  device=torch.device("cpu"), pad_id=tok.pad_token_id, precision="fp16")


def test_train_steps_through_the_shared_optimizer_step(lm_tok, monkeypatch):
    import copy

    from experiments import train as shared
    lm, tok = lm_tok
    texts, _ = _data(tok)
    calls = []

    def counted(optimizers, scaler):
        calls.append(scaler.is_enabled())
        return shared.optimizer_step(optimizers, scaler)
    monkeypatch.setattr(sft, "optimizer_step", counted)
    model = sft.add_lora(copy.deepcopy(lm), r=4, alpha=8, dropout=0.0, targets=["q_proj", "v_proj"])
    out = sft.train(model, texts, epochs=2, lr=1e-3, batch_size=2, warmup_ratio=0.0, seed=0,
                    device=torch.device("cpu"), pad_id=tok.pad_token_id)
    assert out["steps"] == 4 and calls == [False] * 4  # every step, no loss scaling (fp32)
