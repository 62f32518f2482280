"""First GPU check of the skinny-M GEMM template: correctness on odd shapes, then bandwidth against cuBLAS.

    python3 benchmarks/probe_skinny.py [--dtypes float32,float16,bfloat16] [--layouts NN,TN] [--quick]

For every dtype x layout x shape x configuration: render, compile for sm_90 (NVRTC), launch with CuPy on random
normal inputs (C poisoned with NaN when beta == 0, random when beta != 0), compare with a float64 reference
(relative Frobenius error), and launch a split-K configuration twice to prove its counters reset. Passing cases
on the large shapes are timed with CUDA events (L2 flushed before every launch, median of 20 after warm-up) and
printed as GB/s (bytes of A, B and C once) and as a ratio to cupy.matmul on the same operands (timed the same
way; for TN, cupy.matmul(a_t.T, b)). Every case prints one PASS/FAIL/SKIP line; nothing stops at a failure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.compiler import compile_source  # noqa: E402
from autotune.kernels import gemm_skinny as sk  # noqa: E402

TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
SHAPES = [(1, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096),
          (16, 14336, 4096), (35, 8457, 2561), (3, 5, 7), (64, 1000, 999)]  # fmt: skip
TIMED = {(1, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096), (16, 14336, 4096),
         (35, 8457, 2561)}  # fmt: skip


def C(VEC, TX, TY, MT, KR, SPLIT_K, PREFETCH, MINB):  # noqa: N802, N803 - parameter names as in the template
    return dict(VEC=VEC, TX=TX, TY=TY, MT=MT, KR=KR, SPLIT_K=SPLIT_K, PREFETCH=PREFETCH, MINB=MINB)


def configs(M: int, es: int) -> list[tuple[dict, float]]:
    """3-4 (configuration, beta) per shape: a streaming one, a split-K one, one with beta != 0."""
    v = 16 // es  # one 16-byte load per K row
    if M <= 2:
        return [(C(v, 32, 8, 1, 4, 8, True, 4), 0.0), (C(v, 64, 4, 1, 8, 16, True, 2), 0.0),
                (C(v, 32, 8, 1, 8, 4, False, 4), 0.5), (C(v, 32, 4, 2, 4, 1, True, 4), 0.0)]  # fmt: skip
    if M <= 8:
        return [(C(v, 32, 8, 8, 4, 4, True, 2), 0.0), (C(4, 32, 8, 8, 4, 8, True, 2), 0.0),
                (C(v, 16, 16, 8, 4, 2, True, 1), 0.5), (C(4, 32, 4, 8, 4, 1, False, 2), 0.0)]  # fmt: skip
    if M <= 16:
        return [(C(4, 32, 8, 16, 4, 4, True, 1), 0.0), (C(v, 16, 16, 16, 4, 2, True, 1), 0.0),
                (C(4, 32, 8, 16, 2, 8, False, 2), 0.5), (C(4, 32, 4, 8, 4, 4, True, 2), 0.0)]  # fmt: skip
    if M <= 35:
        return [(C(4, 32, 4, 32, 4, 4, False, 1), 0.0), (C(4, 32, 8, 16, 4, 4, True, 1), 0.0),
                (C(2, 64, 4, 32, 4, 2, True, 1), 0.5), (C(4, 32, 4, 32, 4, 1, False, 1), 0.0)]  # fmt: skip
    return [(C(2, 32, 8, 64, 2, 2, False, 1), 0.0), (C(4, 32, 4, 32, 4, 2, False, 1), 0.0),
            (C(4, 32, 8, 16, 4, 4, True, 1), 0.5), (C(4, 32, 4, 32, 4, 1, False, 1), 0.0)]  # fmt: skip


class Flush:
    def __init__(self, cp):
        l2 = cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
        self.buf = cp.empty(max(2 * l2, 1 << 20) // 4, dtype=cp.int32)

    def __call__(self):
        self.buf.fill(0)


def time_ms(cp, fn, flush, reps=20, warmup=3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


_modules: dict = {}


def load(cp, params, dtype, layout):
    name = sk.kernel_name(params, dtype, layout)
    if name not in _modules:
        res = compile_source(sk.render(params, dtype, layout, name), name, "sm_90")
        if not res.ok:
            raise RuntimeError(f"compile failed: {res.error}")
        module = cp.cuda.function.Module()
        module.load(res.cubin)
        fn = module.get_function(name)
        shared = sk.derived(params)["SHARED_BYTES"]
        if shared > 48 * 1024:
            from cupy_backends.cuda.api import driver

            driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        _modules[name] = (module, fn, res.registers, res.spills)
    return _modules[name]


def cp_dtype(cp, dtype):
    if dtype == "bfloat16":
        try:
            import ml_dtypes  # noqa: F401 - CuPy needs it for bfloat16 arrays

            return cp.dtype("bfloat16")
        except Exception:  # noqa: BLE001
            return None
    return cp.dtype(dtype)


def run_case(cp, np, flush, dtype, layout, shape, params, beta, timed) -> str:
    M, N, K = shape
    prob = sk.Problem(M, N, K, dtype, layout)
    why = sk.check(params) or sk.check_problem(params, prob)
    if why:
        return f"SKIP ({why})"
    _, fn, regs, spills = load(cp, params, dtype, layout)
    launch = sk.launch(params, prob)
    nfloat, ncount = sk.scratch(params, prob)
    partial = cp.full(max(nfloat, 1), cp.nan, dtype=cp.float32)  # unwritten partials would poison C
    counters = cp.zeros(max(ncount, 1), dtype=cp.uint32)

    rng = cp.random.default_rng(M * 1000003 + N * 1009 + K)
    a32 = rng.standard_normal((M, K), dtype=cp.float32)
    b32 = rng.standard_normal((K, N), dtype=cp.float32)
    c32 = rng.standard_normal((M, N), dtype=cp.float32)
    dt = cp_dtype(cp, dtype)
    if dt is not None:
        a, b, c0 = a32.astype(dt), b32.astype(dt), c32.astype(dt)
        a_f, b_f, c_f = (x.astype(cp.float64) for x in (a, b, c0))
    else:  # bfloat16 without ml_dtypes: carry the bits as uint16 (round to nearest even)

        def bf16(x):
            u = x.view(cp.uint32)
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cp.uint16)

        def back(h):
            return (h.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)

        a, b, c0 = bf16(a32), bf16(b32), bf16(c32)
        a_f, b_f, c_f = back(a), back(b), back(c0)
    a_dev = cp.ascontiguousarray(a.T) if layout == "TN" else a
    alpha = 1.25
    ref = alpha * (a_f @ b_f) + (beta * c_f if beta else 0.0)

    def launch_once(out):
        args = (a_dev, b, out, np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), np.float32(beta),
                partial, counters)  # fmt: skip
        fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

    def result(out):
        if dt is None:
            return (out.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
        return out.astype(cp.float64)

    errs = []
    for _ in range(2 if params["SPLIT_K"] > 1 else 1):  # a second launch needs the counters reset to zero
        out = c0.copy()
        if beta == 0:
            if dt is None:
                out.fill(0x7FC0)  # bf16 NaN
            else:
                out.fill(cp.nan)
        launch_once(out)
        cp.cuda.Device().synchronize()
        errs.append(float(cp.linalg.norm(result(out) - ref) / cp.linalg.norm(ref)))
    left = int(counters.sum())
    ok = all(e < TOL[dtype] for e in errs) and left == 0
    line = f"{'PASS' if ok else 'FAIL'} err={'/'.join(f'{e:.1e}' for e in errs)} counters_left={left} regs={regs}"
    if ok and timed:
        out = c0.copy()
        ms = time_ms(cp, lambda: launch_once(out), flush)
        nbytes = (M * K + K * N + M * N) * (4 if dtype == "float32" else 2)
        line += f" {ms * 1e3:8.1f} us {nbytes / ms / 1e6:7.1f} GB/s {2 * M * N * K / ms / 1e9:6.2f} TFLOP/s"
        if dt is not None:
            a_op = a_dev.T if layout == "TN" else a
            vout = cp.empty((M, N), dtype=dt)
            vms = time_ms(cp, lambda: cp.matmul(a_op, b, out=vout), flush)
            line += f"  cuBLAS {nbytes / vms / 1e6:7.1f} GB/s  x{vms / ms:5.2f}"
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--layouts", default="NN,TN")
    ap.add_argument("--quick", action="store_true", help="correctness only, no timing")
    args = ap.parse_args()
    import cupy as cp
    import numpy as np

    flush = Flush(cp)
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}  cupy {cp.__version__}", flush=True)
    fails = passes = 0
    for dtype in args.dtypes.split(","):
        es = 4 if dtype == "float32" else 2
        for layout in args.layouts.split(","):
            for shape in SHAPES:
                for params, beta in configs(shape[0], es):
                    dims = "x".join(map(str, shape))
                    label = f"{dtype:8s} {layout} {dims:>15s} beta={beta:<3} {sk.kernel_name(params, dtype, layout)}"
                    try:
                        line = run_case(cp, np, flush, dtype, layout, shape, params, beta,
                                        timed=not args.quick and shape in TIMED)  # fmt: skip
                    except Exception as exc:  # noqa: BLE001 - report and go on to the next case
                        line = f"FAIL {type(exc).__name__}: {exc}"
                        traceback.print_exc(limit=2)
                    fails += line.startswith("FAIL")
                    passes += line.startswith("PASS")
                    print(f"{label}  {line}", flush=True)
    print(f"SUMMARY: {passes} passed, {fails} failed", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
