"""method=recycling_bench: the paper's efficiency tables measured side by side in one process [P §4].

    training   Table 5: ms per training step of NR (full), F (lower half frozen, no cache), R (cache on disk, and in
               RAM) and SR (one epoch that builds the cache, then recycling epochs), through the suite's trainer.
    inference  Table 4: ms per batch of the full model vs the cache-fed upper half, fp32 and fp16 cache, memory-
               mapped shards vs RAM, prefetch thread on/off; max |Δ score| of each cache vs the full model.
    storage    bytes per token and per sequence (fp32, fp16; raw and on disk), and a shuffled second epoch's hits.
    cost       Table 7's inputs: inference at 512 tokens (baseline vs fp16 cache) and the break-even months.

Contenders run interleaved (A B C A B C ...) after a warm-up; medians over repeats; the device is recorded.
Workload: real text of `task` packed into sequences of exactly `seq_len` tokens ("simulated sequence
classification", random labels, as the paper's benchmark script does [R])."""
from __future__ import annotations

import logging
import random
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from experiments import data
from experiments.context import RunContext
from experiments.models import build, tokenizer_fingerprint
from experiments.timing import interleaved, summarize
from experiments.train import fit
from recycling import cache
from recycling.config import check
from recycling.cost import months_to_break_even
from recycling.model import apply_variant, blocks, lower_model, resolve_k

log = logging.getLogger(__name__)


def packed_rows(texts: list[str], tok, seq_len: int, n: int, seed: int) -> list[dict]:
    """n sequences of exactly seq_len real tokens ([CLS] text... [SEP]), each with a random binary label."""
    cls, sep = tok.cls_token_id, tok.sep_token_id
    if cls is None or sep is None:
        cls = sep = tok.eos_token_id if tok.eos_token_id is not None else tok.pad_token_id
    stream, rows, body = [], [], seq_len - 2
    rng = random.Random(seed)
    for t in texts:
        stream += tok(t, add_special_tokens=False)["input_ids"]
        while len(stream) >= body and len(rows) < n:
            rows.append({"input_ids": [cls, *stream[:body], sep], "token_type_ids": [0] * seq_len,
                         "attention_mask": [1] * seq_len, "labels": rng.randrange(2)})
            stream = stream[body:]
        if len(rows) == n:
            return rows
    raise ValueError(f"the task's texts hold only {len(rows)} sequences of {seq_len} tokens; need {n}: "
                     "lower method.n_batches / method.seq_len or use a larger task")


def _setup(cfg: DictConfig, ctx: RunContext, n: int, seq_len: int):
    # a 2-label head: the workload is classification with random labels, whatever the task's own labels are
    task = OmegaConf.merge(cfg.task, {"type": "cls", "label_names": ["a", "b"]})
    tok, model = build(cfg.model, task)
    raw = data.load_splits(cfg.task, cfg.data)
    # every text field (a QA context, not just its question), token lists joined as words
    texts = [" ".join(map(str, r[f] if isinstance(r[f], list) else [r[f]])) for r in raw["train"]
             for f in cfg.task.text_fields]
    rows = packed_rows(texts, tok, seq_len, n, cfg.seed)
    k = resolve_k(cfg.method.k, len(blocks(model.encoder)))
    ctx.n_samples.update(sequences=n, seq_len=seq_len, batch_size=cfg.method.batch_size)
    return tok, model, task, rows, k


def _chunks(n: int, bs: int) -> list[list[int]]:
    return [list(range(i, min(n, i + bs))) for i in range(0, n, bs)]


def _train_cfg(cfg: DictConfig, steps: int) -> DictConfig:
    # the benchmark script's loop: Adam at 5e-5, random labels [R]; no warmup, no early stopping, no bar
    return OmegaConf.merge(cfg.train, {"lr": 5e-5, "max_steps": steps, "warmup_ratio": 0.0, "eval_every": 10 ** 9,
                                       "patience": 0, "progress": False, "grad_accum": 1})


