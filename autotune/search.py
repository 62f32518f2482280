"""The Optuna side: one study per (kernel, template, dtype, shape), ask/tell, resumable storage.

Constraints and device limits are checked before anything is compiled; a configuration already in
the study is answered from it. The loop is a pipeline: candidates are asked for ahead and compiled in
a process pool while the GPU worker verifies and times earlier ones; a candidate whose first launches
are already far slower than the best so far stops being timed (pruned).
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .bench import Timing, TimingPlan
from .compile_pool import CompilePool
from .compiler import CompileResult
from .energy import pareto_front
from .evaluate import Candidate, Compiled, Settings, Status, TrialResult, finish, render_candidate, static_check
from .samplers import NSGA_POPULATION, TPE_STARTUP, make_sampler  # noqa: F401 - re-exported
from .space import Config, Nearest, Param, Value
from .spec import Spec
from .study_storage import (  # noqa: F401 - re-exported: the loop's storage and its orphans
    _owner,
    default_storage,
    fail_orphans,
    failed_orphans,
    open_journal,
    open_storage,
    orphan_reason,
)
from .templates import template_hash
from .trial_record import _tell, objective_values, result_attrs, result_from_trial  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

STALE_LIMIT = 2000  # consecutive duplicate or invalid proposals before the space counts as exhausted
FINAL_TOP_K = 3
FINAL_ROUNDS = 3  # interleaved re-timings of the finalists; the verdict is each one's median round
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
    from .study_key import StudyKey  # a leaf module: the one place names are built and parsed

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
    claims: Any = None  # a study shared with other workers: autotune.shared_study.Claims

    def record(self, trial: Any, r: TrialResult, new: bool) -> None:
        self.seen[r.config.key] = (trial, r)
        self.statuses[r.status.value] += 1
        self.feasible_seen += r.config.key in self.feasible
        if r.status is not Status.INVALID:
            self.evaluated += 1
            self.new += new
        if r.ok and (self.best_ms is None or r.median_ms < self.best_ms):
            self.best_ms = r.median_ms


def feasible_configs(spec: Spec, problem: Any, settings: Settings) -> list[Config]:
    """Every configuration that passes the constraints and the static checks, in enumeration order."""
    return [
        c
        for c in spec.space.enumerate()
        if static_check(Candidate(spec.kernel, spec.template, problem, c), settings) is None
    ]


# --- seam: what the loop prepares candidates with, and how it asks the sampler (a replay substitutes both) ---
@dataclass(frozen=True)
class Preparation:
    """How the loop turns configurations into candidates: the feasible list, the check before compiling, the
    render, the compile's verdict and the study's name. By default the kernel family's templates; a replay of
    recorded measurements (autotune.replay) brings its own, so it runs this same loop without a GPU."""

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


def tune_shape(
    spec: Spec,
    problem: Any,
    settings: Settings,
    storage: Any,
    *,
    trials: int | None,
    minutes: float | None,
    evaluator: Evaluator,
    compiler: CompilePool,
    prefetch: int = 4,
    abort_ratio: float | None = ABORT_RATIO,
    progress: Callable[[int, str], None] = lambda done, note: None,
    shared: bool = False,
    gpu_key: str = "",
    prep: Preparation = TEMPLATES,
    strategy: Strategy | None = None,
    final: bool = True,
) -> ShapeOutcome:
    """Tune one shape until the budget is spent or the space is exhausted; resumes a stored study.

    ``prefetch`` candidates are compiled ahead of the one on the GPU. ``evaluator`` runs candidates
    (a :class:`autotune.worker.GPUWorker` in real runs) and ``compiler`` compiles them. ``shared``: other
    workers tune the same study at the same time (see :mod:`autotune.shared_study`); the trial budget is then the
    study's, and one worker re-times the finalists. ``gpu_key`` goes into the study's name. ``prep`` and
    ``strategy`` replace the templates and the spec's sampler (a replay of recorded measurements, autotune.replay).
    ``final=False`` (a slice of ``autotune run workload.yaml``, which re-times once per problem at the end of the
    run): no re-timing of the finalists; the best is the fastest verified trial as the search timed it.
    """
    study, name = _open_study(spec, problem, storage, gpu_key, prep, strategy)
    if spec.measures_energy:
        settings = replace(settings, energy=True)
    if spec.objectives != ("time",):
        abort_ratio = None  # the early abort compares times only: a slower candidate may still save energy
    feasible, state = _resume(spec, problem, settings, study, storage, shared, prep)
    deadline = time.monotonic() + minutes * 60 if minutes else None
    loop = _Loop(spec, problem, settings, study, state, compiler, prep, strategy, prefetch, trials,
                 _proposals(spec, state, feasible))  # fmt: skip
    loop.refill()  # the first compiles run while the vendor library is timed
    vendor = evaluator.vendor(spec.kernel, problem, settings.timing)
    stopped = _search(loop, evaluator, deadline, minutes, abort_ratio, progress, vendor)
    _free_unevaluated(study, state, loop.inflight)
    best, front, vendor, final_by = _final(spec, problem, settings, state, evaluator, compiler, prep, vendor, final)
    return ShapeOutcome(
        problem, name, best, vendor[0] if vendor else None, vendor[1] if vendor else None,
        state.evaluated, state.new, dict(state.statuses), stopped, front, state.repaired, final_by,
    )  # fmt: skip


def _open_study(spec: Spec, problem: Any, storage: Any, gpu_key: str, prep: Preparation,
                strategy: Strategy | None) -> tuple[Any, str]:  # fmt: skip
    """The shape's study (created, or loaded to resume) and its name."""
    import optuna

    name = prep.study_name(spec, problem, gpu_key) if gpu_key else prep.study_name(spec, problem)
    sampler = strategy.sampler if strategy is not None else make_sampler(spec.sampler, spec.seed)
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=sampler,
        directions=["minimize"] * len(spec.objectives), load_if_exists=True,
    )  # fmt: skip
    return study, name


