"""A run says at its start what it inherited (the per-task budget file and the values that set its scale), so a
single run's numbers can be told from a tier's."""
import logging

from experiments.config import compose
from experiments.run import execute, settings_line


def test_a_single_run_names_its_budget_file_and_the_values_it_sets():
    line = settings_line(compose("method=finetune", "task=rt-polarity"))
    assert line.startswith("budget conf/budget/cpu_rt-polarity.yaml, then the experiment and overrides: ")
    for value in ("train.lr=0.0002", "train.epochs=4.0", "data.limit_train=1000", "data.limit_eval=None",
                  "task.dev_from_train=0.03", "hardware.batch_size=16"):
        assert value in line.split(), value
    assert "train.lr=0.0001" in settings_line(compose("task=rt-polarity", "train.lr=1e-4")).split()
    assert settings_line(compose("task=sst2")).startswith("no budget, ")  # a hub task has no CPU budget file
    gpu = settings_line(compose("task=rt-polarity", "hardware=gpu"))  # the dev split alone, no CPU caps
    assert gpu.startswith("budget conf/budget/gpu_rt-polarity.yaml, ") and "data.limit_train=None" in gpu.split()


def test_a_run_logs_its_settings_beside_its_start_line(smoke_cfg, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="strata"):
        execute(smoke_cfg("task=wnut16"), tmp_path / "run")
    said = [r.getMessage() for r in caplog.records]
    start = next(i for i, m in enumerate(said) if m.startswith("run wnut16--tiny-bert--finetune-full--seed0 "))
    assert said[start + 1].startswith("settings: budget conf/budget/cpu_wnut16.yaml, then the experiment")
    assert "train.lr=0.001" in said[start + 1].split() and "train.max_steps=6" in said[start + 1].split()
