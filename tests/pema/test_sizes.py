"""pema.sizes: Tables 5/6 from the model configs alone (experiments.models.architecture, meta device) against the
paper, and method=pema_sizes through the runner."""
import pytest
from omegaconf import OmegaConf

from experiments import registry
from experiments.config import ModelConfig
from experiments.evidence.paper_values import paper_values
from experiments.models import architecture
from experiments.run import execute
from pema import sizes
from experiments.config import CONF

PV = paper_values("pema")
GLUE = ("cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli")
SIZES = ("sizes/rows", "sizes/n_emb_m", "sizes/n_m", "sizes/ratio_pct")


def model_cfg(name):
    node = OmegaConf.load(CONF / "model" / f"{name}.yaml")
    node.pop("defaults")
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), node)


@pytest.mark.parametrize("model,row", sorted((m, r) for m, r in PV.models.items() if PV.get(r, None, None, SIZES[0])))
def test_table5_from_configs_equals_the_paper(model, row):
    s = sizes.sizes(architecture(model_cfg(model)))
    V, n_emb, n, ratio = (PV.get(row, None, None, k).value for k in SIZES)
    assert s.rows == V
    assert (round(s.n_emb / 1e6, 1), round(s.n / 1e6, 1), round(s.ratio_pct, 1)) == (n_emb, n, ratio)


@pytest.mark.parametrize("model", sorted(m for m in PV.models if m.startswith("deberta-v3")))
def test_table6_from_configs_equals_the_paper(model):
    arch = architecture(model_cfg(model))
    s = sizes.sizes(arch)
    layers, heads, d, n_emb, n, ratio = (PV.lookup(model, None, None, k) for k in
                                         ("sizes/layers", "sizes/heads", "sizes/d", *SIZES[1:]))
    assert (arch.num_hidden_layers, arch.num_attention_heads, s.d) == (layers, heads, d)
    assert (round(s.n_emb / 1e6, 1), round(s.n / 1e6, 1), round(s.ratio_pct, 1)) == (n_emb, n, ratio)


def test_table2_model_rows_follow_the_uncased_bert():
    """Table 5 lists cased BERT sizes, but embedding-% x N_emb/N reproduces Table 2's BERT model-% rows with the
    uncased vocabulary (30,522), not with the cased one (28,996)."""
    emb, model = ([PV.get("BERT", t, None, f"reduction/{k}_pct").value for t in GLUE] for k in ("embedding", "model"))
    for name, fits in (("bert-base-uncased", True), ("bert-base-cased", False)):
        ratio = sizes.sizes(architecture(model_cfg(name))).ratio_pct / 100
        assert all(round(e * ratio, 1) == m for e, m in zip(emb, model)) is fits


def test_pema_sizes_is_its_own_entry_point_and_reads_no_tokenizer(smoke_cfg, tmp_path):
    assert registry.resolve("pema_sizes") is sizes.run
    rec = execute(smoke_cfg("method=pema_sizes"), tmp_path / "r")
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    # tiny-bert: 260 byte-tokenizer rows of width 32, 4 layers of 2 heads
    assert (m["sizes/rows"], m["sizes/d"], m["sizes/layers"], m["sizes/heads"]) == (260, 32, 4, 2)
    assert m["sizes/n_emb_m"] == 260 * 32 / 1e6 and m["sizes/ratio_pct"] == pytest.approx(100 * 260 * 32 / 1e6
                                                                                         / m["sizes/n_m"])
    assert rec["extra"]["model_type"] == "bert"
    assert rec["provenance"]["tokenizer"] is None  # the architecture alone: no tokenizer read, none named
