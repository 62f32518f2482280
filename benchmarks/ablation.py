"""Timing copies of a verified kernel's source with one phase cut out (diagnostic: a cut kernel computes wrong
numbers, so only the uncut kernel is verified, by the caller). Shared by ablate_conv_b1.py and
ablate_skinny_wgmma.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from autotune.bench import L2Flusher, TimingPlan, time_launches
from autotune.compiler import compile_source
from autotune.evaluate import load_kernel

Cut = tuple[str, str]  # (text of the source, its replacement)


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
