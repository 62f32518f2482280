"""Search spaces: enumeration under constraints and conditions, walk(), Config keys, the default space."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from autotune.core.errors import ConstraintError
from autotune.core.expr import Expression
from autotune.core.space import Config, Param, Space, check_names, first_n
from autotune.kernels.gemm import SIMT_PARAMS
from autotune.tune.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
GEMM_YAML = ROOT / "configs" / "gemm_simt.yaml"  # the simt space alone (gemm.yaml searches three templates)


def P(name, values, when=None):
    return Param(name, tuple(values), Expression(when) if when else None)


def S(params, constraints=()):
    return Space(tuple(params), tuple(Expression(c) for c in constraints))


def dicts(space):
    return [c.as_dict() for c in space.enumerate()]


# --- enumerate -----------------------------------------------------------------------------------


def test_unconstrained_enumeration_is_the_full_product_in_lexicographic_order():
    space = S([P("A", [1, 2]), P("B", ["x", "y", "z"])])
    assert dicts(space) == [{"A": a, "B": b} for a, b in itertools.product([1, 2], ["x", "y", "z"])]
    assert space.size_upper_bound() == 6
    assert space.names == ("A", "B")


def test_enumeration_keeps_exactly_the_configs_satisfying_every_constraint():
    a, b, c = [1, 2, 3, 4, 6, 8], [1, 2, 4], [0, 1]
    space = S([P("A", a), P("B", b), P("C", c)], ["A % B == 0", "A // B + C <= 4"])
    expected = [{"A": x, "B": y, "C": z} for x, y, z in itertools.product(a, b, c) if x % y == 0 and x // y + z <= 4]
    got = dicts(space)
    assert got == expected
    assert 0 < len(got) < space.size_upper_bound()


def test_enumeration_yields_configs_in_declaration_order():
    space = S([P("Z", [1]), P("A", [2]), P("M", [3])])
    [config] = list(space.enumerate())
    assert [k for k, _ in config.params] == ["Z", "A", "M"]


def test_constant_false_constraint_empties_the_space_and_constant_true_keeps_it():
    params = [P("A", [1, 2]), P("B", [1, 2])]
    assert dicts(S(params, ["1 > 2"])) == []
    assert len(dicts(S(params, ["1 < 2"]))) == 4


def test_constraint_is_checked_as_soon_as_its_names_are_bound():
    # Documented: constraints prune whole subtrees. "A == 1" must be tried once per value of A, not per leaf.
    calls = []

    class Counting(Expression):
        def evaluate(self, values):
            calls.append(dict(values))
            return super().evaluate(values)

    space = Space(
        (P("A", [1, 2, 3, 4]), P("B", range(10)), P("C", range(10))),
        (Counting("A == 1"),),
    )
    assert len(list(space.enumerate())) == 100
    assert len(calls) == 4
    assert all(set(v) == {"A"} for v in calls)


def test_conditional_param_exists_only_when_its_condition_holds():
    space = S([P("MODE", ["plain", "tiled"]), P("TILE", [8, 16], when="MODE == 'tiled'")])
    assert dicts(space) == [{"MODE": "plain"}, {"MODE": "tiled", "TILE": 8}, {"MODE": "tiled", "TILE": 16}]
    assert space.size_upper_bound() == 4  # an upper bound: conditions are ignored


def test_condition_reading_an_absent_conditional_param_is_false():
    space = S(
        [
            P("MODE", ["plain", "tiled"]),
            P("TILE", [8, 16], when="MODE == 'tiled'"),
            P("SPLIT", [1, 2], when="TILE > 8"),  # reads TILE, which is absent for MODE=plain
        ]
    )
    assert dicts(space) == [
        {"MODE": "plain"},
        {"MODE": "tiled", "TILE": 8},
        {"MODE": "tiled", "TILE": 16, "SPLIT": 1},
        {"MODE": "tiled", "TILE": 16, "SPLIT": 2},
    ]


def test_constraint_on_a_conditional_param_applies_only_when_it_exists():
    space = S(
        [P("MODE", ["plain", "tiled"]), P("TILE", [8, 16, 32], when="MODE == 'tiled'"), P("V", [1, 2])],
        ["TILE >= 16", "TILE % (V * 8) == 0"],
    )
    assert dicts(space) == [
        {"MODE": "plain", "V": 1},  # no TILE: neither constraint applies
        {"MODE": "plain", "V": 2},
        {"MODE": "tiled", "TILE": 16, "V": 1},
        {"MODE": "tiled", "TILE": 16, "V": 2},
        {"MODE": "tiled", "TILE": 32, "V": 1},
        {"MODE": "tiled", "TILE": 32, "V": 2},
    ]


def test_constraint_on_a_conditional_last_param_applies_only_when_it_exists():
    # The conditional parameter is the deepest name the constraint reads, and it is the last parameter.
    space = S([P("A", [1, 2, 3]), P("B", [1, 2, 3], when="A > 1")], ["B < A"])
    assert dicts(space) == [{"A": 1}, {"A": 2, "B": 1}, {"A": 3, "B": 1}, {"A": 3, "B": 2}]


def test_condition_may_read_only_earlier_params():
    # A condition over a parameter declared later cannot be known yet: the parameter never exists.
    space = S([P("X", [1, 2], when="Y > 0"), P("Y", [1])])
    assert dicts(space) == [{"Y": 1}]


# --- violated ------------------------------------------------------------------------------------


def test_violated_names_the_first_broken_constraint():
    space = S([P("A", [1, 2, 3]), P("B", [1, 2])], ["A > 1", "A % B == 0", "A + B < 100"])
    assert space.violated({"A": 3, "B": 1}) is None
    assert space.violated({"A": 1, "B": 2}) == "A > 1"
    assert space.violated({"A": 3, "B": 2}) == "A % B == 0"


def test_violated_skips_constraints_on_absent_params():
    space = S([P("MODE", ["plain", "tiled"]), P("TILE", [8, 16], when="MODE == 'tiled'")], ["TILE > 8"])
    assert space.violated({"MODE": "plain"}) is None
    assert space.violated({"MODE": "tiled", "TILE": 8}) == "TILE > 8"
    assert space.violated({"MODE": "tiled", "TILE": 16}) is None


# --- walk ----------------------------------------------------------------------------------------


def _conditional_space():
    return S(
        [
            P("MODE", ["plain", "tiled"]),
            P("TILE", [8, 16], when="MODE == 'tiled'"),
            P("SPLIT", [1, 2], when="TILE > 8"),
            P("V", [1, 4]),
        ]
    )


@pytest.mark.parametrize(
    ("choices", "asked"),
    [
        ({"MODE": "plain", "V": 4}, ["MODE", "V"]),
        ({"MODE": "tiled", "TILE": 8, "V": 1}, ["MODE", "TILE", "V"]),
        ({"MODE": "tiled", "TILE": 16, "SPLIT": 2, "V": 1}, ["MODE", "TILE", "SPLIT", "V"]),
    ],
)
def test_walk_asks_only_for_params_that_exist(choices, asked):
    space = _conditional_space()
    seen = []

    def choose(p):
        seen.append(p.name)
        assert isinstance(p, Param)
        return choices[p.name]  # KeyError if asked for a parameter that should not exist

    assert space.walk(choose) == choices
    assert seen == asked


def test_walk_reproduces_every_enumerated_config():
    space = S(
        [P("MODE", ["plain", "tiled"]), P("TILE", [8, 16, 32], when="MODE == 'tiled'"), P("V", [1, 2])],
        ["TILE % (V * 8) == 0"],
    )
    configs = list(space.enumerate())
    assert len(configs) == 7
    for config in configs:
        assert space.walk(lambda p, c=config: c[p.name]) == config.as_dict()
        assert space.violated(config.as_dict()) is None


def test_walk_does_not_filter_by_constraints():
    space = S([P("A", [1, 2])], ["A > 1"])
    values = space.walk(lambda p: p.values[0])
    assert values == {"A": 1}
    assert space.violated(values) == "A > 1"


# --- Config --------------------------------------------------------------------------------------


def test_config_key_is_order_independent():
    a = Config.of({"BM": 128, "BN": 64, "DBUF": True})
    b = Config.of({"DBUF": True, "BN": 64, "BM": 128})
    assert a.key == b.key == "BM=128,BN=64,DBUF=1"


def test_config_key_distinguishes_values():
    assert Config.of({"A": 1, "B": 2}).key != Config.of({"A": 2, "B": 1}).key
    assert Config.of({"D": False}).key == "D=0"
    assert Config.of({"M": "fast"}).key == "M=fast"


def test_config_is_hashable_and_stable():
    a = Config.of({"BM": 128, "BN": 64})
    b = Config.of({"BM": 128, "BN": 64})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, Config.of({"BM": 64, "BN": 64})}) == 2
    assert {a: "x"}[b] == "x"
    assert {a.key, Config.of({"BN": 64, "BM": 128}).key} == {a.key}


def test_config_accessors():
    c = Config.of({"BM": 128, "DBUF": False})
    assert c["BM"] == 128
    assert c["DBUF"] is False
    assert c.as_dict() == {"BM": 128, "DBUF": False}
    assert list(c.as_dict()) == ["BM", "DBUF"]
    with pytest.raises(KeyError):
        c["BN"]


# --- helpers -------------------------------------------------------------------------------------


def test_check_names_rejects_unknown_names_in_constraints_and_conditions():
    good = S([P("A", [1]), P("B", [1], when="A > 0")], ["A <= B"])
    check_names(good, lambda e: "here")  # no error

    with pytest.raises(ConstraintError) as info:
        check_names(S([P("A", [1])], ["A < QQ"]), lambda e: f"at {e.text}")
    msg = str(info.value)
    assert msg.startswith("at A < QQ:")
    assert "QQ" in msg and "not a parameter" in msg

    with pytest.raises(ConstraintError, match="ZZ"):
        check_names(S([P("A", [1]), P("B", [1], when="ZZ > 0")]), lambda e: "params")


def test_first_n():
    space = S([P("A", range(10))])
    assert [c["A"] for c in first_n(space.enumerate(), 3)] == [0, 1, 2]
    assert len(first_n(space.enumerate(), None)) == 10


# --- the default GEMM space ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemm_spec():
    return load_spec(GEMM_YAML)


@pytest.fixture(scope="module")
def gemm_configs(gemm_spec):
    return list(gemm_spec.space.enumerate())


def test_default_space_has_the_simt_params(gemm_spec):
    assert gemm_spec.space.names == SIMT_PARAMS
    assert len(gemm_spec.space.constraints) >= 1


def test_default_space_enumerates_only_valid_configs(gemm_spec, gemm_configs):
    space = gemm_spec.space
    values = {p.name: p.values for p in space.params}
    assert len(gemm_configs) > 100
    assert len(gemm_configs) < space.size_upper_bound()
    for config in gemm_configs:
        d = config.as_dict()
        assert tuple(d) == SIMT_PARAMS
        assert all(d[name] in values[name] for name in d)
        for c in space.constraints:
            assert c.evaluate(d), f"{config.key} breaks {c.text!r}"
    assert len({c.key for c in gemm_configs}) == len(gemm_configs)


def test_default_space_enumeration_is_complete(gemm_spec, gemm_configs):
    # Brute force over the product agrees with the pruned enumeration (same configs, same order).
    space = gemm_spec.space
    brute = []
    for combo in itertools.product(*(p.values for p in space.params)):
        d = dict(zip(space.names, combo, strict=True))
        if all(c.evaluate(d) for c in space.constraints):
            brute.append(d)
    assert [c.as_dict() for c in gemm_configs] == brute


def test_default_start_from_configs_are_enumerated(gemm_spec, gemm_configs):
    keys = {c.key for c in gemm_configs}
    assert gemm_spec.start_from
    for config in gemm_spec.start_from:
        assert config.key in keys


def test_conditional_spaces_are_sized_exactly_before_constraints():
    from autotune.core.expr import Expression

    t = Param("T", ("a", "b"))
    x = Param("X", (1, 2, 3), Expression("T == 'a'"))
    y = Param("Y", (1, 2, 3, 4), Expression("T == 'b'"))
    z = Param("Z", (1, 2), Expression("T != 'c'"))  # overlaps both branches: it multiplies each of them
    w = Param("W", (5, 6))
    space = Space((t, x, y, z, w))
    assert space.size_before_constraints() == (3 + 4) * 2 * 2 == sum(1 for _ in space.enumerate())
    assert space.size_upper_bound() == 2 * 3 * 4 * 2 * 2
    assert space.size_before_constraints(walk_limit=1) == space.size_upper_bound()  # too many to walk: the bound


def test_nearest_finds_the_closest_feasible_configuration_and_honours_skip():
    from autotune.core.space import Nearest

    space = Space((Param("A", (1, 2, 4, 8)), Param("B", (1, 2, 4, 8))), (Expression("A * B <= 8"),))
    feasible = list(space.enumerate())
    near = Nearest(space, feasible, seed=0)
    assert near({"A": 8, "B": 8}, lambda c: False).as_dict() in ({"A": 8, "B": 1}, {"A": 1, "B": 8},
                                                                 {"A": 4, "B": 2}, {"A": 2, "B": 4})  # fmt: skip
    assert near({"A": 4, "B": 4}, lambda c: False).as_dict() in ({"A": 4, "B": 2}, {"A": 2, "B": 4})
    taken = {"A=4,B=2", "A=2,B=4"}
    assert near({"A": 4, "B": 4}, lambda c: c.key in taken).key not in taken
    assert near({"A": 4, "B": 4}, lambda c: True) is None


def test_nearest_counts_a_missing_conditional_parameter_as_far():
    from autotune.core.space import Nearest

    space = Space(
        (
            Param("T", ("x", "y")),
            Param("A", (1, 2, 4), Expression("T == 'x'")),
            Param("B", (1, 2), Expression("T == 'y'")),
        )
    )
    feasible = list(space.enumerate())
    near = Nearest(space, feasible)
    # a proposal with T=x and A=4 that is taken: the nearest is another T=x configuration, not a T=y one
    got = near({"T": "x", "A": 4}, lambda c: c.key == "A=4,T=x")
    assert got.as_dict() == {"T": "x", "A": 2}


# --- first_feasible: the same answer as enumerate(), found without walking it ---------------------------------


def _random_space(rng):
    """A small space with conditions and random constraints over random subsets of its parameters."""
    n = rng.randrange(1, 6)
    params = []
    for i in range(n):
        name = "ABCDEF"[i]
        values = rng.sample(range(6), rng.randrange(1, 5))
        when = None
        if i and rng.random() < 0.3:  # mostly an earlier parameter; a later one makes the condition false
            read = "ABCDEF"[rng.randrange(i) if rng.random() < 0.8 else rng.randrange(i, n)]
            when = f"{read} {rng.choice(['<', '>', '!='])} {rng.randrange(6)}"
        params.append(P(name, values, when))
    constraints = []
    for _ in range(rng.randrange(0, 5)):
        a, b = rng.choice(params).name, rng.choice(params).name
        constraints.append(f"{a} {rng.choice(['<', '>=', '!=', '=='])} {b} + {rng.randrange(-2, 3)}")
    if rng.random() < 0.1:
        constraints.append(rng.choice(["1 > 2", "2 > 1"]))
    return S(params, constraints)


@pytest.mark.parametrize("seed", range(300))
def test_first_feasible_agrees_with_enumerate(seed):
    import random

    rng = random.Random(seed)
    space = _random_space(rng)
    feasible = list(space.enumerate())
    found = space.first_feasible()
    assert (found is None) == (not feasible), space
    if found is not None:
        assert found in feasible
        assert list(found.as_dict()) == [n for n in space.names if n in found.as_dict()]  # declaration order
    # With an extra test on whole configurations: accepted iff enumerate has an accepted one.
    keep = {c.key for c in feasible if rng.random() < 0.2}
    found = space.first_feasible(lambda values: Config.of(values).key in keep)
    assert (found is None) == (not keep)
    assert found is None or found.key in keep


def test_first_feasible_refutes_contradictory_constraints_on_late_params_fast():
    import time

    # 4.6 M combinations; the contradiction is among the last two parameters, which enumerate() binds last.
    params = [P(f"X{i}", range(5)) for i in range(8)] + [P("Y", range(6)), P("Z", range(7)), P("W", [0, 1])]
    space = S(params, ["Y > Z + W", "Z >= Y"])
    assert space.size_upper_bound() > 4_500_000
    start = time.perf_counter()
    assert space.first_feasible() is None
    assert time.perf_counter() - start < 0.5
    assert space.search_order()[0].name in {"Y", "Z", "W"}


def test_first_feasible_respects_conditions_read_in_declaration_order():
    # B exists only when A == 1; the constraint on B applies only where B exists.
    space = S([P("A", [0, 1]), P("B", [5, 6], when="A == 1")], ["B < 5"])
    assert space.first_feasible() == Config.of({"A": 0})
    assert S([P("A", [1]), P("B", [5, 6], when="A == 1")], ["B < 5"]).first_feasible() is None


# --- split: parts that enumerate the space apart, in the same order --------------------------------------------


@pytest.mark.parametrize("seed", range(200))
def test_the_parts_of_a_split_enumerate_the_space_in_order(seed):
    import random

    rng = random.Random(seed)
    space = _random_space(rng)
    whole = list(space.enumerate())
    for parts in (1, 2, 5, 40):
        split = space.split(parts)
        assert [c for start in split for c in space.enumerate(start)] == whole, (space, parts)
        assert len(split) >= min(parts, len(whole)) or split[0][0] == len(space.names)


def test_a_split_goes_only_as_deep_as_it_must():
    space = S([P("A", [1, 2, 3]), P("B", [1, 2]), P("C", [1, 2])], ["A != 2"])
    assert space.split(1) == [(0, {})]
    assert space.split(2) == [(1, {"A": 1}), (1, {"A": 3})]  # A = 2 is cut where it is decided
    assert len(space.split(3)) == 4
