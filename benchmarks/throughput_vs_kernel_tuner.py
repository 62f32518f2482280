"""Head-to-head: Kernel Tuner 1.5 and autotune on the same SIMT GEMM template, space, GPU and shape.

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \
    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/throughput_vs_kernel_tuner.py --seconds 120

(.whl/ comes from `bash /work/shared/gpu-host/wheels.sh --kernel-tuner`, run in the repository root.)

Both tools get T seconds of wall time on fp32 GEMM 4096x4096x4096, the parameters and constraints of
configs/gemm.yaml, the template's own checks and the device's shared-memory limit; no warm start.
  kt        kernel_tuner.tune_kernel, cupy backend, strategy random_sample (the whole space in random order,
            stopped by strategy_options time_limit). The source is a code generator calling
            autotune.build.templates.render with the kernel renamed to gemm_kt; block size, grid and dynamic shared
            memory come from the same derived values autotune uses.
  autotune  `python3 -m autotune run` on a generated spec (one shape, budget T/60 minutes, no start_from),
            once with --sampler random and once with --sampler tpe, each in fresh runs/ and tuned/ folders.
Stock Kernel Tuner cannot raise a kernel's dynamic shared-memory limit, so by default both spaces are cut to
48 KB (the same constraint is written into the generated spec); --raise-smem patches Kernel Tuner's cupy
backend to set cudaFuncAttributeMaxDynamicSharedMemorySize and lets both use the device limit.
Each part runs as a subprocess of this script (a CUDA fault in one cannot end the other), with its own empty
CuPy kernel cache. The best configuration of each row is re-verified and re-timed by one harness (CUDA
events, 128 MB L2 flush before each launch, median of 30), as is cuBLAS (cupy.matmul) in the parent.
Output: a table, and <out>/throughput_vs_kernel_tuner.json and .csv.
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from autotune.build.templates import render  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.tune.spec import load_spec  # noqa: E402

M = N = K = 4096
FAMILY = FAMILIES["gemm"]
PROBLEM = FAMILY.problem([M, N, K], "float32")
PARAMS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "VEC", "PAD", "DBUF")
KT_NAME = "gemm_kt"
SMEM_48K = 48 * 1024
TOLERANCE = 1e-5  # relative Frobenius error, autotune's fp32 default
BAD = ("compile-failed", "verify-failed", "launch-failed", "timed-out", "interrupted")
NOT_RUN = ("invalid", "unevaluated")  # rejected before a launch, or asked for but cut by the time budget


# --- shared by both sides: one spec, one parameter mapping, one timing harness ------------------------------


def write_spec(work: Path, seconds: float, raise_smem: bool) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "gemm.yaml").read_text())
    raw["shapes"] = [[M, N, K]]
    raw.pop("start_from", None)  # no warm start: Kernel Tuner gets none either
    raw["budget"] = {"minutes": seconds / 60}
    if not raise_smem:  # the same cut as Kernel Tuner's, so both search one space
        raw["constraints"].append(f"(2 if DBUF else 1) * BK * (BM + BN + 2 * PAD) * 4 <= {SMEM_48K}")
    path = work / "gemm_vs_kt.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def template_params(p: dict) -> dict:
    """Kernel Tuner's config (DBUF as 0/1, plus block_size_x) -> the template's parameters."""
    q = {k: p[k] for k in PARAMS}
    q["DBUF"] = bool(q["DBUF"])
    return q


def kt_source(p: dict) -> str:
    r = render("gemm", "simt", template_params(p), PROBLEM)
    return r.source.replace(r.kernel_name, KT_NAME)


def kt_tune_params(spec) -> dict:
    tp = {prm.name: [int(v) for v in prm.values] for prm in spec.space.params}  # DBUF false/true -> 0/1
    tp["block_size_x"] = [32, 64, 128, 256, 512, 1024]  # pinned to THREADS by the restriction
    return tp


def kt_restrictions(spec, smem_limit: int) -> list:
    """Accepts a Kernel Tuner config iff autotune would compile it: spec constraints, template checks, limits.

    The last entry decides alone; the strings before it (the spec's constraints, plain Python here, and the
    block size) only let Kernel Tuner's constraint solver prune early: 10x faster to build than the check alone.
    """
    names = list(kt_tune_params(spec))

    def check(*values) -> bool:  # a def, not a lambda: Kernel Tuner parses lambdas' source
        p = dict(zip(names, values, strict=True))
        q = template_params(p)
        if spec.space.violated(q) or FAMILY.check("simt", q):
            return False
        d = FAMILY.derived("simt", q)
        return d["SHARED_BYTES"] <= smem_limit and p["block_size_x"] == d["THREADS"]

    return [*(c.text for c in spec.space.constraints), "(BM // WM) * (BN // WN) * 32 == block_size_x", check]


def bench_ms(launch, reps: int = 30, warmup: int = 3) -> float:
    import cupy as cp
    import numpy as np

    flush = cp.empty(128 * 2**20 // 4, dtype=cp.float32)
    for _ in range(warmup):
        launch()
    times = []
    for _ in range(reps):
        flush.fill(0)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return float(np.median(times))


def inputs():
    import cupy as cp

    rng = cp.random.default_rng(7)
    return rng.standard_normal((M, K), dtype=cp.float32), rng.standard_normal((K, N), dtype=cp.float32)


def time_cublas() -> float:
    import cupy as cp

    a, b = inputs()
    out = cp.empty((M, N), dtype=cp.float32)
    return bench_ms(lambda: cp.matmul(a, b, out=out))


def retime(params: dict) -> dict:
    """Verify and time one configuration with this script's harness (the same for every row)."""
    try:
        return _retime(params)
    except Exception as exc:  # noqa: BLE001 - keep the part's counts even if the winner cannot be re-run
        return {"retime_error": f"{type(exc).__name__}: {exc}"[:300]}


