"""python -m intrinsic_dim.bench [--quick]: estimator and extraction speed, measured side by side in one process.

1. TwoNN over 31 layers x 2000 points x d=576 (float64; smollm2-135m's shape): ours vs scikit-dimension's
   TwoNN(discard_fraction=0.1), interleaved, plus the N x N x D Gram product alone in float64 and float32 (the
   floors of skdim and of our candidate search), and the largest relative difference of the estimates.
2. Extraction of smollm2-135m hidden states in fp32 (needs `make assets`): our path (backbone only, no LM head,
   length-sorted right-padded batches: what the activation store runs) vs the official recipe (the full causal LM
   with its vocabulary projection at every position, left-padded batches in data order), real (non-pad) tokens/s.
   Also how far bf16 (autocast, and bf16 weights) moves the last-token states (why extraction stays fp32).
3. On CUDA: one Llama-scale layer's TwoNN (N=5000, D=4096).
Writes results/intrinsic_dim/benchmark.{json,md}."""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from experiments.timing import device_name, interleaved, summarize
from intrinsic_dim import estimators as E

OUT = Path("results/intrinsic_dim")


def layers(n_layers: int, n: int, d: int, seed: int = 0) -> list[np.ndarray]:
    """Synthetic stand-ins for hidden states: a 24-dim curved manifold plus small isotropic noise, per layer."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_layers):
        z = rng.standard_normal((n, 24))
        feats = np.concatenate([z, np.sin(z), z ** 2 / 3], 1)
        out.append(feats @ rng.standard_normal((72, d)) + 0.05 * rng.standard_normal((n, d)))
    return out


def bench_estimator(n_layers: int, n: int, d: int, repeats: int) -> dict:
    from skdim.id import TwoNN
    Xs = layers(n_layers, n, d)
    Ts = [torch.from_numpy(x) for x in Xs]
    T32 = [t.float() for t in Ts]
    ours = [E.twonn(x) for x in Xs]
    ref = [float(TwoNN(discard_fraction=0.1).fit(x).dimension_) for x in Xs]
    rel = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
    x32 = [x.astype(np.float32) for x in Xs]  # the same data in float32: skdim computes in float32 then
    rel32 = max(abs(E.twonn(x) - float(TwoNN(discard_fraction=0.1).fit(x).dimension_))
                / float(TwoNN(discard_fraction=0.1).fit(x).dimension_) for x in x32)
    t = interleaved({
        "skdim TwoNN": lambda: [TwoNN(discard_fraction=0.1).fit(x) for x in Xs],
        "ours twonn": lambda: [E.twonn(x) for x in Xs],
        "Gram product X @ X.T alone (float64: skdim's floor)": lambda: [x @ x.T for x in Ts],
        "Gram product X @ X.T alone (float32: our candidate search)": lambda: [x @ x.T for x in T32],
    }, repeats=repeats, warmup=1)
    s = summarize(t, baseline="skdim TwoNN")
    return {"shape": f"{n_layers} layers x {n} points x d={d}, float64", "max_rel_diff_vs_skdim": rel,
            "max_rel_diff_vs_skdim_float32_input": rel32,
            "mean_id": float(np.mean(ours)), "timing": s}


def prompts_for_extraction(n: int) -> list[str]:
    from experiments.assets import require
    from intrinsic_dim import prompts as P
    rows = [json.loads(line) for line in open(require("data", "rt-polarity") / "train.jsonl")][:n + 1000]
    items = P.render("rt-polarity", rows)
    return P.build("icl", 1, items[1000:1000 + n], items[:1000], seed=42)  # ICL-1: ~75 tokens, varied lengths


def bench_extraction(n: int, repeats: int, batch_size: int = 32) -> dict:
    from experiments.assets import require
    from experiments.store import batched_hidden_states
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from intrinsic_dim.extract import backbone
    path = require("models", "smollm2-135m")
    tok = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = [tok(p)["input_ids"] for p in prompts_for_extraction(n)]
    real = sum(map(len, ids))
    ex = [{"input_ids": x} for x in ids]
    sorted_idx = sorted(range(n), key=lambda i: -len(ids[i]))
    dev = torch.device("cpu")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def ours():
        for _ in batched_hidden_states(backbone(lm), ex, sorted_idx, batch_size, dev):
            pass

    def official():  # full LM (logits at every position), left padding, batches in data order
        with torch.inference_mode():
            for s in range(0, n, batch_size):
                b = ids[s:s + batch_size]
                T = max(map(len, b))
                x = torch.full((len(b), T), pad)
                m = torch.zeros(len(b), T, dtype=torch.long)
                for i, r in enumerate(b):
                    x[i, T - len(r):] = torch.tensor(r)
                    m[i, T - len(r):] = 1
                lm(input_ids=x, attention_mask=m, output_hidden_states=True)

    t = interleaved({"official recipe (full LM, left pad, data order)": official,
                     "ours (backbone, length-sorted)": ours}, repeats=repeats, warmup=1)
    s = summarize(t, baseline="official recipe (full LM, left pad, data order)")
    for v in s.values():
        v["real_tokens_per_s"] = real / v["median_s"]
    # bf16 (autocast, and the weights themselves cast) vs fp32 on the last token's state: relative L2 difference
    # of the worst layer, per prompt
    sub = [torch.tensor([r]) for r in ids[:32]]
    lm_bf16 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    worst = {"autocast": [], "weights": []}

    def rel(a, b):
        return max(float((ha[0, -1] - hb[0, -1].float()).norm() / ha[0, -1].norm()) for ha, hb in zip(a[1:], b[1:]))

    with torch.inference_mode():
        for x in sub:
            a = backbone(lm)(input_ids=x, output_hidden_states=True).hidden_states
            with torch.autocast("cpu", dtype=torch.bfloat16):
                b = backbone(lm)(input_ids=x, output_hidden_states=True).hidden_states
            worst["autocast"].append(rel(a, b))
            worst["weights"].append(rel(a, backbone(lm_bf16)(input_ids=x, output_hidden_states=True).hidden_states))
    return {"prompts": n, "real_tokens": real, "mean_tokens": real / n, "batch_size": batch_size, "timing": s,
            **{f"bf16_{k}_rel_l2_diff_{f.__name__}": f(v) for k, v in worst.items()
               for f in (max, statistics.median)}}


def bench_gpu() -> dict | None:
    if not torch.cuda.is_available():
        return None
    X = torch.randn(5000, 64, device="cuda", dtype=torch.float64) @ torch.randn(64, 4096, device="cuda",
                                                                                dtype=torch.float64)
    t = interleaved({"twonn N=5000 D=4096": lambda: E.twonn(X)}, repeats=5, warmup=1, device="cuda")
    return {"device": device_name("cuda"), "median_s": statistics.median(t["twonn N=5000 D=4096"])}


def markdown(res: dict) -> str:
    lines = ["<!-- generated by `python -m intrinsic_dim.bench`; do not edit by hand -->", "# intrinsic_dim benchmark",
             "", f"Device: {res['device']}. Ratios are medians of interleaved repeats in one process.", ""]
    e = res["estimator"]
    lines += [f"## TwoNN: {e['shape']}", "",
              f"Largest relative difference of the estimates vs skdim: {e['max_rel_diff_vs_skdim']:.2e} (float64 "
              f"input); {e['max_rel_diff_vs_skdim_float32_input']:.2e} with float32 input (ours casts to float64 first, "
              "skdim's distances stay float32).", "",
              "| what | median s | speed-up vs skdim |", "|---|---|---|"]
    lines += [f"| {k} | {v['median_s']:.3f} | {v['speedup_vs_baseline']:.2f}x |" for k, v in e["timing"].items()]
    x = res.get("extraction")
    if x:
        lines += ["", f"## Extraction: smollm2-135m fp32, {x['prompts']} ICL-1 prompts of rt-polarity "
                  f"({x['mean_tokens']:.1f} tokens on average), batch {x['batch_size']}", "",
                  "| what | median s | real tokens/s | speed-up |", "|---|---|---|---|"]
        lines += [f"| {k} | {v['median_s']:.2f} | {v['real_tokens_per_s']:.0f} | {v['speedup_vs_baseline']:.2f}x |"
                  for k, v in x["timing"].items()]
        lines += ["", "bf16 moves the last-token state (relative L2 of the worst layer, over 32 prompts): autocast "
                  f"by up to {100 * x['bf16_autocast_rel_l2_diff_max']:.1f}% (median "
                  f"{100 * x['bf16_autocast_rel_l2_diff_median']:.1f}%), bf16 weights by up to "
                  f"{100 * x['bf16_weights_rel_l2_diff_max']:.1f}% (median "
                  f"{100 * x['bf16_weights_rel_l2_diff_median']:.1f}%): extraction stays fp32."]
    g = res.get("gpu")
    lines += ["", "## GPU", "", f"One Llama-scale layer's TwoNN (N=5000, D=4096): {g['median_s']:.3f} s on "
              f"{g['device']}." if g else "No CUDA device in this run: the GPU timing was not measured."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, one repeat (a smoke check of the script)")
    ap.add_argument("--no-extraction", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    torch.set_num_threads(2 if not torch.cuda.is_available() else torch.get_num_threads())
    res = {"device": device_name("cpu"), "torch_threads": torch.get_num_threads()}
    if args.quick:
        res["estimator"] = bench_estimator(3, 300, 64, repeats=1)
    else:
        res["estimator"] = bench_estimator(31, 2000, 576, repeats=3)
    if not args.no_extraction:
        res["extraction"] = bench_extraction(32 if args.quick else 128, repeats=1 if args.quick else 2)
    res["gpu"] = bench_gpu()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmark.json").write_text(json.dumps(res, indent=1))
    (out / "benchmark.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
