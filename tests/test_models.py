"""Model, tokenizer and causal-LM loading, the tokenizer fingerprint, heads and pooling (tiny random models)."""
import pytest
import torch

from experiments.config import compose
from experiments.models import (SequenceHead, SpanHead, TokenHead, build, byte_tokenizer, load_causal_lm,
                                load_tokenizer, pool, tokenizer_fingerprint, weights_path)


def test_byte_tokenizer_roundtrips_any_text_and_marks_pairs():
    tok = byte_tokenizer()
    enc = tok("héllo wörld", "ünïcode ✓")
    assert enc["input_ids"][0] == tok.cls_token_id and enc["input_ids"].count(tok.sep_token_id) == 2
    assert set(enc["token_type_ids"]) == {0, 1}
    assert tok.decode(tok("héllo wörld", add_special_tokens=False)["input_ids"]) == "héllowörld"  # words, no spaces
    assert len(tok) == 260


def test_pooling_last_picks_the_last_real_token_under_right_padding():
    h = torch.arange(2 * 4 * 3, dtype=torch.float).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert torch.equal(pool(h, mask, "last"), torch.stack([h[0, 2], h[1, 3]]))
    assert torch.equal(pool(h, mask, "cls"), h[:, 0])
    assert torch.allclose(pool(h, mask, "mean")[0], h[0, :3].mean(0))
    with pytest.raises(ValueError, match="valid: cls, mean, last"):
        pool(h, mask, "max")


def test_token_head_ignores_minus_100():
    torch.manual_seed(0)
    head = TokenHead(8, 3).eval()
    h, mask = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.long)
    full = head(h, mask, labels=torch.tensor([[0, 1, 2, 1]])).loss
    part = head(h, mask, labels=torch.tensor([[0, -100, -100, -100]])).loss
    logits = head(h, mask).logits
    assert torch.allclose(part, torch.nn.functional.cross_entropy(logits[0, :1], torch.tensor([0])))
    assert not torch.allclose(full, part)


def test_span_head_never_predicts_padding():
    head = SpanHead(8)
    h, mask = torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    out = head(h, mask, start_positions=torch.tensor([1, 4]), end_positions=torch.tensor([2, 4]))
    assert out.logits.shape == (2, 5, 2) and torch.isfinite(out.loss)
    assert (out.logits[0, 3:] < -1e30).all() and out.logits[0, :3].argmax(0).max() < 3


def test_sequence_head_shape_and_loss():
    head = SequenceHead(8, 3, "mean")
    out = head(torch.randn(4, 6, 8), torch.ones(4, 6, dtype=torch.long), labels=torch.tensor([0, 1, 2, 0]))
    assert out.logits.shape == (4, 3) and out.loss.ndim == 0


@pytest.mark.parametrize("model,task", [("tiny-bert", "vitaminc"), ("tiny-llama", "rt-polarity"),
                                        ("tiny-bert", "wnut16"), ("tiny-llama", "squad-dev")])
def test_build_tiny_models_for_every_head(model, task):
    cfg = compose(f"model={model}", f"task={task}")
    tok, m = build(cfg.model, cfg.task)
    assert m.encoder.config.num_hidden_layers == cfg.model.num_layers
    batch = tok(["a b c", "d e"], ["x", "y z"] if task in ("vitaminc", "squad-dev") else None,
                padding=True, return_tensors="pt")
    out = m(**batch)
    n = len(cfg.task.label_names)
    expected = {"cls": (2, n), "pair": (2, n), "ner": (2, batch["input_ids"].shape[1], n),
                "qa": (2, batch["input_ids"].shape[1], 2)}[cfg.task.type]
    assert tuple(out.logits.shape) == expected


def test_token_types_reach_bert_and_change_its_output():
    cfg = compose("model=tiny-bert", "task=vitaminc")
    torch.manual_seed(0)
    tok, m = build(cfg.model, cfg.task)
    m.eval()
    b = tok(["a b"], ["c d"], return_tensors="pt")
    zeros = {**b, "token_type_ids": torch.zeros_like(b["token_type_ids"])}
    assert not torch.allclose(m(**b).logits, m(**zeros).logits)


def test_hidden_size_mismatch_is_reported():
    cfg = compose("model=tiny-bert", "task=rt-polarity", "model.hidden_size=64")
    with pytest.raises(ValueError, match="hidden_size=64"):
        build(cfg.model, cfg.task)


def test_tokenizer_fingerprint_is_content_not_path(tmp_path):
    import shutil

    from transformers import AutoTokenizer
    byte_tokenizer().save_pretrained(tmp_path / "cache" / "tok")
    shutil.copytree(tmp_path / "cache", tmp_path / "moved" / "cache")  # STRATA_CACHE elsewhere: the same files
    a = AutoTokenizer.from_pretrained(tmp_path / "cache" / "tok")
    b = AutoTokenizer.from_pretrained(tmp_path / "moved" / "cache" / "tok")
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(b)
    assert tokenizer_fingerprint(byte_tokenizer()) == tokenizer_fingerprint(byte_tokenizer())
    fp = tokenizer_fingerprint(a)
    a("some text", truncation=True, max_length=3, padding="max_length")  # leaves truncation/padding set inside
    assert tokenizer_fingerprint(a) == fp
    a.add_tokens(["strata"])  # a new token changes the ids some text gets
    assert tokenizer_fingerprint(a) != fp
    b.pad_token = b.cls_token  # another special token map
    assert tokenizer_fingerprint(b) != fp


