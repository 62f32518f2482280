"""The read floor: a plain streaming read of GPU arrays, what a memory-bound kernel is measured against.

Each array is read once by a grid-stride loop of 16-byte loads (4 or 8 in flight per thread; 4, 8 or 16 blocks of
256 threads per SM), and the word sum of what was read is checked against CuPy's, so no byte can be skipped.
``graph_ms(arrays)`` reads every array back to back inside one CUDA graph (one kernel per array, as a model's
layers read their weights one after another) and returns the fastest of the six variants: the least time any
kernel that reads each array once can take, launches and all, measured in the same process as the numbers it
bounds. Used by ``models.py`` (the Llama layer at decode) and ``probes/probe_decode_nt.py``. ``flushed_ms(array,
flush, plan)`` times one array's read from a clean L2 the way ``tuned_vs_vendor.py`` times a kernel (the floor of
a decode GEMM's weight read).
"""

from __future__ import annotations

import statistics
from typing import Any

SOURCE = r"""
template <int U>
__device__ __forceinline__ void read_all(const uint4* __restrict__ p, long long n4, unsigned* __restrict__ sum) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  unsigned acc = 0u;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n4; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldg(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n4; i += stride) { const uint4 v = __ldg(p + i); acc += v.x + v.y + v.z + v.w; }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) atomicAdd(sum, acc);  // the word sum mod 2^32: every byte must have been read
}
extern "C" __global__ void read_floor4(const uint4* __restrict__ p, long long n4, unsigned* __restrict__ sum) {
  read_all<4>(p, n4, sum);
}
extern "C" __global__ void read_floor8(const uint4* __restrict__ p, long long n4, unsigned* __restrict__ sum) {
  read_all<8>(p, n4, sum);
}
"""

VARIANTS = tuple((name, per_sm) for name in ("read_floor4", "read_floor8") for per_sm in (4, 8, 16))
_MODULE: list[Any] = []


def _module() -> Any:
    import cupy as cp

    if not _MODULE:
        _MODULE.append(cp.RawModule(code=SOURCE, options=("-std=c++17",)))
    return _MODULE[0]


def word_sum(a: Any) -> int:
    """The sum of ``a``'s whole 16-byte groups read as 32-bit words, mod 2^32 (what the kernel adds up)."""
    import cupy as cp

    words = a.reshape(-1).view(cp.uint32)[: a.nbytes // 16 * 4]
    return int(words.astype(cp.uint64).sum()) % (1 << 32)


def graph_ms(arrays: list[Any], repeats: int = 15, target_ms: float = 20.0) -> tuple[float, bool]:
    """(ms, verified): the fastest variant's time to read every array of ``arrays`` (CuPy, C-contiguous, any
    dtype) once, back to back in one CUDA graph; median of ``repeats`` loops of about ``target_ms`` of replays.
    verified: every variant's word sums equal CuPy's."""
    import cupy as cp

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    expected = [word_sum(a) for a in arrays]
    stream = cp.cuda.Stream(non_blocking=True)
    best, verified = float("inf"), True
    for name, per_sm in VARIANTS:
        fn = _module().get_function(name)
        sums = cp.zeros(len(arrays), dtype=cp.uint32)
        calls = [((sms * per_sm,), (256,), (a, cp.int64(a.nbytes // 16), sums[i : i + 1]))
                 for i, a in enumerate(arrays)]  # fmt: skip
        with stream:
            for grid, block, args in calls:  # checked outside the graph: one pass, then the sums
                fn(grid, block, args)
            stream.synchronize()
            verified = verified and [int(s) for s in sums.get()] == expected
            stream.begin_capture()
            for grid, block, args in calls:
                fn(grid, block, args)
            graph = stream.end_capture()
        best = min(best, _time(graph, stream, repeats, target_ms))
    return best, verified


def flushed_ms(a: Any, flush: Any, plan: Any, pick_plan: Any = None) -> tuple[float, bool]:
    """(ms, verified): the fastest variant's time to read ``a`` once from a clean L2, timed as the kernels it
    bounds are (``autotune.measure.bench.time_launches``: event-timed launches, ``flush`` before each, the median
    over ``plan``; the variants compared over ``pick_plan`` first where given, a shorter plan). verified: each
    variant's word sum of its first read equals CuPy's."""
    import cupy as cp

    from autotune.measure.bench import time_launches

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    expected = word_sum(a)
    timed, verified = [], True
    for name, per_sm in VARIANTS:
        fn = _module().get_function(name)
        sums = cp.zeros(1, dtype=cp.uint32)
        grid, args = (sms * per_sm,), (a, cp.int64(a.nbytes // 16), sums)
        fn(grid, (256,), args)
        verified = verified and int(sums.get()[0]) == expected
        launch = lambda fn=fn, grid=grid, args=args: fn(grid, (256,), args)  # noqa: E731
        timed.append((time_launches(launch, flush, pick_plan or plan).median_ms, launch))
    best, launch = min(timed, key=lambda t: t[0])
    return (time_launches(launch, flush, plan).median_ms if pick_plan else best), verified


def _time(graph: Any, stream: Any, repeats: int, target_ms: float) -> float:
    import cupy as cp

    start, end = cp.cuda.Event(), cp.cuda.Event()
    graph.launch(stream)
    start.record(stream)
    graph.launch(stream)
    end.record(stream)
    end.synchronize()
    n = max(1, min(2000, round(target_ms / max(cp.cuda.get_elapsed_time(start, end), 1e-3))))
    times = []
    for _ in range(repeats):
        start.record(stream)
        for _ in range(n):
            graph.launch(stream)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / n)
    return statistics.median(times)
