"""Compiles ahead of the GPU: a process pool, a cache by rendered-source hash, and a timeout.

``submit`` returns at once; ``result`` waits for that compile. Identical sources share one compile
(kernels take the shape at run time, so one configuration compiles once for every shape). A compile
that outlives its timeout is recorded as failed and the pool is replaced, so it cannot stall the run.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
from collections.abc import Callable
from multiprocessing import get_context
from typing import Any

from .compiler import CompileResult, compile_source
from .evaluate import Compiled

log = logging.getLogger(__name__)

CompileFn = Callable[[str, str, str], CompileResult]


class CompilePool:
    def __init__(self, arch: str, jobs: int = 1, compile_fn: CompileFn = compile_source, timeout_s: float = 120.0):
        self.arch, self.jobs, self.compile_fn, self.timeout_s = arch, jobs, compile_fn, timeout_s
        self._cache: dict[str, CompileResult] = {}
        self._pending: dict[str, Any] = {}  # source hash -> Future, or the Compiled to compile lazily
        self._pool: cf.ProcessPoolExecutor | None = None
        self.compiles = 0

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=get_context("spawn"))
        return self._pool

    def submit(self, c: Compiled) -> str:
        """Start compiling ``c`` (unless cached or already under way); returns its handle."""
        key = c.source_hash
        if key in self._cache or key in self._pending:
            return key
        self.compiles += 1
        future = self._executor().submit(self.compile_fn, c.source, c.kernel_name, self.arch) if self.jobs > 1 else None
        self._pending[key] = (c, future)
        return key

    def result(self, key: str) -> CompileResult:
        if key in self._cache:
            return self._cache[key]
        c, future = self._pending.pop(key)
        if future is None:
            result = self.compile_fn(c.source, c.kernel_name, self.arch)
        else:
            try:
                result = future.result(timeout=self.timeout_s)
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

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