def _retime(params: dict) -> dict:
    import cupy as cp

    launch = FAMILY.launch("simt", template_params(params), PROBLEM)
    fn = cp.RawModule(code=kt_source(params), options=("-std=c++17",)).get_function(KT_NAME)
    if launch.shared_bytes > SMEM_48K:
        fn.max_dynamic_shared_size_bytes = launch.shared_bytes
    a, b = inputs()
    c = cp.full((M, N), cp.nan, dtype=cp.float32)
    args = FAMILY.kernel_args(PROBLEM, (a, b), c)  # (A, B, C, M, N, K[, alpha=1, beta=0]): the family's own
    run = lambda: fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)  # noqa: E731
    run()
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    err = float(cp.linalg.norm(c.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    ms = bench_ms(run)
    return {"best_ms": ms, "best_tflops": PROBLEM.flops / ms / 1e9, "rel_error": err, "verified": err <= TOLERANCE}


# --- part kt ------------------------------------------------------------------------------------------------


def kt_data() -> tuple:
    """The device's shared-memory limit, A and B on the host, and C = A @ B in float64 rounded to float32."""
    import cupy as cp

    a, b = inputs()
    c_ref = (a.astype(cp.float64) @ b.astype(cp.float64)).astype(cp.float32)
    limit = cp.cuda.Device().attributes.get("MaxSharedMemoryPerBlockOptin", SMEM_48K)
    return limit, a.get(), b.get(), c_ref.get()


def part_kt(args) -> dict:
    import kernel_tuner
    import numpy as np

    spec = load_spec(args.spec)
    smem_limit, a, b, c_ref = kt_data()
    if args.raise_smem:  # stock Kernel Tuner launches above 48 KB without raising the limit, and fails
        from kernel_tuner.backends.cupy import CupyFunctions

        plain = CupyFunctions.copy_shared_memory_args

        def copy_shared_memory_args(self, smem_args):
            plain(self, smem_args)
            if self.smem_size > SMEM_48K:
                self.func.max_dynamic_shared_size_bytes = self.smem_size

        CupyFunctions.copy_shared_memory_args = copy_shared_memory_args
    arguments = list(FAMILY.kernel_args(PROBLEM, (a, b), np.full((M, N), np.nan, dtype=np.float32)))
    answer = [None] * len(arguments)
    answer[2] = c_ref  # only C is compared
    state = {"current": None, "generated": 0, "bad": {}}

    def source(p: dict) -> str:  # Kernel Tuner calls this with the config dict, just before compiling it
        state["current"], state["generated"] = json.dumps(template_params(p)), state["generated"] + 1
        return kt_source(p)

    want = c_ref.astype(np.float64)
    want_norm = float(np.linalg.norm(want))

    def verify(answer, result_host, atol=None):
        # A False here makes Kernel Tuner raise and end the whole run, so failures are recorded and dropped later.
        out = result_host[2].astype(np.float64)
        err = float(np.linalg.norm(out - want)) / want_norm if np.isfinite(out).all() else float("inf")
        if err > TOLERANCE:
            state["bad"][state["current"]] = err
        return True

    np.random.seed(0)  # random_sample draws from numpy's global generator
    options = dict(
        grid_div_x=["BN"], grid_div_y=["BM"], restrictions=kt_restrictions(spec, smem_limit),
        answer=answer, verify=verify, lang="cupy",
        smem_args={"size": lambda p: FAMILY.derived("simt", template_params(p))["SHARED_BYTES"]},
        compiler_options=["-std=c++17"], defines={}, iterations=7, quiet=True,
        strategy="random_sample", strategy_options={"time_limit": args.seconds, "fraction": 1.0},
    )  # fmt: skip
    t0 = time.perf_counter()
    try:
        results, _env = kernel_tuner.tune_kernel(KT_NAME, source, (N, M), arguments, kt_tune_params(spec), **options)
    except Exception as exc:  # noqa: BLE001 - recorded in the row; the other parts still run
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "generated": state["generated"],
                "wall_s": time.perf_counter() - t0}  # fmt: skip
    wall = time.perf_counter() - t0
    errors = collections.Counter(str(r["__error__"]) for r in results if "__error__" in r)
    done = [r for r in results if "__error__" not in r and json.dumps(template_params(r)) not in state["bad"]]
    best = min(done, key=lambda r: r["time"], default=None)
    row = {
        "wall_s": wall,
        "evaluated": len(results) - errors["InvalidConfig"],
        "failed": sum(errors.values()) - errors["InvalidConfig"] + len(state["bad"]),
        "statuses": {**errors, "verify-failed": len(state["bad"]), "complete": len(done)},
        "kt_results": len(results),
        "mean_compile_s": sum(r["compile_time"] for r in results) / 1e3 / max(1, len(results)),
        "tool_best_ms": best["time"] if best else None,  # Kernel Tuner's own: mean of 7, no L2 flush
        "best_params": template_params(best) if best else None,
    }
    if best:
        row.update(retime(best))
    return row


# --- part autotune ------------------------------------------------------------------------------------------


def part_autotune(args) -> dict:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    runs, tuned = args.work / f"runs_{args.sampler}", args.work / f"tuned_{args.sampler}"
    cmd = [sys.executable, "-m", "autotune", "run", str(args.spec), "--sampler", args.sampler,
           "--runs-dir", str(runs), "--tuned-dir", str(tuned)]  # fmt: skip
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(cmd, cwd=ROOT, timeout=args.seconds * 3 + 600).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.perf_counter() - t0
    journals = sorted(runs.glob("*/*.journal"))
    if not journals:
        return {"error": f"autotune exited {rc} and wrote no journal", "wall_s": wall}
    storage = JournalStorage(JournalFileBackend(str(journals[0])))
    trials = [t for name in optuna.study.get_all_study_names(storage)
              for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)]  # fmt: skip
    # Trial attributes: "status", and the measurements either beside it or (newer) in a "result" mapping.
    trials = [t for t in trials if "status" in t.user_attrs and "duplicate_of" not in t.user_attrs]
    res = {t.number: t.user_attrs.get("result", t.user_attrs) for t in trials}
    statuses = collections.Counter(t.user_attrs["status"] for t in trials)
    done = [t for t in trials if t.user_attrs["status"] == "complete"]
    best = min(done, key=lambda t: res[t.number]["median_ms"], default=None)
    compiled = [res[t.number]["compile_s"] for t in trials if "compile_s" in res[t.number]]
    row = {
        "wall_s": wall,
        "rc": rc,
        "evaluated": sum(n for s, n in statuses.items() if s not in NOT_RUN),
        "failed": sum(statuses[s] for s in BAD),
        "compiled_not_run": sum(  # spills or too many registers: compiled, then rejected without a launch
            t.user_attrs["status"] == "invalid" and "compile_s" in res[t.number] for t in trials
        ),
        "statuses": dict(statuses),
        "mean_compile_s": sum(compiled) / max(1, len(compiled)),
        "tool_best_ms": res[best.number]["median_ms"] if best else None,  # median, L2 flushed
        "tool_best_tflops": res[best.number].get("tflops") if best else None,
        "best_params": {k: best.params[k] for k in PARAMS} if best else None,
        "journal": str(journals[0]),
    }
    if best:
        row.update(retime(row["best_params"]))
    return row


