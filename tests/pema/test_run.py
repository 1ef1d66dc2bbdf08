"""method=pema_vocab (pema/run.py) through the runner on tiny-bert + fixtures: V' and the reductions against counts
made here, the union of tasks, the tokenizer of another model; and fine-tuning with pema.enabled, which scores
exactly as without."""
import numpy as np
import pytest
from omegaconf import OmegaConf

from experiments import data, registry
from experiments.config import ModelConfig, compose
from experiments.memo import Memo
from experiments.models import byte_tokenizer, load_tokenizer, tokenizer_fingerprint
from experiments.run import execute
from pema import counts
from pema import run as vocab_run
from experiments.config import CONF


def model_cfg(name):
    node = OmegaConf.load(CONF / "model" / f"{name}.yaml")
    node.pop("defaults")
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), node)


def test_pema_vocab_is_the_packages_run():
    assert registry.resolve("pema_vocab") is vocab_run.run
    assert {registry.METHODS[m].run for m in ("pema_vocab", "pema_sizes", "pema_bench", "pema_scores")} == \
        {"pema.run:run", "pema.sizes:run", "pema.bench:run", "pema.scores:run"}  # one entry point each, no dispatch


def test_finetune_with_pema_scores_exactly_like_without(smoke_cfg, tmp_path):
    common = ("method=finetune", "train.weight_decay=0", "publish=true")
    base = execute(smoke_cfg(*common), tmp_path / "base")
    rec = execute(smoke_cfg(*common, "pema.enabled=true", "method.variant=pema"), tmp_path / "pema")
    assert rec["status"] == "ok", rec.get("error")
    m, b = rec["metrics"], base["metrics"]
    evals = [k for k in b if k.startswith("eval/")]
    assert evals and all(m[k] == b[k] for k in evals)
    assert m["pema/vocab_used"] < m["pema/vocab_rows"] == 260 and m["pema/merge_max_abs_diff"] == 0.0
    assert m["params/total"] == b["params/total"] > m["pema/params_total_partial"]
    assert m["pema/params_total_partial"] == m["params/total"] - (260 - m["pema/vocab_used"]) * 32
    assert m["time/pema_prepare_s"] > 0
    assert not list((tmp_path / "pema").glob("pema-full-embedding-*.pt"))  # the offloaded matrix is gone


def test_pema_splits_must_exist(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("pema.enabled=true", "pema.splits=[train,test]", "on_error=record"), tmp_path / "r")
    assert rec["status"] == "failed" and "pema.splits names ['test']" in rec["error"]


def test_vocab_run_known_answers_union_and_cache(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(counts, "_MEMO", Memo())  # counted here, not by an earlier test of this process
    cfg = compose("debug=smoke")
    tok = byte_tokenizer()
    raw = data.load_splits(cfg.task, cfg.data)
    assert set(raw) == {"train", "dev", "eval"}  # V' counts every split the fine-tuned model reads
    ids = np.concatenate([np.concatenate(data.encode(raw[s], tok, cfg.task, 64, s == "train")["input_ids"])
                          for s in ("train", "dev", "eval")])
    rec = execute(smoke_cfg("method=pema_vocab"), tmp_path / "a")
    m = rec["metrics"]
    assert rec["provenance"]["tokenizer"] == rec["extra"]["tokenizer_key"] == tokenizer_fingerprint(tok)
    assert rec["extra"]["splits"] == ["train", "eval", "dev"]
    assert m["vocab/rows"] == 260 and m["vocab/total"] == len(ids) and m["vocab/unique"] == len(np.unique(ids))
    assert m["vocab/used"] == len(set(ids.tolist()) | set(tok.all_special_ids))
    assert m["reduction/embedding_pct"] == pytest.approx(100 * (1 - m["vocab/used"] / 260))
    assert m["reduction/model_pct"] == pytest.approx(100 * (260 - m["vocab/used"]) * 32 / m["params/n"])
    raw_rec = execute(smoke_cfg("method=pema_vocab", "method.truncation=false", "method.special_tokens=false"),
                      tmp_path / "b")
    assert raw_rec["metrics"]["vocab/total"] == len(ids) - 2 * sum(len(raw[s]) for s in raw)  # no CLS/SEP
    union = execute(smoke_cfg("method=pema_vocab", "method.union=rt-polarity+wnut16", "method.variant=u"),
                    tmp_path / "c")
    assert set(union["extra"]["corpus"]) == {"rt-polarity/train", "rt-polarity/dev", "rt-polarity/eval",
                                             "wnut16/train", "wnut16/eval"}
    assert "rt-polarity/train" in union["extra"]["counts_from_cache"]  # counted once, by the first run
    assert union["metrics"]["vocab/used"] >= m["vocab/used"]
    assert list((tmp_path / "cache" / "pema" / "counts").glob("*.npz"))
    bad = execute(smoke_cfg("method=pema_vocab", "method.union=no-such-task", "on_error=record"), tmp_path / "d")
    assert bad["status"] == "failed" and "no conf/task/no-such-task.yaml" in bad["error"]


@pytest.mark.assets
def test_minilm_l6_tokenizer_has_bert_base_uncased_ids():
    """table3_cpu counts bert-base-uncased's V' with minilm-l6's tokenizer (method.tokenizer_of): the ids of
    bert-base-uncased's vocab.txt, lower-casing, 30,522 tokens."""
    tok = load_tokenizer(model_cfg("minilm-l6"))
    assert len(tok) == 30522 == model_cfg("bert-base-uncased").from_config["vocab_size"]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", ",", ".", "hello", "world"]
    assert tok.convert_tokens_to_ids(tokens) == [0, 100, 101, 102, 103, 1996, 1010, 1012, 7592, 2088]
    assert tok("Hello world!")["input_ids"] == [101, 7592, 2088, 999, 102]


def test_tokenizer_of_counts_with_another_models_tokenizer_of_the_same_size(smoke_cfg, tmp_path):
    own = execute(smoke_cfg("method=pema_vocab"), tmp_path / "own")["metrics"]
    other = execute(smoke_cfg("method=pema_vocab", "method.tokenizer_of=tiny-llama"), tmp_path / "other")
    assert other["status"] == "ok", other.get("error")
    assert other["metrics"]["vocab/used"] == own["vocab/used"]  # the same byte tokenizer: the same V'
    assert other["extra"]["tokenizer"] == "tiny-llama's (same vocabulary)"
    assert other["provenance"]["tokenizer"] == other["extra"]["tokenizer_key"]  # the tokenizer that counted V'
    bad = execute(smoke_cfg("method=pema_vocab", "model=bert-base-uncased", "method.tokenizer_of=tiny-bert",
                            "on_error=record"), tmp_path / "bad")
    assert bad["status"] == "failed" and "method.tokenizer_of=tiny-bert: its tokenizer has 260 tokens" in bad["error"]
