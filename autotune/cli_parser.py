"""The ``autotune`` command's arguments: one parser per command, built when the command line is read."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Tune parameterized CUDA kernels (GEMM, conv2d) for the GPU you run on.

A spec (YAML) names the kernel family and template (or `auto`: the template as a search dimension),
the dtypes and layouts, the problem shapes, the parameter space with its constraints, the objective
(time, energy or both), the budget and the sampler. `autotune run` compiles each candidate with
NVRTC, verifies it against a float64 reference on fresh random inputs, times it with CUDA events
against the vendor library, and stores the fastest verified configuration per shape in
tuned/<gpu-key>/<kernel>.json. Studies live in runs/ so an interrupted run resumes where it stopped.
"""

RUN_EPILOG = """\
examples:
  autotune run configs/gemm.yaml                      tune every shape of the spec
  autotune run configs/gemm.yaml --shape 4096x4096x4096 --minutes 2
  autotune run configs/gemm.yaml --compile-only --arch sm_90 --limit 20
                                                      compile a sample of candidates, no GPU needed
  autotune run configs/gemm.yaml --storage sqlite:///runs/gemm.db
  autotune run configs/gemm.yaml --gpus all           one worker per GPU of this host, sharing the studies
  autotune run configs/gemm.yaml --storage postgresql://user@db/autotune
                                                      the same on each machine: one study across machines
  autotune run configs/gemm_fp16.yaml                 tensor cores (wmma, mma) for fp16; gemm_bf16.yaml too
  autotune run configs/gemm_skinny.yaml               decode shapes: the skinny template or wmma, with split-K
  autotune run configs/gemm_skinny_fp32.yaml          fp32 decode shapes: SIMT skinny or 3xTF32 tensor cores
  autotune run configs/gemm_energy.yaml               time and J per launch: a Pareto front per shape
  autotune run configs/conv.yaml                      fp32 convolution: direct or implicit GEMM (auto), vs cuDNN
  autotune run configs/conv_fp16.yaml                 fp16 NHWC convolution: implicit GEMM on tensor cores, ...
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("--version", action=_VersionAction, help="print the versions of autotune, Optuna and CuPy")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _run_parser(sub)
    _ladder_parser(sub)
    _export_parser(sub)
    _report_parsers(sub)
    _replay_parsers(sub)
    return parser


def _run_parser(sub: Any) -> None:
    """``run``: tune a spec or a workload, or only compile its candidates."""
    run = sub.add_parser(
        "run",
        help="tune the kernels of a spec (or only compile them with --compile-only)",
        description="Tune every shape of a spec; rerunning the same command resumes the stored studies.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "spec", help="a YAML tuning spec (e.g. configs/gemm.yaml) or a workload written by autotune.record()"
    )
    run.add_argument("--shape", action="append", metavar="MxNxK", help="tune only this shape (repeatable)")
    run.add_argument("--trials", type=int, metavar="N", help="evaluated candidates per shape (overrides budget.trials)")
    run.add_argument(
        "--minutes", type=float, metavar="M",
        help="wall time per shape (overrides budget.minutes); for a workload, the whole model's budget (default 20)",
    )  # fmt: skip
    run.add_argument(
        "--slice-minutes", type=float, metavar="M",
        help="workloads: tuning slice the scheduler hands to one problem at a time (default: budget / 3 problems)",
    )  # fmt: skip
    run.add_argument(
        "--sampler",
        choices=("tpe", "random", "gp", "cmaes", "brute", "nsga2", "ga"),
        help="override the spec's sampler",
    )
    run.add_argument(
        "--energy", action="store_true",
        help="also measure J per launch (NVML, ~1-2 s per candidate) when the objective is time only",
    )  # fmt: skip
    run.add_argument(
        "--storage", metavar="URL",
        help="Optuna storage: a journal file path or any storage URL (default runs/<spec>/<gpu-key>.journal)",
    )  # fmt: skip
    run.add_argument(
        "--gpus", metavar="LIST",
        help="one worker per GPU of this host, e.g. 0,1,2,3 or all; they share the studies (see docs/distributed.md)",
    )  # fmt: skip
    run.add_argument("--runs-dir", default="runs", type=Path, help="where default study journals go (default runs/)")
    run.add_argument("--tuned-dir", default="tuned", type=Path, help="where best configurations go (default tuned/)")
    run.add_argument("--force", action="store_true", help="replace stored entries even when they were faster")
    run.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help="parallel compiles (default: cores)"
    )
    run.add_argument(
        "--abort-ratio", type=float, default=2.0, metavar="K",
        help="stop timing a candidate whose first launches take K times the best so far (default 2; 0: never)",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=float, default=30.0, metavar="S",
        help="seconds a candidate may take on the GPU before it counts as hung (compiles get 4x)",
    )  # fmt: skip
    run.add_argument("--compile-only", action="store_true", help="render and compile candidates; no GPU needed")
    run.add_argument("--arch", metavar="sm_XX", help="target architecture for --compile-only (default: this GPU's)")
    run.add_argument(
        "--limit", type=int, metavar="N", help="with --compile-only: compile a seeded sample of N candidates"
    )


def _ladder_parser(sub: Any) -> None:
    ladder = sub.add_parser(
        "ladder",
        help="measure the tuned kernel with each optimization switched off in turn (GPU)",
        description="The kernel guide's optimization ladder on this GPU: the tuned configuration of a shape, "
        "then without double buffering, padding, vector loads, with the smallest register tile, and naive.",
    )
    ladder.add_argument("shape", metavar="MxNxK", help="a shape tuned on this GPU, e.g. 4096x4096x4096")
    ladder.add_argument("--dtype", default="float32")
    ladder.add_argument("--kernel", default="gemm", help="the kernel family (default gemm)")
    ladder.add_argument("--tuned-dir", type=Path, help="tuned results (default: the package's tuned/)")
    ladder.add_argument("--out", type=Path, help="also write ladder_<shape>.csv and .md here")


def _export_parser(sub: Any) -> None:
    export = sub.add_parser(
        "export",
        help="write tuned configurations as a C/C++ header plus rendered .cu sources",
        description="Write <out>/autotune_tuned.h (one row per tuned GPU and shape) and <out>/<gpu-key>/*.cu.",
    )
    export.add_argument("--tuned-dir", type=Path, help="tuned results to export (default: the package's tuned/)")
    export.add_argument("--out", type=Path, default=Path("export"), help="output directory (default export/)")


def _report_parsers(sub: Any) -> None:
    """``report`` and ``compare``: tables and plots of runs (autotune.report)."""
    report = sub.add_parser(
        "report",
        help="tables, CSV, Markdown and one HTML page of plots from a run's studies",
        description="Report on every trial of a run: best per shape, outcomes, search progress, parameter\n"
        "importance, parameters vs TFLOP/s, a roofline and speedup vs cuBLAS. Plots need autotune[report];\n"
        "--no-plots writes the tables and notes alone, in a fraction of the time, without matplotlib.",
        epilog="examples:\n  autotune report runs/gemm --tuned-dir tuned --out report/\n"
        "  autotune report runs/gemm --no-plots",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("source", help="a study journal, a runs/ directory (every *.journal in it) or a storage URL")
    report.add_argument("--tuned-dir", type=Path, metavar="DIR", help="tuned/ results: cuBLAS times and winners")
    report.add_argument("--out", type=Path, default=Path("report"), metavar="DIR", help="output folder (report/)")
    report.add_argument("--no-plots", action="store_true", help="tables, CSV and notes only: no plot is drawn")
    compare = sub.add_parser(
        "compare",
        help="two runs, two GPUs' tuned results or two configurations, side by side per shape (B over A)",
        description="Best per shape of A and B with B/A ratios of time and TFLOP/s; each side is a journal, a "
        "runs/ directory, a storage URL, a tuned/ (GPU) directory or a tuned .json file, or SOURCE@KERNEL_NAME "
        "for one configuration of a run (e.g. runs/gemm@gemm_simt_bm128_bn256_bk16_...).",
    )
    compare.add_argument("a", help="the baseline (A)")
    compare.add_argument("b", help="compared with A (B)")
    compare.add_argument("--out", type=Path, default=Path("report"), metavar="DIR", help="where compare.csv/.md go")
    compare.add_argument(
        "--all", action="store_true", dest="show_all", help="also list shapes measured on one side only"
    )


def _replay_parsers(sub: Any) -> None:
    """``replay`` and ``export-t4``: search strategies on recorded spaces (autotune.tune.replay, autotune.tune.t4)."""
    from .tune.replay import SAMPLERS

    rp = sub.add_parser(
        "replay", help="replay a recorded space (T4 or Kernel Tuner cache) through the search loop, no GPU",
        description="Run the search loop on recorded measurements: evaluations and simulated time to come within "
        "1% and 5% of the record's optimum, median and quartiles over seeds; a table and a plot.",
    )  # fmt: skip
    rp.add_argument("record", help="a T4 record or a Kernel Tuner cache file (.json or .json.gz)")
    rp.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="search strategy (default tpe)")
    rp.add_argument("--runs", type=int, default=50, metavar="N", help="seeds (default 50)")
    rp.add_argument("--budget", type=int, default=300, metavar="N", help="evaluations per run (default 300)")
    rp.add_argument("--startup", type=int, default=30, metavar="N", help="TPE's random trials (default 30)")
    rp.add_argument("--abort-ratio", type=float, default=2.0, metavar="K", help="early abort as in run (0: never)")
    rp.add_argument("--out", type=Path, default=Path("replay"), metavar="DIR", help="table and plot (replay/)")
    ex = sub.add_parser("export-t4", help="write one study of a run as a T4 record (e.g. a --sampler brute run)")
    ex.add_argument("source", help="a study journal or an Optuna storage URL")
    ex.add_argument("--study", help="the study's name (needed when the storage holds several)")
    ex.add_argument("--out", required=True, metavar="FILE", help="the record: FILE.json or FILE.json.gz")


class _VersionAction(argparse.Action):
    """``--version``: like argparse's own, but the package versions are looked up only when it is asked for."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:  # noqa: A002
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(_version_line())
        parser.exit()


def _version_line() -> str:
    """``autotune 0.1.0 (Python 3.11.7, optuna 5.0.0, cupy-cuda13x 14.2.0)``: what is installed, read when asked."""
    from importlib.metadata import PackageNotFoundError, version

    from .core.version import __version__

    parts = [f"Python {sys.version.split()[0]}"]
    for package in ("optuna", "cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    return f"autotune {__version__} ({', '.join(parts)})"
