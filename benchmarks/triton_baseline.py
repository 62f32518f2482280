"""The project's tensor-core GEMM beside cuBLAS and a plain Triton ``tl.dot`` matmul, in one process (issue 26).

    python3 benchmarks/triton_baseline.py [--out benchmarks/results] [--quick] [--dtype float16 bfloat16]

Triton's kernel is the standard blocked matmul (grouped launch order, fp32 accumulator), autotuned by Triton over
the 12 configurations below at the first call of each shape. Ours: the best verified of this GPU's stored winner
(tuned/) and the candidate configurations below (wgmma where the rows are whole 16 bytes, mma otherwise), each
verified against float64 on fresh inputs before it is timed. Then the chosen kernel, cuBLAS (torch.matmul) and
Triton are timed in --rounds interleaved rounds (ours, cuBLAS, Triton; the next round in reverse order), each turn
the median of event-timed launches with L2 flushed before each (autotune.measure.bench.time_launches), so a clock
that falls as the card heats lands on every side alike; the ratios are the medians of the rounds' ratios, the
times the median round's. Triton's and cuBLAS's outputs are checked against float64 too. Writes
<out>/triton_baseline.{json,csv} with the GPU, versions and date inside.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.core.device import current_gpu  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.bench import L2Flusher, TimingPlan, time_launches  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, evaluate, prepare, verified_run  # noqa: E402
from autotune.measure.verify import tolerance_for  # noqa: E402
from autotune.measure.versus import interleave  # noqa: E402
from autotune.results.store import read, tuned_file  # noqa: E402

GEMM = FAMILIES["gemm"]
SHAPES = ["4096x4096x4096", "8192x8192x8192", "4095x4097x4093"]
WG = dict(BM=128, BN=256, CONSUMERS=2, STAGES=3, RASTER=8, CLUSTER_M=1, TMA_STORE=True)
OURS = {
    "wgmma": [WG, dict(WG, STAGES=4, TMA_STORE=False), dict(WG, RASTER=16), dict(WG, BM=256, BN=128)],
    "mma": [dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=True, RASTER=8)],
}
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
TRITON_CONFIGS = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 4, 8),
                  (128, 256, 32, 4, 8), (256, 128, 32, 4, 8), (128, 128, 32, 4, 4), (64, 256, 32, 4, 4),
                  (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 256, 64, 4, 8), (256, 64, 64, 4, 4)]  # fmt: skip


def triton_matmul():
    """A standard Triton matmul with grouped ordering, autotuned over TRITON_CONFIGS; returns ``mm(a, b)``."""
    import torch
    import triton
    import triton.language as tl

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=s, num_warps=w)
               for m, n, k, s, w in TRITON_CONFIGS]  # fmt: skip

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
        group = GROUP_M * num_n
        first_m = (pid // group) * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (pid % group) % size_m
        pid_n = (pid % group) // size_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
        b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            left = K - k * BLOCK_K
            x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
            y = tl.load(b, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(x, y)
            a += BLOCK_K * sak
            b += BLOCK_K * sbk
        c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def mm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        M, K = a.shape
        N = b.shape[1]

        def grid(meta):
            return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

        kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    return mm, kernel


def ours(problem, settings, stored):
    """The fastest verified of our candidates for this problem, the stored winner (tuned/) first: (TrialResult,
    template, params)."""
    best = None
    entry = stored.get(f"{problem.dtype}/{problem.layout}/{problem.label}")
    plan = [(entry["template"], [entry["params"]])] if entry else []
    for template, configs in plan + list(OURS.items()):
        for params in configs:
            if GEMM.check_problem(template, params, problem) is not None:
                continue
            r = evaluate(Candidate("gemm", template, problem, Config.of(params)), settings)
            if r.ok and (best is None or r.median_ms < best[0].median_ms):
                best = (r, template, params)
    return best


def interleaved(turns: dict, flush: L2Flusher, plan: TimingPlan, rounds: int) -> dict[str, list[float]]:
    """Each side's median ms in every round, the sides' order reversed every other round, after a dropped warm
    round (autotune.measure.versus.interleave)."""
    times = interleave(list(turns.values()), rounds, lambda fn: time_launches(fn, flush, plan).median_ms)
    return dict(zip(turns, times, strict=True))


def measure(shape: str, dtype: str, settings: Settings, flush: L2Flusher, mm, plan: TimingPlan, stored,
            rounds: int) -> dict:  # fmt: skip
    import torch

    problem = GEMM.problem(shape, dtype)
    found = ours(problem, settings, stored)
    run = None
    if found:  # the chosen kernel again, verified on fresh inputs, as a launch to interleave with the others
        checked = verified_run(prepare(Candidate("gemm", found[1], problem, Config.of(found[2])), settings), settings)
        run = checked[0] if isinstance(checked, tuple) else None
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(problem.M, problem.K, device="cuda", dtype=tdt, generator=g)
    b = torch.randn(problem.K, problem.N, device="cuda", dtype=tdt, generator=g)
    c_tr, c_cu = torch.empty(problem.M, problem.N, device="cuda", dtype=tdt), None
    ref = a.double() @ b.double()
    mm(a, b, c_tr)
    c_cu = a @ b
    err = {name: float((x.double() - ref).norm() / ref.norm()) for name, x in (("triton", c_tr), ("cublas", c_cu))}
    turns = {"ours": run} if run else {}
    turns.update(cublas=lambda: torch.matmul(a, b, out=c_cu), triton=lambda: mm(a, b, c_tr))
    times = interleaved(turns, flush, plan, rounds)
    mid = {n: statistics.median(t) for n, t in times.items()}
    ms_ours = mid.get("ours")
    tf = problem.flops / 1e9

    def ratio(other):
        return statistics.median(o / s for s, o in zip(times["ours"], times[other], strict=True)) if run else None

    def tflops(ms):
        return tf / ms if ms else None

    return {"shape": shape, "dtype": dtype, "ours_template": found[1] if found else None,
            "ours_kernel": found[0].kernel_name if found else None, "ours_error": found[0].error if found else None,
            "ours_ms": ms_ours, "cublas_ms": mid["cublas"], "triton_ms": mid["triton"],
            "triton_error": err["triton"], "cublas_error": err["cublas"], "ours_tflops": tflops(ms_ours),
            "cublas_tflops": tflops(mid["cublas"]), "triton_tflops": tflops(mid["triton"]),
            "x_cublas": ratio("cublas"), "x_triton": ratio("triton"), "rounds_ms": times}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true", help="short timing and one shape (a smoke run)")
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"], choices=["float16", "bfloat16"])
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of ours, cuBLAS and Triton (default 3)")
    args = ap.parse_args()
    if args.rounds < 1:
        print("triton_baseline: --rounds must be at least 1", file=sys.stderr)
        return 2
    try:
        import torch
        import triton
    except ImportError as exc:
        print(f"triton_baseline: needs torch and triton ({exc})", file=sys.stderr)
        return 2
    gpu = current_gpu()
    plan = TimingPlan(target_ms=40.0 if args.quick else 400.0, max_repeats=30 if args.quick else 200)
    settings = Settings(arch=gpu.arch, tolerance=1.0, max_shared_bytes=gpu.max_shared_per_block, timing=plan)
    flush = L2Flusher()
    stored = read(tuned_file(ROOT / "tuned", gpu.key, "gemm"))["entries"]
    mm, kernel = triton_matmul()
    rows = []
    print(f"{'dtype':>8} {'shape':>16} {'ours':>9} {'cuBLAS':>9} {'Triton':>9}  TFLOP/s      x cuBLAS  x Triton  ours")
    for dtype in args.dtype:
        s = replace(settings, tolerance=tolerance_for(dtype))
        for shape in args.shapes[:1] if args.quick else args.shapes:
            r = measure(shape, dtype, s, flush, mm, plan, stored, 1 if args.quick else args.rounds)
            rows.append(r)

            def f(x, spec="9.1f"):
                return format(x, spec) if x is not None else "-".rjust(9)

            print(f"{dtype:>8} {shape:>16} {f(r['ours_tflops'])} {f(r['cublas_tflops'])} {f(r['triton_tflops'])}"
                  f"              {f(r['x_cublas'], '8.2f')}  {f(r['x_triton'], '8.2f')}  {r['ours_kernel']}",
                  flush=True)  # fmt: skip
    meta = {"gpu": gpu.name, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "versions": {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda},
            "method": f"ours (verified against float64 first), cuBLAS and Triton in {args.rounds} interleaved rounds, "
            "each turn the median of event-timed launches with L2 flushed before each; x_cublas/x_triton: the "
            "medians of the rounds' ratios",
            "triton_configs": TRITON_CONFIGS}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "triton_baseline.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    with open(args.out / "triton_baseline.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["shape"])
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
