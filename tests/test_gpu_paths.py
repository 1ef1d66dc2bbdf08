"""What a GPU run of the paper tier goes through that the CPU tier never did: hub checkpoints laid out as the hub
ships them (tests/helpers/hub_models.py builds tiny copies, no download), bf16/fp16 autocast, and the GPU hardware
config's budgets."""
import json

import pytest
import torch
import yaml

from experiments.models import load_encoder, load_tokenizer, weights_path
from tests.conftest import compose
from tests.helpers.hub_models import MANIFEST, hub_entry, hub_model_overrides, save_hub_model


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory):
    return tmp_path_factory.mktemp("hub_models")


def hub_model(name, root):
    """conf/model/<name> composed to load its tiny hub-layout fixture."""
    return compose(*hub_model_overrides(name, root)).model


@pytest.mark.parametrize("name, hf_id", [("roberta-base", "FacebookAI/roberta-base"),
                                         ("deberta-v3-base", "microsoft/deberta-v3-base"),
                                         ("llama-2-7b", "meta-llama/Llama-2-7b-hf"),
                                         ("distilbert-base-cased", "distilbert-base-cased")])
def test_hub_fixture_copies_the_hub_layout(name, hf_id, hub_root):
    entry = hub_entry(hf_id)
    path = save_hub_model(hf_id, hub_root)
    listed = (yaml.safe_load(MANIFEST.read_text())["models"][hf_id].get("files") if MANIFEST.is_file()
              else entry["files"])
    if listed:
        assert {p.name for p in path.iterdir() if not p.name.startswith(".")} == set(listed)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == entry["model_type"]
    assert config.get("torch_dtype") == entry.get("torch_dtype") and "dtype" not in config
    want = entry["config"].get("max_position_embeddings")
    assert config.get("max_position_embeddings", config.get("n_positions")) == want
    assert len(load_tokenizer(hub_model(name, hub_root))) == config["vocab_size"]


def test_deberta_fixture_stores_half_weights_and_no_dtype(hub_root):
    """The DeBERTa repos' shape: an fp16 pytorch_model.bin, a config.json that names no dtype, spm.model alone."""
    path = save_hub_model("microsoft/deberta-v3-base", hub_root)
    state = torch.load(path / "pytorch_model.bin", weights_only=True)
    assert {t.dtype for t in state.values() if t.is_floating_point()} == {torch.float16}
    assert not (path / "tokenizer.json").exists()
    assert json.loads((path / "tokenizer_config.json").read_text()) == {"do_lower_case": False, "vocab_type": "spm"}


def test_llama_fixture_has_no_pad_token(hub_root):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(save_hub_model("meta-llama/Llama-2-7b-hf", hub_root))
    assert tok.pad_token is None and tok.eos_token == "</s>"
    assert load_tokenizer(hub_model("llama-2-7b", hub_root)).pad_token == "</s>"  # load_tokenizer sets it


def test_overrides_load_the_fixture_offline(hub_root, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = hub_model("roberta-base", hub_root)
    assert model.name == "roberta-base" and model.hf_id == "FacebookAI/roberta-base"
    assert weights_path(model) == str(hub_root / "FacebookAI--roberta-base")
    tok, enc = load_encoder(model)
    assert enc.config.hidden_size == model.hidden_size == 32


def test_unknown_hub_id_names_the_fix(hub_root):
    with pytest.raises(KeyError, match="no-such/model"):
        save_hub_model("no-such/model", hub_root)
