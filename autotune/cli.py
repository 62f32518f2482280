"""The ``autotune`` command: thin wrappers over library functions."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Any

from .cli_parser import build_parser
from .core.errors import AutotuneError


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

            return report_command(args.source, args.tuned_dir, args.out, plots=not args.no_plots)
        if args.command == "compare":
            from .report import compare_command

            return compare_command(args.a, args.b, args.out, show_all=args.show_all)
        if args.command == "replay":
            from .tune.replay import replay_command

            return replay_command(args.record, args.sampler, args.runs, args.budget, args.abort_ratio, args.out,
                                  args.startup)  # fmt: skip
        if args.command == "export-t4":
            from .tune.t4 import export_command

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


def _current_gpu(hint: str) -> Any:
    """This GPU, or one sentence saying why there is none followed by what this command can do instead."""
    from .core.device import current_gpu
    from .core.errors import NoGPUError

    try:
        return current_gpu()
    except NoGPUError as exc:
        raise NoGPUError(f"{exc}; {hint}") from None


def cmd_ladder(args: argparse.Namespace) -> int:
    from .kernels import FAMILIES
    from .measure.evaluate import Settings
    from .measure.verify import tolerance_for
    from .report import markdown_table
    from .results.store import entry_key, read, tuned_file
    from .serve.runtime import default_tuned_dir
    from .tune.ladder import measure_ladder, rungs
    from .tune.search import FINAL_PLAN

    if args.kernel not in FAMILIES:
        raise AutotuneError(f"--kernel {args.kernel!r} is not a kernel family; expected one of {', '.join(FAMILIES)}")
    gpu = _current_gpu("the ladder measures kernels on the GPU it tunes for, so it needs one")
    path = tuned_file(args.tuned_dir or default_tuned_dir(), gpu.key, args.kernel)
    key = entry_key(args.dtype, FAMILIES[args.kernel].layouts[0], args.shape.replace(" ", ""))
    entry = read(path)["entries"].get(key)
    if entry is None:
        raise AutotuneError(f"{path} has no entry {key}; tune that shape first (autotune run ...)")
    try:
        rungs(args.kernel, entry["template"], entry["params"])
    except ValueError as exc:
        raise AutotuneError(f"{path} {key}: {exc}") from None
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for(args.dtype), max_shared_bytes=gpu.max_shared_per_block,
                        timing=FINAL_PLAN)  # fmt: skip
    df = measure_ladder(args.kernel, args.dtype, args.shape, entry, settings)
    title = f"{args.kernel} {args.dtype} {args.shape}"
    print(f"{gpu.name}: optimization ladder for {title}")
    print(df.to_string(index=False))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"ladder_{args.dtype}_{args.shape}"
        df.to_csv(stem.with_suffix(".csv"), index=False)
        stem.with_suffix(".md").write_text(f"# Optimization ladder, {title} on {gpu.name}\n\n{markdown_table(df)}\n")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .results.export import export
    from .serve.runtime import default_tuned_dir

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
    from .tune.spec import load_spec

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

        from .tune.spec import sampler_problem

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
        from .tune.gpu_workers import parse_gpus, run_workers, visible_gpu_count

        gpus = parse_gpus(args.gpus, visible_gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        return run_workers(args.argv, gpus, args.jobs, args.runs_dir / spec.name / "workers")
    return tune(spec, problems, args)


def _is_workload_file(path: str) -> bool:
    """Whether ``path`` holds a workload (a ``problems`` list) rather than a tuning spec; unreadable: a spec,
    whose loader then says what is wrong."""
    import yaml

    from .core.safe_yaml import load_yaml
    from .tune.workload import is_workload

    try:
        with open(path, encoding="utf-8") as f:
            return is_workload(load_yaml(f.read(1 << 20)))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # the spec loader says what is wrong
        return False


def _run_options(args: argparse.Namespace) -> Any:
    from .tune.gpu_workers import WORKER_ENV
    from .tune.session import RunOptions

    # A storage named by the user may be shared with other workers and GPU models (the default one is this GPU
    # model's own file): the studies then carry the GPU key, and workers claim what they evaluate.
    return RunOptions(
        tuned_dir=args.tuned_dir, runs_dir=args.runs_dir, storage=args.storage, jobs=args.jobs, timeout=args.timeout,
        abort_ratio=args.abort_ratio, force=args.force, energy=args.energy, verbose=args.verbose,
        shared=args.storage is not None or WORKER_ENV in os.environ,
    )  # fmt: skip


def tune(spec: Any, problems: list[Any], args: argparse.Namespace) -> int:
    from .core.progress import Progress
    from .report import final_table, problem_name
    from .tune.session import TuningSession

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
    from .tune.session import TuningSession
    from .tune.tune_workload import run_workload
    from .tune.workload import load_workload

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
