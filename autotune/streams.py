"""Launch on the caller's stream: CuPy's current stream for CuPy arrays, torch's for torch tensors.

A call with torch tensors runs inside ``torch_stream()``: CuPy's current stream becomes torch's current
stream (a CuPy view of the same handle, made once per handle), so the kernels order with the caller's
torch work and are recorded by ``torch.cuda.graph`` capture. Torch is imported only when a torch tensor
arrives (or is already imported, for the capture check).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

_external: dict[tuple[int, int], Any] = {}  # (device, stream handle) -> CuPy stream on that handle


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def cupy_stream(ptr: int, device: int) -> Any:
    """A CuPy stream object for an existing CUDA stream handle (cached; the owner keeps it alive)."""
    stream = _external.get((device, ptr))
    if stream is None:
        import cupy as cp

        with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream in favour of a protocol torch may lack
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = _external[(device, ptr)] = cp.cuda.ExternalStream(ptr, device)
    return stream


def torch_stream() -> Any:
    """CuPy's view of torch's current stream on the current device (use as a context manager)."""
    import torch

    s = torch.cuda.current_stream()
    return cupy_stream(s.cuda_stream, s.device.index)


@contextlib.contextmanager
def torch_on_cupy_stream() -> Iterator[None]:
    """Run torch work on CuPy's current stream (a no-op when torch's current stream is that stream already)."""
    import cupy as cp
    import torch

    ptr = cp.cuda.get_current_stream().ptr
    if torch.cuda.current_stream().cuda_stream == ptr:
        yield
        return
    with torch.cuda.stream(torch.cuda.ExternalStream(ptr)):
        yield


def capturing() -> bool:
    """Whether the current stream (CuPy's, or torch's when torch is loaded) is being captured into a graph."""
    import cupy as cp

    try:
        if cp.cuda.get_current_stream().is_capturing():
            return True
    except cp.cuda.runtime.CUDARuntimeError as exc:  # the legacy stream, queried while another stream captures
        # only the stream-capture errors (cudaErrorStreamCapture*, 900-908) mean a capture; no device means none
        return getattr(exc, "status", None) in range(900, 909)
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


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


def gemm_torch(core: Any, a: Any, b: Any, out: Any, alpha: float, beta: float, precision: str | None,
               tuned_dir: Any) -> Any:  # fmt: skip
    """gemm() with torch tensors: operands prepared by torch (copies only where the kernels cannot read them
    in place), ``out`` allocated by torch, everything on torch's current stream. ``core`` is runtime._gemm."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 2 and b.dim() == 2):
        with torch_stream():
            return core(a, b, out, alpha, beta, precision, tuned_dir)  # its checks say what is wrong
    transposable = not (a.dtype == torch.float32 and precision is None)  # fp32 SIMT kernels read row-major only
    a, b = torch_operand(a, transposable), torch_operand(b, transposable)
    target = None
    if out is None and beta == 0 and a.shape[1] == b.shape[0] and a.dtype == b.dtype:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    elif isinstance(out, torch.Tensor) and (out.data_ptr() % 16 or not out.is_contiguous()):
        target, out = out, out.clone(memory_format=torch.contiguous_format)
    with torch_stream():
        result = core(a, b, out, alpha, beta, precision, tuned_dir, None, (a, b, out))
    if target is not None:
        return target.copy_(result)
    return result


def conv_torch(core: Any, x: Any, w: Any, stride: int, padding: int, layout: str, out: Any, tuned_dir: Any) -> Any:
    """conv2d() with torch tensors: x and w made C-contiguous and aligned by torch where needed, ``out``
    allocated by torch, everything on torch's current stream. ``core`` is runtime._conv2d."""
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
