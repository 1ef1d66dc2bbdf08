"""scripts/memory_probe.py: the worst-case batch each composed paper job gets, the measuring order, every mode's code
path on a CPU with shrunk dims, the budget stop and the JSON written after each probe."""
import json

import pytest

from scripts import memory_probe

LORA = {"r": 16, "alpha": 32, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def probe(model: str, mode: str, **kw) -> memory_probe.Probe:
    kw = {"batch": 4, "length": 64, "precision": "bf16", **kw}
    return memory_probe.Probe(model=model, mode=mode, arch=arch(model), causal=model.startswith(("llama", "mistral")),
                              **kw)


def arch(model: str) -> dict:
    """The real architecture the probe builds for conf/model/<model>.yaml (from the hub manifest)."""
    from omegaconf import OmegaConf
    return memory_probe.arch_of(OmegaConf.load(memory_probe.REPO / "conf" / "model" / f"{model}.yaml"))


def test_paper_jobs_get_their_worst_case_batch():
    exp = "intrinsic_dim/icl_vs_k"
    p = memory_probe.spec(memory_probe._compose(exp, ["model=llama-2-13b", "method.variant=icl-20"]), exp)
    # 8192 asked for, 4096 allowed by Llama-2's context; 16,384-token batches
    assert (p.mode, p.length, p.batch, p.precision) == ("extract", 4096, 4, "fp32")
    p = memory_probe.spec(memory_probe._compose(exp, ["model=llama-3-8b", "method.variant=icl-20"]), exp)
    assert (p.mode, p.length, p.batch) == ("extract", 8192, 2)
    exp = "intrinsic_dim/sft_dynamics"
    p = memory_probe.spec(memory_probe._compose(exp, ["model=llama-2-13b"]), exp)
    assert (p.mode, p.batch, p.length, p.precision, p.checkpointing) == ("lora_sft", 16, 1024, "bf16", True)
    exp = "layer_fusion/p32_glue"
    p = memory_probe.spec(memory_probe._compose(exp, ["task=mnli", "method.fusion=scalar_mix"]), exp)
    assert (p.model, p.mode, p.batch, p.length, p.precision) == ("llama-2-7b", "lora", 32, 128, "bf16")
    assert p.arch["num_hidden_layers"] == 32 and p.lora["r"] == 16


def test_order_puts_the_edge_cases_first():
    ps = [probe("bert-base-uncased", "finetune"), probe("roberta-large", "finetune"),
          probe("llama-3-8b", "lora_sft"), probe("llama-2-13b", "lora_sft"), probe("llama-2-13b", "extract")]
    got = [(p.model, p.mode) for p in memory_probe.order(ps)]
    assert got == [("llama-2-13b", "extract"), ("llama-2-13b", "lora_sft"), ("roberta-large", "finetune"),
                   ("llama-3-8b", "lora_sft"), ("bert-base-uncased", "finetune")]  # then by size


@pytest.mark.slow  # ~15 s on one thread: six tiny models built, one step each
def test_every_mode_runs_tiny_on_cpu_and_the_json_is_written(tmp_path):
    ps = [probe("llama-2-13b", "extract", precision="fp32"),
          probe("llama-2-13b", "lora_sft", checkpointing=True, lora={**LORA, "r": 64, "alpha": 16}),
          probe("llama-2-7b", "lora", lora=LORA), probe("deberta-v2-xlarge", "finetune"),
          probe("roberta-large", "finetune", checkpointing=True),
          probe("distilbert-base-uncased", "extract_all", precision="fp32")]
    out = tmp_path / "probe.json"
    res = memory_probe.run(ps, out, "cpu", None, tiny=True, log=lambda s: None)
    assert [r["status"] for r in res] == ["ok"] * 6, [r.get("error") for r in res]
    assert all(r["batch"] == 2 and r["length"] == 16 and r["arch"]["hidden_size"] == 32 for r in res)
    assert res[0]["param_bytes"] > 0 and res[0]["peak_bytes"] is None  # no allocator statistics on a CPU
    doc = json.loads(out.read_text())
    assert doc["tiny"] and doc["device"] == "cpu" and [r["model"] for r in doc["probes"]] == [p.model for p in ps]


def test_a_probe_that_cannot_be_built_is_recorded_and_the_rest_run(tmp_path):
    bad = probe("bert-base-uncased", "finetune")
    bad.arch["model_type"] = "no-such-architecture"
    res = memory_probe.run([bad, probe("bert-base-uncased", "finetune")], tmp_path / "p.json", "cpu", None, tiny=True,
                           log=lambda s: None)
    assert res[0]["status"] == "error" and "no-such-architecture" in res[0]["error"] and res[1]["status"] == "ok"


def test_budget_stops_before_the_next_probe_and_keeps_what_was_measured(tmp_path, monkeypatch):
    clock = [0.0]

    def fake_measure(p, device):
        clock[0] += 10.0
        return {"model": p.model, "status": "ok", "seconds": 10.0}

    monkeypatch.setattr(memory_probe, "measure", fake_measure)
    monkeypatch.setattr(memory_probe.time, "monotonic", lambda: clock[0])
    ps = [probe("llama-2-13b", "extract"), probe("llama-2-7b", "lora"), probe("roberta-large", "finetune")]
    res = memory_probe.run(ps, tmp_path / "p.json", "cpu", 15.0, tiny=False, log=lambda s: None)
    assert [r["status"] for r in res] == ["ok", "ok", "skipped"] and "--budget-s 15" in res[2]["error"]
    assert [r["status"] for r in json.loads((tmp_path / "p.json").read_text())["probes"]] == ["ok", "ok", "skipped"]


def test_saved_plan_roundtrip_and_bad_arguments(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    memory_probe.write(plan, [vars(probe("roberta-large", "finetune")), vars(probe("llama-2-7b", "lora", lora=LORA))],
                       "none", False, 0.0)
    out = tmp_path / "out.json"
    assert memory_probe.main(["--plan", str(plan), "--only", "roberta-large", "--tiny", "--device", "cpu",
                              "--out", str(out)]) == 0
    assert [(r["model"], r["status"]) for r in json.loads(out.read_text())["probes"]] == [("roberta-large", "ok")]
    with pytest.raises(SystemExit):
        memory_probe.main(["--out", str(out)])  # neither --paper nor --plan
    assert "--paper <paper ...> or --plan <file>" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        memory_probe.main(["--plan", str(plan), "--budget-s", "0", "--out", str(out)])


def test_architecture_comes_from_the_manifest_then_the_model_file():
    from omegaconf import OmegaConf
    got = memory_probe.arch_of(OmegaConf.create({"name": "llama-2-13b", "hf_id": "meta-llama/Llama-2-13b-hf",
                                                 "family": "llama"}))
    assert got["model_type"] == "llama" and got["hidden_size"] == 5120 and got["max_position_embeddings"] == 4096
    own = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2}
    got = memory_probe.arch_of(OmegaConf.create({"name": "mine", "hf_id": "not/in-the-manifest", "from_config": own}))
    assert got == own
    with pytest.raises(KeyError, match="no architecture config"):
        memory_probe.arch_of(OmegaConf.create({"name": "mystery", "hf_id": "x/y"}))