def _resume(spec: Spec, problem: Any, settings: Settings, study: Any, storage: Any, shared: bool,
            prep: Preparation) -> tuple[list[Config], _State]:  # fmt: skip
    """The feasible configurations, and the loop's state with the study's finished trials in it (orphans of a
    shared study handed back for retrying)."""
    orphans = failed_orphans(study, storage)
    feasible = prep.feasible(spec, problem, settings)
    state = _State(frozenset(c.key for c in feasible))
    if shared:
        from .shared_study import Claims, retry

        state.claims = Claims(study, storage)
        for t in orphans:  # another worker may have passed their configurations by: evaluate them again
            retry(study, t)
    if spec.sampler not in ("brute", "random"):  # those two draw from the feasible list already
        state.nearest = Nearest(spec.space, feasible, spec.seed)
    for t in study.get_trials(deepcopy=False):
        status = t.user_attrs.get("status")
        if (
            status in (None, "interrupted", "unevaluated")
            or "duplicate_of" in t.user_attrs
            or not t.state.is_finished()
        ):
            continue
        r = result_from_trial(t, Config.of(t.params))
        if r.config.key not in state.seen:
            state.record(t, r, new=False)
    return feasible, state


@dataclass
class _Loop:
    """What the search loop asks candidates with, and the candidates asked for and compiling (``inflight``)."""

    spec: Spec
    problem: Any
    settings: Settings
    study: Any
    state: _State
    compiler: CompilePool
    prep: Preparation
    strategy: Strategy | None
    prefetch: int
    trials: int | None
    proposals: Any
    inflight: deque[tuple[Any, Compiled, str | None]] = field(default_factory=deque)
    exhausted: bool = False

    def refill(self, running: str | None = None) -> None:
        """Ask for candidates until ``prefetch`` are in flight; ``running`` is the one on the GPU now."""
        state, inflight, trials = self.state, self.inflight, self.trials
        while not self.exhausted and len(inflight) < self.prefetch:
            elsewhere = state.claims.others(state) if state.claims else 0  # held by other workers of the study
            if trials is not None and state.evaluated + len(inflight) + (running is not None) + elsewhere >= trials:
                return
            if state.claims and state.claims.final_claimed:  # another worker has ended the shape's search
                return
            keys = {c.candidate.config.key for _, c, _ in inflight} | ({running} if running else set())
            item = _ask_one(self.spec, self.study, self.problem, self.settings, state, self.proposals, keys,
                            self.prep, self.strategy)  # fmt: skip
            if item is None:
                self.exhausted = True
                return
            trial, c = item
            inflight.append((trial, c, self.compiler.submit(c) if c.status is None else None))


