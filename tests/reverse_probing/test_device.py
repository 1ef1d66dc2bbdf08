"""The probe trains and scores on the run's device (ctx.device): its parameters and every input of its forward. On a
CPU machine the `meta` device stands in for an accelerator: anything left behind on the host shows up as `cpu`."""
import pytest
import torch

from experiments.context import RunContext
from reverse_probing import run as R
from reverse_probing.documents import prepare
from reverse_probing.model import ReverseProbe
from tests.conftest import compose

DOC = {"doc_key": "wg/x/0", "sentences": [["The", "cat", "saw", "the", "dog", "because", "it", "was", "up", "."]],
       "clusters": [[[1, 1], [6, 6]]], "mentions": [[1, 1], [4, 4], [6, 6]]}


class Seen(Exception):
    pass


@pytest.mark.parametrize("phase", ["train", "score"])
def test_the_probe_and_its_inputs_are_on_the_runs_device(phase, tmp_path, monkeypatch):
    cfg = compose("experiment=reverse_probing/smoke", "method.sources=[tiny-bert]", "method.aggregate=attention")
    doc = prepare(DOC, [1] * 10, 64, gold_mentions=True, max_width=4)
    feats = [[torch.randn(len(doc.keep), 32)]]  # host tensors, as the activation store returns them
    probe = R.build(cfg, [32], 32)
    seen = {}

    def forward(self, sources, **batch):
        seen["params"] = {p.device.type for p in self.parameters()}
        seen["inputs"] = {x.device.type for x in [*sources, *batch.values()] if isinstance(x, torch.Tensor)}
        raise Seen

    monkeypatch.setattr(ReverseProbe, "forward", forward)
    ctx = RunContext(output_dir=tmp_path, device=torch.device("meta"), device_name="meta", store_dir=tmp_path / "s")
    with pytest.raises(Seen):
        if phase == "train":
            R.train(cfg, ctx, probe, {"train": ([doc], feats), "dev": ([doc], feats), "eval": ([doc], feats)})
        else:
            R.score(probe.to(ctx.device), [doc], feats, gold_mentions=True)
    assert seen["params"] == {"meta"} and seen["inputs"] == {"meta"}, seen
