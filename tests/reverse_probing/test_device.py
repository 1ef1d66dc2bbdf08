"""The probe trains and scores on the run's device (ctx.device): its parameters and every input of its forward. On a
CPU machine the `meta` device stands in for an accelerator: anything left behind on the host shows up as `cpu`."""
import pytest
import torch

from experiments.context import RunContext
from experiments import registry
from reverse_probing import sources, training
from reverse_probing.documents import prepare
from reverse_probing.model import ReverseProbe
from experiments.config import compose

DOC = {"doc_key": "wg/x/0", "sentences": [["The", "cat", "saw", "the", "dog", "because", "it", "was", "up", "."]],
       "clusters": [[[1, 1], [6, 6]]], "mentions": [[1, 1], [4, 4], [6, 6]]}


class Seen(Exception):
    pass


@pytest.mark.parametrize("phase", ["train", "score"])
def test_the_probe_and_its_inputs_are_on_the_runs_device(phase, tmp_path, monkeypatch):
    cfg = compose("experiment=reverse_probing/smoke", "method.sources=[tiny-bert]", "method.aggregate=attention")
    doc = prepare(DOC, [1] * 10, 64, gold_mentions=True, max_width=4)
    feats = [[torch.randn(len(doc.keep), 32)]]  # host tensors, as the activation store returns them
    probe = training.build(cfg, [32], 32)
    seen = {}

    def forward(self, sources, **batch):
        seen["params"] = {p.device.type for p in self.parameters()}
        seen["inputs"] = {x.device.type for x in [*sources, *batch.values()] if isinstance(x, torch.Tensor)}
        raise Seen

    monkeypatch.setattr(ReverseProbe, "forward", forward)
    ctx = RunContext(output_dir=tmp_path, device=torch.device("meta"), device_name="meta", store_dir=tmp_path / "s")
    with pytest.raises(Seen):
        if phase == "train":
            training.train(cfg, ctx, probe, {"train": ([doc], feats), "dev": ([doc], feats), "eval": ([doc], feats)})
        else:
            training.score(probe.to(ctx.device), [doc], feats, gold_mentions=True)
    assert seen["params"] == {"meta"} and seen["inputs"] == {"meta"}, seen


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_probe_and_a_coref_target_build_run_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    cuda = torch.device("cuda")
    cfg = compose("debug=smoke", "experiment=reverse_probing/smoke", "method.sources=[tiny-bert]",
                  "method.aggregate=attention")
    probe = registry.resolve("reverse_probing")
    out = probe(cfg, RunContext(output_dir=tmp_path, device=cuda, device_name="cuda", store_dir=tmp_path / "s"))
    assert 0 <= out["eval/conll_f1"] <= 100
    build = compose("debug=smoke", "experiment=reverse_probing/build_coref_cpu", "model=tiny-bert",
                    "method.save_as=tiny-bert-coref", "method.ffnn_size=16", "method.max_epochs=1")
    ctx = RunContext(output_dir=tmp_path, device=cuda, device_name="cuda", store_dir=tmp_path / "s2")
    assert "dev/conll_f1" in sources.run(build, ctx) and (tmp_path / "cache" / "models" / "tiny-bert-coref").is_dir()