def training(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    n = m.n_batches * m.batch_size
    tok, nr, task, rows, k = _setup(cfg, ctx, n, m.seq_len)
    pad, dev, tcfg, tok_key = tok.pad_token_id, ctx.device, _train_cfg(cfg, m.steps), tokenizer_fingerprint(tok)
    f = apply_variant(build(cfg.model, task)[1], "frozen", k, 0, "gelu_new")
    lower = lower_model(nr.encoder, k)
    r = apply_variant(build(cfg.model, task)[1], "reduced", k, 0, "gelu_new")
    states = cache.build(ctx.store(), lower, rows, k, tokenizer_key=tok_key, max_length=m.seq_len,
                         batch_size=m.batch_size, device=dev)
    disk = cache.LayerCache(states, k, rows, pad)
    ram = cache.LayerCache(states, k, rows, pad, in_ram=True)
    chunks = _chunks(n, m.batch_size)

    def token_batches(epoch):
        return (data.collate([rows[i] for i in c], pad) for c in chunks)

    def step_ms(model, batches) -> float:
        res = fit(model, batches, len(chunks), tcfg, evaluate=lambda _: {"eval/none": 0.0}, objective="eval/none",
                  higher_is_better=True, device=dev, precision=cfg.hardware.precision)
        return 1e3 * (res.train_s + res.data_s) / res.steps  # amortized, fetching included (as the paper times)

    def save_epoch_ms() -> float:
        # building the cache for one batch: the lower model's forward + the store write (SR's first epoch)
        with tempfile.TemporaryDirectory(dir=ctx.output_dir) as tmp:
            fresh = ctx.store(root=tmp)
            t0 = time.perf_counter()
            cache.build(fresh, lower, rows, k, tokenizer_key=tok_key, max_length=m.seq_len,
                        batch_size=m.batch_size, device=dev)
            return 1e3 * (time.perf_counter() - t0) / len(chunks)

    # each contender times itself (a step inside fit, a cache build without the temporary store around it), so the
    # rounds are what the calls return, not interleaved's wall times around them; warm-up rounds dropped
    fns = {"NR": lambda: step_ms(nr, token_batches), "F": lambda: step_ms(f, token_batches),
           "R": lambda: step_ms(r, lambda e: (disk.batch(c) for c in chunks)),
           "R_ram": lambda: step_ms(r, lambda e: (ram.batch(c) for c in chunks)), "save": save_epoch_ms}
    results: dict[str, list[float]] = {name: [] for name in fns}
    wrapped = {name: (lambda name=name, fn=fn: results[name].append(fn())) for name, fn in fns.items()}
    interleaved(wrapped, repeats=m.repeats, warmup=m.warmup, device=dev)
    rounds_ms = {name: v[m.warmup:] for name, v in results.items()}
    ms = {name: v["median_s"] for name, v in summarize(rounds_ms, baseline="NR").items()}  # medians, in ms here
    ms["SR"] = (ms["save"] + ms["R"] + (m.sr_epochs - 1) * ms["R"]) / m.sr_epochs
    ctx.extra["rounds_ms"] = rounds_ms
    out = {"recycling/k": k, **{f"time/{name}_ms": v for name, v in ms.items()}}
    out.update({"speedup/NR_vs_SR_pct": _pct(ms["NR"], ms["SR"]), "speedup/F_vs_SR_pct": _pct(ms["F"], ms["SR"]),
                "speedup/NR_vs_R_pct": _pct(ms["NR"], ms["R"]), "speedup/NR_vs_R_ram_pct": _pct(ms["NR"], ms["R_ram"]),
                "speedup/NR_vs_F_pct": _pct(ms["NR"], ms["F"])})
    return out


def _pct(base: float, method: float) -> float:
    """The paper's speedup: T_base / T_method - 1, in percent [P §4]."""
    return 100.0 * (base / method - 1.0)


def _caches(ctx, lower, rows, k, tok_key, seq_len, bs, pad) -> dict[str, cache.LayerCache]:
    out = {}
    for dt in ("fp32", "fp16"):
        states = cache.build(ctx.store(dt), lower, rows, k, tokenizer_key=tok_key, max_length=seq_len, batch_size=bs,
                             device=ctx.device)
        out[f"{dt}_disk"] = cache.LayerCache(states, k, rows, pad)
        out[f"{dt}_ram"] = cache.LayerCache(states, k, rows, pad, in_ram=True)
    return out


def _max_score_diff(full, reduced, caches, chunks, rows, pad, dev) -> dict[str, float]:
    """max |Δ softmax score| and max |Δ logit| of each cache-fed model vs the full model (eval mode)."""
    out = {}
    with torch.inference_mode():
        base = torch.cat([full(**{k: v.to(dev) for k, v in data.collate([rows[i] for i in c], pad).items()
                                  if k != "labels"}).logits.float() for c in chunks])
        for name in ("fp32_disk", "fp16_disk"):
            got = torch.cat([reduced(**{k: v.to(dev) for k, v in caches[name].batch(c, targets=False).items()})
                             .logits.float() for c in chunks])
            out[f"fidelity/{name[:4]}_max_abs_logit"] = (got - base).abs().max().item()
            out[f"fidelity/{name[:4]}_max_abs_score"] = (got.softmax(-1) - base.softmax(-1)).abs().max().item()
    return out


def inference(cfg: DictConfig, ctx: RunContext, seq_len: int | None = None, contenders=None) -> dict[str, float]:
    m = cfg.method
    seq_len = seq_len or m.seq_len
    n = m.n_batches * m.batch_size
    tok, full, task, rows, k = _setup(cfg, ctx, n, seq_len)
    pad, dev = tok.pad_token_id, ctx.device
    full.to(dev).eval()
    reduced = apply_variant(full, "reduced", k, 0, "gelu_new").eval()  # shares the full model's weights
    caches = _caches(ctx, lower_model(full.encoder, k), rows, k, tokenizer_fingerprint(tok), seq_len, m.batch_size,
                     pad)
    chunks = _chunks(n, m.batch_size)

    def run_full():
        with torch.inference_mode():
            for c in chunks:
                batch = data.collate([rows[i] for i in c], pad)
                full(**{k: v.to(dev) for k, v in batch.items() if k != "labels"})

    def run_cached(name: str, ahead: int):
        def go():
            with torch.inference_mode():
                batches = (caches[name].batch(c, targets=False) for c in chunks)
                for b in cache.prefetch(batches, ahead):
                    reduced(**{k: v.to(dev) for k, v in b.items()})
        return go

    fns = {"baseline": run_full}
    for name in contenders or ("fp32_disk", "fp16_disk", "fp32_ram", "fp16_ram"):
        fns[name] = run_cached(name, 0)
        if name.endswith("disk"):
            fns[f"{name}_prefetch"] = run_cached(name, m.prefetch_ahead)
    times = interleaved(fns, repeats=m.repeats, warmup=m.warmup, device=dev)
    medians = summarize(times, baseline="baseline")
    ctx.extra["rounds_ms_per_batch"] = {name: [1e3 * t / len(chunks) for t in ts] for name, ts in times.items()}
    out = {"recycling/k": k, **{f"time/{name}_ms": 1e3 * v["median_s"] / len(chunks) for name, v in medians.items()}}
    out.update({f"speedup/{name}_pct": 100.0 * (v["speedup_vs_baseline"] - 1.0) for name, v in medians.items()
                if name != "baseline"})
    out.update(_max_score_diff(full, reduced, caches, chunks, rows, pad, dev))
    return out


def storage(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    """Bytes of the cache for real, variable-length examples of the task, and a shuffled second epoch's hit rate."""
    m = cfg.method
    tok, model = build(cfg.model, cfg.task)
    tok_key = tokenizer_fingerprint(tok)
    raw = data.load_splits(cfg.task, cfg.data)
    n_len = data.max_length(cfg.task, cfg.data)
    rows = data.rows_of(data.encode(raw["eval"], tok, cfg.task, n_len, train=False))
    k = resolve_k(m.k, len(blocks(model.encoder)))
    lower = lower_model(model.encoder, k)
    d = model.encoder.config.hidden_size
    tokens = sum(len(r["input_ids"]) for r in rows)
    # the store keeps one entry per distinct example (same ids, same key): repeated sentences cost nothing more
    unique = {(tuple(r["input_ids"]), tuple(r.get("token_type_ids") or ())): len(r["input_ids"]) for r in rows}
    out = {"storage/sequences": len(rows), "storage/tokens": tokens, "storage/d": d, "storage/k": k,
           "storage/unique_sequences": len(unique), "storage/unique_tokens": sum(unique.values())}
    for dt, size in (("fp32", 4), ("fp16", 2)):
        with tempfile.TemporaryDirectory(dir=ctx.output_dir) as tmp:
            store = ctx.store(dt, root=tmp)
            states = cache.build(store, lower, rows, k, tokenizer_key=tok_key, max_length=n_len,
                                 batch_size=cfg.hardware.eval_batch_size, device=ctx.device)
            raw_bytes = tokens * d * size
            out[f"storage/{dt}_raw_bytes"] = raw_bytes
            out[f"storage/{dt}_disk_bytes"] = store.disk_bytes()
            out[f"storage/{dt}_bytes_per_token"] = raw_bytes / tokens
            out[f"storage/{dt}_bytes_per_sequence"] = raw_bytes / len(rows)
            if dt == cfg.store.dtype:
                # a fresh store object over the same shards: two shuffled epochs, every read counted
                again = ctx.store(dt, root=tmp)
                states = cache.build(again, lower, rows, k, tokenizer_key=tok_key, max_length=n_len,
                                     batch_size=cfg.hardware.eval_batch_size, device=ctx.device)
                batches, _ = cache.LayerCache(states, k, rows, tok.pad_token_id).batches(cfg.hardware.batch_size,
                                                                                          cfg.seed)
                epochs = []
                for epoch in range(2):
                    s0 = (again.stats.hits, again.stats.misses, again.stats.computed)
                    seen = sum(len(b["hidden"]) for b in batches(epoch))
                    epochs.append({"epoch": epoch + 1, "examples": seen, "hits": again.stats.hits - s0[0],
                                   "misses": again.stats.misses - s0[1], "computed": again.stats.computed - s0[2]})
                ctx.extra["epochs"] = epochs
                e2 = epochs[1]
                out["storage/epoch2_hit_rate"] = e2["hits"] / max(1, e2["hits"] + e2["misses"])
                out["storage/epoch2_computed"] = e2["computed"]
    # the paper's example of a cache's size: 512 tokens at d=768 [P]
    out["storage/paper_512x768_fp32_MB"] = 512 * 768 * 4 / 1e6
    out["storage/paper_512x768_fp16_MB"] = 512 * 768 * 2 / 1e6
    return out


def cost(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    """Table 7 from measured timings: inference at 512 tokens, baseline vs fp16 cache, scaled to a 128-sequence
    batch, priced with the paper's A10G and storage prices."""
    out = inference(cfg, ctx, seq_len=512, contenders=("fp16_disk",))
    per_seq = {name: out[f"time/{name}_ms"] / cfg.method.batch_size for name in ("baseline", "fp16_disk_prefetch")}
    d = cfg.model.hidden_size
    for where in ("cloud", "local"):
        out[f"cost/{where}_months"] = months_to_break_even(128 * per_seq["baseline"],
                                                           128 * per_seq["fp16_disk_prefetch"], d, where)
    return out


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    check(cfg)
    fns = {"training": training, "inference": inference, "storage": storage, "cost": cost}
    torch.manual_seed(cfg.seed)
    Path(ctx.output_dir).mkdir(parents=True, exist_ok=True)
    return fns[cfg.method.variant](cfg, ctx)
