# ruff: noqa: E501 - the kernels below are CUDA C++ kept in a string
"""How fast the copy pipeline of skinny_wgmma's M = 64 winner can stream its operands with nothing else to do:
B by per-thread cp.async (the template without TMA) against B by the tensor memory accelerator (TMA = true: one
128-column box, or four 32-column boxes in the 128-byte swizzle the template uses, optionally with L2 promotion),
each completing on an mbarrier per stage; A always by cp.async. With --bulk also Hopper's plain bulk copies
(cp.async.bulk, one per row, issued by one warp; ~3x slower, 2026-11-30 05:54).

The kernels keep the template's shapes and ring: grid (1, N / 128, SPLIT_K) blocks of 256 threads; each block
streams its 128 columns of B and the 64 rows of A over its slice of K in chunks of KC rows, through a ring of
STAGES stages (B rows padded to 136 floats, or dense boxes with TMA; A rows padded to KC + 4); one barrier per
chunk, after which the chunk STAGES - 1 ahead is issued into the stage chunk s - 1 used. "Consuming" a chunk is
every thread summing its share of the stage from shared memory (the whole chunk, once), so each variant is
checked: the block sums must add up to sum(B) + (N / 128) sum(A) (float64 on the host), else the variant is
reported wrong and not timed. A plain read of B (float4 loads, grid of 4 blocks an SM) gives this process's
floor. Each launch follows the harness's L2 flush; medians of event-timed launches. The tensor maps are made by
autotune.tensormap and kept in device memory (the kernel reads them by address).

    python3 benchmarks/probe_copy_pipeline.py [--m 64] [--n 4096] [--k 4096] [--out results.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raw_kernels import build, time_if_right  # noqa: E402

from autotune.bench import L2Flusher, TimingPlan, time_launches  # noqa: E402
from autotune.device import current_gpu  # noqa: E402
from autotune.tensormap import tiled_2d_f32  # noqa: E402

PLAN = TimingPlan(warmup=3, min_repeats=40, max_repeats=200, target_ms=30.0)

SOURCE = r"""
constexpr int THREADS = 256, BN = 128, BNP = COPY >= 2 ? BN : BN + 8, MB = MROWS, ALD = KC + 4;
constexpr int STAGE = KC * BNP + MB * ALD;  // floats
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
// B's chunk by the tensor memory accelerator: one 2D box copy (the map in global memory, generic address)
__device__ __forceinline__ void tma2d(void* dst, const void* map, int x, int y, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile("{ .reg .pred p; WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra WAIT_%=; }\n"
               ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
stream(const float* __restrict__ A, const float* __restrict__ B, double* __restrict__ out, int N, int K, int split_k,
       const unsigned char* __restrict__ maps) {
  extern __shared__ __align__(128) float ring[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n0 = blockIdx.y * BN, z = blockIdx.z;
  const int kbeg = z * (K / split_k), nsteps = (K / split_k) / KC;
#if COPY >= 1
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(full + s)));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
#endif
  auto issue = [&](int c, int buf) {
    float* bs = ring + buf * STAGE;
    float* as = bs + KC * BNP;
    if (c < nsteps) {
      const int k0 = kbeg + c * KC;
#if COPY >= 2
      if (tid == 0) {
        unsigned long long state;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
                     : "=l"(state) : "r"(smem_u32(full + buf)), "r"(KC * BN * 4) : "memory");
        for (int q = 0; q < BN / BOXW; ++q) tma2d(bs + q * BOXW * KC, maps, n0 + q * BOXW, k0, full + buf);
      }
      const int ar = tid / (KC / 4), ac = (tid % (KC / 4)) * 4;
#pragma unroll
      for (int p = 0; p < MB * KC / 4 / THREADS; ++p)
        cp_async16(as + (ar + p * (THREADS / (KC / 4))) * ALD + ac, A + (size_t)(ar + p * (THREADS / (KC / 4))) * K + k0 + ac);
#elif COPY == 1
      if (warp == 0) {
        if (lane == 0) {
          unsigned long long state;
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
                       : "=l"(state) : "r"(smem_u32(full + buf)), "r"((KC * BN + MB * KC) * 4) : "memory");
        }
        for (int r = lane; r < KC; r += 32) bulk(bs + r * BNP, B + (size_t)(k0 + r) * N + n0, BN * 4, full + buf);
        for (int r = lane; r < MB; r += 32) bulk(as + r * ALD, A + (size_t)r * K + k0, KC * 4, full + buf);
      }
#else
      const int br = tid / (BN / 4), bc = (tid % (BN / 4)) * 4;  // 8 rows apart
#pragma unroll
      for (int p = 0; p < KC / 8; ++p) cp_async16(bs + (br + 8 * p) * BNP + bc, B + (size_t)(k0 + br + 8 * p) * N + n0 + bc);
      const int ar = tid / (KC / 4), ac = (tid % (KC / 4)) * 4;
#pragma unroll
      for (int p = 0; p < MB * KC / 4 / THREADS; ++p)
        cp_async16(as + (ar + p * (THREADS / (KC / 4))) * ALD + ac, A + (size_t)(ar + p * (THREADS / (KC / 4))) * K + k0 + ac);
#endif
    }
#if COPY != 1
    asm volatile("cp.async.commit_group;\n" ::);
#endif
  };
  float acc = 0.0f;
  for (int c = 0; c < STAGES - 1; ++c) issue(c, c);
  int rd = 0;
  unsigned phase = 0;
  for (int s = 0; s < nsteps; ++s) {
#if COPY >= 2
    bar_wait(full + rd, phase);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2) : "memory");
