"""scripts.preflight: the jobs, estimated GPU-hours, activation-store and HF-cache bytes against free disk, gated ids
and licences of a GPU tier, and its refusals (no hub token for a gated model, a dirty tree, too little disk) before
any GPU work; the README's GPU tier section names every gated id."""
import re

import pytest

from experiments import REPO
from scripts import preflight
from scripts.preflight import Experiment, Job

BERT_BASE = {"model_type": "bert", "torch_dtype": "float32",
             "config": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                        "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}}
LLAMA2_7B = {"model_type": "llama", "torch_dtype": "float16",
             "config": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                        "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}}


def test_weight_bytes_match_the_published_parameter_counts():
    # BERT-base: 110M parameters in fp32 (440 MB); Llama-2-7B: 6.74B in fp16 (13.5 GB); biases and norms are noise
    assert preflight.weight_bytes(BERT_BASE) == pytest.approx(110e6 * 4, rel=0.02)
    assert preflight.weight_bytes(LLAMA2_7B) == pytest.approx(6.74e9 * 2, rel=0.01)
    gqa = {**LLAMA2_7B, "config": {**LLAMA2_7B["config"], "num_key_value_heads": 8}}  # grouped K/V heads: smaller
    assert preflight.weight_bytes(gqa) == preflight.weight_bytes(LLAMA2_7B) - 32 * 2 * 4096 * (4096 - 1024) * 2
    assert preflight.weight_bytes({"config": {"hidden_size": 768}}) is None  # a manifest entry without its dims


@pytest.fixture
def conf(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "task").mkdir()
    (tmp_path / "model" / "m.yaml").write_text("name: m\nsource: offline\nnum_layers: 2\nhidden_size: 4\n")
    (tmp_path / "model" / "src.yaml").write_text("name: src\nsource: hub\nhf_id: org/src\nnum_layers: 5\n"
                                                  "hidden_size: 16\n")
    (tmp_path / "task" / "t.yaml").write_text("name: t\nsource: hub\nhf: {path: org/data, name: c}\n"
                                              "splits: {train: train, eval: validation}\nmax_length: 8\n")
    (tmp_path / "task" / "local.yaml").write_text("name: local\nsource: offline\nmax_length: 8\n")
    return tmp_path


HUB = {"datasets": {"org/data": {"gated": False, "licence": "cc-by-4.0",
                                 "configs": {"c": {"splits": {"train": 100, "validation": 10, "test": 999}}}}},
       "models": {"org/src": {"gated": True, "licence": "llama2", "config": {"hidden_size": 32,
                                                                            "num_hidden_layers": 3}}}}


def exp(*jobs, limit_train=50, dtype="fp16"):
    return Experiment("p", "x", list(jobs), {"data": {"limit_train": limit_train, "limit_eval": None},
                                             "store": {"dtype": dtype}, "method": {"regime": "fe"}})


def test_store_bytes_are_examples_tokens_layers_width_and_dtype_per_distinct_key(conf):
    e = exp(Job("m", "t", {"seed": 0}), Job("m", "t", {"seed": 1}))  # two seeds share one cached array
    rule = {"tokens": "all", "layers": "all", "key": ["model", "task"]}
    # (50 train of 100 + 10 eval; test is not a split the task reads) x 8 tokens x (2 blocks + embeddings) x 4 x fp16
    assert preflight.store_bytes(e, rule, HUB, conf) == ((50 + 10) * 8 * 3 * 4 * 2, [])
    assert preflight.store_bytes(e, {**rule, "key": "job"}, HUB, conf)[0] == 2 * 60 * 8 * 3 * 4 * 2
    assert preflight.store_bytes(e, {**rule, "tokens": "last", "layers": "one"}, HUB, conf)[0] == 60 * 1 * 1 * 4 * 2
    assert preflight.store_bytes(exp(Job("m", "t", {}), dtype="fp32"), rule, HUB, conf)[0] == 60 * 8 * 3 * 4 * 4
    assert preflight.store_bytes(e, {**rule, "when": {"method.regime": "ft"}}, HUB, conf)[0] == 0
    assert preflight.store_bytes(exp(Job("m", "local", {})), rule, HUB, conf) == (0, ["m/local"])  # size unknown
    # a probe stores each source, with the hub config's dimensions where the manifest has them
    probe = exp(Job("m", "t", {"method.sources": ["src"]}))
    assert preflight.store_bytes(probe, {**rule, "models": "sources"}, HUB, conf)[0] == 60 * 8 * 4 * 32 * 2


def test_gated_ids_and_licences_come_from_the_manifest_and_a_missing_entry_reads_unknown():
    gated, licences = preflight.access({"org/src", "org/data", "org/absent"}, HUB)
    assert gated == ["org/src"]
    assert licences == {"org/absent": "unknown", "org/data": "cc-by-4.0", "org/src": "llama2"}


def plan_with(*ids):
    p = preflight.Plan("p", [])
    p.hub_models.update(ids)
    return p


def test_refusals_name_their_fix_and_force_or_a_token_lifts_them():
    gated = [plan_with("org/src")]
    ok = dict(dirty=False, allow_dirty=False, token=False, force=False, disk=[])
    assert preflight.refusals([plan_with("other/model")], HUB, **ok) == []
    (why,) = preflight.refusals(gated, HUB, **ok)
    assert "gated hub ids in the grid (org/src) and no hub token" in why
    assert "HF_TOKEN" in why and "hf auth login" in why
    assert preflight.refusals(gated, HUB, **{**ok, "token": True}) == []
    (why,) = preflight.refusals([], HUB, **{**ok, "dirty": True})
    assert "uncommitted changes" in why and "commit first, or pass allow_dirty=true" in why
    assert preflight.refusals([], HUB, **{**ok, "dirty": True, "allow_dirty": True}) == []
    (why,) = preflight.refusals([], HUB, **{**ok, "disk": ["disk: 2.0 TB estimated for /s but 1.0 GB free there"]})
    assert why.startswith("disk: 2.0 TB estimated") and "force" in why
    assert preflight.refusals([], HUB, **{**ok, "disk": ["disk: ..."], "force": True}) == []


def test_disk_check_adds_up_the_folders_of_one_file_system_and_tolerates_missing_ones(tmp_path):
    need = {tmp_path / "store" / "not" / "yet": 600, tmp_path / "hf": 500}  # the same file system
    assert preflight.disk_check(need, free=lambda p: 1000) == \
        [f"disk: 1.1 KB estimated for {tmp_path / 'store' / 'not' / 'yet'}, {tmp_path / 'hf'} but 1.0 KB free there"]
    assert preflight.disk_check(need, free=lambda p: 1100) == []


def test_has_token_reads_hf_token_or_a_saved_login(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert preflight.has_token()
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # no saved token there
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "token"))
    assert not preflight.has_token()
    (tmp_path / "token").write_text("hf_saved\n")
    assert preflight.has_token()


def test_a_plan_expands_the_grid_and_sums_the_estimates():
    p = preflight.plan("eat", ["table1_sst2", "table2_qqp"])
    assert p.n_jobs == 12 and p.hours == pytest.approx((1.3, 2.5))  # 2 models x 3 seeds each; conf/tier_costs.yaml
    assert {"bert-base-uncased", "distilbert-base-uncased"} <= p.hub_models and "nyu-mll/glue" in p.hub_datasets
    lines = preflight.report([p], preflight.hub_manifest())
    assert lines[1] == "  eat: 2 experiments, 12 jobs, 1-2 GPU-h" and "gated: none" in lines[3]


def readme_gpu_section() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"^## GPU tier\n(.*?)(?=^## )", text, re.M | re.S)
    assert m, "README.md has no '## GPU tier' section"
    return m.group(1)


def test_the_readme_gpu_tier_section_names_every_gated_id_and_the_one_command():
    section = readme_gpu_section()
    hub = preflight.hub_manifest()
    gated = sorted(i for kind in ("models", "datasets") for i, e in hub[kind].items()
                   if e.get("gated") not in (None, False))
    assert {"meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-2-7b-hf", "mistralai/Mistral-7B-v0.3"} <= set(gated)
    assert [i for i in gated if f"`{i}`" not in section] == []
    for words in ("make reproduce-gpu", "make preflight", "STRATA_HUB=1", "HF_TOKEN", "hf auth login", "GPU-h"):
        assert words in section, words
