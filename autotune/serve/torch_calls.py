"""``gemm()`` and ``conv2d()`` with torch tensors: on torch's current stream, temporaries from torch's allocator.

The first call of a signature (shapes, strides, dtypes, devices, the environment) takes the full path: operands
made readable in place by torch where they are not, CuPy views of them, the runtime's launcher. When that call
read everything in place, the signature is remembered with what served it, and later calls take the hot path:
one dict lookup, the operands' ``data_ptr()`` handed to the kernel, launched on torch's current stream (read
per call), or the vendor's torch op. ``runtime.forget_launchers`` forgets the signatures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..measure.streams import stream_of_torch, torch_stream
from .runtime import _env

Serve = Callable[[Any, Any, Any, float, float], bool]  # (a or x, b or w, out, alpha, beta) -> served?
HOT = True  # False: every call takes the full path (benchmarks/dropin_overhead.py measures the path before)
_hot: dict[tuple, Any] = {}  # call signature -> how it is served (gemm: a Serve; conv2d: (x, w, out) -> y or None)


def forget() -> None:
    _hot.clear()


def _device() -> int:
    import cupy as cp

    return cp.cuda.runtime.getDevice()


def torch_operand(t: Any, transposable: bool) -> Any:
    """A torch operand the kernels read in place: row-major, or (``transposable``) a transposed row-major view,
    16-byte aligned; otherwise a torch copy (torch's allocator, so a copy made under graph capture stays valid
    for every replay)."""
    t = t.detach()
    aligned = t.data_ptr() % 16 == 0
    if aligned and t.is_contiguous():
        return t
    if aligned and transposable and t.dim() == 2 and t.t().is_contiguous():
        return t
    return t.contiguous() if aligned or not t.is_contiguous() else t.clone()


def _same(t: Any, u: Any) -> bool:
    """``u`` is ``t`` read in place (same memory, same strides), not a copy."""
    return t.data_ptr() == u.data_ptr() and t.stride() == u.stride()


def serve_ours(launcher: Any, device: int) -> Serve:
    """Launch ``launcher`` on the operands' data pointers on torch's current stream of ``device``; False (not
    served) when a pointer is off a 16-byte boundary."""
    launch = launcher.launch_ptrs

    def serve(a: Any, b: Any, out: Any, alpha: float, beta: float) -> bool:
        ap, bp, op = a.data_ptr(), b.data_ptr(), out.data_ptr()
        if (ap | bp | op) & 15:
            return False
        launch(ap, bp, op, alpha, beta, stream_of_torch(device))
        return True

    return serve


def _gemm_sig(a: Any, b: Any, out: Any, precision: str | None, tuned_dir: Any) -> tuple:
    o = None if out is None else (out.shape, out.stride(), out.dtype, out.get_device())
    return (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, o, a.get_device(), b.get_device(),
            _device(), precision, tuned_dir, _env())  # fmt: skip


def gemm_torch(core: Any, a: Any, b: Any, out: Any, alpha: float, beta: float, precision: str | None,
               tuned_dir: Any) -> Any:  # fmt: skip
    """gemm() with torch tensors. ``core`` is calls._gemm."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 2 and b.dim() == 2):
        with torch_stream():
            return core(a, b, out, alpha, beta, precision, tuned_dir)  # its checks say what is wrong
    sig = _gemm_sig(a, b, out, precision, tuned_dir) if HOT and (out is not None or beta == 0) else None
    serve = _hot.get(sig) if sig is not None else None
    if serve is not None:
        given = out
        if out is None:
            out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
        if serve(a, b, out, alpha, beta):
            return out
        out = given
    return _gemm_full(core, a, b, out, alpha, beta, precision, tuned_dir, sig)


def _gemm_full(core: Any, a: Any, b: Any, out: Any, alpha: float, beta: float, precision: str | None,
               tuned_dir: Any, sig: tuple | None) -> Any:  # fmt: skip
    """The first call of a signature (or one that cannot take the hot path): operands prepared by torch,
    ``out`` allocated by torch, everything on torch's current stream; remembers the signature if it can."""
    import torch

    transposable = not (a.dtype == torch.float32 and precision is None)  # fp32 SIMT kernels read row-major only
    a2, b2 = torch_operand(a, transposable), torch_operand(b, transposable)
    target, given = None, out
    if out is None and beta == 0 and a2.shape[1] == b2.shape[0] and a2.dtype == b2.dtype:
        out = torch.empty((a2.shape[0], b2.shape[1]), dtype=a2.dtype, device=a2.device)
    elif isinstance(out, torch.Tensor) and (out.data_ptr() % 16 or not out.is_contiguous()):
        target, out = out, out.clone(memory_format=torch.contiguous_format)
    seen: dict[str, Any] = {}
    with torch_stream():
        result = core(a2, b2, out, alpha, beta, precision, tuned_dir, None, (a2, b2, out), seen)
    if target is not None:
        return target.copy_(result)
    launcher = seen.get("launcher")
    if sig is not None and launcher is not None and seen.get("in_place") and _same(a, a2) and _same(b, b2):
        _remember(sig, launcher, a.get_device(), given is None or result is given)
    return result


