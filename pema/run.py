"""PEMA's analysis methods (`run(cfg, ctx) -> metrics`, dispatched on cfg.method.name):

- `pema_vocab`: V' of the model's tokenizer on a task's splits (+ further hub configs or tasks): Fig. 2 (unique vs
  total tokens), Table 1 (zero-count tokens of the corpus), Tables 2-4 (embedding / model parameter reduction).
  Reads the tokenizer and the architecture config only, never the weights.
- `pema_sizes`: |V|, N_emb, N, N_emb/N from the architecture config (Tables 5/6).
- `pema_bench`: PEMA preparation time, optimizer-step time with and without PEMA (interleaved, one process), and the
  bytes of weights + gradients + AdamW state, analytical and measured (peak RSS on CPU, peak allocated on CUDA).

Fine-tuning with PEMA is not here: it is `method=finetune pema.enabled=true` (pema/hook.py).
"""
from __future__ import annotations

import copy
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from experiments import batches as B
from experiments import data as D
from experiments.assets import cache_dir, data_fingerprint
from experiments.context import RunContext
from experiments.config import ModelConfig, TaskConfig, load_group
from experiments.models import byte_tokenizer, load_tokenizer, tokenizer_fingerprint, weights_path
from experiments.optim import adamw
from pema import memory, vocab
from pema.hook import attach, keep_ids, read_splits
from pema.sizes import architecture, sizes

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    fn = {"pema_vocab": vocab_run, "pema_sizes": sizes_run, "pema_bench": bench_run}.get(cfg.method.name)
    if fn is None:
        raise ValueError(f"pema.run has no method {cfg.method.name!r}; valid: pema_vocab, pema_sizes, pema_bench")
    return fn(cfg, ctx)


# ---- models without weights --------------------------------------------------------------------------------------
def model_architecture(model: DictConfig):
    """A transformers config without weights: `from_config` with a `model_type` (the hub models' config.json fields,
    copied into conf/model so Tables 5/6 need no network), the random tiny models' fields, the offline asset's
    config.json, or the hub id."""
    fields = OmegaConf.to_container(model.from_config, resolve=True) if model.from_config else {}
    if model.source == "config":
        return architecture(model_type=model.family, vocab_size=len(byte_tokenizer()), **fields)
    if "model_type" in fields:
        return architecture(**fields)
    return architecture(hf_id=weights_path(model))


# ---- pema_vocab --------------------------------------------------------------------------------------------------
_COUNTS: dict[str, tuple[np.ndarray, int]] = {}  # one process (a -m sweep) tokenizes each corpus part once


def load_task(name: str) -> DictConfig:
    """conf/task/<name>.yaml as a typed TaskConfig (for `method.union`)."""
    return load_group("task", name, TaskConfig, "method.union")


def vocab_tokenizer(cfg: DictConfig, rows: int):
    """The tokenizer V' is counted with: the model's own, or (method.tokenizer_of) an offline model's tokenizer of
    the same vocabulary, for a model whose own tokenizer would come from the hub (its |V|, d and N still come from
    its architecture config). Refused when the two vocabularies differ in size."""
    name = cfg.method.tokenizer_of
    if not name:
        return load_tokenizer(cfg.model)
    tok = load_tokenizer(load_group("model", name, ModelConfig, "method.tokenizer_of"))
    if len(tok) != rows:
        raise ValueError(f"method.tokenizer_of={name}: its tokenizer has {len(tok)} tokens but {cfg.model.name} has "
                         f"{rows} embedding rows, so they are not one vocabulary; name a model with {cfg.model.name}'s "
                         "tokenizer, or leave method.tokenizer_of empty")
    return tok


def raw_ids(ds, tok, task: DictConfig, special_tokens: bool) -> list[list[int]]:
    """Untruncated ids of a split's text (Fig. 2 counts): the text fields as the task's encoder reads them."""
    kw = dict(truncation=False, add_special_tokens=special_tokens, verbose=False)
    f = task.text_fields
    if task.type == "ner":
        return tok(list(ds[f[0]]), is_split_into_words=True, **kw)["input_ids"]
    return tok(*[list(ds[x]) for x in f], **kw)["input_ids"]


COUNTS_VERSION = 2  # bump when the counting changes: cached counts are keyed by it (2: the dev carve is in the key)


