"""hydra/launcher=slurm asks for what the job runs on: a GPU (and a GPU job's CPUs and memory) only for a CUDA
hardware config, so CPU-tier sweeps do not hold GPUs they never use."""
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from experiments.config import CONF
from experiments.registry import on_cuda

KEYS = ("gpus_per_node", "cpus_per_task", "mem_gb")


def launcher(*overrides: str):
    """The composed launcher node, and the SLURM launcher Hydra would build from it."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True)
            return cfg.hydra.launcher, instantiate(cfg.hydra.launcher)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("overrides, want", [
    (["hardware=cpu"], (0, 4, 24)),
    (["hardware=gpu"], (1, 8, 64)),
    (["hardware=gpu", "hardware.device=cpu"], (0, 4, 24)),  # the device decides, not the file's name
    (["experiment=finetune/default_cpu"], (0, 4, 24)),
    (["experiment=finetune/offline_gpu"], (1, 8, 64)),
])
def test_resources_follow_the_jobs_device(overrides, want):
    node, built = launcher(*overrides)
    assert tuple(node[k] for k in KEYS) == want
    assert tuple(built.params[k] for k in KEYS) == want  # what submitit receives


def test_an_explicit_request_still_wins():
    node, _ = launcher("hardware=cpu", "hydra.launcher.gpus_per_node=2")
    assert node.gpus_per_node == 2


def test_on_cuda():
    assert [on_cuda(d, 1, 0) for d in ("cuda", "cuda:1", "cpu", "auto")] == [1, 1, 0, 0]
