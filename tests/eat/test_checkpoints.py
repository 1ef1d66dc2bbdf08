"""eat/checkpoints.py: a checkpoint is written whole or not at all (train.json last, the weights through the suite's
atomic writer), and its name keeps the 20-digit key every cached checkpoint already carries."""
import hashlib
import json

import pytest
import torch

from eat import checkpoints
from eat.model import EatModel
from experiments import files
from experiments.context import RunContext
from experiments.models import load_tokenizer
from tests.helpers.eat_inputs import bert


def _model(seed: int = 0) -> EatModel:
    torch.manual_seed(seed)
    return EatModel(bert(seed=seed), 2, exit_layer=4)


def test_a_saved_checkpoint_loads_into_a_fresh_model(tmp_path):
    saved, fresh = _model(0), _model(1)
    checkpoints.save(tmp_path / "ck", saved, {"steps": 3})
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["train.json", "weights.safetensors"]
    assert checkpoints.load(tmp_path / "ck", fresh) == {"steps": 3}
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), fresh.state_dict().values()))


def test_a_save_that_fails_leaves_no_checkpoint_to_read(tmp_path, monkeypatch):
    checkpoints.save(tmp_path / "ck", _model(0), {"steps": 3})

    def torn(state, path):  # the process dies halfway through the weights
        open(path, "wb").write(b"half")
        raise OSError("disk full")
    monkeypatch.setattr("safetensors.torch.save_file", torn)
    with pytest.raises(OSError, match="disk full"):
        checkpoints.save(tmp_path / "ck", _model(1), {"steps": 4})
    # the replaced checkpoint has no train.json, so it is retrained; the torn bytes never took the weights' name
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["weights.safetensors"]
    assert checkpoints.load(tmp_path / "ck", _model(2)) is None


def test_the_key_is_20_hex_digits_of_the_canonical_json_of_what_trains(smoke_cfg, tmp_path, monkeypatch):
    # the name cached checkpoints already carry: a new key formula would orphan every one of them
    seen = []
    key = files.config_key
    monkeypatch.setattr(files, "config_key", lambda what, chars=16: seen.append(what) or key(what, chars))
    cfg = smoke_cfg("method=eat", f"method.checkpoint_dir={tmp_path}")
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu")
    path = checkpoints.checkpoint_path(cfg, ctx, _model(0), load_tokenizer(cfg.model))
    (what,) = seen
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:20]
    assert path == tmp_path / f"eat-tiny-bert-rt-polarity-{digest}"
    assert sorted(what) == ["batch_size", "data", "data_settings", "device", "method", "model", "precision", "seed",
                            "task", "tokenizer", "train", "version", "weights"]


@pytest.mark.parametrize("override", ["data.limit_train=16", "data.max_length=32", "task.dev_from_train=0.5"])
def test_a_run_on_other_data_never_reads_anothers_checkpoint(smoke_cfg, tmp_path, override):
    """Fewer training rows, a shorter encoding or another dev carve train other weights: another entry."""
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu")

    def path(*extra):
        cfg = smoke_cfg("method=eat", f"method.checkpoint_dir={tmp_path}", *extra)
        return checkpoints.checkpoint_path(cfg, ctx, _model(0), load_tokenizer(cfg.model))
    assert path() != path(override) and path() == path()
