"""The ``autotune`` command: thin wrappers over library functions."""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import logging
import math
import os
import random
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="tune the kernels of a spec (or only compile them with --compile-only)",
        description="Tune every shape of a spec; rerunning the same command resumes the stored studies.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("spec", help="path to a YAML tuning spec, e.g. configs/gemm.yaml")
    run.add_argument("--shape", action="append", metavar="MxNxK", help="tune only this shape (repeatable)")
    run.add_argument("--trials", type=int, metavar="N", help="evaluated candidates per shape (overrides budget.trials)")
    run.add_argument("--minutes", type=float, metavar="M", help="wall time per shape (overrides budget.minutes)")
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
    rp.add_argument("--startup", type=int, default=10, metavar="N", help="TPE's random trials (default 10)")
    rp.add_argument("--abort-ratio", type=float, default=2.0, metavar="K", help="early abort as in run (0: never)")
    rp.add_argument("--out", type=Path, default=Path("replay"), metavar="DIR", help="table and plot (replay/)")
    ex = sub.add_parser("export-t4", help="write one study of a run as a T4 record (e.g. a --sampler brute run)")
    ex.add_argument("source", help="a study journal or an Optuna storage URL")
    ex.add_argument("--study", help="the study's name (needed when the storage holds several)")
    ex.add_argument("--out", required=True, metavar="FILE", help="the record: FILE.json or FILE.json.gz")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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

            return compare_command(args.a, args.b, args.out)
        if args.command == "replay":
            from .replay import replay_command

            return replay_command(args.record, args.sampler, args.runs, args.budget, args.abort_ratio, args.out,
                                  args.startup)  # fmt: skip
        if args.command == "export-t4":
            from .t4 import export_command

            return export_command(args.source, args.study, args.out)
    except AutotuneError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\nautotune: interrupted; finished trials are saved, run the same command to resume", file=sys.stderr)
        return 130
    return 2


def cmd_ladder(args: argparse.Namespace) -> int:
    from .device import current_gpu
    from .evaluate import Settings
    from .ladder import measure_ladder
    from .report import markdown_table
    from .runtime import default_tuned_dir
    from .search import FINAL_PLAN
    from .store import entry_key, read, tuned_file
    from .verify import tolerance_for

    gpu = current_gpu()
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
        return compile_only(spec, args)
    return tune(spec, problems, args)


COMPILE_ALL_LIMIT = 500_000  # configurations a --compile-only run without --limit may render (gemm.yaml: 103,680)


def compile_only(spec: Any, args: argparse.Namespace) -> int:
    from .compile_pool import CompilePool
    from .compiler import nvrtc_version, require_nvrtc
    from .evaluate import Candidate, Settings, render_candidate, static_check
    from .report import compile_table
    from .space import Config

    require_nvrtc()
    arch = args.arch
    max_shared = 227 * 1024
    if arch is None:
        from .device import current_gpu

        gpu = current_gpu()
        arch, max_shared = gpu.arch, gpu.max_shared_per_block
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise AutotuneError(f"--arch expects a name like sm_90, got {arch!r}")
    settings = Settings(arch=arch, tolerance=1.0, max_shared_bytes=max_shared)
    # Kernels take the shape at run time, but the source depends on the dtype, the layout and (for some
    # templates) the operands' alignment: every distinct source of the spec's problems is compiled once.
    candidates, invalid, sources = [], 0, set()

    def add(config: Any) -> None:
        nonlocal invalid
        for problem in spec.problems:
            cand = Candidate(spec.kernel, spec.template, problem, config)
            if static_check(cand, settings) is not None:
                invalid += 1
                continue
            c = render_candidate(cand, settings)
            if c.source_hash not in sources:
                sources.add(c.source_hash)
                candidates.append(c)

    if args.limit:
        # A seeded sample without rendering the whole space (the conv specs have millions of configurations):
        # random walks through the parameters, constraints checked, until `limit` distinct valid sources.
        rng, seen = random.Random(spec.seed), set()
        for _ in range(max(1000, 200 * args.limit)):
            if len(candidates) >= args.limit:
                break
            config = Config.of(spec.space.walk(lambda p: rng.choice(p.values)))
            if config.key in seen or spec.space.violated(config.as_dict()):
                continue
            seen.add(config.key)
            add(config)
        rendered = candidates[: args.limit]
        found = f"{len(rendered)} valid sources sampled"
    else:
        size = spec.space.size_before_constraints()
        if size > COMPILE_ALL_LIMIT:
            raise AutotuneError(
                f"{spec.path}: its space has {size:,} configurations before constraints, too many to render "
                "every one; compile a seeded sample with --limit N"
            )
        for config in spec.space.enumerate():
            add(config)
        rendered = candidates
        found = f"{len(rendered)} valid sources"
    print(
        f"{spec.path}: {found} ({invalid} candidates rejected before compiling); "
        f"compiling {len(rendered)} for {arch} with NVRTC {nvrtc_version()}",
        file=sys.stderr,
    )
    with CompilePool(arch, jobs=min(args.jobs, len(rendered))) as pool:
        handles = [pool.submit(c) for c in rendered]
        results = [pool.result(h) for h in handles]
    rows = [
        {
            "kernel": r.kernel_name,
            "ok": "yes" if r.ok else "NO",
            "registers": r.registers if r.ok else "-",
            "static smem": r.static_smem if r.ok else "-",
            "dynamic smem": _dynamic_smem(spec, c),
            "spills": r.spills if r.ok else "-",
            "compile s": f"{r.seconds:.2f}",
            "error": r.error or "",
        }
        for c, r in zip(rendered, results, strict=True)
    ]
    print(compile_table(rows))
    failed = sum(not r.ok for r in results)
    spilled = sum(r.ok and r.spills > 0 for r in results)
    print(f"{len(results) - failed} compiled, {failed} failed, {spilled} spill registers", file=sys.stderr)
    return 1 if failed else 0


