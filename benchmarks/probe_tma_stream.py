# ruff: noqa: E501 - the kernel below is CUDA C++ kept in a string
"""How fast the tensor memory accelerator (TMA) streams a buffer of B's size through shared memory in this
harness, next to the plain-load floor of benchmarks/probe_stream_ceiling.py: whether the skinny goals that ask for
less time than that floor (benchmarks/README.md, "Skinny shapes") could come within reach with TMA copies.

The kernel reads a row-major 4096 x 4096 float32 (or float16) matrix in boxes of BOX_W columns x BOX_H rows: block
b takes boxes b, b + grid, ... (row-major order of boxes), thread 0 issues them into a ring of STAGES shared
buffers, each completing on its mbarrier; every thread sums its share of a landed box, the block meets at a
barrier, and the freed buffer gets the box STAGES ahead. The sums are checked against the host's (float64) before
anything is timed. Each launch follows the harness's L2 flush; medians of event-timed launches. Grids of 1 and 2
blocks an SM, a few box shapes and ring depths; plain float4 loads (grid-stride, 4 in flight per thread) in the
same process for comparison.

    python3 benchmarks/probe_tma_stream.py [--out results.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raw_kernels import build, time_if_right  # noqa: E402

from autotune.bench import L2Flusher, TimingPlan, time_launches  # noqa: E402
from autotune.device import current_gpu  # noqa: E402
from autotune.tensormap import SWIZZLE_128B, tiled_2d_f32  # noqa: E402

PLAN = TimingPlan(warmup=3, min_repeats=40, max_repeats=200, target_ms=30.0)

SOURCE = r"""
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
extern "C" __global__ void __launch_bounds__(THREADS) tma_read(const __grid_constant__ TensorMap map, int boxes_x, int boxes, double* __restrict__ out) {
  extern __shared__ __align__(128) float smem[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  float* ring = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u) / 4;  // boxes on 1024-byte boundaries
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(full + s)));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int mine = (boxes - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;  // boxes of this block
  auto issue = [&](int j, int s) {
    if (tid == 0 && j < mine) {
      const int box = (int)blockIdx.x + j * (int)gridDim.x, bx = box % boxes_x, by = box / boxes_x;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(full + s)), "r"(BOX_BYTES) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                   ::"r"(smem_u32(ring + s * (BOX_BYTES / 4))), "l"(reinterpret_cast<unsigned long long>(&map)),
                     "r"(bx * BOX_W), "r"(by * BOX_H), "r"(smem_u32(full + s)) : "memory");
    }
  };
  for (int s = 0; s < STAGES; ++s) issue(s, s);
  float acc = 0.0f;
  unsigned phase = 0;
  for (int j = 0, s = 0; j < mine; ++j) {
    asm volatile("{ .reg .pred p; WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra WAIT_%=; }\n"
                 ::"r"(smem_u32(full + s)), "r"(phase) : "memory");
    const float4* v = reinterpret_cast<const float4*>(ring + s * (BOX_BYTES / 4));
#pragma unroll 4
    for (int i = tid; i < BOX_BYTES / 16; i += THREADS) {
      const float4 x = v[i];
      acc += (x.x + x.y) + (x.z + x.w);
    }
    __syncthreads();  // everyone is done with buffer s
    issue(j + STAGES, s);
    if (++s == STAGES) { s = 0; phase ^= 1u; }
  }
  out[(size_t)blockIdx.x * THREADS + tid] = acc;
}
extern "C" __global__ void __launch_bounds__(256) read_all(const float4* __restrict__ x, long long n4, float* __restrict__ out) {
  float acc = 0.0f;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n4; i += 4 * stride) {
    const float4 a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
    acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) + (d.x + d.y + d.z + d.w);
  }
  for (; i < n4; i += stride) { const float4 a = x[i]; acc += a.x + a.y + a.z + a.w; }
  if (acc == 1234.5f) out[0] = acc;  // keeps the loads
}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import cupy as cp
    from cupy_backends.cuda.api import driver

    gpu = current_gpu()
    rows, cols = args.rows, args.cols
    b = cp.random.default_rng(5).standard_normal((rows, cols), dtype=cp.float32)
    expect = float(b.astype(cp.float64).sum())
    scale = float(cp.abs(b).astype(cp.float64).sum())
    nbytes = b.nbytes
    flush = L2Flusher()
    results = []

    mod = build(
        SOURCE, "read_all", gpu.arch, {"THREADS": 256, "STAGES": 2, "BOX_W": 32, "BOX_H": 32, "BOX_BYTES": 4096}
    )
    rd = mod.get_function("read_all")
    sink = cp.zeros(1, dtype=cp.float32)
    for per_sm in (2, 4, 8):
        grid = per_sm * gpu.multiprocessors
        t = time_launches(lambda grid=grid: rd((grid,), (256,), (b, cp.int64(b.size // 4), sink)), flush, PLAN)
        results.append({"variant": f"float4 loads, {per_sm} blocks of 256 an SM", "us": t.median_ms * 1e3})

    # (box columns, box rows, swizzle, blocks an SM, ring stages): 128-byte rows swizzled, or wider boxes
    # unswizzled (an inner box of at most 256 elements); 64-192 KB in flight an SM
    shapes = [(32, 64, SWIZZLE_128B, 1, 12), (32, 64, SWIZZLE_128B, 2, 8), (64, 64, 0, 1, 6), (64, 64, 0, 2, 4),
              (256, 32, 0, 1, 4), (256, 32, 0, 1, 6), (256, 32, 0, 2, 3)]  # fmt: skip
    for box_w, box_h, swizzle, per_sm, stages in shapes:
        box_bytes = box_w * box_h * 4
        tmap = tiled_2d_f32(b.data.ptr, cols, rows, cols * 4, (box_w, box_h), swizzle)
        boxes_x, boxes = cols // box_w, (cols // box_w) * (rows // box_h)
        shared = stages * box_bytes + 1024  # and the alignment of the ring
        if shared > gpu.max_shared_per_block or per_sm * (shared + 1024) > 233472:
            continue
        defines = {"THREADS": 256, "STAGES": stages, "BOX_W": box_w, "BOX_H": box_h, "BOX_BYTES": box_bytes}
        fn = build(SOURCE, "tma_read", gpu.arch, defines).get_function("tma_read")
        driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        grid = per_sm * gpu.multiprocessors
        out = cp.full(grid * 256, cp.nan, dtype=cp.float64)
        kargs = (tmap, cp.int32(boxes_x), cp.int32(boxes), out)
        fn((grid,), (256,), kargs, shared_mem=shared)
        got = float(out.sum())
        row = {
            "variant": f"TMA {box_w}x{box_h} boxes, {stages} stages, {per_sm} block(s) an SM",
            "us": float("nan"),
        }

        def launch(fn=fn, grid=grid, kargs=kargs, shared=shared):
            fn((grid,), (256,), kargs, shared_mem=shared)

        row.update(time_if_right(got, expect, scale, launch, flush, PLAN))
        results.append(row)

    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"{gpu.name}  {now}  read {rows} x {cols} float32 ({nbytes / 2**20:.0f} MiB), L2 flushed before each launch")
    print(f"{'variant':<52} {'us':>8} {'TB/s':>6}")
    for r in results:
        tbs = nbytes / (r["us"] * 1e-6) / 1e12 if r["us"] == r["us"] else float("nan")
        print(f"{r['variant']:<52} {r['us']:>8.2f} {tbs:>6.2f}  {r.get('wrong', '')}")
    if args.out:
        meta = {"gpu": gpu.name, "date": now, "bytes": nbytes, "cupy": cp.__version__}
        args.out.write_text(json.dumps({**meta, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
