"""The paper-tier dry run (`make dryrun`): the first job of every code path a GPU tier launches
(tests/helpers/dryrun_jobs.py)
runs end to end on CPU: composed as the tier composes it (`hardware=gpu hardware.device=cpu`, the experiment's own
precision under autocast), on hub-shaped data (tests/dryrun/conftest.py) and hub-shaped tiny models
(tests/helpers/hub_models.py), shrunk to a step or two. Each must write an ok record with finite metrics; what the
hub layouts get wrong without an error is asserted too: a byte-level BPE tokenizer must mark each pre-split word of
an NER task as a new word, and a checkpoint loaded without an explicit dtype must come back fp32.

    make dryrun                                       # every path (STRATA_DRYRUN=all); prints the coverage table
    python -m pytest tests/dryrun                     # a sample reaching every experiment, family, tokenizer, task,
                                                      # method variant and precision (what `make test` runs)
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from _pytest.mark.expression import Expression
from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from experiments.assets import write_manifest
from experiments.run import execute
from tests.helpers import dryrun_jobs

pytestmark = [pytest.mark.dryrun, pytest.mark.slow]  # minutes in all: `make test-unit` leaves it out
RESULTS: dict[tuple, str] = {}  # key -> ok, failed: <error> or not covered: <why>; for the coverage table

# jobs that fail on a bug in the code they run, by a substring of their id: strict, so a fix turns them red until
# its line is removed
BUGS: dict[str, str] = {}
# failures that say the tiny fixture cannot stand in for the real thing (by a pattern of the recorded error): the
# job is reported as not covered (xfail), never as passed
LIMITS = {
    r"LabelTokenCollision": "the fixture tokenizer's few-hundred-piece vocabulary gives two verbalizers one first "
                            "piece (the real tokenizer is checked when the tier runs)",
    r"offline asset data/wiki-long": "reads the packaged wiki-long corpus, which has no hub-shaped fixture",
    r"texts hold only \d+ sequences of 512 tokens": "the 512-token cost workload needs more text than ~30 rows",
    r"task 'tacred' has no fixture": "TACRED is LDC data: no fixture to stand in for it",
    r"an asset a build_\* experiment writes: not built here": "reads a source model whose build job is not covered",
}
NAN_BY_DESIGN = {"eat/tau": "a dense arm has no exit threshold"}


def known(job: dryrun_jobs.Job) -> str | None:
    return next((reason for pattern, reason in BUGS.items() if pattern in job.id), None)


def limit(error: str) -> str | None:
    return next((reason for pattern, reason in LIMITS.items() if re.search(pattern, error)), None)


TINY = {"hidden_size": 32, "num_layers": 2}  # the dims of tests/helpers/hub_models.py's fixtures
ARCHITECTURE_ONLY = {"layer_fusion_params"}  # counts the named models' parameters from their configs: loads none


def fixture_fields(name: str, root: Path, cache: Path) -> dict | None:
    """The model fields that point conf/model/<name> at its hub-shaped tiny fixture: a hub model's through
    model.local_dir, a packaged (offline) one's as an asset directory in the session's own asset cache; None where
    there is nothing to copy (no hf_id, or an asset the tier's own build_* experiment writes, not built yet)."""
    from tests.helpers.hub_models import save_hub_model

    conf = dryrun_jobs.group_yaml("model", name)
    if conf.get("source") == "config":
        return {}
    if not conf.get("hf_id"):
        # an asset a build_* job of this session wrote, from a fixture: it has the fixture's dims
        return dict(TINY) if (cache / "models" / str(conf.get("offline")) / "MANIFEST.json").exists() else None
    if conf.get("source") == "hub":
        return {"local_dir": str(save_hub_model(conf["hf_id"], root)), **TINY}
    asset = cache / "models" / conf["offline"]
    if not (asset / "MANIFEST.json").exists():
        shutil.copytree(save_hub_model(conf["hf_id"], root), asset, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".complete"))
        write_manifest(asset)
    return dict(TINY)


