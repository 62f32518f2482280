"""What streaming the B of a skinny GEMM can cost on this GPU, measured by the search's own harness, next to
cuBLAS and the tensor-core skinny template (skinny_tc, 3xTF32) on the judged skinny shapes.

The skinny goals of the GEMM issue are ratios to cuBLAS timed in the same process. Whether a goal is reachable
depends on how fast the bytes can move at all, so this measures it instead of quoting the 4.2 TB/s copy figure:
  read     a kernel that only reads a buffer of B's size (float4 loads, U in flight per thread, one store a block)
  copy     reads it and writes a copy (bytes counted twice)
each over a few grid shapes, the best reported, timed like every candidate: median of event-timed launches,
each after the L2 flush (which writes twice the L2 size, so the timed kernel also pays the write-back of those
dirty lines, as every kernel and cuBLAS do in these tables). A second read column uses a flush that only reads,
leaving L2 clean, to show what that write-back costs. Then cuBLAS (cupy.matmul) for fp32 and fp16 at
M x 4096 x 4096, and skinny_tc configurations (verified against the float32 tolerance first).

    python3 benchmarks/probes/probe_stream_ceiling.py [--out benchmarks/results/stream_ceiling.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.measure.bench import L2Flusher, TimingPlan, time_launches  # noqa: E402

PLAN = TimingPlan(warmup=3, min_repeats=40, max_repeats=200, target_ms=30.0)

SOURCE = r"""
template <int U>
__device__ __forceinline__ void stream(const float4* __restrict__ p, float4* __restrict__ q, long long n4, float* out) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (; i + (U - 1) * stride < n4; i += U * stride) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldg(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (q) q[i + u * stride] = v[u];
      else acc += v[u].x + v[u].y + v[u].z + v[u].w;
    }
  }
  for (; i < n4; i += stride) {
    const float4 v = __ldg(p + i);
    if (q) q[i] = v;
    else acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1.2345e-30f) out[blockIdx.x] = acc;  // never true for these inputs; keeps the loads alive
}
extern "C" __global__ void read4(const float4* p, long long n4, float* out) { stream<4>(p, nullptr, n4, out); }
extern "C" __global__ void read8(const float4* p, long long n4, float* out) { stream<8>(p, nullptr, n4, out); }
extern "C" __global__ void copy4(const float4* p, float4* q, long long n4, float* out) { stream<4>(p, q, n4, out); }
extern "C" __global__ void copy8(const float4* p, float4* q, long long n4, float* out) { stream<8>(p, q, n4, out); }
"""

TC_CONFIGS = {
    8: [dict(WARPS=4, CW=2, MB=8, KC=32, STAGES=4, SPLIT_K=8, MINB=2)],
    16: [dict(WARPS=4, CW=2, MB=16, KC=16, STAGES=4, SPLIT_K=8, MINB=2)],
    32: [dict(WARPS=4, CW=1, MB=32, KC=32, STAGES=4, SPLIT_K=8, MINB=2)],
    64: [dict(WARPS=4, CW=1, MB=64, KC=16, STAGES=4, SPLIT_K=8, MINB=2),
         dict(WARPS=8, CW=1, MB=64, KC=16, STAGES=4, SPLIT_K=8, MINB=1),
         dict(WARPS=4, CW=1, MB=32, KC=32, STAGES=4, SPLIT_K=8, MINB=2)],
}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "stream_ceiling.json")
    args = ap.parse_args()

    import cupy as cp

    from autotune.core.device import current_gpu
    from autotune.core.space import Config
    from autotune.kernels.gemm import GEMM
    from autotune.measure.evaluate import Candidate, Settings, evaluate
    from autotune.measure.verify import tolerance_for

    gpu = current_gpu()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    flush = L2Flusher()
    l2 = cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
    clean_buf = cp.ones(2 * l2 // 4, dtype=cp.float32)

    def clean_flush() -> None:  # reads twice the L2: evicts everything, leaves only clean lines
        clean_buf.sum()

    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    rows: list[dict] = []
    out = cp.zeros(1 << 16, dtype=cp.float32)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"{gpu.name}  {sms} SMs  L2 {l2 >> 20} MiB  {now}")
    head = f"{'buffer':<26} {'kernel':<8} {'grid':<14} {'us':>8} {'TB/s':>6}"
    print(f"\n{head}   (best of the grids; L2 flush as the harness)")
    for label, nbytes in (("fp32 4096x4096 (64 MiB)", 4096 * 4096 * 4), ("fp16 4096x4096 (32 MiB)", 4096 * 4096 * 2)):
        src = cp.random.default_rng(0).standard_normal(nbytes // 4, dtype=cp.float32)
        dst = cp.empty_like(src)
        n4 = nbytes // 16
        for kname in ("read4", "read8", "copy4", "copy8"):
            fn = mod.get_function(kname)
            best = None
            for threads in (256, 512, 1024):
                for per_sm in (1, 2, 4, 8):
                    if threads * per_sm > 2048:
                        continue
                    grid = (sms * per_sm,)
                    a = (src, cp.int64(n4), out) if kname.startswith("read") else (src, dst, cp.int64(n4), out)
                    t = time_launches(
                        lambda fn=fn, grid=grid, threads=threads, a=a: fn(grid, (threads,), a), flush, PLAN
                    )
                    if best is None or t.median_ms < best[0].median_ms:
                        best = (t, f"{grid[0]}x{threads}", a, fn, grid, threads)
            t, gtxt, a, fn, grid, threads = best
            moved = nbytes * (2 if kname.startswith("copy") else 1)
            clean = None
            if kname.startswith("read"):
                clean = time_launches(lambda fn=fn, grid=grid, threads=threads, a=a: fn(grid, (threads,), a),
                                      clean_flush, PLAN)  # fmt: skip
            us = t.median_ms * 1e3
            clean_us = clean.median_ms * 1e3 if clean else None
            rows.append({"what": kname, "buffer": label, "bytes": moved, "grid": gtxt, "us": us,
                         "tbs": moved / us / 1e6, "clean_flush_us": clean_us})  # fmt: skip
            extra = f"   clean-flush {clean.median_ms * 1e3:7.2f} us" if clean else ""
            print(f"{label:<26} {kname:<8} {gtxt:<14} {us:8.2f} {moved / us / 1e6:6.2f}{extra}")

    settings = Settings(arch=gpu.arch, tolerance=tolerance_for("float32"), max_shared_bytes=gpu.max_shared_per_block,
                        timing=PLAN)  # fmt: skip
    print(f"\n{'M x 4096 x 4096':<16} {'dtype':<8} {'what':<58} {'us':>8} {'TB/s':>6} {'x cuBLAS':>8} {'error':>9}")
    for dtype in ("float32", "float16"):
        for m in (1, 8, 16, 32, 64):
            problem = GEMM.problem([m, 4096, 4096], dtype, "NN")
            inputs = GEMM.make_inputs(problem, seed=1)
            _, vendor_launch = GEMM.vendor(problem, inputs)
            v = time_launches(vendor_launch, flush, PLAN).median_ms * 1e3
            rows.append(
                {"what": "cuBLAS", "shape": problem.label, "dtype": dtype, "us": v, "tbs": problem.bytes / v / 1e6}
            )
            vendor_name = "cuBLAS (cupy.matmul)"
            print(
                f"{problem.label:<16} {dtype:<8} {vendor_name:<58} {v:8.2f} {problem.bytes / v / 1e6:6.2f} {1.0:8.2f}"
            )
            if dtype != "float32":
                continue
            for params in TC_CONFIGS.get(m, []):
                r = evaluate(Candidate("gemm", "skinny_tc", problem, Config.of(params)), settings, flush)
                if r.timing is None:
                    print(f"{problem.label:<16} {dtype:<8} {r.kernel_name:<58} {r.status.value}: {r.reason}")
                    rows.append({"what": r.kernel_name, "shape": problem.label, "dtype": dtype,
                                 "status": r.status.value, "reason": r.reason})  # fmt: skip
                    continue
                us = r.timing.median_ms * 1e3
                rows.append({"what": r.kernel_name, "shape": problem.label, "dtype": dtype, "us": us,
                             "x_cublas": v / us, "tbs": problem.bytes / us / 1e6, "error": r.error,
                             "status": r.status.value})  # fmt: skip
                print(f"{problem.label:<16} {dtype:<8} {r.kernel_name[len('gemm_skinny_tc_f32_nn_'):]:<58} {us:8.2f} "
                      f"{problem.bytes / us / 1e6:6.2f} {v / us:8.2f} {r.error:9.2e}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": gpu.name, "sms": sms, "date": now, "cupy": cp.__version__,
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion()}  # fmt: skip
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
