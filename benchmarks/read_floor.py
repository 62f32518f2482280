"""The read floor: a plain streaming read of GPU arrays, what a memory-bound kernel is measured against.

Each array is read once by a grid-stride loop of 16-byte loads (4 or 8 in flight per thread; 4, 8 or 16 blocks of
256 threads per SM), and the word sum of what was read is checked against CuPy's, so no byte can be skipped.
``graph_ms(arrays)`` reads every array back to back inside one CUDA graph (one kernel per array, as a model's
layers read their weights one after another) and returns the fastest of the six variants: the least time any
kernel that reads each array once can take, launches and all, measured in the same process as the numbers it
bounds. Used by ``models.py`` (the Llama layer at decode) and ``probes/probe_decode_nt.py``. ``flushed_ms(array,
flush, plan)`` times one array's read from a clean L2 the way ``tuned_vs_vendor.py`` times a kernel (the floor of
a decode GEMM's weight read); on Hopper and later it also tries the way a TMA kernel reads: each block streams a
contiguous run of the array into shared memory with bulk copies (``cp.async.bulk``, a ring of 8 chunks of 8 or 16
KiB behind mbarriers) and sums it there, at 1 to 3 blocks per SM. On the H200 that read is the faster one for
32 MiB (12.96 against 14.11 us, 2026-12-03), the grid-stride loads for 112 MiB (31.6 against 32.6 us).
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

# Bulk copies (sm_90+): block b reads bytes [b * per, (b + 1) * per) in chunks of CHUNK through a ring of STAGES
# shared-memory buffers; thread 0 refills a buffer once every thread has summed it (the __syncthreads).
BULK_SOURCE = r"""
template <int CHUNK, int STAGES>
__device__ __forceinline__ void read_bulk(const unsigned char* __restrict__ p, long long nbytes, long long per,
                                          unsigned* __restrict__ sum) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  const long long start = (long long)blockIdx.x * per, end = start + per < nbytes ? start + per : nbytes;
  const int chunks = start < end ? (int)((end - start + CHUNK - 1) / CHUNK) : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s)
      asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto copy = [&](int i) {  // chunk i into buffer i % STAGES, its bytes counted on that buffer's barrier
    const long long off = start + (long long)i * CHUNK;
    const unsigned bytes = (unsigned)(end - off < CHUNK ? end - off : CHUNK);
    const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[i % STAGES]);
    const unsigned dst = (unsigned)__cvta_generic_to_shared(ring + (i % STAGES) * CHUNK);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(p + off), "r"(bytes), "r"(bar) : "memory");
  };
  if (threadIdx.x == 0)
    for (int i = 0; i < STAGES && i < chunks; ++i) copy(i);
  unsigned acc = 0u;
  for (int i = 0; i < chunks; ++i) {
    const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[i % STAGES]), parity = (i / STAGES) & 1;
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.shared.b64 P, [%1], %2; selp.u32 %0, 1, 0, P; }"
                   : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    const long long off = start + (long long)i * CHUNK;
    const int n16 = (int)((end - off < CHUNK ? end - off : CHUNK) / 16);
    const uint4* q = reinterpret_cast<const uint4*>(ring + (i % STAGES) * CHUNK);
    for (int j = threadIdx.x; j < n16; j += blockDim.x) { const uint4 v = q[j]; acc += v.x + v.y + v.z + v.w; }
    __syncthreads();  // every thread is done with buffer i % STAGES: refill it
    if (threadIdx.x == 0 && i + STAGES < chunks) copy(i + STAGES);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) atomicAdd(sum, acc);
}
extern "C" __global__ void read_bulk16k(const unsigned char* p, long long n, long long per, unsigned* sum) {
  read_bulk<16384, 8>(p, n, per, sum);
}
extern "C" __global__ void read_bulk8k(const unsigned char* p, long long n, long long per, unsigned* sum) {
  read_bulk<8192, 8>(p, n, per, sum);
}
"""
# (kernel, bytes of its ring, blocks per SM): every block of a grid resident at once
BULK_VARIANTS = (("read_bulk16k", 8 * 16384, 1), ("read_bulk8k", 8 * 8192, 1), ("read_bulk8k", 8 * 8192, 2),
                 ("read_bulk8k", 8 * 8192, 3))  # fmt: skip
BULK_ALIGN = 4096  # each block's run starts on a 4 KiB boundary (an unaligned start costs the copies extra sectors)


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
    over ``plan``; the variants compared over ``pick_plan`` first where given, a shorter plan). The variants: the
    grid-stride loads, and on sm_90 and later the bulk copies (``BULK_VARIANTS``). verified: each variant's word
    sum of its first read equals CuPy's."""
    from autotune.measure.bench import time_launches

    expected = word_sum(a)
    timed, verified = [], True
    for launch, sums in flushed_launches(a):
        launch()
        verified = verified and int(sums.get()[0]) == expected
        timed.append((time_launches(launch, flush, pick_plan or plan).median_ms, launch))
    best, launch = min(timed, key=lambda t: t[0])
    return (time_launches(launch, flush, plan).median_ms if pick_plan else best), verified


def flushed_launches(a: Any) -> list[tuple[Any, Any]]:
    """(launch, its word-sum cell) per variant that this GPU runs; each launch adds its sum into the cell."""
    import cupy as cp

    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    out = []
    for name, per_sm in VARIANTS:
        fn, sums = _module().get_function(name), cp.zeros(1, dtype=cp.uint32)
        grid, args = (sms * per_sm,), (a, cp.int64(a.nbytes // 16), sums)
        out.append((lambda fn=fn, grid=grid, args=args: fn(grid, (256,), args), sums))
    if int(dev.compute_capability) < 90:
        return out
    for name, ring, per_sm in BULK_VARIANTS:
        fn, sums = _bulk_module().get_function(name), cp.zeros(1, dtype=cp.uint32)
        fn.max_dynamic_shared_size_bytes = ring
        blocks = sms * per_sm
        args = (a, cp.int64(a.nbytes // 16 * 16), cp.int64(bulk_run_bytes(a.nbytes, blocks)), sums)
        out.append((lambda fn=fn, blocks=blocks, args=args, ring=ring: fn((blocks,), (128,), args, shared_mem=ring),
                    sums))  # fmt: skip
    return out


def bulk_run_bytes(nbytes: int, blocks: int) -> int:
    """The bytes each of ``blocks`` blocks of a bulk read streams: the fewest whole 4 KiB (whole 16 bytes for an
    array smaller than 4 KiB a block) that cover ``nbytes``."""
    align = BULK_ALIGN if nbytes >= blocks * BULK_ALIGN else 16
    return -(-nbytes // blocks // align) * align


def _bulk_module() -> Any:
    import cupy as cp

    if len(_MODULE) < 2:
        _module()
        _MODULE.append(cp.RawModule(code=BULK_SOURCE, options=("-std=c++17",)))
    return _MODULE[1]


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
