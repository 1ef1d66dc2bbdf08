"""Paper-scale configs say what the papers did: each test composes a config and checks the field."""
import re

import pytest
from omegaconf import OmegaConf

from experiments import REPO, registry
from experiments.config import CONF, compose
from tests.helpers.grids import compose_experiment, experiments_of

# ---------------------------------------------------------------- recycling


@pytest.mark.parametrize("name", ["bc5cdr", "jnlpba", "ncbi-disease"])
def test_bio_ner_is_scored_by_token_macro_f1_with_o_on_the_test_set(name):
    """The paper's NER "Macro F-1" is token-level over B/I/O tags including O, on test [P Table 1]."""
    task = compose(f"task={name}").task
    assert task.objective == "eval/token_macro_f1"
    assert {"token_macro_f1", "entity_f1"} <= set(task.metrics)  # entity F1 stays as an extra
    # jnlpba's hub copy has no `test`: its `validation` is the shared task's test set (tests/test_hub_tasks.py
    # checks the split exists)
    assert task.splits.eval == ("validation" if name == "jnlpba" else "test")


RECYCLING = sorted(p.stem for p in (CONF / "experiment" / "recycling").glob("*.yaml") if p.stem != "smoke")


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("exp", RECYCLING)
def test_recycling_accuracy_experiments_cache_in_fp32(exp):
    """The paper's default cache precision; fp16 only where a benchmark measures it (method recycling_bench)."""
    cfg = compose(f"experiment=recycling/{exp}")
    if cfg.method.name == "recycling":
        assert cfg.store.dtype == "fp32"
    else:
        assert cfg.method.name == "recycling_bench"


# ---------------------------------------------------------------- pema

SCORES_MODELS = OmegaConf.load(CONF / "experiment" / "pema" / "scores.yaml").hydra.sweeper.params.model.split(",")


@pytest.mark.parametrize("model", SCORES_MODELS)
def test_pema_scores_trains_each_model_at_its_table8_lr(model):
    """Table 8: peak lr 2e-5, 7.5e-6 for the XLM models; resolved at compose time, so the record holds it."""
    cfg = compose("experiment=pema/scores", f"model={model}")
    lr = OmegaConf.to_container(cfg, resolve=True)["train"]["lr"]
    assert lr == (7.5e-6 if model in ("xlm-roberta-base", "xlm-v-base") else 2e-5)


def test_pema_scores_lr_table_names_real_models_and_the_command_line_wins():
    cfg = compose("experiment=pema/scores")
    assert all((CONF / "model" / f"{m}.yaml").exists() for m in cfg.experiment.lr_by_model)
    assert compose("experiment=pema/scores", "model=xlm-roberta-base", "train.lr=3e-5").train.lr == 3e-5
    assert compose("experiment=pema/scores_cpu").train.lr == 2e-4  # the CPU tier keeps its own


def test_qqp_and_mrpc_record_binary_f1_and_table10_reads_qqp_by_it():
    qqp = compose("experiment=pema/scores", "task=qqp").task
    assert "f1_binary" in qqp.metrics and qqp.objective == "eval/f1_binary"  # Table 10: F1 for QQP
    mrpc = compose("experiment=pema/scores", "task=mrpc").task
    assert "f1_binary" in mrpc.metrics and mrpc.objective == "eval/accuracy"  # Table 10: accuracy for MRPC


# ---------------------------------------------------------------- intrinsic_dim

# figures the configs and README may claim: what intrinsic_dim/report.py draws (Figs. 6 and 40-45, the per-model
# boxplots, were added with it; 46 is the MLE check)
DRAWN = {*range(1, 47)}


def figures_claimed(text: str) -> set[int]:
    """Figure numbers a text claims ("Figs. 1, 4, 29-36"), ignoring lines that say they are not implemented."""
    out = set()
    for line in text.splitlines():
        if "not implemented" in line.lower():
            continue
        for group in re.findall(r"Figs?\.\s*((?:\d+(?:\s*[-–]\s*\d+)?[a-z]?(?:\s*(?:,|/|and)\s*)?)+)", line):
            for a, b in re.findall(r"(\d+)(?:\s*[-–]\s*(\d+))?", group):
                out |= set(range(int(a), int(b or a) + 1))
    return out