def _search(loop: _Loop, evaluator: Evaluator, deadline: float | None, minutes: float | None,
            abort_ratio: float | None, progress: Callable[[int, str], None], vendor: Any) -> str:  # fmt: skip
    """Evaluate candidates until the budget ends or the space is exhausted; why it stopped."""
    state, inflight, compiler, trials = loop.state, loop.inflight, loop.compiler, loop.trials
    settings, spec = loop.settings, loop.spec
    overlap = hasattr(evaluator, "start") and hasattr(evaluator, "collect")
    # a time budget ends the search only once a candidate is verified: until then (cold compiles, failures) it may
    # run to four times the budget, at least a minute
    grace = time.monotonic() + max(4 * minutes * 60, 60) if minutes else None

    def budget_end() -> float | None:
        return deadline if state.best_ms else grace

    while True:
        if deadline is not None and time.monotonic() >= budget_end():  # type: ignore[operator]
            return f"time budget of {minutes:g} min reached"
        loop.refill()
        if not inflight:
            if state.claims and state.claims.busy(state, can_ask=trials is None or state.evaluated < trials):
                loop.exhausted = False  # other workers still hold configurations, which come back here if they die
                continue
            stopped = "search space exhausted" if loop.exhausted else f"trial budget of {trials} reached"
            if state.claims and state.claims.final_claimed and not loop.exhausted:
                stopped = f"search ended by {state.claims.final_claimed}"
            return stopped
        item = _next_compiled(inflight, compiler, budget_end())
        if item is None:  # the budget ended while every candidate in flight was still compiling
            return f"time budget of {minutes:g} min reached"
        trial, c, handle = item
        compiled = loop.prep.finish(c, compiler.result(handle), settings) if handle is not None else c
        abort = state.best_ms * abort_ratio if abort_ratio and state.best_ms else None
        run_settings = replace(settings, abort_above_ms=abort)
        if overlap:  # the GPU measures while the sampler proposes the next candidates
            evaluator.start(compiled, run_settings)  # type: ignore[attr-defined]
            loop.refill(running=compiled.candidate.config.key)
            r = evaluator.collect()  # type: ignore[attr-defined]
        else:
            r = evaluator.measure(compiled, run_settings)
        _tell(loop.study, trial, r, objectives=spec.objectives)
        if state.claims:
            state.claims.release(trial)
        state.record(trial, r, new=True)
        progress(state.evaluated, _best_note(state, vendor))


def _free_unevaluated(study: Any, state: _State, inflight: deque[tuple[Any, Compiled, str | None]]) -> None:
    """Trials asked for but not run before the budget ended: failed as "unevaluated", free for a later run."""
    from optuna.trial import TrialState

    for trial, _, _ in inflight:
        trial.set_user_attr("status", "unevaluated")
        study.tell(trial, state=TrialState.FAIL)
        if state.claims:
            state.claims.release(trial)


def _final(spec: Spec, problem: Any, settings: Settings, state: _State, evaluator: Evaluator, compiler: CompilePool,
           prep: Preparation, vendor: Any, final: bool = True) -> tuple[Any, Any, Any, str]:  # fmt: skip
    """The re-timed winner, the Pareto front, the vendor's time and the worker that re-timed them ("": this
    one, in a study of its own); with ``final`` False and no shared claims, the fastest verified trial as timed."""

    def retime() -> tuple[TrialResult | None, tuple[TrialResult, ...], tuple[str, Timing] | None]:
        best = _final_best(spec, problem, settings, state, evaluator, compiler, prep)
        front = _final_front(spec, problem, settings, state, evaluator, compiler, prep) if spec.measures_energy else ()
        if spec.objectives == ("energy",) and front:
            best = min(front, key=lambda r: r.energy_j)  # type: ignore[arg-type, return-value]
        final_vendor = vendor
        if best is not None and vendor is not None:
            final_vendor = evaluator.vendor(spec.kernel, problem, FINAL_PLAN)  # same long plan as the winner
        return best, front, final_vendor

    if not final and state.claims is None:  # a workload slice: the fastest verified trial as the search timed it
        return min((r for _, r in state.seen.values() if r.ok), key=lambda r: r.median_ms, default=None), (), vendor, ""
    if state.claims is None:
        return (*retime(), "")
    try:  # one worker of the study re-times; the others take its verdict
        return state.claims.final(state, retime, vendor)
    finally:
        state.claims.close()


