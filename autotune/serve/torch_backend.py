"""The backend of the torch drop-in (``autotune.torch``): who serves a routed call, and serving it on torch
tensors with autotune's runtime.

Each input signature of a routed module gets, once, a *fast serve*: a closure holding the launcher, the output
shape, dtype and device, which per call checks the operands' layout and alignment, allocates the output with
``torch.empty`` and launches on the operands' ``data_ptr()`` on torch's current stream (read per call). A Linear's
bias is added by the kernel's bias epilogue where the served kernel has one (``serve.bias_epilogue``: the same
configuration, verified on first use), else by the epilogue's beta term over rows set to the bias beforehand by
device-to-device copies (``bias_rows``). No CuPy array is made and no
stream context is entered. Calls it cannot take (an operand off a 16-byte boundary, another current device)
return None and take the general path: ``gemm``/``conv2d`` of ``autotune.serve.calls`` on torch tensors.
"""

from __future__ import annotations

import functools
import logging
import statistics
from collections.abc import Callable
from typing import Any

from ..measure import streams
from . import bias_epilogue, calls, runtime

log = logging.getLogger(__name__)

FastServe = Callable[[Any, Any, Any], Any]  # (x, weight, bias) -> output, or None: take the general path


def step_of(launcher: Any) -> str:
    """A launcher's lookup step; it starts with "vendor" when the vendor library serves (a vendor launcher
    picked by another step, e.g. the online choice, reads "vendor (online)")."""
    step = str(launcher.provenance.get("step", ""))
    return f"vendor ({step})" if getattr(launcher, "vendor", False) is True and step != "vendor" else step


@functools.cache
def _torch() -> Any:
    import torch

    return torch


