"""The parameter space of a spec: its ``params``, ``constraints`` and ``start_from`` keys, validated against the
template's declaration (``TemplateInfo``) and checks. Each problem is a ``SpecError`` from the ``fail`` callback
``spec.parse_spec`` passes in, naming the key at fault."""

from __future__ import annotations

from typing import Any

from ..core.errors import ConstraintError, brief
from ..core.expr import EvaluationError, Expression
from ..core.space import Config, Param, Space, Value

MAX_RANGE_VALUES = 4096
MAX_SPACE = 5_000_000  # combinations before constraints; the search enumerates the feasible set once per shape


def kind_of(v: Any) -> str:
    """A value as error messages show it: its type and a brief repr ("nothing" for None)."""
    return "nothing" if v is None else f"{type(v).__name__} {brief(v)}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool))


def _parse_param(name: str, v: Any, fail: Any) -> Param:
    key = f"params.{name}"
    when = None
    if isinstance(v, list):
        values = v
    elif isinstance(v, dict):
        extra = set(v) - {"values", "range", "step", "pow2", "when"}
        if extra:
            first = sorted(str(k)[:40] for k in extra)[0]
            raise fail(f"{key}.{first}", "unknown key; expected values, range (with step), pow2 or when")
        forms = [f for f in ("values", "range", "pow2") if f in v]
        if len(forms) != 1:
            raise fail(key, "expected exactly one of 'values', 'range' or 'pow2'")
        form = forms[0]
        if form == "values":
            values = v["values"]
            if not isinstance(values, list):
                raise fail(f"{key}.values", f"expected a list, got {kind_of(values)}")
        else:
            bounds = v[form]
            if not (
                isinstance(bounds, list)
                and len(bounds) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
            ):
                raise fail(f"{key}.{form}", f"expected [low, high] integers, got {kind_of(bounds)}")
            lo, hi = bounds
            if lo > hi:
                raise fail(f"{key}.{form}", f"low {lo} is above high {hi}")
            if form == "range":
                step = v.get("step", 1)
                if not isinstance(step, int) or isinstance(step, bool) or step < 1:
                    raise fail(f"{key}.step", f"expected a positive integer, got {kind_of(step)}")
                if (hi - lo) // step + 1 > MAX_RANGE_VALUES:
                    raise fail(f"{key}.range", f"spans more than {MAX_RANGE_VALUES} values; raise step")
                values = list(range(lo, hi + 1, step))
            else:
                if lo < 0 or hi > 62:
                    raise fail(f"{key}.pow2", "expected exponents between 0 and 62")
                values = [2**e for e in range(lo, hi + 1)]
        if "when" in v:
            if not isinstance(v["when"], str):
                raise fail(f"{key}.when", f"expected an expression string, got {kind_of(v['when'])}")
            try:
                when = Expression(v["when"])
            except ConstraintError as exc:
                raise fail(f"{key}.when", str(exc)) from None
    else:
        raise fail(key, f"expected a list of values or a mapping with 'values', 'range' or 'pow2', got {kind_of(v)}")
    if not values:
        raise fail(key, "has no values")
    for x in values:
        if not _is_scalar(x):
            raise fail(key, f"values must be numbers, strings or booleans, got {kind_of(x)}")
    if len({(type(x), x) for x in values}) != len(values):
        raise fail(key, "lists a value twice")
    return Param(name, tuple(values), when)


def _checkkind_of(p: Param, kind: str, fail: Any) -> None:
    for v in p.values:
        if kind == "bool":
            ok, expected = isinstance(v, bool), "true or false"
        elif kind == "str":
            ok, expected = isinstance(v, str), "strings"
        elif kind.startswith("choice:"):
            names = kind.removeprefix("choice:").split(",")
            ok, expected = v in names, f"one of {', '.join(names)}"
        else:
            low = 0 if kind == "int>=0" else 1
            ok, expected = _is_int(v) and v >= low, f"integers >= {low}"
        if not ok:
            raise fail(f"params.{p.name}", f"expected {expected}, got {brief(v)}")