#elif COPY == 1
    bar_wait(full + rd, phase);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2) : "memory");
#endif
    __syncthreads();  // chunk s landed for everyone; everyone is done with chunk s - 1's stage
    const int wr = rd == 0 ? STAGES - 1 : rd - 1;
    issue(s + STAGES - 1, wr);
    const float* bs = ring + rd * STAGE;
    const float* as = bs + KC * BNP;
    // the whole chunk, once: B rows tid % KC, 16 columns at (tid / KC) * 16; A rows tid % MB, KC * MB / 256 columns
    constexpr int BW = BN * KC / THREADS, AW = MB * KC / THREADS;
#pragma unroll
    for (int i = 0; i < BW; i += 4) {
#if COPY >= 2
      const float4 v = *reinterpret_cast<const float4*>(bs + 4 * tid + THREADS * i);
#else
      const float4 v = *reinterpret_cast<const float4*>(bs + (tid % KC) * BNP + (tid / KC) * BW + i);
#endif
      acc += (v.x + v.y) + (v.z + v.w);
    }
#pragma unroll
    for (int i = 0; i < AW; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(as + (tid % MB) * ALD + (tid / MB) * AW + i);
      acc += (v.x + v.y) + (v.z + v.w);
    }
#if COPY >= 2
    // (the dense B stage summed flat: every element once, whatever the swizzle)
#endif
    if (++rd == STAGES) { rd = 0; phase ^= 1u; }
  }
  out[((size_t)blockIdx.z * gridDim.y + blockIdx.y) * THREADS + tid] = acc;
}

