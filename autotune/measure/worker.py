"""A GPU worker process: candidates are launched there, so a kernel that faults or hangs costs a
restarted worker, not the run.

The parent sends small messages over a pipe; the worker keeps one fixture (inputs and float64
reference) per problem, so verification happens on the device against a reference computed once.
After any CUDA error the worker exits, since a faulted context is unusable; the parent starts a new
one on the next request. A request that does not answer within its timeout kills the worker.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
import traceback
from typing import Any

from ..core.errors import AutotuneError
from .bench import L2Flusher, Timing, TimingPlan
from .evaluate import Compiled, Settings, Status, TrialResult, _result, make_fixture, measure, time_vendor

log = logging.getLogger(__name__)

SETUP_TIMEOUT_S = 300.0


def _warm_up() -> None:
    """Compile CuPy's own kernels that every candidate needs (random inputs, conversions, the poisoned output,
    the comparison, the L2 flush) on tiny arrays, several at a time since NVRTC releases the GIL, while the
    parent is still starting: with an empty CuPy cache they otherwise delay the first result by seconds."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        import cupy as cp

        from .verify import compare

        cp.cuda.runtime.getDeviceCount()
        f32, f64 = cp.ones((4, 4), dtype=cp.float32), cp.ones((4, 4), dtype=cp.float64)
        jobs = (
            lambda: cp.random.default_rng(0).standard_normal((4, 4), dtype=cp.float32),
            lambda: f32.astype(cp.float16).astype(cp.float64),
            lambda: compare(f32, f64, 1.0),
            lambda: int((~cp.isfinite(f32)).sum()),  # the count of a failed comparison
            lambda: cp.empty(4, dtype=cp.float32).fill(float("nan")),
            lambda: cp.empty(4, dtype=cp.int32).fill(0),
            lambda: f64 @ f64,
        )
        with ThreadPoolExecutor(len(jobs)) as pool:
            for done in [pool.submit(job) for job in jobs]:
                done.result()
    except Exception as exc:  # noqa: BLE001 - no GPU or the like: the first request reports it properly
        log.debug("warm-up skipped: %s", exc)


