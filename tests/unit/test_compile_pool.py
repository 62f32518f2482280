"""The compile pool: cache by source, parallel compiles, and a compile that hangs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from autotune.build.compile_pool import CompilePool
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, render_candidate
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


GATE_ENV = "AUTOTUNE_TEST_COMPILE_GATE"


def _gated_compile(source, kernel_name, arch):
    """bx64 waits until the file that AUTOTUNE_TEST_COMPILE_GATE names exists (30 s at most), everything else is
    immediate: bx64 is the slow one until the test opens the gate, however loaded the machine (a loaded 2-core CI
    machine took 2.6 s for an immediate one)."""
    if "bx64" in kernel_name:
        gate, deadline = Path(os.environ[GATE_ENV]), time.monotonic() + 30
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return fake_compile(source, kernel_name, arch)


def test_first_ready_skips_a_slow_compile_at_the_head_of_the_queue(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE_ENV, str(gate))  # before the pool's processes start: they inherit it
    with CompilePool("sm_90", jobs=2, compile_fn=_gated_compile, timeout_s=60.0) as pool:
        pool.warm()
        keys = [pool.submit(rendered(64, 1)), pool.submit(rendered(16, 16)), pool.submit(rendered(32, 4))]
        first = pool.first_ready(keys)
        assert first in (1, 2) and not pool.ready(keys[0])  # the slow one is still at its gate
        assert pool.result(keys[first]).ok
        gate.touch()
        assert pool.first_ready([keys[0]]) == 0  # only the slow one left: waits for it
        assert pool.result(keys[0]).ok


def test_first_ready_gives_up_on_a_hung_compile_at_its_deadline():
    with CompilePool("sm_90", jobs=2, compile_fn=slow_compile, timeout_s=1.0) as pool:
        key = pool.submit(rendered(64, 1))
        t0 = time.monotonic()
        assert pool.first_ready([key]) == 0
        r = pool.result(key)
        assert not r.ok and "timed out" in r.error and time.monotonic() - t0 < 30


def test_a_single_job_pool_keeps_submission_order():
    with CompilePool("sm_90", jobs=1, compile_fn=fake_compile) as pool:
        keys = [pool.submit(rendered(bx, 4)) for bx in (8, 16, 32)]
        assert pool.first_ready(keys) == 0


def _half_second_compile(source, kernel_name, arch):
    time.sleep(0.5)
    return fake_compile(source, kernel_name, arch)


def test_time_in_the_queue_does_not_count_towards_the_compile_timeout():
    """Twelve 0.5 s compiles on two processes: the last ones wait ~2.5 s in the queue, longer than the 2.5 s
    timeout with their own compile, and none of them is hung (each compile leaves 2 s of slack for a loaded
    machine)."""
    shapes = [(bx, by) for by in (1, 2, 4, 8) for bx in (8, 16, 32)]
    with CompilePool("sm_90", jobs=2, compile_fn=_half_second_compile, timeout_s=2.5) as pool:
        # both processes up first: their start (seconds on a loaded 2-core CI machine) would run the clocks of the
        # first compiles, which count from when the executor hands them on, not what this test is about
        assert pool.map(abs, [-1, -2]) == [1, 2]
        keys = [pool.submit(rendered(bx, by)) for bx, by in shapes]
        results = [pool.result(k) for k in reversed(keys)]  # the last submitted waits longest
        assert all(r.ok for r in results), [r.error for r in results]


def test_first_ready_returns_none_when_the_search_budget_ends():
    with CompilePool("sm_90", jobs=2, compile_fn=slow_compile, timeout_s=60.0) as pool:
        key = pool.submit(rendered(64, 1))
        t0 = time.monotonic()
        assert pool.first_ready([key], until=t0 + 0.5) is None
        assert 0.4 < time.monotonic() - t0 < 5


def test_closing_the_pool_kills_a_hung_compile():
    pool = CompilePool("sm_90", jobs=2, compile_fn=slow_compile, timeout_s=60.0)
    pool.submit(rendered(64, 1))
    time.sleep(1.0)  # let a process take it
    pids = list(pool._pool._processes)
    assert pids and not all(_gone(pid) for pid in pids)
    pool.close()
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids)


def _gone(pid: int) -> bool:
    """The process has exited: no such pid, or only its zombie is left (the executor's own thread reaps its
    children, so a Process object of ours may never see the exit; /proc does)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")
