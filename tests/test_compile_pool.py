"""The compile pool: cache by source, parallel compiles, and a compile that hangs."""

from __future__ import annotations

import time

from autotune.compile_pool import CompilePool
from autotune.evaluate import Candidate, Settings, render_candidate
from autotune.kernels import FAMILIES
from autotune.space import Config
from tests.fakes import fake_compile, slow_compile

SETTINGS = Settings(arch="sm_90", tolerance=1e-5)
PROBLEM = FAMILIES["gemm"].problem([64, 64, 64], "float32")


def rendered(bx: int, by: int, shape=(64, 64, 64)):
    problem = FAMILIES["gemm"].problem(list(shape), "float32")
    return render_candidate(Candidate("gemm", "naive", problem, Config.of({"BX": bx, "BY": by})), SETTINGS)


def test_one_compile_per_source_across_shapes():
    calls = []

    def counting(source, name, arch):
        calls.append(name)
        return fake_compile(source, name, arch)

    with CompilePool("sm_90", jobs=1, compile_fn=counting) as pool:
        a = pool.submit(rendered(16, 16))
        b = pool.submit(rendered(16, 16, shape=(128, 32, 7)))  # the kernel takes the shape at run time
        assert a == b
        assert pool.result(a).ok and pool.result(b).ok
    assert calls == ["gemm_naive_bx16_by16"]


def test_a_hanging_compile_times_out_and_the_pool_recovers():
    with CompilePool("sm_90", jobs=2, compile_fn=slow_compile, timeout_s=1.0) as pool:
        slow, fast = pool.submit(rendered(64, 1)), pool.submit(rendered(16, 16))
        t0 = time.monotonic()
        r = pool.result(slow)
        assert not r.ok and "timed out" in r.error
        assert time.monotonic() - t0 < 30
        assert pool.result(fast).ok  # resubmitted to the new pool if it had not finished
        assert pool.result(pool.submit(rendered(32, 4))).ok
