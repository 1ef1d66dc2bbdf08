"""method=layer_fusion_bench on a tiny model: both arms are timed by experiments.timing.interleaved (cached first in
each round, after one untimed warm-up run), and the record carries the suite's speedup names read off those times."""
import pytest

from experiments import timing
from experiments.run import execute
from layer_fusion import bench

# interleaved reads the clock before and after each call: cached runs take 1 s and recompute runs 3 s, round by round
TICKS = [0.0, 1.0, 10.0, 13.0, 20.0, 21.0, 30.0, 33.0]


def test_the_arms_are_timed_by_interleaved(smoke_cfg, tmp_path, monkeypatch):
    calls, ticks = [], iter(TICKS)

    def spy(fns, repeats, warmup, device):
        calls.append((list(fns), repeats, warmup))
        return timing.interleaved(fns, repeats, warmup, device, clock=lambda: next(ticks))
    monkeypatch.setattr(bench, "interleaved", spy)
    cfg = smoke_cfg("method=layer_fusion_bench", "task=wnut16", "method.repeats=2", f"store.dir={tmp_path / 's'}")
    rec = execute(cfg, tmp_path / "out")
    assert rec["status"] == "ok", rec.get("error")
    assert calls == [(["cached", "recompute"], 2, 0)]  # one call; the warm-up run happens before it, untimed
    m, extra = rec["metrics"], rec["extra"]
    assert extra["wall_s"] == {"cached": [1.0, 1.0], "recompute": [3.0, 3.0]}
    assert (m["speedup/cached_vs_recompute"], m["speedup/cached_vs_recompute_lo"],
            m["speedup/cached_vs_recompute_hi"]) == (3.0, 3.0, 3.0)
    assert (m["time/cached_run_s"], m["time/recompute_run_s"]) == (1.0, 3.0)
    assert m["bench/runs_to_break_even"] == pytest.approx(m["time/store_fill_s"] / 2.0)
    assert m["time/cached_step_ms"] > 0 and m["time/recompute_step_ms"] > 0 and m["bench/dev_gap"] >= 0
    assert extra["steps"] > 0 and len(extra["sample"]) == 10  # N = 1 x wnut16's 10 entity types
