"""Seconds from a fresh GPU worker to its first answers, with an empty CuPy kernel cache (as on a new machine).

    python3 benchmarks/first_result.py

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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


if __name__ == "__main__":
    main()
