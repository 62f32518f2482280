"""A compiled kernel of ours for one problem, called like the function it computes (``runtime.load`` builds it).

Two ways to launch:

- ``launcher(a, b, out, alpha, beta)``: CuPy arrays, on CuPy's current stream (the array-level API);
- ``launcher.launch_ptrs(a, b, out, alpha, beta, stream)``: raw device pointers (ints, e.g. torch's
  ``data_ptr()``) on an explicit stream object (anything with ``.ptr``, e.g. ``streams.cupy_stream``), the
  torch drop-in's per-call path: no array object is built and no stream context is entered.

A launcher of a problem with the bias epilogue (``GemmProblem.bias``, see ``serve.bias_epilogue``) takes the bias
(an array, or a pointer for ``launch_ptrs``) after them: its kernel's last argument.

Split-K scratch buffers are kept per stream (launches on one stream are ordered; two streams may overlap).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..core import hooks
from ..kernels import FAMILIES
from ..kernels.template import Template

_PER_THREAD_STREAM = 2  # cudaStreamPerThread: one handle, a different stream in every thread


def _stream_key() -> tuple[int, int]:
    """The current CuPy stream: its handle, and the thread for the per-thread default stream."""
    import cupy as cp

    return stream_key(cp.cuda.get_current_stream().ptr)


def stream_key(ptr: int) -> tuple[int, int]:
    """The scratch key of the stream with handle ``ptr``."""
    return ptr, threading.get_ident() if ptr == _PER_THREAD_STREAM else 0


PACKED = True  # False: launch_ptrs passes plain values (benchmarks compare both)
_PTR: Any = None  # CuPy's argument class for a device address, found on the first packing
_VALUE: Any = None  # and for a by-value scalar


def _cupy_args() -> bool:
    """Whether this CuPy has the kernel-argument classes its launch makes from every argument on every call
    (a device address, a by-value scalar); looked up once, on first use (``import autotune`` imports no CuPy)."""
    global _PTR, _VALUE
    if _PTR is None:
        try:
            from cupy.cuda import function
        except ImportError:
            return False
        _PTR, _VALUE = getattr(function, "CIntptr", False), getattr(function, "CNumpyArray", False)
    return bool(_PTR and _VALUE)


def _by_value(x: Any) -> Any:
    """A constant kernel argument as CuPy's by-value object, made once (NumPy scalars; arrays pass as they are)."""
    import numpy as np

    return _VALUE(np.array([x], dtype=x.dtype)) if isinstance(x, np.generic) else x


