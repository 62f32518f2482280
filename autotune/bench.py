"""Timing with CUDA events: warm-up, L2 flushed before every launch, median and spread."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    repeats: int

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else math.nan


@dataclass(frozen=True)
class TimingPlan:
    """How long to measure: enough repeats to fill ``target_ms``, within the bounds."""

    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 100
    target_ms: float = 150.0


class L2Flusher:
    """Writes a buffer twice the size of L2 so no input stays cached between launches."""

    def __init__(self) -> None:
        import cupy as cp

        l2 = cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
        self._buf = cp.empty(max(2 * l2, 1 << 20) // 4, dtype=cp.int32)

    def __call__(self) -> None:
        self._buf.fill(0)


def time_launches(launch: Callable[[], Any], flush: Callable[[], None], plan: TimingPlan = TimingPlan()) -> Timing:
    """Median of individually event-timed launches, each after an L2 flush (not timed)."""
    import cupy as cp

    for _ in range(plan.warmup):
        launch()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    flush()
    start.record()
    launch()
    end.record()
    end.synchronize()
    estimate = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
    repeats = int(min(plan.max_repeats, max(plan.min_repeats, plan.target_ms // estimate)))
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(repeats)]
    for s, e in events:
        flush()
        s.record()
        launch()
        e.record()
    events[-1][1].synchronize()
    times = sorted(cp.cuda.get_elapsed_time(s, e) for s, e in events)
    return summarize(times)


def summarize(times: list[float]) -> Timing:
    ts = sorted(times)
    n = len(ts)

    def q(f: float) -> float:
        pos = f * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return ts[lo] + (ts[hi] - ts[lo]) * (pos - lo)

    return Timing(q(0.5), ts[0], ts[-1], q(0.75) - q(0.25), n)