def _dynamic_smem(spec: Any, c: Any) -> int:
    from .kernels import FAMILIES

    return FAMILIES[spec.kernel].launch(spec.template, c.candidate.config.as_dict(), c.candidate.problem).shared_bytes


def tune(spec: Any, problems: list[Any], args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .compile_pool import CompilePool
    from .compiler import nvrtc_version, require_nvrtc
    from .device import current_gpu
    from .evaluate import Settings
    from .kernels import FAMILIES
    from .progress import Progress
    from .report import final_table, problem_name
    from .search import SEARCH_PLAN, default_storage, open_storage, tune_shape
    from .store import entry_key, merge, read, tuned_file
    from .templates import installed_renders, template_hash
    from .verify import tolerance_for
    from .worker import GPUWorker

    gpu = current_gpu()
    require_nvrtc()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING if args.verbose < 2 else optuna.logging.INFO)
    out_path = tuned_file(args.tuned_dir, gpu.key, spec.kernel)
    read(out_path)  # a corrupt results file is reported now, before any tuning time is spent
    templates = FAMILIES[spec.kernel].templates

    def installed(template: str) -> str | None:
        return template_hash(spec.kernel, template) if template in templates else None

    storage_url = args.storage or default_storage(spec, gpu.key, args.runs_dir)
    storage = open_storage(storage_url)
    settings = Settings(
        arch=gpu.arch, tolerance=tolerance_for(spec.dtype, spec.tolerance), max_shared_bytes=gpu.max_shared_per_block,
        registers_per_block=gpu.registers_per_block, registers_per_sm=gpu.registers_per_sm,
        shared_per_sm=gpu.shared_per_sm, threads_per_sm=gpu.threads_per_sm, timing=SEARCH_PLAN, seed=spec.seed,
        timeout_s=args.timeout, energy=spec.measures_energy or args.energy,
    )  # fmt: skip
    if settings.energy:
        _check_energy(spec)
    trials = args.trials if args.trials is not None else spec.budget.trials
    minutes = args.minutes if args.minutes is not None else spec.budget.minutes
    print(f"{gpu.name} ({gpu.key}); studies in {storage_url}", file=sys.stderr)
    versions = _versions(gpu, nvrtc_version())
    header = {"kernel": spec.kernel, "gpu": {"name": gpu.name, "arch": gpu.arch, "key": gpu.key,
                                             "multiprocessors": gpu.multiprocessors}}  # fmt: skip
    outcomes, stored = [], {}
    with GPUWorker() as worker, CompilePool(gpu.arch, jobs=args.jobs, timeout_s=args.timeout * 4) as compiler:
        worker.warm()
        compiler.warm()
        for i, problem in enumerate(problems, 1):
            bar = Progress(f"[{i}/{len(problems)}] {problem_name(problem)}", trials, minutes * 60 if minutes else None)
            shape_settings = replace(settings, tolerance=tolerance_for(problem.dtype, spec.tolerance))
            outcome = tune_shape(
                spec, problem, shape_settings, storage, trials=trials, minutes=minutes, evaluator=worker,
                compiler=compiler, prefetch=max(4, 2 * args.jobs), abort_ratio=args.abort_ratio, progress=bar.update,
            )  # fmt: skip
            repaired = f" ({outcome.repaired} repaired to a feasible neighbour)" if outcome.repaired else ""
            bar.close(f"{outcome.stopped}; {_counts(outcome.statuses)}{repaired}")
            outcomes.append(outcome)
            if outcome.best is not None:
                entry = _entry(spec, outcome, shape_settings, versions)
                key = entry_key(problem.dtype, problem.layout, problem.label)
                result = merge(out_path, header, key, entry, force=args.force, pareto=_pareto(outcome, spec),
                               installed=installed, unchanged=functools.partial(installed_renders, spec.kernel,
                                                                                problem=problem))  # fmt: skip
                stored[problem_name(problem)] = "yes" if result.stored else "no (kept faster)"
    print()
    print(final_table(outcomes, stored))
    print(f"\nresults: {out_path}")
    return 0 if all(o.best is not None for o in outcomes) else 1


