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

from .calls import _env
from .streams import stream_of_torch, torch_stream

Serve = Callable[[Any, Any, Any, float, float], bool]  # (a or x, b or w, out, alpha, beta) -> served?
_hot: dict[tuple, Serve] = {}  # call signature -> how it is served


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
    sig = _gemm_sig(a, b, out, precision, tuned_dir) if (out is not None or beta == 0) else None
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


def conv_torch(core: Any, x: Any, w: Any, stride: int, padding: int, layout: str, out: Any, tuned_dir: Any) -> Any:
    """conv2d() with torch tensors: x and w made C-contiguous and aligned by torch where needed, ``out``
    allocated by torch, everything on torch's current stream. ``core`` is calls._conv2d."""
    import torch

    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)):
        with torch_stream():
            return core(x, w, stride, padding, layout, out, tuned_dir)
    x, w = torch_operand(x, False), torch_operand(w, False)
    target = None
    if isinstance(out, torch.Tensor) and (out.data_ptr() % 16 or not out.is_contiguous()):
        target, out = out, torch.empty(out.shape, dtype=out.dtype, device=out.device)
    with torch_stream():
        result = core(x, w, stride, padding, layout, out, tuned_dir, (x, w))
    if target is not None:
        return target.copy_(result)
    return result
