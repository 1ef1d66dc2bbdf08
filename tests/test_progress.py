"""Progress of long work: a log line every INTERVAL_S on a pipe (a SLURM log), none for short work, a tqdm bar on a
terminal; tokenisation, evaluation and the activation store report through it."""
import logging

import pytest
import torch

from experiments import progress
from experiments.progress import Progress


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress, "clock", c)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False)
    return c


def lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "experiments.progress"]


def test_a_pipe_gets_a_line_every_interval_with_count_share_and_rate_then_a_done_line(clock, caplog):
    with caplog.at_level(logging.INFO, logger="experiments.progress"):
        with Progress(100, "evaluate", unit="ex") as bar:
            for _ in range(10):  # 10 ex every 10 s: 100 s in all
                clock.t += 10
                bar.update(10, loss=torch.tensor(0.25))
    got = lines(caplog)
    assert len(got) == 4, got  # at 30, 60, 90 s, then done
    assert got[0] == "evaluate: 30/100 ex (30%), ~01:10 left, 00:30 elapsed (1 ex/s)  loss=0.25"
    assert got[-1].startswith("evaluate: done, 100 ex, 01:40 elapsed")


def test_short_work_and_disabled_progress_say_nothing(clock, caplog):
    with caplog.at_level(logging.INFO, logger="experiments.progress"):
        with Progress(1000, "tokenize x", unit="ex") as bar:
            clock.t += progress.INTERVAL_S - 1
            bar.update(1000)
        with Progress(10, "train", enabled=False) as bar:
            clock.t += 10 * progress.INTERVAL_S
            bar.update(10)
    assert lines(caplog) == []


def test_a_terminal_gets_a_tqdm_bar_and_no_lines(monkeypatch, caplog):
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    with caplog.at_level(logging.INFO, logger="experiments.progress"):
        bar = Progress(5, "train", delay_s=0)
        bar.update(5, loss=torch.tensor(1.5))
        assert not bar.bar.disable and bar.bar.n == 5 and bar.bar.postfix == "loss=1.5"
        bar.close()
    assert lines(caplog) == []


def test_tokenisation_evaluation_and_the_store_report_long_work(monkeypatch, caplog, tmp_path):
    from experiments.evaluate import evaluate
    from experiments.recipe import prepare
    from experiments.store import ActivationStore
    from experiments.config import compose

    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False)
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)  # every update is "long": each reports
    cfg = compose("debug=smoke", "task=wnut16")
    with caplog.at_level(logging.INFO, logger="experiments.progress"):
        tok, model, splits = prepare(cfg)
        raw, train, evals = splits.raw, splits.train, splits.evals
        with torch.inference_mode():  # as the trainer calls it
            evaluate(model, evals, raw["eval"], cfg.task, 4, torch.device("cpu"), tok.pad_token_id)
        ActivationStore(tmp_path / "acts", dtype=torch.float32).hidden_states(
            model.encoder, train, layers=[1], tokenizer_key="byte", max_length=64, batch_size=8)
    got = lines(caplog)
    assert any(s.startswith(f"tokenize wnut16: {len(train)}/{len(train)} ex (100%)") for s in got), got
    assert any(s.startswith(f"evaluate: {len(evals)}/{len(evals)} ex") for s in got), got
    assert any(s.startswith(f"activation store: 8/{len(train)} ex") for s in got), got
    assert any(s.startswith(f"activation store: done, {len(train)} ex") for s in got), got


def test_a_split_encodes_to_the_same_dataset_fingerprint_every_time():
    """datasets names (and caches) a map's output by a hash of its function, which updates a live bar: a bar that
    hashed differently each time would give a random name and a new cache file per run."""
    from experiments import data
    from experiments.models import build
    from experiments.config import compose

    cfg = compose("debug=smoke", "task=wnut16")
    tok, _ = build(cfg.model, cfg.task)
    raw = data.load_splits(cfg.task, cfg.data)
    first, again = (data.encode(raw["train"], tok, cfg.task, 64, train=True) for _ in range(2))
    assert first._fingerprint == again._fingerprint and first["input_ids"] == again["input_ids"]