def split_counts(tok, rows: int, task: DictConfig, data: DictConfig, hub_name, split: str, truncation: bool,
                 special_tokens: bool, tok_key: str, cache: Path | None,
                 force: bool = False) -> tuple[np.ndarray, int, bool]:
    """(id counts of one split, examples, whether they came from the cache). Cached per process and, when `cache` is
    set, on disk ($STRATA_CACHE/pema/counts): experiments that count the same split with the same tokenizer
    (table2/3/4) tokenize it once. Keyed by the tokenizer's fingerprint and the data asset's manifest, so a rebuilt
    asset is counted again; `force` recounts."""
    import hashlib
    import json
    n = D.max_length(task, data)
    key = json.dumps([COUNTS_VERSION, tok_key, rows, task.name, task.source, task.offline, task.hf.path,
                      hub_name or task.hf.name, split, task.splits.get(split), n, truncation, special_tokens,
                      task.get("dev_from_train"),  # a carve changes which rows train (and dev) hold
                      data.source, data.limit_train, data.limit_eval, data.subset_seed,
                      data_fingerprint(task, data)], default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    if digest in _COUNTS and not force:
        return (*_COUNTS[digest], True)
    path = cache / f"{digest}.npz" if cache is not None else None
    if path is not None and path.exists() and not force:  # force=true recounts and replaces the entry
        try:
            z = np.load(path)
            _COUNTS[digest] = (z["counts"], int(z["examples"]))
            return (*_COUNTS[digest], True)
        except (OSError, ValueError, KeyError):  # unreadable: recount and rewrite
            pass
    t = task if hub_name is None else OmegaConf.merge(task, {"hf": {"name": hub_name}})
    raw = D.load_splits(t, data)
    if split not in raw:
        raise ValueError(f"pema.splits names {split!r} but task {task.name} has splits {sorted(raw)}")
    if truncation:  # the run's real features: truncation, windows, special tokens
        ids = vocab.flat_ids(D.encode(raw[split], tok, t, n, train=split == "train"))
        if not special_tokens:
            ids = ids[~np.isin(ids, tok.all_special_ids)]
    else:
        ids = vocab.flat_ids(raw_ids(raw[split], tok, t, special_tokens))
    counts = vocab.count([ids], rows)
    _COUNTS[digest] = (counts, len(raw[split]))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.npz")
        np.savez_compressed(tmp, counts=counts, examples=len(raw[split]), key=key)
        tmp.replace(path)  # atomic: a killed run leaves no half-written entry
    return counts, len(raw[split]), False


def vocab_run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    t0 = time.perf_counter()
    arch = model_architecture(cfg.model)
    n_labels = m.num_labels or len(cfg.task.label_names) or 2
    sz = sizes(arch, n_labels)
    tok = vocab_tokenizer(cfg, sz.rows)
    hub_names = [c for c in m.hub_configs.split("+") if c] or [None]
    tasks = [cfg.task] + [load_task(t) for t in m.union.split("+") if t and t != cfg.task.name]
    examples, cached = {}, []
    ctx.tokenizer_fingerprint = tok_key = tokenizer_fingerprint(tok)
    cache = cache_dir() / "pema" / "counts" if m.cache else None
    counts = np.zeros(sz.rows, dtype=np.int64)
    read = {}
    for task in tasks:
        read[task.name] = read_splits(cfg.pema.splits, bool(task.get("dev_from_train")) or "dev" in task.splits)
        for hub in (hub_names if task is cfg.task else [None]):
            for split in read[task.name]:
                c, n_ex, hit = split_counts(tok, sz.rows, task, cfg.data, hub, split, m.truncation, m.special_tokens,
                                            tok_key, cache, cfg.force)
                counts += c
                name = f"{task.name}{':' + hub if hub else ''}/{split}"
                examples[name] = n_ex
                if hit:
                    cached.append(name)
    use = vocab.usage(counts)
    keep = keep_ids(tok, cfg.pema.keep_special) if m.special_tokens else []
    used = len(vocab.select(counts, keep))
    red = vocab.Reduction(rows=sz.rows, used=used, d=sz.d, n_params=sz.n)
    zero = vocab.zero_count(counts, len(tok))
    longest = sorted(zero.tolist(), key=lambda i: (-len(tok.convert_ids_to_tokens(i)), i))[:m.zero_examples]
    ctx.n_samples.update(examples=sum(examples.values()), max_length=D.max_length(cfg.task, cfg.data))
    ctx.extra.update(
        corpus=examples, counts_from_cache=cached, tokenizer_key=tok_key,
        tokenizer=f"{m.tokenizer_of}'s (same vocabulary)" if m.tokenizer_of else cfg.model.hf_id or cfg.model.name,
        tokenizer_size=len(tok),
        truncation=m.truncation, special_tokens=m.special_tokens, splits=read[cfg.task.name],
        kept_ids=keep, zero_count_examples=[{"id": i, "token": tok.convert_ids_to_tokens(i)} for i in longest])
    return {"vocab/rows": sz.rows, "vocab/used": used, "vocab/unique": use.unique, "vocab/total": use.total,
            "vocab/unique_pct": use.unique_pct, "vocab/zero_count": len(zero), "vocab/tokenizer_size": len(tok),
            "reduction/embedding_pct": red.embedding_pct, "reduction/model_pct": red.model_pct,
            "reduction/params_removed_m": red.removed / 1e6, "params/d": sz.d, "params/n": sz.n,
            "params/n_emb": sz.n_emb, "time/vocab_s": time.perf_counter() - t0}


# ---- pema_sizes --------------------------------------------------------------------------------------------------
def sizes_run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    arch = model_architecture(cfg.model)
    sz = sizes(arch, cfg.method.num_labels)
    get = lambda *names: next((getattr(arch, n) for n in names if getattr(arch, n, None) is not None), None)  # noqa: E731
    ctx.extra.update(model_type=arch.model_type, hf_id=cfg.model.hf_id)
    return {"sizes/rows": sz.rows, "sizes/d": sz.d, "sizes/n_emb_m": sz.n_emb / 1e6, "sizes/n_m": sz.n / 1e6,
            "sizes/ratio_pct": sz.ratio_pct, "sizes/layers": get("num_hidden_layers", "n_layers"),
            "sizes/heads": get("num_attention_heads", "n_heads")}


# ---- pema_bench --------------------------------------------------------------------------------------------------
def _trainer(model: torch.nn.Module, train_cfg, device: torch.device):
    """One optimizer step as experiments.train.fit takes it (its AdamW, clipping), over a fixed batch list."""
    model.to(device).train()
    opt = adamw(model, train_cfg.lr, train_cfg.weight_decay, device)

    def steps(batches, after_step=None):
        for batch in batches:
            loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
            loss.backward()
            del loss
            if train_cfg.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.max_grad_norm)
            opt.step()
            if after_step is not None:  # weights, grads and AdamW moments all alive; activations freed
                after_step()
            opt.zero_grad(set_to_none=True)
    return steps, opt