def parse_space(raw: dict, info: Any, fail: Any) -> Space:
    expected, optional = info.params, info.optional
    params_raw = raw.get("params")
    if not isinstance(params_raw, dict) or not params_raw:
        raise fail("params", f"expected a mapping of parameter names to values, got {kind_of(params_raw)}")
    unknown = sorted(str(k)[:40] for k in params_raw if k not in expected)
    if unknown:
        raise fail(f"params.{unknown[0]}", f"unknown parameter for this template; it takes {', '.join(expected)}")
    missing = [n for n in expected if n not in params_raw and n not in optional]
    if missing:
        raise fail("params", f"missing {', '.join(missing)}; the template needs every one of {', '.join(expected)}")
    params = tuple(_parse_param(str(n), v, fail) for n, v in params_raw.items())
    for i, p in enumerate(params):
        if p.when is not None and p.name not in optional:
            raise fail(f"params.{p.name}.when", "this template needs the parameter in every configuration")
        later = sorted(p.when.names & {q.name for q in params[i:]}) if p.when is not None else []
        if later:
            raise fail(f"params.{p.name}.when", f"reads {later[0]}, which must be declared before {p.name}")
        _checkkind_of(p, info.kind(p.name), fail)
    size = Space(params).size_before_constraints()
    if size > MAX_SPACE:
        raise fail("params", f"spans {size:,} combinations, more than {MAX_SPACE:,}; narrow the value lists")

    cons_raw = raw.get("constraints", [])
    if not isinstance(cons_raw, list) or not all(isinstance(c, str) for c in cons_raw):
        raise fail("constraints", f"expected a list of expression strings, got {kind_of(cons_raw)}")
    constraints = []
    for i, text in enumerate(cons_raw):
        try:
            constraints.append(Expression(text))
        except ConstraintError as exc:
            raise fail(f"constraints[{i}]", str(exc)) from None
    space = Space(params, tuple(constraints))
    for i, c in enumerate(constraints):
        unknown = sorted(c.names - set(space.names))
        if unknown:
            names = brief(", ".join(unknown), 100)[1:-1]
            raise fail(f"constraints[{i}]", f"{c.text!r} names {names}, which is not a parameter")
    for p in params:
        unknown = sorted(p.when.names - set(space.names)) if p.when is not None else []
        if unknown:
            names = brief(", ".join(unknown), 100)[1:-1]
            raise fail(f"params.{p.name}.when", f"{p.when.text!r} names {names}, which is not a parameter")
    return space


def _expression_key(space: Space, text: str) -> str:
    """The spec key of the constraint or condition whose text is ``text``."""
    for i, c in enumerate(space.constraints):
        if c.text == text:
            return f"constraints[{i}]"
    for p in space.params:
        if p.when is not None and p.when.text == text:
            return f"params.{p.name}.when"
    return "constraints"


def check_feasible(space: Space, check: Any, fail: Any) -> None:
    """Raise unless some configuration meets the constraints and the template's ``check`` (a reason or None).
    Blames the key at fault: a constraint no values can meet alone, the constraints together, or the template."""
    rejected: list[tuple[dict[str, Value], str]] = []

    def accept(values: dict[str, Value]) -> bool:
        reason = check(values)
        if reason is not None and not rejected:
            rejected.append((values, reason))
        return reason is None

    try:
        if space.first_feasible(accept) is not None:
            return
    except EvaluationError as exc:
        raise fail(_expression_key(space, exc.text), str(exc)) from None
    except (TypeError, ValueError, ZeroDivisionError, KeyError) as exc:  # values the template cannot take
        raise fail("params", f"a combination of values breaks the template's checks ({brief(str(exc), 200)})") from None
    if rejected:
        values, reason = rejected[0]
        shown = brief(",".join(f"{k}={v}" for k, v in values.items()), 200)[1:-1]
        raise fail("constraints", "no configuration of params satisfies the constraints and the template's own checks"
                                  f" (the first that meets the constraints, {shown}, fails: {reason})")  # fmt: skip
    for i, c in enumerate(space.constraints):
        if Space(space.params, (c,)).first_feasible() is None:
            names = ", ".join(sorted(c.names)) or "no parameter"
            raise fail(f"constraints[{i}]", f"{c.text!r} holds for no values of {names}")
    raise fail("constraints", "no configuration of params satisfies the constraints together (each alone can hold)")


def parse_start(v: Any, space: Space, fail: Any) -> tuple[Config, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise fail("start_from", f"expected a list of parameter mappings, got {kind_of(v)}")
    configs = []
    for i, entry in enumerate(v):
        key = f"start_from[{i}]"
        if not isinstance(entry, dict):
            raise fail(key, f"expected a mapping of parameter values, got {kind_of(entry)}")
        chosen: dict[str, Value] = {}

        def choose(p: Param, entry: dict = entry, key: str = key) -> Value:
            if p.name not in entry:
                raise fail(key, f"misses {p.name}")
            if not any(type(x) is type(entry[p.name]) and x == entry[p.name] for x in p.values):
                shown, allowed = brief(entry[p.name]), brief(list(p.values), 200)
                raise fail(f"{key}.{p.name}", f"{shown} is not among the values {allowed}")
            return entry[p.name]

        try:
            chosen = space.walk(choose)
            broken = space.violated(chosen)
        except EvaluationError as exc:  # the expression is at fault, for these values
            raise fail(_expression_key(space, exc.text), f"{exc} (the values of {key})") from None
        extra = sorted(str(k)[:40] for k in entry if k not in chosen)
        if extra:
            raise fail(f"{key}.{extra[0]}", "is not a parameter of this configuration")
        if broken:
            raise fail(key, f"breaks the constraint {broken!r}")
        configs.append(Config.of(chosen))
    return tuple(configs)
