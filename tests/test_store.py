import copy
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

import experiments.store as store_mod
from experiments.store import ORPHAN_GRACE_S, ActivationStore, _ShardWriter, main, model_fingerprint

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
    assert binp.stem in caplog.text
    # the intact entries and the rebuilt one went to one new shard; the damaged one is quarantined
    assert [p.name for p in _bins(tmp_path)] != [binp.name] and len(_bins(tmp_path)) == 1
    assert (tmp_path / f"{binp.name}.bad").is_file() and not binp.exists()
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


# ---- damage, orphans, concurrent writers, compaction, CLI --------------------------------------------------------
def _flip(path, start, stop):
    """Corrupt bytes [start, stop) of a file in place (what a bad disk region does)."""
    data = bytearray(path.read_bytes())
    for k in range(start, stop):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def _indexed_entries(root):
    return sum(len(json.loads(p.read_text())["entries"]) for p in root.glob("shard-*.json"))


def _refs(model, exs):
    return [torch.stack(direct(model, ex)) for ex in exs]


def _check_all(view, model, exs, refs=None):
    for i, ref in enumerate(refs or _refs(model, exs)):
        torch.testing.assert_close(view[i], ref, rtol=0, atol=1e-6)


def test_rebuild_of_a_bad_region_goes_to_one_shard(tmp_path, bert):
    exs = make_examples(30)
    get(ActivationStore(tmp_path, torch.float32), bert, exs)
    (binp,) = _bins(tmp_path)
    size = binp.stat().st_size
    _flip(binp, size // 3, 2 * size // 3)  # one bad region spanning many entries
    store = ActivationStore(tmp_path, torch.float32)
    view = get(store, bert, exs)
    refs = _refs(bert, exs)
    _check_all(view, bert, exs, refs)
    s = store.stats
    assert s.rebuilt > 20 and s.computed == s.rebuilt  # every bad entry rebuilt, nothing else computed
    assert len(_bins(tmp_path)) == 1 and len(list(tmp_path.glob("shard-*.bin.bad"))) == 1  # one shard, not 20+
    fresh = ActivationStore(tmp_path, torch.float32)
    assert len(fresh) == 90
    _check_all(get(fresh, bert, exs), bert, exs, refs)
    assert fresh.stats.computed == 0


def test_damaged_shard_is_quarantined_once(tmp_path, bert, caplog):
    exs = make_examples(8)
    get(ActivationStore(tmp_path / "crc", torch.float32), bert, exs)
    get(ActivationStore(tmp_path / "cut", torch.float32), bert, exs)
    (crc_bin,) = _bins(tmp_path / "crc")
    _flip(crc_bin, 100, 104)
    (cut_bin,) = _bins(tmp_path / "cut")
    os.truncate(cut_bin, cut_bin.stat().st_size // 2)
    refs = _refs(bert, exs)
    for run in range(3):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="experiments.store"):
            for root in ("crc", "cut"):
                store = ActivationStore(tmp_path / root, torch.float32)
                _check_all(get(store, bert, exs), bert, exs, refs)
                if run:  # later runs compute nothing, never load the quarantined shard
                    assert store.stats.computed == 0 and store.stats.rebuilt == 0
                    assert not {crc_bin.stem, cut_bin.stem} & set(store._shards)
        warned = [r.getMessage() for r in caplog.records]
        if run == 0:  # one warning per damaged shard, naming it
            assert len(warned) == 2 and crc_bin.stem in warned[0] and cut_bin.stem in warned[1]
            assert "truncated" in warned[1] and "quarantined" in warned[1]
        else:
            assert warned == []
    for root, binp in (("crc", crc_bin), ("cut", cut_bin)):
        assert sorted(p.name for p in (tmp_path / root).glob("*.bad")) == [f"{binp.stem}.bin.bad",
                                                                           f"{binp.stem}.json.bad"]


def test_unreadable_index_is_quarantined(tmp_path, bert, caplog):
    exs = make_examples(3)
    get(ActivationStore(tmp_path, torch.float32), bert, exs)
    (jp,) = tmp_path.glob("shard-*.json")
    jp.write_text('{"entries": [1, 2')
    with caplog.at_level(logging.WARNING, logger="experiments.store"):
        store = ActivationStore(tmp_path, torch.float32)
    assert "unreadable index" in caplog.text and len(store) == 0
    assert (tmp_path / f"{jp.name}.bad").is_file() and not jp.exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="experiments.store"):
        _check_all(get(ActivationStore(tmp_path, torch.float32), bert, exs), bert, exs)
    assert caplog.text == ""


