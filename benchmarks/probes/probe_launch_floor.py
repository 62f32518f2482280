"""Where the time of a small kernel goes: an empty kernel, the stored winners and the vendor library, each
timed by the search's harness with the L2 flushed before every launch (as every table here) and without.

For layers of ~15 us (batch-1 convolutions) the launch and the cold L2 are a large part of the time; this
shows how large, so a kernel's remaining headroom is known before optimizing it.

    python3 benchmarks/probes/probe_launch_floor.py [--kernel conv2d] [--shapes n1c64h56w56k64r3s3u1p1 ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autotune.bench import L2Flusher, TimingPlan, time_launches
from autotune.kernels import FAMILIES

PLAN = TimingPlan(warmup=3, min_repeats=50, max_repeats=400, target_ms=40.0)


def _row(what: str, shape: str, launch, flush) -> dict:
    cold = time_launches(launch, flush, PLAN)
    warm = time_launches(launch, lambda: None, PLAN)
    return {"what": what, "shape": shape, "flushed_us": cold.median_ms * 1e3, "warm_us": warm.median_ms * 1e3,
            "flushed_iqr_us": cold.iqr_ms * 1e3, "warm_iqr_us": warm.iqr_ms * 1e3}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="conv2d")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--shapes", nargs="+", default=["n1c64h56w56k64r3s3u1p1", "n1c256h14w14k256r3s3u1p1"])
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()

    import cupy as cp

    import autotune

    flush = L2Flusher()
    empty = cp.RawKernel(r'extern "C" __global__ void empty_kernel() {}', "empty_kernel")
    rows = [_row("empty kernel, 1 block", "-", lambda: empty((1,), (32,), ()), flush),
            _row("empty kernel, 132x256", "-", lambda: empty((132,), (256,), ()), flush)]  # fmt: skip
    # The same with the dynamic shared memory of a batch-1 winograd kernel (~100 KB) and more: does a launch
    # that needs a large shared-memory carve-out pay for it after the flush (which runs with L1)?
    big = cp.RawKernel(r'extern "C" __global__ void empty_smem_kernel() { extern __shared__ float s[]; }',
                       "empty_smem_kernel")  # fmt: skip
    big.max_dynamic_shared_size_bytes = 220 * 1024
    for kb in (16, 100, 220):
        rows.append(_row(f"empty kernel, 132x384, {kb} KB smem", "-",
                         lambda kb=kb: big((132,), (384,), (), shared_mem=kb * 1024), flush))  # fmt: skip
    family = FAMILIES[args.kernel]
    for shape in args.shapes:
        problem = family.problem(shape, args.dtype, args.layout)
        inputs = family.make_inputs(problem, seed=1)
        if args.kernel == "conv2d":
            p = problem
            launcher = autotune.load("conv2d", dtype=p.dtype, layout=p.layout, N=p.N, C=p.C, H=p.H, W=p.W, K=p.K,
                                     R=p.R, S=p.S, stride=p.stride, pad=p.pad)  # fmt: skip
        else:
            launcher = autotune.load(args.kernel, dtype=problem.dtype, layout=problem.layout, M=problem.M,
                                     N=problem.N, K=problem.K)  # fmt: skip
        out = family.new_output(problem)
        rows.append(_row(f"tuned {launcher.choice.template} ({launcher.choice.step})", shape,
                         lambda launcher=launcher, out=out, inputs=inputs: launcher(*inputs, out), flush))  # fmt: skip
        vendor = family.vendor(problem, inputs)
        if vendor is not None:
            rows.append(_row(vendor[0], shape, vendor[1], flush))
    print(f"{'what':<34} {'shape':<26} {'flushed us':>10} {'warm us':>8}")
    for r in rows:
        print(f"{r['what']:<34} {r['shape']:<26} {r['flushed_us']:>10.2f} {r['warm_us']:>8.2f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
