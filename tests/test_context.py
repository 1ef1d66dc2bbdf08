"""What methods get from the runner: the shared activation store over an encoded split, and the wandb stream."""
import sys
import types

import torch

from experiments.context import RunContext
from experiments.finetune import prepare
from experiments.run import execute
from tests.conftest import compose


def test_store_serves_layer_k_of_an_encoded_split_and_computes_only_what_is_missing(tmp_path):
    cfg = compose("debug=smoke", "task=wnut16")
    tok, model, raw, train, evals = prepare(cfg)
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


def test_wandb_logger_streams_eval_metrics(tmp_path, monkeypatch):
    logged, inits = [], []

    class Run:
        def log(self, metrics, step=None):
            logged.append((step, metrics))

        def finish(self):
            logged.append("finished")

    fake = types.SimpleNamespace(init=lambda **kw: inits.append(kw) or Run())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    rec = execute(compose("debug=smoke", "logger=wandb", f"results_dir={tmp_path}"), tmp_path / "run")
    assert rec["status"] == "ok" and inits[0]["mode"] == "offline" and inits[0]["name"] == rec["run_id"]
    assert [s for s, m in logged[:-1]] == [3, 6] and "eval/accuracy" in logged[0][1] and logged[-1] == "finished"
