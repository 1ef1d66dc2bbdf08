"""method.head=paper: the fusion feeds the head Hugging Face's *ForSequenceClassification builds on the backbone (P-32
§3: "the standard classification head"), so with fusion=last the model computes HF's own logits: BERT's pretrained
pooler + dropout + a new linear, RoBERTa's new dense+tanh+linear, a decoder's bias-free `score` at the last real token
(right padding). method.head=fresh keeps a new dense+tanh+linear on every backbone."""
import copy

import pytest
import torch
from transformers import (BertConfig, BertForSequenceClassification, BertModel, LlamaForSequenceClassification,
                          RobertaConfig, RobertaForSequenceClassification)

from experiments.assets import write_manifest
from experiments.config import ConfigError
from experiments.models import (ScoreHead, SequenceHead, _pooler_key, byte_tokenizer, checkpoint_pooler,
                                load_encoder)
from layer_fusion.assemble import build, new_parameters
from layer_fusion.config import check
from experiments.config import compose

TINY = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64)
N_LABELS = 3


def asset(tmp_path, monkeypatch, name: str, hf_model) -> None:
    """Save `hf_model` and the byte tokenizer as the offline asset models/<name> of a temporary cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("STRATA_CACHE", str(cache))
    d = cache / "models" / name
    hf_model.save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    write_manifest(d)


def p32(*overrides):
    return compose("debug=smoke", "method=layer_fusion", "task=rt-polarity", "method.protocol=p32",
                   "method.regime=ft", "method.fusion=last", *overrides)


def batch(tok, pair=True):
    """A right-padded batch of unequal lengths (sentence pairs: token types 0 and 1)."""
    a = ["a short one", "a rather longer first sentence here", "mid length text"]
    b = ["and its pair", "x", "a second sentence of some length"] if pair else None
    enc = tok(a, b, padding=True, return_tensors="pt") if pair else tok(a, padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any() and (enc["attention_mask"][:, 0] == 1).all()  # padded, on the right
    return enc


def logits_of(model, enc):
    with torch.no_grad():
        return model(enc["attention_mask"], input_ids=enc["input_ids"],
                     token_type_ids=enc.get("token_type_ids")).logits


def bert_config(tok):
    return BertConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=N_LABELS, **TINY)


def test_bert_paper_head_equals_bert_for_sequence_classification(tmp_path, monkeypatch):
    tok = byte_tokenizer()
    torch.manual_seed(0)
    hf = BertForSequenceClassification(bert_config(tok))
    with torch.no_grad():  # a pooler unlike any fresh init, so a fresh dense layer could not pass
        hf.bert.pooler.dense.bias.normal_()
    asset(tmp_path, monkeypatch, "tiny-cls", hf)
    cfg = p32("model.source=offline", "model.offline=tiny-cls")
    tok, backbone = load_encoder(cfg.model)
    model = build(cfg, backbone, N_LABELS, pooled=False)
    reference = BertForSequenceClassification.from_pretrained(tmp_path / "cache" / "models" / "tiny-cls").eval()
    with torch.no_grad():  # the classifier is new in both: copy it; the pooler must come from the checkpoint
        model.head.out.weight.copy_(reference.classifier.weight)
        model.head.out.bias.copy_(reference.classifier.bias)
    model.eval()
    enc = batch(tok)
    torch.testing.assert_close(logits_of(model, enc), reference(**enc).logits.detach(), atol=1e-5, rtol=1e-5)
    assert model.head.note.startswith("pretrained pooler")
    assert torch.equal(model.head.dense.weight, reference.bert.pooler.dense.weight)


def test_a_checkpoint_without_pooler_weights_gets_a_fresh_pooler(tmp_path, monkeypatch):
    tok = byte_tokenizer()
    asset(tmp_path, monkeypatch, "bare", BertModel(bert_config(tok), add_pooling_layer=False))
    cfg = p32("model.source=offline", "model.offline=bare")
    assert checkpoint_pooler(cfg.model) is None
    _, backbone = load_encoder(cfg.model)
    head = build(cfg, backbone, N_LABELS, pooled=False).head
    assert head.note == "fresh pooler (checkpoint has none)" and isinstance(head, SequenceHead)
    assert not head.pre_dropout  # still BERT's layout: pooler, dropout, classifier
    random_model = build(p32(), load_encoder(p32().model)[1], N_LABELS, pooled=False).head
    assert random_model.note == "fresh pooler (random model, no checkpoint)"


def test_pooler_keys_bare_or_under_the_model_prefix():
    assert _pooler_key("pooler.dense.weight") == "weight" and _pooler_key("bert.pooler.dense.bias") == "bias"
    assert _pooler_key("bert.encoder.pooler.dense.weight") is None and _pooler_key("classifier.weight") is None


def test_roberta_paper_head_equals_roberta_for_sequence_classification(tmp_path, monkeypatch):
    tok = byte_tokenizer()
    torch.manual_seed(0)
    hf = RobertaForSequenceClassification(RobertaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                                                        num_labels=N_LABELS, max_position_embeddings=520,
                                                        type_vocab_size=1, **TINY))
    asset(tmp_path, monkeypatch, "tiny-roberta", hf)
    cfg = p32("model.source=offline", "model.offline=tiny-roberta", "model.family=roberta")
    tok, backbone = load_encoder(cfg.model)
    model = build(cfg, backbone, N_LABELS, pooled=False)
    reference = RobertaForSequenceClassification.from_pretrained(tmp_path / "cache" / "models" / "tiny-roberta")
    reference.eval()
    with torch.no_grad():  # RobertaClassificationHead is new in HF too: copy all of it
        model.head.dense.load_state_dict(reference.classifier.dense.state_dict())
        model.head.out.load_state_dict(reference.classifier.out_proj.state_dict())
    model.eval()
    enc = batch(tok, pair=False)
    torch.testing.assert_close(logits_of(model, enc), reference(**enc).logits.detach(), atol=1e-5, rtol=1e-5)
    assert "RobertaClassificationHead" in model.head.note and model.head.pre_dropout


def llama(overrides=()):
    cfg = p32("model=tiny-llama", *overrides)
    tok, backbone = load_encoder(cfg.model)
    return cfg, tok, backbone


def test_llama_paper_head_equals_llama_for_sequence_classification_on_a_right_padded_batch():
    cfg, tok, backbone = llama()
    torch.manual_seed(0)
    model = build(cfg, backbone, N_LABELS, pooled=False).eval()
    config = copy.deepcopy(backbone.config)
    config.num_labels = N_LABELS
    reference = LlamaForSequenceClassification(config).eval()
    assert reference.config.pad_token_id == tok.pad_token_id  # HF finds the last real token by the pad id
    missing, unexpected = reference.model.load_state_dict(backbone.state_dict(), strict=False)
    assert not missing and not unexpected
    with torch.no_grad():
        reference.score.weight.copy_(model.head.score.weight)
    enc = batch(tok, pair=False)
    ours = logits_of(model, enc)
    with torch.no_grad():
        theirs = reference(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_decoder_head_is_one_bias_free_linear():
    cfg, _, backbone = llama()
    model = build(cfg, backbone, N_LABELS, pooled=False)
    head = model.head
    assert isinstance(head, ScoreHead) and head.score.bias is None
    assert sum(p.numel() for p in head.parameters()) == N_LABELS * cfg.model.hidden_size
    params = new_parameters(model)
    assert params["params/new"] == params["params/fusion"] + N_LABELS * cfg.model.hidden_size
    assert head.note.startswith("score")


def test_the_pooled_probe_reads_the_same_paper_head():
    """fe: one cached state per example; the paper head built for it has the same weights and reads that state."""
    cfg, _, backbone = llama(("method.regime=fe",))
    pooled, full = (build(cfg, backbone, N_LABELS, pooled=p) for p in (True, False))
    assert pooled.state_dict().keys() == full.state_dict().keys() and isinstance(pooled.head, ScoreHead)


def test_fresh_head_keeps_a_new_dense_tanh_linear():
    cfg, _, backbone = llama(("method.head=fresh",))
    head = build(cfg, backbone, N_LABELS, pooled=False).head
    assert isinstance(head, SequenceHead) and head.pre_dropout and head.note == "fresh dense+tanh+linear"
    assert sum(p.numel() for p in head.parameters()) == 32 * 32 + 32 + 32 * N_LABELS + N_LABELS


@pytest.mark.parametrize("overrides,match", [
    (("method.head=hf",), r"method.head='hf' is not one of paper, fresh"),
    (("model.pooling=mean",), r"method.head=paper reads the first token.*model.pooling=mean.*set model.pooling=cls"),
    (("model=tiny-llama", "model.pooling=cls"), r"reads the last real token.*set model.pooling=last"),
])
def test_bad_head_configs_are_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        check(p32(*overrides))


def test_a_fresh_head_reads_whatever_model_pooling_names():
    check(p32("model.pooling=mean", "method.head=fresh"))


@pytest.mark.assets
def test_which_packaged_encoders_ship_a_pretrained_pooler():
    """minilm-l6 (all-MiniLM-L6-v2) keeps BERT's pooler; e5-small and minilm-l3 were saved as bare encoders, so their
    paper head gets a fresh pooler (and says so in the record)."""
    ships = {name: checkpoint_pooler(compose(f"model={name}").model) is not None
             for name in ("minilm-l6", "e5-small", "minilm-l3")}
    assert ships == {"minilm-l6": True, "e5-small": False, "minilm-l3": False}