@pytest.mark.slow  # a sweep over every case: over 10 s in all
@pytest.mark.parametrize("exp", sorted(p.stem for p in (CONF / "experiment" / "intrinsic_dim").glob("*.yaml")))
def test_intrinsic_dim_configs_claim_only_figures_the_report_draws(exp):
    text = (CONF / "experiment" / "intrinsic_dim" / f"{exp}.yaml").read_text()
    assert compose(f"experiment=intrinsic_dim/{exp}").exp_id == f"intrinsic_dim/{exp}"
    assert figures_claimed(text) <= DRAWN
    if exp == "icl_vs_sft":
        assert figures_claimed(text) == {1, 4, 5, 6, *range(29, 37), *range(40, 46)}


def test_figure_parser_and_readme():
    assert figures_claimed("Paper §7 (Table 1, Figs. 1, 4, 5, 6, 29-36, 40-45): x") == \
        {1, 4, 5, 6, *range(29, 37), *range(40, 46)}
    assert figures_claimed("Figs. 1/29-36 and 37–39; Fig. 2a") == {1, 2, *range(29, 40)}
    assert figures_claimed((REPO / "intrinsic_dim" / "README.md").read_text()) <= DRAWN
    assert figures_claimed("Figs. 47") - DRAWN == {47}


# ---------------------------------------------------------------- eat


@pytest.mark.parametrize("exp", experiments_of("eat"))
def test_every_eat_experiment_chooses_tau_on_the_papers_grid(exp):
    """[P]: tau in {0.80, 0.85, 0.90, 0.95}; anything else is a labelled extension (method.extension_taus)."""
    cfg, _ = compose_experiment(exp)
    assert list(cfg.method.taus) == [0.8, 0.85, 0.9, 0.95]
    assert not set(cfg.method.get("extension_taus") or []) & {0.8, 0.85, 0.9, 0.95}


# ---------------------------------------------------------------- layer_fusion


@pytest.mark.parametrize("exp", ["layer_fusion/fewshot_grid", "layer_fusion/fe_vs_ft", "layer_fusion/learning_curves",
                                 "layer_fusion/base_vs_large"])
def test_conll03_grids_choose_on_validation_and_report_test(exp):
    """DWAtt's CoNLL-03 grids report the best dev F1 (dev = validation, as the paper) and score test once; a config
    with no dev split is refused by the method's checks before any work."""
    cfg, _ = compose_experiment(exp)
    assert cfg.task.name == "conll2003"
    assert dict(cfg.task.splits) == {"train": "train", "dev": "validation", "eval": "test"}
    registry.check(cfg)
    cfg.task.splits = {"train": "train", "eval": "validation"}
    with pytest.raises(ValueError, match=r"task=conll2003 has no dev split .*dev: validation"):
        registry.check(cfg)


# ---------------------------------------------------------------- stand-ins

# offline configs no paper runs an equivalent of (their yaml says why)
NO_PAPER_MODEL = {"e5-small", "minilm-l3", "movie-reviews"}
# paper-scale data and models with no hub copy a stand-in could point at instead: LDC-licensed data built into the
# asset cache (reverse_probing's build_* experiments), and the sources those experiments train on it
PAPER_SCALE_LOCAL = {"conll2012", "tacred", "bert-base-cased-coref", "bert-base-cased-re"}


@pytest.mark.parametrize("group", ["model", "task"])
def test_offline_configs_name_the_paper_config_they_stand_in_for(group):
    for p in sorted((CONF / group).glob("*.yaml")):
        node = OmegaConf.load(p)
        if node.get("stand_in_for"):
            target = OmegaConf.load(CONF / group / f"{node.stand_in_for}.yaml")  # a config of the same group
            assert target.source == "hub" or node.stand_in_for in PAPER_SCALE_LOCAL, \
                f"{p.stem} stands in for {node.stand_in_for}, not a paper-scale config"
        elif node.get("source") == "offline":
            assert p.stem in NO_PAPER_MODEL | PAPER_SCALE_LOCAL, \
                f"offline {group} {p.stem} needs stand_in_for (or a reason to have none)"


def test_smollm2_is_labelled_a_stand_in_for_the_paper_lms():
    assert compose("model=smollm2-135m").model.stand_in_for == "llama-3-8b"
    assert compose("model=minilm-l6").model.stand_in_for == "minilmv2-l6-h384"
