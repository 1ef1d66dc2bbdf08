"""The sweep memo of stored states is bounded by bytes, and a set of sources reuses each member's states."""
import pytest
import torch

from reverse_probing import byte_memo, features
from reverse_probing.config import check
from experiments.config import compose


def t(n_floats: int) -> torch.Tensor:
    return torch.zeros(n_floats, dtype=torch.float32)  # 4 bytes a float


def test_the_least_recently_used_go_first_once_the_bytes_exceed_the_budget():
    memo = byte_memo.ByteMemo(100)
    calls = []

    def value(key, n):
        calls.append(key)
        return [t(n)]
    memo("a", lambda: value("a", 10)), memo("b", lambda: value("b", 10))  # 40 + 40 bytes
    memo("a", lambda: value("a", 10))  # a hit: a is now the most recently used
    memo("c", lambda: value("c", 5))  # 100 bytes would be 100: fits
    assert memo.bytes == 100 and len(memo) == 3
    memo("d", lambda: value("d", 10))  # 140 > 100: b (least recently used) goes, then 100 fits
    assert "b" not in memo and {"a", "c", "d"} == {k for k in "abcd" if k in memo} and memo.bytes == 100
    memo("e", lambda: value("e", 30))  # 120 bytes alone: more than the whole budget, returned and not kept
    assert "e" not in memo and memo.bytes == 100
    assert calls == ["a", "b", "c", "d", "e"]


def test_a_view_counts_its_storage_once():
    x = torch.zeros(3, 8)
    assert byte_memo.nbytes([x[0], x[1], {"y": x}]) == 96 and byte_memo.nbytes(torch.zeros(2, dtype=torch.float16)) == 4


def test_the_budget_comes_from_the_environment_or_half_the_host(monkeypatch):
    monkeypatch.setenv(byte_memo.ENV, "32e9")
    assert byte_memo.default_budget() == 32_000_000_000
    monkeypatch.setenv(byte_memo.ENV, "lots")
    with pytest.raises(ValueError, match="STRATA_MEMO_BYTES='lots'"):
        byte_memo.default_budget()
    monkeypatch.delenv(byte_memo.ENV)
    assert byte_memo.default_budget() > 0


def test_a_pair_of_sources_reuses_each_members_states(monkeypatch, tmp_path):
    """The paper's sources share one tokenizer: their documents' layout is the same alone and in a pair, so the
    pair's run reads the states its members' runs memoised instead of a second copy."""
    monkeypatch.setattr(features, "states_memo", byte_memo.ByteMemo(10**9))
    computed = []
    monkeypatch.setattr(features, "source_states", lambda cfg, ctx, m, raw, docs: computed.append(m.name) or [t(4)])
    for sources in ("[tiny-bert]", "[tiny-bert,tiny-bert]"):
        cfg = compose("experiment=reverse_probing/smoke", f"method.sources={sources}")
        models, _, _ = check(cfg)
        raw = features.load_docs(cfg.task, cfg.data)["dev"]
        tok = features.load_source(models[0])[0]
        docs = features.prepared(cfg, raw, [tok] * len(models))
        features.split_states(cfg, None, models, "dev", raw, docs, cfg.task)
    assert computed == ["tiny-bert"]
