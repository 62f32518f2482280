"""Launch on the caller's stream: CuPy's current stream for CuPy arrays, torch's for torch tensors.

The first call of a signature with torch tensors runs inside ``torch_stream()``: CuPy's current stream
becomes torch's current stream (a CuPy view of the same handle, made once per handle), so the kernels order
with the caller's torch work and are recorded by ``torch.cuda.graph`` capture. Later calls (``autotune.torch``'s
fast serve, ``gemm()``'s hot path) pass ``stream_of_torch(device)`` to the launch instead, read per call: no
stream context is entered. Torch is imported only when a torch tensor arrives (or is already imported, for
the capture check).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator
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


def _raw_reader() -> Callable[[int], int]:
    """torch's C accessor of the current stream's handle (CUDA builds have it), else the public path."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else lambda device: torch.cuda.current_stream(device).cuda_stream


_raw: Callable[[int], int] | None = None


def stream_of_torch(device: int) -> Any:
    """CuPy's stream object for torch's current stream on ``device``, to pass as a launch's ``stream=``.

    Read on every call, never cached per device: a ``torch.cuda.stream(...)`` context or a graph capture
    changes the current stream between two calls with nothing to tell us. The handle costs one C call; its
    CuPy object is made once per handle."""
    global _raw
    if _raw is None:
        _raw = _raw_reader()
    ptr = _raw(device)
    stream = _external.get((device, ptr))
    return stream if stream is not None else cupy_stream(ptr, device)


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
