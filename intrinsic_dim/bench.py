"""method=intrinsic_dim_bench: estimator and extraction speed, measured side by side in one process.

    python -m experiments.run experiment=intrinsic_dim/bench        (smollm2-135m; needs `make assets`)

1. TwoNN over 31 layers x 2000 points x d=576 (float64; smollm2-135m's shape): ours vs scikit-dimension's
   TwoNN(discard_fraction=0.1), interleaved, plus the N x N x D Gram product alone in float64 and float32 (the
   floors of skdim and of our candidate search), and the largest relative difference of the estimates.
2. Extraction of `model=`'s hidden states in fp32 over ICL-1 prompts of `task=`: our path (backbone only, no LM head,
   length-sorted right-padded batches: what the activation store runs) vs the official recipe (the full causal LM
   with its vocabulary projection at every position, left-padded batches in data order), real (non-pad) tokens/s.
   Also how far bf16 (autocast, and bf16 weights) moves the last-token states (why extraction stays fp32).
3. On CUDA: one Llama-scale layer's TwoNN (N=5000, D=4096).
Every number goes into the run record (extra.benchmark); `python -m experiments.report intrinsic_dim` renders its
tables (intrinsic_dim/report.py benchmark). The shapes are method fields (intrinsic_dim/config.py
IntrinsicDimBenchConfig)."""
from __future__ import annotations

import statistics

import numpy as np
import torch
from omegaconf import DictConfig

from experiments.context import RunContext
from experiments.data import load_rows
from experiments.models import load_causal_lm
from experiments.timing import device_name, interleaved, summarize
from intrinsic_dim import estimators, prompts


