"""Timing with CUDA events: warm-up, L2 flushed by reading and the GPU kept busy before every launch, median and
spread."""

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


FLUSH_SOURCE = r"""
extern "C" __global__ void l2_flush_read(const uint4* __restrict__ p, long long n4, unsigned* __restrict__ sink) {
  unsigned acc = 0u;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // never true for the zeroed buffer, yet no load can be dropped
}
extern "C" __global__ void spin(long long ns) {  // one thread, busy for ns nanoseconds of the global timer
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
"""
SPIN_US = 30  # longer than the host's side of a launch (a kernel's, or cupy.matmul's tens of us) after the flush


class L2Flusher:
    """Leaves L2 clean and the GPU busy before a timed launch: a read of a buffer of 4x the L2 size (reading leaves
    clean lines; a flush by writing would leave dirty ones, whose write-back lands inside the next kernel's time),
    then a short spin kernel, so the start event that follows is recorded while the host enqueues the launch and
    its host cost is not counted."""

    def __init__(self) -> None:
        import cupy as cp

        dev = cp.cuda.Device()
        l2 = dev.attributes.get("L2CacheSize", 64 << 20)
        self._buf = cp.zeros(max(4 * l2, 1 << 20) // 16, dtype=cp.uint32).reshape(-1, 4)
        self._sink = cp.zeros(1, dtype=cp.uint32)
        module = cp.RawModule(code=FLUSH_SOURCE, options=("-std=c++17",))
        self._read, self._spin = module.get_function("l2_flush_read"), module.get_function("spin")
        self._grid = (dev.attributes["MultiProcessorCount"] * 8,)
        self._args = (self._buf, cp.int64(self._buf.shape[0]), self._sink)
        self._ns = cp.int64(SPIN_US * 1000)

    def __call__(self) -> None:
        self._read(self._grid, (256,), self._args)
        self._spin((1,), (1,), (self._ns,))


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
