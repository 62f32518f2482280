"""The genetic algorithm sampler (autotune/tune/samplers_ga.py): feasible proposals only, generations of distinct
children, seed-determinism, and through the search loop on the committed record: every evaluation a distinct
recorded configuration. The per-family default that makes it conv2d's sampler."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from autotune.core.space import Config, Param, Space
from autotune.tune.replay import Variant, replay_once
from autotune.tune.samplers import default_sampler, make_sampler
from autotune.tune.samplers_ga import GeneticSampler
from autotune.tune.spec import load_spec
from tests.fakes import replayed_evaluations

SPACE = Space((Param("A", (1, 2, 4, 8)), Param("B", (1, 2, 4, 8)), Param("C", (0, 1)), Param("D", (16, 32, 64))))
FEASIBLE = [c for c in SPACE.enumerate() if c["A"] * c["B"] <= 16]  # a constraint the sampler is only shown
H200_RECORD = Path(__file__).parents[1] / "data" / "records" / "record_gemm_fp16_h200.json.gz"


def _time(values: dict) -> float:
    """A separable objective with its minimum at A=4, B=4, C=1, D=32."""
    a, b = math.log2(values["A"]) - 2, math.log2(values["B"]) - 2
    return 1.0 + a * a + b * b + (1 - values["C"]) + abs(values["D"] - 32) / 16


def _search(seed: int, trials: int, population: int = 8, restrict: bool = True) -> list[dict]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = GeneticSampler(seed=seed, population=population)
    if restrict:
        sampler.restrict(SPACE, FEASIBLE)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: _time(SPACE.walk(lambda p: t.suggest_categorical(p.name, list(p.values)))), trials)
    return [t.params for t in study.trials]


def test_every_proposal_is_a_feasible_configuration():
    feasible = {c.key for c in FEASIBLE}
    for seed in range(3):
        proposed = _search(seed, 80)
        assert len(proposed) == 80 and {Config.of(p).key for p in proposed} <= feasible


def test_each_generation_is_distinct_and_the_search_improves_on_the_first():
    proposed = _search(seed=0, trials=8 * 10)
    generations = [proposed[i : i + 8] for i in range(0, len(proposed), 8)]
    for g in generations:
        assert len({Config.of(p).key for p in g}) == len(g)
    first, last = min(map(_time, generations[0])), min(_time(p) for g in generations[1:] for p in g)
    assert last < first


def test_a_converged_population_is_mutated_and_the_search_goes_on_to_new_configurations():
    """Repeats cost the loop nothing but a search of repeats alone would end as exhausted: a generation that
    measured nothing new is followed by one of mutated children."""
    for seed in range(2):
        proposed = _search(seed, trials=400)
        assert len({Config.of(p).key for p in proposed}) > len(FEASIBLE) // 2


def test_a_seed_gives_the_same_search_and_another_seed_another():
    assert _search(seed=5, trials=40) == _search(seed=5, trials=40)
    assert _search(seed=5, trials=40) != _search(seed=6, trials=40)


def test_without_the_feasible_list_it_samples_the_space_at_random():
    proposed = _search(seed=0, trials=30, restrict=False)
    assert all(p[q.name] in q.values for p in proposed for q in SPACE.params)
    assert len({Config.of(p).key for p in proposed}) > 20


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="population must be at least 2"):
        GeneticSampler(population=1)


def test_through_the_loop_every_evaluation_is_a_distinct_recorded_configuration():
    """The loop gives the sampler the record's configurations; the sampler's repeats of measured ones are answered
    from the study, so each evaluation is new, and the search does not run dry before its budget."""
    from autotune.tune.t4 import load_record

    record = load_record(H200_RECORD)
    run, seen = replayed_evaluations(record, "ga", seed=3, budget=150)
    assert len(run.best_ms) == 150 and len(seen) == len(set(seen)) and set(seen) <= set(record.by_key)
    assert run == replay_once(record, Variant.named("ga"), seed=3, budget=150, stop=False)
    assert run.best_ms != replay_once(record, Variant.named("ga"), seed=4, budget=150, stop=False).best_ms


def test_conv2d_defaults_to_the_genetic_algorithm_and_gemm_to_tpe():
    assert default_sampler("conv2d") == "ga" and default_sampler("gemm") == "tpe"
    assert default_sampler("conv2d", ("time", "energy")) == "nsga2"
    assert isinstance(make_sampler("ga", 0), GeneticSampler)
    root = Path(__file__).parents[2] / "configs"
    assert {load_spec(p).sampler for p in root.glob("conv*.yaml")} == {"ga"}  # the shipped conv specs use it
    assert load_spec(root / "gemm.yaml").sampler == "tpe"