def _next_compiled(
    inflight: deque[tuple[Any, Compiled, str | None]], compiler: CompilePool, until: float | None
) -> tuple[Any, Compiled, str | None] | None:
    """Take the first in-flight candidate whose compile has finished (or that needs none), waiting if none has;
    None if the time budget (``until``) ends first."""
    handles = [h for _, _, h in inflight]
    i = next((i for i, h in enumerate(handles) if h is None), None)
    if i is None:
        i = compiler.first_ready(handles, until)  # type: ignore[arg-type]
        if i is None:
            return None
    item = inflight[i]
    del inflight[i]
    return item


def _best_note(state: _State, vendor: tuple[str, Timing] | None) -> str:
    done = [r for _, r in state.seen.values() if r.ok]
    if not done:
        return "no verified candidate yet"
    b = min(done, key=lambda r: r.median_ms)
    note = f"best {b.tflops:.1f} TFLOP/s" if b.tflops else f"best {b.median_ms:.3f} ms"
    if vendor:
        note += f" ({vendor[1].median_ms / b.median_ms:.2f}x {vendor[0]})"
    return note


def _proposals(spec: Spec, state: _State, feasible: list[Config]) -> Iterator[dict[str, Any]]:
    """Configurations to enqueue ahead of the sampler's own proposals.

    ``start_from`` first. Brute force then walks every feasible configuration in order, and random
    search draws them in a seeded random order, so neither proposes a configuration that breaks a
    constraint or a device limit (model-based samplers propose freely and learn from such misses).
    """
    order: list[Config] = list(spec.start_from)
    if spec.sampler == "brute":
        order += feasible
    elif spec.sampler == "random":
        shuffled = list(feasible)
        random.Random(spec.seed).shuffle(shuffled)
        order += shuffled
    return (c.as_dict() for c in order if c.key not in state.seen)


def _ask_one(
    spec: Spec, study: Any, problem: Any, settings: Settings, state: _State,
    proposals: Iterator[dict[str, Any]], inflight: set[str], prep: Preparation = TEMPLATES,
    strategy: Strategy | None = None,
) -> tuple[Any, Compiled] | None:  # fmt: skip
    """The next new, valid candidate, rendered; None once the space looks exhausted.

    Duplicates are answered from the study and invalid configurations recorded, neither compiled.
    """
    from optuna.trial import TrialState

    repaired: dict[str, Any] | None = None
    suggest = strategy.suggest if strategy is not None else suggest_choice
    while True:
        elsewhere = state.claims.others(state) if state.claims else 0
        if state.stale >= STALE_LIMIT or state.feasible_seen + len(inflight) + elsewhere >= len(state.feasible):
            return None
        fixed, repaired = repaired if repaired is not None else next(proposals, None), None
        if fixed is None and spec.sampler in ("brute", "random") and not (state.claims and state.claims.retries):
            return None
        trial = _ask_owned(study, fixed)
        if state.claims:
            state.claims.asked(trial)
        values = spec.space.walk(lambda p, t=trial: suggest(t, p))
        config = Config.of(values)
        if config.key in state.seen:
            prev_trial, prev = state.seen[config.key]
            _tell(study, trial, prev, {"duplicate_of": prev_trial.number}, spec.objectives)
            state.stale += 1
            if prev.status is Status.INVALID:  # an infeasible proposal again: repaired like the first time
                repaired = _repair(state, values, inflight)
            continue
        if config.key in inflight:  # already on its way: try again
            trial.set_user_attr("duplicate_of", -1)
            study.tell(trial, state=TrialState.PRUNED)
            state.stale += 1
            continue
        candidate = Candidate(spec.kernel, spec.template, problem, config)
        reason = spec.space.violated(values) or prep.check(candidate, settings)
        if reason:
            r = TrialResult(Status.INVALID, reason, "", config)
            _tell(study, trial, r, objectives=spec.objectives)
            state.record(trial, r, new=True)
            state.stale += 1
            repaired = _repair(state, values, inflight)  # evaluated next, instead of another ask
            continue
        holder = state.claims.claim(trial, config.key, state) if state.claims else None
        if holder is not None:  # another worker holds it, or has finished it (then answered from its result)
            if config.key in state.seen:
                _tell(study, trial, state.seen[config.key][1], {"duplicate_of": holder}, spec.objectives)
            else:
                trial.set_user_attr("duplicate_of", holder)
                study.tell(trial, state=TrialState.PRUNED)
            state.stale += 1
            continue
        state.stale = 0
        return trial, prep.render(candidate, settings)


