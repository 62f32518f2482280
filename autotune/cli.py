"""The ``autotune`` command: thin wrappers over library functions."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

from .errors import AutotuneError

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
        "--sampler", choices=("tpe", "random", "gp", "cmaes", "brute", "nsga2"), help="override the spec's sampler"
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
    ladder = sub.add_parser(
        "ladder",
        help="measure the tuned kernel with each optimization switched off in turn (GPU)",
        description="The kernel guide's optimization ladder on this GPU: the tuned configuration of a shape, "
        "then without double buffering, padding, vector loads, with the smallest register tile, and naive.",
    )
    ladder.add_argument("shape", metavar="MxNxK", help="a shape tuned on this GPU, e.g. 4096x4096x4096")
    ladder.add_argument("--dtype", default="float32")
    ladder.add_argument("--tuned-dir", type=Path, help="tuned results (default: the package's tuned/)")
    ladder.add_argument("--out", type=Path, help="also write ladder_<shape>.csv and .md here")
    export = sub.add_parser(
        "export",
        help="write tuned configurations as a C/C++ header plus rendered .cu sources",
        description="Write <out>/autotune_tuned.h (one row per tuned GPU and shape) and <out>/<gpu-key>/*.cu.",
    )
    export.add_argument("--tuned-dir", type=Path, help="tuned results to export (default: the package's tuned/)")
    export.add_argument("--out", type=Path, default=Path("export"), help="output directory (default export/)")
    report = sub.add_parser(
        "report",
        help="tables, CSV, Markdown and one HTML page of plots from a run's studies",
        description="Report on every trial of a run: best per shape, outcomes, search progress, parameter\n"
        "importance, parameters vs TFLOP/s, a roofline and speedup vs cuBLAS. Plots need autotune[report].",
        epilog="example:\n  autotune report runs/gemm --tuned-dir tuned --out report/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("source", help="a study journal, a runs/ directory (every *.journal in it) or a storage URL")
    report.add_argument("--tuned-dir", type=Path, metavar="DIR", help="tuned/ results: cuBLAS times and winners")
    report.add_argument("--out", type=Path, default=Path("report"), metavar="DIR", help="output folder (report/)")
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
    _replay_parsers(sub)
    return parser


def _replay_parsers(sub: Any) -> None:
    """``replay`` and ``export-t4``: search strategies on recorded spaces (autotune.replay, autotune.t4)."""
    from .replay import SAMPLERS

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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what --gpus passes on to each GPU's worker
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "ladder":
            return cmd_ladder(args)
        if args.command == "report":
            from .report import report_command

            return report_command(args.source, args.tuned_dir, args.out)
        if args.command == "compare":
            from .report import compare_command

            return compare_command(args.a, args.b, args.out, show_all=args.show_all)
        if args.command == "replay":
            from .replay import replay_command

            return replay_command(args.record, args.sampler, args.runs, args.budget, args.abort_ratio, args.out,
                                  args.startup)  # fmt: skip
        if args.command == "export-t4":
            from .t4 import export_command

            return export_command(args.source, args.study, args.out)
    except AutotuneError as exc:
        return _user_error(str(exc), exc.exit_code, args.verbose)
    except OSError as exc:
        if exc.filename is None:  # not about a path the user gave: a bug or a broken install, keep its traceback
            raise
        return _user_error(f"{exc.filename}: {exc.strerror or exc}", 2, args.verbose)
    except KeyboardInterrupt:
        print("\nautotune: interrupted; finished trials are saved, run the same command to resume", file=sys.stderr)
        return 130
    return 2


def _user_error(message: str, code: int, verbose: int) -> int:
    """A problem the user can fix: one line on stderr (the traceback too with -vv), and the exit code."""
    if verbose >= 2:
        import traceback

        traceback.print_exc()
    print(f"autotune: error: {message}", file=sys.stderr)
    return code


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

    from . import __version__

    parts = [f"Python {sys.version.split()[0]}"]
    for package in ("optuna", "cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    return f"autotune {__version__} ({', '.join(parts)})"


def _current_gpu(hint: str) -> Any:
    """This GPU, or one sentence saying why there is none followed by what this command can do instead."""
    from .device import current_gpu
    from .errors import NoGPUError

    try:
        return current_gpu()
    except NoGPUError as exc:
        raise NoGPUError(f"{exc}; {hint}") from None


def cmd_ladder(args: argparse.Namespace) -> int:
    from .evaluate import Settings
    from .ladder import measure_ladder
    from .report import markdown_table
    from .runtime import default_tuned_dir
    from .search import FINAL_PLAN
    from .store import entry_key, read, tuned_file
    from .verify import tolerance_for

    gpu = _current_gpu("the ladder measures kernels on the GPU it tunes for, so it needs one")
    path = tuned_file(args.tuned_dir or default_tuned_dir(), gpu.key, "gemm")
    key = entry_key(args.dtype, "NN", args.shape.replace(" ", ""))
    entry = read(path)["entries"].get(key)
    if entry is None:
        raise AutotuneError(f"{path} has no entry {key}; tune that shape first (autotune run ...)")
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for(args.dtype), max_shared_bytes=gpu.max_shared_per_block,
                        timing=FINAL_PLAN)  # fmt: skip
    df = measure_ladder("gemm", args.dtype, args.shape, entry, settings)
    print(f"{gpu.name}: optimization ladder for gemm {args.dtype} {args.shape}")
    print(df.to_string(index=False))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"ladder_{args.dtype}_{args.shape}"
        df.to_csv(stem.with_suffix(".csv"), index=False)
        stem.with_suffix(".md").write_text(f"# Optimization ladder, gemm {args.dtype} {args.shape} on {gpu.name}\n\n"
                                           + markdown_table(df) + "\n")  # fmt: skip
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export
    from .runtime import default_tuned_dir

    tuned_dir = args.tuned_dir or default_tuned_dir()
    if not tuned_dir.is_dir():
        raise AutotuneError(f"{tuned_dir} is not a directory of tuned results")
    paths = export(tuned_dir, args.out)
    print(f"wrote {paths[0]} and {len(paths) - 1} kernel sources under {args.out}")
    return 0


def _positive(name: str, v: float | None) -> None:
    if v is not None and not (math.isfinite(v) and v > 0):
        raise AutotuneError(f"{name} must be a positive number, got {v}")


def cmd_run(args: argparse.Namespace) -> int:
    from .spec import load_spec

    _positive("--trials", args.trials)
    _positive("--minutes", args.minutes)
    _positive("--jobs", args.jobs)
    _positive("--limit", args.limit)
    _positive("--timeout", args.timeout)
    if args.limit is not None and not args.compile_only:
        raise AutotuneError("--limit only applies with --compile-only; a tuning run's budget is --trials/--minutes")
    if not math.isfinite(args.abort_ratio) or (args.abort_ratio and args.abort_ratio < 1):
        raise AutotuneError(f"--abort-ratio must be 0 (never abort) or at least 1, got {args.abort_ratio}")
    if args.arch and not args.compile_only:
        raise AutotuneError("--arch only applies with --compile-only; a tuning run uses the GPU's own arch")
    _positive("--slice-minutes", args.slice_minutes)
    if _is_workload_file(args.spec):
        return tune_workload(args)
    spec = load_spec(args.spec)
    problems = list(spec.problems)
    if args.shape:
        wanted = {s.replace(" ", "") for s in args.shape}
        unknown = wanted - {p.label for p in problems}
        if unknown:
            shapes = ", ".join(p.label for p in problems)
            raise AutotuneError(f"--shape {sorted(unknown)[0]} is not in {spec.path}; its shapes are {shapes}")
        problems = [p for p in problems if p.label in wanted]
    if args.sampler:
        from dataclasses import replace

        from .spec import sampler_problem

        problem = sampler_problem(spec.objective, args.sampler)
        if problem:
            raise AutotuneError(f"--sampler {problem}")
        spec = replace(spec, sampler=args.sampler)
    if args.compile_only:
        if args.gpus:
            raise AutotuneError("--gpus applies to tuning; --compile-only needs no GPU")
        from .compile_only import compile_only

        return compile_only(spec, args, _current_gpu)
    if args.gpus:
        from .gpu_workers import parse_gpus, run_workers, visible_gpu_count

        gpus = parse_gpus(args.gpus, visible_gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        return run_workers(args.argv, gpus, args.jobs, args.runs_dir / spec.name / "workers")
    return tune(spec, problems, args)


def _is_workload_file(path: str) -> bool:
    """Whether ``path`` holds a workload (a ``problems`` list) rather than a tuning spec; unreadable: a spec,
    whose loader then says what is wrong."""
    import yaml

    from .safe_yaml import load_yaml
    from .workload import is_workload

    try:
        with open(path, encoding="utf-8") as f:
            return is_workload(load_yaml(f.read(1 << 20)))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # the spec loader says what is wrong
        return False


def _run_options(args: argparse.Namespace) -> Any:
    from .gpu_workers import WORKER_ENV
    from .session import RunOptions

    # A storage named by the user may be shared with other workers and GPU models (the default one is this GPU
    # model's own file): the studies then carry the GPU key, and workers claim what they evaluate.
    return RunOptions(
        tuned_dir=args.tuned_dir, runs_dir=args.runs_dir, storage=args.storage, jobs=args.jobs, timeout=args.timeout,
        abort_ratio=args.abort_ratio, force=args.force, energy=args.energy, verbose=args.verbose,
        shared=args.storage is not None or WORKER_ENV in os.environ,
    )  # fmt: skip


def tune(spec: Any, problems: list[Any], args: argparse.Namespace) -> int:
    from .progress import Progress
    from .report import final_table, problem_name
    from .session import TuningSession

    gpu = _current_gpu("use --compile-only --arch sm_90 to compile without one")
    trials = args.trials if args.trials is not None else spec.budget.trials
    minutes = args.minutes if args.minutes is not None else spec.budget.minutes
    outcomes, stored = [], {}
    session = TuningSession(_run_options(args), gpu)
    too_big = [r for r in map(session.fit_problem, problems) if r]
    if too_big:
        raise AutotuneError(f"{spec.path}: {too_big[0]}")
    out_path = session.tuned_path(spec.kernel)  # a corrupt results file or a bad storage URL: before any GPU work
    session.storage(spec)
    with session:
        print(f"{gpu.name} ({gpu.key}); studies in {session.storage_url(spec)}", file=sys.stderr)
        for i, problem in enumerate(problems, 1):
            bar = Progress(f"[{i}/{len(problems)}] {problem_name(problem)}", trials, minutes * 60 if minutes else None)
            result = session.tune(spec, problem, trials, minutes, bar.update)
            outcome = result.outcome
            repaired = f" ({outcome.repaired} repaired to a feasible neighbour)" if outcome.repaired else ""
            bar.close(f"{outcome.stopped}; {_counts(outcome.statuses)}{repaired}")
            outcomes.append(outcome)
            if outcome.best is not None:
                stored[problem_name(problem)] = result.stored
    print()
    print(final_table(outcomes, stored))
    print(f"\nresults: {out_path}")
    return 0 if all(o.best is not None for o in outcomes) else 1


def tune_workload(args: argparse.Namespace) -> int:
    """``autotune run workload.yaml``: the model's problems in slices of one budget (``--minutes``, in total)."""
    from .session import TuningSession
    from .tune_workload import run_workload
    from .workload import load_workload

    for flag, value in (("--trials", args.trials), ("--shape", args.shape), ("--compile-only", args.compile_only)):
        if value:
            raise AutotuneError(f"{flag} does not apply to a workload; its budget is --minutes for the whole model")
    workload = load_workload(args.spec)
    minutes = args.minutes if args.minutes is not None else DEFAULT_WORKLOAD_MINUTES
    gpu = _current_gpu("a workload is tuned on the GPU that will run it")
    print(f"{gpu.name} ({gpu.key}): {workload.name}, {len(workload.tasks)} problems, {minutes:g} min", file=sys.stderr)
    with TuningSession(_run_options(args), gpu) as session:
        return run_workload(workload, minutes, session, slice_minutes=args.slice_minutes)


DEFAULT_WORKLOAD_MINUTES = 20.0


def _counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(statuses.items(), key=lambda kv: -kv[1]))