def _check_energy(spec: Any) -> None:
    """Energy needs NVML: stop before tuning when the objective needs it, else say it will not be measured."""
    from .energy import EnergyMeter

    meter = EnergyMeter()
    if meter.available:
        print(f"energy per launch: {meter.method} (NVML, read only)", file=sys.stderr)
    elif spec.measures_energy:
        objective = "[" + ", ".join(spec.objectives) + "]" if len(spec.objectives) > 1 else spec.objectives[0]
        raise AutotuneError(f"objective {objective} needs energy readings, but {meter.reason}")
    else:
        print(f"autotune: energy will not be measured: {meter.reason}", file=sys.stderr)
    meter.close()


def _pareto(o: Any, spec: Any) -> list[dict[str, Any]] | None:
    """The time-energy front of a shape as stored beside its fastest entry (None when energy was not tuned)."""
    from .kernels import FAMILIES

    if not o.pareto:
        return None
    family = FAMILIES[spec.kernel]
    return [
        {
            "template": family.resolve(spec.template, r.config.as_dict()),
            "params": {k: v for k, v in r.config.as_dict().items() if k != "TEMPLATE"},
            "kernel_name": r.kernel_name, "median_ms": r.median_ms,
            "energy_j": r.energy_j, "gflops_per_j": r.gflops_per_j, "tflops": r.tflops,
            "energy_method": r.energy_method, "verified": True, "error": r.error,
        }
        for r in o.pareto
    ]  # fmt: skip


def _counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(statuses.items(), key=lambda kv: -kv[1]))


def _versions(gpu: Any, nvrtc: str) -> dict[str, str]:
    import cupy

    return {"cuda_driver": gpu.driver, "cuda_runtime": gpu.runtime, "nvrtc": nvrtc, "cupy": cupy.__version__}


def _entry(spec: Any, o: Any, settings: Any, versions: dict[str, str]) -> dict[str, Any]:
    from .kernels import FAMILIES

    b = o.best
    t = b.timing
    return {
        "template": FAMILIES[spec.kernel].resolve(spec.template, b.config.as_dict()),
        "params": {k: v for k, v in b.config.as_dict().items() if k != "TEMPLATE"},
        "kernel_name": b.kernel_name,
        "template_hash": b.template_hash,
        "source_hash": b.source_hash,
        "verified": True,
        "error": b.error,
        "tolerance": settings.tolerance,
        "median_ms": t.median_ms,
        "min_ms": t.min_ms,
        "max_ms": t.max_ms,
        "iqr_ms": t.iqr_ms,
        "repeats": t.repeats,
        "tflops": b.tflops,
        "gbps": b.gbps,
        "registers": b.registers,
        "extra_bytes": b.extra_bytes,  # unrolled matrix, packed operands, split partials (0: none)
        "energy_j": b.energy_j,
        "gflops_per_j": b.gflops_per_j,
        "energy_method": b.energy_method,
        "objective": list(spec.objectives),
        "vendor": o.vendor_name,
        "vendor_median_ms": o.vendor.median_ms if o.vendor else None,
        "vendor_ratio": o.vendor_ratio,
        "versions": versions,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "trials": o.evaluated,
        "spec": spec.path,
        "study": o.study_name,
    }