def model_overrides(job: dryrun_jobs.Job, root: Path, cache: Path) -> list[str]:
    """The job's own model on its fixture (hub_model_overrides for a hub model)."""
    from tests.helpers.hub_models import hub_model_overrides

    conf = dryrun_jobs.group_yaml("model", job.model)
    if conf.get("source") == "hub" and conf.get("hf_id"):
        out = hub_model_overrides(job.model, root)
    else:
        fields = fixture_fields(job.model, root, cache)
        if fields is None:
            pytest.skip(f"model={job.model} has no hf_id and no asset yet: nothing to copy a layout from")
        out = [f"model={job.model}", *(f"model.{k}={v}" for k, v in fields.items())]
    return [o for o in out if not (o.startswith("model=") and any(x.startswith("model=") for x in job.overrides))]


def patch_named_models(method: str, root: Path, cache: Path, mp: pytest.MonkeyPatch) -> None:
    """Models a method loads by name (method.sources, baseline_model, models, reference) go through
    experiments.config.load_group: wherever the method's modules imported it, it returns the fixture's fields."""
    import sys

    from experiments import config, registry

    registry.resolve(method)  # imports the method's modules
    original = config.load_group

    def load_group(group, name, schema, key):
        node = original(group, name, schema, key)
        if group != "model":
            return node
        fields = fixture_fields(name, root, cache)
        if fields is None and node.source == "hub":  # what the tier's load would fail on, said plainly
            raise AssertionError(f"{key} names model={name}, source=hub with no hf_id: nothing to download")
        if fields is None:
            raise AssertionError(f"{key} names model={name}, an asset a build_* experiment writes: not built here")
        for k, v in (fields or {}).items():
            node[k] = v
        return node
    if method in ARCHITECTURE_ONLY:
        return
    for module in list(sys.modules.values()):
        if getattr(module, "load_group", None) is original:
            mp.setattr(module, "load_group", load_group)


def data_overrides(job: dryrun_jobs.Job) -> list[str]:
    """A packaged task reads its committed fixture; a hub task reads the hub-shaped one through load_dataset."""
    return [] if dryrun_jobs.group_yaml("task", job.task).get("source") == "hub" else ["data.source=fixture"]


def byte_bpe(tok) -> bool:
    """A byte-level BPE tokenizer with word-initial pieces (RoBERTa's, GPT-2's): a space is part of the next word."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or "ByteLevel" not in json.dumps(json.loads(backend.to_str()).get("pre_tokenizer")):
        return False
    return any(len(p) > 1 and p.startswith("Ġ") for p in tok.get_vocab())


class Spy:
    """What the run's own code asked of the libraries: pre-split encodings (with their tokenizer) are kept; a model
    loaded without an explicit dtype whose parameters are not fp32 fails the load."""

    def __init__(self, mp: pytest.MonkeyPatch):
        self.split_words: list[tuple] = []
        call, load = PreTrainedTokenizerBase.__call__, PreTrainedModel.from_pretrained.__func__
        spy = self

        def tokenize(tok, text=None, *args, **kwargs):
            enc = call(tok, text, *args, **kwargs)
            if kwargs.get("is_split_into_words") and len(spy.split_words) < 4:
                spy.split_words.append((tok, text, enc))
            return enc

        def from_pretrained(cls, *args, **kwargs):
            model = load(cls, *args, **kwargs)
            dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
            kept = {p.dtype for p in model.parameters() if p.is_floating_point()} - {torch.float32}
            if dtype in (None, "auto") and kept:  # fails the run here, before training on half-precision weights
                raise AssertionError(f"{cls.__name__}.from_pretrained without a dtype loaded {sorted(map(str, kept))} "
                                     "parameters: fp32 master weights expected (the checkpoint's own dtype was kept)")
            return model
        mp.setattr(PreTrainedTokenizerBase, "__call__", tokenize)
        mp.setattr(PreTrainedModel, "from_pretrained", classmethod(from_pretrained))

    def unmarked_words(self) -> list[str]:
        """Words after the first whose first piece lacks the byte-level BPE word-boundary marker (Ġ)."""
        bad = []
        for tok, text, enc in self.split_words:
            if not byte_bpe(tok):
                continue
            batch = text if text and isinstance(text[0], list) else [text]
            for i, words in enumerate(batch):
                pieces = tok.convert_ids_to_tokens(enc["input_ids"][i] if len(batch) > 1 or
                                                   isinstance(enc["input_ids"][0], list) else enc["input_ids"])
                seen = set()
                for piece, w in zip(pieces, enc.word_ids(i)):
                    if w is not None and w > 0 and w not in seen:
                        seen.add(w)
                        if not piece.startswith("Ġ"):
                            bad.append(f"{words[w]!r} -> {piece!r}")
        return bad


@pytest.fixture(scope="session")
def asset_cache(tmp_path_factory) -> Path:
    """The session's own asset cache (STRATA_CACHE during each job): packaged models as fixtures, built assets."""
    return tmp_path_factory.mktemp("strata-cache")


