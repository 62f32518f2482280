"""Decode in nn.Linear's layout (NT: y = x W^T, W stored [N, K] and read in place): a few hand-picked skinny_nt
configurations against cuBLAS and against a plain streaming read of W (the read floor), all in one process.

Every number is one launch timed with CUDA events, the median of many, with a clean L2 before each: a flush by
reading (a sum over a buffer of 4x the L2 size, which leaves only clean lines) and then a short spin kernel, so the
GPU is busy while the host prepares the launch and the start event is not recorded into an idle queue (GPU.md,
"Measuring"). The floor is a grid-stride float4 read of W's bytes (132 x 16 blocks of 256 threads on the H200),
whose word sum is checked against CuPy's so it cannot skip a byte. cuBLAS is cupy.matmul on the W.T view (fp16,
fp32) and torch.matmul on W.t() for bf16 (skipped with a note when torch is missing). Every configuration is
verified against float64 before it is timed; a wrong one is reported and never timed. wgmma_decode's list holds
CLUSTER ones (split-K summed in a cluster's shared memory, so wide BW tiles, which re-read x from L2 fewer times,
still fill the GPU) and MB = 128 for M above 64.

    python3 benchmarks/probes/probe_decode_nt.py [--dtypes float16 bfloat16 float32] [--ms 1 4 16 64]
                                                 [--templates skinny_nt wgmma_decode]
                                                 [--out runs/decode_nt.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

NK = ((14336, 4096), (4096, 14336), (4096, 4096))
TEMPLATES = ("skinny_nt", "wgmma_decode")
REPEATS = 60
SPIN_US = 60  # longer than the host side of one cupy.matmul or kernel launch

sys.path.insert(0, str(ROOT / "benchmarks"))
from read_floor import SOURCE as READ_SOURCE  # noqa: E402

SOURCE = (
    READ_SOURCE
    + r"""
