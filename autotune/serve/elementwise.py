"""The drop-in's elementwise kernels on the GPU (``autotune.kernels.elementwise``): compiled once per kernel, dtype
and device, launched on torch tensors' device pointers on torch's current stream (so CUDA graphs capture them like
the GEMM or convolution before them). Each function returns False or None, launching nothing, where its kernel does
not take the call (another dtype, a layout it does not read); the caller then uses torch's ops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..build.compiler import compile_source
from ..build.templates import render_file
from ..kernels.elementwise import EPILOGUE, SILU_MUL, THREADS, Elementwise, grid, packs, vec
from ..measure import streams
from ..measure.evaluate import load_kernel
from .launcher import packed_scalars, pointer

_loaded: dict[tuple[str, str, int, bool], tuple[Any, int]] = {}
_launches: dict[tuple, tuple[tuple[int, int, int], tuple[Any, ...]]] = {}  # sizes -> (grid, packed scalars)
_MOST_LAUNCHES = 1024  # sizes kept; a model has a few dozen


def _function(kernel: Elementwise, dtype: str, device: int, vector: bool = False) -> tuple[Any, int] | None:
    """The loaded kernel for ``dtype`` on ``device`` (``vector``: its 16-byte-pack form) and the device's SM
    count; None while a CUDA graph is being captured and it is not loaded yet (loading a module is no call to make
    inside a capture)."""
    key = (kernel.kernel_name, dtype, device, vector)
    got = _loaded.get(key)
    if got is None:
        if streams.capturing():
            return None
        got = _loaded[key] = _load(kernel, dtype, device, vector)
    return got


def _load(kernel: Elementwise, dtype: str, device: int, vector: bool) -> tuple[Any, int]:
    import cupy as cp

    with cp.cuda.Device(device) as dev:
        source = render_file(kernel.template, kernel.context(dtype, vector))
        compiled = compile_source(source, kernel.kernel_name, f"sm_{dev.compute_capability}")
        if not compiled.ok:
            raise RuntimeError(f"the {kernel.kernel_name} kernel did not compile: {compiled.error}")
        return load_kernel(compiled, 0), dev.attributes["MultiProcessorCount"]


def _sized(key: tuple, rows: int, cols: int, sms: int, scalars: Callable[[], tuple]) -> tuple[tuple[int, ...], tuple]:
    """The grid and the packed scalar arguments (``scalars()``) of a launch over rows x cols with these sizes, made
    once per ``key`` (NumPy scalars converted by CuPy on every launch cost microseconds of host time a call)."""
    got = _launches.get(key)
    if got is None:
        if len(_launches) >= _MOST_LAUNCHES:
            _launches.clear()
        got = _launches[key] = (grid(rows, cols, sms), packed_scalars(scalars()))
    return got


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def conv_epilogue(y: Any, bias: Any, z: Any, relu: bool, nhwc: bool) -> bool:
    """``y = relu(y + bias + z)`` in place (torch tensors; ``bias`` [K] or None, ``z`` like ``y`` or None)."""
    import numpy as np

    dtype = _dtype(y)
    if dtype not in EPILOGUE.dtypes or any(t is not None and t.dtype != y.dtype for t in (bias, z)):
        return False
    if z is not None and (z.shape != y.shape or z.stride() != y.stride() or z.get_device() != y.get_device()):
        return False
    if bias is not None and (not bias.is_contiguous() or bias.get_device() != y.get_device()):
        return False
    device = y.get_device()
    loaded = _function(EPILOGUE, dtype, device)
    if loaded is None:
        return False
    fn, sms = loaded
    _, k, p, q = y.shape
    total = y.numel()
    blocks, scalars = _sized(
        ("epilogue", total, k, p * q, nhwc, relu, sms), 1, total, sms,
        lambda: (np.int64(total), np.int32(k), np.int32(p * q), np.int32(nhwc), np.int32(relu)),
    )  # fmt: skip
    args = (pointer(y.data_ptr()), pointer(0 if bias is None else bias.data_ptr()),
            pointer(0 if z is None else z.data_ptr()), *scalars)  # fmt: skip
    fn(blocks, (THREADS, 1, 1), args, stream=streams.stream_of_torch(device))
    return True


def _row_stride(t: Any) -> int | None:
    """The distance between rows of ``t`` seen as [rows, last dim] with dense rows, or None when its rows are not
    evenly spaced that way."""
    if t.dim() == 0 or t.stride(-1) != 1:
        return None
    if t.dim() == 1:
        return t.shape[-1]
    ld = t.stride(-2)
    for i in range(t.dim() - 2):
        if t.shape[i] > 1 and t.stride(i) != t.stride(i + 1) * t.shape[i + 1]:
            return None
    return ld


def silu_mul(a: Any, b: Any, packed_only: bool = False) -> Any:
    """``silu(a) * b`` as a new dense tensor, or None where the kernel does not take ``a`` and ``b``
    (``packed_only``: nor where it cannot read them in 16-byte packs)."""
    import numpy as np

    dtype = _dtype(a)
    if dtype not in SILU_MUL.dtypes or b.dtype != a.dtype or b.shape != a.shape or a.numel() == 0:
        return None
    lda, ldb = _row_stride(a), _row_stride(b)
    device = a.get_device()
    if lda is None or ldb is None or device < 0 or b.get_device() != device:
        return None
    import torch

    cols = a.shape[-1]
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    vector = packs(dtype, cols, (lda, ldb), (a.data_ptr(), b.data_ptr(), out.data_ptr()))
    if packed_only and not vector:
        return None
    loaded = _function(SILU_MUL, dtype, device, vector)
    if loaded is None:
        return None
    fn, sms = loaded
    rows = a.numel() // cols
    blocks, scalars = _sized(("silu_mul", rows, cols, lda, ldb, vector, dtype, sms), rows,
                             cols // vec(dtype) if vector else cols, sms,
                             lambda: (np.int64(rows), np.int32(cols), np.int64(lda), np.int64(ldb)))  # fmt: skip
    args = (pointer(out.data_ptr()), pointer(a.data_ptr()), pointer(b.data_ptr()), *scalars)
    fn(blocks, (THREADS, 1, 1), args, stream=streams.stream_of_torch(device))
    return out
