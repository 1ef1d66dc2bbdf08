"""paper_values.yaml: one schema, looked up by (model, task, column, metric) with our names; a run finds its own
paper row, a declared twin (labelled) or none."""
import pytest
import yaml

from experiments import REPO, registry
from experiments.config import CONF
from experiments.evidence.paper_values import PaperValuesError, load, paper_values, parse

DOC = """
models: {roberta-large: RoBERTa-L, bert-base-uncased: BERT-base}
tasks: {bc5cdr: BC5CDR}
twins:
  models:
    minilm-l6: {paper: MiniLM-L6-H384, why: "a fine-tune of it"}
    e5-small: {paper: BERT-base, why: "nearest by depth", where: [Table 5]}
  tasks:
    rt-polarity: {paper: cls-avg, why: "family average"}
cells:
  - {model: MiniLM-L6-H384, task: cls-avg, column: reduced, metric: score, value: 77.6, where: "Table 1"}
  - {model: RoBERTa-L, task: BC5CDR, column: reduced, metric: score, value: 90.0, where: "Table 1"}
  - {model: RoBERTa-L, task: cls-avg, column: reduced, metric: score, value: 83.2, where: "Table 1"}
  - {model: BERT-base, task: cls-avg, column: reduced, metric: score, value: 80.0, where: "Table 1"}
  - {model: BERT-base, task: null, column: A10G, metric: time/NR_ms, value: 173, where: "Table 5"}
  - {model: null, task: sst2, column: null, metric: accuracy, value: 91.0, where: "Table 9"}
"""


def _pv(text=DOC):
    return parse(yaml.safe_load(text), "demo/paper_values.yaml")


def test_a_paper_scale_run_finds_its_own_row_or_none():
    pv = _pv()
    assert pv.lookup("roberta-large", "bc5cdr", "reduced", "score") == 90.0  # both names mapped
    m = pv.find("roberta-large", "bc5cdr", "reduced", "score")
    assert not m.stand_in and m.row == "RoBERTa-L, BC5CDR (Table 1)"
    assert pv.lookup("roberta-large", "bc5cdr", "full", "score") is None      # no such column: none, not a neighbour
    assert pv.lookup("deberta-v2-xlarge", "bc5cdr", "reduced", "score") is None  # unmapped model: none
    assert pv.lookup("RoBERTa-L", "BC5CDR", "reduced", "score") == 90.0      # the paper's own names work too


def test_a_stand_in_finds_its_twin_only_through_a_labelled_mapping():
    pv = _pv()
    m = pv.find("minilm-l6", "rt-polarity", "reduced", "score")
    assert m.value == 77.6 and m.stand_in and m.row.endswith("(Table 1; stand-in)")
    assert m.via == ("minilm-l6 → MiniLM-L6-H384: a fine-tune of it", "rt-polarity → cls-avg: family average")
    assert pv.lookup("tiny-bert", "rt-polarity", "reduced", "score") is None  # no twin declared: none
    # a twin limited to Table 5 is compared there only
    assert pv.lookup("e5-small", None, "A10G", "time/NR_ms") == 173
    assert pv.lookup("e5-small", "rt-polarity", "reduced", "score") is None
    # the run config's own stand_in_for is an explicit mapping too
    m = pv.find("tiny-bert", "rt-polarity", "reduced", "score", model_for="roberta-large")
    assert m.value == 83.2 and "tiny-bert is the offline stand-in for roberta-large" in m.via[0]
    assert pv.lookup(None, "rt-polarity", None, "accuracy", task_for="sst2") == 91.0


def test_find_for_reads_a_run_record():
    pv = _pv()
    run = {"config": {"model": {"name": "e5-small", "stand_in_for": None},
                      "task": {"name": "rt-polarity", "stand_in_for": "sst2"}}}
    assert pv.find_for(run, "A10G", "time/NR_ms", task=False).value == 173
    assert pv.find_for(run, "reduced", "score") is None


