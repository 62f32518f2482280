"""The CPU tier's covering design (tests/sweep.py): every configuration compiles, every combination is met, and
AUTOTUNE_FULL_SWEEP=1 gives back the whole sweep."""

from __future__ import annotations

import itertools

import pytest

from tests.sweep import (
    FULL_SWEEP_ENV,
    case_cover,
    covering,
    full_only,
    full_sweep,
    label_cover,
    product,
    share,
    value_cover,
)

COMBOS = product(["float32", "float16"], ["NN", "NT", "TN"])


def test_each_label_once_and_every_combination_met():
    runs = covering([f"c{i}" for i in range(7)], COMBOS, full=False)
    assert [r[0] for r in runs] == [f"c{i}" for i in range(7)]
    assert {tuple(r[1:]) for r in runs} == set(COMBOS)


def test_the_first_combinations_hold_every_value_of_every_axis():
    first = product(["float16", "bfloat16"], ["NN", "NT", "TN", "TT"])[:4]
    assert {c[0] for c in first} == {"float16", "bfloat16"} and {c[1] for c in first} == {"NN", "NT", "TN", "TT"}
    assert sorted(product([1, 2, 3], "ab")) == sorted(itertools.product([1, 2, 3], "ab"))


def test_two_combinations_a_label_overlap_so_every_pair_of_axes_is_met():
    cases = ["f16", "bf16", "f16", "bf16", "f16"]  # a dtype each; the layouts are the combinations
    layouts = ("NN", "NT", "TN", "TT")
    runs = covering(range(len(cases)), [(x,) for x in layouts], full=False, times=2)
    assert len(runs) == 2 * len(cases)
    assert {(cases[i], layout) for i, layout in runs} == {(d, x) for d in ("f16", "bf16") for x in layouts}


def test_eligibility_moves_a_label_on_and_a_label_nothing_takes_raises():
    runs = covering(["c0", "c1", "c2"], COMBOS, lambda label, c: label != "c1" or c[0] == "float32", full=False)
    assert COMBOS[1][0] == "float16"  # c1's turn: it moves on to the next combination it may take
    assert all(r[1] == "float32" for r in runs if r[0] == "c1") and len(runs) == 3
    with pytest.raises(ValueError, match="'c1'"):
        covering(["c0", "c1"], COMBOS, lambda label, c: label != "c1", full=False)


def test_the_full_sweep_runs_every_eligible_pair(monkeypatch):
    labels = ["c0", "c1", "c2"]
    monkeypatch.setenv(FULL_SWEEP_ENV, "1")
    assert full_sweep() and len(covering(labels, COMBOS)) == len(labels) * len(COMBOS)
    assert share(labels, COMBOS, COMBOS[-1]) == labels
    monkeypatch.setenv(FULL_SWEEP_ENV, "0")
    assert not full_sweep() and len(covering(labels, COMBOS)) == len(labels)


def test_a_combination_left_without_a_label_fails_its_sweep(monkeypatch):
    monkeypatch.delenv(FULL_SWEEP_ENV, raising=False)
    assert share(["c0", "c1"], COMBOS, COMBOS[1]) == ["c1"]
    with pytest.raises(AssertionError, match="nothing to compile"):
        share(["c0", "c1"], COMBOS, COMBOS[2])


def test_the_value_cover_meets_every_parameter_value_with_fewer_configurations():
    configs = [dict(T="a", X=x, Y=y) for x in (1, 2, 3) for y in (8, 16)] + [dict(T="b", Z=0)]
    chosen = value_cover(configs, full=False)
    met = {(k, v) for c in chosen for k, v in c.items()}
    assert met == {(k, v) for c in configs for k, v in c.items()} and len(chosen) == 4
    assert [configs.index(c) for c in chosen] == sorted(configs.index(c) for c in chosen)
    assert value_cover(configs, full=True) == configs


def test_label_cover_keeps_labels_whose_configurations_hold_every_parameter_value():
    good = {"a": dict(X=1, Y=1), "b": dict(X=1, Y=1), "c": dict(X=2, Y=1), "d": dict(X=1, Y=3), "e": dict(X=2, Y=3)}
    kept = label_cover(good, full=False)
    values = {(k, v) for c in good.values() for k, v in c.items()}
    assert {(k, v) for label in kept for k, v in good[label].items()} == values
    assert len(kept) < len(good) and kept == [label for label in good if label in kept]  # in the given order
    assert label_cover(good, full=True) == list(good)


def test_full_only_cases_run_in_the_full_sweep_alone(monkeypatch):
    monkeypatch.setenv(FULL_SWEEP_ENV, "1")
    assert full_only([("a", 1), ("b", 2)]) == [("a", 1), ("b", 2)]
    monkeypatch.delenv(FULL_SWEEP_ENV)
    assert full_only([("a", 1), ("b", 2)]) == []


def test_the_case_cover_meets_every_facet_value_and_keeps_the_order():
    cases = [(dict(X=x, Y=y), layout) for x in (1, 2) for y in (8, 16) for layout in ("NN", "TT")]
    kept = case_cover(cases, lambda c: {**c[0], "layout": c[1]}, full=False)
    assert len(kept) < len(cases) and kept == [c for c in cases if c in kept]
    assert {c[0]["X"] for c in kept} == {1, 2} and {c[0]["Y"] for c in kept} == {8, 16}
    assert {c[1] for c in kept} == {"NN", "TT"}
    assert case_cover(cases, lambda c: {**c[0], "layout": c[1]}, full=True) == cases
