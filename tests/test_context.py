"""What methods get from the runner: the shared activation store over an encoded split (the wandb stream is tested
for real in tests/test_run.py)."""
import torch

from experiments.config import compose
from experiments.context import RunContext
from experiments.recipe import prepare


def test_store_serves_layer_k_of_an_encoded_split_and_computes_only_what_is_missing(tmp_path):
    cfg = compose("debug=smoke", "task=wnut16")
    tok, model, splits = prepare(cfg)
    train = splits.train
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu", store_dir=tmp_path / "acts",
                     store_dtype="fp32")
    store = ctx.store()
    view = store.hidden_states(model.encoder, train, layers=[2], tokenizer_key="byte", max_length=64)
    assert store.stats.computed > 0 and len(view) == len(train)
    first = torch.tensor([train[0]["input_ids"]])
    with torch.no_grad():
        direct = model.encoder.eval()(input_ids=first, output_hidden_states=True).hidden_states[2][0]
    assert torch.allclose(view.layer(2)[0], direct, atol=1e-5)
    store.stats.reset()
    again = ctx.store().hidden_states(model.encoder, train, layers="all", tokenizer_key="byte", max_length=64)
    n_states = cfg.model.num_layers + 1
    assert again.layers == list(range(n_states))
    assert again.store.stats.misses == len(train) * (n_states - 1)  # layer 2 was already there
    assert torch.equal(again.layer(2)[0], view.layer(2)[0])


def test_store_takes_a_methods_own_dtype_and_root_and_names_a_bad_dtype(tmp_path):
    import pytest

    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu", store_dir=tmp_path / "acts")
    assert ctx.store().dtype == torch.float16 and ctx.store().root == tmp_path / "acts"  # store.dtype's default
    other = ctx.store("fp32", root=tmp_path / "bench")
    assert other.dtype == torch.float32 and other.root == tmp_path / "bench"
    with pytest.raises(ValueError, match="'bf16' is not one of fp16, fp32"):
        ctx.store("bf16")


class FakeRun:
    def __init__(self):
        self.logged = []

    def log(self, metrics, step=None):
        self.logged.append((step, metrics))


def test_log_metrics_keeps_wandb_steps_increasing_across_training_phases(tmp_path):
    """A method that trains twice in one run (PEMA's arms) restarts at step 1; wandb drops a step that goes back, so
    the second phase continues after the first. Train and eval points of one step share it."""
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu")
    assert ctx.sink is None
    ctx.log_metrics({"train/loss": 1.0}, 1)  # no logger: nothing to do, no error
    ctx.wandb_run = FakeRun()
    assert ctx.sink == ctx.log_metrics
    for step in (1, 2, 3, 3, 1, 2, 2):
        ctx.log_metrics({"x": step}, step)
    assert [s for s, _ in ctx.wandb_run.logged] == [1, 2, 3, 3, 4, 5, 5]
    ctx.log_metrics({"summary": 1})
    assert ctx.wandb_run.logged[-1] == (None, {"summary": 1})
