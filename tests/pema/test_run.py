"""PEMA through the runner on tiny-bert + fixtures (pema.enabled fine-tuning, pema_vocab, pema_bench), Tables 5/6
from the model configs against the paper, and the report on the records."""
import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from experiments.config import ModelConfig
from experiments.evidence.paper_values import paper_values
from experiments.run import execute
from pema import report
from pema.run import model_architecture
from pema.sizes import sizes
from tests.conftest import CONF

PV = paper_values("pema")
GLUE = ("cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli")
SIZES = ("sizes/rows", "sizes/n_emb_m", "sizes/n_m", "sizes/ratio_pct")


def model_cfg(name):
    node = OmegaConf.load(CONF / "model" / f"{name}.yaml")
    node.pop("defaults")
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), node)


@pytest.mark.parametrize("model,row", sorted((m, r) for m, r in PV.models.items() if PV.get(r, None, None, SIZES[0])))
def test_table5_from_configs_equals_the_paper(model, row):
    s = sizes(model_architecture(model_cfg(model)))
    V, n_emb, n, ratio = (PV.get(row, None, None, k).value for k in SIZES)
    assert s.rows == V
    assert (round(s.n_emb / 1e6, 1), round(s.n / 1e6, 1), round(s.ratio_pct, 1)) == (n_emb, n, ratio)


@pytest.mark.parametrize("model", sorted(m for m in PV.models if m.startswith("deberta-v3")))
def test_table6_from_configs_equals_the_paper(model):
    arch = model_architecture(model_cfg(model))
    s = sizes(arch)
    layers, heads, d, n_emb, n, ratio = (PV.lookup(model, None, None, k) for k in
                                         ("sizes/layers", "sizes/heads", "sizes/d", *SIZES[1:]))
    assert (arch.num_hidden_layers, arch.num_attention_heads, s.d) == (layers, heads, d)
    assert (round(s.n_emb / 1e6, 1), round(s.n / 1e6, 1), round(s.ratio_pct, 1)) == (n_emb, n, ratio)


def test_table2_model_rows_follow_the_uncased_bert():
    """Spec §5.1, answered by the numbers: embedding-% x N_emb/N reproduces Table 2's BERT model-% row with the
    uncased vocabulary (30,522), not with Table 5's cased one (28,996)."""
    emb, model = ([PV.get("BERT", t, None, f"reduction/{k}_pct").value for t in GLUE] for k in ("embedding", "model"))
    for name, fits in (("bert-base-uncased", True), ("bert-base-cased", False)):
        ratio = sizes(model_architecture(model_cfg(name))).ratio_pct / 100
        assert all(round(e * ratio, 1) == m for e, m in zip(emb, model)) is fits



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
    from experiments import data as D
    from experiments.models import byte_tokenizer
    from tests.conftest import compose
    cfg = compose("debug=smoke")
    tok = byte_tokenizer()
    raw = D.load_splits(cfg.task, cfg.data)
    assert set(raw) == {"train", "dev", "eval"}  # V' counts every split the fine-tuned model reads
    ids = np.concatenate([np.concatenate(D.encode(raw[s], tok, cfg.task, 64, s == "train")["input_ids"])
                          for s in ("train", "dev", "eval")])
    rec = execute(smoke_cfg("method=pema_vocab"), tmp_path / "a")
    m = rec["metrics"]
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


def test_counts_are_keyed_by_the_data_asset_and_force_recounts(smoke_cfg, tiny_assets, tmp_path):
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


@pytest.mark.slow
def test_bench_run_records_memory_and_timing(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("method=pema_bench", "method.steps=2", "method.repeats=2", "method.prepare_repeats=1",
                            "method.memory_rounds=1", "method.memory_steps=1"), tmp_path / "b")
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    removed = (m["pema/vocab_rows"] - m["pema/vocab_used"]) * 32
    assert m["mem/analytic_saving_mb"] * 2**20 == pytest.approx(removed * 4 * 4)  # weights, grads, 2 moments, fp32
    assert m["time/step_ratio"] > 0 and m["time/pema_prepare_s"] > 0 and np.isfinite(m["mem/measured_saving_mb"])
    assert rec["extra"]["probe"].startswith("cpu peak RSS")


