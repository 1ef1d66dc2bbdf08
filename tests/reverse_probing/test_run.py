"""method=reverse_probing through the suite's runner on tiny models and the fixtures: records carry what the report
reads, a second sweep run reads every source from the activation store, the trained-encoder path (CorefTarget) reads
the same features as the stored one, and bad configs are refused before any work."""
import ast
import statistics
import subprocess
import sys

import pytest
import torch

from experiments import REPO, models, registry
from experiments.config import ConfigError
from experiments.context import RunContext
from experiments.run import execute
from reverse_probing import features, sources
from reverse_probing.config import extra_tasks, sources_of
from reverse_probing.documents import words_of
from reverse_probing.qa import qa_probe
from experiments.config import compose


def new_process() -> None:
    """Forget what a sweep in one process memoises: the frozen sources, the documents, their states."""
    features.forget()
    models._FROZEN.clear()


def record(smoke_cfg, tmp_path, *overrides):
    cfg = smoke_cfg("experiment=reverse_probing/smoke", "on_error=record", *overrides)
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    return rec


@pytest.mark.slow  # several runs through the runner: make test runs it, test-unit does not
def test_a_probe_records_coref_scores_accuracy_and_the_majority(smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "method.sources=[tiny-bert]", "method.aggregate=attention",
                 "+method.extra_eval.wsc=wsc273")
    m = rec["metrics"]
    for key in ("eval/conll_f1", "eval/muc_f1", "eval/b3_f1", "eval/ceafe_f1", "eval/accuracy", "dev/conll_f1",
                "eval/majority_conll_f1", "eval/majority_accuracy", "wsc/accuracy", "params/aggregator",
                "time/epoch_s"):
        assert key in m, key
    assert 0 <= m["eval/accuracy"] <= 1 and m["eval/majority_accuracy"] == 0.5  # the fixture's answers are balanced
    assert m["eval/conll_f1"] == pytest.approx((m["eval/muc_f1"] + m["eval/b3_f1"] + m["eval/ceafe_f1"]) / 3)
    assert m["extract/layer"] == 4  # tiny-bert's last layer, read by variant=full
    alpha = rec["extra"]["alpha"]
    assert len(alpha) == m["train/epochs"] and all(a == pytest.approx([1.0]) for a in alpha)  # one source


@pytest.mark.slow  # several runs through the runner: make test runs it, test-unit does not
def test_every_variant_and_aggregation_runs_and_attention_logs_alpha_per_source(smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "method.sources=[tiny-bert,tiny-bert]", "method.variant=concat",
                 "method.concat_n=2", "method.aggregate=attention")
    assert all(len(a) == 2 and sum(a) == pytest.approx(1) for a in rec["extra"]["alpha"])
    for over in (["method.variant=trunc", "method.trunc=[1,2]"], ["method.variant=norm", "method.aggregate=sum"],
                 ["method.aggregate=attention_literal"]):
        record(smoke_cfg, tmp_path, "method.sources=[tiny-bert,tiny-bert]", *over)


def test_a_second_run_reads_every_source_from_the_store(tmp_path):
    cfg = compose("experiment=reverse_probing/smoke", "method.aggregate=mean", "method.variant=full")
    new_process()
    torch.manual_seed(0)  # tiny-bert is random: the runner seeds each run, so its weights (and keys) repeat
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu", store_dir=tmp_path / "s")
    first = registry.resolve("reverse_probing")(cfg, ctx)
    store = ctx.store()
    n = len(store)
    assert n > 0
    new_process()  # nothing memoised: everything from the store
    torch.manual_seed(0)
    ctx2 = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu", store_dir=tmp_path / "s")
    second = registry.resolve("reverse_probing")(cfg, ctx2)
    assert len(ctx2.store()) == n  # nothing recomputed
    assert second["eval/conll_f1"] == first["eval/conll_f1"]


