"""Tuning specs: YAML in, a frozen and validated :class:`Spec` out.

Every problem is reported as a :class:`SpecError` that names the file, the key and what was
expected, e.g. ``configs/gemm.yaml: params.BM: expected a list of values or a mapping with
'values', 'range' or 'pow2', got 128``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import ConstraintError, SpecError, brief
from .expr import EvaluationError, Expression
from .kernels import FAMILIES
from .safe_yaml import YamlRefused, load_yaml
from .space import Config, Param, Space, Value

SAMPLERS = ("tpe", "random", "gp", "cmaes", "brute", "nsga2")
OBJECTIVES = ("time", "energy")
MULTI_OBJECTIVE_SAMPLERS = ("nsga2", "tpe", "random", "brute")  # samplers that take [time, energy]
TOP_KEYS = {
    "kernel", "template", "dtype", "layout", "shapes", "params", "constraints", "objective",
    "budget", "sampler", "seed", "verify", "start_from",
}  # fmt: skip
MAX_RANGE_VALUES = 4096
MAX_SPACE = 5_000_000  # combinations before constraints; the search enumerates the feasible set once per shape


@dataclass(frozen=True)
class Budget:
    """Per shape: stop after ``trials`` evaluated candidates or ``minutes`` of wall time, whichever first."""

    trials: int | None
    minutes: float | None


@dataclass(frozen=True)
class Spec:
    path: str
    kernel: str
    template: str
    dtype: str
    problems: tuple[Any, ...]
    space: Space
    objective: str | tuple[str, ...]  # "time", "energy" or ("time", "energy")
    budget: Budget
    sampler: str
    seed: int
    tolerance: float | None
    start_from: tuple[Config, ...]
    dtypes: tuple[str, ...] = ()  # every dtype of the problems (``dtype`` is the first)
    layouts: tuple[str, ...] = ("NN",)

    @property
    def name(self) -> str:
        return Path(self.path).stem

    @property
    def objectives(self) -> tuple[str, ...]:
        """The objective as a tuple: ("time",), ("energy",) or ("time", "energy"), each minimized."""
        return (self.objective,) if isinstance(self.objective, str) else self.objective

    @property
    def measures_energy(self) -> bool:
        return "energy" in self.objectives


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file."""
    p = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise SpecError(p, "", "file not found") from None
    except UnicodeDecodeError:
        raise SpecError(p, "", "is not UTF-8 text") from None
    except OSError as exc:
        raise SpecError(p, "", f"cannot be read ({exc.strerror})") from None
    try:
        raw = load_yaml(text)
    except YamlRefused as exc:
        raise SpecError(p, exc.key, exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(p, where, f"is not valid YAML: {problem}") from None
    return parse_spec(raw, p)


def parse_spec(raw: Any, path: str = "<spec>") -> Spec:
    def fail(key: str, problem: str) -> SpecError:
        return SpecError(path, key, problem)

    if not isinstance(raw, dict):
        raise fail("", f"expected a mapping of keys at the top level, got {_kind(raw)}")
    unknown = sorted(str(k)[:40] for k in raw if k not in TOP_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key; expected one of {', '.join(sorted(TOP_KEYS))}")

    kernel = _required(raw, "kernel", str, fail)
    if kernel not in FAMILIES:
        raise fail("kernel", f"unknown kernel family {brief(kernel)}; expected one of {', '.join(sorted(FAMILIES))}")
    family = FAMILIES[kernel]
    template = _required(raw, "template", str, fail)
    if template not in family.templates:
        known = ", ".join(family.templates)
        raise fail("template", f"unknown {kernel} template {brief(template)}; expected one of {known}")
    info = family.templates[template]
    if "dtype" not in raw:
        raise fail("dtype", "is required")
    dtypes = _names(raw, "dtype", info.dtypes, lambda x: f"template {template!r} does not implement {brief(x)}", fail)
    all_layouts = getattr(family, "layouts", ("NN",))
    # Without a layout key, the family's first layout (GEMM: NN, conv2d: NCHW).
    layouts = (
        _names(raw, "layout", all_layouts, lambda x: f"unknown layout {brief(x)}", fail) if "layout" in raw else []
    )
    layouts = layouts or [all_layouts[0]]
    for lay in layouts:
        if info.layouts and lay not in info.layouts:
            raise fail("layout", f"template {template!r} computes {', '.join(info.layouts)}; not {lay!r}")

    shapes = raw.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise fail("shapes", f"expected a non-empty list of shapes, each {family.shape_help}")
    problems = []
    for i, s in enumerate(shapes):
        for dtype in dtypes:
            for layout in layouts:
                try:
                    problems.append(family.problem(s, dtype, layout))
                except ValueError as exc:
                    raise fail(f"shapes[{i}]", str(exc)) from None
    if len(set(problems)) != len(problems):
        raise fail("shapes", "lists the same shape twice")

    space = _parse_space(raw, info, fail)

    objective = _parse_objective(raw.get("objective", "time"), fail)
    budget = _parse_budget(raw.get("budget"), fail)
    sampler = raw.get("sampler", "nsga2" if isinstance(objective, tuple) else "tpe")
    if sampler not in SAMPLERS:
        raise fail("sampler", f"expected one of {', '.join(SAMPLERS)}, got {brief(sampler)}")
    problem = sampler_problem(objective, sampler)
    if problem:
        raise fail("sampler", problem)
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise fail("seed", f"expected an integer from 0 to 2**32 - 1, got {brief(seed)}")
    tolerance = _parse_verify(raw.get("verify"), fail)
    # The space first: a start_from entry can only be judged against a space known to be sound.
    _check_feasible(space, lambda values: family.check(template, values), fail)
    start_from = _parse_start(raw.get("start_from"), space, fail)
    return Spec(path, kernel, template, dtypes[0], tuple(problems), space, objective, budget, sampler, seed,
                tolerance, start_from, tuple(dtypes), tuple(layouts))  # fmt: skip


def _names(raw: dict, key: str, allowed: tuple[str, ...], wrong: Any, fail: Any) -> list[str]:
    """A name or a non-empty list of distinct names, each one of ``allowed``."""
    v = raw[key]
    values = v if isinstance(v, list) else [v]
    if not values or not all(isinstance(x, str) for x in values):
        raise fail(key, f"expected a name or a list of names, got {_kind(v)}")
    if len(set(values)) != len(values):
        raise fail(key, "lists a name twice")
    for x in values:
        if x not in allowed:
            raise fail(key, f"{wrong(x)}; expected one of {', '.join(allowed)}")
    return values


def _parse_objective(v: Any, fail: Any) -> str | tuple[str, ...]:
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if isinstance(v, str) and v in OBJECTIVES:
        return v
    if isinstance(v, list) and sorted(map(str, v)) == ["energy", "time"]:
        return ("time", "energy")  # always in this order: a study's values are [ms, J per launch]
    raise fail("objective", f"expected time, energy or [time, energy], got {brief(v)}")


def sampler_problem(objective: str | tuple[str, ...], sampler: str) -> str | None:
    """Why ``sampler`` cannot search ``objective`` (None if it can)."""
    if isinstance(objective, tuple) and sampler not in MULTI_OBJECTIVE_SAMPLERS:
        allowed = ", ".join(MULTI_OBJECTIVE_SAMPLERS)
        return f"{sampler!r} cannot search two objectives; with objective [time, energy] use one of {allowed}"
    return None


def _kind(v: Any) -> str:
    return "nothing" if v is None else f"{type(v).__name__} {brief(v)}"


def _required(raw: dict, key: str, typ: type, fail: Any) -> Any:
    if key not in raw:
        raise fail(key, "is required")
    v = raw[key]
    if not isinstance(v, typ):
        raise fail(key, f"expected a {typ.__name__}, got {_kind(v)}")
    return v


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
                raise fail(f"{key}.values", f"expected a list, got {_kind(values)}")
        else:
            bounds = v[form]
            if not (
                isinstance(bounds, list)
                and len(bounds) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
            ):
                raise fail(f"{key}.{form}", f"expected [low, high] integers, got {_kind(bounds)}")
            lo, hi = bounds
            if lo > hi:
                raise fail(f"{key}.{form}", f"low {lo} is above high {hi}")
            if form == "range":
                step = v.get("step", 1)
                if not isinstance(step, int) or isinstance(step, bool) or step < 1:
                    raise fail(f"{key}.step", f"expected a positive integer, got {_kind(step)}")
                if (hi - lo) // step + 1 > MAX_RANGE_VALUES:
                    raise fail(f"{key}.range", f"spans more than {MAX_RANGE_VALUES} values; raise step")
                values = list(range(lo, hi + 1, step))
            else:
                if lo < 0 or hi > 62:
                    raise fail(f"{key}.pow2", "expected exponents between 0 and 62")
                values = [2**e for e in range(lo, hi + 1)]
        if "when" in v:
            if not isinstance(v["when"], str):
                raise fail(f"{key}.when", f"expected an expression string, got {_kind(v['when'])}")
            try:
                when = Expression(v["when"])
            except ConstraintError as exc:
                raise fail(f"{key}.when", str(exc)) from None
    else:
        raise fail(key, f"expected a list of values or a mapping with 'values', 'range' or 'pow2', got {_kind(v)}")
    if not values:
        raise fail(key, "has no values")
    for x in values:
        if not _is_scalar(x):
            raise fail(key, f"values must be numbers, strings or booleans, got {_kind(x)}")
    if len({(type(x), x) for x in values}) != len(values):
        raise fail(key, "lists a value twice")
    return Param(name, tuple(values), when)


def _check_kind(p: Param, kind: str, fail: Any) -> None:
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


def _parse_space(raw: dict, info: Any, fail: Any) -> Space:
    expected, optional = info.params, info.optional
    params_raw = raw.get("params")
    if not isinstance(params_raw, dict) or not params_raw:
        raise fail("params", f"expected a mapping of parameter names to values, got {_kind(params_raw)}")
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
        _check_kind(p, info.kind(p.name), fail)
    size = Space(params).size_before_constraints()
    if size > MAX_SPACE:
        raise fail("params", f"spans {size:,} combinations, more than {MAX_SPACE:,}; narrow the value lists")

    cons_raw = raw.get("constraints", [])
    if not isinstance(cons_raw, list) or not all(isinstance(c, str) for c in cons_raw):
        raise fail("constraints", f"expected a list of expression strings, got {_kind(cons_raw)}")
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


def _check_feasible(space: Space, check: Any, fail: Any) -> None:
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


def _parse_budget(v: Any, fail: Any) -> Budget:
    if v is None:
        return Budget(trials=50, minutes=None)
    if not isinstance(v, dict):
        raise fail("budget", f"expected a mapping with 'trials' and/or 'minutes', got {_kind(v)}")
    extra = sorted(str(k)[:40] for k in v if k not in ("trials", "minutes"))
    if extra:
        raise fail(f"budget.{extra[0]}", "unknown key; expected trials or minutes")
    trials, minutes = v.get("trials"), v.get("minutes")
    if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool) or trials < 1):
        raise fail("budget.trials", f"expected a positive integer, got {_kind(trials)}")
    if minutes is not None and (
        not isinstance(minutes, (int, float)) or isinstance(minutes, bool) or not 0 < minutes < float("inf")
    ):
        raise fail("budget.minutes", f"expected a positive number, got {_kind(minutes)}")
    if trials is None and minutes is None:
        raise fail("budget", "needs 'trials' or 'minutes' (or both)")
    return Budget(trials, float(minutes) if minutes is not None else None)


def _parse_verify(v: Any, fail: Any) -> float | None:
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) - {"tolerance"}:
        raise fail("verify", "expected a mapping with the key 'tolerance'")
    tol = v.get("tolerance")
    if isinstance(tol, str):
        try:
            tol = float(tol)
        except ValueError:
            raise fail("verify.tolerance", f"expected a positive number, got {brief(tol)}") from None
    if tol is not None and (not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0 < tol < 1):
        raise fail("verify.tolerance", f"expected a number between 0 and 1, got {_kind(tol)}")
    return float(tol) if tol is not None else None


def _parse_start(v: Any, space: Space, fail: Any) -> tuple[Config, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise fail("start_from", f"expected a list of parameter mappings, got {_kind(v)}")
    configs = []
    for i, entry in enumerate(v):
        key = f"start_from[{i}]"
        if not isinstance(entry, dict):
            raise fail(key, f"expected a mapping of parameter values, got {_kind(entry)}")
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
