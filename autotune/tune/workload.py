"""Workloads: the problems a model runs, and a tuning budget spread over them where the model's time is.

A workload file is what ``autotune.record()`` writes (see :mod:`autotune.serve.recording`)::

    workload: resnet50-fp32-b1
    problems:
      - {kernel: conv2d, dtype: float32, layout: NCHW, calls: 3, time_share: 0.12,
         shape: {N: 1, C: 64, H: 56, W: 56, K: 64, R: 3, S: 3, stride: 1, pad: 1}}
      - {kernel: gemm, dtype: float16, layout: NT, shape: 16x4096x4096, calls: 32, time_share: 0.4}
    spaces:                                   # optional: which spec's search space tunes a kernel and dtype
      gemm/float16: configs/gemm_fp16.yaml

``autotune run workload.yaml --minutes 20`` tunes every problem with its family's space (``spaces:``, else the
family's default spec). The budget is spent in slices by :func:`schedule`, in the spirit of Ansor's task scheduler:
each problem gets one slice first, largest time share first, then each further slice goes to the problem whose
expected saving of model time is largest: its time share times its gap to the best time known for it (the vendor
library, measured beside it), plus an optimistic term that shrinks with the slices it already had.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import SpecError
from ..core.safe_yaml import YamlRefused, load_yaml
from ..kernels import FAMILIES

TOP_KEYS = {"workload", "problems", "spaces", "gpu", "recorded", "versions"}
PROBLEM_KEYS = {"kernel", "dtype", "layout", "shape", "calls", "time_share", "ms_per_call", "label"}
MAX_PROBLEMS = 10_000


@dataclass(frozen=True)
class Task:
    """One problem of a workload: what the model runs, how often, and its share of the model's GPU time."""

    kernel: str
    problem: Any  # the family's frozen problem (GemmProblem, ConvProblem)
    calls: int
    time_share: float
    shape: Any = field(default=None, compare=False)  # the shape as written, for a spec of this problem

    @property
    def name(self) -> str:
        return f"{self.kernel} {self.problem.dtype} {self.problem.layout} {self.problem.label}"


@dataclass(frozen=True)
class Workload:
    path: str
    name: str
    tasks: tuple[Task, ...]
    spaces: Mapping[str, str] = field(default_factory=dict)  # "kernel/dtype" -> spec path

    def groups(self) -> dict[tuple[str, str, str], list[Task]]:
        """Tasks by (kernel, dtype, layout): each group is tuned with one spec's space."""
        out: dict[tuple[str, str, str], list[Task]] = {}
        for t in self.tasks:
            out.setdefault((t.kernel, t.problem.dtype, t.problem.layout), []).append(t)
        return out


