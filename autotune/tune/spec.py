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

from ..core.errors import SpecError, brief
from ..core.safe_yaml import YamlRefused, load_yaml
from ..core.space import Config, Space
from ..kernels import FAMILIES
from .samplers import default_sampler
from .spec_params import check_feasible, kind_of, parse_space, parse_start

SAMPLERS = ("tpe", "random", "gp", "cmaes", "brute", "nsga2", "ga")
OBJECTIVES = ("time", "energy")
MULTI_OBJECTIVE_SAMPLERS = ("nsga2", "tpe", "random", "brute")  # samplers that take [time, energy]
TOP_KEYS = {
    "kernel", "template", "dtype", "layout", "shapes", "params", "constraints", "objective",
    "budget", "sampler", "seed", "verify", "start_from",
}  # fmt: skip


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
        raise fail("", f"expected a mapping of keys at the top level, got {kind_of(raw)}")
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
    dtypes, layouts, problems = _parse_problems(raw, family, template, fail)
    space = parse_space(raw, info, fail)

    objective = _parse_objective(raw.get("objective", "time"), fail)
    budget = _parse_budget(raw.get("budget"), fail)
    sampler = raw.get("sampler", default_sampler(kernel, objective))
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
    check_feasible(space, lambda values: family.check(template, values), fail)
    start_from = parse_start(raw.get("start_from"), space, fail)
    return Spec(path, kernel, template, dtypes[0], tuple(problems), space, objective, budget, sampler, seed,
                tolerance, start_from, tuple(dtypes), tuple(layouts))  # fmt: skip


def _parse_problems(raw: dict, family: Any, template: str, fail: Any) -> tuple[list[str], list[str], list[Any]]:
    """The ``dtype``, ``layout`` and ``shapes`` keys: the dtypes and layouts, and a problem for each combination
    with a shape."""
    info = family.templates[template]
    if "dtype" not in raw:
        raise fail("dtype", "is required")
    dtypes = _names(raw, "dtype", info.dtypes, lambda x: f"template {template!r} does not implement {brief(x)}", fail)
    all_layouts = family.layouts
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

    return dtypes, layouts, problems


def _names(raw: dict, key: str, allowed: tuple[str, ...], wrong: Any, fail: Any) -> list[str]:
    """A name or a non-empty list of distinct names, each one of ``allowed``."""
    v = raw[key]
    values = v if isinstance(v, list) else [v]
    if not values or not all(isinstance(x, str) for x in values):
        raise fail(key, f"expected a name or a list of names, got {kind_of(v)}")
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


def _required(raw: dict, key: str, typ: type, fail: Any) -> Any:
    if key not in raw:
        raise fail(key, "is required")
    v = raw[key]
    if not isinstance(v, typ):
        raise fail(key, f"expected a {typ.__name__}, got {kind_of(v)}")
    return v


def _parse_budget(v: Any, fail: Any) -> Budget:
    if v is None:
        return Budget(trials=50, minutes=None)
    if not isinstance(v, dict):
        raise fail("budget", f"expected a mapping with 'trials' and/or 'minutes', got {kind_of(v)}")
    extra = sorted(str(k)[:40] for k in v if k not in ("trials", "minutes"))
    if extra:
        raise fail(f"budget.{extra[0]}", "unknown key; expected trials or minutes")
    trials, minutes = v.get("trials"), v.get("minutes")
    if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool) or trials < 1):
        raise fail("budget.trials", f"expected a positive integer, got {kind_of(trials)}")
    if minutes is not None and (
        not isinstance(minutes, (int, float)) or isinstance(minutes, bool) or not 0 < minutes < float("inf")
    ):
        raise fail("budget.minutes", f"expected a positive number, got {kind_of(minutes)}")
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
        raise fail("verify.tolerance", f"expected a number between 0 and 1, got {kind_of(tol)}")
    return float(tol) if tol is not None else None
