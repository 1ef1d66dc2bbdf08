"""Encoding of each task type, batching, subsets and answer decoding."""
import json

import datasets
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from experiments import REPO, data
from experiments.config import ConfigError, compose
from experiments.evaluate import best_span
from experiments.models import byte_tokenizer

TOK = byte_tokenizer()


def test_fixture_splits_and_limits_take_a_fixed_subset():
    cfg = compose("debug=smoke", "task=rt-polarity", "data.limit_train=10")
    ds = data.load_splits(cfg.task, cfg.data)
    assert len(ds["train"]) == 10 and len(ds["eval"]) == 16
    again = data.load_splits(compose("debug=smoke", "task=rt-polarity", "data.limit_train=10", "seed=3").task,
                             cfg.data)
    assert ds["train"]["text"] == again["train"]["text"]  # the subset does not move with the run seed
    other = compose("debug=smoke", "task=rt-polarity", "data.limit_train=10", "data.subset_seed=1").data
    assert data.load_splits(cfg.task, other)["train"]["text"] != ds["train"]["text"]


def test_unknown_source_and_missing_fixture_are_errors():
    cfg = compose("task=sst2", "data.source=fixture")
    for load in (data.load_splits, lambda t, d: data.load_rows(t, d, "train")):
        with pytest.raises(ValueError, match="has no fixture"):
            load(cfg.task, cfg.data)
        with pytest.raises(ValueError, match="valid: offline, hub, fixture"):
            load(cfg.task, compose("data.source=ftp").data)


def test_load_rows_reads_one_named_split_uncapped_as_plain_dicts():
    cfg = compose("debug=smoke", "task=rt-polarity", "data.limit_train=10", "task.dev_from_train=null")
    rows = data.load_rows(cfg.task, cfg.data, "train")  # (no dev carved out of train below: the CPU budget carves one)
    splits = data.load_splits(cfg.task, compose("debug=smoke", "task=rt-polarity").data)
    assert isinstance(rows[0], dict) and "split" in rows[0]
    assert [r["text"] for r in rows] == splits["train"]["text"]  # every row in file order: no cap, no shuffle
    assert len(data.load_rows(cfg.task, cfg.data, "eval")) == 16
    with pytest.raises(ConfigError, match=r"task rt-polarity: the test split is empty, .*rt-polarity\.jsonl \(its rows "
                                          r"with split=test\) has no rows for it"):
        data.load_rows(cfg.task, cfg.data, "test")


