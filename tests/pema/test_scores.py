"""method=pema_scores on tiny-bert + fixtures: both arms in one process, and the largest |Δ logit| and |Δ weight|
between them. Known answers: exactly 0 on CPU with weight decay 0 (CPU kernels are deterministic); with decoupled
weight decay the baseline decays the embedding rows outside V' and PEMA does not, so the weights (and the logits of
any text that uses those tokens) differ, while the task's own data reads only rows of V'."""
from pathlib import Path

import pytest
import torch

from experiments.context import RunContext
from experiments.models import byte_tokenizer, tokenizer_fingerprint
from experiments.run import execute
from pema import scores
from experiments.config import compose

BATCH_OF_EVERY_ID = torch.arange(260).reshape(10, 26)  # every id of the byte tokenizer, most outside V'


def arms(tmp_path, *overrides) -> scores.Arms:
    cfg = compose("debug=smoke", *overrides)
    torch.manual_seed(cfg.seed)  # as the runner seeds before a method
    return scores.train_arms(cfg, RunContext(Path(tmp_path), torch.device("cpu"), "cpu"))


def logits(model, ids):
    with torch.no_grad():
        return model.eval()(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


@pytest.mark.parametrize("task", ["rt-polarity", "wnut16", "squad-dev"])
def test_zero_weight_decay_gives_identical_arms(smoke_cfg, tmp_path, task):
    rec = execute(smoke_cfg("method=pema_scores", f"task={task}", "train.weight_decay=0"), tmp_path / "r")
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    assert m["pema/max_abs_dlogit"] == 0.0 and m["pema/max_abs_dweight"] == 0.0  # CPU kernels: bit-identical
    evals = [k for k in m if k.startswith("eval/")]
    assert evals and all(m[k] == m[k.replace("eval/", "eval_full/", 1)] for k in evals)
    assert m["pema/vocab_used"] < m["pema/vocab_rows"]  # PEMA did remove rows
    assert rec["per_example"]["eval"] == rec["per_example"]["eval_full"]
    assert m["time/train_s"] > 0 and m["time/full_train_s"] > 0
    assert rec["provenance"]["tokenizer"] == tokenizer_fingerprint(byte_tokenizer())  # the one tokenizer it loaded


def test_weight_decay_moves_only_the_unused_rows_of_the_baseline(tmp_path):
    a = arms(tmp_path, "train.weight_decay=0.5", "train.max_steps=8", "train.lr=1e-2")
    sd_full, sd_pema = a.full.state_dict(), a.pema.state_dict()
    key = scores.embedding_key(a.pema)
    dweight = scores.max_abs_dweight(sd_full, sd_pema)
    assert dweight > 1e-4  # ~1e-3 (8 steps, lr 1e-2, decay 0.5, rows ~0.02): 1e5 x float32 rounding there
    assert scores.max_abs_dweight(sd_full, sd_pema, only=key) == dweight  # the embedding is where they differ
    rest = {k: v for k, v in sd_full.items() if k != key}
    assert scores.max_abs_dweight(rest, {k: sd_pema[k] for k in rest}) == 0.0
    assert scores.max_abs_dlogit(a.full, a.pema, a.evals, a.pad_id, 16, "cpu") == 0.0  # the task's data: rows of V'
    assert (logits(a.full, BATCH_OF_EVERY_ID) - logits(a.pema, BATCH_OF_EVERY_ID)).abs().max() > 1e-4


def test_without_weight_decay_even_unused_tokens_score_alike(tmp_path):
    a = arms(tmp_path, "train.weight_decay=0", "train.max_steps=8")
    assert torch.equal(logits(a.full, BATCH_OF_EVERY_ID), logits(a.pema, BATCH_OF_EVERY_ID))


def test_the_comparison_sees_different_dropout_masks(tmp_path, monkeypatch):
    """The maxima detect a real difference: without restoring the RNG state, the arms' dropout masks differ."""
    monkeypatch.setattr(scores, "_set_rng_state", lambda state: None)
    a = arms(tmp_path, "train.weight_decay=0", "train.max_steps=4")  # tiny-bert: dropout 0.1
    assert scores.max_abs_dlogit(a.full, a.pema, a.evals, a.pad_id, 16, "cpu") > 1e-4
    assert scores.max_abs_dweight(a.full.state_dict(), a.pema.state_dict()) > 1e-4


def test_noise_floor_of_a_deterministic_cpu_is_zero(smoke_cfg, tmp_path):
    rec = execute(smoke_cfg("method=pema_scores", "method.noise_floor=true", "train.weight_decay=0"), tmp_path / "r")
    m = rec["metrics"]
    assert m["pema/floor_max_abs_dlogit"] == 0.0 and m["pema/floor_max_abs_dweight"] == 0.0


def test_state_dicts_that_do_not_match_are_refused():
    with pytest.raises(ValueError, match="differ in keys"):
        scores.max_abs_dweight({"a": torch.zeros(2)}, {"b": torch.zeros(2)})
    with pytest.raises(ValueError, match="not merged back"):
        scores.max_abs_dweight({"w": torch.zeros(4, 2)}, {"w": torch.zeros(3, 2)})


def test_deterministic_switches_torch_for_the_run_only():
    before = torch.are_deterministic_algorithms_enabled()
    with scores.deterministic(True):
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before
    with scores.deterministic(False):
        assert torch.are_deterministic_algorithms_enabled() == before