def test_the_training_encoders_features_equal_the_stored_ones(tmp_path):
    """The CorefTarget trains through live_features; evaluated frozen, it must read exactly what the stored path
    reads for the same documents (segments, word pooling, kept words)."""
    cfg = compose("experiment=reverse_probing/smoke", "method.variant=full")
    new_process()
    ctx = RunContext(output_dir=tmp_path, device=torch.device("cpu"), device_name="cpu", store_dir=tmp_path / "s",
                     store_dtype="fp32")
    model = sources_of(cfg)[0]
    tok, enc, _ = features.load_source(model)
    rows = features.load_docs(cfg.task, cfg.data)["eval"]
    docs = features.prepared(cfg, rows, [tok])
    stored = [s[-1] for s in features.source_states(cfg, ctx, model, rows, docs)]
    with torch.no_grad():
        live = sources.live_features(cfg, tok, enc.eval(), rows, docs, torch.device("cpu"))(list(range(len(docs))))[0]
    for a, b in zip(stored, live):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # one source: the head's positions are its sub-tokens, each read as the encoder gives it ([CLS]/[SEP] left out)
    d, words = docs[0], features.safe_words(tok, words_of(rows[0])[0])
    assert d.word_of and len(stored[0]) == len(d.keep)
    a, b = d.segments[0]
    e = tok(words[a:b], is_split_into_words=True)
    real = [t for t, w in enumerate(e.word_ids()) if w is not None]
    with torch.no_grad():
        hidden = enc(input_ids=torch.tensor([e["input_ids"]])).last_hidden_state[0, real]
    rows0 = [i for i, p in enumerate(d.keep) if p < len(real)]
    torch.testing.assert_close(stored[0][rows0], hidden[[d.keep[i] for i in rows0]], atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # several runs through the runner: make test runs it, test-unit does not
def test_the_quoref_probe_runs_with_the_qa_head_and_records_its_baseline(smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "task=quoref", "method.aggregate=attention", "method.variant=trunc",
                 "method.trunc=[1,1]")
    assert {"eval/f1", "eval/em", "dev/f1", "eval/majority_f1"} <= set(rec["metrics"])
    assert rec["per_example"]["eval"]["f1"]


@pytest.mark.parametrize("overrides,match", [
    (["task=rt-polarity"], "trains a coreference head"),
    (["method.variant=trunc"], "one layer per source"),
    (["method.variant=trunc", "method.trunc=[7,1]"], "1 <= L <= 4"),
    (["method.variant=concat", "method.concat_n=2", "method.aggregate=mean"], "aggregate=attention only"),
    (["method.concat_n=2"], "applies to variant=concat only"),
    (["method.trunc=[1,1]"], "applies to variant=trunc only"),
    (["method.aggregate=max"], "is not one of"),
    (["method.sources=[]"], "method.sources is empty"),
    (["method.sources=[tiny-bert,nosuch]"], "names no conf/model/nosuch.yaml"),
    (["+method.extra_eval.wsc=quoref"], "extra evaluations are coref tasks"),
])
def test_bad_configs_are_refused_before_any_work(overrides, match, smoke_cfg, tmp_path, monkeypatch):
    started = lambda *a, **k: pytest.fail("work started before the config was checked")  # noqa: E731
    monkeypatch.setattr(features, "load_docs", started)
    cfg = smoke_cfg("experiment=reverse_probing/smoke", "on_error=record", *overrides)
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "failed" and match in rec["error"], rec.get("error")


def test_a_source_build_refuses_to_overwrite_its_base_model(smoke_cfg, tmp_path):
    cfg = smoke_cfg("experiment=reverse_probing/smoke", "method=reverse_probing_source", "task=wnut16",
                    "method.save_as=tiny-bert", "on_error=record")
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "failed" and "not the base model's own name" in rec["error"]


def test_a_source_build_saves_an_encoder_the_probes_load(smoke_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    cfg = smoke_cfg("experiment=reverse_probing/smoke", "method=reverse_probing_source", "task=wnut16",
                    "method.save_as=tiny-bert-ner")
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "ok", rec.get("error")
    saved = tmp_path / "cache" / "models" / "tiny-bert-ner"
    assert (saved / "MANIFEST.json").exists() and rec["extra"]["saved_to"] == str(saved)
    from experiments.assets import verify
    assert verify(saved) == []
    from transformers import AutoModel
    enc = AutoModel.from_pretrained(saved)
    _, base = models.load_encoder(compose("model=tiny-bert").model)
    assert enc.config.num_hidden_layers == base.config.num_hidden_layers


@pytest.mark.assets
def test_a_qa_target_refuses_sources_with_different_tokenizers(smoke_cfg, tmp_path):
    """minilm-l6-pii's trimmed vocabulary splits words differently: sub-token aggregation cannot join it."""
    cfg = smoke_cfg("experiment=reverse_probing/smoke", "on_error=record", "task=quoref",
                    "method.sources=[minilm-l6,minilm-l6-pii]")
    rec = execute(cfg, tmp_path / "out" / cfg.run_id)
    assert rec["status"] == "failed" and "same tokenizer" in rec["error"]


@pytest.mark.slow  # several runs through the runner: make test runs it, test-unit does not
def test_cosine_of_a_source_with_itself_is_one_and_with_another_below(smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "method=reverse_probing_cossim", "method.reference=tiny-bert",
                 "method.gold_mentions=false", "method.sources=[tiny-bert]")
    assert rec["metrics"]["cossim/tiny-bert"] == pytest.approx(1.0, abs=1e-3)  # fp16 store
    with pytest.raises(Exception, match="gold_mentions=false"):  # the method's default; debug=smoke sets false
        record(smoke_cfg, tmp_path, "method=reverse_probing_cossim", "method.reference=tiny-bert",
               "method.gold_mentions=true")


@pytest.mark.slow  # several runs through the runner: make test runs it, test-unit does not
def test_the_benchmark_times_both_arms_side_by_side(smoke_cfg, tmp_path):
    rec = record(smoke_cfg, tmp_path, "method=reverse_probing_bench", "method.repeats=2")
    m = rec["metrics"]
    assert m["bench/ratio_lo"] <= m["bench/ratio"] <= m["bench/ratio_hi"]
    times = rec["extra"]["times"]
    assert len(times["head_epoch"]) == len(times["encoder_forward"]) == 2
    ratios = [f / e for f, e in zip(times["encoder_forward"], times["head_epoch"])]  # paired by round
    assert m["bench/ratio"] == pytest.approx(statistics.median(ratios))
    assert m["bench/head_epoch_s"] == pytest.approx(statistics.median(times["head_epoch"]))


def test_a_coref_task_reads_coref_hoi_subtoken_jsonlines_as_word_documents(tmp_path, monkeypatch):
    """conf/task/conll2012.yaml points at coref-hoi's preprocessed files: the loader turns their sub-token lines into
    the word-level documents every probe reads (experiments.coref.read_jsonlines)."""
    from experiments import data
    from experiments.assets import write_manifest
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path))
    d = tmp_path / "data" / "conll2012"
    d.mkdir(parents=True)
    hoi = REPO / "tests" / "fixtures" / "coref" / "handmade.jsonlines"
    first = hoi.read_text().splitlines()[0] + "\n"  # the sub-token document
    for split in ("train", "dev", "eval"):
        (d / f"{split}.jsonl").write_text(first)
    write_manifest(d, {"asset": "data/conll2012"})
    cfg = compose("task=conll2012")
    ds = data.load_splits(cfg.task, cfg.data)
    doc = ds["train"][0]
    assert doc["sentences"] == [["John", "went", "to", "Washington", "."], ["He", "liked", "it", "there", "."]]
    assert doc["clusters"] == [[[0, 0], [5, 5]], [[3, 3], [8, 8]]]
    tok = features.load_source(sources_of(compose("experiment=reverse_probing/smoke"))[0])[0]
    docs = features.prepared(compose("experiment=reverse_probing/smoke", "method.gold_mentions=false"), [doc], [tok])
    assert docs[0].n_words == 10 and docs[0].gold == [((0, 0), (5, 5)), ((3, 3), (8, 8))]
    he = next(i for i, p in enumerate(docs[0].keep) if docs[0].word(p) == 5)  # one tokenizer: sub-token positions
    assert docs[0].speakers[0] != docs[0].speakers[he]  # a and b


