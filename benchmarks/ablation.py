"""Timing copies of a verified kernel's source with one phase cut out (diagnostic: a cut kernel computes wrong
numbers, so only the uncut kernel is verified, by the caller). Shared by ablate_conv_b1.py and
ablate_skinny_wgmma.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autotune.bench import L2Flusher, TimingPlan, time_launches
from autotune.compiler import compile_source
from autotune.device import current_gpu
from autotune.evaluate import Candidate, Settings, evaluate, load_kernel, render_candidate
from autotune.kernels import FAMILIES
from autotune.space import Config
from autotune.verify import tolerance_for

Cut = tuple[str, str]  # (text of the source, its replacement)
PLAN = TimingPlan(warmup=3, min_repeats=50, max_repeats=300, target_ms=30.0)


def ablate(kernel: str, template: str, problem: Any, configs: Iterable[dict[str, Any]], cuts: dict[str, Iterable[Cut]],
           kargs_for: Callable[[dict[str, Any]], tuple[Any, ...]], out: Path | None = None,
           meta: dict[str, Any] | None = None) -> int:  # fmt: skip
    """For each configuration: verify it the search's way (skipped with its status if it fails), then time every
    variant of ``cuts`` on ``kargs_for(params)`` (called per variant); print a row each, write the rows as JSON."""
    gpu = current_gpu()
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for(problem.dtype),
                        max_shared_bytes=gpu.max_shared_per_block, timing=PLAN)  # fmt: skip
    family, flush, rows = FAMILIES[kernel], L2Flusher(), []
    print(f"{'variant':<12} {'us':>7} {'regs':>5}  kernel")
    for params in configs:
        cand = Candidate(kernel, template, problem, Config.of(params))
        checked = evaluate(cand, settings, flush)
        print(f"verified: {checked.status.value} {checked.kernel_name}")
        if checked.status.value != "complete":
            continue
        base = render_candidate(cand, settings)
        launch = family.launch(template, params, problem)
        for row in time_cuts(base.source, base.kernel_name, gpu.arch, cuts, launch, lambda p=params: kargs_for(p),
                             flush, PLAN):  # fmt: skip
            rows.append({**row, "params": params})
    if out:
        out.write_text(json.dumps({"gpu": gpu.name, **(meta or {}), "rows": rows}, indent=1))
    return 0


def time_cuts(source: str, kernel_name: str, arch: str, cuts: dict[str, Iterable[Cut]], launch: Any,
              kargs: tuple[Any, ...] | Callable[[], tuple[Any, ...]], flush: L2Flusher, plan: TimingPlan,
              report: Callable[[str], None] = print) -> list[dict[str, Any]]:  # fmt: skip
    """Each variant's median microseconds (L2 flushed before every launch), registers and spills. ``kargs`` may
    be a function that makes fresh arguments for each variant (scratch a cut kernel may leave dirty)."""
    rows = []
    for label, replacements in cuts.items():
        variant = source
        for old, new in replacements:
            assert old in variant, f"{label}: {old!r} not in the source"
            variant = variant.replace(old, new)
        compiled = compile_source(variant, kernel_name, arch)
        if not compiled.ok:
            report(f"{label:<12} compile failed: {(compiled.error or '')[:200]}")
            continue
        fn = load_kernel(compiled, launch.shared_bytes)
        args = kargs() if callable(kargs) else kargs

        def run(fn=fn, args=args) -> None:
            fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

        t = time_launches(run, flush, plan)
        us = t.median_ms * 1e3
        rows.append({"kernel": kernel_name, "variant": label, "us": us, "registers": compiled.registers,
                     "spills": compiled.spills, "repeats": t.repeats})  # fmt: skip
        report(f"{label:<12} {us:>7.2f} {compiled.registers:>5}  {kernel_name}")
    return rows