def test_fingerprint_of_a_slow_tokenizer_reads_its_vocabulary(tmp_path):
    from transformers import BertTokenizer
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"]) + "\n")
    tok = BertTokenizer(str(tmp_path / "vocab.txt"))
    fp = tokenizer_fingerprint(tok)
    assert len(fp) == 16 and fp == tokenizer_fingerprint(BertTokenizer(str(tmp_path / "vocab.txt")))
    tok.add_tokens(["c"])
    assert tokenizer_fingerprint(tok) != fp


def test_load_tokenizer_and_causal_lm_of_a_random_model():
    cfg = compose("model=tiny-llama")
    assert tokenizer_fingerprint(load_tokenizer(cfg.model)) == tokenizer_fingerprint(byte_tokenizer())
    torch.manual_seed(0)
    tok, lm = load_causal_lm(cfg.model)
    assert not lm.training and next(lm.parameters()).dtype == torch.float32
    assert lm.config.num_hidden_layers == cfg.model.num_layers and lm.config.vocab_size == len(tok)
    torch.manual_seed(0)
    _, again = load_causal_lm(cfg.model, dtype=torch.bfloat16)
    w, w16 = lm.lm_head.weight, again.lm_head.weight
    assert w16.dtype == torch.bfloat16 and torch.equal(w.to(torch.bfloat16), w16)  # same draw, rounded
    ids = torch.tensor([tok("a b c")["input_ids"]])
    with torch.no_grad():
        assert lm(input_ids=ids).logits.shape == (1, ids.shape[1], len(tok))


def test_loaders_name_the_bad_key():
    with pytest.raises(ValueError, match="model.kind=encoder; this method needs a causal LM"):
        load_causal_lm(compose("model=tiny-bert").model)
    with pytest.raises(ValueError, match="model.source='config' names no pretrained files"):
        weights_path(compose("model=tiny-bert").model)
    with pytest.raises(ValueError, match="model.source='ftp'"):
        load_tokenizer(compose("model=minilm-l6", "model.source=ftp").model)


@pytest.mark.assets
@pytest.mark.slow  # five real tokenizers, Gemma's 262k-piece one included (~20 s)
def test_offline_tokenizers_sharing_a_vocabulary_share_a_fingerprint():
    fps = {m: tokenizer_fingerprint(load_tokenizer(compose(f"model={m}").model))
           for m in ("minilm-l6", "minilm-l3", "e5-small", "smollm2-135m", "gemma3-270m")}
    assert fps["minilm-l6"] == fps["minilm-l3"]  # the same vocab.txt: the same ids, shared store entries
    assert len({fps["minilm-l6"], fps["e5-small"], fps["smollm2-135m"], fps["gemma3-270m"]}) == 4


@pytest.fixture(scope="module")
def gemma():
    cfg = compose("model=gemma3-270m").model
    return (cfg, *load_causal_lm(cfg))


@pytest.mark.assets
@pytest.mark.slow  # the 1 GB fp32 model (~10 s to load, once per module)
def test_gemma3_loads_with_its_published_shape(gemma):
    cfg, tok, lm = gemma
    assert type(lm).__name__ == "Gemma3ForCausalLM" and not lm.training
    c = lm.config
    assert (c.num_hidden_layers, c.hidden_size, c.vocab_size) == (cfg.num_layers, cfg.hidden_size, 262144) == \
        (18, 640, 262144)
    assert sum(p.numel() for p in lm.parameters()) == 268_098_176  # docs/ASSETS.md; the tied lm_head counted once
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    ids = tok("Review: a gorgeous film.\nSentiment:", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = lm(input_ids=ids, output_hidden_states=True, logits_to_keep=1)
    assert len(out.hidden_states) == 19 and all(h.shape == (1, ids.shape[1], 640) for h in out.hidden_states)
    assert out.logits.shape == (1, 1, 262144)


@pytest.mark.assets
@pytest.mark.slow
def test_gemma3_tokenizer_prepends_bos_pads_right_and_roundtrips(gemma):
    _, tok, _ = gemma
    text = "Review: a gorgeous, heartfelt film — naïve 😀 ünïcode\n  two  spaces\tTab."
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id == 2 and tok.convert_ids_to_tokens(ids[1]) == "Review"  # no prefix space
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.pad_token == "<pad>" and tok.padding_side == "right"  # the tokenizer ships "left"
    batch = tok(["a b c d", "a"], padding=True)
    assert batch["input_ids"][1][:2] == [2, tok("a", add_special_tokens=False)["input_ids"][0]]
    assert batch["attention_mask"][1] == [1, 1, 0, 0, 0]
    # the labels with their leading space are single pieces, as the label scoring needs
    assert [len(tok(w, add_special_tokens=False)["input_ids"]) for w in (" positive", " negative")] == [1, 1]


@pytest.mark.assets
@pytest.mark.slow
def test_gemma3_completes_known_facts_greedily(gemma):
    """Greedy continuations of the dequantized base model (fp32, CPU); the runner-up is >= 1.5 logits behind."""
    _, tok, lm = gemma
    prompts = {"The Eiffel Tower is located in the city of": " Paris", "Monday, Tuesday, Wednesday,": " Thursday"}
    batch = tok(list(prompts), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = lm.model(**batch).last_hidden_state
    # the LM head only at the last real token of each prompt (262k logits per position are not free)
    logits = lm.lm_head(pool(hidden, batch["attention_mask"], "last"))
    assert [tok.decode(i) for i in logits.argmax(-1)] == list(prompts.values())
    first = tok(list(prompts)[0], return_tensors="pt")
    with torch.no_grad():
        out = lm.generate(**first, max_new_tokens=4, do_sample=False)
    assert tok.decode(out[0, first["input_ids"].shape[1]:]) == " Paris, France."
