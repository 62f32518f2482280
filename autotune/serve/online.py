"""The online choice: on a problem's first call, measure a handful of candidates and keep the fastest verified.

Candidates are the vendor library, the nearest stored winners that fit and the family's default. Each runs on
fresh random inputs of the problem (never the caller's buffers), ours are verified against the vendor's
output (against the float64 reference when there is no vendor) with the dtype's tolerance from
``autotune.measure.verify``, and each verified one is timed with CUDA events. Building a candidate may compile it
(cubins are cached on disk); once the budget is spent the remaining candidates are skipped, not measured.

The measuring is a ``Runner`` (``GpuRunner`` on the device; CPU tests inject fakes), so the choosing logic
is testable without a GPU.
"""

from __future__ import annotations

import datetime
import enum
import functools
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.errors import AutotuneError

log = logging.getLogger(__name__)

DEFAULT_BUDGET_S = 1.0


class Outcome(enum.StrEnum):
    """What became of a candidate (its ``status`` in the record)."""

    OK = "ok"  # verified and timed
    REJECTED = "rejected"  # not verified (wrong output, launch failure): never served
    BUILD_FAILED = "build-failed"  # did not compile or load
    SKIPPED = "skipped"  # the budget was spent before its turn


@dataclass(frozen=True)
class Option:
    """One candidate: ``build()`` makes its launcher (it may compile); ``choice`` is None for the vendor."""

    name: str
    source: str  # "vendor", "exact <key>", "nearest <key>", "same-arch <key>", "default"
    build: Callable[[], Any]
    choice: Any = None


class Runner(Protocol):
    def measure(self, launcher: Any, is_vendor: bool) -> tuple[bool, float | None, float | None, str | None]:
        """(verified, error, median ms, reason): run once and verify (the vendor's output becomes the
        reference), then time; median None when it was not verified."""
        ...


def measure_options(options: list[Option], runner: Runner, budget_s: float = DEFAULT_BUDGET_S,
                    clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:  # fmt: skip
    """Measure ``options`` in order within ``budget_s``; the record of what was measured and which won.

    The record (stored in the choice cache, shown in ``provenance``): ``served`` ("vendor", "ours" or
    "none"), ``winner`` (index into ``candidates``), ``candidates`` (name, source, status, median_ms, error,
    reason), ``budget_s``, ``spent_s``, ``date``.
    """
    start = clock()
    rows: list[dict[str, Any]] = []
    for option in options:
        row: dict[str, Any] = {"name": option.name, "source": option.source, "median_ms": None, "error": None}
        rows.append(row)
        if clock() - start > budget_s:
            row.update(status=Outcome.SKIPPED.value, reason=f"the budget of {budget_s:g} s was spent")
            continue
        try:
            launcher = option.build()
        except AutotuneError as exc:
            row.update(status=Outcome.BUILD_FAILED.value, reason=str(exc)[:300])
            continue
        ok, error, median, reason = runner.measure(launcher, option.choice is None)
        row.update(error=error, median_ms=median, reason=reason)
        row["status"] = (Outcome.OK if ok and median is not None else Outcome.REJECTED).value
        if option.choice is not None and option.choice.template:
            row.update(template=option.choice.template, params=dict(option.choice.params))
    timed = [(r["median_ms"], i) for i, r in enumerate(rows) if r["status"] == Outcome.OK.value]
    winner = min(timed)[1] if timed else None
    served = "none" if winner is None else ("vendor" if options[winner].choice is None else "ours")
    spent = clock() - start
    log.debug("online choice: %s in %.3f s; %s", served,
              spent, "; ".join(f"{r['name']} {r['status']} {r['median_ms']}" for r in rows))  # fmt: skip
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"served": served, "winner": winner, "candidates": rows, "budget_s": budget_s, "spent_s": spent,
            "date": now}  # fmt: skip


class GpuRunner:
    """Fresh random inputs of one problem; runs a launcher on them, verifies, times it with CUDA events.

    Timing: each launch is preceded by two asynchronous memsets of twice the L2 size (a flush by writing,
    which also keeps the GPU busy while the host enqueues the call, so host launch cost is not counted),
    then start event, the call, end event; the median of ``repeats`` launches (the verification run warms up).
    """

    def __init__(self, kernel: str, problem: Any, seed: int = 20261201, repeats: int = 15) -> None:
        import cupy as cp

        from ..kernels import FAMILIES
        from ..measure.verify import tolerance_for

        self.family = FAMILIES[kernel]
        self.problem = problem
        self.inputs = self.family.make_inputs(problem, seed=seed)
        self.out = self.family.new_output(problem)
        self.tolerance = tolerance_for(problem.dtype)
        self.repeats = repeats
        self.reference: Any = None
        l2 = cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
        self._flush = cp.empty(max(2 * l2, 1 << 20), dtype=cp.uint8)

    def _run(self, launcher: Any) -> None:
        a, b = self.inputs
        launcher._launch(a, b, self.out, 1.0, 0.0)  # past the call observer: measuring is not a served call

    def measure(self, launcher: Any, is_vendor: bool) -> tuple[bool, float | None, float | None, str | None]:
        import cupy as cp

        from ..measure import verify

        verify.poison(self.out)
        try:
            self._run(launcher)
            cp.cuda.get_current_stream().synchronize()
        except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError, RuntimeError) as exc:
            # RuntimeError: what torch raises when cuDNN or cuBLAS refuses a problem
            return False, None, None, f"launch failed: {str(exc).splitlines()[0][:200]}"
        got = self.family.decode(self.problem, self.out).astype(cp.float64)
        if is_vendor:
            self.reference = got
            return True, None, self.time(launcher), None
        if self.reference is None:
            self.reference = self.family.reference(self.problem, self.inputs)
        verdict = verify.compare(got, self.reference, self.tolerance)
        if not verdict.ok:
            return False, verdict.error, None, verdict.reason
        return True, verdict.error, self.time(launcher), None

    def time(self, launcher: Any) -> float:
        """Median ms of ``repeats`` launches (3 for a launch above 5 ms, which keeps the budget for others)."""
        first = self._timed(launcher, 1)  # the verification run was the warm-up
        more = self._timed(launcher, (self.repeats if first[0] < 5.0 else 3) - 1)
        return statistics.median(first + more)

    def _timed(self, launcher: Any, n: int) -> list[float]:
        import cupy as cp

        if n <= 0:
            return []
        stream = cp.cuda.get_current_stream()
        pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(n)]
        buf = self._flush
        spin = _spin_kernel()
        for start, end in pairs:
            for _ in range(2):
                cp.cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, stream.ptr)
            spin((1,), (1,), (SPIN_CYCLES,))  # the GPU stays busy while the host enqueues the call (cuBLAS through
            start.record(stream)  # CuPy or cuDNN through torch costs tens of us on the host): that is not timed
            self._run(launcher)
            end.record(stream)
        pairs[-1][1].synchronize()
        return [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]


SPIN_CYCLES = 1_000_000  # about 0.5 ms at 2 GHz: longer than any serving path's host cost


@functools.cache
def _spin_kernel() -> Any:
    """A one-thread kernel that spins for a number of clock cycles."""
    import cupy as cp

    src = (
        'extern "C" __global__ void autotune_spin(long long cycles) {\n'
        "  long long t0 = clock64();\n  while (clock64() - t0 < cycles) { }\n}\n"
    )
    return cp.RawKernel(src, "autotune_spin")