extern "C" __global__ void __launch_bounds__(256) read_all(const float4* __restrict__ x, size_t n4, float* __restrict__ out) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    const float4 v = x[i];
    acc += (v.x + v.y) + (v.z + v.w);
  }
  if (acc == 1234.5f) out[0] = acc;  // keeps the loads
}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--split-k", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--bulk", action="store_true", help="also time per-row cp.async.bulk copies (slow: ~96 us)")
    args = ap.parse_args()
    import cupy as cp
    from cupy_backends.cuda.api import driver

    gpu = current_gpu()
    m, n, k = args.m, args.n, args.k
    rng = cp.random.default_rng(7)
    a = rng.standard_normal((m, k), dtype=cp.float32)
    b = rng.standard_normal((k, n), dtype=cp.float32)
    expect = float(b.astype(cp.float64).sum() + (n // 128) * a.astype(cp.float64).sum())
    scale = float(cp.abs(b).astype(cp.float64).sum() + (n // 128) * cp.abs(a).astype(cp.float64).sum())
    flush = L2Flusher()
    rows = []

    mod = build(SOURCE, "stream", gpu.arch, {"MROWS": m, "KC": 32, "STAGES": 4, "COPY": 0, "BOXW": 1})
    rd = mod.get_function("read_all")
    sink = cp.zeros(1, dtype=cp.float32)
    n4 = b.size // 4
    grid = 4 * gpu.multiprocessors
    t = time_launches(lambda: rd((grid,), (256,), (b, cp.uint64(n4), sink)), flush, PLAN)
    rows.append({"variant": "read B (float4 loads)", "stages": "", "kc": "", "us": t.median_ms * 1e3})

    variants = [  # (name, COPY, BOXW, swizzle, L2 promotion)
        ("cp.async 16 B per thread", 0, 0, 0, 0),
        ("TMA 2D, one 128-col box, no swizzle", 2, 128, 0, 0),
        ("TMA 2D, four 32-col boxes, 128B swizzle", 2, 32, 3, 0),
        ("TMA 2D, four 32-col boxes, 128B swz, L2 256B", 2, 32, 3, 3),
    ]
    if args.bulk:
        variants.insert(1, ("bulk copies (cp.async.bulk + mbarrier)", 1, 0, 0, 0))
    for name, copy, boxw, swizzle, promo in variants:
        for kc in (32,):
            maps = cp.zeros(128, dtype=cp.uint8)
            if copy >= 2:
                tmap = tiled_2d_f32(b.data.ptr, n, k, n * 4, (boxw, kc), swizzle, promo)
                maps.set(np.frombuffer(tmap.tobytes(), dtype=np.uint8))
            for stages in (4, 6, 8):
                stage_floats = kc * (128 if copy >= 2 else 136) + m * (kc + 4)
                shared = stages * stage_floats * 4
                if shared > gpu.max_shared_per_block:
                    continue
                defines = {"MROWS": m, "KC": kc, "STAGES": stages, "COPY": copy, "BOXW": boxw or 1}
                mod = build(SOURCE, "stream", gpu.arch, defines)
                fn = mod.get_function("stream")
                driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
                g = (1, n // 128, args.split_k)
                out = cp.full(g[1] * g[2] * 256, cp.nan, dtype=cp.float64)
                kargs = (a, b, out, cp.int32(n), cp.int32(k), cp.int32(args.split_k), maps)
                fn(g, (256,), kargs, shared_mem=shared)
                got = float(out.sum())
                row = {"variant": name, "stages": stages, "kc": kc}

                def launch(fn=fn, g=g, kargs=kargs, shared=shared):
                    fn(g, (256,), kargs, shared_mem=shared)

                row.update(time_if_right(got, expect, scale, launch, flush, PLAN))
                rows.append(row)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"{gpu.name}  {now}  M={m} N={n} K={k} split-K {args.split_k}  (B {k * n * 4 / 2**20:.0f} MiB)")
    print(f"{'variant':<42} {'stages':>6} {'kc':>4} {'us':>8}  {'B TB/s':>7}")
    for r in rows:
        tbs = k * n * 4 / (r["us"] * 1e-6) / 1e12 if r["us"] == r["us"] else float("nan")
        print(
            f"{r['variant']:<42} {r['stages']!s:>6} {r['kc']!s:>4} {r['us']:>8.2f}  {tbs:>7.2f}  {r.get('wrong', '')}"
        )
    if args.out:
        args.out.write_text(json.dumps({"gpu": gpu.name, "date": now, "shape": [m, n, k], "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