@pytest.mark.assets
def test_an_extra_evaluation_set_needs_only_its_eval_split():
    """wsc273 ships eval alone; the task schema's default splits name train too."""
    cfg = compose("experiment=reverse_probing/signal_cpu")
    docs = features.load_docs(extra_tasks(cfg)["wsc"], cfg.data, ("eval",))
    assert list(docs) == ["eval"] and len(docs["eval"]) == 249


def test_the_head_reads_sub_tokens_only_where_every_source_shares_a_tokenizer(tmp_path):
    """The paper's sources all use bert-base-cased's tokenizer: spans, widths, head attention and k = 0.4 x sub-tokens,
    as coref-hoi; sources that split words differently (a trimmed vocabulary) share no sub-tokens and meet at the
    word."""
    from experiments.models import byte_tokenizer
    a, b, other = byte_tokenizer(), byte_tokenizer(), byte_tokenizer()
    other.add_tokens(["zzqx"])  # a different vocabulary: another fingerprint
    assert features.span_unit([a]) == features.span_unit([a, b]) == "subtoken"
    assert features.span_unit([a, other]) == "word"
    assert features.units_used([a, other]) == {"span_unit": "word", "prune_unit": "word"}
    assert features.units_used([a, b]) == {"span_unit": "subtoken", "prune_unit": "subtoken"}
    cfg = compose("experiment=reverse_probing/smoke", "method.gold_mentions=false")
    doc = {"doc_key": "nw/0", "sentences": [["Anna", "met", "Bob", "."], ["She", "waved", "."]],
           "clusters": [[[0, 0], [4, 4]]]}
    pieces = features.piece_counts(a, doc["sentences"][0] + doc["sentences"][1])
    same, mixed = features.prepared(cfg, [doc], [a, b])[0], features.prepared(cfg, [doc], [a, other])[0]
    assert same.units == sum(pieces) + 2 * len(same.segments) and mixed.units == 7
    assert len(same.keep) == len(same.word_of) == sum(pieces) and mixed.keep == list(range(7)) and not mixed.word_of


