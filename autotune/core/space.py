"""Search spaces: ordered parameters with optional conditions, constraints, and frozen configs.

A :class:`Space` is walked in declaration order. A parameter with a ``when`` condition exists only
if the condition holds for the parameters chosen before it, which is what Optuna's define-by-run
interface needs. Constraints are checked as soon as every name they read is bound, so enumerating
a space prunes whole subtrees early.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .errors import ConstraintError
from .expr import Expression

Value = int | float | str | bool


@dataclass(frozen=True)
class Param:
    """One tunable: its name, its ordered candidate values, and when it exists."""

    name: str
    values: tuple[Value, ...]
    when: Expression | None = None


@dataclass(frozen=True)
class Config:
    """A point of a space: parameter names and values in declaration order. Hashable and stable."""

    params: tuple[tuple[str, Value], ...]

    @classmethod
    def of(cls, values: Mapping[str, Value]) -> Config:
        return cls(tuple(values.items()))

    def as_dict(self) -> dict[str, Value]:
        return dict(self.params)

    @property
    def key(self) -> str:
        """Canonical text used to recognise a configuration already evaluated."""
        return ",".join(f"{k}={_fmt(v)}" for k, v in sorted(self.params))

    def __getitem__(self, name: str) -> Value:
        return dict(self.params)[name]


def _fmt(v: Value) -> str:
    return str(int(v)) if isinstance(v, bool) else str(v)


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    constraints: tuple[Expression, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def violated(self, values: Mapping[str, Value]) -> str | None:
        """The first constraint that ``values`` breaks, as text, or None if all hold."""
        for c in self.constraints:
            if c.names <= values.keys() and not c.evaluate(values):
                return c.text
        return None

    def walk(self, choose: Callable[[Param], Value]) -> dict[str, Value]:
        """Build one configuration, asking ``choose`` for each parameter that exists."""
        values: dict[str, Value] = {}
        for p in self.params:
            if p.when is None or _condition(p.when, values):
                values[p.name] = choose(p)
        return values

    def _checks(self) -> list[list[Expression]]:
        # Each constraint is checked at the first depth where all its names can be bound; one that reads a
        # conditional parameter absent from a configuration does not apply to it.
        order = self.names
        checks: list[list[Expression]] = [[] for _ in order]
        for c in self.constraints:
            checks[max((order.index(n) for n in c.names), default=0)].append(c)
        return checks

    def enumerate(self, start: tuple[int, Mapping[str, Value]] = (0, {})) -> Iterator[Config]:
        """Every configuration that satisfies all constraints, in lexicographic order; from ``start`` (a depth
        and the values of the parameters before it, one of :meth:`split`'s parts): that part's configurations."""
        checks = self._checks()

        def rec(i: int, values: dict[str, Value]) -> Iterator[Config]:
            if i == len(self.params):
                yield Config.of(values)
                return
            p = self.params[i]
            if p.when is not None and not _condition(p.when, values):
                if all(_holds(c, values) for c in checks[i]):
                    yield from rec(i + 1, values)
                return
            for v in p.values:
                values[p.name] = v
                if all(_holds(c, values) for c in checks[i]):
                    yield from rec(i + 1, values)
                del values[p.name]

        yield from rec(start[0], dict(start[1]))

    def split(self, parts: int) -> list[tuple[int, dict[str, Value]]]:
        """The space cut into at least ``parts`` disjoint parts where it allows (fewer for a small space): the
        assignments of its leading parameters that meet the constraints decided so far, in enumeration order, so
        that enumerating the parts one after another gives :meth:`enumerate`'s order."""
        checks = self._checks()
        level: list[dict[str, Value]] = [{}]
        depth = 0
        while len(level) < parts and depth < len(self.params):
            p, nxt = self.params[depth], []
            for values in level:
                if p.when is not None and not _condition(p.when, values):
                    options = [values]
                else:
                    options = [{**values, p.name: v} for v in p.values]
                nxt += [o for o in options if all(_holds(c, o) for c in checks[depth])]
            level, depth = nxt, depth + 1
        return [(depth, values) for values in level]

    def first_feasible(self, accept: Callable[[dict[str, Value]], bool] | None = None) -> Config | None:
        """A configuration that meets every constraint (and ``accept``, when given), or None if there is none.

        Searches the parameters in the order ``search_order`` gives, not declaration order, and drops a partial
        assignment as soon as a constraint whose names are all decided fails: a space of millions of
        combinations whose constraints contradict each other over a few parameters is refuted after a few
        hundred steps. Which configuration is returned may differ from ``next(enumerate())``; whether one
        exists does not. ``accept`` sees each complete configuration, in declaration order.
        """
        order = self.search_order()
        declared = {p.name: i for i, p in enumerate(self.params)}
        absent = object()  # a conditional parameter whose condition is false in this assignment
        ready: list[list[Expression]] = [[] for _ in order]  # constraints decided once order[i] is
        at = {p.name: i for i, p in enumerate(order)}
        for c in self.constraints:
            ready[max((at[n] for n in c.names), default=0)].append(c)
        if not order:
            ok = all(c.evaluate({}) for c in self.constraints) and (accept is None or accept({}))
            return Config.of({}) if ok else None

        def holds(c: Expression, values: dict[str, object]) -> bool:
            return any(values[n] is absent for n in c.names) or bool(c.evaluate(values))

        def rec(i: int, values: dict[str, object]) -> Config | None:
            if i == len(order):
                chosen = {p.name: values[p.name] for p in self.params if values[p.name] is not absent}
                return Config.of(chosen) if accept is None or accept(chosen) else None  # type: ignore[arg-type]
            p = order[i]
            before = {n: v for n, v in values.items() if v is not absent and declared[n] < declared[p.name]}
            options = p.values if p.when is None or _condition(p.when, before) else (absent,)
            for v in options:
                values[p.name] = v
                if all(holds(c, values) for c in ready[i]):
                    found = rec(i + 1, values)
                    if found is not None:
                        return found
            del values[p.name]
            return None

        return rec(0, {})

    def search_order(self) -> tuple[Param, ...]:
        """The parameters in an order that decides constraints early: next comes the parameter that leaves the
        fewest names undecided in some constraint it appears in (ties: in more constraints, with fewer values,
        declared first). A conditional parameter comes after the parameters declared before it that its
        condition reads; parameters no constraint reads come last."""
        declared = {p.name: i for i, p in enumerate(self.params)}
        names = [c.names for c in self.constraints]
        left, order, decided = list(self.params), [], set()

        def placeable(p: Param) -> bool:
            reads = p.when.names if p.when is not None else frozenset()
            return all(n in decided for n in reads if n in declared and declared[n] < declared[p.name])

        def score(p: Param) -> tuple[int, int, int, int]:
            mine = [ns for ns in names if p.name in ns]
            undecided = min((len(ns - decided) for ns in mine), default=len(self.params) + 1)
            return undecided, -len(mine), len(p.values), declared[p.name]

        while left:  # the earliest declared parameter left is always placeable
            best = min((p for p in left if placeable(p)), key=score)
            order.append(best)
            decided.add(best.name)
            left.remove(best)
        return tuple(order)

    def size_before_constraints(self, walk_limit: int = 100_000) -> int:
        """Configurations the ``when`` conditions allow, constraints not applied: exact. The parameters some
        condition reads are walked value by value (while they span at most ``walk_limit`` combinations; past
        that the plain product is returned), every other existing parameter multiplies."""
        deciding = {n for p in self.params if p.when is not None for n in p.when.names}
        walked = 1
        for p in self.params:
            walked *= len(p.values) if p.name in deciding else 1
        if walked > walk_limit:
            return self.size_upper_bound()

        def rec(i: int, values: dict[str, Value]) -> int:
            if i == len(self.params):
                return 1
            p = self.params[i]
            if p.when is not None and not _condition(p.when, values):
                return rec(i + 1, values)
            if p.name not in deciding:
                return len(p.values) * rec(i + 1, values)
            total = 0
            for v in p.values:
                values[p.name] = v
                total += rec(i + 1, values)
                del values[p.name]
            return total

        return rec(0, {})

    def size_upper_bound(self) -> int:
        n = 1
        for p in self.params:
            n *= len(p.values)
        return n


class Nearest:
    """Finds the configuration of a list closest to a given one: a model-based sampler's proposal that breaks
    a constraint is repaired to its nearest feasible neighbour instead of being asked for again.

    Distance: for each parameter, the difference of value positions over the number of values (0..1), and 1
    where only one of the two configurations has the parameter. Ties break in a seeded random order.
    """

    def __init__(self, space: Space, configs: Sequence[Config], seed: int = 0) -> None:
        import numpy as np

        self._space, self._configs = space, list(configs)
        self._position = [{v: i for i, v in enumerate(p.values)} for p in space.params]
        self._index = np.array([self._vector(c.as_dict()) for c in self._configs], dtype=np.float64).reshape(
            len(self._configs), len(space.params)
        )
        self._jitter = np.random.default_rng(seed).random(len(self._configs)) * 1e-6

    def _vector(self, values: Mapping[str, Value]) -> list[float]:
        out = []
        for p, pos in zip(self._space.params, self._position, strict=True):
            v = values.get(p.name)
            out.append(pos[v] / max(1, len(p.values) - 1) if p.name in values and v in pos else -1.0)
        return out

    def __call__(self, values: Mapping[str, Value], skip: Callable[[Config], bool]) -> Config | None:
        """The nearest configuration for which ``skip`` is false, or None if every one is skipped."""
        import numpy as np

        if not self._configs:
            return None
        x = np.array(self._vector(values))
        present = (self._index >= 0) & (x >= 0)
        distance = np.where(present, np.abs(self._index - x), (self._index >= 0) != (x >= 0)).sum(axis=1)
        for i in np.argsort(distance + self._jitter, kind="stable"):
            if not skip(self._configs[i]):
                return self._configs[i]
        return None


def _condition(expr: Expression, values: Mapping[str, Value]) -> bool:
    # A condition over a parameter that does not exist (itself conditional) is false.
    if not expr.names <= values.keys():
        return False
    return bool(expr.evaluate(values))


def _holds(c: Expression, values: Mapping[str, Value]) -> bool:
    return not c.names <= values.keys() or bool(c.evaluate(values))


def check_names(space: Space, where: Callable[[Expression], str]) -> None:
    """Raise if a constraint or condition reads a name that is not a parameter."""
    known = set(space.names)
    exprs: Sequence[Expression] = [*space.constraints, *(p.when for p in space.params if p.when is not None)]
    for e in exprs:
        unknown = sorted(e.names - known)
        if unknown:
            raise ConstraintError(f"{where(e)}: {e.text!r} names {', '.join(unknown)}, which is not a parameter")


def first_n(it: Iterator[Config], n: int | None) -> list[Config]:
    return list(itertools.islice(it, n)) if n is not None else list(it)
