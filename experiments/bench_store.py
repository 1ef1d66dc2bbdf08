"""Benchmark the activation store: computing all-layer hidden states vs reading them back (fp32, fp16).

    python -m experiments.bench_store [--model minilm-l6] [--n 512] [--batch-size 32] [--max-length 128]
                                      [--repeats 5] [--out results/store]

One process, warm stores (filled before timing; their build cost is reported apart), the three passes
interleaved with `experiments.timing.interleaved`. A pass iterates every example in batches of --batch-size
and produces the right-padded (B, T, d) states of every layer: by a forward pass, or by `padded()` reads
(crc-verified) from the store. The shard files were just written, so reads are served by the page cache:
this is the store's own overhead, not the speed of a cold disk.
`--model tiny-bert` uses a random 2-layer BERT and random token ids (no offline assets needed).
Writes <out>/benchmark.json (all numbers, config, device) and <out>/benchmark.md (generated from the json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from experiments.assets import cache_dir, require
from experiments.store import ActivationStore, batched_hidden_states, model_fingerprint
from experiments.timing import device_name, interleaved, summarize

PASSES = ("compute", "read_fp32", "read_fp16")


def load(args: argparse.Namespace) -> tuple[torch.nn.Module, list[dict], dict]:
    """The model and n tokenized examples, plus a description of where they came from."""
    rng = random.Random(args.seed)
    if args.model == "tiny-bert":  # smoke mode: random weights, random ids
        torch.manual_seed(args.seed)
        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=max(args.max_length, 64))
        examples = [{"input_ids": [rng.randint(1, 99) for _ in range(rng.randint(4, args.max_length))]}
                    for _ in range(args.n)]
        return transformers.BertModel(cfg), examples, {"model": "random tiny-bert", "data": "random token ids"}
    model_dir = require("models", args.model)
    data_path = require("data", "rt-polarity") / "train.jsonl"
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir)
    with open(data_path, encoding="utf-8") as f:  # not splitlines(): texts may hold U+2028 and the like
        rows = [json.loads(line) for line in f if line.strip()]
    texts = [r["text"] for r in rng.sample(rows, min(args.n, len(rows)))]
    enc = tok(texts, truncation=True, max_length=args.max_length)
    examples = [{k: enc[k][i] for k in ("input_ids", "token_type_ids") if k in enc} for i in range(len(texts))]
    return model, examples, {"model": f"{args.model} ({model_dir})", "data": f"rt-polarity train ({data_path})"}


@torch.no_grad()  # scoped: a global switch would leak into whatever imports and calls this
def run(args: argparse.Namespace) -> dict:
    load_before = os.getloadavg()
    model, examples, source = load(args)
    model.eval()
    device = torch.device("cpu")
    n_layers = model.config.num_hidden_layers + 1  # embedding output + every block
    lens = [len(e["input_ids"]) for e in examples]
    d = model.config.hidden_size
    n, bs = len(examples), args.batch_size
    batches = [list(range(s, min(s + bs, n))) for s in range(0, n, bs)]
    fingerprint = model_fingerprint(model)  # once; the timed passes name the model by it
    common = dict(tokenizer_key=args.model, max_length=args.max_length, batch_size=args.batch_size,
                  device=device, model_key=fingerprint)

    parent = Path(args.store_root) if args.store_root else cache_dir() / "tmp"
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-store-", dir=parent))
    try:
        stores = {name: ActivationStore(tmp / name, dt) for name, dt in (("fp32", torch.float32),
                                                                         ("fp16", torch.float16))}
        views, build_s = {}, {}
        for name, store in stores.items():  # fill before timing: Table 4 excludes the cache-build cost
            t0 = time.perf_counter()
            views[name] = store.hidden_states(model, examples, "all", **common)
            build_s[name] = time.perf_counter() - t0

        def compute() -> None:
            for _ in batched_hidden_states(model, examples, range(len(examples)), args.batch_size, device):
                pass

        def reader(view):
            def read() -> None:
                for b in batches:
                    for k in range(n_layers):
                        view.padded(b, k)
            return read

        for s in stores.values():
            s.stats.reset()
        times = interleaved({"compute": compute, "read_fp32": reader(views["fp32"]),
                             "read_fp16": reader(views["fp16"])},
                            repeats=args.repeats, warmup=args.warmup, device=device)
        summary = summarize(times, baseline="compute")
        timed_reads = {n: s.stats.reads for n, s in stores.items()}
        rebuilt_during_timing = sum(s.stats.rebuilt for s in stores.values())

        # fidelity: stored fp32 == a fresh forward; fp16 vs fp32 rounding
        first = batches[0]
        _, hs, _ = next(iter(batched_hidden_states(model, examples, first, len(first), device)))
        fp32_abs = fp32_rel = fp16_abs = fp16_rel = 0.0
        for k in range(n_layers):
            x32, m = views["fp32"].padded(first, k)
            x16, _ = views["fp16"].padded(first, k)
            real = m.bool()
            scale = x32[real].abs().clamp_min(1e-3)
            d32 = (x32[real] - hs[k][real]).abs()  # the store built its batches length-sorted: other padding
            # relative to the layer's largest magnitude: elementwise ratios blow up near zero
            fp32_abs = max(fp32_abs, d32.max().item())
            fp32_rel = max(fp32_rel, d32.max().item() / x32[real].abs().max().item())
            d16 = (x16.float()[real] - x32[real]).abs()
            fp16_abs, fp16_rel = max(fp16_abs, d16.max().item()), max(fp16_rel, (d16 / scale).max().item())

        # shuffled pass on a fresh store object (nothing in memory): every lookup and read must hit
        shuffled = ActivationStore(tmp / "fp16", torch.float16)
        order = list(range(len(examples)))
        random.Random(args.seed + 1).shuffle(order)
        sview = shuffled.hidden_states(model, [examples[i] for i in order], "all", **common)
        for s in range(0, len(order), args.batch_size):
            for k in range(n_layers):
                sview.padded(range(s, min(s + args.batch_size, len(order))), k)
        st = shuffled.stats
        entries = len(examples) * n_layers

        raw = {name: sum(lens) * d * n_layers * s.np_dtype.itemsize for name, s in stores.items()}
        disk = {name: s.disk_bytes() for name, s in stores.items()}
        index_bytes = {name: sum(p.stat().st_size for p in (tmp / name).glob("shard-*.json")) for name in stores}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {name: summary[name]["median_s"] for name in PASSES}
    return {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "device": device_name(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loadavg_1m": {"before": load_before[0], "after": os.getloadavg()[0], "cpus": os.cpu_count()},
        "source": source,
        "data": {"n_examples": len(examples), "n_tokens": sum(lens), "mean_len": sum(lens) / len(lens),
                 "max_len": max(lens), "n_layers_stored": n_layers, "hidden_size": d, "n_batches": len(batches)},
        "timing": {"summary": summary, "times_s": times,
                   "compute_over_read": {"fp32": med["compute"] / med["read_fp32"],
                                         "fp16": med["compute"] / med["read_fp16"]},
                   "entries_read_per_pass": {n: r / (args.repeats + args.warmup) for n, r in timed_reads.items()},
                   "rebuilt_during_timing": rebuilt_during_timing},
        "build_s": build_s,
        "storage": {"bin_bytes": disk, "raw_tensor_bytes": raw, "index_bytes": index_bytes,
                    "fp16_over_fp32_bin": disk["fp16"] / disk["fp32"],
                    "bytes_per_token_per_layer": {n: disk[n] / (sum(lens) * n_layers) for n in disk}},
        "shuffled_pass": {"entries": entries, "lookups": st.hits + st.misses, "hits": st.hits, "misses": st.misses,
                          "reads": st.reads, "computed": st.computed, "rebuilt": st.rebuilt,
                          "hit_rate": st.hit_rate},
        "fidelity": {"fp32_store_vs_forward_max_abs": fp32_abs, "fp32_store_vs_forward_max_abs_over_max": fp32_rel,
                     "fp16_vs_fp32_max_abs": fp16_abs,
                     "fp16_vs_fp32_max_rel": fp16_rel, "checked_batch": len(first)},
    }


def to_markdown(r: dict) -> str:
    c, t, s, sp = r["config"], r["timing"], r["storage"], r["shuffled_pass"]
    lines = [
        "# Activation store benchmark",
        "",
        "Generated by `python -m experiments.bench_store` from benchmark.json; do not edit. "
        f"Device: **{r['device']}**.",
        f"Model: {r['source']['model']}. Data: {r['source']['data']}.",
        f"{r['data']['n_examples']} examples, {r['data']['n_tokens']} tokens (mean {r['data']['mean_len']:.1f}), "
        f"{r['data']['n_layers_stored']} hidden states of d={r['data']['hidden_size']}, batch {c['batch_size']}, "
        f"max_length {c['max_length']}; {c['repeats']} interleaved repeats after {c['warmup']} warm-up.",
        "A pass produces every layer's padded (B, T, d) batch tensors for all examples. "
        "Reads are crc-verified and come from a warm page cache.",
        "",
        "| pass | median s | min s | max s | speedup vs compute |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in PASSES:
        m = t["summary"][name]
        lines.append(f"| {name} | {m['median_s']:.4f} | {m['min_s']:.4f} | {m['max_s']:.4f} | "
                     f"{m['speedup_vs_baseline']:.2f}× |")
    lines += [
        "",
        "| storage | fp32 | fp16 | fp16/fp32 |",
        "|---|---:|---:|---:|",
        f"| shard .bin bytes | {s['bin_bytes']['fp32']:,} | {s['bin_bytes']['fp16']:,} | "
        f"{s['fp16_over_fp32_bin']:.3f} |",
        f"| raw tensor bytes (Σ T·d·L·size) | {s['raw_tensor_bytes']['fp32']:,} | "
        f"{s['raw_tensor_bytes']['fp16']:,} | "
        f"{s['raw_tensor_bytes']['fp16'] / s['raw_tensor_bytes']['fp32']:.3f} |",
        f"| index .json bytes | {s['index_bytes']['fp32']:,} | {s['index_bytes']['fp16']:,} | |",
        "",
        f"Shuffled pass (fresh store object, fp16): {sp['hits']:,} hits / {sp['lookups']:,} lookups "
        f"(hit rate {sp['hit_rate']:.1%}), {sp['reads']:,} entries read, {sp['computed']} computed, "
        f"{sp['rebuilt']} rebuilt.",
        f"Fidelity on one batch: fp32 store vs forward max |Δ| {r['fidelity']['fp32_store_vs_forward_max_abs']:.2e} "
        f"({r['fidelity']['fp32_store_vs_forward_max_abs_over_max']:.1e} of the layer's max |x|); "
        f"fp16 vs fp32 max |Δ| {r['fidelity']['fp16_vs_fp32_max_abs']:.2e} "
        f"(max elementwise relative {r['fidelity']['fp16_vs_fp32_max_rel']:.2e}; fp16 rounding bound 4.88e-04).",
        f"One-off store build (not interleaved): fp32 {r['build_s']['fp32']:.2f} s, fp16 {r['build_s']['fp16']:.2f} s.",
        f"1-minute load average {r['loadavg_1m']['before']:.2f} before, {r['loadavg_1m']['after']:.2f} after, on "
        f"{r['loadavg_1m']['cpus']} CPUs (other work on the machine widens the min–max spread; the ratios are "
        "interleaved medians).",
        "",
    ]
    return "\n".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="minilm-l6", help="offline model name, or tiny-bert (random, for smoke tests)")
    p.add_argument("--n", type=int, default=512, help="sentences from rt-polarity train (random sample)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--store-root", default=None, help="where the temporary stores go (default: <cache>/tmp)")
    p.add_argument("--out", default="results/store")
    args = p.parse_args(argv)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / "benchmark.json", json.dumps(result, indent=1) + "\n")
    _write_atomic(out / "benchmark.md", to_markdown(result))
    print(to_markdown(result))
    return result


if __name__ == "__main__":
    main()
