"""Record the GEMM and convolution problems a model runs, as a workload file that ``autotune run`` tunes.

    with autotune.record("workload.yaml"):
        model(x)

Every call the runtime serves (through its call observer, ``set_call_observer``) and every call that
:mod:`autotune.torch` sends to the vendor is counted per problem and timed on the GPU with CUDA events around
it (torch's current stream once torch has initialised CUDA, else CuPy's). Calls made while a CUDA graph is
being captured are counted, not timed. Recorders nest: each sees every call.

The file (read by :func:`autotune.tune.workload.load_workload`)::

    workload: resnet50-b1                 # a name: record(name=...), else the file's stem
    gpu: NVIDIA H200                      # the GPU it was recorded on (null if unknown)
    recorded: '2026-12-01T21:30:00Z'
    versions: {autotune: 0.1.0}
    problems:                             # in the order each problem was first called
      - kernel: gemm                      # the keys and shape syntax of a tuning spec (configs/*.yaml)
        dtype: float16
        layout: NT
        shape: 1x14336x4096               # the family's label: MxNxK, or n1c64h56w56k64r3s3u1p1 for conv2d
        calls: 2
        ms_per_call: 0.0312               # mean GPU time of a timed call (null if none was timed)
        time_share: 0.41                  # ms_per_call x calls over the sum of that over all problems

Shares extrapolate each problem's mean to all its calls (calls under capture included); nothing timed, 0.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

log = logging.getLogger(__name__)

__all__ = ["RecordedProblem", "RecordedWorkload", "Recorder", "observer", "record"]

RESOLVE_EVERY = 1024  # pending timings resolved (one synchronize) once this many have piled up


@dataclass(frozen=True)
class RecordedProblem:
    """One problem a model ran: what it is, how often it ran, and how much of the GPU time it took."""

    kernel: str
    dtype: str
    layout: str
    shape: str  # the family's label, e.g. "1x14336x4096" or "n1c64h56w56k64r3s3u1p1"
    calls: int
    ms_per_call: float | None  # mean GPU time per timed call
    time_share: float

    def as_dict(self) -> dict[str, Any]:
        keys = ("kernel", "dtype", "layout", "shape", "calls", "ms_per_call", "time_share")
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class RecordedWorkload:
    name: str
    problems: tuple[RecordedProblem, ...]
    gpu: str | None = None
    recorded: str | None = None  # UTC, ISO 8601

    def to_yaml(self) -> str:
        from ..core.version import __version__

        doc = {
            "workload": self.name,
            "gpu": self.gpu,
            "recorded": self.recorded,
            "versions": {"autotune": __version__},
            "problems": [p.as_dict() for p in self.problems],
        }
        head = "# recorded by autotune.record(); tune it with: autotune run <this file> --minutes 20\n"
        return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


class Timer(Protocol):
    """Times one call on the GPU: ``begin`` before it, ``end`` after it; ``elapsed_ms`` once it is done."""

    def begin(self) -> Any: ...
    def end(self, token: Any) -> Any: ...
    def elapsed_ms(self, pending: Any) -> float: ...


class CudaEventTimer:
    """CUDA events on the stream the call launches on: torch's current stream once torch has initialised
    CUDA (the runtime launches torch tensors' calls there), else CuPy's current stream. ``begin`` gives
    None while that stream is capturing a CUDA graph: such calls are counted, not timed."""

    def begin(self) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            if torch.cuda.is_current_stream_capturing():
                return None
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return start
        import cupy

        stream = cupy.cuda.get_current_stream()
        if stream.is_capturing():
            return None
        start = cupy.cuda.Event()
        start.record(stream)
        return start

    def end(self, token: Any) -> Any:
        if type(token).__module__.startswith("torch"):
            import torch

            stop = torch.cuda.Event(enable_timing=True)
            stop.record()
            return token, stop
        import cupy

        stop = cupy.cuda.Event()
        stop.record(cupy.cuda.get_current_stream())
        return token, stop

    def elapsed_ms(self, pending: Any) -> float:
        start, stop = pending
        stop.synchronize()
        if type(start).__module__.startswith("torch"):
            return float(start.elapsed_time(stop))
        import cupy

        return float(cupy.cuda.get_elapsed_time(start, stop))


class _Tally:
    __slots__ = ("calls", "timed", "ms")

    def __init__(self) -> None:
        self.calls, self.timed, self.ms = 0, 0, 0.0


class Recorder:
    """A context manager that records every served call while it is active; see :func:`record`."""

    def __init__(self, path: str | Path | None = None, *, name: str | None = None, timer: Timer | None = None,
                 gpu: str | None = None) -> None:  # fmt: skip
        self.path = Path(path) if path is not None else None
        self.name = name or (self.path.stem if self.path is not None else "recorded")
        self.timer: Timer = timer if timer is not None else CudaEventTimer()
        self.gpu = gpu
        self._tallies: dict[tuple[str, str, str, str], _Tally] = {}  # insertion order: first call first
        self._pending: list[tuple[_Tally, Any]] = []
        self._lock = threading.Lock()
        self.workload: RecordedWorkload | None = None  # set when the context exits

    def __enter__(self) -> Recorder:
        _push(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _pop(self)
        self.workload = self.snapshot()
        if self.path is not None:  # written even if the body raised: what was recorded is kept
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.workload.to_yaml())
            log.info("recorded %d problems to %s", len(self.workload.problems), self.path)
            if not self.workload.problems:
                log.warning("autotune.record(): no call was served while recording; %s lists no problem", self.path)

    def observe(self, kernel: str, problem: Any, run: Callable[[], Any]) -> Any:
        """Count and time one call of ``problem``: runs ``run()`` and returns its result."""
        key = (kernel, str(problem.dtype), str(getattr(problem, "layout", "")), str(problem.label))
        token = self.timer.begin()
        result = run()
        pending = self.timer.end(token) if token is not None else None
        with self._lock:
            tally = self._tallies.get(key) or self._tallies.setdefault(key, _Tally())
            tally.calls += 1
            if pending is not None:
                self._pending.append((tally, pending))
            full = len(self._pending) >= RESOLVE_EVERY
        if full:
            self._resolve()
        return result

    def _resolve(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        times = [(tally, self.timer.elapsed_ms(p)) for tally, p in pending]
        with self._lock:
            for tally, ms in times:
                tally.timed += 1
                tally.ms += ms

    def snapshot(self) -> RecordedWorkload:
        """The workload recorded so far (waits for the GPU to finish the timed calls)."""
        self._resolve()
        with self._lock:
            items = [(key, t.calls, t.timed, t.ms) for key, t in self._tallies.items()]
        # A problem's time: its mean per timed call times all its calls (calls under graph capture are untimed).
        spent = [ms / timed * calls if timed else 0.0 for _, calls, timed, ms in items]
        total = sum(spent)
        problems = []
        for ((kernel, dtype, layout, shape), calls, timed, ms), est in zip(items, spent, strict=True):
            ms_per_call = round(ms / timed, 7) if timed else None
            share = round(est / total, 6) if total > 0 else 0.0
            problems.append(RecordedProblem(kernel, dtype, layout, shape, calls, ms_per_call, share))
        recorded = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        gpu = self.gpu if self.gpu is not None else _gpu_name()
        return RecordedWorkload(self.name, tuple(problems), gpu, recorded)


def record(path: str | Path | None = None, *, name: str | None = None, timer: Timer | None = None,
           gpu: str | None = None) -> Recorder:  # fmt: skip
    """Record the problems run inside ``with autotune.record("workload.yaml"): ...`` and write them there
    on exit (``path=None``: only ``recorder.workload``). ``name`` names the workload (default: the file's
    stem); ``timer`` and ``gpu`` replace the CUDA-event timer and the GPU's name (tests)."""
    return Recorder(path, name=name, timer=timer, gpu=gpu)


# --- the active recorders, and the runtime's observer ------------------------------------------------------

_active: list[Recorder] = []
_active_lock = threading.Lock()
_previous: list[Callable | None] = [None]  # an observer set before recording began: it still sees every call
_warned: list[bool] = []


def _dispatch(kernel: str, problem: Any, run: Callable[[], Any]) -> Any:
    """The call observer: every active recorder counts and times the call, the innermost closest to it."""
    if _previous[0] is not None:
        run = functools.partial(_previous[0], kernel, problem, run)
    for rec in reversed(_active):
        run = functools.partial(rec.observe, kernel, problem, run)
    return run()


def observer() -> Callable[[str, Any, Callable[[], Any]], Any] | None:
    """The observer to report a call to (``fn(kernel, problem, run)``), or None when nothing records."""
    return _dispatch if _active else None


def _push(rec: Recorder) -> None:
    with _active_lock:
        _active.append(rec)
        if len(_active) == 1:
            setter = _observer_setter()
            if setter is not None:
                previous = setter(_dispatch)
                _previous[0] = previous if previous is not _dispatch else None
            elif not _warned:
                _warned.append(True)
                log.warning("this autotune's runtime reports no calls (no set_call_observer): only the vendor "
                            "calls of autotune.torch are recorded")  # fmt: skip


def _pop(rec: Recorder) -> None:
    with _active_lock:
        if rec in _active:
            _active.remove(rec)
        if not _active:
            setter = _observer_setter()
            if setter is not None:
                setter(_previous[0])
            _previous[0] = None


def _observer_setter() -> Callable | None:
    """The runtime's ``set_call_observer(fn | None)`` (in ``autotune.core.hooks`` or ``autotune.serve.runtime``)."""
    from . import runtime

    try:
        from ..core import hooks
    except ImportError:
        hooks = None
    return getattr(hooks, "set_call_observer", None) or getattr(runtime, "set_call_observer", None)


def _gpu_name() -> str | None:
    try:
        from ..core.device import current_gpu

        return current_gpu().name
    except Exception:  # noqa: BLE001 - no GPU to name: the workload says null
        return None
