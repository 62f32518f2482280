"""3xTF32 on the warpgroup tensor cores (wgmma_tf32x3) against cuBLAS SGEMM in one process: time, and accuracy on
the same inputs, normal and with a wide dynamic range.

    python3 benchmarks/probes/probe_tf32x3.py [--shapes 4096x4096x4096 ...] [--splits 2 4 ...] [--out FILE]

Configurations: CONFIGS (one split each, some with PREFETCH), then each of SPLIT_BASES with every SPLIT_K of
--splits, left out where the problem has at least two tiles per SM (there split-K only adds partial traffic)
unless --all-splits; the JSON keeps every configuration's time next to the fastest.

Time: each configuration verified against float64 with the fp32 tolerance first, then the median of event-timed
launches with L2 flushed before each (autotune.measure.evaluate); cuBLAS is cupy.matmul, timed the same way.
Accuracy: the relative Frobenius error against float64 of ours (the fastest configuration) and of cuBLAS on (a)
standard normal inputs and (b) inputs whose elements are normal values times 2^u, u uniform in [-16, 16]
(the wide range).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.core.device import current_gpu  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.bench import L2Flusher, TimingPlan  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, evaluate, load_kernel, prepare, time_vendor  # noqa: E402

GEMM = FAMILIES["gemm"]
SHAPES = ["4096x4096x4096", "8192x8192x8192", "128x4096x4096", "1000x1000x1000"]
T = dict(BN=128, PRODUCERS=1, CONSUMERS=2, STAGES=3, ROUND=256, RASTER=8, SPLIT_K=1)
CONFIGS = [
    T,
    dict(T, BN=64, STAGES=4),
    dict(T, BN=64, PRODUCERS=2, STAGES=4),
    dict(T, BN=64, PRODUCERS=2, STAGES=4, RASTER=16),
    dict(T, BN=64, PRODUCERS=2, CONSUMERS=1, STAGES=4),
    dict(T, PRODUCERS=2, CONSUMERS=1, STAGES=4),
    dict(T, BN=64, PRODUCERS=3, CONSUMERS=1, STAGES=4),
    dict(T, BN=64, PRODUCERS=1, CONSUMERS=1, STAGES=2, ROUND=256),
    # PREFETCH: a producer's next stage loaded before the current one is stored (128 x 128 tiles: setmaxnreg)
    dict(T, PREFETCH=True),
    dict(T, CONSUMERS=1, STAGES=4, PREFETCH=True),
    dict(T, PRODUCERS=2, CONSUMERS=1, STAGES=4, PREFETCH=True),
    dict(T, BN=64, STAGES=4, PREFETCH=True),
    dict(T, BN=64, PRODUCERS=2, CONSUMERS=1, STAGES=4, PREFETCH=True),
]
SPLIT_BASES = [
    T,
    dict(T, BN=64, PRODUCERS=2, STAGES=4),
    dict(T, PRODUCERS=2, CONSUMERS=1, STAGES=4),
    dict(T, PRODUCERS=2, CONSUMERS=1, STAGES=4, PREFETCH=True),
    dict(T, PREFETCH=True),
]
SPLITS = [2, 3, 4, 6, 8]


def configs(problem, splits: list[int], sms: int, every: bool) -> list[dict]:
    """CONFIGS, then the split-K configurations worth timing on this problem."""
    from autotune.kernels import gemm_wgmma_tf32x3 as wt

    out = list(CONFIGS)
    for base in SPLIT_BASES:
        if not every and wt.tiles(base, problem) >= 2 * sms:
            continue
        out += [dict(base, SPLIT_K=s) for s in splits if wt.splits(dict(base, SPLIT_K=s), problem) == s]
    return out


def errors(settings, params, problem) -> dict:
    """Relative errors against float64 of ours and of cuBLAS on normal and wide-range inputs."""
    import cupy as cp

    c = prepare(Candidate("gemm", "wgmma_tf32x3", problem, Config.of(params)), settings)
    launch = GEMM.launch("wgmma_tf32x3", params, problem)
    fn = load_kernel(c.compiled, launch.shared_bytes)
    scratch = GEMM.new_scratch("wgmma_tf32x3", params, problem)
    rng = cp.random.default_rng(11)
    out = {}
    for kind in ("normal", "wide"):
        a = rng.standard_normal((problem.M, problem.K), dtype=cp.float32)
        b = rng.standard_normal((problem.K, problem.N), dtype=cp.float32)
        if kind == "wide":
            a *= cp.exp2(rng.integers(-16, 17, a.shape).astype(cp.float32))
            b *= cp.exp2(rng.integers(-16, 17, b.shape).astype(cp.float32))
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        c_ours = cp.full((problem.M, problem.N), cp.nan, dtype=cp.float32)
        fn(launch.grid, launch.block, GEMM.kernel_args(problem, (a, b), c_ours, 1.0, 0.0, scratch),
           shared_mem=launch.shared_bytes)  # fmt: skip
        c_cublas = a @ b
        norm = float(cp.linalg.norm(ref))
        out[kind] = {"ours": float(cp.linalg.norm(c_ours - ref)) / norm,
                     "cublas": float(cp.linalg.norm(c_cublas - ref)) / norm}  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--splits", nargs="+", type=int, default=SPLITS, help="SPLIT_K values tried on SPLIT_BASES")
    ap.add_argument("--all-splits", action="store_true", help="split-K on every shape, however many tiles it has")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    gpu = current_gpu()
    plan = TimingPlan(target_ms=100.0, max_repeats=50)
    settings = Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block, timing=plan)
    flush = L2Flusher()
    rows = []
    print(f"{'shape':>16} {'ours us':>9} {'SGEMM us':>9} {'x SGEMM':>8} {'TFLOP/s':>8}  err normal (ours / cuBLAS)"
          "  err wide (ours / cuBLAS)  kernel")  # fmt: skip
    for shape in args.shapes:
        problem = GEMM.problem(shape, "float32")
        vname, vt = time_vendor("gemm", problem, flush, plan)
        best, tried = None, []
        for params in configs(problem, args.splits, gpu.multiprocessors, args.all_splits):
            r = evaluate(Candidate("gemm", "wgmma_tf32x3", problem, Config.of(params)), settings)
            tried.append({"params": params, "status": str(r.status), "ms": r.median_ms if r.ok else None,
                          "error": r.error, "reason": r.reason})  # fmt: skip
            print(f"{shape:>16}   {r.status!s:>10} {1e3 * r.median_ms if r.ok else float('nan'):9.1f} us  err "
                  f"{r.error}  {r.kernel_name} {r.reason or ''}", flush=True)  # fmt: skip
            if r.ok and (best is None or r.median_ms < best[0].median_ms):
                best = (r, params)
        if best is None:
            continue
        r, params = best
        err = errors(settings, params, problem)
        row = {"shape": shape, "kernel": r.kernel_name, "params": params, "ours_ms": r.median_ms, "tflops": r.tflops,
               "cublas_ms": vt.median_ms, "x_cublas": vt.median_ms / r.median_ms, "errors": err,
               "tried": tried}  # fmt: skip
        rows.append(row)
        print(f"{shape:>16} {1e3 * r.median_ms:9.1f} {1e3 * vt.median_ms:9.1f} {row['x_cublas']:8.2f} "
              f"{r.tflops:8.1f}  {err['normal']['ours']:.1e} / {err['normal']['cublas']:.1e}      "
              f"{err['wide']['ours']:.1e} / {err['wide']['cublas']:.1e}     {r.kernel_name}", flush=True)  # fmt: skip
    if args.out:
        meta = {"gpu": gpu.name, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "vendor": "cupy.matmul"}
        args.out.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
