"""Compile sweeps in the CPU tier: every configuration a test lists compiles, but not in every combination of
dtype, layout and variant. Each configuration takes the next combination in turn (a covering design: every
configuration once, every combination once while there are as many configurations), so CI stays fast.

``AUTOTUNE_FULL_SWEEP=1`` compiles every configuration in every combination; the GPU host's tier runs it
(README, "Test")."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

FULL_SWEEP_ENV = "AUTOTUNE_FULL_SWEEP"


def full_sweep() -> bool:
    return os.environ.get(FULL_SWEEP_ENV, "") not in ("", "0")


def covering(labels: Iterable, combos: Sequence[tuple], eligible: Callable[..., bool] | None = None,
             full: bool | None = None, times: int = 1) -> list[tuple]:  # fmt: skip
    """``(label, *combo)`` for pytest's parametrize. With ``full`` (default: ``AUTOTUNE_FULL_SWEEP``) every label in
    every eligible combination. Otherwise each label in ``times`` combinations: the first eligible ones from the
    one after the previous label's first (round robin; with ``times`` > 1 the windows overlap).
    ``eligible(label, combo)`` says which combinations a label may take; a label none may take raises."""
    full = full_sweep() if full is None else full
    ok = eligible or (lambda label, combo: True)
    out, turn = [], 0
    for label in labels:
        mine = [i for i in range(len(combos)) if ok(label, combos[i])]
        if not mine:
            raise ValueError(f"no combination takes {label!r}")
        if not full:
            mine = sorted(mine, key=lambda i: (i - turn) % len(combos))[:times]
            turn = (mine[0] + 1) % len(combos)  # the next label starts one on: overlapping windows
        out += [(label, *combos[i]) for i in mine]
    return out


def product(*axes: Sequence) -> list[tuple]:
    """Every combination of the axes' values, each next one chosen to bring the values, then the pairs of values,
    used least so far: the first few combinations hold every value of every axis, then every pair (a covering
    design), so a sweep that runs only the first few still meets them."""
    remaining = list(itertools.product(*axes))
    uses: list[Counter] = [Counter() for _ in axes]
    pairs: Counter = Counter()

    def cost(c: tuple) -> tuple[int, int, int]:
        seen = sum(pairs[(i, c[i], j, c[j])] > 0 for i, j in itertools.combinations(range(len(c)), 2))
        return max(u[v] for u, v in zip(uses, c, strict=True)), seen, sum(u[v] for u, v in zip(uses, c, strict=True))

    order = []
    while remaining:
        combo = min(remaining, key=cost)
        remaining.remove(combo)
        order.append(combo)
        for u, v in zip(uses, combo, strict=True):
            u[v] += 1
        for i, j in itertools.combinations(range(len(combo)), 2):
            pairs[(i, combo[i], j, combo[j])] += 1
    return order


def share(labels: Iterable, combos: Sequence[tuple], combo: tuple, eligible: Callable[..., bool] | None = None) -> list:
    """The labels ``covering`` gives ``combo``, for a sweep parametrized by combination; never empty (a test
    that compiles nothing could not fail)."""
    mine = [label for label, *c in covering(labels, combos, eligible) if tuple(c) == tuple(combo)]
    assert mine, f"the covering design gives {combo} nothing to compile: list more configurations"
    return mine


def value_cover(configs: Sequence, full: bool | None = None) -> list:
    """A subset of ``configs`` (mappings or Configs, e.g. a spec's start points) in which every (parameter, value)
    that any of them has appears at least once, chosen greedily (the one with the most pairs not yet met; ties:
    the earlier), kept in the given order. With ``full`` (default: ``AUTOTUNE_FULL_SWEEP``) all of them."""
    full = full_sweep() if full is None else full
    if full:
        return list(configs)
    pairs = [set((c.as_dict() if hasattr(c, "as_dict") else dict(c)).items()) for c in configs]
    unmet = set().union(*pairs)
    chosen = []
    while unmet:
        best = max(range(len(configs)), key=lambda i: (len(pairs[i] & unmet), -i))
        chosen.append(best)
        unmet -= pairs[best]
    return [configs[i] for i in sorted(chosen)]


def label_cover(good: Mapping[str, Mapping], full: bool | None = None) -> list[str]:
    """The labels of ``good`` (label -> configuration) whose configurations ``value_cover`` keeps: every parameter
    value of the list compiled at least once in the CPU tier; with ``full`` (default: ``AUTOTUNE_FULL_SWEEP``, the GPU
    host's run) every label."""
    return case_cover(list(good), lambda label: good[label], full)


def full_only(cases: Iterable) -> list:
    """``cases`` in the full sweep (``AUTOTUNE_FULL_SWEEP=1``, the GPU host's run), none in the CPU tier: cases whose
    code path the CPU tier's other cases of the same list already run (the same path in another dtype, layout or
    configuration, another seed of a random draw)."""
    return list(cases) if full_sweep() else []


def case_cover(cases: Sequence, facets: Callable[..., Mapping], full: bool | None = None) -> list:
    """The cases (in the given order) whose facets (``facets(case)``: a mapping such as a configuration's parameters,
    the layout, whether the shape is aligned) ``value_cover`` keeps: every facet value of the list met at least once in
    the CPU tier; with ``full`` (default: ``AUTOTUNE_FULL_SWEEP``) every case."""
    configs = [dict(facets(case)) for case in cases]
    kept = {id(c) for c in value_cover(configs, full)}
    return [case for case, c in zip(cases, configs, strict=True) if id(c) in kept]
