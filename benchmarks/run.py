"""Run the benchmark suite: each benchmark script as its own process, each writing one JSON + CSV into --out.

    python3 benchmarks/run.py                          every benchmark that can run here
    python3 benchmarks/run.py --only vendor_gemm runtime_overhead --quick --out /tmp/bench
    python3 benchmarks/run.py --dry-run                what would run, and why the others would not

A benchmark that cannot run here is skipped with a one-line reason: its script is not in this checkout, a
module it needs is not installed, or it needs a CUDA GPU and none is usable. Each script writes
<out>/<name>*.json and .csv with the GPU, the versions and the date inside; the runner checks that it did.
--quick runs each benchmark's short form (fewer shapes, shorter timing or budgets): a smoke run, written to
runs/benchmarks-quick unless --out says otherwise, never over the committed numbers. Exit status: 0 when every
benchmark that ran succeeded (a skip is not a failure), 1 when one failed, 2 for bad arguments.
benchmarks/README.md holds the latest numbers and their goals.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results"  # the committed numbers
QUICK_OUT = ROOT / "runs" / "benchmarks-quick"  # ignored by git: smoke runs never overwrite the committed numbers


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: a script in benchmarks/, its arguments (full and --quick), what it needs, what it writes."""

    name: str
    script: str
    what: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()  # replaces args under --quick
    needs: tuple[str, ...] = ("cupy",)  # importable modules
    gpu: bool = True
    outputs: str = ""  # glob of the result files' stem in --out (default: the name)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("vendor_gemm", "tuned_vs_vendor.py", "every stored GEMM winner re-verified and re-timed against cuBLAS",
              ("--kernel", "gemm"), ("--kernel", "gemm", "--quick"), outputs="gemm_*"),
    Benchmark("vendor_conv2d", "tuned_vs_vendor.py", "every stored conv2d winner re-verified and re-timed against "
              "cuDNN", ("--kernel", "conv2d"), ("--kernel", "conv2d", "--quick"), ("cupy", "torch"),
              outputs="conv2d_*"),
    Benchmark("throughput_vs_kernel_tuner", "throughput_vs_kernel_tuner.py", "configurations per minute and best "
              "found against Kernel Tuner, same template and space", ("--seconds", "60"), ("--seconds", "20"),
              ("cupy", "optuna", "kernel_tuner")),
    Benchmark("runtime_overhead", "runtime_overhead.py", "first call of autotune.gemm in a fresh process, and the "
              "per-call overhead over a bare launch"),
    Benchmark("energy", "energy_repeatability.py", "J per launch of stored winners, measured twice (NVML)",
              quick=("--shape", "4096x4096x4096"), needs=("cupy", "pynvml"), outputs="energy_repeatability_*"),
    Benchmark("models", "models.py", "ResNet-50 and Llama layers end to end against torch (eager, CUDA graph)",
              quick=("--quick",), needs=("cupy", "torch", "torchvision"), outputs="models*"),
    Benchmark("storage_throughput", "storage_throughput.py", "configurations per minute with PostgreSQL storage "
              "against the journal default", quick=("--quick",), needs=("cupy", "optuna", "sqlalchemy")),
    Benchmark("triton_baseline", "triton_baseline.py", "the tensor-core GEMM against cuBLAS and an autotuned Triton "
              "tl.dot matmul, one process", quick=("--quick",), needs=("cupy", "torch", "triton")),
    Benchmark("power_ceiling", "power_ceiling.py", "large fp16/bf16 GEMM, ours and cuBLAS, beside the tensor cores' "
              "own rate under the card's power cap (sustained, NVML clocks and energy)", quick=("--quick",),
              needs=("cupy", "pynvml"), outputs="power_ceiling_*"),
    Benchmark("fp32_accuracy", "fp32_accuracy.py", "the stored fp32 winners' error against cuBLAS SGEMM's on the same "
              "inputs, normal and wide-range", quick=("--shapes", "1000x1000x1000"), outputs="fp32_accuracy_*"),
    Benchmark("replay_vs_kernel_tuner", "replay_vs_kernel_tuner.py", "search strategies replayed on recorded spaces "
              "against Kernel Tuner's simulation mode", quick=("--quick",), needs=("optuna", "kernel_tuner"),
              gpu=False, outputs="replay*"),
)  # fmt: skip
BY_NAME = {b.name: b for b in BENCHMARKS}


@dataclass(frozen=True)
class Step:
    """A planned benchmark: the command to run, or the reason it is skipped."""

    benchmark: Benchmark
    argv: tuple[str, ...]
    skip: str | None = None


def have_module(name: str) -> bool:
    """Whether ``name`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def gpu_problem() -> str | None:
    """None when a CUDA GPU is usable through CuPy, else why not (one line)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "no CUDA GPU is visible"
    except Exception as exc:  # noqa: BLE001 - every flavour of "no driver / no device" is a reason to skip
        return f"no usable CUDA GPU ({type(exc).__name__})"