def is_workload(raw: Any) -> bool:
    """Whether a parsed YAML document is a workload (it lists ``problems``) rather than a tuning spec."""
    return isinstance(raw, dict) and "problems" in raw and "kernel" not in raw


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload file; every problem is reported as one SpecError naming the key."""
    p = str(path)
    try:
        raw = load_yaml(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(p, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(p, "", f"cannot be read ({type(exc).__name__})") from None
    except YamlRefused as exc:
        raise SpecError(p, exc.key, exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise SpecError(p, where, "is not valid YAML") from None
    return parse_workload(raw, p)


def parse_workload(raw: Any, path: str = "<workload>") -> Workload:
    def fail(key: str, problem: str) -> SpecError:
        return SpecError(path, key, problem)

    if not isinstance(raw, dict):
        raise fail("", "expected a mapping with a 'problems' list at the top level")
    unknown = sorted(set(map(str, raw)) - TOP_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key; expected one of {', '.join(sorted(TOP_KEYS))}")
    items = raw.get("problems")
    if not isinstance(items, list) or not items:
        raise fail("problems", "expected a non-empty list of problems")
    if len(items) > MAX_PROBLEMS:
        raise fail("problems", f"lists {len(items)} problems; at most {MAX_PROBLEMS} are supported")
    tasks = [_parse_task(item, f"problems[{i}]", fail) for i, item in enumerate(items)]
    seen: dict[tuple[str, Any], int] = {}
    for i, t in enumerate(tasks):
        j = seen.setdefault((t.kernel, t.problem), i)
        if j != i:
            raise fail(f"problems[{i}]", f"repeats problems[{j}] ({t.name}); add their calls instead")
    total = sum(t.time_share for t in tasks)
    if total <= 0:
        raise fail("problems", "every time_share is 0; nothing to spend a budget on")
    tasks = [_with_share(t, t.time_share / total) for t in tasks]
    spaces = raw.get("spaces") or {}
    if not isinstance(spaces, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in spaces.items()):
        raise fail("spaces", "expected a mapping of 'kernel/dtype' to a spec file")
    name = raw.get("workload", Path(path).stem)
    return Workload(path, str(name), tuple(tasks), dict(spaces))


def _with_share(t: Task, share: float) -> Task:
    return Task(t.kernel, t.problem, t.calls, share, t.shape)


def _parse_task(item: Any, key: str, fail: Callable[[str, str], SpecError]) -> Task:
    if not isinstance(item, dict):
        raise fail(key, "expected a mapping with kernel, dtype, layout, shape, calls and time_share")
    extra = sorted(set(map(str, item)) - PROBLEM_KEYS)
    if extra:
        raise fail(f"{key}.{extra[0]}", f"unknown key; expected one of {', '.join(sorted(PROBLEM_KEYS))}")
    kernel = item.get("kernel")
    if kernel not in FAMILIES:
        raise fail(f"{key}.kernel", f"expected one of {', '.join(sorted(FAMILIES))}, got {str(kernel)[:40]!r}")
    family = FAMILIES[kernel]
    layout = item.get("layout", getattr(family, "layouts", ("NN",))[0])
    try:
        problem = family.problem(item.get("shape"), str(item.get("dtype")), str(layout))
    except ValueError as exc:
        raise fail(f"{key}.shape", str(exc)[:200]) from None
    calls = item.get("calls", 1)
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
        raise fail(f"{key}.calls", "expected a positive integer")
    share = item.get("time_share", 0.0)
    if not isinstance(share, (int, float)) or isinstance(share, bool) or not (math.isfinite(share) and share >= 0):
        raise fail(f"{key}.time_share", "expected a number of at least 0")
    return Task(kernel, problem, calls, float(share), item.get("shape"))


# --- the scheduler (pure: the tuning step is injected) ----------------------------------------------------------


@dataclass(frozen=True)
class SliceResult:
    """What one slice of tuning left: the best verified time of ours (None: nothing verified), the vendor's, and
    the wall minutes it really took (None: the slice's nominal length), which is what the budget pays."""

    best_ms: float | None
    vendor_ms: float | None
    minutes: float | None = None


@dataclass
class TaskState:
    task: Task
    slices: int = 0
    minutes: float = 0.0
    best_ms: float | None = None
    vendor_ms: float | None = None
    history: list[float | None] = field(default_factory=list)

    @property
    def served_ms(self) -> float | None:
        """What the runtime would serve: the faster of our best and the vendor."""
        known = [t for t in (self.best_ms, self.vendor_ms) if t is not None]
        return min(known) if known else None

    def priority(self, optimism: float) -> float:
        """Expected saving of model time from one more slice, relative to this problem's own time."""
        if self.best_ms is None or self.vendor_ms is None:
            gap = 1.0  # nothing verified yet, or no vendor to compare: as much to win as anything
        else:
            gap = max(0.0, self.best_ms / self.vendor_ms - 1.0)
        recent = _recent_gain(self.history)
        return self.task.time_share * (gap + recent + optimism / (self.slices + 1))


def _recent_gain(history: Sequence[float | None]) -> float:
    """How much the last slice improved the best, as a fraction (the backward gradient of Ansor's scheduler)."""
    known = [h for h in history if h is not None]
    if len(known) < 2 or known[-2] <= 0:
        return 0.0
    return max(0.0, 1.0 - known[-1] / known[-2])


def schedule(
    tasks: Sequence[Task],
    minutes: float,
    tune: Callable[[Task, float], SliceResult],
    slice_minutes: float | None = None,
    optimism: float = 0.5,
    on_slice: Callable[[TaskState, int], None] | None = None,
    into: dict[Task, TaskState] | None = None,
) -> list[TaskState]:
    """Spend ``minutes`` of tuning over ``tasks`` in slices; ``tune(task, minutes)`` runs one (resumable) slice.

    Returns every task's state in the order given (kept in ``into`` when given, updated as each slice ends, so
    the caller keeps them through an interrupted schedule). Tasks that never got a slice keep ``slices == 0``:
    the runtime serves the vendor (or its online choice) for them."""
    if minutes <= 0:
        raise ValueError("minutes must be positive")
    into = into if into is not None else {}
    states = [into.setdefault(t, TaskState(t)) for t in tasks]
    if not states:
        return states
    size = slice_minutes or max(0.25, minutes / (3 * len(states)))
    left = minutes
    order = sorted(states, key=lambda s: -s.task.time_share)
    warm = iter(order)
    step = 0
    while left >= size * 0.5:
        state = next(warm, None) or max(order, key=lambda s: s.priority(optimism))
        nominal = min(size, left)
        result = tune(state.task, nominal)
        spent = max(nominal, result.minutes or 0.0)  # an overrun costs what it took; an early end, the slice
        state.slices += 1
        state.minutes += spent
        state.best_ms = _min(state.best_ms, result.best_ms)
        state.vendor_ms = result.vendor_ms if result.vendor_ms is not None else state.vendor_ms
        state.history.append(state.best_ms)
        left -= spent
        step += 1
        if on_slice:
            on_slice(state, step)
    return states


def _min(a: float | None, b: float | None) -> float | None:
    known = [x for x in (a, b) if x is not None]
    return min(known) if known else None


# --- warm starts and the final table ----------------------------------------------------------------------------


def nearest_entries(task: Task, entries: Mapping[str, Mapping[str, Any]], k: int = 3) -> list[Mapping[str, Any]]:
    """Up to ``k`` verified stored entries of the same kernel, dtype and layout, nearest in log-size first.

    ``entries`` is a tuned file's ``entries`` mapping (key ``dtype/layout/label``)."""
    family = FAMILIES[task.kernel]
    here = _dims(task.problem)
    ranked: list[tuple[float, str]] = []
    for key, e in entries.items():
        parts = key.split("/") if isinstance(key, str) else []
        if len(parts) != 3 or not isinstance(e, Mapping) or e.get("verified") is not True:
            continue
        dtype, layout, label = parts
        if dtype != task.problem.dtype or layout != task.problem.layout:
            continue
        try:
            other = family.problem(label, dtype, layout)
        except ValueError:
            continue
        there = _dims(other)
        if len(there) == len(here):
            ranked.append((sum(abs(math.log1p(a) - math.log1p(b)) for a, b in zip(here, there, strict=True)), key))
    return [entries[key] for _, key in sorted(ranked)[:k]]


def _dims(problem: Any) -> tuple[int, ...]:
    dims = getattr(problem, "dims", None)
    return tuple(dims) if dims is not None else (problem.M, problem.N, problem.K)


def warm_starts(template: str, entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stored winners as start points of a spec whose template is ``template`` ("auto" adds TEMPLATE)."""
    starts = []
    for e in entries:
        params = dict(e.get("params") or {})
        if template == "auto":
            params = {"TEMPLATE": e.get("template"), **params}
        elif e.get("template") != template:
            continue
        if params not in starts:
            starts.append(params)
    return starts


def final_rows(states: Sequence[TaskState]) -> list[dict[str, Any]]:
    """One row per problem, then the model: vendor time, served time and gain, weighted by calls."""
    rows = []
    for s in states:
        served = s.served_ms
        rows.append({
            "problem": s.task.name, "calls": s.task.calls, "share": round(s.task.time_share, 4),
            "minutes": round(s.minutes, 2), "vendor_ms": s.vendor_ms, "ours_ms": s.best_ms, "served_ms": served,
            "gain": (s.vendor_ms / served) if (s.vendor_ms and served) else None,
        })  # fmt: skip
    known = [s for s in states if s.vendor_ms is not None and s.served_ms is not None]
    before = sum(s.task.calls * s.vendor_ms for s in known)  # type: ignore[operator]
    after = sum(s.task.calls * s.served_ms for s in known)  # type: ignore[operator]
    rows.append({
        "problem": f"model ({len(known)} of {len(states)} problems measured)", "calls": None, "share": None,
        "minutes": round(sum(s.minutes for s in states), 2), "vendor_ms": before or None, "ours_ms": None,
        "served_ms": after or None, "gain": (before / after) if after else None,
    })  # fmt: skip
    return rows
