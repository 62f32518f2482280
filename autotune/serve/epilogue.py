"""The fused convolution's epilogue on the GPU (``autotune.kernels.conv_epilogue``): compiled once per dtype and
device, launched on torch tensors' device pointers on torch's current stream (so it is captured by CUDA graphs
like the convolution before it). ``apply`` returns False, launching nothing, where the kernel does not take the
call (another dtype, a residual not laid out like the output); the caller then uses torch's ops."""

from __future__ import annotations

from typing import Any

from ..build.compiler import compile_source
from ..build.templates import render_file
from ..kernels import conv_epilogue as ep
from ..measure import streams
from ..measure.evaluate import load_kernel

_loaded: dict[tuple[str, int], tuple[Any, int]] = {}


def _function(dtype: str, device: int) -> tuple[Any, int] | None:
    """The loaded kernel for ``dtype`` on ``device`` and the device's SM count; None while a CUDA graph is being
    captured and it is not loaded yet (loading a module is no call to make inside a capture)."""
    got = _loaded.get((dtype, device))
    if got is None:
        if streams.capturing():
            return None
        got = _loaded[(dtype, device)] = _load(dtype, device)
    return got


def _load(dtype: str, device: int) -> tuple[Any, int]:
    import cupy as cp

    with cp.cuda.Device(device) as dev:
        compiled = compile_source(render_file(ep.TEMPLATE, ep.context(dtype)), ep.KERNEL_NAME,
                                  f"sm_{dev.compute_capability}")  # fmt: skip
        if not compiled.ok:
            raise RuntimeError(f"the convolution epilogue did not compile: {compiled.error}")
        return load_kernel(compiled, 0), dev.attributes["MultiProcessorCount"]


def apply(y: Any, bias: Any, z: Any, relu: bool, nhwc: bool) -> bool:
    """``y = relu(y + bias + z)`` in place (torch tensors; ``bias`` [K] or None, ``z`` like ``y`` or None)."""
    import numpy as np

    dtype = str(y.dtype).removeprefix("torch.")
    if dtype not in ep.DTYPES or any(t is not None and t.dtype != y.dtype for t in (bias, z)):
        return False
    if z is not None and (z.shape != y.shape or z.stride() != y.stride() or z.get_device() != y.get_device()):
        return False
    if bias is not None and (not bias.is_contiguous() or bias.get_device() != y.get_device()):
        return False
    n, k, p, q = y.shape
    device = y.get_device()
    loaded = _function(dtype, device)
    if loaded is None:
        return False
    fn, sms = loaded
    total = y.numel()
    args = (np.uint64(y.data_ptr()), np.uint64(0 if bias is None else bias.data_ptr()),
            np.uint64(0 if z is None else z.data_ptr()), np.int64(total), np.int32(k), np.int32(p * q),
            np.int32(nhwc), np.int32(relu))  # fmt: skip
    fn(ep.grid(total, sms), (ep.THREADS, 1, 1), args, stream=streams.stream_of_torch(device))
    return True