# --- parent -------------------------------------------------------------------------------------------------


def run_part(args, part: str, sampler: str, spec: Path) -> dict:
    result = args.work / f"{part}_{sampler}.json"
    env = {**os.environ, "CUPY_CACHE_DIR": str(args.work / f"cupy_cache_{part}_{sampler}")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--sampler", sampler, "--spec", str(spec),
           "--seconds", str(args.seconds), "--work", str(args.work), "--result", str(result)]  # fmt: skip
    cmd += ["--raise-smem"] if args.raise_smem else []
    print(f"--- {part} ({sampler}), {args.seconds:g} s", file=sys.stderr, flush=True)
    try:  # cwd: Kernel Tuner writes temp_*.c files there when a compile fails
        rc = subprocess.run(cmd, env=env, cwd=args.work, timeout=args.seconds * 4 + 900).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    row = json.loads(result.read_text()) if result.exists() else {"error": f"part exited {rc} without a result"}
    row = {"tool": "kernel_tuner" if part == "kt" else "autotune", "sampler": sampler, **row}
    if row.get("evaluated") is not None and row.get("wall_s"):
        row["configs_per_min"] = row["evaluated"] / row["wall_s"] * 60
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="wall-time budget per tool run (default 120)")
    ap.add_argument("--skip-kt", action="store_true")
    ap.add_argument("--skip-autotune", action="store_true")
    ap.add_argument("--raise-smem", action="store_true", help="patch Kernel Tuner to allow > 48 KB, both sides")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--part", choices=("kt", "autotune"), help=argparse.SUPPRESS)
    ap.add_argument("--sampler", default="random", help=argparse.SUPPRESS)
    ap.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        row = part_kt(args) if args.part == "kt" else part_autotune(args)
        args.result.write_text(json.dumps(row, indent=1, default=str))
        return 0

    import importlib.metadata as md

    import cupy as cp

    args.work = Path(tempfile.mkdtemp(prefix="kt_vs_autotune_"))
    spec = write_spec(args.work, args.seconds, args.raise_smem)
    n_space = sum(1 for c in load_spec(spec).space.enumerate() if FAMILY.check("simt", c.as_dict()) is None)
    cublas_ms = time_cublas()
    cp.get_default_memory_pool().free_all_blocks()

    rows = []
    if not args.skip_kt:
        rows.append(run_part(args, "kt", "random_sample", spec))
    if not args.skip_autotune:
        rows += [run_part(args, "autotune", s, spec) for s in ("random", "tpe")]
    for r in rows:
        r["x_cublas"] = cublas_ms / r["best_ms"] if r.get("best_ms") else None

    def version(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    props = cp.cuda.runtime.getDeviceProperties(0)
    meta = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        "versions": {"cupy": cp.__version__, "kernel_tuner": version("kernel_tuner"), "optuna": version("optuna"),
                     "nvrtc": ".".join(map(str, cp.cuda.nvrtc.getVersion())), "python": sys.version.split()[0]},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": args.seconds, "shape": [M, N, K], "dtype": "float32", "raise_smem": args.raise_smem,
        "space_size": n_space, "cublas_ms": cublas_ms, "cublas_tflops": PROBLEM.flops / cublas_ms / 1e9,
        "spec": yaml.safe_load(spec.read_text()), "work_dir": str(args.work),
        "method": "wall_s: the tune_kernel call for Kernel Tuner (its time_limit covers its start-up), the whole "
        "`autotune run` process for autotune (start-up, cuBLAS timing and final re-timing included); evaluated: "
        "configurations compiled and launched (Kernel Tuner: its results less InvalidConfig; autotune: trials less "
        "duplicates, invalid and unevaluated); best_ms: each row's winner re-verified and timed here like cuBLAS "
        "(CUDA events, 128 MB L2 flush before each launch, median of 30); tool_best_ms: the tool's own number "
        "(Kernel Tuner: mean of 7 launches, no flush; autotune: median, L2 flushed)",
    }  # fmt: skip
    kt = next((r for r in rows if r["tool"] == "kernel_tuner" and r.get("configs_per_min")), None)
    for r in rows:
        if kt and r["tool"] == "autotune" and r.get("configs_per_min"):
            r["speedup_vs_kt"] = r["configs_per_min"] / kt["configs_per_min"]

    print(f"\n{meta['gpu']}  {meta['versions']}  {meta['date']}")
    print(f"{M}x{N}x{K} fp32, {n_space} valid configurations, {args.seconds:g} s per run; "
          f"cuBLAS {cublas_ms:.3f} ms = {meta['cublas_tflops']:.1f} TFLOP/s")  # fmt: skip
    cols = [("tool", "", 12), ("sampler", "", 13), ("wall_s", ".1f", 7), ("evaluated", "d", 9),
            ("configs_per_min", ".1f", 11), ("failed", "d", 6), ("best_ms", ".3f", 8), ("best_tflops", ".1f", 11),
            ("x_cublas", ".2f", 8)]  # fmt: skip
    print(" ".join(f"{c:>{w}}" for c, _, w in cols))
    for r in rows:
        print(" ".join(f"{'-' if r.get(c) is None else format(r[c], f):>{w}}" for c, f, w in cols))
        if r.get("error"):
            print(f"    {r['tool']} {r['sampler']}: {r['error']}")
    for r in rows:
        if r.get("speedup_vs_kt"):
            print(f"autotune ({r['sampler']}) evaluates {r['speedup_vs_kt']:.1f}x the configurations per minute of KT")

    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / "throughput_vs_kernel_tuner"
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1, default=str) + "\n")
    fields = ["gpu", "date", "seconds"] + sorted({k for r in rows for k in r})
    with stem.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows({"gpu": meta["gpu"], "date": meta["date"], "seconds": args.seconds, **r} for r in rows)
    print(f"results: {stem}.json, {stem}.csv")
    return 0 if rows and all(r.get("best_ms") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