def plan(
    names: Sequence[str],
    *,
    quick: bool,
    out: Path,
    bench_dir: Path = BENCH_DIR,
    module_found: Callable[[str], bool] | None = None,
    gpu_check: Callable[[], str | None] | None = None,
) -> list[Step]:
    """The steps for the named benchmarks, in suite order: a command line each, or a skip reason.

    ``module_found`` and ``gpu_check`` default to :func:`have_module` and :func:`gpu_problem`.
    """
    module_found = module_found or have_module
    gpu_check = gpu_check or gpu_problem
    steps: list[Step] = []
    gpu_reason: list[str | None] = []  # asked at most once, and only if a benchmark gets that far
    for bench in BENCHMARKS:
        if bench.name not in names:
            continue
        script = bench_dir / bench.script
        argv = (sys.executable, str(script), *(bench.quick if quick else bench.args), "--out", str(out))
        missing = [m for m in bench.needs if not module_found(m)]
        skip = None
        if not script.is_file():
            skip = f"benchmarks/{bench.script} is not in this checkout"
        elif missing:
            skip = f"needs {', '.join(missing)}, not installed"
        elif bench.gpu:
            if not gpu_reason:
                gpu_reason.append(gpu_check())
            skip = gpu_reason[0]
        steps.append(Step(bench, argv, skip))
    return steps


def check_outputs(bench: Benchmark, out: Path, since: float) -> str | None:
    """None when the run wrote a JSON and a CSV with the GPU, versions and date inside, else what is wrong."""
    pattern = bench.outputs or bench.name
    written = [p for p in sorted(out.glob(f"{pattern}.json")) if p.stat().st_mtime >= since]
    if not written:
        return f"wrote no {pattern}.json in {out}"
    keys = ("gpu", "versions", "date") if bench.gpu else ("versions", "date")
    for path in written:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            return f"{path.name} cannot be read as JSON ({exc})"
        lacking = [k for k in keys if not isinstance(doc, dict) or k not in doc]
        if lacking:
            return f"{path.name} lacks {', '.join(lacking)}"
        if not path.with_suffix(".csv").is_file() or path.with_suffix(".csv").stat().st_mtime < since:
            return f"wrote {path.name} but no {path.with_suffix('.csv').name}"
    return None


def run_step(step: Step, out: Path) -> tuple[str, float]:
    """Run one planned benchmark in its own process; its status line and its wall time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"\n=== {step.benchmark.name}: {' '.join(step.argv[1:])}", flush=True)
    since = time.time() - 1  # file times can be coarser than the clock
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(step.argv, cwd=ROOT, env=env).returncode
    except KeyboardInterrupt:
        return "interrupted", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    problem = check_outputs(step.benchmark, out, since)
    if rc != 0:
        return f"failed (exit {rc})" + (f"; {problem}" if problem else ""), wall
    return (f"failed: {problem}" if problem else "ok"), wall


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    listing = "\n".join(
        f"  {b.name:<27} {b.script} (needs {', '.join(b.needs)}{' and a CUDA GPU' if b.gpu else ''})\n"
        f"  {'':<27} {b.what}"
        for b in BENCHMARKS
    )
    ap = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description=__doc__,
        epilog=f"benchmarks (NAME, script, what it measures):\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=list(BY_NAME), help="run only these benchmarks")
    ap.add_argument("--quick", action="store_true", help="each benchmark's short form: a smoke run")
    ap.add_argument("--out", type=Path, help="folder for the JSON and CSV files (default: benchmarks/results, "
                    "the committed numbers; with --quick: runs/benchmarks-quick)")  # fmt: skip
    ap.add_argument("--dry-run", action="store_true", help="print the plan (commands and skip reasons), run nothing")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = (args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)).resolve()
    if out.exists() and not out.is_dir():
        print(f"benchmarks/run.py: --out {out} is a file, not a folder.", file=sys.stderr)
        return 2
    steps = plan(args.only or list(BY_NAME), quick=args.quick, out=out)
    results: list[tuple[str, str, float | None]] = []
    for step in steps:
        if step.skip:
            results.append((step.benchmark.name, f"skipped: {step.skip}", None))
        elif args.dry_run:
            results.append((step.benchmark.name, "would run: " + " ".join(step.argv[1:]), None))
        else:
            out.mkdir(parents=True, exist_ok=True)
            status, wall = run_step(step, out)
            results.append((step.benchmark.name, status, wall))
            if status == "interrupted":
                break
    print(f"\nbenchmark suite{' (dry run)' if args.dry_run else ''}, results in {out}:")
    for name, status, wall in results:
        print(f"  {name:<27} {'' if wall is None else f'{wall:7.1f} s':>9}  {status}")
    ran = [status for _, status, wall in results if wall is not None]
    return 0 if all(s == "ok" for s in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
