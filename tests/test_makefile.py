"""The Makefile: `make setup` reinstalls only when pyproject.toml's content changes (a fresh clone's files all have
new mtimes: a rule on mtimes would reinstall into an existing venv every time), and `make help` lists every target."""
import hashlib
import os
import subprocess

import pytest

from experiments import REPO


@pytest.fixture
def fake_venv(tmp_path):
    """A venv whose python only logs how it was called."""
    (tmp_path / "bin").mkdir()
    py = tmp_path / "bin" / "python"
    py.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\n")
    py.chmod(0o755)
    return tmp_path


def make(*args):
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_setup_installs_only_when_pyproject_content_changes(fake_venv):
    stamp = fake_venv / ".strata-installed"
    stamp.write_text(hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest() + "\n")
    os.utime(stamp, (0, 0))  # older than pyproject.toml, as after a fresh clone
    assert make("setup", f"VENV={fake_venv}").returncode == 0
    assert not (fake_venv / "calls").exists()  # nothing reinstalled
    stamp.write_text("another pyproject\n")
    make("setup", f"VENV={fake_venv}")
    assert "pip install -q -e .[assets,dev,wandb,slurm]" in (fake_venv / "calls").read_text()


def test_help_lists_every_target_with_real_values():
    out = make("help", "STRATA_CACHE=/some/cache").stdout
    assert "/some/cache" in out and "$$" not in out
    for target in ("setup", "assets", "test", "test-unit", "reproduce", "tables", "smoke", "recycling",
                   "recycling-cpu", "pema-cpu", "intrinsic_dim-cpu", "finetune-cpu"):
        assert f"\n  {target} " in out, target
    assert "table1_cpu" in out  # the experiments each CPU tier runs


def test_tiers_go_through_scripts_tier_with_the_hardware(fake_venv):
    out = make("-n", "pema-cpu", "recycling", "HARDWARE=gpu", f"VENV={fake_venv}").stdout
    assert "-m scripts.tier pema --hardware cpu" in out and "-m scripts.tier recycling --hardware gpu" in out


def test_list_says_what_publishes_and_smoke_ends_with_one_line(fake_venv):
    out = make("list").stdout.splitlines()
    smoke = [line for line in out if "/smoke" in line.split()[0]]
    assert len(smoke) >= 8 and all("never publishes" in line and "results/" not in line for line in smoke)
    assert any(line.startswith("conf/experiment/recycling/table1_cpu.yaml") and "make recycling-cpu publishes" in line
               for line in out)
    assert "-m scripts.tier --smoke finetune" in make("-n", "smoke", f"VENV={fake_venv}").stdout