def _ask_owned(study: Any, fixed: dict[str, Any] | None) -> Any:
    """``study.ask()`` for a trial that carries this process as its owner from the moment it exists.

    The trial is enqueued with its owner and then asked for, so a kill at any point leaves either a waiting
    trial (asked by the next run) or a running one whose owner is known (failed as interrupted by the next
    run, see :func:`fail_orphans`). Should another process's waiting trial be popped instead, it is re-marked.
    """
    owner = _owner()
    study.enqueue_trial(fixed or {}, user_attrs={"owner": owner})
    trial = study.ask()
    if trial.user_attrs.get("owner") != owner:
        trial.set_user_attr("owner", owner)
    return trial


def _repair(state: _State, values: dict[str, Any], inflight: set[str]) -> dict[str, Any] | None:
    """The nearest feasible configuration not yet seen nor in flight, for a model-based sampler's infeasible
    proposal; None for samplers that draw from the feasible list, or when every configuration is taken."""
    if state.nearest is None:
        return None
    near = state.nearest(values, lambda c: c.key in state.seen or c.key in inflight)
    if near is None:
        return None
    state.repaired += 1
    return near.as_dict()


def _final_best(
    spec: Spec, problem: Any, settings: Settings, state: _State, evaluator: Evaluator, compiler: CompilePool,
    prep: Preparation = TEMPLATES,
) -> TrialResult | None:  # fmt: skip
    """Re-verify and re-time the top few in this process, longer, so the winner is not noise: FINAL_ROUNDS
    interleaved rounds (a slow stretch of the GPU then lands on every finalist alike), each finalist's verdict its
    median round. A finalist that fails a round is out."""
    done = sorted((r for _, r in state.seen.values() if r.ok), key=lambda r: r.median_ms)[:FINAL_TOP_K]
    longer = replace(settings, timing=FINAL_PLAN, abort_above_ms=None)
    finalists = []
    for before in done:
        c = prep.render(Candidate(spec.kernel, spec.template, problem, before.config), longer)
        finalists.append(prep.finish(c, compiler.result(compiler.submit(c)), longer))
    rounds: list[list[TrialResult] | None] = [[] for _ in finalists]
    for _ in range(FINAL_ROUNDS):
        for i, c in enumerate(finalists):
            seen = rounds[i]
            if seen is None:
                continue
            again = evaluator.measure(c, longer)
            if again.ok:
                seen.append(again)
            else:
                log.warning("%s passed before but fails now: %s", c.kernel_name, again.reason)
                rounds[i] = None
    verdicts = [sorted(rs, key=lambda r: r.median_ms)[len(rs) // 2] for rs in rounds if rs]
    return min(verdicts, key=lambda r: r.median_ms, default=None)


def _measured(r: TrialResult) -> bool:
    return r.ok and r.energy_j is not None


def _final_front(
    spec: Spec, problem: Any, settings: Settings, state: _State, evaluator: Evaluator, compiler: CompilePool,
    prep: Preparation = TEMPLATES,
) -> tuple[TrialResult, ...]:  # fmt: skip
    """The time-energy Pareto front of the verified, energy-measured trials, each re-measured (time with the
    final plan, energy with a new batch); the front of the re-measured points, fastest first."""
    front = pareto_front((r for _, r in state.seen.values() if _measured(r)), _ms, _joules)
    longer = replace(settings, timing=FINAL_PLAN, abort_above_ms=None, energy=True)
    again = []
    for before in front:
        c = prep.render(Candidate(spec.kernel, spec.template, problem, before.config), longer)
        r = evaluator.measure(prep.finish(c, compiler.result(compiler.submit(c)), longer), longer)
        if _measured(r):
            again.append(r)
        else:
            log.warning("%s was on the time-energy front but now: %s", before.kernel_name, r.reason or r.energy_note)
    return tuple(pareto_front(again, _ms, _joules))


def _ms(r: TrialResult) -> float:
    return r.median_ms


def _joules(r: TrialResult) -> float:
    return r.energy_j if r.energy_j is not None else math.inf