@pytest.mark.parametrize("bad, message", [
    ("cells: [{model: A, task: t, column: null, metric: m, value: 1}]", "missing ['where']"),
    ("cells: [{model: A, task: t, column: null, metric: m, value: 1, where: T1, source: x}]", "unknown ['source']"),
    ("cells: [{model: A, task: t, column: null, metric: m, value: [1, 2], where: T1}]", "value [1, 2] must be"),
    ("cells: [{model: A, task: t, column: null, metric: null, value: 1, where: T1}]", "'metric' is None"),
    ("cells:\n  - {model: A, task: t, column: c, metric: m, value: 1, where: T1}\n"
     "  - {model: A, task: t, column: c, metric: m, value: 2, where: T2}", "duplicate of the cell from T1"),
    ("values: []", "unknown section(s) ['values']"),
    ("models: {x: Nobody}\ncells: []", "models.x: maps to 'Nobody', which no cell has"),
    ("twins: {models: {x: {paper: A}}}\ncells: [{model: A, task: t, column: c, metric: m, value: 1, where: T1}]",
     "twins.models.x"),
    ("twins: {models: {x: {paper: A, why: w, where: [T9]}}}\n"
     "cells: [{model: A, task: t, column: c, metric: m, value: 1, where: T1}]", "where ['T9'] names no cell's where"),
])
def test_malformed_file_names_the_file_and_the_entry(bad, message):
    with pytest.raises(PaperValuesError) as e:
        _pv(bad)
    assert str(e.value).startswith("demo/paper_values.yaml: ") and message in str(e.value)


def test_invalid_yaml_names_the_file(tmp_path):
    p = tmp_path / "paper_values.yaml"
    p.write_text("cells: [{model: A\n")
    with pytest.raises(PaperValuesError, match=f"{p}: not valid YAML"):
        load(p)


def test_recycling_rows_follow_the_model_of_the_run():
    pv = paper_values("recycling")
    m = pv.find("minilm-l6", "rt-polarity", "reduced", "score", task_for="sst2")  # the offline tier's runs
    assert (m.cell.model, m.cell.task, m.value, m.stand_in) == ("MiniLM-L6-H384", "cls-avg", 77.6, True)
    assert pv.lookup("e5-small", "rt-polarity", "reduced", "score") is None      # no accuracy twin declared
    assert pv.lookup("e5-small", None, "A10G", "speedup/NR_vs_R_pct") == 99       # its timing twin (BERT-base)
    assert pv.lookup("scibert", "scicite", "reduced", "score") == 86.6            # paper scale: its own row
    assert pv.lookup("bert-base-uncased", "squad", "full", "score") == 88.5       # (Sci)BERT on QA is BERT
    assert pv.lookup("bert-base-uncased", "scicite", "full", "score") is None     # ... and SciBERT on Cls
    assert pv.lookup("roberta-large", "bc5cdr", "full", "score") == 90.4
    assert pv.lookup("minilmv2-l6-h384", "wnut16", "reduced-k2", "appendix-avg") == 90.2


def test_pema_table10_rows_follow_the_model_and_score_qqp_by_f1():
    pv = paper_values("pema")
    assert pv.find("bert-base-cased", "sst2", "with", None).value == 92.5
    assert pv.find("roberta-base", "sst2", "with", None).value == 94.2
    qqp = pv.find("distilroberta-base", "qqp", "without", None).cell
    assert (qqp.metric, qqp.value) == ("f1_binary", 87.2)
    assert pv.find("minilm-l6", "rt-polarity", "without", None, task_for="sst2") is None  # no score twin
    # the vocabulary twin counts for the embedding reduction only
    assert pv.lookup("minilm-l6", "rt-polarity", None, "reduction/embedding_pct", task_for="sst2") == 57.9
    assert pv.lookup("minilm-l6", "rt-polarity", None, "reduction/model_pct", task_for="sst2") is None


WITH_VALUES = [p for p in registry.PAPERS if (REPO / p / "paper_values.yaml").exists()]


def test_every_paper_package_has_its_paper_values():
    assert set(registry.PACKAGES) <= set(WITH_VALUES)


@pytest.mark.parametrize("paper", WITH_VALUES)
def test_every_papers_file_is_valid_and_maps_our_configs(paper):
    """The file validates, holds numbers, and what it maps from is one of our model and task configs (a renamed
    config would leave its runs without their paper row)."""
    pv = paper_values(paper)
    assert pv.cells, f"{paper}/paper_values.yaml holds no number"
    for kind, group in (("models", "model"), ("tasks", "task")):
        ours = set(getattr(pv, kind)) | set(pv.twins[kind])
        missing = sorted(n for n in ours if not (CONF / group / f"{n}.yaml").exists())
        assert not missing, f"{paper}/paper_values.yaml maps {kind} {missing}, which are not conf/{group}/ configs"


def test_the_package_files_keep_their_numbers():
    sizes = {p: len(paper_values(p).cells) for p in WITH_VALUES}
    assert sizes["intrinsic_dim"] == 48 and sizes["pema"] > 500 and sizes["recycling"] > 500
    assert paper_values("intrinsic_dim").lookup("smollm2-135m", "rt-polarity", "sft", "accuracy",
                                                task_for="sst2") == 94.4
