"""results/recycling tables are generated from run files: the paper's columns beside ours, timing CSVs per
(model, k, device) with speedup_pct."""
import csv

from experiments.report import report
from experiments.run import execute


def test_tables_are_built_from_run_files(smoke_cfg, tmp_path):
    results = tmp_path / "results"
    common = (f"store.dir={tmp_path / 'store'}", "publish=true", "paper=recycling", "exp_id=recycling/t")
    for v in ("full", "reduced", "half_adapters"):
        cfg = smoke_cfg("method=recycling", f"method.variant={v}", "task=wnut16", *common)
        assert execute(cfg, tmp_path / v)["status"] == "ok"
    for v in ("training", "inference", "storage"):
        cfg = smoke_cfg("method=recycling_bench", f"method.variant={v}", "method.n_batches=2", "method.batch_size=4",
                        "method.seq_len=24", "method.steps=2", "method.repeats=1", *common)
        assert execute(cfg, tmp_path / v)["status"] == "ok"
    report("recycling", results)
    tables = results / "recycling" / "tables"
    t1 = (tables / "table1_standard.md").read_text()
    assert "generated" in t1 and "wnut16 (stand-in for conll2003)" in t1
    assert "| full | — |" in t1 and "| reduced | 2 |" in t1 and "83.30" in t1 and "-2.40" in t1  # paper Rdc, gap
    t2 = list(csv.DictReader(open(tables / "table2_adapters.csv")))
    assert {r["variant"] for r in t2} == {"half_adapters", "full"}
    assert float(next(r for r in t2 if r["variant"] == "full")["trainable %"]) == 100.0
    train = list(csv.DictReader(open(tables / "timing_training.csv")))
    assert len(train) == 1 and train[0]["k"] == "2" and train[0]["speedup_pct"] == train[0]["NR_vs_R_pct"]
    assert train[0]["device"].startswith("cpu")
    infer = list(csv.DictReader(open(tables / "timing_inference.csv")))
    assert infer[0]["speedup_pct"] == infer[0]["fp16_speedup_pct"] and float(infer[0]["fp32_max_abs_logit"]) <= 1e-5
    storage = (tables / "storage.md").read_text()
    assert "| yes |" in storage and "100.0%" in storage
    cost = list(csv.DictReader(open(tables / "cost.csv")))
    assert [r["cloud months"] for r in cost] == [r["paper cloud"] for r in cost]  # the paper's rows, recomputed
    assert (results / "recycling" / "figures" / "speedup_vs_depth.png").stat().st_size > 0
    assert "Table 5" in (results / "recycling" / "README.md").read_text()
