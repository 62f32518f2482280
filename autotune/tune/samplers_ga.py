"""A genetic algorithm as an Optuna sampler, after Kernel Tuner 1.5's ``genetic_algorithm`` strategy.

Each generation is a population of distinct feasible configurations. Parents are drawn by rank (a Beta(1, 2.5)
draw, so the fastest are picked most), crossed at one point of the parameter order and, rarely, mutated to a
configuration that differs in one parameter. A child that is not feasible is repaired to a random feasible
neighbour whose every parameter is at most one value position away (Kernel Tuner's "strictly adjacent"), else one
that differs in a single parameter, else the nearest. Children may repeat configurations already measured: the
search loop answers those from the study without measuring them again, so they cost no evaluation; a generation
is ranked with every child's known time, repeats included. There is no elitism: each generation is children only.
A generation that measured nothing new has converged; every child of the next one is mutated, so the search moves
on instead of repeating itself until the loop calls the space exhausted. Settings: see ``POPULATION``.

The loop hands the sampler the space and its feasible configurations (:meth:`GeneticSampler.restrict`) once they
are known; until then, or for an empty list, it samples uniformly at random. Only the first objective is used.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from ..core.space import Config, Space

# Kernel Tuner 1.5 breeds 26 per generation and mutates 1 child in 55. Ours, chosen on the A100 convolution record:
# evaluations to within 5% of the optimum, median of seeds 100-299 (not the benchmark's 0-29), this sampler run on
# the record with the loop's counting (repeats free, early abort at 2x; it gives the loop's own numbers), population
# | 1 in: 26 | 55: 187; 20 | 55: 162; 16 | 55: 158.5; 12 | 55: 159.5 (3 unreached); 20 | 25: 158; 20 | 1000: 195.
# Uniform or two-point crossover (171, 184), mutation to adjacent values (315) and keeping the best were worse.
POPULATION = 20
MUTATION_CHANCE = 25
BETA = (1.0, 2.5)  # rank selection: Beta(1, 2.5) over the ranked generation, as Kernel Tuner draws parents


class GeneticSampler(optuna.samplers.BaseSampler):
    """Generations of crossed and repaired feasible configurations, one child per trial (see the module doc)."""

    def __init__(self, seed: int | None = None, population: int = POPULATION,
                 mutation_chance: int = MUTATION_CHANCE) -> None:  # fmt: skip
        if population < 2 or mutation_chance < 1:
            raise ValueError("population must be at least 2 and mutation_chance at least 1")
        self._seed, self._population, self._mutation = seed, population, mutation_chance
        self._rng = random.Random(seed)
        self._fallback = optuna.samplers.RandomSampler(seed=seed)
        self._space: Space | None = None
        self._rows = np.zeros((0, 0), dtype=np.int64)  # feasible configurations as value positions, -1: absent
        self._row_of: dict[tuple[int, ...], int] = {}
        self._generation: list[int] = []  # rows of the generation being handed out
        self._known: set[str] = set()  # configurations with a result when that generation was bred
        self._queue: list[int] = []  # its rows not handed out yet
        self._plans: dict[int, dict[str, Any]] = {}  # trial number -> the configuration it was given

    # --- what the search loop tells the sampler ---
    def restrict(self, space: Space, feasible: Sequence[Config]) -> None:
        """The space and its feasible configurations: every proposal is one of them from now on."""
        self._space = space
        positions = [{v: i for i, v in enumerate(p.values)} for p in space.params]
        rows = [
            tuple(pos.get(c.as_dict().get(p.name), -1) if p.name in c.as_dict() else -1
                  for p, pos in zip(space.params, positions, strict=True))
            for c in feasible
        ]  # fmt: skip
        self._rows = np.array(rows, dtype=np.int64).reshape(len(rows), len(space.params))
        self._row_of = {r: i for i, r in enumerate(rows)}
        self._generation, self._queue, self._plans = [], [], {}

    # --- Optuna's sampler interface ---
    def reseed_rng(self) -> None:
        self._rng = random.Random()
        self._fallback.reseed_rng()

    def infer_relative_search_space(self, study: Any, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Any, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict:
        return {}

    def sample_independent(self, study: Any, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:  # fmt: skip
        if self._space is None or not len(self._rows):
            return self._fallback.sample_independent(study, trial, param_name, param_distribution)
        if trial.number not in self._plans:
            self._plans[trial.number] = self._config(self._next_row(study))
        value = self._plans[trial.number].get(param_name)
        if isinstance(param_distribution, CategoricalDistribution) and value in param_distribution.choices:
            return value
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Any, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self._plans.pop(trial.number, None)

    # --- the algorithm ---
    def _config(self, row: int) -> dict[str, Any]:
        assert self._space is not None
        return {p.name: p.values[i] for p, i in zip(self._space.params, self._rows[row], strict=True) if i >= 0}

    def _next_row(self, study: Any) -> int:
        if not self._queue:
            self._queue = self._breed(study) if self._generation else self._first()
            self._generation = list(self._queue)
        return self._queue.pop(0)

    def _first(self) -> list[int]:
        """The first generation: distinct feasible configurations at random."""
        return self._rng.sample(range(len(self._rows)), min(self._population, len(self._rows)))

    def _breed(self, study: Any) -> list[int]:
        """The next generation from the last one ranked by time: distinct children of rank-drawn parents."""
        times = _times(study)
        ranked = sorted(self._generation, key=lambda r: times.get(self._key(r), math.inf))
        # a generation that measured nothing new has converged: every child of the next one is mutated
        stuck = all(self._key(r) in self._known for r in self._generation)
        self._known = set(times)
        children: list[int] = []
        for _ in range(20 * self._population):  # a converged population may not have enough distinct children
            if len(children) >= self._population:
                break
            a, b = self._parents(ranked)
            for child in self._cross(a, b):
                child = self._mutate(child, always=stuck)
                if child not in children and len(children) < self._population:
                    children.append(child)
        return children

    def _parents(self, ranked: list[int]) -> tuple[int, int]:
        if len(ranked) < 2:
            return ranked[0], ranked[0]
        first = int(self._rng.betavariate(*BETA) * len(ranked))
        second = first
        while second == first:
            second = int(self._rng.betavariate(*BETA) * len(ranked))
        return ranked[first], ranked[second]

    def _cross(self, a: int, b: int) -> tuple[int, int]:
        """Single-point crossover of two rows, each child repaired to a feasible row."""
        x, y = self._rows[a], self._rows[b]
        cut = int(self._rng.random() * len(x))
        return self._repair(np.concatenate([x[:cut], y[cut:]])), self._repair(np.concatenate([y[:cut], x[cut:]]))

    def _mutate(self, row: int, always: bool = False) -> int:
        if not always and int(self._rng.random() * self._mutation) != 0:
            return row
        hamming = np.flatnonzero((self._rows != self._rows[row]).sum(axis=1) == 1)
        return int(self._rng.choice(hamming)) if len(hamming) else row

    def _repair(self, x: np.ndarray) -> int:
        found = self._row_of.get(tuple(int(v) for v in x))
        if found is not None:
            return found
        diff = np.abs(self._rows - x)
        for near in ((diff.max(axis=1) <= 1), ((diff > 0).sum(axis=1) == 1)):  # strictly adjacent, then Hamming
            rows = np.flatnonzero(near)
            if len(rows):
                return int(self._rng.choice(rows))
        return int(np.argmin(diff.sum(axis=1)))

    def _key(self, row: int) -> str:
        return Config.of(self._config(row)).key


def _times(study: Any) -> dict[str, float]:
    """Each configuration's best known time in the study (failed, pruned or invalid: inf)."""
    out: dict[str, float] = {}
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    for t in study.get_trials(deepcopy=False, states=states):
        key = Config.of(t.params).key
        v = t.values[0] if t.state == TrialState.COMPLETE and t.values else math.inf
        out[key] = min(out.get(key, math.inf), v)
    return out
