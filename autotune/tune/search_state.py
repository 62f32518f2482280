"""What the search loop (autotune.tune.search) works with: its timing plans, the evaluator it drives, the outcome of a
shape, the study's name, the loop's state, and the seam a replay plugs into (``Preparation``, ``Strategy``).
autotune.tune.search re-exports every name."""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..build.compiler import CompileResult
from ..build.templates import template_hash
from ..core.space import Config, Nearest, Param, Value
from ..measure.bench import Timing, TimingPlan
from ..measure.evaluate import (
    Candidate,
    Compiled,
    Settings,
    Status,
    TrialResult,
    finish,
    render_candidate,
    static_check,
)
from .spec import Spec

FINAL_PLAN = TimingPlan(warmup=3, min_repeats=10, max_repeats=200, target_ms=400.0)
# The verification launch already loaded and ran the kernel, so the search needs no further warm-up.
SEARCH_PLAN = TimingPlan(warmup=0, min_repeats=5, max_repeats=50, target_ms=40.0, probe=3)
ABORT_RATIO = 2.0  # stop timing a candidate whose first launches take this many times the best so far


class Evaluator(Protocol):
    """Where candidates run: the GPU worker process in a real run, a fake in tests."""

    def measure(self, compiled: Compiled, settings: Settings) -> TrialResult: ...

    def vendor(self, kernel: str, problem: Any, plan: TimingPlan) -> tuple[str, Timing] | None: ...


@dataclass(frozen=True)
class ShapeOutcome:
    problem: Any
    study_name: str
    best: TrialResult | None
    vendor_name: str | None
    vendor: Timing | None
    evaluated: int  # candidates compiled and launched over the study's whole life
    new: int  # of those, evaluated in this run
    statuses: dict[str, int] = field(default_factory=dict)
    stopped: str = ""
    pareto: tuple[TrialResult, ...] = ()  # time-energy front (re-measured), fastest first; energy runs only
    repaired: int = 0  # infeasible proposals of the sampler replaced by their nearest feasible configuration
    final_by: str = ""  # the worker that re-timed the finalists, when another worker of a shared study did

    @property
    def vendor_ratio(self) -> float | None:
        """Vendor time over our time: above 1 means faster than the vendor library."""
        if self.best is None or self.vendor is None or self.best.timing is None:
            return None
        return self.vendor.median_ms / self.best.timing.median_ms


def study_name(spec: Spec, problem: Any, gpu_key: str = "") -> str:
    """``gemm.simt.float32.4096x4096x4096.<template hash>.<space hash>[.<gpu key>]``.

    A storage shared by several GPU models (a database) names the GPU model, so that they never share a study.

    A changed template or a changed space (values, conditions, constraints) starts a fresh study: Optuna
    cannot mix parameter distributions, and configurations recorded as invalid under old constraints must
    not answer for new ones. The old study stays in the storage.
    """
    space = repr([(p.name, p.values, p.when.text if p.when else None) for p in spec.space.params])
    space += repr([c.text for c in spec.space.constraints])
    if spec.objectives != ("time",):  # another objective is another study (time-only names stay as they were)
        space += repr(spec.objectives)
    from ..core.study_key import StudyKey

    digest = hashlib.sha256(space.encode()).hexdigest()[:6]
    template = template_hash(spec.kernel, spec.template)[:8]
    return StudyKey(
        spec.kernel, spec.template, problem.dtype, problem.label, problem.layout, template, digest, gpu_key
    ).name


@dataclass
class _State:
    feasible: frozenset[str]  # keys of every configuration that passes the constraints and static checks
    seen: dict[str, tuple[Any, TrialResult]] = field(default_factory=dict)
    evaluated: int = 0
    new: int = 0
    stale: int = 0
    feasible_seen: int = 0
    statuses: Counter = field(default_factory=Counter)
    best_ms: float | None = None
    nearest: Nearest | None = None  # repairs a model-based sampler's infeasible proposals
    repaired: int = 0
    claims: Any = None  # a study shared with other workers: autotune.studies.shared_study.Claims

    def record(self, trial: Any, r: TrialResult, new: bool) -> None:
        self.seen[r.config.key] = (trial, r)
        self.statuses[r.status.value] += 1
        self.feasible_seen += r.config.key in self.feasible
        if r.status is not Status.INVALID:
            self.evaluated += 1
            self.new += new
        if r.ok and (self.best_ms is None or r.median_ms < self.best_ms):
            self.best_ms = r.median_ms


def feasible_configs(
    spec: Spec, problem: Any, settings: Settings, start: tuple[int, dict[str, Any]] = (0, {})
) -> list[Config]:
    """Every configuration that passes the constraints and the static checks, in enumeration order (of the part
    of the space that ``start`` names, :meth:`autotune.core.space.Space.split`)."""
    return [
        c
        for c in spec.space.enumerate(start)
        if static_check(Candidate(spec.kernel, spec.template, problem, c), settings) is None
    ]


def feasible_in_parallel(
    spec: Spec, problem: Any, settings: Settings, map_: Callable[..., Any], jobs: int
) -> list[Config]:
    """:func:`feasible_configs` with the space split into parts that ``map_(function, parts)`` (a process
    pool's map) checks side by side; the same list in the same order. A space of hundreds of thousands of
    configurations takes tens of seconds in one process: once per problem of a workload run."""
    parts = spec.space.split(8 * jobs)
    chunks = map_(functools.partial(feasible_configs, spec, problem, settings), parts)
    return [c for chunk in chunks for c in chunk]


# --- seam: what the loop prepares candidates with, and how it asks the sampler (a replay substitutes both) ---
@dataclass(frozen=True)
class Preparation:
    """How the loop turns configurations into candidates: the feasible list, the check before compiling, the
    render, the compile's verdict and the study's name. By default the kernel family's templates; a replay of
    recorded measurements (autotune.tune.replay) brings its own, so it runs this same loop without a GPU."""

    feasible: Callable[[Spec, Any, Settings], list[Config]] = feasible_configs
    check: Callable[[Candidate, Settings], str | None] = static_check
    render: Callable[[Candidate, Settings], Compiled] = render_candidate
    finish: Callable[[Compiled, CompileResult, Settings], Compiled] = finish
    study_name: Callable[..., str] = study_name  # (spec, problem[, gpu_key])


def suggest_choice(trial: Any, p: Param) -> Value:
    """Every parameter as an unordered choice among its values."""
    return trial.suggest_categorical(p.name, list(p.values))


@dataclass(frozen=True)
class Strategy:
    """An Optuna sampler instance and how each parameter is put to it, in place of ``make_sampler(spec.sampler)``
    and unordered choices. ``suggest`` must return one of the parameter's values and accept that value enqueued."""

    sampler: Any
    suggest: Callable[[Any, Param], Value] = suggest_choice


TEMPLATES = Preparation()
# --- end of seam ---