def test_orphans_of_dead_writers_are_removed_never_a_live_writers(tmp_path):
    root = tmp_path
    ActivationStore(root)
    arr = np.ones((2, 4), np.float32)
    dead = _ShardWriter(root)  # a writer whose process died: the kernel released its flock
    dead.add("k-dead", arr)
    dead.f.close()
    live = _ShardWriter(root)  # a writer still streaming (e.g. a slow forward pass)
    live.add("k-live", arr)
    live.f.flush()
    legacy = root / f"shard-{uuid.uuid4().hex}.bin.tmp"  # written before writers locked their files
    legacy.write_bytes(b"x" * 8)
    json_tmp = root / f"shard-{uuid.uuid4().hex}.json.tmp"  # died while writing its index
    json_tmp.write_text('{"entr')
    unindexed = root / f"shard-{uuid.uuid4().hex}.bin"  # died between publishing its .bin and its .json
    unindexed.write_bytes(b"y" * 8)
    fresh = _ShardWriter(root)  # just created: within the grace period nobody touches it, locked or not
    fresh.f.close()
    for p in (dead.tmp, legacy, json_tmp, unindexed):
        _age(p, 2 * ORPHAN_GRACE_S)  # removed a minute after their writer is gone, not a day
    _age(live.tmp, 2 * store_mod.ORPHAN_AGE_S)  # a live writer's file: never, however old
    s = ActivationStore(root, maintain=False).summary()
    assert s["orphan_files"] == 4 and s["dead_bytes"] == 32 + 8 + len('{"entr') + 8  # dead, legacy, json, .bin
    ActivationStore(root)  # opening removes the orphans
    left = sorted(p.name for p in root.glob("shard-*"))
    assert left == sorted([live.tmp.name, fresh.tmp.name])
    assert live.commit()  # the live writer still publishes
    assert len(ActivationStore(root)) == 1


