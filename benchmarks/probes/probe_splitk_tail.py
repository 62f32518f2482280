"""Where the split-K tail of a skinny_wgmma kernel spends its time, inside one launch: thread 0 of every block
stamps %globaltimer (ns) at entry, when its main loop ends, when its arrival is counted, after its partial tile is
stored, fenced and counted (blocks that are not last), and (the last block of a tile) when the others' partials
are there and it starts the sum, and when it has issued C's stores. Each launch follows the harness's
L2 flush; the kernel (with stamps) is verified first. Prints medians over launches, in us from the launch's first
block entry:

    python3 benchmarks/probes/probe_splitk_tail.py [--shape MxNxK] [--launches 30] [--cut loads|stores] \\
        ['{"WG": 2, ...}']
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from autotune.bench import L2Flusher
from autotune.compiler import compile_source
from autotune.device import current_gpu
from autotune.evaluate import Candidate, Settings, render_candidate
from autotune.kernels import FAMILIES
from autotune.space import Config
from autotune.verify import tolerance_for

GEMM = FAMILIES["gemm"]
BASE = dict(WG=2, MB=64, KC=32, STAGES=5, ROUND=256, SPLIT_K=4, CLUSTER=False, MINB=1, TMA=True)  # M = 64 winner, 08:01
SLOTS = 8
STAMP = (
    "__device__ unsigned long long g_stamps[4096 * 8];\n"
    "#define STAMP(k) do { if (threadIdx.x == 0) { unsigned long long t_; "
    'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_) :: "memory"); '
    "g_stamps[((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * 8 + (k)] = t_; } } while (0)\n"
)
PLACES = [  # (text in the source, stamp inserted before (False) or after (True) it, stamp number)
    ("const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;", True, 0),
    ("  // ---- epilogue: row 8j", False, 1),
    ("    if (tid == 0) s_last = atomicAdd(arrived, 1u) == (unsigned)(SPLIT_K - 1);", True, 2),
    ("        atomicAdd(stored, 1u);", True, 3),
    ("    const int rows = min(MB, M - m0), cols = min(BN, N - n0);", False, 4),
    ("    } else {  // edge tiles: one element at a time", False, 5),
]
LOAD = "q[zz][i] = ld_relaxed4(zz == z ? own + r * BNP + c4 : partial + zz * slice + (size_t)(m0 + r) * N + n0 + c4);"
STORE = "*reinterpret_cast<float4*>(C + o) = out;"
CUTS = {  # diagnostic variants of the sum (wrong numbers: not verified)
    "loads": (LOAD, "q[zz][i] = make_float4(r * 1e-9f, 1.0f, 2.0f, 3.0f);"),
    "stores": (STORE, "if (out.x == 1234.5f) *reinterpret_cast<float4*>(C + o) = out;"),
}
PARTIAL = (
    "__stcg(reinterpret_cast<float2*>(p + (size_t)(8 * j + e) * N), make_float2(acc[4 * j + e], acc[4 * j + 2 + e]));"
)
EVICT_LAST = (  # the partial tiles' stores marked evict-last in L2 (computes the right numbers)
    "{ unsigned long long pol; "
    'asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol)); '
    'asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" :: "l"(p + (size_t)(8 * j + e) * N), '
    '"f"(acc[4 * j + e]), '
    '"f"(acc[4 * j + 2 + e]), "l"(pol) : "memory"); }'
)
CUTS["evict_last"] = (PARTIAL, EVICT_LAST)
NAMES = [
    "entry",
    "main loop done",
    "arrival counted",
    "partial stored, counted (not last)",
    "sum starts (last, others stored)",
    "sum issued (last)",
]


def instrument(source: str) -> str:
    for text, after, k in PLACES:
        assert source.count(text) == 1, f"{text!r} is not where it was"
        source = source.replace(text, f"{text}STAMP({k});" if after else f"STAMP({k});\n{text}")
    marker = 'extern "C" __global__'
    return source.replace(marker, STAMP + marker, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="64x4096x4096")
    ap.add_argument("--launches", type=int, default=30)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--cut",
        choices=sorted(CUTS),
        help="a variant: the sum without its loads or stores "
        "(unverified), or the partial stores marked evict-last (verified)",
    )
    ap.add_argument("config", nargs="?", help="JSON parameters (default: the stored M = 64 winner)")
    args = ap.parse_args()
    import cupy as cp

    gpu = current_gpu()
    params = json.loads(args.config) if args.config else BASE
    problem = GEMM.problem(args.shape, "float32", "NN")
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for("float32"), max_shared_bytes=gpu.max_shared_per_block)
    base = render_candidate(Candidate("gemm", "skinny_wgmma", problem, Config.of(params)), settings)
    source = instrument(base.source)
    if args.cut:
        old, new = CUTS[args.cut]
        assert source.count(old) == 1, f"{old!r} is not where it was"
        source = source.replace(old, new)
    compiled = compile_source(source, base.kernel_name, gpu.arch)
    if not compiled.ok:
        print(f"compile failed: {compiled.error}")
        return 1
    module = cp.cuda.function.Module()
    module.load(compiled.cubin)
    fn = module.get_function(base.kernel_name)
    launch = GEMM.launch("skinny_wgmma", params, problem)
    from cupy_backends.cuda.api import driver

    driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.shared_bytes)
    ptr = module.get_global_var("g_stamps")  # the device address of the stamps array
    memory = cp.cuda.UnownedMemory(ptr, 4096 * SLOTS * 8, module)
    view = cp.ndarray((4096 * SLOTS,), dtype=cp.uint64, memptr=cp.cuda.MemoryPointer(memory, 0))
    inputs = GEMM.make_inputs(problem, seed=3)
    out = GEMM.new_output(problem)
    kargs = GEMM.kernel_args(problem, inputs, out, scratch=GEMM.new_scratch("skinny_wgmma", params, problem))
    fn(launch.grid, launch.block, kargs, shared_mem=launch.shared_bytes)
    err = float(cp.linalg.norm(out.astype(cp.float64) - GEMM.reference(problem, inputs)) / cp.linalg.norm(
        GEMM.reference(problem, inputs)))  # fmt: skip
    print(f"{base.kernel_name}: relative error {err:.2e} with stamps")
    if err > settings.tolerance and args.cut not in ("loads", "stores"):
        return 1
    blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
    flush = L2Flusher()
    rows = {name: [] for name in NAMES}
    span = []
    for _ in range(args.launches):
        view.fill(0)
        flush()
        fn(launch.grid, launch.block, kargs, shared_mem=launch.shared_bytes)
        cp.cuda.Device().synchronize()
        t = view[: blocks * SLOTS].get().reshape(blocks, SLOTS).astype(np.int64)
        t0 = t[:, 0].min()
        for k, name in enumerate(NAMES):
            got = t[:, k][t[:, k] > 0] - t0
            rows[name].append((np.median(got) / 1e3, got.max() / 1e3) if got.size else (0.0, 0.0))
        last = t[:, 4] > 0
        span.append(float(np.median(t[last, 5] - t[last, 4])) / 1e3)
    print(f"{'stamp':<28} {'median block us':>16} {'last block us':>14}   (median over {args.launches} launches)")
    result = {"kernel": base.kernel_name, "gpu": gpu.name, "error": err, "stamps": {}}
    for name in NAMES:
        med = statistics.median(r[0] for r in rows[name])
        mx = statistics.median(r[1] for r in rows[name])
        result["stamps"][name] = {"median_us": med, "max_us": mx}
        print(f"{name:<28} {med:>16.2f} {mx:>14.2f}")
    result["sum_us_per_last_block"] = statistics.median(span)
    print(f"sum per last block: {statistics.median(span):.2f} us (median)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
