"""What a GPU run of the paper tier goes through that the CPU tier never did: hub checkpoints laid out as the hub
ships them (tests/helpers/hub_models.py builds tiny copies, no download), bf16/fp16 autocast, and the GPU hardware
config's budgets."""
import json

import pytest
import torch
import yaml

from experiments.config import compose
from experiments.models import load_encoder, load_tokenizer, weights_path
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
    assert model.from_config.vocab_size == enc.config.vocab_size == len(tok)  # what parameter counts read


def test_unknown_hub_id_names_the_fix(hub_root):
    with pytest.raises(KeyError, match="no-such/model"):
        save_hub_model("no-such/model", hub_root)


# --- autocast: what hardware=gpu (precision bf16; EAT fp16) runs -------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_span_head_masks_padding_under_autocast(dtype):
    """The encoder's last LayerNorm hands the head fp32 states while autocast runs its Linear in bf16/fp16: the
    padding fill must fit the logits' dtype, not the states'."""
    from experiments.models import SpanHead
    torch.manual_seed(0)
    head = SpanHead(8)
    hidden, mask = torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.autocast("cpu", dtype=dtype):
        out = head(hidden, mask, start_positions=torch.tensor([0, 1]), end_positions=torch.tensor([2, 2]))
    assert torch.isfinite(out.loss)
    assert out.logits.dtype == dtype
    padded = out.logits[1, 3:].float()
    assert (padded <= torch.finfo(dtype).min / 2).all()  # as unreachable as the dtype allows
    assert out.logits[1].float().argmax(0).max() < 3  # padding never wins
    fp32 = head(hidden, mask, start_positions=torch.tensor([0, 1]), end_positions=torch.tensor([2, 2]))
    assert out.loss.item() == pytest.approx(fp32.loss.item(), abs=0.05)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_qa_model_trains_a_step_under_autocast(dtype):
    from experiments.models import build
    cfg = compose("model=tiny-bert", "task=squad-dev")
    tok, model = build(cfg.model, cfg.task)
    enc = tok(["who ran?", "where?"], ["Peter ran to Paris", "in London town"], padding="max_length",
              truncation=True, max_length=24, return_tensors="pt")
    with torch.autocast("cpu", dtype=dtype):
        out = model(**enc, start_positions=torch.tensor([5, 6]), end_positions=torch.tensor([5, 7]))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# --- loaders: hub checkpoints as the hub ships them ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["distilbert-base-cased", "distilbert-base-multilingual-cased"])
def test_distilbert_loads_and_runs(name, hub_root):
    """DistilBERT has no pooler to leave out (its configs say family: bert, its model_type says distilbert)."""
    tok, enc = load_encoder(hub_model(name, hub_root))
    assert type(enc).__name__ == "DistilBertModel"
    enc.eval()
    hidden = enc(**tok(["EU rejects German call"], return_tensors="pt")).last_hidden_state
    assert hidden.shape[-1] == 32 and torch.isfinite(hidden).all()


def test_bert_encoder_still_leaves_its_pooler_out(hub_root):
    _, enc = load_encoder(hub_model("bert-base-cased", hub_root))
    assert type(enc).__name__ == "BertModel" and enc.pooler is None


@pytest.mark.parametrize("name", ["deberta-v3-base", "deberta-v2-xlarge"])
def test_half_checkpoint_without_dtype_loads_fp32(name, hub_root):
    """The DeBERTa repos store fp16 .bin files and name no dtype: the encoder must still train fp32 master weights."""
    model = hub_model(name, hub_root)
    assert "torch_dtype" not in json.loads((save_hub_model(model.hf_id, hub_root) / "config.json").read_text())
    tok, enc = load_encoder(model)
    assert {p.dtype for p in enc.parameters()} == {torch.float32}
    assert type(tok).__name__ == "DebertaV2Tokenizer" and tok.convert_tokens_to_ids("[CLS]") == tok.cls_token_id


def test_causal_lm_follows_the_dtype_asked_for(hub_root):
    from experiments.models import load_causal_lm
    model = hub_model("llama-2-7b", hub_root)  # the hub says float16
    assert {p.dtype for p in load_encoder(model)[1].parameters()} == {torch.float32}
    assert {p.dtype for p in load_causal_lm(model, torch.bfloat16)[1].parameters()} == {torch.bfloat16}


