"""The cached reduced model equals the full one; variants train exactly the parameters the paper says; adapters,
depth and the cost model."""
import copy
import functools

import pytest
import torch

from experiments import data
from experiments.models import build
from experiments.store import ActivationStore
from recycling import cache
from recycling.adapters import Adapter, add_adapters
from recycling.cost import months_to_break_even
from recycling.model import UpperStack, apply_variant, lower_model, resolve_k
from experiments.config import compose


@functools.lru_cache(maxsize=None)
def _tiny(task: str):
    cfg = compose(f"task={task}", "debug=smoke")
    torch.manual_seed(0)
    tok, model = build(cfg.model, cfg.task)
    raw = data.load_splits(cfg.task, cfg.data)
    feats = data.encode(raw["eval"], tok, cfg.task, data.max_length(cfg.task, cfg.data), train=False)
    return cfg, tok, model.eval(), data.rows_of(feats)


def tiny(task="rt-polarity"):
    """(cfg, tokenizer, a fresh copy of one random tiny-bert + head in eval mode, encoded eval rows)."""
    cfg, tok, model, rows = _tiny(task)
    return cfg, tok, copy.deepcopy(model), rows


def full_logits(model, rows, pad):
    batch = data.collate(rows, pad)
    with torch.no_grad():
        return model(**{k: v for k, v in batch.items()
                        if k in ("input_ids", "attention_mask", "token_type_ids")}).logits


@pytest.mark.parametrize("task", ["rt-polarity", "vitaminc", "wnut16", "squad-dev"])
def test_cache_fed_upper_layers_equal_the_full_model(task, tmp_path):
    cfg, tok, model, rows = tiny(task)
    want = full_logits(model, rows, tok.pad_token_id)  # rows differ in length: padding and the mask matter
    mask = data.collate(rows, tok.pad_token_id)["attention_mask"].bool()
    for k in (1, 2, 3):
        store = ActivationStore(tmp_path / str(k), dtype=torch.float32)
        states = cache.build(store, lower_model(model.encoder, k), rows, k, tokenizer_key="t", max_length=512,
                             batch_size=5, device="cpu")
        layer_cache = cache.LayerCache(states, k, rows, tok.pad_token_id, in_ram=k == 2)
        reduced = apply_variant(model, "reduced", k, 8, "gelu_new").eval()
        with torch.no_grad():
            got = reduced(**layer_cache.batch(range(len(rows)), targets=False)).logits
        if got.ndim == 3:  # token heads: padded positions carry no prediction
            got, w = got[mask], want[mask]
        else:
            w = want
        assert (got - w).abs().max().item() <= 1e-5, k


