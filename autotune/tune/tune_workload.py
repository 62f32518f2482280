"""``autotune run workload.yaml``: tune what a model runs, spending the budget where the model's time is.

Each problem is tuned with ``template: auto`` over the search space of a spec (the workload's ``spaces:``, else
the first of the family's default specs, ``spec_files``, whose templates compute that problem), warm-started from the
nearest stored winners, in resumable slices chosen by :func:`autotune.tune.workload.schedule`. The end is a table per
problem and for the whole model: the vendor's time, the time served (the faster of ours and the vendor's) and the
gain, weighted by each problem's calls.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import AutotuneError, SpecError
from ..core.safe_yaml import load_yaml
from .workload import SliceResult, Task, TaskState, Workload, final_rows, nearest_entries, schedule, warm_starts


@dataclass(frozen=True)
class Plan:
    """The spec each task is tuned with, and the tasks no installed space can tune (served by the vendor)."""

    specs: dict[Task, Any]
    skipped: dict[Task, str]


def configs_dir() -> Path:
    """configs/ in the working directory, else beside the package (a checkout or editable install)."""
    here = Path("configs")
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "configs"


def candidate_files(workload: Workload, task: Task) -> list[Path]:
    """The workload's space for the task's family and dtype, else the family's default spec files, in order."""
    from ..kernels import FAMILIES

    named = workload.spaces.get(f"{task.kernel}/{task.problem.dtype}")
    if named:
        return [Path(named)]
    return [configs_dir() / n for n in FAMILIES[task.kernel].spec_files(task.problem)]


def plan(workload: Workload, entries: Callable[[str], dict[str, Any]]) -> Plan:
    """Pick a spec for every task; ``entries(kernel)`` gives the stored entries that warm-start it."""
    specs: dict[Task, Any] = {}
    skipped: dict[Task, str] = {}
    for task in workload.tasks:
        reasons = []
        for path in candidate_files(workload, task):
            try:
                specs[task] = task_spec(path, workload, task, entries(task.kernel))
                break
            except SpecError as exc:
                reasons.append(str(exc))
        else:
            skipped[task] = reasons[-1] if reasons else f"no default space for {task.kernel} {task.problem.dtype}"
    return Plan(specs, skipped)


