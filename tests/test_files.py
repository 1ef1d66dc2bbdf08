"""experiments/files.py: a file is replaced whole or not at all; a cache key names exactly its inputs."""
import json
import os

import pytest

from experiments import files


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a" / "record.json"
    files.write_json(path, {"x": 1})
    with pytest.raises(RuntimeError):
        with files.replacing(path) as tmp:
            tmp.write_text('{"x": 2, "half')  # killed mid-write
            raise RuntimeError("killed")
    assert json.loads(path.read_text()) == {"x": 1}
    assert os.listdir(path.parent) == ["record.json"]


def test_write_json_matches_json_dump_with_indent_1(tmp_path):
    obj = {"b": [1, 2.5], "a": {"c": None}, "p": tmp_path}  # unsorted keys kept; a Path written as str
    files.write_json(tmp_path / "r.json", obj)
    assert (tmp_path / "r.json").read_text() == json.dumps(obj, indent=1, default=str)


def test_config_key_is_order_free_and_sensitive_to_every_value():
    a = files.config_key({"lr": 1e-3, "model": {"name": "bert", "layers": 12}})
    assert a == files.config_key({"model": {"layers": 12, "name": "bert"}, "lr": 0.001}) and len(a) == 16
    assert a != files.config_key({"lr": 1e-3, "model": {"name": "bert", "layers": 11}})
    assert len(files.config_key({}, chars=24)) == 24


def test_cache_root_is_the_override_or_the_asset_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    assert files.cache_root("eat-checkpoints") == tmp_path / "cache" / "eat-checkpoints"
    assert files.cache_root("eat-checkpoints", tmp_path / "mine") == tmp_path / "mine"
