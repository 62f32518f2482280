"""Compiles ahead of the GPU: a process pool, a cache by rendered-source hash, and a timeout.

``submit`` returns at once; ``result`` waits for that compile. Identical sources share one compile
(kernels take the shape at run time, so one configuration compiles once for every shape). A compile
that outlives its timeout is recorded as failed and the pool is replaced, so it cannot stall the run.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import time
from collections.abc import Callable
from multiprocessing import get_context
from typing import Any

from .compiler import CompileResult, compile_source
from .evaluate import Compiled

log = logging.getLogger(__name__)

CompileFn = Callable[[str, str, str], CompileResult]
NICE = 5  # compiles yield the CPU to the search loop and the GPU worker, which are on the critical path


def _init_compiler() -> None:
    """Runs once in each compile process: lower its priority and load NVRTC before the first candidate."""
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
        self._deadline: dict[str, float] = {}  # source hash -> when its compile counts as hung
        self._pool: cf.ProcessPoolExecutor | None = None
        self.compiles = 0

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=get_context("spawn"), initializer=_init_compiler
            )
        return self._pool

    def warm(self) -> None:
        """Start every compile process now (spawn, imports, NVRTC load) instead of at the first candidate,
        so that start-up overlaps whatever the caller does next (enumerating the space, timing the vendor)."""
        if self.jobs > 1:
            for _ in range(self.jobs):
                self._executor().submit(_ready)

    def submit(self, c: Compiled) -> str:
        """Start compiling ``c`` (unless cached or already under way); returns its handle."""
        key = c.source_hash
        if key in self._cache or key in self._pending:
            return key
        self.compiles += 1
        future = self._executor().submit(self.compile_fn, c.source, c.kernel_name, self.arch) if self.jobs > 1 else None
        self._pending[key] = (c, future)
        self._deadline[key] = time.monotonic() + self.timeout_s
        return key

    def ready(self, key: str) -> bool:
        """True when ``result(key)`` will not wait: cached, finished, compiled here on demand, or past its
        timeout (its result is then a timeout failure)."""
        if key in self._cache:
            return True
        future = self._pending[key][1]
        return future is None or future.done() or time.monotonic() >= self._deadline[key]

    def first_ready(self, keys: list[str]) -> int:
        """The index in ``keys`` of the first compile that is ready, waiting for one if none is yet.

        The search runs candidates in the order their compiles finish, so a slow compile does not hold up
        the candidates behind it.
        """
        while True:
            for i, key in enumerate(keys):
                if self.ready(key):
                    return i
            futures = [self._pending[k][1] for k in keys]
            timeout = min(self._deadline[k] for k in keys) - time.monotonic()
            cf.wait(futures, timeout=max(0.0, timeout), return_when=cf.FIRST_COMPLETED)

    def result(self, key: str) -> CompileResult:
        if key in self._cache:
            return self._cache[key]
        c, future = self._pending.pop(key)
        deadline = self._deadline.pop(key)
        if future is None:
            result = self.compile_fn(c.source, c.kernel_name, self.arch)
        else:
            try:
                result = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except cf.TimeoutError:
                self._restart()
                result = CompileResult(c.kernel_name, None, "", self.timeout_s,
                                       error=f"compile timed out after {self.timeout_s:g} s")  # fmt: skip
            except cf.process.BrokenProcessPool:
                self._restart()
                result = CompileResult(c.kernel_name, None, "", 0.0, error="the compiler process died")
        self._cache[key] = result
        return result

    def _restart(self) -> None:
        """Replace a pool with a stuck or dead process; compiles still pending go to the new pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
        log.warning("compile pool restarted")
        for key, (c, future) in list(self._pending.items()):
            if future is not None and not (future.done() and not future.cancelled() and future.exception() is None):
                new = self._executor().submit(self.compile_fn, c.source, c.kernel_name, self.arch)
                self._pending[key] = (c, new)
                self._deadline[key] = time.monotonic() + self.timeout_s

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
