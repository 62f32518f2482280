"""One verified kernel against the vendor library on the same inputs, timed in interleaved rounds.

A ratio of two medians taken a second apart in one process moves with whatever the GPU did in between (its clocks,
its temperature, the other process on it): cuBLAS's time of one shape has measured up to 9% apart between two
re-timings while the kernel beside it moved 3%. Here both sides read the same input arrays and are timed in turns
(ours, the vendor's, then the vendor's first in the next round, ...), after a warm round that is dropped, each turn
a whole timing plan after its own L2 flush; the ratio is the median of the rounds' ratios, so a slow stretch lands
on both sides of a round alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..kernels import FAMILIES
from .bench import L2Flusher, Timing, time_launches
from .evaluate import Compiled, Settings, Status, TrialResult, _result, verified_run

ROUNDS = 5


@dataclass(frozen=True)
class Versus:
    """``result``: the verified candidate, its timing the round of its median time (or why it has none).
    ``vendor``: the vendor's name and the timing of its median round (None: no vendor library for the problem).
    ``rounds``: (our ms, the vendor's ms) per round, in the order they ran."""

    result: TrialResult
    vendor: tuple[str, Timing] | None
    rounds: tuple[tuple[float, float], ...] = ()

    @property
    def ratio(self) -> float | None:
        """The vendor's time over ours, the median of the rounds' ratios: above 1 means faster than the vendor."""
        if not self.rounds:
            return None
        return statistics.median(v / o for o, v in self.rounds)


def versus(c: Compiled, settings: Settings, flush: L2Flusher | None = None, rounds: int = ROUNDS) -> Versus:
    """Verify the candidate on fresh random inputs, then time it and the vendor library on those same inputs in
    ``rounds`` interleaved rounds of ``settings.timing`` each. GPU required."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    checked = verified_run(c, settings)
    if isinstance(checked, TrialResult):
        return Versus(checked, None)
    run, fixture, verdict, shared = checked
    problem = c.candidate.problem
    vendor = FAMILIES[c.candidate.kernel].vendor(problem, fixture.inputs)
    flush = flush or L2Flusher()
    ours, *rest = interleave([run, *([vendor[1]] if vendor else [])], rounds,
                             lambda fn: time_launches(fn, flush, settings.timing))  # fmt: skip
    mid = _median_round(ours)
    seconds = mid.median_ms / 1e3
    result = _result(
        c, Status.COMPLETE, None, timing=mid, error=verdict.error, tflops=problem.flops / seconds / 1e12,
        gbps=problem.bytes / seconds / 1e9, shared_bytes=shared,
    )  # fmt: skip
    if not vendor:
        return Versus(result, None)
    theirs = rest[0]
    pairs = tuple((o.median_ms, v.median_ms) for o, v in zip(ours, theirs, strict=True))
    return Versus(result, (vendor[0], _median_round(theirs)), pairs)


def interleave(sides: Sequence[Any], rounds: int, time: Callable[[Any], Any]) -> list[list[Any]]:
    """Each side's timings, ``time(side)`` once a round for ``rounds`` rounds, the order reversed every other round,
    after one warm round whose timings are dropped: the side timed first on a card that had been idle (compiling,
    verifying) ran up to 8% faster than it did a round later, at the clock the power cap then allows."""
    for side in sides:
        time(side)  # the warm round
    timings: list[list[Any]] = [[] for _ in sides]
    for i in range(rounds):
        order = range(len(sides)) if i % 2 == 0 else reversed(range(len(sides)))
        for k in order:
            timings[k].append(time(sides[k]))
    return timings


def _median_round(timings: list[Timing]) -> Timing:
    """The timing whose median is the median of the rounds' (the lower middle one of an even count)."""
    ordered = sorted(timings, key=lambda t: t.median_ms)
    return ordered[(len(ordered) - 1) // 2]


def summary(v: Versus) -> dict[str, Any]:
    """The numbers a benchmark row keeps: our and the vendor's median-round times, the ratio, every round."""
    return {
        "ms": v.result.timing.median_ms if v.result.timing else None,
        "vendor": v.vendor[0] if v.vendor else None,
        "vendor_ms": v.vendor[1].median_ms if v.vendor else None,
        "x_vendor": v.ratio,
        "rounds_ms": [list(r) for r in v.rounds],
    }