def _remember(sig: tuple, launcher: Any, device: int, out_in_place: bool) -> None:
    if launcher.provisional or not out_in_place or device != sig[9]:
        return
    if launcher.vendor:
        _hot[sig] = serve_vendor(launcher)
    elif hasattr(launcher, "launch_ptrs"):
        _hot[sig] = serve_ours(launcher, device)


def serve_vendor(launcher: Any) -> Serve:
    """The vendor's torch GEMM on the logical operands (on torch's current stream)."""
    torch_gemm = launcher.torch_gemm

    def serve(a: Any, b: Any, out: Any, alpha: float, beta: float) -> bool:
        torch_gemm(a, b, out, alpha, beta)
        return True

    return serve


def _conv_sig(x: Any, w: Any, stride: int, padding: int, layout: str, out: Any, tuned_dir: Any) -> tuple:
    o = None if out is None else (out.shape, out.stride(), out.dtype, out.get_device())
    return (x.shape, x.stride(), w.shape, w.stride(), x.dtype, w.dtype, o, x.get_device(), w.get_device(),
            _device(), stride, padding, layout, tuned_dir, _env())  # fmt: skip


def conv_torch(core: Any, x: Any, w: Any, stride: int, padding: int, layout: str, out: Any, tuned_dir: Any) -> Any:
    """conv2d() with torch tensors. ``core`` is calls._conv2d."""
    import torch

    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)):
        with torch_stream():
            return core(x, w, stride, padding, layout, out, tuned_dir)
    sig = _conv_sig(x, w, stride, padding, layout, out, tuned_dir) if HOT else None
    serve = _hot.get(sig) if sig is not None else None
    if serve is not None:
        y = serve(x, w, out)
        if y is not None:
            return y
    return _conv_full(core, x, w, stride, padding, layout, out, tuned_dir, sig)


def _conv_full(core: Any, x: Any, w: Any, stride: int, padding: int, layout: str, out: Any, tuned_dir: Any,
               sig: tuple | None) -> Any:  # fmt: skip
    """The first call of a signature: x and w made C-contiguous and aligned by torch where needed, ``out``
    allocated by torch, everything on torch's current stream; remembers the signature if all was read in place."""
    import torch

    x2, w2 = torch_operand(x, False), torch_operand(w, False)
    target = None
    if isinstance(out, torch.Tensor) and (out.data_ptr() % 16 or not out.is_contiguous()):
        target, out = out, torch.empty(out.shape, dtype=out.dtype, device=out.device)
    seen: dict[str, Any] = {}
    with torch_stream():
        result = core(x2, w2, stride, padding, layout, out, tuned_dir, (x2, w2), seen)
    if target is not None:
        return target.copy_(result)
    launcher = seen.get("launcher")
    if sig is not None and launcher is not None and seen.get("in_place") and _same(x, x2) and _same(w, w2):
        if not launcher.provisional and x.get_device() == sig[9]:
            _hot[sig] = conv_vendor(launcher) if launcher.vendor else conv_ours(launcher, x, seen["out_shape"])
    return result


def conv_vendor(launcher: Any) -> Callable[[Any, Any, Any], Any]:
    """cuDNN through torch on x and w (into ``out`` when given)."""
    torch_conv = launcher.torch_conv

    def serve(x: Any, w: Any, out: Any) -> Any:
        y = torch_conv(x, w)
        return y if out is None else out.copy_(y)

    return serve


def conv_ours(launcher: Any, like: Any, shape: tuple[int, ...]) -> Callable[[Any, Any, Any], Any]:
    """Our convolution on x's and w's data pointers, into ``out`` or a new output of ``shape`` (dense in the
    call's layout); None (not served) when a pointer is off a 16-byte boundary."""
    import torch

    launch, device, dtype, where = launcher.launch_ptrs, like.get_device(), like.dtype, like.device

    def serve(x: Any, w: Any, out: Any) -> Any:
        y = out if out is not None else torch.empty(shape, dtype=dtype, device=where)
        xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
        if (xp | wp | yp) & 15:
            return None
        launch(xp, wp, yp, 1.0, 0.0, stream_of_torch(device))
        return y

    return serve
