"""Timing with CUDA events: warm-up, L2 flushed before every launch, median and spread."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    repeats: int
    aborted: bool = False  # stopped after the probe launches: already far slower than the best so far

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
    probe: int = 3  # launches timed before deciding whether to abort


class L2Flusher:
    """Writes a buffer twice the size of L2 so no input stays cached between launches."""

    def __init__(self) -> None:
        import cupy as cp

        l2 = cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
        self._buf = cp.empty(max(2 * l2, 1 << 20) // 4, dtype=cp.int32)

    def __call__(self) -> None:
        self._buf.fill(0)


def time_launches(
    launch: Callable[[], Any],
    flush: Callable[[], None],
    plan: TimingPlan = TimingPlan(),
    abort_above_ms: float | None = None,
) -> Timing:
    """Median of individually event-timed launches, each after an L2 flush (not timed).

    The first ``plan.probe`` launches also size the run; if their median is above ``abort_above_ms``
    the measurement stops there and the Timing says ``aborted``.
    """
    import cupy as cp

    def timed(n: int) -> list[float]:
        if n <= 0:
            return []
        # The last event blocks (sleeps) instead of spinning: the host has nothing to do meanwhile, and a
        # spinning wait takes a core from the compiles that run beside the GPU worker.
        events = [(cp.cuda.Event(), cp.cuda.Event(block=i == n - 1)) for i in range(n)]
        for s, e in events:
            flush()
            s.record()
            launch()
            e.record()
        events[-1][1].synchronize()
        return [cp.cuda.get_elapsed_time(s, e) for s, e in events]

    for _ in range(plan.warmup):
        launch()
    probe = timed(max(1, plan.probe))
    first = summarize(probe)
    if abort_above_ms is not None and first.median_ms > abort_above_ms:
        return replace(first, aborted=True)
    estimate = max(first.median_ms, 1e-3)
    repeats = int(min(plan.max_repeats, max(plan.min_repeats, plan.target_ms // estimate)))
    return summarize(probe + timed(max(0, repeats - len(probe))))


def summarize(times: list[float]) -> Timing:
    ts = sorted(times)
    n = len(ts)

    def q(f: float) -> float:
        pos = f * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return ts[lo] + (ts[hi] - ts[lo]) * (pos - lo)

    return Timing(q(0.5), ts[0], ts[-1], q(0.75) - q(0.25), n)