def task_spec(path: Path, workload: Workload, task: Task, stored: dict[str, Any]) -> Any:
    """The spec at ``path`` narrowed to one task: its dtype, layout and shape, timed objective, warm starts."""
    from .spec import parse_spec

    try:
        raw = load_yaml(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(str(path), "", f"cannot be read as a spec ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise SpecError(str(path), "", "is not a spec")
    raw = {k: v for k, v in raw.items() if k not in ("start_from", "budget")}
    raw.update(dtype=task.problem.dtype, layout=task.problem.layout, shapes=[task.shape], objective="time")
    if raw.get("sampler") == "nsga2":  # a time-only task: the family's default sampler instead
        del raw["sampler"]
    spec = parse_spec(raw, f"{Path(workload.path).with_suffix('')}.yaml")
    if not _computes(spec, task.problem):
        raise SpecError(str(path), "template", f"no template of its space computes {task.name}")
    fitted = (_fitted(spec, s) for s in warm_starts(spec.template, nearest_entries(task, stored)))
    starts = [s for s in fitted if s is not None]
    if starts:
        spec = parse_spec({**raw, "start_from": starts}, spec.path)
    return spec


def _computes(spec: Any, problem: Any) -> bool:
    """Whether any template the spec can pick computes the problem's dtype and layout."""
    from ..kernels import FAMILIES

    templates = FAMILIES[spec.kernel].templates
    names = [spec.template]
    if spec.template == "auto":
        names = [v for p in spec.space.params if p.name == "TEMPLATE" for v in p.values]
    infos = [templates[n] for n in names if n in templates]
    return any(problem.dtype in t.dtypes and (not t.layouts or problem.layout in t.layouts) for t in infos)


def _fitted(spec: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    """A stored winner's parameters as a configuration of ``spec``'s space, or None where they are none. A parameter
    the winner predates (absent from it, in the space) takes its template's default: what the winner ran with."""
    from ..kernels import FAMILIES

    class Missing(Exception):
        pass

    template = params.get("TEMPLATE", spec.template)
    info = FAMILIES[spec.kernel].templates.get(template)
    defaults = dict(info.defaults) if info is not None else {}

    def choose(p: Any) -> Any:
        v = params.get(p.name, defaults.get(p.name, Missing))
        if v is Missing or not any(type(x) is type(v) and x == v for x in p.values):
            raise Missing
        return v

    try:
        chosen = spec.space.walk(choose)
        fits = (
            set(params) <= set(chosen)
            and not spec.space.violated(chosen)
            and (FAMILIES[spec.kernel].check(spec.template, chosen) is None)
        )
        return dict(chosen) if fits else None
    except Exception:  # noqa: BLE001 - any mismatch means "not a start point", never an error
        return None


FINAL_MINUTES = 0.15  # what re-timing one problem's finalists and its vendor costs, charged to its first slice


def run_workload(workload: Workload, minutes: float, session: Any, slice_minutes: float | None = None) -> int:
    """Tune a workload in one session; print progress per slice and the final table. 0 when all went well.

    Slices only search (the session enumerates each problem's space and times its vendor once); each problem
    that got a slice is re-timed and stored once, at the end (also after Ctrl-C). A run killed outright loses
    no trial: each is in its problem's study, which the next run of the workload resumes and stores."""
    from ..results.store import read

    def stored(kernel: str) -> dict[str, Any]:
        return read(session.tuned_path(kernel)).get("entries", {})

    p = plan(workload, stored)
    for task in list(p.specs):
        reason = session.fit_problem(task.problem) if hasattr(session, "fit_problem") else None
        if reason:
            p.specs.pop(task)
            p.skipped[task] = reason
    for task, reason in p.skipped.items():
        print(f"autotune: {task.name}: not tuned, served by the vendor ({reason})", file=sys.stderr)
    tasks = [t for t in workload.tasks if t in p.specs]
    if not tasks:
        raise AutotuneError(f"{workload.path}: no problem of the workload can be tuned by an installed template")
    states = {t: TaskState(t) for t in tasks}
    try:
        schedule(tasks, minutes, _slicer(session, p.specs), slice_minutes=slice_minutes, on_slice=_on_slice,
                 into=states)  # fmt: skip
    finally:  # what the slices found is re-timed and stored, also when the run is interrupted
        finalize(session, p.specs, list(states.values()))
    print()
    print(format_table(final_rows(list(states.values()))))
    return 0 if all(s.best_ms is not None for s in states.values() if s.slices) else 1


def _slicer(session: Any, specs: dict[Task, Any]) -> Callable[[Task, float], SliceResult]:
    """``schedule``'s ``tune``: one slice of search, charged its whole wall time, and the first slice of a problem
    also the final re-timing that :func:`finalize` will spend on it."""
    from ..core.progress import Progress

    seen: set[Task] = set()

    def tune(task: Task, slice_min: float) -> SliceResult:
        bar = Progress(f"{task.name} ({task.time_share:.0%} of the model)", None, slice_min * 60)
        start = time.monotonic()
        result = session.tune(specs[task], task.problem, None, slice_min, bar.update, final=False)
        bar.close(f"{result.outcome.stopped}; best {_ms(result.best_ms)} vs vendor {_ms(result.vendor_ms)} ms")
        spent = max(slice_min, (time.monotonic() - start) / 60) + (0.0 if task in seen else FINAL_MINUTES)
        seen.add(task)
        return SliceResult(result.best_ms, result.vendor_ms, spent)

    return tune


def _on_slice(state: TaskState, step: int) -> None:
    print(f"  slice {step}: {state.task.name}: {state.slices} slice(s), {state.minutes:.1f} min", file=sys.stderr)


def finalize(session: Any, specs: dict[Task, Any], states: Sequence[TaskState]) -> None:
    """Re-time each sliced problem's finalists and vendor once (no new trial) and store its winner; the states
    take the re-timed numbers."""
    for state in states:
        if not state.slices:
            continue
        start = time.monotonic()
        result = session.tune(specs[state.task], state.task.problem, 0, None, lambda done, note: None, final=True)
        state.best_ms, state.vendor_ms = result.best_ms, result.vendor_ms
        state.minutes += (time.monotonic() - start) / 60
        print(f"  final: {state.task.name}: best {_ms(result.best_ms)} vs vendor {_ms(result.vendor_ms)} ms "
              f"(re-timed); stored: {result.stored}", file=sys.stderr)  # fmt: skip


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A plain fixed-width table of :func:`autotune.tune.workload.final_rows`."""
    cols = ("problem", "calls", "share", "minutes", "vendor_ms", "ours_ms", "served_ms", "gain")

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    table = [cols] + [tuple(cell(r[c]) for c in cols) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in table)
