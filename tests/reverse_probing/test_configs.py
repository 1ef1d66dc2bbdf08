"""The truncation configs of Tables 1-3 at both scales: each composes, every job of its sweep passes the method's
checks, and the sweep is exactly the intended cells (a source set, each source at its own layer, an aggregation, a
seed). A Hydra sweep cannot pair two keys, so the files look each source's layer up by name (method.trunc_layers)."""
import copy
import itertools

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from experiments.config import compose
from reverse_probing.config import check
from scripts.tier import kind

MRPC, NER, RE, QA, BERT = ("bert-base-cased-mrpc", "bert-base-cased-ner-ontonotes", "bert-base-cased-re",
                           "bert-base-cased-qa", "bert-base-cased")
PAPER_LAYER = {MRPC: 9, NER: 6, RE: 9, QA: 8, BERT: 10}  # [P Table 1 subscripts]
L6, LNER, LQA, LNLI = "minilm-l6", "minilm-l6-ner", "minilm-l6-qa", "minilm-l6-nli"
QUOREF_LAYER = {L6: 4, LNER: 3, LNLI: 3, LQA: 2}  # quoref_layers' dev choice (mean aggregation)
PAPER_PAIRS = [(RE, MRPC), (NER, MRPC), (RE, NER), (QA, MRPC), (RE, QA), (NER, QA)]  # [P Table 2] rows
PAPER_TRIPLES = [(RE, NER, QA), (MRPC, NER, QA), (MRPC, RE, QA), (MRPC, RE, NER)]  # [P Table 3] rows


def jobs(exp: str) -> list:
    """Every job of the experiment's -m sweep, composed and resolved as the runner gets it."""
    base = compose(f"experiment=reverse_probing/{exp}", hydra_node=True)
    params = base.hydra.sweeper.params or {}
    with open_dict(base):
        del base["hydra"]
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    out = []
    for job in itertools.chain.from_iterable(BasicSweeper.split_arguments(parsed, None)):
        cfg = copy.deepcopy(base)
        for o in OverridesParser.create().parse_overrides(job):
            OmegaConf.update(cfg, o.key_or_group, o.value(), force_add=True)
        check(cfg)  # the method's refusals: one layer per source, each in range
        out.append(OmegaConf.create(OmegaConf.to_container(cfg, resolve=True)))
    return out


def cells(exp: str) -> set:
    return {(tuple(c.method.sources), tuple(c.method.trunc), c.method.variant, c.method.aggregate, c.seed)
            for c in jobs(exp)}


def want(sets, layer, aggs, seeds) -> set:
    return {(s, tuple(layer[x] for x in s), "trunc", a, seed) for s in sets for a in aggs for seed in seeds}


@pytest.mark.parametrize("exp,sets,aggs", [
    ("table1_trunc", [(s,) for s in (MRPC, NER, RE, QA, BERT)], ["attention"]),
    ("table2_trunc", PAPER_PAIRS, ["mean", "attention"]),
    ("table3_trunc", PAPER_TRIPLES, ["mean", "attention"]),
    ("table3_trunc4", [(MRPC, RE, NER, QA)], ["mean", "attention"]),
])
@pytest.mark.slow  # a sweep over every case: over 10 s in all
def test_paper_scale_trunc_configs_sweep_the_papers_cells(exp, sets, aggs):
    got = jobs(exp)
    assert cells(exp) == want(sets, PAPER_LAYER, aggs, (1, 2, 3)) and len(got) == len(sets) * len(aggs) * 3
    assert {(c.task.name, c.hardware.name, c.method.gold_mentions) for c in got} == {("conll2012", "gpu", False)}


@pytest.mark.parametrize("exp,sets,aggs", [
    ("quoref_trunc", [(s,) for s in (L6, LNER, LQA, LNLI)], ["attention"]),
    ("quoref_pairs_trunc", [(L6, LNER), (L6, LQA), (L6, LNLI)], ["mean", "attention"]),
    ("quoref_multi_trunc", [(L6, LNER, LNLI)], ["mean", "attention"]),
    ("quoref_multi_trunc4", [(L6, LNER, LQA, LNLI)], ["mean", "attention"]),
])
@pytest.mark.slow  # a sweep over every case: over 10 s in all
def test_cpu_scale_trunc_configs_sweep_the_stand_in_cells_outside_the_tier(exp, sets, aggs):
    got = jobs(exp)
    assert cells(exp) == want(sets, QUOREF_LAYER, aggs, (0, 1, 2))
    assert {(c.task.name, c.hardware.name) for c in got} == {("quoref", "cpu")}
    assert kind("reverse_probing", exp) == "manual"  # in no tier: reverse_probing-cpu keeps its 15 minutes


@pytest.mark.slow  # a sweep over every case: over 10 s in all
def test_table1_and_tables_2_3_now_have_every_trunc_column_at_paper_scale():
    """table1 sweeps full/norm (mean and attention), layer_sweep mean-trunc at every layer; the trunc files add the
    attention-trunc column and the pairs', triples' and the quadruple's trunc columns."""
    t1 = {(c.method.variant, c.method.aggregate) for c in jobs("table1")}
    assert t1 == {(v, a) for v in ("full", "norm") for a in ("mean", "attention")}
    sweep = {(c.method.sources[0], c.method.trunc[0]) for c in jobs("layer_sweep")}
    assert all((s, L) in sweep for s, L in PAPER_LAYER.items())