def test_killed_writer_leaves_an_orphan_that_the_next_open_removes(tmp_path):
    code = ("import sys, time, numpy as np\n"
            "from experiments.store import ActivationStore, _ShardWriter\n"
            "w = _ShardWriter(ActivationStore(sys.argv[1]).root)\n"
            "w.add('k', np.ones((3, 4), np.float32)); w.f.flush()\n"
            "print(w.tmp, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        tmp = tmp_path / os.path.basename(proc.stdout.readline().strip())
        _age(tmp, 86400)
        ActivationStore(tmp_path)
        assert tmp.exists()  # its writer is alive: never removed, however old
    finally:
        proc.kill()
        proc.wait()
    ActivationStore(tmp_path)
    assert not tmp.exists()


def test_concurrent_writers_store_every_entry_once(tmp_path, bert):
    exs = make_examples(12)
    stores = [ActivationStore(tmp_path, torch.float32) for _ in range(2)]  # separate flocks, like processes
    start = threading.Barrier(2)
    views, errors = [None, None], []

    def work(k):
        try:
            start.wait()
            views[k] = get(stores[k], bert, exs, batch_size=2)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(s.stats.computed for s in stores) == 36  # the second writer waited, then found them stored
    assert _indexed_entries(tmp_path) == 36 and len(_bins(tmp_path)) == 1
    for v in views:
        _check_all(v, bert, exs)


def test_publish_leaves_out_what_another_writer_stored_meanwhile(tmp_path, bert):
    a, b = ActivationStore(tmp_path, torch.float32), ActivationStore(tmp_path, torch.float32)
    view = get(a, bert, make_examples(2))  # b has not seen these
    w = _ShardWriter(tmp_path)
    w.add(view.keys[0][0], view.layer(0)[0].numpy())
    w.add("only-in-b", np.ones((1, 32), np.float32))
    b._publish(w)
    assert _indexed_entries(tmp_path) == 6 + 1
    s = b.summary()
    assert s["duplicate_entries"] == 0 and s["entries"] == 7
    assert s["dead_bytes"] == view.layer(0)[0].numpy().nbytes  # the dropped copy, until compaction


def _corrupt_duplicated_store(root, model):
    """A store with two requests' shards, a duplicate of the first (as two unlocked writers left it), some
    corrupt entries in the second, a quarantined shard and an orphan. Returns (examples 1, examples 2, n bad)."""
    ex1, ex2 = make_examples(10, seed=11), make_examples(10, seed=12)
    s = ActivationStore(root, torch.float32)
    get(s, model, ex1)
    (first,) = _bins(root)
    get(s, model, ex2)
    (second,) = [p for p in _bins(root) if p != first]
    dup = f"shard-{uuid.uuid4().hex}"
    shutil.copy(first, root / f"{dup}.bin")
    meta = json.loads(first.with_suffix(".json").read_text())
    meta["created_ns"] += 1
    (root / f"{dup}.json").write_text(json.dumps(meta))
    entries = json.loads(second.with_suffix(".json").read_text())["entries"]
    offsets = sorted(off for off, *_ in entries.values())
    _flip(second, offsets[4], offsets[7])  # exactly entries 4, 5, 6 of the second shard
    (root / "shard-0bad.bin.bad").write_bytes(b"q" * 16)
    (root / "shard-0bad.json.bad").write_text("{}")
    orphan = root / f"shard-{uuid.uuid4().hex}.bin.tmp"
    orphan.write_bytes(b"o" * 24)
    _age(orphan, 3600)
    return ex1, ex2, 3


def test_compaction_drops_dead_data_and_a_concurrent_reader_is_unharmed(tmp_path, bert, monkeypatch):
    ex1, ex2, n_bad = _corrupt_duplicated_store(tmp_path / "s", bert)
    clean = get(ActivationStore(tmp_path / "ref", torch.float32), bert, ex1)
    ref = [clean[i].clone() for i in range(len(ex1))]  # bit-identical: same batches as the store's
    tmp_path = tmp_path / "s"
    reader = ActivationStore(tmp_path, torch.float32, maintain=False)  # opened before compaction
    rview = get(reader, bert, ex1)
    for i in range(5):  # its shard is mapped before compaction
        assert torch.equal(rview[i], ref[i])
    late = ActivationStore(tmp_path, torch.float32, maintain=False)  # index loaded, nothing mapped yet
    lview = get(late, bert, ex1)
    before = ActivationStore(tmp_path, torch.float32, maintain=False).summary()
    assert before["entries"] == 60 - n_bad and before["duplicate_entries"] == 30
    assert before["corrupt_entries"] == n_bad and before["quarantined_shards"] == 1 and before["orphan_files"] == 1
    assert before["shards"] == 3 and before["dead_bytes"] > before["live_bytes"] / 2

    # a second reader (own store object, own maps) reads in a loop while compaction runs, slowed down
    slow_fsync = store_mod._fsync_dir
    monkeypatch.setattr(store_mod, "_fsync_dir", lambda p: (time.sleep(0.05), slow_fsync(p)))
    other = ActivationStore(tmp_path, torch.float32, maintain=False)
    oview = get(other, bert, ex1)
    done, passes, errors = threading.Event(), [0], []

    def read_loop():
        try:
            while not done.is_set():
                for i in range(len(ex1)):
                    assert torch.equal(oview[i], ref[i])
                passes[0] += 1
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=read_loop)
    t.start()
    while not passes[0]:
        time.sleep(0.001)
    during = passes[0]
    result = ActivationStore(tmp_path, torch.float32, max_shard_bytes=1 << 20).compact()
    during = passes[0] - during
    done.set()
    t.join()
    assert not errors and during > 0
    after = result["after"]
    assert result["rewritten"] and result["before"]["entries"] == before["entries"]
    assert after["shards"] == 1 and after["entries"] == 60 - n_bad and after["dead_bytes"] == 0
    assert after["duplicate_entries"] == after["corrupt_entries"] == after["orphan_files"] == 0
    assert after["quarantined_shards"] == 0 and after["bytes"] == after["live_bytes"] + after["index_bytes"]
    assert after["live_bytes"] == before["live_bytes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".lock", "locks", *(f"{p.stem}.{x}" for p in _bins(tmp_path) for x in ("bin", "json"))])

    for i in range(len(ex1)):  # the reader that opened before compaction: same arrays, nothing recomputed
        assert torch.equal(rview[i], ref[i])
    assert reader.stats.computed == reader.stats.rebuilt == 0 and other.stats.computed == 0
    for i in range(len(ex1)):  # its shards are gone: it reloads the index and reads the new shard
        assert torch.equal(lview[i], ref[i])
    assert late.stats.computed == late.stats.rebuilt == 0 and late._shards == [_bins(tmp_path)[0].stem]
    assert reader.refresh() == 1 and reader._shards == [_bins(tmp_path)[0].stem]
    fresh = ActivationStore(tmp_path, torch.float32)
    _check_all(get(fresh, bert, ex2), bert, ex2)
    assert fresh.stats.computed == n_bad  # only the corrupt entries, dropped by compaction, are computed again
    again = ActivationStore(tmp_path, torch.float32).compact()  # two shards (the recomputed ones apart) -> one
    assert again["rewritten"] and again["after"]["shards"] == 1 and again["after"]["entries"] == 60
    assert ActivationStore(tmp_path, torch.float32).compact()["rewritten"] is False  # nothing left to gain


def test_cli_check_and_compact(tmp_path, bert, monkeypatch, capsys):
    root = tmp_path / "activations"
    _corrupt_duplicated_store(root, bert)
    assert main(["--dir", str(root), "--check"]) == 1
    out = capsys.readouterr().out
    assert "corrupt entries" in out and "dead bytes" in out and "damage found" in out
    assert main(["--dir", str(root), "--check"]) == 1  # --check changed nothing
    capsys.readouterr()
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path))  # the default root is the suite's store
    assert main(["--compact"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["before", "after"]
    row = {line[:20].strip(): line[20:].split() for line in lines[2:]}
    assert row["shards"] == ["3", "1"] and row["entries"] == ["57", "57"] and row["corrupt entries"] == ["3", "0"]
    assert row["duplicate entries"] == ["30", "0"] and row["dead bytes"][1] == "0"
    assert main(["--check"]) == 0
    with pytest.raises(SystemExit):
        main(["--dir", str(tmp_path / "nowhere"), "--check"])
    assert "nowhere" in capsys.readouterr().err


def tiny_family(arch: str) -> torch.nn.Module:
    """Tiny random backbones of the families the suite extracts from (own hooks must see what hidden_states sees)."""
    from transformers import (DebertaV2Config, DebertaV2Model, DistilBertConfig, DistilBertModel, MistralConfig,
                              MistralModel, RobertaConfig, RobertaModel)
    torch.manual_seed(0)
    small = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64)
    if arch == "llama":
        return LlamaModel(LlamaConfig(**small, num_key_value_heads=2)).eval()
    if arch == "mistral":
        return MistralModel(MistralConfig(**small, num_key_value_heads=2)).eval()
    if arch == "bert":
        return BertModel(BertConfig(**small)).eval()
    if arch == "roberta":
        return RobertaModel(RobertaConfig(**small, pad_token_id=1)).eval()
    if arch == "deberta":
        return DebertaV2Model(DebertaV2Config(**small, relative_attention=True, pos_att_type=["p2c", "c2p"])).eval()
    return DistilBertModel(DistilBertConfig(vocab_size=100, dim=32, n_layers=3, n_heads=4, hidden_dim=64,
                                            max_position_embeddings=64)).eval()


@pytest.mark.parametrize("arch", ["llama", "mistral", "bert", "roberta", "deberta", "distilbert"])
@pytest.mark.parametrize("select", ["last", "all"])
def test_selected_states_equal_full_extraction(arch, select):
    model = tiny_family(arch)
    exs = make_examples(9, seed=3)
    idxs = sorted(range(9), key=lambda i: -len(exs[i]["input_ids"]))
    L = model.config.num_hidden_layers
    store_mod._HOOKS_MATCH.pop(type(model), None)
    full = {i: (hs, lens[b], b) for bidx, hs, lens in
            store_mod.batched_hidden_states(model, exs, idxs, 4, torch.device("cpu")) for b, i in enumerate(bidx)}
    want = {i: [0, 2, L] if i % 2 else [1] for i in idxs}
    for bidx, got, lens in store_mod.selected_states(model, exs, idxs, want, select, 4, torch.device("cpu")):
        assert sorted(got) == sorted({k for i in bidx for k in want[i]})  # only the layers this batch needs
        for b, i in enumerate(bidx):
            hs, n, fb = full[i]
            for k in want[i]:
                ref = hs[k][fb, :n] if select == "all" else hs[k][fb, n - 1:n]
                h = got[k][b, :n] if select == "all" else got[k][b]
                assert h.shape == ref.shape and torch.equal(h, ref), (arch, i, k)
    assert store_mod._HOOKS_MATCH[type(model)]  # the hooks were used, not the full fallback


def test_last_keeps_one_position_and_stops_after_the_deepest_layer(bert):
    exs = make_examples(6, seed=1)
    calls = []
    hooks = [blk.register_forward_hook(lambda m, a, o, k=k: calls.append(k)) for k, blk in
             enumerate(bert.encoder.layer)]
    try:
        out = list(store_mod.selected_states(bert, exs, list(range(6)), {i: [1] for i in range(6)}, "last", 8,
                                             torch.device("cpu")))
    finally:
        for h in hooks:
            h.remove()
    (bidx, got, _), = out
    assert list(got) == [1] and got[1].shape == (6, 1, 32)  # one layer, one position per example
    assert calls == [0] or calls == [0, 0]  # block 1 never ran (a second block-0 call is the one-off check)


@pytest.mark.parametrize("budget", [None, 1, 20, 40, 1000])
def test_token_batches_obey_the_budget(budget):
    lengths = sorted([random.Random(s).randint(1, 16) for s in range(40)], reverse=True)
    batches = store_mod.token_batches(lengths, 8, budget)
    assert [p for b in batches for p in b] == list(range(40))  # every example once, in order
    for b in batches:
        assert len(b) <= 8
        if budget is not None and len(b) > 1:
            assert len(b) * max(lengths[p] for p in b) <= budget
    if budget == 1:
        assert all(len(b) == 1 for b in batches)  # longer than the budget: a batch alone
    with pytest.raises(ValueError, match="token_budget=0"):
        store_mod.token_batches(lengths, 8, 0)


def test_token_budget_bounds_each_forward_and_keeps_the_states(tmp_path):
    model = tiny_llama()
    exs = make_examples(12, seed=2)
    shapes = []
    h = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                        with_kwargs=True)
    try:
        budgeted = get(ActivationStore(tmp_path / "a", torch.float32), model, exs, select="last", batch_size=8,
                       token_budget=24)
    finally:
        h.remove()
    plain = get(ActivationStore(tmp_path / "b", torch.float32), model, exs, select="last", batch_size=8)
    assert shapes and all(b == 1 or b * t <= 24 for b, t in shapes)
    for i in range(12):
        np.testing.assert_allclose(budgeted[i].numpy(), plain[i].numpy(), rtol=1e-5, atol=1e-6)


def test_a_decoder_builds_no_kv_cache_while_extracting():
    model = tiny_llama()
    caches = []
    h = model.register_forward_hook(lambda m, a, out: caches.append(out.past_key_values))
    try:
        exs = make_examples(3, seed=4)
        list(store_mod.selected_states(model, exs, [0, 1, 2], {i: [2] for i in range(3)}, "last", 4,
                                       torch.device("cpu")))
    finally:
        h.remove()
    assert caches and caches[-1] is None  # every layer's keys and values would otherwise be held to the end