def test_deberta_v2_upper_stack_rebuilds_relative_positions():
    """DeBERTa-v2 computes relative positions and embeddings inside its encoder and a conv after block 1: the
    cache-fed upper blocks must rebuild them to equal the full model, for every k."""
    from transformers import DebertaV2Config, DebertaV2Model
    from experiments.models import SequenceHead, TaskModel
    torch.manual_seed(0)
    cfg = DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                          intermediate_size=64, relative_attention=True, position_buckets=16, max_relative_positions=64,
                          norm_rel_ebd="layer_norm", conv_kernel_size=3, pos_att_type=["p2c", "c2p"],
                          position_biased_input=False, share_att_key=True, type_vocab_size=0)
    enc = DebertaV2Model(cfg)
    model = TaskModel(enc, SequenceHead(32, 2, "cls")).eval()
    ids = torch.randint(5, 100, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = mask[2, 4:] = 0
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits
        for k in (1, 2, 3):
            h = lower_model(enc, k)(input_ids=ids, attention_mask=mask).last_hidden_state
            reduced = apply_variant(model, "reduced", k, 8, "gelu_new").eval()
            assert (reduced(h, mask).logits - want).abs().max().item() <= 1e-5
            names = {n for n, _ in reduced.named_parameters()}
            assert "upper.rel.rel_embeddings.weight" in names and not any("embeddings.word" in n for n in names)
        half = apply_variant(model, "half_adapters", 2, 8, "gelu_new").eval()  # adapters start as identity
        assert (half(lower_model(enc, 2)(input_ids=ids, attention_mask=mask).last_hidden_state, mask).logits
                - want).abs().max().item() <= 1e-5


def test_off_by_one_layer_is_caught(tmp_path):
    """h^k is the output of block k (hidden_states[k]); feeding block k's input instead changes the logits."""
    cfg, tok, model, rows = tiny()
    batch = {k: v for k, v in data.collate(rows, tok.pad_token_id).items() if k != "labels"}
    with torch.no_grad():
        hs = model.encoder(**batch, output_hidden_states=True).hidden_states
        reduced = apply_variant(model, "reduced", 2, 8, "gelu_new").eval()
        want = full_logits(model, rows, tok.pad_token_id)
        right = reduced(hs[2], batch["attention_mask"]).logits
        wrong = reduced(hs[1], batch["attention_mask"]).logits
    assert (right - want).abs().max() <= 1e-5 < (wrong - want).abs().max()


def test_fp16_cache_changes_scores_by_little(tmp_path):
    cfg, tok, model, rows = tiny("vitaminc")
    k = 2
    lower = lower_model(model.encoder, k)
    reduced = apply_variant(model, "reduced", k, 8, "gelu_new").eval()
    scores = {}
    for dt in (torch.float32, torch.float16):
        states = cache.build(ActivationStore(tmp_path / str(dt), dtype=dt), lower, rows, k, tokenizer_key="t",
                             max_length=512, batch_size=8, device="cpu")
        with torch.no_grad():
            batch = cache.LayerCache(states, k, rows, 0).batch(range(len(rows)), False)
            scores[dt] = reduced(**batch).logits.softmax(-1)
    diff = (scores[torch.float16] - scores[torch.float32]).abs().max().item()
    assert 0 < diff <= 1e-3  # the paper's bound [P]; zero would mean the fp16 path was not taken


def test_lower_model_is_a_frozen_copy_of_the_bottom():
    cfg, tok, model, rows = tiny()
    n = len(model.encoder.encoder.layer)
    lower = lower_model(model.encoder, 2)
    assert len(lower.encoder.layer) == 2 and lower.config.num_hidden_layers == 2
    assert len(model.encoder.encoder.layer) == n and model.encoder.config.num_hidden_layers == n  # untouched
    assert not any(p.requires_grad for p in lower.parameters())
    assert all(p.requires_grad for p in model.parameters())
    batch = {k: v for k, v in data.collate(rows, tok.pad_token_id).items() if k != "labels"}
    with torch.no_grad():
        want = model.encoder(**batch, output_hidden_states=True).hidden_states[2]
        got = lower(**batch).last_hidden_state
    assert torch.allclose(got, want, atol=1e-6)
    with torch.no_grad():  # a copy: training the full model later cannot change the cache's source
        model.encoder.encoder.layer[0].output.dense.weight.add_(1.0)
        assert torch.allclose(lower(**batch).last_hidden_state, want, atol=1e-6)


def _trainable(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_each_variant_trains_exactly_its_parameters():
    k = 2
    names = {}
    for v in ("full", "frozen", "reduced", "half_adapters", "full_adapters"):
        cfg, tok, model, rows = tiny()
        names[v] = (_trainable(apply_variant(model, v, k, 8, "gelu_new")), model)
    full, _ = names["full"]
    assert any("embeddings" in n for n in full)
    frozen, _ = names["frozen"]
    assert not any("embeddings" in n or n.startswith(("encoder.encoder.layer.0.", "encoder.encoder.layer.1."))
                   for n in frozen)
    assert any(n.startswith("encoder.encoder.layer.2.") for n in frozen) and any(n.startswith("head.") for n in frozen)
    reduced, _ = names["reduced"]
    # the cache-fed model holds no embeddings or lower blocks at all: nothing for AdamW to update there
    assert {n.split(".")[0] for n in reduced} == {"upper", "head"} and len(reduced) == len(frozen)
    half, _ = names["half_adapters"]
    assert half and all(".adapter." in n or n.startswith("head.") for n in half)
    assert not any("LayerNorm" in n for n in half)  # LayerNorms stay frozen (the paper's code)
    assert sum(".adapter.down.weight" in n for n in half) == 2 * (4 - k)  # attention + FFN in each upper block
    fulla, _ = names["full_adapters"]
    assert sum(".adapter.down.weight" in n for n in fulla) == 2 * 4
    assert all(".adapter." in n or n.startswith("head.") for n in fulla)


def test_adapters_start_as_identity_and_then_learn():
    cfg, tok, model, rows = tiny()
    want = full_logits(model, rows, tok.pad_token_id)
    adapters = add_adapters(model.encoder.encoder.layer, 32, 16)
    assert torch.equal(full_logits(model, rows, tok.pad_token_id), want)
    with torch.no_grad():
        adapters[0].up.weight.normal_()
    assert not torch.allclose(full_logits(model, rows, tok.pad_token_id), want)
    x = torch.randn(3, 5, 32)
    a = Adapter(32, 4, "relu")
    with torch.no_grad():
        a.up.weight.normal_()
    assert torch.allclose(a(x), x + a.up(torch.relu(a.down(x))))


def test_bad_inputs_are_named():
    cfg, tok, model, rows = tiny()
    with pytest.raises(ValueError, match="recycling.k=4 must be in 1..3"):
        resolve_k(4, 4)
    assert resolve_k(None, 6) == 3 and resolve_k(None, 12) == 6
    with pytest.raises(ValueError, match="unknown recycling variant 'half'"):
        apply_variant(model, "half", 2, 8, "gelu_new")
    with pytest.raises(ValueError, match="unknown adapter activation"):
        Adapter(4, 2, "swishy")
    with pytest.raises(ValueError, match="already has an adapter"):
        add_adapters(model.encoder.encoder.layer, 32, 4)
        add_adapters(model.encoder.encoder.layer, 32, 4)
    llama = compose("model=tiny-llama", "debug=smoke")
    _, lm = build(llama.model, llama.task)
    with pytest.raises(NotImplementedError,
                       match="recycling supports bert, roberta, xlm-roberta, deberta-v2 encoders, not 'llama'"):
        UpperStack(lm.encoder, 1)


# the paper's Table 4 A10G timings (baseline, fp16 cache), d, and its Table 7 months (cloud, local)
TABLE7 = {"MiniLM-384": (183, 123, 384, 0.05, 2.2), "MiniLM-768": (325, 195, 768, 0.05, 2.4),
          "BERT-base": (647, 343, 768, 0.13, 5.6), "BERT-large": (1943, 1004, 1024, 0.30, 12.9),
          "DeBERTa-XL": (1914, 985, 1536, 0.20, 8.5)}


@pytest.mark.parametrize("model", TABLE7)
def test_cost_model_reproduces_the_papers_table7_from_its_own_timings(model):
    base, fp16, d, cloud, local = TABLE7[model]
    assert round(months_to_break_even(base, fp16, d, "cloud"), 2) == cloud
    assert round(months_to_break_even(base, fp16, d, "local"), 1) == local
    with pytest.raises(ValueError, match="unknown storage 'tape'"):
        months_to_break_even(base, fp16, d, "tape")


def test_prefetch_keeps_order_and_raises_the_producers_error():
    assert list(cache.prefetch(iter(range(50)), 4)) == list(range(50))
    assert list(cache.prefetch(iter(range(5)), 0)) == list(range(5))

    def broken():
        yield 1
        raise OSError("disk gone")
    with pytest.raises(OSError, match="disk gone"):
        list(cache.prefetch(broken(), 2))


def test_packed_rows_are_exactly_seq_len_real_tokens():
    from recycling.bench import packed_rows
    cfg, tok, model, rows = tiny()
    texts = ["the movie was long and good " * 4] * 20
    packed = packed_rows(texts, tok, 32, 10, seed=0)
    assert len(packed) == 10 and all(len(r["input_ids"]) == 32 and r["input_ids"][0] == tok.cls_token_id
                                     and r["input_ids"][-1] == tok.sep_token_id for r in packed)
    assert all(tok.pad_token_id not in r["input_ids"][1:-1] for r in packed)
    with pytest.raises(ValueError, match="need 1000"):
        packed_rows(texts, tok, 32, 1000, seed=0)


@pytest.mark.assets
@pytest.mark.slow
@pytest.mark.parametrize("model_name,k", [("minilm-l6", 3), ("e5-small", 6)])
def test_real_model_cache_equivalence_fp32_and_fp16(model_name, k, tmp_path):
    """The packaged models on real rt-polarity sentences: fp32 cache logits within 1e-5 of the full model, fp16
    cache scores within the paper's 1e-3."""
    cfg = compose(f"model={model_name}", "task=rt-polarity", "data.limit_eval=48")
    tok, model = build(cfg.model, cfg.task)
    model.eval()
    raw = data.load_splits(cfg.task, cfg.data)
    rows = data.rows_of(data.encode(raw["eval"], tok, cfg.task, 64, train=False))
    want = full_logits(model, rows, tok.pad_token_id)
    lower = lower_model(model.encoder, k)
    reduced = apply_variant(model, "reduced", k, 8, "gelu_new").eval()
    for dt, bound in ((torch.float32, 1e-5), (torch.float16, 1e-3)):
        states = cache.build(ActivationStore(tmp_path / str(dt), dtype=dt), lower, rows, k, tokenizer_key="t",
                             max_length=64, batch_size=16, device="cpu")
        with torch.no_grad():
            got = reduced(**cache.LayerCache(states, k, rows, tok.pad_token_id).batch(range(len(rows)), False)).logits
        diff = (got - want).abs().max() if dt == torch.float32 else (got.softmax(-1) - want.softmax(-1)).abs().max()
        assert diff.item() <= bound, (dt, diff.item())