def _serve(conn: Any) -> None:
    """The worker's loop: answer requests until told to stop or a CUDA error makes the context unusable."""
    from cupy.cuda.runtime import CUDARuntimeError
    from cupy_backends.cuda.api.driver import CUDADriverError

    _warm_up()
    flush = None
    fixtures: dict[Any, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "stop":
            return
        if flush is None:
            try:
                flush = L2Flusher()
            except Exception as exc:  # noqa: BLE001 - no usable device: say so instead of dying
                conn.send(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
                continue
        if kind == "setup":
            _, kernel, problem, seed = msg
            fixtures.clear()  # one problem at a time keeps device memory bounded
            try:
                fixtures[(kernel, problem)] = make_fixture(kernel, problem, seed)
            except Exception as exc:  # noqa: BLE001 - out of memory and the like: the parent stops the shape
                conn.send(("error", f"{type(exc).__name__}: {str(exc)[:200]}"))
                continue
            conn.send(("ready", None))
        elif kind == "measure":
            _, compiled, settings = msg
            fixture = fixtures.get((compiled.candidate.kernel, compiled.candidate.problem))
            try:
                result = measure(compiled, settings, flush, fixture)
            except (CUDADriverError, CUDARuntimeError) as exc:  # a fault that surfaced after the first launch
                result = _result(compiled, Status.LAUNCH_FAILED, str(exc).splitlines()[0][:200])
            except Exception:  # noqa: BLE001 - a bug in autotune: the parent re-raises it with this text
                conn.send(("crash", traceback.format_exc()))
                os._exit(4)
            conn.send(("result", result))
            if result.status is Status.LAUNCH_FAILED:
                os._exit(3)  # the CUDA context may be poisoned; the parent starts a fresh worker
        elif kind == "vendor":
            _, kernel, problem, plan = msg
            conn.send(("vendor", time_vendor(kernel, problem, flush, plan)))
        else:
            conn.send(("error", f"unknown request {kind!r}"))


class GPUWorker:
    """The parent's handle on the worker process. Not thread-safe: one request at a time."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self._ready: tuple[str, Any, int] | None = None  # the problem whose fixture the worker holds
        self._setups = 0
        self._pending: tuple[Compiled, float, TrialResult | None] | None = None
        self.restarts = 0

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True, name="autotune-gpu-worker")
        self._proc.start()
        child.close()
        self._conn = parent

    def warm(self) -> None:
        """Start the worker process now, so its imports overlap the parent's start-up work."""
        if self._proc is None or not self._proc.is_alive():
            self._start()

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(10)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
        self._ready = None
        self.restarts += 1

    def _send(self, msg: tuple) -> str | None:
        """Send a request (starting a worker if none is alive); a string says why it could not be sent."""
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self._kill()
            self._start()
        try:
            self._conn.send(msg)
        except (BrokenPipeError, ConnectionResetError):
            self._kill()
            return "the GPU worker died before the request; it was replaced"
        return None

    def _receive(self, timeout: float) -> tuple[str, Any] | str:
        """The reply, or a string saying why there is none (timed out, worker died)."""
        try:
            if not self._conn.poll(max(0.0, timeout)):
                self._kill()
                return "no answer in time (hung kernel?); the worker was replaced"
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self._proc.exitcode if self._proc is not None else None
            self._kill()
            return f"the GPU worker died (exit code {code}); it was replaced"

    def _request(self, msg: tuple, timeout: float) -> tuple[str, Any] | str:
        return self._send(msg) or self._receive(timeout)

    def _setup(self, kernel: str, problem: Any, seed: int) -> str | None:
        """Make the worker hold fresh random inputs and their reference for ``problem``."""
        if self._ready == (kernel, problem, seed) and self._proc is not None and self._proc.is_alive():
            return None
        self._setups += 1  # every setup draws new inputs, also after a restart
        reply = self._request(("setup", kernel, problem, seed * 1_000_003 + self._setups), SETUP_TIMEOUT_S)
        if isinstance(reply, str):
            return reply
        if reply[0] == "error":
            return reply[1]
        self._ready = (kernel, problem, seed)
        return None

    def start(self, compiled: Compiled, settings: Settings) -> None:
        """Send a candidate to the GPU and return at once; :meth:`collect` waits for its result.

        The search asks Optuna for its next candidates in between, so the GPU is not idle meanwhile.
        """
        assert self._pending is None, "collect() the previous candidate first"
        early = None
        if compiled.status is not None:
            early = _result(compiled, compiled.status, compiled.reason)
        else:
            cand = compiled.candidate
            trouble = self._setup(cand.kernel, cand.problem, settings.seed)
            if trouble is not None:
                # Not this candidate's fault (out of memory for the inputs, say): stop instead of recording
                # every candidate as failed. Finished trials are in the study; the run can be resumed.
                raise AutotuneError(f"cannot prepare {cand.kernel} {cand.problem.label} on the GPU: {trouble}")
            trouble = self._send(("measure", compiled, settings))
            if trouble is not None:
                early = _result(compiled, Status.LAUNCH_FAILED, f"could not run: {trouble}")
        self._pending = (compiled, time.monotonic() + settings.timeout_s, early)

    def collect(self) -> TrialResult:
        assert self._pending is not None, "start() a candidate first"
        compiled, deadline, early = self._pending
        self._pending = None
        if early is not None:
            return early
        reply = self._receive(deadline - time.monotonic())
        if isinstance(reply, str):
            status = Status.TIMED_OUT if reply.startswith("no answer") else Status.LAUNCH_FAILED
            return _result(compiled, status, reply)
        if reply[0] == "crash":
            self._kill()
            raise RuntimeError(f"the GPU worker crashed (a bug in autotune):\n{reply[1]}")
        if reply[0] == "error":
            return _result(compiled, Status.LAUNCH_FAILED, reply[1])
        result = reply[1]
        if result.status is Status.LAUNCH_FAILED:
            # The worker exits after sending this; reap it so the next request starts a fresh one.
            self._kill()
        return result

    def measure(self, compiled: Compiled, settings: Settings) -> TrialResult:
        self.start(compiled, settings)
        return self.collect()

    def vendor(self, kernel: str, problem: Any, plan: TimingPlan) -> tuple[str, Timing] | None:
        reply = self._request(("vendor", kernel, problem, plan), SETUP_TIMEOUT_S)
        if isinstance(reply, str) or reply[0] == "error":
            log.warning("vendor timing failed: %s", reply if isinstance(reply, str) else reply[1])
            return None
        return reply[1]

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("stop",))
                self._proc.join(10)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._proc = self._conn = None

    def __enter__(self) -> GPUWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
