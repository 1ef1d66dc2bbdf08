"""Equivalence (paper §4 "no effect on task performance"): fine-tuning with PEMA yields the same full model as without,
through the suite's own pipeline (recipe.prepare -> pema.hook.attach -> experiments.train.fit -> merge), under the
conditions exact equality needs: no weight decay on the embedding rows (decoupled decay moves the rows outside V' in
the baseline only), the pad id fixed (RoBERTa-style models derive positions from it), the same data order. Where
weight decay is on, the test documents the difference: rows outside V' decay in the baseline and stay pre-trained
with PEMA, while every row PEMA trains and every logit on the task's data stay equal."""
import copy

import pytest
import torch

from experiments import recipe
from experiments.batches import train_batches
from experiments.evaluate import token_inputs
from experiments.train import fit
from pema.hook import attach
from experiments.config import compose

TOL = 1e-6



def finetune(cfg, tok, model, train, evals, pema: bool, tmp_path):
    """What method=finetune does, returning the (merged) model."""
    a = attach(cfg.pema, model, tok, {"train": train, "eval": evals}, tmp_path) if pema else None
    batches, n = train_batches(train, cfg.hardware.batch_size, tok.pad_token_id, cfg.seed, True)
    torch.manual_seed(cfg.seed)  # dropout masks
    fit(model, batches, n, cfg.train, evaluate=lambda m: {"eval/none": 0.0}, objective="eval/none",
        higher_is_better=True, device=torch.device("cpu"))
    metrics = a.finish(model) if a else {}
    return model.eval(), a, metrics


def both_arms(tmp_path, *overrides):
    cfg = compose(*overrides, "train.eval_every=1000", "train.patience=0", "train.progress=false")
    torch.manual_seed(0)
    tok, model, splits = recipe.prepare(cfg)
    train, evals = splits.train, splits.evals
    init = copy.deepcopy(model)
    full, _, _ = finetune(cfg, tok, model, train, evals, False, tmp_path)
    part, a, metrics = finetune(cfg, tok, copy.deepcopy(init), train, evals, True, tmp_path)
    batch = token_inputs(evals, tok.pad_token_id)(0, min(16, len(evals)))
    with torch.no_grad():
        diff = (full(**batch).logits - part(**batch).logits).abs().max().item()
    emb = lambda m: m.encoder.get_input_embeddings().weight.detach()  # noqa: E731
    return emb(init), emb(full), emb(part), a.partial.vmap, diff, metrics


def check_equal(e_init, e_full, e_pema, vmap, logits_diff, metrics):
    assert e_pema.shape == e_full.shape == e_init.shape
    assert (e_full - e_pema).abs().max().item() <= TOL and logits_diff <= TOL
    outside = torch.ones(e_init.shape[0], dtype=torch.bool)
    outside[vmap.selected] = False
    assert torch.equal(e_pema[outside], e_init[outside])  # bit-identical to pre-training
    assert torch.equal(e_full[outside], e_init[outside])  # (and the baseline never touched them either)
    assert metrics["pema/merge_max_abs_diff"] <= TOL
    assert metrics["params/total"] > metrics["pema/params_total_partial"]


def test_equivalence_tiny_bert(tmp_path):
    check_equal(*both_arms(tmp_path, "debug=smoke", "train.weight_decay=0", "train.max_steps=8"))


def test_weight_decay_breaks_equivalence_only_outside_v_prime(tmp_path):
    e_init, e_full, e_pema, vmap, logits_diff, _ = both_arms(tmp_path, "debug=smoke", "train.weight_decay=0.1",
                                                          "train.max_steps=8")
    inside = torch.zeros(e_init.shape[0], dtype=torch.bool)
    inside[vmap.selected] = True
    assert (e_full[inside] - e_pema[inside]).abs().max().item() <= TOL  # decoupled decay: same on trained rows
    assert logits_diff <= TOL  # the task's data only reads rows of V'
    assert torch.equal(e_pema[~inside], e_init[~inside])
    decayed = (e_full[~inside] - e_init[~inside]).abs().max().item()
    assert decayed > 1e-6  # the baseline decayed the unused rows: merged E differs there


@pytest.mark.assets
@pytest.mark.slow
def test_equivalence_minilm_l6(tmp_path):
    check_equal(*both_arms(tmp_path, "model=minilm-l6", "task=rt-polarity", "data.limit_train=64", "data.limit_eval=32",
                           "train.weight_decay=0", "train.max_steps=4", "hardware.batch_size=16"))


def test_v_prime_counts_the_dev_split_the_model_reads_with_train():
    # dev is carved from train and chooses the checkpoint: an id only dev has must be in V', or dev cannot be read
    from pema.hook import read_splits, sub_vocabulary
    features = {"train": [[1, 2, 3]], "dev": [[1, 7]], "eval": [[2, 4]]}
    vmap, usage = sub_vocabulary(features, ["train", "eval"], rows=10)
    assert vmap.used == 5 and 7 in vmap.selected.tolist()
    assert read_splits(["train", "eval"], has_dev=False) == ["train", "eval"]
    assert read_splits(["eval"], has_dev=True) == ["eval"]  # dev goes with train, not on its own
    vmap, _ = sub_vocabulary({"train": [[1]], "eval": [[2]]}, ["train", "eval"], rows=10)
    assert vmap.used == 2
