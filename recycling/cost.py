"""Table 7: how long a cache can be stored before its storage costs more than the compute one reuse saves.

Our reading of the paper's cost model [S], which reproduces all ten of its numbers from its own Table 4 timings:
    months = (T_base - T_fp16)[ms per 128 x 512-token batch on one A10G] x (5.67 / 4 $/GPU-h / 3.6e6 ms/h)
             / (128 x 512 x d x 2 B / 2^30 x price $/GB/month)
g5.12xlarge (4 x A10G) at $5.67/h; S3 one-zone-IA $0.01/GB/month (cloud); local HDD $16.9/TB over 6 years =
0.23 $/TB/month (local). fp16 cache, 512-token inputs."""
from __future__ import annotations

GPU_HOUR = 5.67 / 4  # $ per A10G-hour (a quarter of a g5.12xlarge)
PRICE_GB_MONTH = {"cloud": 0.01, "local": 0.23 / 1000}


def months_to_break_even(t_base_ms: float, t_cached_ms: float, d: int, where: str = "cloud",
                         batch: int = 128, seq_len: int = 512, bytes_per_value: int = 2) -> float:
    if where not in PRICE_GB_MONTH:
        raise ValueError(f"unknown storage {where!r}; valid: {', '.join(PRICE_GB_MONTH)}")
    saved = (t_base_ms - t_cached_ms) * GPU_HOUR / 3.6e6  # $ of GPU time one reuse saves
    stored = batch * seq_len * d * bytes_per_value / 2 ** 30 * PRICE_GB_MONTH[where]  # $ per month of storage
    return saved / stored
