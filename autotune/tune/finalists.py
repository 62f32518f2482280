"""The search's last step: re-verify and re-time the finalists of a shape in this process, longer (the winner
by time), or the Pareto front of time and energy; and the winner beside the stored entry it would replace.
autotune.tune.search re-exports the search's names."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any

from ..build.compile_pool import CompilePool
from ..measure.energy import pareto_front
from ..measure.evaluate import Candidate, Settings, TrialResult
from .search_state import FINAL_PLAN, TEMPLATES, Evaluator, Preparation, _State
from .spec import Spec

log = logging.getLogger(__name__)

FINAL_TOP_K = 3
FINAL_ROUNDS = 3  # interleaved re-timings of the finalists; the verdict is each one's median round


def _final_best(
    spec: Spec, problem: Any, settings: Settings, state: _State, evaluator: Evaluator, compiler: CompilePool,
    prep: Preparation = TEMPLATES,
) -> TrialResult | None:  # fmt: skip
    """Re-verify and re-time the top few in this process, longer, so the winner is not noise: FINAL_ROUNDS
    interleaved rounds (``side_by_side``: a slow stretch of the GPU then lands on every finalist alike), each
    finalist's verdict its median round. A finalist that fails a round is out."""
    done = sorted((r for _, r in state.seen.values() if r.ok), key=lambda r: r.median_ms)[:FINAL_TOP_K]
    finalists = [(spec.template, r.config) for r in done]
    verdicts = side_by_side(spec.kernel, problem, settings, finalists, evaluator, compiler, prep)
    return min((r for r in verdicts if r is not None), key=lambda r: r.median_ms, default=None)


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


def side_by_side(
    kernel: str, problem: Any, settings: Settings, configs: list[tuple[str, Any]], evaluator: Evaluator,
    compiler: CompilePool, prep: Preparation = TEMPLATES, alternate: bool = False,
) -> list[TrialResult | None]:  # fmt: skip
    """Each (template, Config) re-verified and re-timed in this process, FINAL_ROUNDS interleaved rounds (with
    ``alternate`` the order reversed every other round): each one's median round, or None for one that failed. The
    finalists of a search, and a new winner beside the stored entry it would replace (timed beside it rather than
    against a time from another run: the card's clock moves with its temperature between runs)."""
    longer = replace(settings, timing=FINAL_PLAN, abort_above_ms=None)
    compiled = []
    for template, config in configs:
        c = prep.render(Candidate(kernel, template, problem, config), longer)
        compiled.append(prep.finish(c, compiler.result(compiler.submit(c)), longer))
    rounds: list[list[TrialResult]] = [[] for _ in compiled]
    failed: set[int] = set()
    for r in range(FINAL_ROUNDS):
        for i in reversed(range(len(compiled))) if alternate and r % 2 else range(len(compiled)):
            if i in failed:
                continue
            again = evaluator.measure(compiled[i], longer)
            if again.ok:
                rounds[i].append(again)
            else:
                log.warning("%s passed before but fails now: %s", compiled[i].kernel_name, again.reason)
                failed.add(i)
    return [None if i in failed else sorted(rs, key=_ms)[len(rs) // 2] for i, rs in enumerate(rounds)]