def test_report_builds_the_tables_from_records(smoke_cfg, tmp_path):
    runs = []
    for i, over in enumerate([("method=pema_sizes",), ("method=pema_vocab",),
                              ("method=pema_scores", "train.weight_decay=0", "seed=0"),
                              ("method=pema_scores", "train.weight_decay=0", "seed=1")]):
        rec = execute(smoke_cfg(*over), tmp_path / f"r{i}")
        runs.append(json.loads(json.dumps(rec, default=str)))
    runs[0]["exp_id"], runs[1]["exp_id"] = "pema/table5_cpu", "pema/table2_cpu"
    runs[2]["exp_id"] = runs[3]["exp_id"] = "pema/scores_cpu"
    lines = report.build(runs, tmp_path / "out")
    text = "\n".join(lines)
    assert "could not be built" not in text
    for name in ("table5_6_sizes", "table2_cpu", "table9_runtime", "table10_scores"):
        assert (tmp_path / "out" / "tables" / f"{name}.md").exists() and (tmp_path / "out" / "tables" / f"{name}.csv").exists()
    row = next(x for x in (tmp_path / "out" / "tables" / "table10_scores.md").read_text().splitlines()
               if x.startswith("| tiny-bert"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "2" and cells[7:10] == ["0", "0", "yes"]  # 2 seeds, max |Δ logit|, max |Δ weight|, identical
    without, with_pema = cells[4], cells[5]
    assert without == with_pema and "[" in without  # one score, one interval, for both arms


def test_arm_intervals_resample_examples_and_bracket_the_mean():
    pe = {"pred": [1, 1, 0, 0, 1, 0, 1, 1], "label": [1, 0, 0, 0, 1, 1, 1, 1]}  # 6 of 8 right
    rec = {"per_example": {"eval": pe, "eval_full": {**pe, "pred": [1] * 8}}}  # always 1: 6 of 8 right too
    ci = report.arm_intervals([rec], "eval/accuracy", n_boot=400)
    assert ci["eval"][0] < 75.0 < ci["eval"][1] and ci["eval_full"][0] < 75.0 < ci["eval_full"][1]
    assert report.arm_intervals([{"per_example": {"eval": pe}}], "eval/accuracy") is None  # no full arm kept


@pytest.mark.assets
def test_minilm_l6_tokenizer_has_bert_base_uncased_ids():
    """table3_cpu counts bert-base-uncased's V' with minilm-l6's tokenizer (method.tokenizer_of): the ids of
    bert-base-uncased's vocab.txt, lower-casing, 30,522 tokens."""
    from experiments.models import load_tokenizer
    tok = load_tokenizer(model_cfg("minilm-l6"))
    assert len(tok) == 30522 == model_cfg("bert-base-uncased").from_config["vocab_size"]
    assert tok.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", ",", ".", "hello", "world"]) \
        == [0, 100, 101, 102, 103, 1996, 1010, 1012, 7592, 2088]
    assert tok("Hello world!")["input_ids"] == [101, 7592, 2088, 999, 102]


def test_tokenizer_of_counts_with_another_models_tokenizer_of_the_same_size(smoke_cfg, tmp_path):
    own = execute(smoke_cfg("method=pema_vocab"), tmp_path / "own")["metrics"]
    other = execute(smoke_cfg("method=pema_vocab", "method.tokenizer_of=tiny-llama"), tmp_path / "other")
    assert other["status"] == "ok", other.get("error")
    assert other["metrics"]["vocab/used"] == own["vocab/used"]  # the same byte tokenizer: the same V'
    assert other["extra"]["tokenizer"] == "tiny-llama's (same vocabulary)"
    bad = execute(smoke_cfg("method=pema_vocab", "model=bert-base-uncased", "method.tokenizer_of=tiny-bert",
                            "on_error=record"), tmp_path / "bad")
    assert bad["status"] == "failed" and "method.tokenizer_of=tiny-bert: its tokenizer has 260 tokens" in bad["error"]


def test_a_count_of_train_is_keyed_by_its_dev_carve(smoke_cfg, tmp_path, monkeypatch):
    # wnut16 joined as a union task keeps all of train; as the run's own task with a dev carve, train loses the
    # carve to dev: the two train counts must never be one cached entry
    import pema.run
    monkeypatch.setattr(pema.run, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(pema.run, "_COUNTS", {})
    whole = execute(smoke_cfg("method=pema_vocab", "method.union=wnut16"), tmp_path / "a")
    carved = execute(smoke_cfg("method=pema_vocab", "task=wnut16", "task.dev_from_train=0.3"), tmp_path / "b")
    assert whole["status"] == carved["status"] == "ok", (whole.get("error"), carved.get("error"))
    w, c = whole["extra"]["corpus"], carved["extra"]["corpus"]
    assert "wnut16/dev" not in w and "wnut16/train" not in carved["extra"]["counts_from_cache"]
    assert c["wnut16/train"] + c["wnut16/dev"] == w["wnut16/train"] and c["wnut16/dev"] > 0