def layers(n_layers: int, n: int, d: int, seed: int = 0) -> list[np.ndarray]:
    """Synthetic stand-ins for hidden states: a 24-dim curved manifold plus small isotropic noise, per layer."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_layers):
        z = rng.standard_normal((n, 24))
        feats = np.concatenate([z, np.sin(z), z ** 2 / 3], 1)
        out.append(feats @ rng.standard_normal((72, d)) + 0.05 * rng.standard_normal((n, d)))
    return out


def each(f, xs) -> None:
    for x in xs:
        f(x)


def bench_estimator(n_layers: int, n: int, d: int, repeats: int) -> dict:
    from skdim.id import TwoNN
    Xs = layers(n_layers, n, d)
    Ts = [torch.from_numpy(x) for x in Xs]
    T32 = [t.float() for t in Ts]
    ours = [estimators.twonn(x) for x in Xs]
    ref = [float(TwoNN(discard_fraction=0.1).fit(x).dimension_) for x in Xs]
    rel = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
    x32 = [x.astype(np.float32) for x in Xs]  # the same data in float32: skdim computes in float32 then
    rel32 = max(abs(estimators.twonn(x) - float(TwoNN(discard_fraction=0.1).fit(x).dimension_))
                / float(TwoNN(discard_fraction=0.1).fit(x).dimension_) for x in x32)
    t = interleaved({
        "skdim TwoNN": lambda: [TwoNN(discard_fraction=0.1).fit(x) for x in Xs],
        "ours twonn": lambda: [estimators.twonn(x) for x in Xs],
        # one product at a time (a list of all 31 would time page faults), as the search runs them
        "Gram product X @ X.T alone (float64: skdim's floor)": lambda: each(lambda x: x @ x.T, Xs),
        "Gram product X @ X.T alone (float32, as our candidate search runs it)":
            lambda: each(lambda t: estimators._gram_rows(t, 0, len(t)), T32),
    }, repeats=repeats, warmup=1)
    s = summarize(t, baseline="skdim TwoNN")
    return {"shape": f"{n_layers} layers x {n} points x d={d}, float64", "max_rel_diff_vs_skdim": rel,
            "max_rel_diff_vs_skdim_float32_input": rel32,
            "mean_id": float(np.mean(ours)), "timing": s}


def prompts_for_extraction(cfg: DictConfig, n: int) -> list[str]:
    """n ICL-1 prompts (~75 tokens, varied lengths on rt-polarity): items after the demo pool, one demo each from
    the pool (the task's first `method.demo_pool` train rows)."""
    rows = load_rows(cfg.task, cfg.data, cfg.task.splits["train"])
    pool = min(cfg.method.demo_pool, len(rows) - n)
    if pool < 1:
        raise ValueError(f"task {cfg.task.name} has {len(rows)} train rows: too few for method.extract_prompts={n} "
                         "prompts plus a demo pool; lower method.extract_prompts")
    items = prompts.render(cfg.task.name, [rows[i] for i in range(n + pool)])
    return prompts.build("icl", 1, items[pool:pool + n], items[:pool], seed=42)


def bench_extraction(cfg: DictConfig, ctx: RunContext) -> dict:
    from experiments.store import batched_hidden_states
    from intrinsic_dim.extract import backbone
    m, dev = cfg.method, ctx.device
    n, batch_size = m.extract_prompts, m.extract_batch_size
    tok, lm = load_causal_lm(cfg.model)
    lm.to(dev)
    ids = [tok(p)["input_ids"] for p in prompts_for_extraction(cfg, n)]
    real = sum(map(len, ids))
    ex = [{"input_ids": x} for x in ids]
    sorted_idx = sorted(range(n), key=lambda i: -len(ids[i]))
    pad = tok.pad_token_id

    def ours():
        for _ in batched_hidden_states(backbone(lm), ex, sorted_idx, batch_size, dev):
            pass

    def official():  # full LM (logits at every position), left padding, batches in data order
        with torch.inference_mode():
            for s in range(0, n, batch_size):
                b = ids[s:s + batch_size]
                T = max(map(len, b))
                x = torch.full((len(b), T), pad)
                mask = torch.zeros(len(b), T, dtype=torch.long)
                for i, r in enumerate(b):
                    x[i, T - len(r):] = torch.tensor(r)
                    mask[i, T - len(r):] = 1
                lm(input_ids=x.to(dev), attention_mask=mask.to(dev), output_hidden_states=True)

    t = interleaved({"official recipe (full LM, left pad, data order)": official,
                     "ours (backbone, length-sorted)": ours}, repeats=m.extract_repeats, warmup=1, device=dev)
    s = summarize(t, baseline="official recipe (full LM, left pad, data order)")
    for v in s.values():
        v["real_tokens_per_s"] = real / v["median_s"]
    # bf16 (autocast, and the weights themselves cast) vs fp32 on the last token's state: relative L2 difference
    # of the worst layer, per prompt
    sub = [torch.tensor([r], device=dev) for r in ids[:32]]
    _, lm_bf16 = load_causal_lm(cfg.model, dtype=torch.bfloat16)  # loaded in bf16 (fp32 rotary frequencies)
    lm_bf16.load_state_dict(lm.state_dict())  # the same weights (a random model would draw new ones)
    lm_bf16.to(dev)
    worst = {"autocast": [], "weights": []}

    def rel(a, b):
        return max(float((ha[0, -1] - hb[0, -1].float()).norm() / ha[0, -1].norm()) for ha, hb in zip(a[1:], b[1:]))

    with torch.inference_mode():
        for x in sub:
            a = backbone(lm)(input_ids=x, output_hidden_states=True).hidden_states
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                b = backbone(lm)(input_ids=x, output_hidden_states=True).hidden_states
            worst["autocast"].append(rel(a, b))
            worst["weights"].append(rel(a, backbone(lm_bf16)(input_ids=x, output_hidden_states=True).hidden_states))
    return {"model": cfg.model.name, "task": cfg.task.name, "prompts": n, "real_tokens": real, "mean_tokens": real / n,
            "batch_size": batch_size, "timing": s, "bf16_prompts": len(sub),
            **{f"bf16_{k}_rel_l2_diff_{f.__name__}": f(v) for k, v in worst.items()
               for f in (max, statistics.median)}}


def bench_gpu() -> dict | None:
    if not torch.cuda.is_available():
        return None
    X = torch.randn(5000, 64, device="cuda", dtype=torch.float64) @ torch.randn(64, 4096, device="cuda",
                                                                                dtype=torch.float64)
    name = "twonn N=5000 D=4096"
    t = interleaved({name: lambda: estimators.twonn(X)}, repeats=5, warmup=1, device="cuda")
    return {"device": device_name("cuda"), "median_s": summarize(t, baseline=name)[name]["median_s"]}


def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m = cfg.method
    res = {"device": ctx.device_name, "torch_threads": torch.get_num_threads(),
           "estimator": bench_estimator(m.est_layers, m.est_points, m.est_dim, repeats=m.est_repeats)}
    if m.extraction:
        res["extraction"] = bench_extraction(cfg, ctx)
    res["gpu"] = bench_gpu() if m.gpu else None
    ctx.extra.update(benchmark=res)
    t = res["estimator"]["timing"]
    metrics = {"time/twonn_skdim_s": t["skdim TwoNN"]["median_s"], "time/twonn_ours_s": t["ours twonn"]["median_s"],
               "speedup/twonn_vs_skdim": t["ours twonn"]["speedup_vs_baseline"],
               "id/max_rel_diff_vs_skdim": res["estimator"]["max_rel_diff_vs_skdim"]}
    if m.extraction:
        x = res["extraction"]
        ours, official = (x["timing"][k] for k in ("ours (backbone, length-sorted)",
                                                    "official recipe (full LM, left pad, data order)"))
        ctx.n_samples.update(prompts=x["prompts"], tokens=x["real_tokens"])
        metrics.update({"time/extract_official_s": official["median_s"], "time/extract_ours_s": ours["median_s"],
                        "speedup/extract_x": ours["speedup_vs_baseline"],
                        "extract/tokens_per_s": ours["real_tokens_per_s"],
                        "bf16/autocast_rel_l2_diff_max": x["bf16_autocast_rel_l2_diff_max"],
                        "bf16/weights_rel_l2_diff_max": x["bf16_weights_rel_l2_diff_max"]})
    if res["gpu"]:
        metrics["time/gpu_twonn_s"] = res["gpu"]["median_s"]
    return metrics