extern "C" __global__ void spin(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
"""
)

# Hand-picked per M: the family's default first, then a few of the space (configs/gemm_decode_nt.yaml); MMA
# (tensor cores) ones are skipped for float32.
F, T = False, True
CONFIGS = {
    1: [dict(VEC=8, R=4, WARPS_N=1, WARPS_K=8, U=2, MT=1, SPLIT_K=1, MINB=1, MMA=F, PREFETCH=F),
        dict(VEC=8, R=1, WARPS_N=4, WARPS_K=2, U=4, MT=1, SPLIT_K=1, MINB=2, MMA=F, PREFETCH=F),
        dict(VEC=4, R=2, WARPS_N=1, WARPS_K=4, U=4, MT=1, SPLIT_K=1, MINB=2, MMA=F, PREFETCH=T),
        dict(VEC=8, R=16, WARPS_N=1, WARPS_K=4, U=4, MT=16, SPLIT_K=1, MINB=2, MMA=T, PREFETCH=F)],
    4: [dict(VEC=8, R=2, WARPS_N=1, WARPS_K=8, U=4, MT=4, SPLIT_K=1, MINB=1, MMA=F, PREFETCH=F),
        dict(VEC=4, R=4, WARPS_N=2, WARPS_K=2, U=2, MT=4, SPLIT_K=1, MINB=2, MMA=F, PREFETCH=T),
        dict(VEC=8, R=16, WARPS_N=1, WARPS_K=4, U=4, MT=16, SPLIT_K=1, MINB=2, MMA=T, PREFETCH=F),
        dict(VEC=8, R=8, WARPS_N=2, WARPS_K=4, U=4, MT=16, SPLIT_K=1, MINB=2, MMA=T, PREFETCH=T)],
    16: [dict(VEC=8, R=4, WARPS_N=1, WARPS_K=8, U=2, MT=16, SPLIT_K=1, MINB=1, MMA=F, PREFETCH=F),
         dict(VEC=4, R=4, WARPS_N=2, WARPS_K=2, U=2, MT=16, SPLIT_K=2, MINB=2, MMA=F, PREFETCH=T),
         dict(VEC=8, R=32, WARPS_N=1, WARPS_K=4, U=2, MT=16, SPLIT_K=1, MINB=1, MMA=T, PREFETCH=F),
         dict(VEC=8, R=8, WARPS_N=2, WARPS_K=4, U=4, MT=16, SPLIT_K=1, MINB=2, MMA=T, PREFETCH=T)],
    64: [dict(VEC=8, R=2, WARPS_N=1, WARPS_K=8, U=2, MT=32, SPLIT_K=1, MINB=1, MMA=F, PREFETCH=T),
         dict(VEC=4, R=1, WARPS_N=1, WARPS_K=8, U=4, MT=64, SPLIT_K=1, MINB=1, MMA=F, PREFETCH=F),
         dict(VEC=8, R=32, WARPS_N=1, WARPS_K=4, U=2, MT=64, SPLIT_K=1, MINB=1, MMA=T, PREFETCH=F),
         dict(VEC=8, R=8, WARPS_N=2, WARPS_K=4, U=4, MT=64, SPLIT_K=1, MINB=2, MMA=T, PREFETCH=F)],
}  # fmt: skip


class Timer:
    """Median microseconds of one launch after a read flush and a spin, as the module docstring says."""

    def __init__(self, module) -> None:
        import cupy as cp

        l2 = cp.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
        self._flush_buf = cp.ones(4 * l2 // 4, dtype=cp.float32)
        self._spin = module.get_function("spin")

    def __call__(self, launch, repeats: int = REPEATS) -> float:
        import cupy as cp

        for _ in range(3):
            launch()
        times = []
        for _ in range(repeats):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            self._flush_buf.sum()
            self._spin((1,), (1,), (cp.int64(SPIN_US * 1000),))
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        return statistics.median(times)


def read_floor(module, timer: Timer, w) -> tuple[float, bool]:
    """(us, verified) of the fastest plain streaming read of W's bytes over a few shapes (4 or 8 16-byte loads in
    flight per thread; 4, 8 or 16 blocks of 256 threads per SM); verified: every shape's word sum equals CuPy's."""
    import cupy as cp

    words = w.reshape(-1).view(cp.uint32) if w.nbytes % 4 == 0 else None
    n4 = w.nbytes // 16
    expected = int(words[: n4 * 4].astype(cp.uint64).sum()) % (1 << 32) if words is not None else None
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    best, verified = float("inf"), expected is not None
    for name in ("read_floor4", "read_floor8"):
        fn = module.get_function(name)
        for per_sm in (4, 8, 16):
            out = cp.zeros(1, dtype=cp.uint32)
            grid, args = (sms * per_sm,), (w, cp.int64(n4), out)
            fn(grid, (256,), args)
            verified = verified and int(out[0]) == expected
            best = min(best, timer(lambda fn=fn, grid=grid, args=args: fn(grid, (256,), args)))
    return best, verified


_COMPILED: dict[tuple, object] = {}


def decode_configs(m: int) -> list[dict]:
    """wgmma_decode configurations for M rows of x: MB the smallest of 8 ... 128 that holds them; the CLUSTER ones
    split K over 2-8 blocks of 128 or 256 rows of W (x re-read from L2 N / BW times: M / BW of W's bytes)."""
    mb = next((b for b in (8, 16, 32, 64, 128) if b >= m), 128)
    out = [dict(BW=128, MB=mb, CONSUMERS=1, STAGES=6, SPLIT_K=s) for s in (1, 2, 4, 8)]
    out += [dict(BW=64, MB=mb, CONSUMERS=1, STAGES=8, SPLIT_K=s) for s in (1, 2, 4)]
    out += [dict(BW=128, MB=mb, CONSUMERS=2, STAGES=6, SPLIT_K=4), dict(BW=256, MB=mb, CONSUMERS=2, STAGES=4,
                                                                          SPLIT_K=4)]  # fmt: skip
    wide = 5 if mb <= 64 else 4  # stages of 256 rows of W that fit (40 KB each at MB = 64, 48 at 128)
    out += [dict(BW=256, MB=mb, CONSUMERS=2, STAGES=wide, SPLIT_K=s, CLUSTER=True) for s in (2, 4, 8)]
    out += [dict(BW=128, MB=mb, CONSUMERS=1, STAGES=6, SPLIT_K=s, CLUSTER=True) for s in (2, 4, 8)]
    deep = 8 if mb <= 64 else 6  # of 128 rows
    return out + [dict(BW=128, MB=mb, CONSUMERS=2, STAGES=deep, SPLIT_K=s, CLUSTER=True) for s in (4, 8)]


def decode_traffic(params: dict, problem) -> dict:
    """A wgmma_decode launch's blocks, and the bytes of x its blocks read from L2 over W's bytes from memory:
    every block reads MB rows of x over its K slice, so x's reads are ceil(N / BW) * ceil(M / MB) * MB * K
    elements against W's N * K (about M / BW)."""
    from autotune.kernels import gemm_wgmma_decode

    grid = gemm_wgmma_decode.launch(params, problem).grid
    tiles = -(-problem.N // params["BW"])
    return {"blocks": grid[0] * grid[1], "x_over_w": tiles * grid[1] * params["MB"] / problem.N}


def template_row(settings, timer: Timer, problem, inputs, ref, params, template: str = "skinny_nt") -> dict:
    """Verify one configuration against the float64 ``ref`` (NaN-poisoned output), then time it; its table row."""
    import cupy as cp

    from autotune.core.space import Config
    from autotune.kernels.gemm import GEMM, decode
    from autotune.measure.evaluate import Candidate, load_kernel, prepare
    from autotune.measure.verify import poison, tolerance_for

    key = (template, problem.dtype, tuple(params.items()))  # the source depends on neither shape nor alignment
    if key not in _COMPILED:
        _COMPILED[key] = prepare(Candidate("gemm", template, problem, Config.of(params)), settings)
    c = _COMPILED[key]
    if c.status is not None:
        return {"what": template, "params": params, "status": c.status.value, "reason": c.reason}
    launch = GEMM.launch(template, params, problem)
    fn = load_kernel(c.compiled, launch.shared_bytes)
    scratch = GEMM.new_scratch(template, params, problem)
    out = GEMM.new_output(problem)
    args = GEMM.kernel_args(problem, inputs, out, 1.0, 0.0, scratch)
    poison(out)
    fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
    error = float(cp.linalg.norm(decode(out, problem.dtype).astype(cp.float64) - ref) / cp.linalg.norm(ref))
    row = {"what": c.kernel_name, "params": params, "error": error, "registers": c.compiled.registers}
    if not error < tolerance_for(problem.dtype):  # NaN fails too
        return {**row, "status": "wrong"}
    us = timer(lambda: fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes))
    return {**row, "status": "ok", "us": us}


def measure_problem(settings, timer: Timer, problem, w, floor_us: float, templates=TEMPLATES) -> list[dict]:
    """cuBLAS and the hand-picked configurations of ``templates`` on one problem (W given), printed and as rows."""
    from autotune.kernels import gemm_skinny_nt, gemm_wgmma_decode
    from autotune.kernels.gemm import GEMM

    dtype, m = problem.dtype, problem.M
    inputs = (GEMM.make_inputs(problem, seed=3)[0], w)
    base = {"dtype": dtype, "M": m, "N": problem.N, "K": problem.K}
    rows = []
    vendor = GEMM.vendor(problem, inputs)
    vendor_us = None
    if vendor is None:
        print(f"{dtype:<9} {problem.label:<16} cuBLAS: torch is not importable, so no bf16 baseline")
    else:
        vendor_us = timer(vendor[1])
        rows.append({**base, "what": vendor[0], "us": vendor_us})
        print(f"{dtype:<9} {problem.label:<16} {vendor[0]:<62} {vendor_us:8.2f} {1.0:8.2f} "
              f"{100 * floor_us / vendor_us:7.1f}")  # fmt: skip
    ref = GEMM.reference(problem, inputs)
    template, default = GEMM.default_config(dtype, "NT", M=m)
    plan = [("skinny_nt", p) for p in CONFIGS.get(m, [])] + [("wgmma_decode", p) for p in decode_configs(m)]
    plan = [(t, p) for t, p in plan if t in templates and (t, p) != (template, default)]
    for name, params in [(template, default)] * (template in templates) + plan:  # M > 64: the default is wmma's
        module = gemm_skinny_nt if name == "skinny_nt" else gemm_wgmma_decode
        if module.check(params) or module.check_problem(params, problem):
            continue  # MMA configurations for float32
        if name != "skinny_nt" and settings.arch != "sm_90":
            continue
        row = {**base, **template_row(settings, timer, problem, inputs, ref, params, name),
               "default": (name, params) == (template, default)}  # fmt: skip
        if "us" in row:
            row["x_cublas"] = vendor_us / row["us"] if vendor_us else None
            row["pct_floor"] = 100 * floor_us / row["us"]
        if name == "wgmma_decode":
            row.update(decode_traffic(params, problem))
        rows.append(row)
        name = row["what"].removeprefix("gemm_")[:60] + (" *" if row["default"] else "")
        if row["status"] != "ok":
            print(f"{dtype:<9} {problem.label:<16} {name:<62} {row['status']}: {row.get('reason') or row.get('error')}")
            continue
        ratio = f"{row['x_cublas']:8.2f}" if row["x_cublas"] else f"{'-':>8}"
        print(f"{dtype:<9} {problem.label:<16} {name:<62} {row['us']:8.2f} {ratio} "
              f"{row['pct_floor']:7.1f} {row['error']:9.2e}")  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32"])
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 4, 16, 64])
    ap.add_argument("--templates", nargs="+", choices=TEMPLATES, default=list(TEMPLATES))
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "decode_nt.json")
    args = ap.parse_args()

    import cupy as cp

    from autotune.build.compiler import nvrtc_version
    from autotune.core.device import current_gpu
    from autotune.kernels.gemm import GEMM
    from autotune.measure.evaluate import Settings

    gpu = current_gpu()
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    timer = Timer(module)
    settings = Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    meta = {"gpu": gpu.name, "arch": gpu.arch, "date": now, "cupy": cp.__version__, "torch": torch_version,
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "nvrtc": nvrtc_version(),
            "timing": f"median of {REPEATS}; read flush (4x L2), {SPIN_US} us spin, then the start event"}  # fmt: skip
    print(f"{gpu.name}  {now}  cupy {cp.__version__}  torch {torch_version}")
    print(f"\n{'dtype':<9} {'M x N x K':<16} {'what':<62} {'us':>8} {'x cuBLAS':>8} {'% floor':>7} {'error':>9}")
    rows: list[dict] = []
    for dtype in args.dtypes:
        for n, k in NK:
            w = GEMM.make_inputs(GEMM.problem([1, n, k], dtype, "NT"), seed=2)[1]
            floor_us, verified = read_floor(module, timer, w)
            rows.append({"what": "read floor", "dtype": dtype, "N": n, "K": k, "us": floor_us, "bytes": w.nbytes,
                         "verified": verified})  # fmt: skip
            what = f"read floor ({w.nbytes >> 20} MiB)"
            print(f"{dtype:<9} {f'W {n}x{k}':<16} {what:<62} {floor_us:8.2f} {'':>8} {'100':>7} "
                  f"{'sum ok' if verified else 'SUM WRONG':>9}")  # fmt: skip
            for m in args.ms:
                problem = GEMM.problem([m, n, k], dtype, "NT")
                rows += measure_problem(settings, timer, problem, w, floor_us, tuple(args.templates))
    print("\n* the family's default configuration for this M (GEMM.default_config)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
