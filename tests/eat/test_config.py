"""eat/config.py: the refusals of method=eat and method=eat_bench, raised before any work as ConfigError (naming the
key, the value and the fix), and importable without torch (the registry imports every package's config)."""
import subprocess
import sys

import pytest

from eat import config
from experiments import REPO
from experiments.config import ConfigError


@pytest.mark.parametrize("override,match", [
    ("task=wnut16", "cls/pair task"),
    ("method.variant=sparse", "dense, eat, paper_code"),
    ("method.anneal=cosine", "method.anneal='cosine'"),
    ("method.taus=[0.0]", "thresholds in"),
    ("method.extension_taus=[0.9]", "not already in method.taus"),
    ("method.exit_layer=4", "below the last"),
    ("method.prune_rule=top", "method.prune_rule='top' is not one of paper, repo"),
    ("method.scorer=entropy", "method.scorer='entropy' is not one of l2, attention"),
    ("method.prune_ratio=1.0", r"method.prune_ratio=1.0 must be in \[0, 1\)"),
    ("method.window=0", "method.window=0 must be >= 1"),
    ("method.patience_layer=3", "method.patience_layer=3 must be in 1..2"),
])
def test_a_training_arm_refuses(override, match, smoke_cfg):
    cfg = smoke_cfg("method=eat", "method.patience=true", override)
    with pytest.raises(ConfigError, match=match):
        config.check(cfg)


def test_the_dense_arm_reads_no_eat_setting(smoke_cfg):
    # dense runs with pruning, window and exit off: what those keys say cannot stop it
    config.check(smoke_cfg("method=eat", "method.variant=dense", "method.prune_rule=top", "method.exit_layer=9"))


@pytest.mark.parametrize("override,match", [
    ("method.variant=dense", "training arms dense | eat | paper_code are method=eat's"),
    ("method.timing_seeds=[]", "method.timing_seeds"),
    ("method.timing_seeds=[1,1]", "distinct seeds"),
    ("method.exit_layer=4", "below the last"),  # the EAT arm it would train
])
def test_a_benchmark_refuses(override, match, smoke_cfg):
    with pytest.raises(ConfigError, match=match):
        config.check(smoke_cfg("method=eat_bench", override))


def test_the_length_benchmark_refuses_a_long_task_the_arms_cannot_read(smoke_cfg):
    with pytest.raises(ConfigError, match="names no conf/task/imdb.yaml"):
        config.check(smoke_cfg("method=eat_bench", "method.variant=length", "method.long_task=imdb"))
    with pytest.raises(ConfigError, match="method.long_task=vitaminc has 3 labels"):
        config.check(smoke_cfg("method=eat_bench", "method.variant=length", "method.long_task=vitaminc"))


def test_scaling_trains_no_arm_so_its_settings_are_not_checked(smoke_cfg):
    config.check(smoke_cfg("method=eat_bench", "method.variant=scaling", "method.exit_layer=9"))


def test_the_config_imports_no_torch():
    code = "import sys, eat.config; assert 'torch' not in sys.modules, 'eat.config imported torch'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
