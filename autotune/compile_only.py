"""``autotune run SPEC --compile-only``: render and compile candidates, and report their resources."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from typing import Any

from .core.errors import AutotuneError
from .core.limits import for_arch

COMPILE_ALL_LIMIT = 500_000  # configurations a --compile-only run without --limit may render (gemm_simt.yaml: 103,680)


def compile_only(spec: Any, args: argparse.Namespace, current_gpu: Callable[[str], Any]) -> int:
    """Render and compile a spec's candidates for an architecture (no GPU needed with ``--arch``)."""
    from .build.compiler import nvrtc_version, require_nvrtc
    from .measure.evaluate import Settings

    require_nvrtc()
    arch, max_shared = _target(args.arch, current_gpu)
    settings = Settings(arch=arch, tolerance=1.0, max_shared_bytes=max_shared)
    sources = _Sources(spec, settings)
    if args.limit:
        rendered = sources.sample(args.limit)
        found = f"{len(rendered)} valid sources sampled"
    else:
        rendered = sources.every()
        found = f"{len(rendered):,} valid sources"
    print(
        f"{spec.path}: {found} ({sources.invalid:,} candidates rejected before compiling); "
        f"compiling {len(rendered):,} for {arch} with NVRTC {nvrtc_version()} on {min(args.jobs, len(rendered))} "
        "processes",
        file=sys.stderr,
    )
    results = _compile_all(rendered, arch, args.jobs)
    _print_table(spec, rendered, results)
    failed = sum(not r.ok for r in results)
    spilled = sum(r.ok and r.spills > 0 for r in results)
    print(f"{len(results) - failed} compiled, {failed} failed, {_spill_note(spilled)}", file=sys.stderr)
    return 1 if failed else 0


def _target(arch: str | None, current_gpu: Callable[[str], Any]) -> tuple[str, int]:
    """The architecture to compile for and its shared memory per block: ``--arch``'s from the per-arch table
    (offline), else this GPU's."""
    if arch is None:
        gpu = current_gpu("pass --arch sm_90 (or another sm_XX) to compile for an architecture without one")
        return gpu.arch, gpu.max_shared_per_block
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise AutotuneError(f"--arch expects a name like sm_90, got {arch!r}")
    try:
        return arch, for_arch(arch).max_shared_per_block
    except ValueError as exc:
        raise AutotuneError(f"--arch: {exc}") from None


class _Sources:
    """The distinct rendered sources of a spec's configurations. Kernels take the shape at run time, but the source
    depends on the dtype, the layout and (for some templates) the operands' alignment: every distinct source of
    the spec's problems is compiled once."""

    def __init__(self, spec: Any, settings: Any) -> None:
        self.spec, self.settings = spec, settings
        self.candidates: list[Any] = []
        self.invalid = 0
        self._hashes: set[str] = set()

    def add(self, config: Any) -> None:
        from .measure.evaluate import Candidate, render_candidate, static_check

        for problem in self.spec.problems:
            cand = Candidate(self.spec.kernel, self.spec.template, problem, config)
            if static_check(cand, self.settings) is not None:
                self.invalid += 1
                continue
            c = render_candidate(cand, self.settings)
            if c.source_hash not in self._hashes:
                self._hashes.add(c.source_hash)
                self.candidates.append(c)

    def sample(self, limit: int) -> list[Any]:
        """A seeded sample without rendering the whole space (the conv specs have millions of configurations):
        random walks through the parameters, constraints checked, until ``limit`` distinct valid sources."""
        from .core.space import Config

        space = self.spec.space
        rng, seen = random.Random(self.spec.seed), set()
        for _ in range(max(1000, 200 * limit)):
            if len(self.candidates) >= limit:
                break
            config = Config.of(space.walk(lambda p: rng.choice(p.values)))
            if config.key in seen or space.violated(config.as_dict()):
                continue
            seen.add(config.key)
            self.add(config)
        return self.candidates[:limit]

    def every(self) -> list[Any]:
        """Every configuration that passes the constraints, rendered; refused for a space too large for that."""
        from .core.progress import Progress

        spec = self.spec
        size = spec.space.size_before_constraints()
        if size > COMPILE_ALL_LIMIT:
            raise AutotuneError(
                f"{spec.path}: its space has {size:,} configurations before constraints, too many to render "
                "every one; compile a seeded sample with --limit N"
            )
        print(
            f"{spec.path}: no --limit, so every configuration that passes the constraints is rendered and compiled "
            f"({size:,} before constraints); --limit N compiles a seeded sample instead",
            file=sys.stderr,
        )
        bar = Progress("rendering", None, None, unit="configurations")
        for n, config in enumerate(spec.space.enumerate(), 1):
            self.add(config)
            bar.update(n, f"{len(self.candidates):,} distinct sources")
        bar.close()
        return self.candidates


def _print_table(spec: Any, rendered: list[Any], results: list[Any]) -> None:
    from .report import compile_table

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


def _spill_note(kernels: int) -> str:
    """``0 kernels spill registers``, ``1 kernel spills registers``: a count of kernels, not of registers."""
    return f"{kernels} kernel spills registers" if kernels == 1 else f"{kernels} kernels spill registers"


def _time_left(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f", about {seconds:.0f} s left" if seconds < 120 else f", about {seconds / 60:.0f} min left"


def _compile_all(rendered: list[Any], arch: str, jobs: int) -> list[Any]:
    """Compile every rendered candidate in a process pool, in order, with a progress bar on stderr."""
    from .build.compile_pool import CompilePool
    from .core.progress import Progress

    if not rendered:
        return []
    bar = Progress("compiling", len(rendered), None, unit="kernels")
    results, failed = [], 0
    with CompilePool(arch, jobs=min(jobs, len(rendered))) as pool:
        handles = [pool.submit(c) for c in rendered]
        for h in handles:
            results.append(pool.result(h))
            failed += not results[-1].ok
            bar.update(len(results), f"{failed} failed{_time_left(bar.remaining_s())}")
    bar.close(f"{failed} failed")
    return results


def _dynamic_smem(spec: Any, c: Any) -> int:
    from .kernels import FAMILIES

    return FAMILIES[spec.kernel].launch(spec.template, c.candidate.config.as_dict(), c.candidate.problem).shared_bytes