@pytest.fixture(scope="session", autouse=True)
def coverage_record(request):
    """Each process's outcomes, for the coverage table conftest.py prints once at the end of the session."""
    yield
    if not RESULTS:
        return
    jobs, per = walked()
    key = "|".join
    known_ = {key(j.key): r for j in jobs if (r := known(j))}
    doc = {"results": {key(k): v for k, v in RESULTS.items()}, "known": known_, "walked": len(jobs),
           "per": {e: {"jobs": d["jobs"], "keys": sorted(map(key, d["keys"]))} for e, d in per.items()}}
    out = dryrun_jobs.REPO / "outputs" / "dryrun" / os.environ.get("STRATA_DRYRUN_SESSION", "session")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{getattr(request.config, 'workerinput', {}).get('workerid', 'main')}.json").write_text(json.dumps(doc))


@functools.lru_cache(maxsize=1)
def walked() -> tuple[list[dryrun_jobs.Job], dict]:
    return dryrun_jobs.walk()


def selected(config) -> bool:
    """Whether -m can select these tests: the walk composes every experiment (~30 s), not worth it when they are
    deselected (`make test-unit`)."""
    expr = config.getoption("markexpr")
    return not expr or Expression.compile(expr).evaluate(lambda name: name in ("dryrun", "slow"))


def pytest_generate_tests(metafunc):
    if "job" in metafunc.fixturenames:
        jobs = walked()[0] if selected(metafunc.config) else []
        jobs = jobs if os.environ.get("STRATA_DRYRUN") == "all" else dryrun_jobs.sample(jobs)
        metafunc.parametrize("job", [pytest.param(j, id=j.id, marks=[pytest.mark.xfail(strict=True, reason=r)]
                                                  if (r := known(j)) else []) for j in jobs])


def test_first_job_of_each_path_runs_end_to_end(job, hub_data, model_root, asset_cache, tmp_path, monkeypatch,
                                                request):
    monkeypatch.setattr("experiments.run.git_dirty", lambda: False)
    monkeypatch.setenv("STRATA_CACHE", str(asset_cache))
    threads = torch.get_num_threads()  # the job sets its own (hardware.threads); the session's come back after it
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    RESULTS[job.key] = "not run"
    overrides = [*job.overrides, *dryrun_jobs.HARDWARE, *model_overrides(job, model_root, asset_cache),
                 *data_overrides(job), *dryrun_jobs.shrink(job), f"results_dir={tmp_path / 'results'}",
                 f"store.dir={tmp_path / 'store'}"]
    cfg = dryrun_jobs.fit_layers(dryrun_jobs.compose_job(job.exp, *overrides), TINY["num_layers"])
    patch_named_models(cfg.method.name, model_root, asset_cache, monkeypatch)
    spy = Spy(monkeypatch)
    rec = execute(cfg, tmp_path / "run", overrides=list(job.overrides))
    RESULTS[job.key] = "ran; a check after the run failed" if rec["status"] == "ok" else \
        f"failed: {rec.get('error', '')[:200]}"
    if rec["status"] != "ok" and (why := limit(rec.get("error", ""))):
        RESULTS[job.key] = f"not covered: {why}"
        pytest.xfail(f"not covered: {why} ({rec['error'][:160]})")
    assert rec["status"] == "ok", f"{job.id}: {rec.get('error')}\n{rec.get('traceback', '')[-3000:]}"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "ok"
    bad = {k: v for k, v in rec["metrics"].items() if not math.isfinite(v) and k not in NAN_BY_DESIGN}
    assert rec["metrics"] and not bad, f"{job.id}: no metrics or non-finite ones: {bad or rec['metrics']}"
    if cfg.task.type == "ner":
        unmarked = spy.unmarked_words()
        assert not unmarked, (f"{job.id}: pre-split words encoded without the word-boundary marker (add_prefix_space "
                              f"is off): {unmarked[:4]}")
    RESULTS[job.key] = "ok"