def packed_scalars(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Constant kernel arguments (NumPy scalars) as CuPy's by-value objects, so that a launch passing them again
    converts nothing (as they are where this CuPy has no such classes)."""
    return tuple(_by_value(v) for v in values) if PACKED and _cupy_args() else values


def pointer(address: int) -> Any:
    """A device address as CuPy's argument object for one (as the int it is where this CuPy has none)."""
    return _PTR(address) if PACKED and _cupy_args() else address


class DevicePointer(int):
    """A device address that templates reading ``x.data.ptr`` (skinny_wgmma's tensor maps) accept as an
    operand; to CuPy's launch it is the plain 64-bit integer it is."""

    __slots__ = ()

    @property
    def data(self) -> DevicePointer:
        return self

    @property
    def ptr(self) -> int:
        return int(self)


class Launcher:
    """A compiled tuned kernel for one (GPU, dtype, layout, shape); call it like the function it computes."""

    def __init__(self, kernel: str, problem: Any, choice: Any, fn: Any, launch: Any, kernel_name: str,
                 new_scratch: Callable[[], tuple[Any, ...]] | None = None) -> None:  # fmt: skip
        self.kernel, self.problem, self.choice = kernel, problem, choice
        self.kernel_name = kernel_name
        self._fn = fn
        self._grid, self._block, self._shared = launch.grid, launch.block, launch.shared_bytes
        # Split-K partial sums and tile counters, one set per stream: launches on one stream are ordered,
        # launches on two streams (two threads calling gemm()) may overlap and must not share them.
        self._new_scratch = new_scratch
        self._scratch: dict[Any, tuple[Any, ...]] = {}
        self._scratch_lock = threading.Lock()
        self._family = FAMILIES[kernel]
        self._args = self._family.args_for(choice.template, choice.params, problem)  # made once: the hot path
        impl = self._family.template(choice.template, choice.params)
        # plain templates pass operands through to the kernel: a pointer is an int; others get a DevicePointer
        self._plain_args = type(impl).takes_scratch is Template.takes_scratch
        self._packed: dict[tuple, tuple[Any, ...] | bool] = {}  # (alpha, beta, stream) -> launch_ptrs' packed arguments
        # templates that make their own arguments (tensor maps of the operands): the whole argument tuple per
        # (operand addresses, alpha, beta, stream), so a call on addresses seen before makes none of it again
        self._bound: dict[tuple, tuple[Any, ...]] = {}
        self.serving: dict[str, Any] = {}  # set by the dispatch: why this kernel serves, what was measured
        self.takes_bias = bool(getattr(problem, "bias", False))  # the kernel's last argument is the bias
        self.provisional = False  # True: decided while a CUDA graph was captured; not remembered

    vendor = False

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.choice.params)

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the configuration came from: the step (exact | online | vendor | nearest | same-arch |
        default), entry key or candidate source, the stored entry's record, why, and the online measurement."""
        return {"step": self.choice.step, "source": self.choice.source, "template": self.choice.template,
                "entry": self.choice.entry, "why": self.serving.get("why"),
                "measurement": self.serving.get("measurement")}  # fmt: skip

    def __call__(self, a: Any, b: Any, out: Any, alpha: float = 1.0, beta: float = 0.0, bias: Any = None) -> Any:
        """Launch on CuPy arrays of the launcher's shape, dtype and layout (C-contiguous; not checked here),
        on CuPy's current stream; through the call observer when one is set (``set_call_observer``)."""
        if hooks.observer is None:
            return self._launch(a, b, out, alpha, beta, bias)
        return hooks.observer(self.kernel, self.problem, lambda: self._launch(a, b, out, alpha, beta, bias))

    def _launch(self, a: Any, b: Any, out: Any, alpha: float = 1.0, beta: float = 0.0, bias: Any = None) -> Any:
        scratch: tuple[Any, ...] = ()
        if self._new_scratch is not None:
            key = _stream_key()
            scratch = self._scratch.get(key) or self._stream_scratch(key)
        args = self._args(a, b, out, alpha, beta, scratch)
        if self.takes_bias:
            args = (*args, bias)
        self._fn(self._grid, self._block, args, shared_mem=self._shared)
        return out

    def launch_ptrs(self, a: int, b: int, out: int, alpha: float, beta: float, stream: Any, bias: int = 0) -> None:
        """Launch on device pointers (the operands as the problem's layout stores them, 16-byte aligned, on the
        launcher's device; ``bias``, where the launcher takes one, aligned to its dtype) on ``stream`` (an object
        with ``.ptr``, e.g. ``streams.cupy_stream``'s); through the call observer when one is set."""
        if hooks.observer is None:
            self._launch_ptrs(a, b, out, alpha, beta, stream, bias)
        else:
            hooks.observer(self.kernel, self.problem, lambda: self._launch_ptrs(a, b, out, alpha, beta, stream, bias))

    def _launch_ptrs(self, a: int, b: int, out: int, alpha: float, beta: float, stream: Any, bias: int = 0) -> None:
        key: Any = None
        scratch: tuple[Any, ...] = ()
        if self._new_scratch is not None:
            key = stream_key(stream.ptr)
            scratch = self._scratch.get(key) or self._scratch_on(stream, key)
        rest = self._packed.get((alpha, beta, key))
        if rest is None:
            rest = self._packed[(alpha, beta, key)] = self._pack(alpha, beta, scratch)
        if rest is not False:
            args = (_PTR(a), _PTR(b), _PTR(out), *rest)  # type: ignore[misc]
        elif self._plain_args:
            args = self._args(a, b, out, alpha, beta, scratch)
        else:
            args = self._bound.get((a, b, out, alpha, beta, key))
            if args is None:
                args = self._bind(a, b, out, alpha, beta, key, scratch)
        if self.takes_bias:
            args = (*args, pointer(bias))
        self._fn(self._grid, self._block, args, shared_mem=self._shared, stream=stream)

    def _bind(self, a: int, b: int, out: int, alpha: float, beta: float, key: Any, scratch: tuple) -> tuple:
        """The template's own arguments for these addresses, kept for the next call on them (a few dozen sets:
        a model's activations come back to the same addresses from torch's caching allocator)."""
        args = self._args(DevicePointer(a), DevicePointer(b), DevicePointer(out), alpha, beta, scratch)
        # CuPy takes exact Python ints only: the template's own arguments hand the operands back as they came
        args = tuple(int(x) if type(x) is DevicePointer else x for x in args)
        if PACKED and _cupy_args():
            args = tuple(_by_value(x) for x in args)
        if len(self._bound) >= 64:
            self._bound.clear()
        self._bound[(a, b, out, alpha, beta, key)] = args
        return args

    def _pack(self, alpha: float, beta: float, scratch: tuple[Any, ...]) -> tuple[Any, ...] | bool:
        """The kernel arguments after the three operand pointers, converted once into CuPy's own argument
        objects (what its launch makes of them on every call otherwise); False where this launcher or this CuPy
        does not allow it (its arguments are then made per call)."""
        if not (PACKED and self._plain_args and _cupy_args()):
            return False
        marks = (object(), object(), object())
        args = self._args(*marks, alpha, beta, scratch)
        if any(x is not m for x, m in zip(args, marks, strict=False)) or any(x is m for x in args[3:] for m in marks):
            return False
        return tuple(_by_value(x) for x in args[3:])

    def _scratch_on(self, stream: Any, key: tuple[int, int]) -> tuple[Any, ...]:
        """``_stream_scratch`` with ``stream`` current: buffers zeroed on it, and its capture state checked."""
        with stream:
            return self._stream_scratch(key)

    def _stream_scratch(self, stream: Any) -> tuple[Any, ...]:
        """This stream's scratch buffers, made on its first launch. Under CUDA graph capture nothing may be
        allocated: the capture stream takes the buffers of a stream that launched before (the warm-up's), so a
        graph must not replay while that stream runs the same launcher."""
        from ..measure.streams import capturing

        with self._scratch_lock:
            scratch = self._scratch.get(stream)
            if scratch is None:
                if self._scratch and capturing():
                    scratch = next(iter(self._scratch.values()))
                else:
                    scratch = self._new_scratch()  # type: ignore[misc]
                self._scratch[stream] = scratch
        return scratch

    def __repr__(self) -> str:
        return f"Launcher({self.kernel_name}, {self.problem.label}, {self.choice.step} from {self.choice.source})"


