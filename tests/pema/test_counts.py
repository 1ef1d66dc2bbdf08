"""pema.counts: a split's token counts, counted once per process (experiments.memo) and once per cache (files under
<STRATA_CACHE>/pema/counts named by experiments.files.config_key of what decides them)."""
import numpy as np
import pytest

from experiments.config import compose
from experiments.files import cache_root
from experiments.memo import Memo
from experiments.models import byte_tokenizer, tokenizer_fingerprint
from experiments.run import execute
from pema import counts

TOK = byte_tokenizer()


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty process memo and an empty cache: what a new process on a new machine starts from."""
    monkeypatch.setattr(counts, "_MEMO", Memo(size=64))
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    return cache_root(counts.KIND)


def split_counts(cfg, split, cache, force=False):
    return counts.split_counts(TOK, 260, cfg.task, cfg.data, None, split, True, True, tokenizer_fingerprint(TOK),
                               cache, force)


@pytest.mark.parametrize("task,split,name", [
    ("rt-polarity", "train", "61d1bde2a37d254a3db8b9e4"), ("rt-polarity", "eval", "d3ebf93b220ec82503c3a000"),
    ("wnut16", "train", "27eee42362aa70003211581f"), ("wnut16", "eval", "59edf06b8f72895ef9c590dd")])
def test_entries_keep_the_names_the_cache_already_holds(fresh, task, split, name):
    carve = ("task.dev_from_train=0.3",) if task == "wnut16" else ()
    cfg = compose("debug=smoke", "method=pema_vocab", f"task={task}", *carve)
    split_counts(cfg, split, fresh)
    assert [p.name for p in fresh.iterdir()] == [f"{name}.npz"]  # a renamed entry would be counted again


def test_a_count_is_memoised_stored_whole_and_read_back(fresh):
    cfg = compose("debug=smoke", "method=pema_vocab")
    first, n, hit = split_counts(cfg, "train", fresh)
    assert not hit and n == 46 and first.sum() > 0
    (entry,) = list(fresh.iterdir())  # no temporary file beside it
    entry.unlink()
    again, _, hit = split_counts(cfg, "train", fresh)
    assert hit and np.array_equal(again, first) and not entry.exists()  # this process's memo: the disk is not read
    split_counts(cfg, "train", fresh, force=True)
    assert entry.exists()  # force counts again and writes the entry
    counts._MEMO.clear()  # a new process
    read, n_read, hit = split_counts(cfg, "train", fresh)
    assert hit and n_read == 46 and np.array_equal(read, first)
    entry.write_bytes(b"not an npz")
    counts._MEMO.clear()
    recounted, _, hit = split_counts(cfg, "train", fresh)
    assert not hit and np.array_equal(recounted, first)  # an unreadable entry is counted again and rewritten
    with np.load(entry) as z:
        assert np.array_equal(z["counts"], first) and int(z["examples"]) == 46


def test_counts_are_keyed_by_the_data_asset_and_force_recounts(smoke_cfg, tiny_assets, tmp_path, monkeypatch):
    monkeypatch.setattr(counts, "_MEMO", Memo(size=64))
    on = ("method=pema_vocab", *tiny_assets.data(40))

    def vocab(*overrides, out):
        rec = execute(smoke_cfg(*on, *overrides), tmp_path / out)
        assert rec["status"] == "ok", rec.get("error")
        assert "data/tiny-data" in rec["provenance"]["assets"]  # named even when every count came from the cache
        return rec["extra"]["counts_from_cache"], rec["metrics"]["vocab/total"]
    first, total = vocab(out="a")
    assert first == [] and vocab(out="b") == (["rt-polarity/train", "rt-polarity/eval", "rt-polarity/dev"], total)
    tiny_assets.data(20)  # the data asset rebuilt with fewer train rows
    cached, fewer = vocab(out="c")
    assert cached == [] and fewer < total  # the whole asset is one manifest: its unchanged eval file is recounted too
    assert vocab("force=true", out="d") == ([], fewer)


def test_a_count_of_train_is_keyed_by_its_dev_carve(smoke_cfg, fresh, tmp_path):
    # wnut16 joined as a union task keeps all of train; as the run's own task with a dev carve, train loses the
    # carve to dev: the two train counts must never be one cached entry
    whole = execute(smoke_cfg("method=pema_vocab", "method.union=wnut16"), tmp_path / "a")
    carved = execute(smoke_cfg("method=pema_vocab", "task=wnut16", "task.dev_from_train=0.3"), tmp_path / "b")
    assert whole["status"] == carved["status"] == "ok", (whole.get("error"), carved.get("error"))
    w, c = whole["extra"]["corpus"], carved["extra"]["corpus"]
    assert "wnut16/dev" not in w and "wnut16/train" not in carved["extra"]["counts_from_cache"]
    assert c["wnut16/train"] + c["wnut16/dev"] == w["wnut16/train"] and c["wnut16/dev"] > 0