def test_the_quoref_probe_trains_its_aggregator_at_the_aggregator_lr():
    """[R] puts the aggregator in the encoder group (1e-5), as the coref target does; the QA head keeps train.lr."""
    from experiments.optim import adamw
    cfg = compose("experiment=reverse_probing/quoref_single", "method.aggregate=attention",
                  "method.sources=[minilm-l6,minilm-l6-ner]")
    probe = qa_probe(cfg, sources_of(cfg))
    opt = adamw(probe, cfg.train.lr, cfg.train.weight_decay)
    lr = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    agg, head = list(probe.aggregator.parameters()), list(probe.head.parameters())
    assert agg and head and cfg.method.aggregator_lr != cfg.train.lr
    assert {lr[id(p)] for p in agg} == {cfg.method.aggregator_lr}
    assert {lr[id(p)] for p in head} == {cfg.train.lr}


@pytest.mark.slow  # a run through the runner: make test runs it, test-unit does not
def test_predicted_mentions_train_and_score_over_sub_tokens(smoke_cfg, tmp_path):
    """One source (one tokenizer): coref-hoi's sub-token spans and pruning end to end; the scorer reads words."""
    rec = record(smoke_cfg, tmp_path, "method.sources=[tiny-bert]", "method.gold_mentions=false",
                 "method.max_span_width=6")
    assert rec["extra"]["span_unit"] == rec["extra"]["prune_unit"] == "subtoken"
    assert 0 <= rec["metrics"]["eval/conll_f1"] <= 1
    mixed = record(smoke_cfg, tmp_path, "method.sources=[tiny-bert,tiny-bert]", "method.gold_mentions=false")
    assert mixed["extra"]["span_unit"] == "subtoken"  # the same tokenizer twice is still one tokenizer


@pytest.mark.parametrize("overrides", [
    ["method.sources=[tiny-bert]"],
    ["task=quoref", "method.variant=trunc", "method.trunc=[1,1]"],
    ["method=reverse_probing_source", "task=wnut16", "method.save_as=tiny-bert-ner"],
], ids=["coref", "quoref", "source_build"])
def test_the_record_names_the_tokenizer_of_the_first_model_the_run_loads(overrides, smoke_cfg, tmp_path,
                                                                         monkeypatch):
    """No method sets it: the record takes the first tokenizer the run loaded (the first source's, or the base
    model's a build fine-tunes), as the probes recorded when they set it themselves."""
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path / "cache"))
    rec = record(smoke_cfg, tmp_path, *overrides)
    cfg = smoke_cfg("experiment=reverse_probing/smoke", *overrides)
    first = sources_of(cfg)[0] if cfg.method.name == "reverse_probing" else cfg.model
    assert rec["provenance"]["tokenizer"] == models.tokenizer_fingerprint(models.load_tokenizer(first))


@pytest.mark.slow
@pytest.mark.assets
def test_a_probe_records_its_first_sources_tokenizer_among_several(smoke_cfg, tmp_path):
    """minilm-l6-pii's trimmed vocabulary is another tokenizer than minilm-l6's: the record names the first."""
    rec = record(smoke_cfg, tmp_path, "task=winogrande-coref", "data.source=null", "data.limit_train=8",
                 "data.limit_eval=4", "method.sources=[minilm-l6-pii,minilm-l6]", "method.aggregate=attention",
                 "method.max_epochs=1")
    pii, plain = (models.tokenizer_fingerprint(models.load_tokenizer(compose(f"model={m}").model))
                  for m in ("minilm-l6-pii", "minilm-l6"))
    assert pii != plain and rec["provenance"]["tokenizer"] == pii


def test_a_source_is_the_suites_frozen_encoder_and_its_weights_are_hashed_once(monkeypatch):
    new_process()
    hashed = []
    monkeypatch.setattr(features, "model_fingerprint", lambda enc: hashed.append(enc) or "fp")
    model = sources_of(compose("experiment=reverse_probing/smoke"))[0]
    tok, enc, fp = features.load_source(model)
    assert features.load_source(model) == (tok, enc, "fp") and hashed == [enc]
    assert models.frozen_encoder(model) == (tok, enc) and not enc.training
    assert not any(p.requires_grad for p in enc.parameters())


def test_the_checks_are_torch_free_and_the_registry_runs_them():
    """The registry imports each package's config to validate a run; a probe's refusals must not load torch."""
    code = ("import sys; import reverse_probing.config; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    with pytest.raises(ConfigError, match="is not one of"):
        registry.check(compose("experiment=reverse_probing/smoke", "method.aggregate=max"))


def test_no_module_imports_the_entry_point():
    """reverse_probing/run.py is method=reverse_probing's entry point only: the package's steps live in the modules
    named for them, so no module of the package imports it (the registry names it)."""
    for path in (REPO / "reverse_probing").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            assert "reverse_probing.run" not in names and module != "reverse_probing.run" and not (
                module == "reverse_probing" and "run" in names), f"{path.name} imports reverse_probing.run"