class StagedLauncher(Launcher):
    """A launcher whose kernel needs others first (``Launch.before``, e.g. im2col_gemm's im2col step): each
    step, then the main kernel, on the current stream. A subclass, so one-launch kernels keep their path."""

    def __init__(self, kernel: str, problem: Any, choice: Any, fn: Any, launch: Any, kernel_name: str,
                 new_scratch: Callable[[], tuple[Any, ...]] | None,
                 steps: tuple[tuple[Any, Any], ...]) -> None:  # fmt: skip
        super().__init__(kernel, problem, choice, fn, launch, kernel_name, new_scratch)
        self._steps = steps  # (function, Step) in launch order

    def _launch(self, a: Any, b: Any, out: Any, alpha: float = 1.0, beta: float = 0.0, bias: Any = None) -> Any:
        scratch: tuple[Any, ...] = ()  # no template with a bias epilogue launches steps before: no bias here
        if self._new_scratch is not None:
            key = _stream_key()
            scratch = self._scratch.get(key) or self._stream_scratch(key)
        self._run(a, b, out, alpha, beta, scratch, {})
        return out

    def _launch_ptrs(self, a: int, b: int, out: int, alpha: float, beta: float, stream: Any, bias: int = 0) -> None:
        a, b, out = DevicePointer(a), DevicePointer(b), DevicePointer(out)
        scratch: tuple[Any, ...] = ()
        if self._new_scratch is not None:
            key = stream_key(stream.ptr)
            scratch = self._scratch.get(key) or self._scratch_on(stream, key)
        self._run(a, b, out, alpha, beta, scratch, {"stream": stream})

    def _run(self, a: Any, b: Any, out: Any, alpha: float, beta: float, scratch: tuple, on: dict) -> None:
        family, choice = self._family, self.choice
        args = family.kernel_args(self.problem, (a, b), out, alpha, beta, scratch)
        step_args = family.before_args(choice.template, choice.params, self.problem, (a, b), scratch)  # type: ignore[attr-defined]
        for (fn, step), sargs in zip(self._steps, step_args, strict=True):
            fn(step.grid, step.block, sargs, shared_mem=step.shared_bytes, **on)
        self._fn(self._grid, self._block, args, shared_mem=self._shared, **on)
