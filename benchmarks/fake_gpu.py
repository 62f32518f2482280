"""A GPU stand-in for ``storage_throughput.py --fake``: what the storage costs the search loop, without a GPU.

Compiles return at once (in this process); each candidate "runs" for a fixed time that overlaps the loop's asks,
as the GPU worker's ``start``/``collect`` do; the measured time is a fixed function of the configuration, so the
sampler has a landscape to learn. The device limits are sm_90's table (an H100/H200).
"""

from __future__ import annotations

import contextlib
import hashlib
import time

from autotune.bench import Timing
from autotune.compiler import CompileResult
from autotune.device import GPUInfo
from autotune.evaluate import Compiled, Settings, Status, TrialResult
from autotune.limits import SM90


def fake_gpu() -> GPUInfo:
    """sm_90's limits under a name of its own (its studies and result files never mix with a real GPU's)."""
    return GPUInfo(
        name="fake sm90", arch="sm_90", multiprocessors=132, max_shared_per_block=SM90.max_shared_per_block,
        registers_per_block=SM90.registers_per_block, registers_per_sm=SM90.registers_per_sm,
        shared_per_sm=SM90.shared_per_sm, threads_per_sm=SM90.threads_per_sm, l2_bytes=50 << 20, driver="none",
        runtime="none",
    )  # fmt: skip


def instant_compile(source: str, kernel_name: str, arch: str) -> CompileResult:
    return CompileResult(kernel_name, b"fake", "", 0.0, registers=64, static_smem=0, spill_stores=0, spill_loads=0)


def fake_ms(c: Compiled) -> float:
    """A landscape: larger tiles are faster, plus a fixed per-configuration scatter."""
    params = c.candidate.config.as_dict()
    tile = float(params.get("BM", 64)) * float(params.get("BN", 64))
    scatter = int(hashlib.sha256(c.candidate.config.key.encode()).hexdigest()[:6], 16) / 0xFFFFFF
    return 3.0 + 4096.0 / tile + scatter


class FakeGPU:
    """Takes ``measure_s`` per candidate; ``start`` returns at once and ``collect`` waits for the rest."""

    def __init__(self, measure_s: float) -> None:
        self.measure_s = measure_s
        self._pending: tuple[Compiled, Settings, float] | None = None

    def vendor(self, kernel, problem, plan):
        return "fake-BLAS", Timing(4.0, 4.0, 4.0, 0.0, 5)

    def start(self, c: Compiled, settings: Settings) -> None:
        self._pending = (c, settings, time.perf_counter())

    def collect(self) -> TrialResult:
        assert self._pending is not None
        c, _, t0 = self._pending
        if c.status is None:
            time.sleep(max(0.0, t0 + self.measure_s - time.perf_counter()))
        return self._result(c)

    def measure(self, c: Compiled, settings: Settings) -> TrialResult:
        self.start(c, settings)
        return self.collect()

    def _result(self, c: Compiled) -> TrialResult:
        if c.status is not None:
            return TrialResult(c.status, c.reason, c.kernel_name, c.candidate.config)
        ms = fake_ms(c)
        return TrialResult(Status.COMPLETE, None, c.kernel_name, c.candidate.config, Timing(ms, ms, ms, 0.0, 5), 1e-7)


@contextlib.contextmanager
def fake_tools(measure_s: float, prefetch: int):
    """(evaluator, compile pool, prefetch) for ``storage_throughput.run_once``."""
    from autotune.compile_pool import CompilePool

    with CompilePool("sm_90", 1, instant_compile) as compiler:
        yield FakeGPU(measure_s), compiler, prefetch
