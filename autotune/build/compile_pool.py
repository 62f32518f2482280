"""Compiles ahead of the GPU: a process pool, a cache by rendered-source hash, and a timeout.

``submit`` returns at once; ``result`` waits for that compile. Identical sources share one compile
(kernels take the shape at run time, so one configuration compiles once for every shape). A compile
that outlives its timeout is recorded as failed and the pool is replaced, so it cannot stall the run.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import signal
import time
from collections.abc import Callable
from multiprocessing import get_context
from typing import Any, Protocol

from .compiler import CompileResult, compile_source

log = logging.getLogger(__name__)

CompileFn = Callable[[str, str, str], CompileResult]


class Compiled(Protocol):
    """What the pool reads of a candidate (``evaluate.Compiled``, ``templates.Rendered``): its rendered source,
    that source's hash (the cache key) and the kernel's name."""

    @property
    def source(self) -> str: ...

    @property
    def source_hash(self) -> str: ...

    @property
    def kernel_name(self) -> str: ...


NICE = 5  # compiles yield the CPU to the search loop and the GPU worker, which are on the critical path


def _init_compiler(pids: Any = None) -> None:
    """Runs once in each compile process: say its pid to the parent (``pids``, a queue: the parent kills these on a
    hung compile), lower its priority and load NVRTC before the first candidate."""
    if pids is not None:
        pids.put(os.getpid())
    try:
        os.nice(NICE)
    except OSError:  # not permitted here: compile at normal priority
        pass
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - a missing NVRTC is reported by the compile itself, with its reason
        pass


def _ready() -> bool:
    return True


class CompilePool:
    def __init__(self, arch: str, jobs: int = 1, compile_fn: CompileFn = compile_source, timeout_s: float = 120.0):
        self.arch, self.jobs, self.compile_fn, self.timeout_s = arch, jobs, compile_fn, timeout_s
        self._cache: dict[str, CompileResult] = {}
        self._pending: dict[str, Any] = {}  # source hash -> Future, or the Compiled to compile lazily
        # source hash -> when its compile counts as hung; None while it waits in the queue. The clock starts when
        # the pool hands the compile to its call queue (at most one compile ahead of a free process), so a long
        # queue of candidates is never mistaken for a hung compiler.
        self._deadline: dict[str, float | None] = {}
        self._pool: cf.ProcessPoolExecutor | None = None
        self._pids: Any = None  # the current pool's queue of worker pids (put by each worker at start)
        self.compiles = 0

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            ctx = get_context("spawn")
            self._pids = ctx.SimpleQueue()
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=ctx, initializer=_init_compiler, initargs=(self._pids,)
            )
        return self._pool

    def warm(self) -> None:
        """Start every compile process now (spawn, imports, NVRTC load) instead of at the first candidate,
        so that start-up overlaps whatever the caller does next (enumerating the space, timing the vendor)."""
        if self.jobs > 1:
            for _ in range(self.jobs):
                self._executor().submit(_ready)

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` on the pool's processes (in this process with one job); ``fn`` and the
        items must pickle. Work that is not a compile, e.g. checking the parts of a large space side by side."""
        if self.jobs <= 1 or len(items) <= 1:
            return [fn(x) for x in items]
        return list(self._executor().map(fn, items))

    def submit(self, c: Compiled) -> str:
        """Start compiling ``c`` (unless cached or already under way); returns its handle."""
        key = c.source_hash
        if key in self._cache or key in self._pending:
            return key
        self.compiles += 1
        future = self._executor().submit(self.compile_fn, c.source, c.kernel_name, self.arch) if self.jobs > 1 else None
        self._pending[key] = (c, future)
        self._deadline[key] = None
        return key

    def _hung(self, key: str) -> bool:
        """Whether the compile of ``key`` has been running past its timeout (starting its clock if it runs)."""
        future = self._pending[key][1]
        if self._deadline[key] is None:
            if future is None or not future.running():
                return False
            self._deadline[key] = time.monotonic() + self.timeout_s
        return time.monotonic() >= self._deadline[key]  # type: ignore[operator]

    def ready(self, key: str) -> bool:
        """True when ``result(key)`` will not wait: cached, finished, compiled here on demand, or past its
        timeout (its result is then a timeout failure)."""
        if key in self._cache:
            return True
        future = self._pending[key][1]
        return future is None or future.done() or self._hung(key)

    def first_ready(self, keys: list[str], until: float | None = None) -> int | None:
        """The index in ``keys`` of the first compile that is ready, waiting for one if none is yet; None if
        ``until`` (a ``time.monotonic()`` value: the search's time budget) passes first.

        The search runs candidates in the order their compiles finish, so a slow compile does not hold up
        the candidates behind it.
        """
        while True:
            for i, key in enumerate(keys):
                if self.ready(key):
                    return i
            now = time.monotonic()
            if until is not None and now >= until:
                return None
            # Wake for the first finished compile, a running compile's deadline, the budget's end, or after a
            # second (a queued compile's clock starts when a process takes it).
            wake = [d for d in (self._deadline[k] for k in keys) if d is not None] + [now + 1.0]
            wake += [until] if until is not None else []
            futures = [self._pending[k][1] for k in keys]
            cf.wait(futures, timeout=max(0.0, min(wake) - now), return_when=cf.FIRST_COMPLETED)

    def result(self, key: str) -> CompileResult:
        if key in self._cache:
            return self._cache[key]
        c, future = self._pending[key]
        if future is None:
            result = self.compile_fn(c.source, c.kernel_name, self.arch)
        else:
            try:
                result = self._wait(key, future)
            except cf.TimeoutError:
                self._forget(key)  # not resubmitted by the restart
                self._restart()
                result = self._timed_out(c)
            except cf.process.BrokenProcessPool:
                self._forget(key)
                self._restart()
                result = CompileResult(c.kernel_name, None, "", 0.0, error="the compiler process died")
        self._forget(key)
        self._cache[key] = result
        return result

    def _timed_out(self, c: Compiled) -> CompileResult:
        reason = f"compile timed out after {self.timeout_s:g} s"
        return CompileResult(c.kernel_name, None, "", self.timeout_s, error=reason)

    def _forget(self, key: str) -> None:
        self._pending.pop(key, None)
        self._deadline.pop(key, None)

    def _wait(self, key: str, future: Any) -> CompileResult:
        """The compile's result; cf.TimeoutError once it has run for longer than the timeout. Other compiles
        found hung meanwhile are failed and the pool replaced, so a queue behind them cannot wait forever."""
        while True:
            try:
                return future.result(timeout=1.0)
            except cf.TimeoutError:
                if self._hung(key):
                    raise
                hung = [k for k in list(self._pending) if k != key and self._hung(k)]
                if hung:
                    for k in hung:
                        c = self._pending[k][0]
                        self._forget(k)
                        self._cache[k] = self._timed_out(c)
                    self._restart()
                    future = self._pending[key][1]

    def _kill(self) -> None:
        """Stop the pool now: kill its processes (a hung compile included) and cancel what is queued."""
        pool, pids, self._pool, self._pids = self._pool, self._pids, None, None
        if pool is not None:
            while not pids.empty():  # every worker that started (public API only: no pool internals)
                try:
                    os.kill(pids.get(), signal.SIGKILL)
                except ProcessLookupError:  # it had exited already
                    pass
            pool.shutdown(wait=False, cancel_futures=True)

    def _restart(self) -> None:
        """Replace a pool with a stuck or dead process; compiles still pending go to the new pool."""
        self._kill()
        log.warning("compile pool restarted")
        for key, (c, future) in list(self._pending.items()):
            if future is not None and not (future.done() and not future.cancelled() and future.exception() is None):
                new = self._executor().submit(self.compile_fn, c.source, c.kernel_name, self.arch)
                self._pending[key] = (c, new)
                self._deadline[key] = None

    def close(self) -> None:
        """Kill the compile processes: a compile left hung by a finished search must not keep the program
        from exiting (the interpreter waits for running pool work at exit)."""
        self._kill()

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
