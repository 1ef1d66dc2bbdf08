import copy
import logging
import random

import pytest
import torch
from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

from experiments.store import ActivationStore, model_fingerprint

TOK = "test-tok"
MAXLEN = 16


def tiny_bert() -> BertModel:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    return BertModel(cfg).eval()


def tiny_llama() -> LlamaModel:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaModel(cfg).eval()


MODELS = {"bert": tiny_bert, "llama": tiny_llama}


@pytest.fixture(scope="module")
def bert():
    return tiny_bert()


def make_examples(n: int, seed: int = 0, tt: bool = False) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        T = rng.randint(2, MAXLEN)
        ex = {"input_ids": [rng.randint(1, 99) for _ in range(T)]}
        if tt:
            ex["token_type_ids"] = [0] * (T // 2) + [1] * (T - T // 2)
        out.append(ex)
    return out


def direct(model, ex) -> tuple[torch.Tensor, ...]:
    """Unpadded one-example forward: the reference every stored entry must equal."""
    kw = {"input_ids": torch.tensor([ex["input_ids"]]), "attention_mask": torch.ones(1, len(ex["input_ids"]),
                                                                                      dtype=torch.long)}
    if "token_type_ids" in ex:
        kw["token_type_ids"] = torch.tensor([ex["token_type_ids"]])
    with torch.inference_mode():
        return tuple(h[0] for h in model(**kw, output_hidden_states=True).hidden_states)


def get(store, model, examples, layers="all", **kw):
    return store.hidden_states(model, examples, layers, tokenizer_key=TOK, max_length=MAXLEN, **kw)


@pytest.mark.parametrize("arch", ["bert", "llama"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_stored_equals_direct_forward(tmp_path, arch, dtype):
    model = MODELS[arch]()
    exs = make_examples(10, tt=arch == "bert")
    view = get(ActivationStore(tmp_path, dtype), model, exs, batch_size=4)  # right-padded batches
    assert view.layers == [0, 1, 2] and len(view) == 10
    for i, ex in enumerate(exs):
        ref = torch.stack(direct(model, ex))
        got = view[i]
        assert got.shape == (3, len(ex["input_ids"]), 32) and got.dtype == dtype
        if dtype == torch.float32:
            torch.testing.assert_close(got, ref, rtol=0, atol=1e-6)
        else:  # fp16 rounding: relative error <= 2^-11
            torch.testing.assert_close(got.float(), ref, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("arch", ["bert", "llama"])
def test_padded_batch_equals_one_by_one(tmp_path, arch):
    model = MODELS[arch]()
    exs = make_examples(9, seed=1)
    batched = get(ActivationStore(tmp_path / "b", torch.float32), model, exs, batch_size=8)
    single = get(ActivationStore(tmp_path / "s", torch.float32), model, exs, batch_size=1)
    idx = [3, 0, 7, 5]
    for k in (0, 1, 2):
        xb, mb = batched.padded(idx, k)
        xs, ms = single.padded(idx, k)
        assert torch.equal(mb, ms)
        assert xb.shape == (4, max(len(exs[i]["input_ids"]) for i in idx), 32)
        torch.testing.assert_close(xb, xs, rtol=0, atol=1e-6)
        assert (xb[mb == 0] == 0).all()  # padding is zeros, never stale data
        for b, i in enumerate(idx):
            torch.testing.assert_close(batched.layer(k)[i], xb[b, : len(exs[i]["input_ids"])], rtol=0, atol=0)


def test_second_call_computes_nothing_and_shuffled_pass_hits(tmp_path, bert):
    exs = make_examples(12)
    store = ActivationStore(tmp_path)
    first = get(store, bert, exs, batch_size=5)
    assert store.stats.misses == 36 and store.stats.computed == 36 and store.stats.hits == 0
    store.stats.reset()
    order = list(range(12))
    random.Random(3).shuffle(order)
    view = get(store, bert, [exs[i] for i in order], batch_size=5)
    assert store.stats.misses == 0 and store.stats.computed == 0 and store.stats.hits == 36
    store.stats.reset()
    for pos in random.Random(4).sample(range(12), 12):
        for k in view.layers:
            assert torch.equal(view.layer(k)[pos], first.layer(k)[order[pos]])
    s = store.stats
    assert s.hit_rate == 1.0 and s.hits == 2 * 36 and s.reads == 2 * 36 and s.misses == 0 and s.computed == 0
    # a fresh store on the same root sees everything
    again = ActivationStore(tmp_path)
    get(again, bert, exs)
    assert again.stats.computed == 0 and len(again) == 36


def test_layer_after_all_computes_nothing(tmp_path, bert):
    exs = make_examples(6)
    store = ActivationStore(tmp_path, torch.float32)
    full = get(store, bert, exs, "all")
    store.stats.reset()
    one = get(store, bert, exs, [2])
    assert store.stats.computed == 0 and store.stats.misses == 0
    assert one[1].shape == (1, len(exs[1]["input_ids"]), 32)
    assert torch.equal(one[1][0], full[1][2])
    with pytest.raises(KeyError):
        one.layer(1)
    # named model: no hashing, its own key space
    get(store, bert, exs, [1], model_key="bert-tiny@v1")
    assert store.stats.computed == 6


def test_weight_change_changes_fingerprint_and_recomputes(tmp_path, bert):
    exs = make_examples(4)
    store = ActivationStore(tmp_path, torch.float32)
    get(store, bert, exs)
    other = copy.deepcopy(bert)
    assert model_fingerprint(other) == model_fingerprint(bert)
    with torch.no_grad():
        other.encoder.layer[1].output.dense.weight[0, 0] += 1e-3
    assert model_fingerprint(other) != model_fingerprint(bert)
    store.stats.reset()
    view = get(store, other, exs)
    assert store.stats.hits == 0 and store.stats.computed == 12
    torch.testing.assert_close(view[0], torch.stack(direct(other, exs[0])), rtol=0, atol=1e-6)


def test_fp16_takes_half_the_bytes(tmp_path, bert):
    exs = make_examples(8)
    s32 = ActivationStore(tmp_path / "fp32", torch.float32)
    s16 = ActivationStore(tmp_path / "fp16", torch.float16)
    get(s32, bert, exs)
    get(s16, bert, exs)
    n_tok = sum(len(e["input_ids"]) for e in exs)
    assert s32.disk_bytes() == n_tok * 3 * 32 * 4
    assert s16.disk_bytes() * 2 == s32.disk_bytes()
    assert s16.stats.bytes_written * 2 == s32.stats.bytes_written


def _bins(root):
    return sorted(root.glob("shard-*.bin"))


def test_flipped_byte_is_detected_and_rebuilt(tmp_path, bert, caplog):
    exs = make_examples(5)
    get(ActivationStore(tmp_path, torch.float32), bert, exs)
    (binp,) = _bins(tmp_path)
    data = bytearray(binp.read_bytes())
    data[len(data) // 2] ^= 0x40
    binp.write_bytes(bytes(data))

    store = ActivationStore(tmp_path, torch.float32)
    view = get(store, bert, exs)
    assert store.stats.computed == 0  # presence is not verification; reads are
    with caplog.at_level(logging.WARNING, logger="experiments.store"):
        for i, ex in enumerate(exs):
            torch.testing.assert_close(view[i], torch.stack(direct(bert, ex)), rtol=0, atol=1e-6)
    assert store.stats.rebuilt == 1 and store.stats.computed == 1
    assert binp.name in caplog.text
    assert len(_bins(tmp_path)) == 2  # the rebuilt entry went to a new shard
    for i in range(len(exs)):  # the bad copy is never used again, in this store or a fresh one
        view[i]
    fresh = ActivationStore(tmp_path, torch.float32)
    fview = get(fresh, bert, exs)
    for i, ex in enumerate(exs):
        torch.testing.assert_close(fview[i], torch.stack(direct(bert, ex)), rtol=0, atol=1e-6)
    assert store.stats.rebuilt == 1 and fresh.stats.rebuilt == 0


def test_truncated_shard_entries_are_recomputed(tmp_path, bert):
    exs = make_examples(6)
    get(ActivationStore(tmp_path, torch.float32), bert, exs)
    (binp,) = _bins(tmp_path)
    size = binp.stat().st_size
    with open(binp, "r+b") as f:
        f.truncate(size // 2)
    store = ActivationStore(tmp_path, torch.float32)
    kept = len(store)
    assert 0 < kept < 18  # entries past the end of the .bin are dropped from the index
    view = get(store, bert, exs)
    assert store.stats.misses == 18 - kept and store.stats.computed == 18 - kept
    for i, ex in enumerate(exs):
        torch.testing.assert_close(view[i], torch.stack(direct(bert, ex)), rtol=0, atol=1e-6)
    assert store.stats.rebuilt == 0


def test_crash_between_bin_and_json(tmp_path, bert):
    exs = make_examples(4)
    get(ActivationStore(tmp_path / "src", torch.float32), bert, exs)
    (binp,) = _bins(tmp_path / "src")
    root = tmp_path / "crashed"
    root.mkdir()
    (root / "shard-deadbeef.bin.tmp").write_bytes(binp.read_bytes()[:100])  # died while writing the .bin
    (root / binp.name).write_bytes(binp.read_bytes())  # died after the .bin, before its .json
    (root / "shard-cafe.json.tmp").write_text('{"entries": {')  # died while writing a .json
    store = ActivationStore(root, torch.float32)
    assert len(store) == 0
    view = get(store, bert, exs)
    assert store.stats.computed == 12
    torch.testing.assert_close(view[2], torch.stack(direct(bert, exs[2])), rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", ["bert", "llama"])
def test_select_last_is_last_real_token(tmp_path, arch):
    model = MODELS[arch]()
    exs = make_examples(6, seed=2)
    lens = [len(e["input_ids"]) for e in exs]
    assert len(set(lens)) > 1
    view = get(ActivationStore(tmp_path, torch.float32), model, exs, select="last", batch_size=3)
    ids = torch.zeros(len(exs), max(lens), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(exs):
        ids[i, : lens[i]] = torch.tensor(e["input_ids"])
        mask[i, : lens[i]] = 1
    with torch.inference_mode():
        hs = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for i in range(len(exs)):
        assert view[i].shape == (3, 1, 32)
        for k in range(3):
            torch.testing.assert_close(view.layer(k)[i][0], hs[k][i, lens[i] - 1], rtol=0, atol=1e-5)
    x, m = view.padded([0, 1], 2)
    assert x.shape == (2, 1, 32) and m.tolist() == [[1], [1]]


def test_token_type_ids_change_the_key(tmp_path, bert):
    ex = make_examples(1, seed=5)[0]
    T = len(ex["input_ids"])
    variants = [ex, {**ex, "token_type_ids": [0] * T}, {**ex, "token_type_ids": [0] * (T - 1) + [1]}]
    store = ActivationStore(tmp_path, torch.float32)
    views = [get(store, bert, [v], [1]) for v in variants]
    assert len({v.keys[0][0] for v in views}) == 3 and store.stats.computed == 3
    assert not torch.equal(views[1][0], views[2][0])
    torch.testing.assert_close(views[2][0][0], direct(bert, variants[2])[1], rtol=0, atol=1e-6)


def test_rejects_bad_requests(tmp_path, bert):
    store = ActivationStore(tmp_path)
    with pytest.raises(ValueError):
        get(store, bert, make_examples(2), [3])
    with pytest.raises(ValueError):
        get(store, bert, [{"input_ids": list(range(1, MAXLEN + 2))}])
    with pytest.raises(ValueError):
        get(store, bert, make_examples(2), select="mean")
    with pytest.raises(ValueError):
        ActivationStore(tmp_path, torch.bfloat16)


def test_shared_root_between_processes_and_pickling(tmp_path, bert):
    import pickle

    exs = make_examples(3)
    a, b = ActivationStore(tmp_path), ActivationStore(tmp_path)
    get(a, bert, exs)
    view = get(b, bert, exs)  # b refreshes its index before computing
    assert b.stats.computed == 0
    clone = pickle.loads(pickle.dumps(view))  # e.g. a DataLoader worker: memmaps are reopened, not copied
    assert clone.model is None and not clone.store._maps
    assert torch.equal(clone[1], view[1])
    # rolling shards: a tiny limit gives one shard per batch, all readable
    c = ActivationStore(tmp_path / "roll", max_shard_bytes=1)
    v = get(c, bert, make_examples(7, seed=9), batch_size=2)
    assert len(_bins(tmp_path / "roll")) == 4 and v[6].shape[0] == 3


def test_bench_smoke(tmp_path):
    import json

    from experiments.bench_store import main

    r = main(["--model", "tiny-bert", "--n", "20", "--repeats", "1", "--max-length", "12",
              "--out", str(tmp_path / "out"), "--store-root", str(tmp_path / "stores")])
    assert json.loads((tmp_path / "out" / "benchmark.json").read_text())["device"] == r["device"]
    assert (tmp_path / "out" / "benchmark.md").read_text().startswith("# Activation store benchmark")
    assert r["storage"]["fp16_over_fp32_bin"] == 0.5 and r["shuffled_pass"]["hit_rate"] == 1.0
    assert r["shuffled_pass"]["computed"] == 0 and r["timing"]["rebuilt_during_timing"] == 0
    assert r["timing"]["entries_read_per_pass"] == {"fp32": 60, "fp16": 60}
    assert not list((tmp_path / "stores").iterdir())  # temporary stores are removed