def test_every_tokenizer_extra_the_hub_models_need_is_a_dependency():
    """A hub tokenizer that needs a package (DeBERTa's spm.model: sentencepiece) fails on a fresh install without
    it, with a message about tiktoken."""
    import tomllib
    from pathlib import Path
    deps = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for d in deps}
    extras = {x for e in (yaml.safe_load(MANIFEST.read_text())["models"].values()) for x in e.get("extras") or []}
    assert extras and extras <= names
    from packaging.requirements import Requirement
    torch_req = next(Requirement(d) for d in deps if Requirement(d).name == "torch")
    assert "2.5.1" not in torch_req.specifier and "2.6.0" in torch_req.specifier  # .bin loads need 2.6


# --- pre-split words through a byte-level BPE tokenizer (NER) ------------------------------------------------------

WORDS = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]


@pytest.mark.parametrize("name", ["roberta-base", "minilmv2-l6-h384", "distilroberta-base"])
def test_pre_split_words_start_with_the_word_boundary_marker(name, hub_root):
    """RoBERTa's tokenizers ship add_prefix_space false: pre-split words (the NER encoder's input) would each be
    encoded as if it began the text, with no word-boundary marker, unlike the same words in running text."""
    from experiments.models import build
    cfg = compose(*hub_model_overrides(name, hub_root), "task=wnut16")
    tok, _ = build(cfg.model, cfg.task)
    enc = tok(WORDS, is_split_into_words=True)
    pieces = tok.convert_ids_to_tokens(enc.input_ids)
    firsts = [pieces[enc.word_ids().index(w)] for w in range(len(WORDS))]
    assert all(p.startswith("Ġ") for p in firsts), firsts


@pytest.mark.parametrize("task", ["rt-polarity", "squad-dev"])
def test_running_text_tokenization_is_the_hubs(task, hub_root):
    """Classification and QA read running text: their tokenizer stays as the hub configures it."""
    from transformers import AutoTokenizer

    from experiments.models import build
    cfg = compose(*hub_model_overrides("roberta-base", hub_root), f"task={task}")
    tok, _ = build(cfg.model, cfg.task)
    hub = AutoTokenizer.from_pretrained(cfg.model.local_dir)
    text = " ".join(WORDS)
    assert tok(text).input_ids == hub(text).input_ids
    assert not tok.convert_ids_to_tokens(tok(text).input_ids)[1].startswith("Ġ")


@pytest.mark.slow
def test_layer_fusion_ner_reads_words_with_their_start_marks(hub_root, smoke_cfg, tmp_path):
    """DWAtt's conll2003 runs load their encoder themselves: the record's tokenizer is the one that marks words."""
    from experiments.models import tokenizer_fingerprint
    from experiments.run import execute
    cfg = smoke_cfg("method=layer_fusion", "task=wnut16", *hub_model_overrides("roberta-base", hub_root),
                    "method.shots=1", "train.patience=0", "method.evals_per_run=1")
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    marked, hub = load_tokenizer(cfg.model, pre_split=True), load_tokenizer(cfg.model)
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(marked) != tokenizer_fingerprint(hub)


# --- hardware=gpu composes the offline tasks' dev split ------------------------------------------------------------

CPU_BUDGETS = sorted(p.stem.removeprefix("cpu_") for p in (MANIFEST.parent / "budget").glob("cpu_*.yaml"))


@pytest.mark.parametrize("task", CPU_BUDGETS)
def test_gpu_run_of_an_offline_task_keeps_its_dev_split(task):
    """The budget file is picked by ${hardware}_${task}: a GPU run must still carve the dev split the CPU budget
    carves, or it would select its checkpoint on eval without saying so."""
    cpu, gpu = compose(f"task={task}", "hardware=cpu"), compose(f"task={task}", "hardware=gpu")
    if cpu.task.dev_from_train is None:
        pytest.skip(f"cpu_{task}.yaml carves no dev split")
    assert gpu.task.dev_from_train == cpu.task.dev_from_train
    assert gpu.data.limit_train is None  # the CPU caps stay on the CPU


def test_layer_fusion_smoke_on_gpu_hardware_has_a_dev_split():
    from experiments import data
    cfg = compose("experiment=layer_fusion/smoke", "hardware=gpu", "hardware.device=cpu")
    assert "dev" in data.load_splits(cfg.task, cfg.data)
