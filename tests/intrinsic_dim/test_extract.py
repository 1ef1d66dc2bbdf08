"""Extraction: the store's right-padded last-token states equal the unpadded forward and a left-padded batch (the
official code's batching) to float rounding, the last-position logits equal the LM's, label first tokens must differ,
reruns hit the store."""
import pytest
import torch

from experiments.models import byte_tokenizer, tokenizer_fingerprint
from experiments.store import ActivationStore
from intrinsic_dim import extract

PROMPTS = ["a dull film\nQuestion: Was that sentence positive or negative? Answer:\n",
           "ok\n", "a much longer prompt with a few demonstrations\nyes\n\nand a query\n", "short one\n"]


def _states(store, lm, tok, **kw):
    ex = extract.tokenize(tok, PROMPTS, 256)
    return ex, extract.last_token_states(store, lm, ex, tok_key=tokenizer_fingerprint(tok), max_length=256,
                                         batch_size=4, device=torch.device("cpu"), **kw)


def test_last_token_states_equal_unpadded_and_left_padded(lm_tok, tmp_path):
    lm, tok = lm_tok
    store = ActivationStore(tmp_path, dtype=torch.float32)
    ex, S = _states(store, lm, tok)
    assert S.shape == (4, len(PROMPTS), 32)  # L+1 hidden states
    T = max(len(e["input_ids"]) for e in ex)
    ids = torch.full((len(ex), T), tok.pad_token_id)
    mask = torch.zeros(len(ex), T, dtype=torch.long)
    for i, e in enumerate(ex):
        ids[i, T - len(e["input_ids"]):] = torch.tensor(e["input_ids"])
        mask[i, T - len(e["input_ids"]):] = 1
    with torch.inference_mode():
        left = lm(input_ids=ids, attention_mask=mask, output_hidden_states=True)  # the official code's batching
        for i, e in enumerate(ex):
            one = lm(input_ids=torch.tensor([e["input_ids"]]), output_hidden_states=True)
            for layer in range(4):
                assert torch.allclose(torch.from_numpy(S[layer, i]), one.hidden_states[layer][0, -1], atol=1e-6)
                assert torch.allclose(torch.from_numpy(S[layer, i]), left.hidden_states[layer][i, -1], atol=1e-5)
            logits = extract.last_logits(lm, S[-1, i:i + 1], list(range(10, 20)), torch.device("cpu"))
            assert torch.allclose(torch.from_numpy(logits[0]), one.logits[0, -1, 10:20], atol=1e-5)


def test_rerun_reads_the_store_and_computes_nothing(lm_tok, tmp_path):
    lm, tok = lm_tok
    store = ActivationStore(tmp_path, dtype=torch.float32)
    _, a = _states(store, lm, tok, model_key="m")
    n = store.stats.computed
    assert n == 4 * len(PROMPTS)
    _, b = _states(ActivationStore(tmp_path, dtype=torch.float32), lm, tok, model_key="m")
    assert (a == b).all()
    fresh = ActivationStore(tmp_path, dtype=torch.float32)
    _states(fresh, lm, tok, model_key="m")
    assert fresh.stats.computed == 0 and fresh.stats.hits > 0


def test_label_first_tokens_must_differ():
    tok = byte_tokenizer()
    assert len(set(extract.label_token_ids(tok, ["negative", "positive"]))) == 2
    with pytest.raises(extract.LabelTokenCollision, match="'yes' and 'yeah' share their first token"):
        extract.label_token_ids(tok, ["yes", "yeah"])


def test_too_long_prompt_is_an_error_not_a_truncation():
    with pytest.raises(ValueError, match="max_prompt_tokens=5"):
        extract.tokenize(byte_tokenizer(), ["a long prompt"], 5)


def test_logit_accuracy():
    import numpy as np
    acc, ok = extract.logit_accuracy(np.array([[0.1, 0.9], [2.0, 1.0], [0.0, 3.0]]), [1, 0, 0])
    assert acc == pytest.approx(2 / 3) and ok.tolist() == [True, True, False]


def test_label_tokens_in_context_follow_the_newline_and_must_differ():
    tok = byte_tokenizer()  # one token per byte; its pre-tokenizer drops whitespace
    assert extract.label_tokens(tok, " yes", in_context=True) == tok.encode("yes", add_special_tokens=False)
    with pytest.raises(extract.LabelTokenCollision, match="' yes' and ' yeah' share their first token"):
        extract.label_token_ids(tok, [" yes", " yeah"], in_context=True)


@pytest.mark.assets
def test_smollm2_scores_spaced_labels_as_single_tokens_after_the_newline():
    from transformers import AutoTokenizer

    from experiments.assets import cache_dir
    tok = AutoTokenizer.from_pretrained(str(cache_dir() / "models" / "smollm2-135m"))
    for labels in ([" negative", " positive"], [" Maybe", " No", " Yes"]):  # rt-polarity, vitaminc (MNLI template)
        ids = extract.label_token_ids(tok, labels, in_context=True)
        assert [extract.label_tokens(tok, lab, True) for lab in labels] == [[i] for i in ids]
        assert [tok.convert_ids_to_tokens(i) for i in ids] == ["Ġ" + lab.strip() for lab in labels]
        # the official no-space tokens differ
        assert ids != extract.label_token_ids(tok, [lab.strip() for lab in labels])
