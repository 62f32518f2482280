"""Seconds from a fresh GPU worker to its first answers, with an empty CuPy kernel cache (as on a new machine).

    python3 benchmarks/probes/first_result.py

Spawns the worker, asks for the vendor timing of fp32 4096^3, then verifies and times one SIMT candidate
(compiled here first); prints the seconds of each step. Run before and after a start-up change.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy_cache_")  # before CuPy is imported anywhere
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.compiler import compile_source  # noqa: E402
from autotune.device import current_gpu  # noqa: E402
from autotune.evaluate import Candidate, Settings, finish, render_candidate  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.search import SEARCH_PLAN  # noqa: E402
from autotune.space import Config  # noqa: E402
from autotune.worker import GPUWorker  # noqa: E402

PARAMS = dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)


def main() -> None:
    t0 = time.perf_counter()
    gpu = current_gpu()
    problem = FAMILIES["gemm"].problem([4096, 4096, 4096], "float32")
    settings = Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block, timing=SEARCH_PLAN)
    marks = {"current_gpu": time.perf_counter() - t0}
    with GPUWorker() as worker:
        worker.warm()
        c = render_candidate(Candidate("gemm", "simt", problem, Config.of(PARAMS)), settings)
        compiled = finish(c, compile_source(c.source, c.kernel_name, gpu.arch), settings)
        marks["compiled (in parallel with the worker's start)"] = time.perf_counter() - t0
        worker.vendor("gemm", problem, SEARCH_PLAN)
        marks["vendor timed"] = time.perf_counter() - t0
        r = worker.measure(compiled, settings)
        marks[f"first candidate {r.status.value}"] = time.perf_counter() - t0
    for k, v in marks.items():
        print(f"{v:7.2f} s  {k}")
    steps(compiled, settings)


def steps(compiled, settings) -> None:
    """The same first candidate in this process, step by step, with another empty CuPy cache."""
    os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy_cache_")
    import cupy as cp

    from autotune import verify
    from autotune.bench import L2Flusher, time_launches
    from autotune.evaluate import load_kernel, make_fixture

    family, problem = FAMILIES["gemm"], compiled.candidate.problem
    params = compiled.candidate.config.as_dict()
    t = time.perf_counter()

    def mark(what: str) -> None:
        nonlocal t
        cp.cuda.Device().synchronize()
        now = time.perf_counter()
        print(f"{now - t:7.2f} s  {what}")
        t = now

    cp.zeros(1).sum()
    mark("context and a first kernel")
    fixture = make_fixture("gemm", problem, seed=1)
    mark("fixture: inputs and float64 reference")
    launch = family.launch("simt", params, problem)
    fn = load_kernel(compiled.compiled, launch.shared_bytes)
    out = family.new_output(problem)
    args = family.kernel_args(problem, fixture.inputs, out)
    verify.poison(out)
    mark("load the cubin, poison the output")
    fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
    mark("first launch")
    verdict = verify.compare(out, fixture.reference, settings.tolerance)
    mark(f"compare ({verdict.ok})")
    flush = L2Flusher()
    mark("L2 flusher")
    time_launches(lambda: fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes), flush, settings.timing)
    mark("timing (search plan)")


if __name__ == "__main__":
    main()
