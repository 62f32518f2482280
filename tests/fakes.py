"""Fake compile and evaluation for search tests without a GPU (and a script that a test kills)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from autotune.build.compiler import CompileResult
from autotune.measure.bench import Timing
from autotune.measure.evaluate import Compiled, Settings, Status, TrialResult

NAIVE_SPEC = """
kernel: gemm
template: naive
dtype: float32
shapes: [[64, 64, 64], "96x80x72"]
params:
  BX: [4, 8, 16, 32, 64]
  BY: [1, 2, 4, 8, 16]
constraints:
  - BX * BY >= 32
budget: {trials: 8}
sampler: tpe
seed: 3
"""


def fake_compile(source: str, kernel_name: str, arch: str) -> CompileResult:
    return CompileResult(
        kernel_name, b"fake-cubin", "", 0.0, registers=32, static_smem=0, spill_stores=0, spill_loads=0
    )


def fake_time(params: dict) -> float:
    """A smooth landscape with its minimum at BX=32, BY=8."""
    return 1.0 + abs(params["BX"] - 32) / 32 + abs(params["BY"] - 8) / 8


def fake_energy(params: dict) -> float:
    """J per launch, lowest at BX=8, BY=2: the fastest configuration is not the most frugal one."""
    return 1.0 + abs(params["BX"] - 8) / 8 + abs(params["BY"] - 2) / 2


class FakeEvaluator:
    """Stands in for the GPU worker. Records every evaluation; optionally logs each config key first."""

    def __init__(self, log: Path | None = None, delay: float = 0.0, fail_keys: frozenset[str] = frozenset()) -> None:
        self.calls: list[str] = []
        self.log, self.delay, self.fail_keys = log, delay, fail_keys

    def start(self, c: Compiled, settings: Settings) -> None:
        self._pending = (c, settings)

    def collect(self) -> TrialResult:
        return self.measure(*self._pending)

    def vendor(self, kernel, problem, plan):
        return "fake-BLAS", Timing(2.0, 2.0, 2.0, 0.0, 5)

    def measure(self, c: Compiled, settings: Settings) -> TrialResult:
        if c.status is not None:
            return TrialResult(c.status, c.reason, c.kernel_name, c.candidate.config)
        key = c.candidate.config.key
        self.calls.append(key)
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(key + "\n")
        time.sleep(self.delay)
        if key in self.fail_keys:
            return TrialResult(
                Status.VERIFY_FAILED, "relative error 1 exceeds tolerance", c.kernel_name, c.candidate.config
            )
        ms = fake_time(c.candidate.config.as_dict())
        if settings.abort_above_ms is not None and ms > settings.abort_above_ms:
            t = Timing(ms, ms, ms, 0.0, 3, aborted=True)
            return TrialResult(Status.PRUNED, "slow", c.kernel_name, c.candidate.config, t)
        t = Timing(ms, ms, ms, 0.0, 5)
        p = c.candidate.problem
        energy = {}
        if settings.energy:  # what evaluate.measure_energy adds after timing
            j = fake_energy(c.candidate.config.as_dict())
            energy = {"energy_j": j, "gflops_per_j": p.flops / 1e9 / j, "energy_method": "nvml-counter"}
        return TrialResult(
            Status.COMPLETE, None, c.kernel_name, c.candidate.config, t, 1e-7, p.flops / ms / 1e9, None, 32, 0, 0, 0.0,
            **energy,
        )  # fmt: skip


def main() -> None:
    """python tests/fakes.py SPEC STORAGE LOG TRIALS: a slow fake run that a test kills."""
    from autotune.build.compile_pool import CompilePool
    from autotune.tune.search import open_storage, tune_shape
    from autotune.tune.spec import load_spec

    spec_path, storage, log, trials = sys.argv[1:5]
    spec = load_spec(spec_path)
    settings = Settings(arch="sm_90", tolerance=1e-5)
    tune_shape(
        spec, spec.problems[0], settings, open_storage(storage), trials=int(trials), minutes=None,
        evaluator=FakeEvaluator(Path(log), delay=0.2), compiler=CompilePool("sm_90", 1, fake_compile), prefetch=1,
    )  # fmt: skip


if __name__ == "__main__":
    main()


def slow_compile(source: str, kernel_name: str, arch: str) -> CompileResult:
    """Sleeps far past any test timeout for kernels whose name contains 'bx64'."""
    if "bx64" in kernel_name:
        time.sleep(60)
    return fake_compile(source, kernel_name, arch)


def replayed_evaluations(record, sampler: str, seed: int, budget: int):
    """A replay of ``record`` through the search loop with ``sampler``, and the keys of the configurations it
    measured (search timing, in order): what the loop's duplicate handling and repair let through."""
    from autotune.tune.replay import RecordedEvaluator, Variant, replay_once
    from autotune.tune.search import SEARCH_PLAN

    seen: list[str] = []

    class Spy(RecordedEvaluator):
        def measure(self, c, settings):
            if settings.timing == SEARCH_PLAN and c.status is None:
                seen.append(c.candidate.config.key)
            return super().measure(c, settings)

    run = replay_once(record, Variant.named(sampler), seed=seed, budget=budget, evaluator=Spy(record), stop=False)
    return run, seen