class AutotuneBackend:
    """Serves routed calls with autotune's runtime on torch tensors; tests substitute one with the same
    methods to exercise the routing without a GPU."""

    def __init__(self) -> None:
        self.grad_enabled = _torch().is_grad_enabled  # bound once: called on every routed call
        self._gemm, self._conv = calls.gemm, calls.conv2d  # resolved once

    @staticmethod
    def step(kernel: str, problem: Any, sizes: dict[str, int], device: Any) -> str:
        """The runtime's lookup step for ``problem`` (see :func:`step_of`)."""
        import cupy

        with cupy.cuda.Device(device.index):
            return step_of(runtime.load(kernel, dtype=problem.dtype, layout=problem.layout, **sizes))

    @staticmethod
    def grad_enabled() -> bool:
        return _torch().is_grad_enabled()

    @staticmethod
    def on_device(x: Any) -> bool:
        return x.is_cuda

    @staticmethod
    def on_current_device(x: Any) -> bool:
        return x.is_cuda and x.device.index == _torch().cuda.current_device()

    @staticmethod
    def race(
        ours: Callable[[], Any], theirs: Callable[[], Any], x: Any, repeats: int = 7
    ) -> tuple[float, float] | None:  # noqa: E501
        """GPU ms per call of each callable on this input, as a model runs it: each captured ``RACE_CALLS``
        times into a CUDA graph, the two graphs replayed in turn (median of ``repeats``), so neither side's host
        time is timed (an eager race timed host-bound launches: a convolution followed by a CuPy launch read
        ~49 us against ~9 us in a graph). Eager timing with a long GPU spin before each start where capturing
        fails. None for a CPU input or if either callable fails."""
        torch = _torch()
        if not getattr(x, "is_cuda", False):
            return None
        try:
            for fn in (ours, theirs, ours, theirs):  # warm-up: plans, cuDNN's algorithm choice, caches, loads
                fn()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - racing is an optimisation: on any failure keep the plan
            log.debug("autotune.torch: race failed: %s", exc)
            return None
        try:
            return _graph_race(torch, (ours, theirs), repeats)
        except Exception as exc:  # noqa: BLE001 - something on one side cannot be captured: time it eagerly
            log.debug("autotune.torch: graph race failed, timing eagerly: %s", exc)
        try:
            return _eager_race(torch, (ours, theirs), repeats)
        except Exception as exc:  # noqa: BLE001
            log.debug("autotune.torch: race failed: %s", exc)
            return None

    @staticmethod
    def capturing() -> bool:
        cuda = _torch().cuda
        return cuda.is_available() and cuda.is_current_stream_capturing()

    @staticmethod
    def layout_of(x: Any) -> str | None:
        """The layout a 4-D input is dense in: "NCHW", "NHWC" (channels-last) or None."""
        if x.dim() != 4:
            return None
        if x.is_contiguous():
            return "NCHW"
        return "NHWC" if x.is_contiguous(memory_format=_torch().channels_last) else None

    @staticmethod
    def rows(x: Any, k: int) -> Any:
        """``x`` as [M, k] rows without a copy, or None when it is not contiguous."""
        return x.view(-1, k) if x.is_contiguous() else None

    def linear(self, rows: Any, weight: Any, bias: Any, fuse_bias: bool) -> Any:
        """``rows @ weight.t() + bias`` with the GEMM of layout NT: W read in place through ``.t()``."""
        out = _torch().empty((rows.shape[0], weight.shape[0]), dtype=rows.dtype, device=rows.device)
        if bias is None:
            self.gemm(rows, weight.t(), out, 1.0, 0.0)
        elif fuse_bias:  # the epilogue adds beta * out: pre-filled with the bias, it rounds once
            out.copy_(bias.expand(out.shape))
            self.gemm(rows, weight.t(), out, 1.0, 1.0)
        else:
            self.gemm(rows, weight.t(), out, 1.0, 0.0)
            out.add_(bias)
        return out

    def conv2d(self, x: Any, weight: Any, bias: Any, stride: int, pad: int, layout: str, cache: dict) -> Any:
        """torch's ``conv2d(x, weight, bias, stride, pad)`` with autotune's kernel; NHWC data stays NHWC."""
        import torch

        n, _, h, w = x.shape
        k, _, r, s = weight.shape
        p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
        wk = self.weight_as(weight, layout, cache)
        if layout == "NCHW":
            out = torch.empty((n, k, p, q), dtype=x.dtype, device=x.device)
            self.conv(x, wk, stride, pad, layout, out)
        else:
            out = torch.empty((n, k, p, q), dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
            self.conv(x.permute(0, 2, 3, 1), wk, stride, pad, layout, out.permute(0, 2, 3, 1))
        if bias is not None:
            out.add_(bias.view(1, k, 1, 1))
        return out

    @staticmethod
    def weight_as(weight: Any, layout: str, cache: dict) -> Any:
        """The filter dense in ``layout``: a view when it is, else a copy made once per storage and version."""
        if layout == "NCHW" and weight.is_contiguous():
            return weight
        if layout == "NHWC" and weight.is_contiguous(memory_format=_torch().channels_last):
            return weight.permute(0, 2, 3, 1)
        key = (layout, weight.data_ptr(), weight._version)
        if (got := cache.get(key)) is None:
            cache.clear()
            got = cache[key] = weight.contiguous() if layout == "NCHW" else weight.permute(0, 2, 3, 1).contiguous()
        return got

    # --- the fast serve of one input signature ------------------------------------------------------------

    def fast(self, kind: str, module: Any, plan: Any, x: Any, cache: dict, fuse_bias: bool) -> FastServe | None:
        """The fast serve of ``plan`` for inputs like ``x`` (see the module doc), or None when the launcher
        cannot take pointers (the vendor's, or one decided during capture)."""
        launcher = self.launcher(plan, x.device)
        if launcher.vendor or launcher.provisional or not hasattr(launcher, "launch_ptrs"):
            return None
        dev = x.get_device()
        if kind == "linear":
            biased = self.bias_launcher(launcher, x.device) if fuse_bias and module.bias is not None else None
            return fast_linear(launcher.launch_ptrs, x, module.out_features, fuse_bias, dev, self.device_reader(),
                               self.stream_of, self.bias_rows, biased.launch_ptrs if biased else None)  # fmt: skip
        return fast_conv(launcher.launch_ptrs, x, module, plan.problem.layout, cache, dev, self.device_reader(),
                         self.stream_of)  # fmt: skip

    @staticmethod
    def launcher(plan: Any, device: Any) -> Any:
        """The runtime's launcher of ``plan`` (memoized by ``runtime.load``)."""
        import cupy

        p = plan.problem
        with cupy.cuda.Device(device.index):
            return runtime.load(plan.kernel, dtype=p.dtype, layout=p.layout, **plan.sizes)

    @staticmethod
    def device_reader() -> Callable[[], int]:
        """What reads the current CUDA device (the launchers' modules are loaded in its context): CuPy's C call."""
        import cupy

        return cupy.cuda.runtime.getDevice

    stream_of = staticmethod(streams.stream_of_torch)  # torch's current stream, as a launch's stream=

    @staticmethod
    def bias_launcher(launcher: Any, device: Any) -> Any:
        """``launcher``'s kernel with the bias in its epilogue (built on ``device`` and verified there on first
        use), or None."""
        if not bias_epilogue.can_have(launcher):
            return None
        import cupy

        with cupy.cuda.Device(device.index):
            return bias_epilogue.with_bias(launcher)

    @staticmethod
    def bias_rows(out: Any, bias: Any, rows: int, stream: Any) -> bool:
        """Set each of the ``rows`` rows of ``out`` (dense) to ``bias`` (dense, one row) on ``stream``, with
        device-to-device copies instead of a torch op (a clone of the expanded bias cost ~14 us of host time on
        the H200 host): one copy for one row, else one 2-D copy whose source pitch is 0 where the runtime takes
        it (tried once, never inside a graph capture). False: nothing done; the caller copies with torch."""
        return _copy_rows(out.data_ptr(), bias.data_ptr(), bias.numel() * bias.element_size(), rows, stream.ptr)

    def gemm(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> None:
        self._gemm(a, b, out, alpha, beta)

    def conv(self, x: Any, w: Any, stride: int, pad: int, layout: str, out: Any) -> None:
        self._conv(x, w, stride, pad, layout, out)


RACE_CALLS = 4  # calls of each side per graph replay


def _graph_race(torch: Any, fns: tuple[Callable[[], Any], Callable[[], Any]], repeats: int) -> tuple[float, float]:
    graphs = []
    for fn in fns:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(RACE_CALLS):
                fn()
        graphs.append(graph)
    # the GPU busy while the host enqueues each replay
    return _interleaved(torch, (graphs[0].replay, graphs[1].replay), repeats, spin=100_000, calls=RACE_CALLS)


def _eager_race(torch: Any, fns: tuple[Callable[[], Any], Callable[[], Any]], repeats: int) -> tuple[float, float]:
    # ~0.5 ms of GPU work while the host enqueues each call
    return _interleaved(torch, fns, repeats, spin=1_000_000, calls=1)


def _interleaved(torch: Any, runs: tuple[Callable[[], Any], Callable[[], Any]], repeats: int, spin: int,
                 calls: int) -> tuple[float, float]:  # fmt: skip
    """Median GPU ms per call of each run (``calls`` calls a run), the two runs in turn ``repeats`` times, each
    after ``spin`` cycles of GPU work so that the host's enqueueing is not timed."""
    times: tuple[list[Any], list[Any]] = ([], [])
    for _ in range(repeats):
        for run, into in zip(runs, times, strict=True):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(spin)
            start.record()
            run()
            end.record()
            into.append((start, end))
    end.synchronize()
    ours, theirs = (statistics.median(s.elapsed_time(e) for s, e in pairs) / calls for pairs in times)
    return ours, theirs


_broadcast_2d: bool | None = None  # whether cudaMemcpy2DAsync takes a source pitch of 0 (None: not tried yet)
BIAS_COPIES = True  # False: the bias rows by torch's clone (benchmarks/dropin_overhead.py compares both)


def _copy_rows(out: int, row: int, nbytes: int, rows: int, stream: int) -> bool:
    """``rows`` copies of the ``nbytes`` at ``row`` to ``out`` (dense) on ``stream`` (see ``bias_rows``)."""
    import cupy

    global _broadcast_2d
    rt = cupy.cuda.runtime
    if not BIAS_COPIES:
        return False
    if rows == 0:
        return True
    if rows == 1:
        rt.memcpyAsync(out, row, nbytes, rt.memcpyDeviceToDevice, stream)
        return True
    if _broadcast_2d is False or (_broadcast_2d is None and AutotuneBackend.capturing()):
        return False
    try:
        rt.memcpy2DAsync(out, nbytes, row, 0, nbytes, rows, rt.memcpyDeviceToDevice, stream)
    except rt.CUDARuntimeError as exc:  # a pitch of 0 refused: torch's copy from now on
        log.debug("autotune.torch: a 2-D copy with source pitch 0 was refused (%s); bias rows by torch", exc)
        _broadcast_2d = False
        return False
    _broadcast_2d = True
    return True


BiasRows = Callable[[Any, Any, int, Any], bool]  # (out, bias, rows, stream) -> done (AutotuneBackend.bias_rows)


def fast_linear(launch: Any, x: Any, n: int, fuse_bias: bool, dev: int, device_now: Callable[[], int],
                stream_of: Callable[[int], Any], bias_rows: BiasRows,
                launch_bias: Any = None) -> FastServe:  # fmt: skip
    """``x @ weight.t() + bias`` for inputs shaped like ``x`` (contiguous, [..., in]): the NT GEMM on W in place,
    the output allocated in its final shape; with ``fuse_bias``, the bias added by ``launch_bias`` (the kernel
    with the bias epilogue, the bias pointer its last argument) where there is one, else by the epilogue's beta
    term over rows set to the bias (``bias_rows``)."""
    torch = _torch()
    empty, dense = torch.empty, torch.contiguous_format
    shape, dtype, device = (*x.shape[:-1], n), x.dtype, x.device
    rows = x.numel() // max(1, x.shape[-1])

    def serve(x: Any, w: Any, bias: Any) -> Any:
        if not (x.is_contiguous() and w.is_contiguous()):
            return None
        xp, wp = x.data_ptr(), w.data_ptr()
        if (xp | wp) & 15 or device_now() != dev or w.get_device() != dev:
            return None
        if bias is not None and (bias.dtype != dtype or bias.get_device() != dev or not bias.is_contiguous()):
            return None
        stream = stream_of(dev)
        if bias is not None and launch_bias is not None:
            out = empty(shape, dtype=dtype, device=device)
            launch_bias(xp, wp, out.data_ptr(), 1.0, 0.0, stream, bias.data_ptr())
            return out
        if bias is not None and fuse_bias:
            out, beta = empty(shape, dtype=dtype, device=device), 1.0
            if not bias_rows(out, bias, rows, stream):
                out = bias.expand(shape).clone(memory_format=dense)
        else:
            out, beta = empty(shape, dtype=dtype, device=device), 0.0
        launch(xp, wp, out.data_ptr(), 1.0, beta, stream)
        if bias is not None and not fuse_bias:
            out.add_(bias)
        return out

    return serve


def fast_conv(launch: Any, x: Any, module: Any, layout: str, cache: dict, dev: int, device_now: Callable[[], int],
              stream_of: Callable[[int], Any]) -> FastServe:  # fmt: skip
    """torch's ``conv2d(x, weight, bias)`` for inputs shaped like ``x`` (dense in ``layout``): the output
    allocated dense in the same layout, the filter read in place when it is dense in it too (else its copy made
    once per version, ``AutotuneBackend.weight_as``), the bias added after."""
    torch = _torch()
    empty = torch.empty
    n, _, h, w_ = x.shape
    k, _, r, s = module.weight.shape
    stride, pad = module.stride[0], module.padding[0]
    shape = (n, k, (h + 2 * pad - r) // stride + 1, (w_ + 2 * pad - s) // stride + 1)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    dtype, device, bias_shape = x.dtype, x.device, (1, k, 1, 1)
    weight_as = AutotuneBackend.weight_as

    def serve(x: Any, w: Any, bias: Any) -> Any:
        if not w.is_contiguous(memory_format=fmt):
            w = weight_as(w, layout, cache)
        xp, wp = x.data_ptr(), w.data_ptr()
        if (xp | wp) & 15 or device_now() != dev or w.get_device() != dev:
            return None
        out = empty(shape, dtype=dtype, device=device, memory_format=fmt)
        launch(xp, wp, out.data_ptr(), 1.0, 0.0, stream_of(dev))
        if bias is not None:
            out.add_(bias.view(bias_shape))
        return out

    return serve
