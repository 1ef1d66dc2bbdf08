"""SFT losses: the completion-only loss equals the cross-entropy at the label positions computed by hand from the
full forward, and the whole-text loss is the model's own."""
import pytest
import torch

from intrinsic_dim import sft as S


def _data(tok):
    prompts = ["a dull film\nAnswer:\n", "fine\nAnswer:\n", "a long, long and quite good film\nAnswer:\n"]
    labels = [" negative", " positive", " positive"]
    texts = [tok(p + lab)["input_ids"] for p, lab in zip(prompts, labels)]
    return texts, [len(tok(p)["input_ids"]) for p in prompts]


def test_completion_loss_equals_cross_entropy_at_the_label_positions(lm_tok):
    lm, tok = lm_tok
    texts, starts = _data(tok)
    (batch,) = S.batches(texts, 3, seed=0, epoch=1, group_by_length=False, pad_id=tok.pad_token_id,
                         prompt_lens=starts)
    with torch.no_grad():
        got = S.completion_loss(lm, batch)
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
    full = S.batches(texts, 3, seed=0, epoch=1, group_by_length=False, pad_id=tok.pad_token_id)[0]
    with torch.no_grad():  # without prompt_lens the loss is the model's own over the whole text
        assert torch.allclose(S.completion_loss(lm, full), lm(**full).loss, atol=1e-5)


def test_completion_loss_refuses_a_batch_without_labels(lm_tok):
    lm, tok = lm_tok
    texts, _ = _data(tok)
    (batch,) = S.batches(texts, 3, 0, 1, False, tok.pad_token_id, prompt_lens=[len(t) for t in texts])
    with pytest.raises(ValueError, match="no labelled token"):
        S.completion_loss(lm, batch)
