"""No stale result: a finished run is reused only while the assets it read are the ones in the cache now, and a
skipped run still says what it found."""
import dataclasses
import json
import logging
import shutil

from huggingface_hub import constants

from experiments import assets, registry
from experiments.config import compose
from experiments.models import weights_path
from experiments.provenance import recording
from experiments.run import execute


def counting(monkeypatch) -> list[str]:
    """Every method resolved from now on (that is, every run that computes), run for real."""
    calls, real = [], registry.resolve
    monkeypatch.setattr(registry, "resolve", lambda name: calls.append(name) or real(name))
    return calls


def test_a_rebuilt_asset_reruns_and_an_unchanged_one_is_skipped_with_its_metrics(smoke_cfg, tiny_assets, tmp_path,
                                                                                   monkeypatch, caplog):
    offline = tiny_assets.model(seed=0)
    first = execute(smoke_cfg(*offline), tmp_path / "run")
    assert first["status"] == "ok", first.get("error")
    sha = first["provenance"]["assets"]["models/tiny-offline"]
    calls = counting(monkeypatch)
    with caplog.at_level(logging.INFO):
        assert execute(smoke_cfg(*offline), tmp_path / "run") == first
    assert calls == []
    (skip,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skip ")]
    assert f"eval/accuracy={first['metrics']['eval/accuracy']:.4g}" in skip
    assert f"record: {(tmp_path / 'run' / 'result.json').resolve()}" in skip
    tiny_assets.model(seed=1)  # rebuilt: other weights, a new manifest
    caplog.clear()
    again = execute(smoke_cfg(*offline), tmp_path / "run")
    assert calls == ["finetune"] and again["status"] == "ok"
    assert again["provenance"]["assets"]["models/tiny-offline"] != sha
    assert f"models/tiny-offline changed since the record was written (manifest sha {sha[:12]} ->" in caplog.text
    # another STRATA_CACHE without the asset: the record is not reused either (the rerun names the missing asset)
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "other-cache"))
    caplog.clear()
    failed = execute(smoke_cfg(*offline, "on_error=record"), tmp_path / "run")
    assert calls == ["finetune"] * 2 and failed["status"] == "failed" and "make assets" in failed["error"]
    assert f"models/tiny-offline is not in {tmp_path / 'other-cache'} any more" in caplog.text


def test_a_random_model_run_reads_no_asset_and_stays_skipped(smoke_cfg, tmp_path, monkeypatch):
    first = execute(smoke_cfg(), tmp_path / "run")
    assert first["provenance"]["assets"] == {}
    calls = counting(monkeypatch)
    assert execute(smoke_cfg(), tmp_path / "run") == first and calls == []


def test_a_hub_model_is_named_by_its_cached_revision(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    repo = tmp_path / "hf" / "models--org--tiny"

    def download(revision: str) -> None:
        (repo / "snapshots" / revision).mkdir(parents=True)
        (repo / "snapshots" / revision / "config.json").write_text("{}")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
    download("a" * 40)
    with recording() as reads:  # as the runner records each run
        weights_path(compose("model=bert-base-uncased", "model.hf_id=org/tiny").model)
    recorded = reads.assets
    assert recorded == {"hub/org/tiny": "a" * 40} and assets.changed(recorded) is None
    download("b" * 40)  # a newer revision fetched since
    assert assets.changed(recorded) == ("hub/org/tiny changed since the record was written (revision aaaaaaaaaaaa -> "
                                        "bbbbbbbbbbbb)")
    assert assets.changed({"hub/org/tiny": None}) is not None  # unknown when recorded: never trusted
    shutil.rmtree(repo)
    assert assets.changed(recorded) == "hub/org/tiny is not in the Hugging Face cache any more"


def test_a_pinned_hub_model_is_found_and_named_at_its_pin(tmp_path, monkeypatch):
    """A model pinned to a commit (model.revision) and cached only at that commit loads offline, and the record names
    the pin, not main: a newer main fetched later changes nothing the run read."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    repo, pin = tmp_path / "hf" / "models--org--tiny", "c" * 40
    (repo / "snapshots" / pin).mkdir(parents=True)
    (repo / "snapshots" / pin / "config.json").write_text("{}")  # no refs/main: only the pin was ever fetched
    with recording() as reads:
        weights_path(compose("model=bert-base-uncased", "model.hf_id=org/tiny", f"model.revision={pin}").model)
    recorded = reads.assets
    assert recorded == {f"hub/org/tiny@{pin}": pin} and assets.changed(recorded) is None
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("d" * 40)  # main moves on
    assert assets.changed(recorded) is None
    shutil.rmtree(repo / "snapshots" / pin)
    assert assets.changed(recorded) == f"hub/org/tiny@{pin} is not in the Hugging Face cache any more"


def test_a_record_that_names_no_assets_is_redone(smoke_cfg, tmp_path, monkeypatch):
    execute(smoke_cfg(), tmp_path / "run")
    path = tmp_path / "run" / "result.json"
    legacy = json.loads(path.read_text())
    del legacy["provenance"]["assets"]  # as a schema-1 record, written before assets were recorded
    path.write_text(json.dumps(legacy))
    calls = counting(monkeypatch)
    execute(smoke_cfg(), tmp_path / "run")
    assert calls == ["finetune"]



def test_a_record_of_an_older_method_version_is_redone(smoke_cfg, tmp_path, monkeypatch):
    execute(smoke_cfg(), tmp_path / "run")
    calls = counting(monkeypatch)
    execute(smoke_cfg(), tmp_path / "run")
    assert calls == []  # same version: skipped
    monkeypatch.setitem(registry.METHODS, "finetune",
                        dataclasses.replace(registry.METHODS["finetune"], version=registry.version_of("finetune") + 1))
    execute(smoke_cfg(), tmp_path / "run")
    assert calls == ["finetune"]