def _train_only_fixture(tmp_path):
    path = tmp_path / "no-eval.jsonl"
    rows = [r for r in data.read_jsonl(REPO / "tests/fixtures/rt-polarity.jsonl") if r["split"] == "train"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_empty_split_is_refused_naming_task_split_and_file(tmp_path):
    path = _train_only_fixture(tmp_path)
    cfg = compose("debug=smoke", "task=rt-polarity", f"task.fixture={path}")
    with pytest.raises(ConfigError) as e:
        data.load_splits(cfg.task, cfg.data)
    assert str(e.value).startswith(f"task rt-polarity: the eval split is empty, {path} (its rows with split=eval) "
                                   "has no rows for it: add rows")


def test_a_run_with_an_empty_eval_split_fails_before_training(smoke_cfg, tmp_path, monkeypatch):
    from experiments.run import execute
    monkeypatch.setattr("experiments.recipe.fit", lambda *a, **k: pytest.fail("no training may start"))
    rec = execute(smoke_cfg(f"task.fixture={_train_only_fixture(tmp_path)}", "on_error=record"), tmp_path / "run")
    assert rec["status"] == "failed" and "the eval split is empty" in rec["error"] and "no-eval.jsonl" in rec["error"]


def test_a_hub_task_offline_and_uncached_fails_in_one_line_with_the_switch_first(tmp_path, monkeypatch):
    """Offline, datasets refuses an uncached hub dataset at once with a ConnectionError: it becomes the hint; a cached
    copy loads; online, the ConnectionError is the network's and goes up unchanged."""
    def offline_load(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (OfflineModeIsEnabled)")
    monkeypatch.setattr(datasets, "load_dataset", offline_load)
    cfg = compose("task=sst2")
    for load in (data.load_splits, lambda t, d: data.load_rows(t, d, "train")):
        with pytest.raises(ConfigError, match="^set STRATA_HUB=1 to download it: task=sst2 loads nyu-mll/glue from "
                                              "the Hugging Face hub") as info:
            load(cfg.task, cfg.data)
        assert info.value.__cause__ is None and info.value.__suppress_context__  # one line, no chained traceback
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    with pytest.raises(ConnectionError, match="Couldn't reach"):
        data.load_rows(cfg.task, cfg.data, "train")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: ["a cached row"])
    assert data.load_rows(cfg.task, cfg.data, "train") == ["a cached row"]


def test_read_jsonl_keeps_unicode_line_separators_inside_a_row(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "a\u2028b"}\n\n{"text": "c"}\n', encoding="utf-8")
    assert data.read_jsonl(path) == [{"text": "a\u2028b"}, {"text": "c"}]


@pytest.mark.assets
def test_load_rows_offline_equals_the_split_load_splits_reads():
    cfg = compose("task=rt-polarity", "data.limit_eval=null")  # the CPU budget caps eval at 1000
    rows = data.load_rows(cfg.task, cfg.data, cfg.task.splits["eval"])
    assert [r["text"] for r in rows] == data.load_splits(cfg.task, cfg.data)["eval"]["text"]


def test_ner_labels_sit_on_first_pieces_only():
    task = compose("task=wnut16").task
    ds = datasets.Dataset.from_list([{"tokens": ["@u", "Paris", "rocks"], "tags": ["O", "B-geo-loc", "O"]}])
    enc = data.encode(ds, TOK, task, 64, train=False)[0]
    labels, words = enc["labels"], enc["word_index"]
    real = [i for i, l in enumerate(labels) if l != -100]
    assert [words[i] for i in real] == [0, 1, 2]
    assert [labels[i] for i in real] == [0, task.label_names.index("B-geo-loc"), 0]
    assert labels[0] == -100 and labels[-1] == -100  # [CLS], [SEP]
    with pytest.raises(ValueError, match="not in task.label_names"):
        data.encode(datasets.Dataset.from_list([{"tokens": ["x"], "tags": ["B-alien"]}]), TOK, task, 64, train=True)


def _qa_rows():
    ctx = "The explorer Ada travelled for many years. In the end Ada settled in Oslo, a city by the river."
    return [{"question": "Where did Ada settle?", "context": ctx,
             "answers": {"text": ["Oslo"], "answer_start": [ctx.index("Oslo")]}}]


def test_qa_positions_recover_the_answer_in_every_window_that_holds_it():
    task = compose("task=squad-dev", "task.doc_stride=16").task
    ds = datasets.Dataset.from_list(_qa_rows())
    train = data.encode(ds, TOK, task, 48, train=True)  # short windows: the context is split with overlap
    evals = data.encode(ds, TOK, task, 48, train=False)
    assert len(train) == len(evals) > 1
    found = 0
    for f, e in zip(train, evals):
        s, t = f["start_positions"], f["end_positions"]
        if s == 0:
            assert t == 0  # the answer is not in this window
            continue
        offs = e["offset_mapping"]
        assert ds[0]["context"][offs[s][0]:offs[t][1]] == "Oslo"
        found += 1
    assert found >= 1 and set(evals["example_index"]) == {0}


def test_best_span_respects_context_order_and_length():
    offs = [None, (0, 3), (4, 7), (8, 11), None]
    start = np.array([9.0, 3.0, 0.0, 1.0, 8.0])  # positions 0 and 4 are not context: never chosen
    end = np.array([9.0, 0.0, 0.0, 4.0, 8.0])
    assert best_span(start, end, offs, max_len=30) == (7.0, 0, 11)  # tokens 1..3
    assert best_span(start, end, offs, max_len=1) == (5.0, 8, 11)  # one token: 3..3 beats 1..1
    assert best_span(np.array([0, 0, 9.0, 0, 0]), np.array([0, 9.0, 1.0, 0, 0]), offs, 30) == (10.0, 4, 7)  # not 2..1
    assert best_span(start, end, [None] * 5, max_len=30) is None


def test_collate_pads_each_key_with_its_own_value():
    rows = [{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [1, 2, 3]},
            {"input_ids": [5], "attention_mask": [1], "labels": [4]}]
    b = data.collate(rows, pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert b["labels"].tolist() == [[1, 2, 3], [4, -100, -100]]
    assert data.collate([{"input_ids": [1], "labels": 3}], 0)["labels"].dtype == torch.long


def test_pair_encoding_truncates_to_max_length():
    task = compose("task=vitaminc").task
    ds = datasets.Dataset.from_list([{"claim": "a " * 50, "evidence": "b " * 50, "label": 2}])
    enc = data.encode(ds, TOK, task, 32, train=True)[0]
    assert len(enc["input_ids"]) == 32 and enc["labels"] == 2 and set(enc["token_type_ids"]) == {0, 1}


def test_label_names_shorter_than_the_labels_are_refused_before_training():
    cfg = compose("debug=smoke", "task=vitaminc", "task.label_names=[a,b]")
    with pytest.raises(ValueError, match="task.label_names has 2 names .* label id 2"):
        data.load_splits(cfg.task, cfg.data)


def test_an_encoded_split_is_named_by_what_decides_it():
    """datasets names the encoded split from our key (no pickling of the closure): the same inputs give the same
    name, and another tokenizer, length, task setting or role gives another."""
    cfg = compose("debug=smoke")
    raw = data.load_splits(cfg.task, cfg.data)["train"]

    def name(tok=TOK, n=32, train=True, **task):
        return data.encode(raw, tok, OmegaConf.merge(cfg.task, task), n, train)._fingerprint
    from experiments.models import load_tokenizer
    other = load_tokenizer(compose("model=tiny-bert").model)
    other.add_tokens(["<extra>"])
    assert name() == name()
    assert len({name(), name(other), name(n=16), name(train=False),
                name(max_length=cfg.task.max_length + 1)}) == 5
