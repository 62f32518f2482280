"""The Optuna side: one study per (kernel, template, dtype, shape), ask/tell, resumable storage.

Constraints and device limits are checked before anything is compiled; a configuration already in
the study is answered from it. The loop is a pipeline: candidates are asked for ahead and compiled in
a process pool while the GPU worker verifies and times earlier ones; a candidate whose first launches
are already far slower than the best so far stops being timed (pruned).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..build.compile_pool import CompilePool
from ..core.space import Config, Nearest
from ..measure.bench import Timing
from ..measure.evaluate import Candidate, Compiled, Settings, Status, TrialResult
from ..studies.study_storage import (  # noqa: F401 - re-exported: the loop's storage and its orphans
    _owner,
    default_storage,
    fail_orphans,
    failed_orphans,
    open_journal,
    open_storage,
    orphan_reason,
)
from ..studies.trial_record import _tell, objective_values, result_attrs, result_from_trial  # noqa: F401 - re-exported
from .finalists import FINAL_ROUNDS, FINAL_TOP_K, _final_best, _final_front, _joules, _measured, _ms  # noqa: F401 - re-exported
from .samplers import NSGA_POPULATION, TPE_STARTUP, make_sampler  # noqa: F401 - re-exported
from .search_state import (  # noqa: F401 - re-exported: the loop's types and plans
    ABORT_RATIO,
    FINAL_PLAN,
    SEARCH_PLAN,
    TEMPLATES,
    Evaluator,
    Preparation,
    ShapeOutcome,
    Strategy,
    _State,
    feasible_configs,
    study_name,
    suggest_choice,
)
from .spec import Spec

log = logging.getLogger(__name__)

STALE_LIMIT = 2000  # consecutive duplicate or invalid proposals before the space counts as exhausted


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
    (a :class:`autotune.measure.worker.GPUWorker` in real runs) and ``compiler`` compiles them. ``shared``: other
    workers tune the same study at the same time (see :mod:`autotune.studies.shared_study`); the trial budget is
    then the study's, and one worker re-times the finalists. ``gpu_key`` goes into the study's name. ``prep`` and
    ``strategy`` replace the templates and the spec's sampler (a replay of recorded measurements, autotune.tune.replay).
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
    asks = state.claims.local if state.claims else study  # a shared study: the sampler's mirror in memory
    loop = _Loop(spec, problem, settings, asks, state, compiler, prep, strategy, prefetch, trials,
                 _proposals(spec, state, feasible))  # fmt: skip
    loop.refill()  # the first compiles run while the vendor library is timed
    vendor = evaluator.vendor(spec.kernel, problem, settings.timing)
    stopped = _search(loop, evaluator, deadline, minutes, abort_ratio, progress, vendor)
    _free_unevaluated(asks, state, loop.inflight)
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
    orphans = failed_orphans(study, storage, shared)
    feasible = prep.feasible(spec, problem, settings)
    state = _State(frozenset(c.key for c in feasible))
    if shared:
        from ..studies.shared_study import Claims, retry

        state.claims = Claims(study, storage, spec.objectives)
        for t in orphans:  # another worker may have passed their configurations by: evaluate them again
            retry(study, t)
    if spec.sampler not in ("brute", "random"):  # those two draw from the feasible list already
        state.nearest = Nearest(spec.space, feasible, spec.seed)
    if callable(getattr(study.sampler, "restrict", None)):  # a sampler that proposes feasible ones only (ga)
        study.sampler.restrict(spec.space, feasible)
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
        if state.claims and not state.claims.kept(trial, state):  # another worker has its configuration
            continue
        compiled = loop.prep.finish(c, compiler.result(handle), settings) if handle is not None else c
        abort = state.best_ms * abort_ratio if abort_ratio and state.best_ms else None
        run_settings = replace(settings, abort_above_ms=abort)
        if overlap:  # the GPU measures while the sampler proposes the next candidates
            evaluator.start(compiled, run_settings)  # type: ignore[attr-defined]
            loop.refill(running=compiled.candidate.config.key)
            if state.claims:  # a shared study: the previous result, written meanwhile, is stored by now
                state.claims.flush()
            r = evaluator.collect()  # type: ignore[attr-defined]
        else:
            r = evaluator.measure(compiled, run_settings)
        _tell(loop.study, trial, r, objectives=spec.objectives)
        if state.claims:  # the shared study's trial; with ``overlap`` its result is written while the next starts
            trial = state.claims.told(trial, r, later=overlap)
        state.record(trial, r, new=True)
        progress(state.evaluated, _best_note(state, vendor))


def _free_unevaluated(study: Any, state: _State, inflight: deque[tuple[Any, Compiled, str | None]]) -> None:
    """Trials asked for but not run before the budget ended: failed as "unevaluated", free for a later run."""
    from optuna.trial import TrialState

    for trial, _, _ in inflight:
        trial.set_user_attr("status", "unevaluated")
        study.tell(trial, state=TrialState.FAIL)
        if state.claims:
            state.claims.abandon(trial)


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
        if repaired is None and state.claims and state.claims.retries:  # a dead worker's configuration first
            repaired = state.claims.take_retry(state, inflight)
        fixed, repaired = repaired if repaired is not None else next(proposals, None), None
        if fixed is None and spec.sampler in ("brute", "random"):
            return None
        trial = _ask_owned(study, fixed) if state.claims is None else state.claims.mirror.ask(fixed)  # claimed below
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
