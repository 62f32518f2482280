"""One candidate, start to end: check -> render -> compile -> verify -> time -> TrialResult.

``prepare`` is pure CPU work (it can run in a process pool or on a machine without a GPU);
``measure`` needs the GPU. Neither keeps state between calls beyond a cache of loaded modules
keyed by the cubin's content, so the result depends only on (candidate, settings). No Optuna here.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..build.compiler import CompileResult, compile_source, kernel_resources
from ..build.templates import render
from ..core.space import Config
from ..kernels import FAMILIES
from . import verify
from .bench import L2Flusher, Timing, TimingPlan, time_launches
from .energy import EnergyPlan, default_meter


class Status(enum.StrEnum):
    COMPLETE = "complete"
    INVALID = "invalid"  # breaks a constraint or a device limit: cost no compile
    COMPILE_FAILED = "compile-failed"
    VERIFY_FAILED = "verify-failed"
    LAUNCH_FAILED = "launch-failed"
    TIMED_OUT = "timed-out"
    PRUNED = "pruned"


@dataclass(frozen=True)
class Candidate:
    kernel: str
    template: str
    problem: Any
    config: Config


@dataclass(frozen=True)
class Settings:
    arch: str
    tolerance: float
    max_shared_bytes: int = 48 * 1024  # per block, opt-in limit
    registers_per_block: int = 64 * 1024
    registers_per_sm: int = 64 * 1024
    shared_per_sm: int = 228 * 1024
    threads_per_sm: int = 2048
    timing: TimingPlan = field(default_factory=TimingPlan)
    seed: int = 0
    abort_above_ms: float | None = None  # stop timing a candidate whose first launches are slower than this
    timeout_s: float = 30.0  # per candidate on the GPU, and per compile
    allow_spills: bool = False  # tuning skips spilling kernels; correctness checks may run them anyway
    energy: bool = False  # also measure J per launch (NVML) for verified, fully timed candidates
    energy_plan: EnergyPlan = field(default_factory=EnergyPlan)


@dataclass(frozen=True)
class Compiled:
    """A rendered and compiled candidate, ready for the GPU (or the reason it is not)."""

    candidate: Candidate
    kernel_name: str
    source_hash: str = ""
    template_hash: str = ""
    source: str = field(default="", repr=False)
    compiled: CompileResult | None = None
    occupancy: float | None = None  # estimated resident warps per SM over the maximum
    status: Status | None = None  # set when preparation already decided the fate
    reason: str | None = None


@dataclass(frozen=True)
class TrialResult:
    status: Status
    reason: str | None
    kernel_name: str
    config: Config
    timing: Timing | None = None
    error: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    registers: int | None = None
    shared_bytes: int | None = None
    spills: int | None = None
    compile_s: float | None = None
    source_hash: str = ""
    template_hash: str = ""
    occupancy: float | None = None
    energy_j: float | None = None  # per launch, hot L2; None: not measured (see energy_note)
    gflops_per_j: float | None = None
    energy_method: str | None = None  # "nvml-counter" or "nvml-power-sampling"
    energy_note: str | None = None  # why energy was asked for but not measured
    extra_bytes: int | None = None  # memory besides the operands (unrolled matrix, packed copies, split partials)

    @property
    def ok(self) -> bool:
        return self.status is Status.COMPLETE

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms if self.timing else math.inf


def static_check(candidate: Candidate, settings: Settings) -> str | None:
    """Why the candidate cannot run on this device, decided without compiling."""
    family = FAMILIES[candidate.kernel]
    params = candidate.config.as_dict()
    reason = family.check(candidate.template, params)
    if reason:
        return reason
    reason = family.check_problem(candidate.template, params, candidate.problem)
    if reason:
        return reason
    launch = family.launch(candidate.template, params, candidate.problem)
    if launch.shared_bytes > settings.max_shared_bytes:
        return f"needs {launch.shared_bytes} bytes of shared memory, the device allows {settings.max_shared_bytes}"
    for step in launch.before:  # kernels launched before the main one (im2col_gemm)
        threads = step.block[0] * step.block[1] * step.block[2]
        if threads > 1024:
            return f"{step.kernel_name} needs {threads} threads per block, more than 1024"
        if step.shared_bytes > settings.max_shared_bytes:
            limit = settings.max_shared_bytes
            return f"{step.kernel_name} needs {step.shared_bytes} bytes of shared memory, the device allows {limit}"
    return None


def render_candidate(candidate: Candidate, settings: Settings) -> Compiled:
    """Static checks and rendering; the result still needs a compile (see :func:`finish`)."""
    family = FAMILIES[candidate.kernel]
    params = candidate.config.as_dict()
    reason = static_check(candidate, settings)
    if reason:
        try:
            name = family.kernel_name(candidate.template, params, candidate.problem)
        except KeyError:  # "auto" with a TEMPLATE that names no template: the reason says so
            name = f"{candidate.kernel}_{candidate.template}_" + candidate.config.key
        return Compiled(candidate, name, status=Status.INVALID, reason=reason)
    name = family.kernel_name(candidate.template, params, candidate.problem)
    rendered = render(candidate.kernel, candidate.template, params, candidate.problem)
    return Compiled(candidate, name, rendered.source_hash, rendered.template_hash, rendered.source)


def finish(c: Compiled, result: CompileResult, settings: Settings | None = None) -> Compiled:
    """Attach a compile result; failed compiles, spilling kernels and unlaunchable ones end here."""
    base = replace(c, compiled=result)
    if not result.ok:
        return replace(base, status=Status.COMPILE_FAILED, reason=result.error)
    if result.spills and not (settings and settings.allow_spills):
        return replace(base, status=Status.INVALID, reason=f"spills {result.spills} bytes to local memory")
    cand = c.candidate
    settings = settings or Settings(arch="", tolerance=0.0)
    launch = FAMILIES[cand.kernel].launch(cand.template, cand.config.as_dict(), cand.problem)
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    limit = settings.registers_per_block
    if result.registers and result.registers * threads > limit:
        reason = f"{result.registers} registers x {threads} threads exceed the {limit} registers of a block"
        return replace(base, status=Status.INVALID, reason=reason)
    shared = launch.shared_bytes + (result.static_smem or 0)
    blocks = blocks_per_sm(result.registers or 0, threads, shared, settings)
    if blocks == 0:
        return replace(base, status=Status.INVALID, reason="not one block fits on a multiprocessor")
    for step in launch.before:  # the other kernels of the source: no spills, and their blocks must fit
        registers, spills = kernel_resources(result, step.kernel_name)
        if spills and not settings.allow_spills:
            return replace(base, status=Status.INVALID, reason=f"{step.kernel_name} spills {spills} bytes")
        step_threads = step.block[0] * step.block[1] * step.block[2]
        if registers and registers * step_threads > limit:
            reason = f"{step.kernel_name}: {registers} registers x {step_threads} threads exceed {limit} a block"
            return replace(base, status=Status.INVALID, reason=reason)
    return replace(base, occupancy=blocks * -(-threads // 32) / (settings.threads_per_sm // 32))


def blocks_per_sm(registers: int, threads: int, shared_bytes: int, s: Settings) -> int:
    """Resident blocks per multiprocessor, limited by registers, shared memory and threads.

    Registers are allocated per warp in units of 256; each block also reserves 1 KB of shared memory.
    """
    warps = -(-threads // 32)
    regs_per_warp = -(-(registers * 32) // 256) * 256
    by_regs = s.registers_per_sm // (regs_per_warp * warps) if registers else 32
    by_shared = s.shared_per_sm // (shared_bytes + 1024)
    by_threads = s.threads_per_sm // threads
    return max(0, min(32, by_regs, by_shared, by_threads))


def prepare(candidate: Candidate, settings: Settings) -> Compiled:
    """Static checks, render and compile. CPU only."""
    c = render_candidate(candidate, settings)
    if c.status is not None:
        return c
    return finish(c, compile_source(c.source, c.kernel_name, settings.arch), settings)


_modules: dict[tuple[int, bytes], Any] = {}  # (device, cubin): a module belongs to one device's context
_seeds = itertools.count()


def load_kernel(compiled: CompileResult, shared_bytes: int, name: str | None = None) -> Any:
    """Load a cubin (cached by content) and raise the dynamic shared-memory limit if needed. ``name``: another
    kernel of the same cubin (a ``Launch.before`` step) instead of ``compiled.kernel_name``."""
    import cupy as cp
    from cupy_backends.cuda.api import driver

    key = (cp.cuda.Device().id, compiled.cubin)
    fn = _modules.get(key)  # type: ignore[arg-type]
    if fn is None:
        module = cp.cuda.function.Module()
        module.load(compiled.cubin)
        fn = (module, module.get_function(compiled.kernel_name))
        _modules[key] = fn  # type: ignore[index]
    if name is not None and name != compiled.kernel_name:
        fn = (fn[0], fn[0].get_function(name))
    # Static shared memory counts against the same 48 KB default: a kernel with exactly 48 KB of dynamic
    # shared memory and a few static bytes fails to launch unless the limit is raised. The loaded function
    # says how much it has (the compile log may not: NVRTC answers repeated compiles from a cache, log-less).
    static = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn[1].ptr)
    if shared_bytes + static > 48 * 1024:
        driver.funcSetAttribute(fn[1].ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
    return fn[1]


def _result(c: Compiled, status: Status, reason: str | None, **extra: Any) -> TrialResult:
    r = c.compiled
    cand = c.candidate
    # device memory besides the operands: work matrices, packed copies, partial sums (0 for most templates)
    extra["extra_bytes"] = FAMILIES[cand.kernel].extra_bytes(cand.template, cand.config.as_dict(), cand.problem)
    return TrialResult(
        status,
        reason,
        c.kernel_name,
        c.candidate.config,
        registers=r.registers if r else None,
        spills=r.spills if r else None,
        compile_s=r.seconds if r else None,
        source_hash=c.source_hash,
        template_hash=c.template_hash,
        occupancy=c.occupancy,
        **extra,
    )


@dataclass
class Fixture:
    """Device data for one problem: random inputs and their float64 reference, made once, reused."""

    kernel: str
    problem: Any
    inputs: Any
    reference: Any


def make_fixture(kernel: str, problem: Any, seed: int) -> Fixture:
    family = FAMILIES[kernel]
    inputs = family.make_inputs(problem, seed=seed)
    return Fixture(kernel, problem, inputs, family.reference(problem, inputs))


def measure(
    c: Compiled, settings: Settings, flush: L2Flusher | None = None, fixture: Fixture | None = None
) -> TrialResult:
    """Verify against the fixture (fresh random inputs when none is given), then time. GPU required."""
    checked = verified_run(c, settings, fixture)
    if isinstance(checked, TrialResult):
        return checked
    run, _, verdict, shared = checked
    problem = c.candidate.problem
    timing = time_launches(run, flush or L2Flusher(), settings.timing, settings.abort_above_ms)
    seconds = timing.median_ms / 1e3
    status, reason = Status.COMPLETE, None
    if timing.aborted:
        status = Status.PRUNED
        line = settings.abort_above_ms
        reason = f"{timing.median_ms:.3g} ms in {timing.repeats} launches, above the abort line of {line:.3g} ms"
    energy = measure_energy(run, timing.median_ms, problem.flops, settings) if status is Status.COMPLETE else {}
    return _result(
        c,
        status,
        reason,
        timing=timing,
        error=verdict.error,
        tflops=problem.flops / seconds / 1e12,
        gbps=problem.bytes / seconds / 1e9,
        shared_bytes=shared,
        **energy,
    )


def verified_run(
    c: Compiled, settings: Settings, fixture: Fixture | None = None
) -> tuple[Callable[[], None], Fixture, verify.Verdict, int] | TrialResult:
    """``(run, fixture, verdict, shared bytes)``: one launch of the candidate as a call, after one launch on the
    fixture's inputs (fresh random ones when none is given) verified against its float64 reference; or the
    TrialResult that says why there is none (not compiled, failed to launch, wrong). GPU required."""
    import cupy as cp
    from cupy_backends.cuda.api.driver import CUDADriverError

    if c.status is not None:
        return _result(c, c.status, c.reason)
    assert c.compiled is not None
    cand = c.candidate
    family = FAMILIES[cand.kernel]
    problem = cand.problem
    params = cand.config.as_dict()
    launch = family.launch(cand.template, params, problem)
    if fixture is None or fixture.problem != problem:
        fixture = make_fixture(cand.kernel, problem, seed=settings.seed * 1_000_003 + next(_seeds))
    try:
        fn = load_kernel(c.compiled, launch.shared_bytes)
        out = family.new_output(problem)
        scratch = family.new_scratch(cand.template, params, problem)
        args = family.kernel_args(problem, fixture.inputs, out, scratch=scratch)
        verify.poison(out)
        step_args = family.before_args(cand.template, params, problem, fixture.inputs, scratch) if launch.before else ()
        run = _runner(c.compiled, launch, fn, args, step_args)
        run()
        cp.cuda.Device().synchronize()
    except (CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as exc:
        return _result(c, Status.LAUNCH_FAILED, str(exc).splitlines()[0][:200])
    verdict = verify.compare(family.decode(problem, out), fixture.reference, settings.tolerance)
    shared = launch.shared_bytes + (c.compiled.static_smem or 0)
    if not verdict.ok:
        return _result(c, Status.VERIFY_FAILED, verdict.reason, error=verdict.error, shared_bytes=shared)
    return run, fixture, verdict, shared


def _runner(compiled: CompileResult, launch: Any, fn: Any, args: tuple[Any, ...],
            step_args: tuple[Any, ...]) -> Callable[[], None]:  # fmt: skip
    """One launch of a candidate as a call: the kernels of ``launch.before`` first, when it has any (im2col_gemm's
    im2col, mma's packs), then the main one, all on the current stream."""

    def run() -> None:
        fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

    if not launch.before:
        return run
    steps = [(load_kernel(compiled, s.shared_bytes, s.kernel_name), s, a)
             for s, a in zip(launch.before, step_args, strict=True)]  # fmt: skip

    def staged() -> None:
        for f, s, a in steps:
            f(s.grid, s.block, a, shared_mem=s.shared_bytes)
        run()

    return staged


def measure_energy(run: Any, median_ms: float, flops: float, settings: Settings) -> dict[str, Any]:
    """TrialResult's energy fields for a verified, timed candidate when ``settings.energy`` asks for them.

    Runs after timing, as a batch of back-to-back launches with a hot L2 (see autotune.measure.energy).
    """
    if not settings.energy:
        return {}
    meter = default_meter()
    e = meter.measure(run, median_ms, settings.energy_plan)
    if e is None:
        return {"energy_note": meter.reason}
    return {"energy_j": e.joules_per_launch, "gflops_per_j": e.gflops_per_joule(flops), "energy_method": e.method}


def evaluate(candidate: Candidate, settings: Settings, flush: L2Flusher | None = None) -> TrialResult:
    """The whole pipeline for one candidate."""
    return measure(prepare(candidate, settings), settings, flush)


def time_vendor(kernel: str, problem: Any, flush: L2Flusher, plan: TimingPlan) -> tuple[str, Timing] | None:
    """The vendor library on the same problem, in this process, timed the same way."""
    family = FAMILIES[kernel]
    inputs = family.make_inputs(problem, seed=12345)
    vendor = family.vendor(problem, inputs)
    if vendor is None:
        return None
    name, fn = vendor
    return name, time_launches(fn, flush, plan)
