"""Quick look before tuning: a few hand-picked configurations per template, verified and timed against
the vendor library in this process. Prints one row per (config, shape); never stops at a failure.

    python3 benchmarks/probes/probe_templates.py [--template wmma [mma ...]] [--dtype float16] \\
        [--shapes 4096x4096x4096 ...]
    python3 benchmarks/probes/probe_templates.py --template mma wmma --shapes 8192x8192x8192 4096x4096x4096
    python3 benchmarks/probes/probe_templates.py --template skinny_wgmma skinny_tc --dtype float32 --shapes 64x4096x4096
    python3 benchmarks/probes/probe_templates.py --template skinny_wgmma --dtype float32 --shapes 64x4096x4096 \\
        --config '{"WG": 2, "MB": 64, "KC": 32, "STAGES": 6, ...}'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autotune.core.device import current_gpu
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.bench import L2Flusher, TimingPlan
from autotune.measure.evaluate import Candidate, Settings, evaluate, time_vendor
from autotune.measure.verify import tolerance_for

GEMM = FAMILIES["gemm"]
W = dict(FRAG="m16n16k16", WARPS_M=2, WARPS_N=2, FRAGS_M=4, FRAGS_N=4, BK=32, PAD=8, STAGES=3, SPLIT_K=1, RASTER=1)
MMA = dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=True, RASTER=8)
WGM = dict(WG=2, MB=64, KC=32, STAGES=4, ROUND=128, SPLIT_K=4, CLUSTER=True, MINB=1)
WG = dict(BM=128, BN=256, CONSUMERS=2, STAGES=4, RASTER=8, CLUSTER_M=1, TMA_STORE=False)
CONFIGS = {
    # wgmma + TMA, warp-specialized and persistent (sm_90a)
    "wgmma": [
        WG,
        dict(WG, CLUSTER_M=2),
        dict(WG, STAGES=3, TMA_STORE=True),
        dict(WG, STAGES=3, CLUSTER_M=2, TMA_STORE=True),
        dict(WG, BM=256, BN=128, CLUSTER_M=2),
        dict(WG, BM=256, BN=128, STAGES=3, CLUSTER_M=2, TMA_STORE=True),
        dict(WG, BN=192, CLUSTER_M=2, TMA_STORE=True),
        dict(WG, BN=192, STAGES=5, CLUSTER_M=2),
        dict(WG, BN=128, STAGES=6, CLUSTER_M=2),
        dict(WG, BN=128, STAGES=5, CLUSTER_M=2, TMA_STORE=True),
        dict(WG, CLUSTER_M=2, RASTER=16),
    ],
    "wmma": [
        W,
        dict(W, WARPS_N=4, RASTER=8),
        dict(W, WARPS_M=4, RASTER=8),
        dict(W, WARPS_N=4, STAGES=4, RASTER=8),
        dict(W, WARPS_N=4, BK=64, STAGES=3, RASTER=8, PAD=0),
        dict(W, WARPS_M=4, WARPS_N=2, FRAGS_M=2, FRAGS_N=4, RASTER=8),
        dict(W, FRAGS_N=8, FRAGS_M=2, WARPS_N=2, RASTER=8),
        dict(W, WARPS_N=4, PAD=16, RASTER=8),
    ],
    # mma.sync + ldmatrix: the first candidates (128x256 and 256x128 blocks of 64x64 warp tiles)
    "mma": [
        MMA,
        dict(MMA, BM=256, BN=128),
        dict(MMA, STAGES=3),
        dict(MMA, BK=64, STAGES=3),
        dict(MMA, BN=128, STAGES=4),
        dict(MMA, BN=128, BK=64, WN=32, STAGES=3),
        dict(MMA, SWIZZLE=False),
        dict(MMA, RASTER=16),
    ],
    # fp32 skinny M on tensor cores (3xTF32): the stored M = 64 skinny_tc winner, and wgmma (sm_90a) around it
    "skinny_tc": [dict(WARPS=4, CW=1, MB=32, KC=32, STAGES=4, SPLIT_K=4, MINB=2)],
    "skinny_wgmma": [
        WGM,
        dict(WGM, CLUSTER=False),
        dict(WGM, ROUND=256),
        dict(WGM, KC=16, STAGES=6),
        dict(WGM, STAGES=5),
        dict(WGM, SPLIT_K=8),
        dict(WGM, SPLIT_K=8, KC=16, STAGES=4),
        dict(WGM, WG=1, KC=16, STAGES=4, MINB=2),
        dict(WGM, WG=1, SPLIT_K=8, KC=16, STAGES=4, MINB=2),
        dict(WGM, WG=1, SPLIT_K=2),
        dict(WGM, MB=32),
        dict(WGM, WG=4, MB=32, KC=16, STAGES=3, SPLIT_K=8, MINB=1),
    ],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--template", nargs="+", default=["wmma"], choices=sorted(CONFIGS))
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--layout", default="NN")
    ap.add_argument("--shapes", nargs="+", default=["4096x4096x4096", "8192x8192x8192", "4095x4097x4093"])
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    ap.add_argument("--sms", type=int, default=None, help="plan persistent grids for this many SMs (wgmma)")
    ap.add_argument("--config", action="append", type=json.loads, metavar="JSON",
                    help="probe these parameters (repeatable) instead of the template's list")  # fmt: skip
    args = ap.parse_args()
    gpu = current_gpu()
    if args.sms:
        from autotune.kernels import gemm_wgmma

        gemm_wgmma.multiprocessors = lambda: args.sms
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for(args.dtype), max_shared_bytes=gpu.max_shared_per_block,
                        timing=TimingPlan(target_ms=100.0, max_repeats=30))  # fmt: skip
    flush = L2Flusher()
    rows = []
    for shape in args.shapes:
        problem = GEMM.problem(shape, args.dtype, args.layout)
        vendor = time_vendor("gemm", problem, flush, settings.timing)
        vname, vt = vendor if vendor else ("-", None)
        for template, params in [(t, p) for t in args.template for p in (args.config or CONFIGS[t])]:
            try:
                r = evaluate(Candidate("gemm", template, problem, Config.of(params)), settings)
            except Exception as exc:  # a probe reports everything and goes on
                print(f"{shape} {params}: ERROR {type(exc).__name__}: {exc}", flush=True)
                continue
            ratio = vt.median_ms / r.median_ms if vt and r.ok else None
            row = {"shape": shape, "dtype": args.dtype, "layout": args.layout, "kernel": r.kernel_name,
                   "status": str(r.status), "reason": r.reason, "ms": r.median_ms if r.ok else None,
                   "tflops": r.tflops, "error": r.error, "registers": r.registers, "vendor": vname,
                   "vendor_ms": vt.median_ms if vt else None, "x_vendor": ratio}  # fmt: skip
            rows.append(row)
            tf = f"{r.tflops:7.1f}" if r.tflops else "      -"
            x = f"{ratio:5.2f}" if ratio else "    -"
            us = f"{1e3 * r.median_ms:8.1f} us" if r.ok else "       - us"
            print(f"{shape:>16} {r.status!s:>14} {us} {tf} TF/s x{x} regs {r.registers} err {r.error}  {r.kernel_name}"
                  f"  {r.reason or ''}", flush=True)  # fmt: skip
        if vt:
            print(f"{shape:>16} {vname}: {vt.median_ms:.4f} ms = {problem.flops / vt.median_ms / 1e9:.1f} TF/s")
    if args.out:
        args.out.write_text(json.dumps({"gpu": gpu.name, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