def bench_run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    from experiments.finetune import prepare
    from experiments.timing import interleaved, summarize
    m, dev = cfg.method, ctx.device
    tok, template, raw, train, evals = prepare(cfg)
    ctx.tokenizer_fingerprint = tokenizer_fingerprint(tok)
    features = {"train": train, "eval": evals}
    gen, _ = B.train_batches(train, cfg.hardware.batch_size, tok.pad_token_id, cfg.seed, cfg.train.group_by_length,
                             **B.loading(cfg.hardware, ctx.device))
    batches, epoch = [], 0
    while len(batches) < max(m.steps, m.memory_steps):  # the first batches of the run, over epochs if it is small
        batches += list(gen(epoch))
        epoch += 1
    batches = batches[:max(m.steps, m.memory_steps)]
    ctx.n_samples.update(train_examples=len(raw["train"]), eval_examples=len(raw["eval"]),
                         max_length=D.max_length(cfg.task, cfg.data), batch_size=cfg.hardware.batch_size)
    Path(ctx.output_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="pema-bench-", dir=ctx.output_dir))  # the offloaded full matrices

    # 1. preparation: count V' over the run's splits, build the map, put E' in place (full matrix written to disk)
    prep = []
    for _ in range(m.prepare_repeats):
        model = copy.deepcopy(template)
        t0 = time.perf_counter()
        a = attach(cfg.pema, model, tok, features, tmp)
        prep.append(time.perf_counter() - t0)
        a.partial.close()
        del model, a
    prep_s = statistics.median(prep)

    # 2. step time, interleaved: full A, PEMA B, A, B ... (warm-up round first), `steps` optimizer steps per call;
    #    before the memory probe, which changes how glibc allocates
    full_model = copy.deepcopy(template)
    pema_model = copy.deepcopy(template)
    a = attach(cfg.pema, pema_model, tok, features, tmp)
    run_full, _ = _trainer(full_model, cfg.train, dev)
    run_pema, _ = _trainer(pema_model, cfg.train, dev)
    times = interleaved({"full": lambda: run_full(batches[:m.steps]), "pema": lambda: run_pema(batches[:m.steps])},
                        repeats=m.repeats, warmup=1, device=dev)
    summary = summarize(times, baseline="full")
    a.partial.close()
    p = a.partial
    step_full = summary["full"]["median_s"] / m.steps
    step_pema = summary["pema"]["median_s"] / m.steps
    full_model = pema_model = run_full = run_pema = None  # free both copies before the memory measurement

    # 3. memory, each arm in turn in this process: a fresh copy, `memory_steps` optimizer steps; the training state
    #    (weights + grads + AdamW moments) is read right after the last optimizer step, before zero_grad, when the
    #    activations are gone; the peak over the steps (activations included) is kept too
    probe = memory.Probe(dev)
    state: dict[str, list[float]] = {"full": [], "pema": []}
    peaks: dict[str, list[float]] = {"full": [], "pema": []}
    model_bytes: dict[str, list[float]] = {"full": [], "pema": []}
    analytic = {}
    for arm in ("full", "pema") * m.memory_rounds:
        probe.settle()
        base = probe.now()
        model = copy.deepcopy(template)
        am = attach(cfg.pema, model, tok, features, tmp) if arm == "pema" else None
        model.to(dev)
        probe.settle()
        model_bytes[arm].append(probe.now() - base)
        analytic[arm] = memory.training_bytes(model)
        steps, opt = _trainer(model, cfg.train, dev)
        probe.reset_peak()
        after_step = []
        steps(batches[:m.memory_steps], after_step=lambda: (probe.settle(), after_step.append(probe.now() - base)))
        peaks[arm].append(probe.peak() - base)
        state[arm].append(after_step[-1])
        if am is not None:
            am.partial.close()
        del model, am, steps, opt
    # paired rounds: each round's full minus PEMA, the median over rounds (the process's heap drifts between rounds)
    saving_measured = statistics.median(f - p for f, p in zip(state["full"], state["pema"]))
    saving_analytic = analytic["full"]["total"] - analytic["pema"]["total"]

    probe.close()
    shutil.rmtree(tmp, ignore_errors=True)
    ctx.extra.update(device=ctx.device_name, probe=probe.kind, prepare_s=prep, peaks_bytes=peaks, state_bytes=state,
                     model_bytes=model_bytes, analytic_bytes=analytic, step_times_s=times,
                     note="ratios measured side by side in one process; other work may share the machine")
    mb = 1 / 2**20
    return {"time/pema_prepare_s": prep_s, "time/step_ms_full": 1e3 * step_full, "time/step_ms_pema": 1e3 * step_pema,
            "time/step_ratio": step_pema / step_full, "pema/vocab_rows": p.rows, "pema/vocab_used": p.vmap.used,
            "mem/analytic_full_mb": analytic["full"]["total"] * mb, "mem/analytic_pema_mb": analytic["pema"]["total"] * mb,
            "mem/analytic_saving_mb": saving_analytic * mb, "mem/measured_saving_mb": saving_measured * mb,
            "mem/measured_over_analytic": saving_measured / saving_analytic if saving_analytic else float("nan"),
            "mem/state_full_mb": statistics.median(state["full"]) * mb,
            "mem/state_pema_mb": statistics.median(state["pema"]) * mb,
            "mem/peak_full_mb": statistics.median(peaks["full"]) * mb,
            "mem/peak_pema_mb": statistics.median(peaks["pema"]) * mb,
            "mem/peak_saving_mb": statistics.median(f - p for f, p in zip(peaks["full"], peaks["pema"])) * mb,
            "mem/weights_full_mb": statistics.median(model_bytes["full"]) * mb,
            "mem/weights_pema_mb": statistics.median(model_bytes["pema"]) * mb}
