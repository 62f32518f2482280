"""The GPU we run on: identity, limits and the key its results are stored under."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import NoGPUError


@dataclass(frozen=True)
class GPUInfo:
    name: str
    arch: str  # e.g. "sm_90"
    multiprocessors: int
    max_shared_per_block: int  # opt-in limit in bytes
    registers_per_block: int
    registers_per_sm: int
    shared_per_sm: int
    threads_per_sm: int
    l2_bytes: int
    driver: str
    runtime: str
    memory_bytes: int = 0  # global memory; 0 when unknown

    @property
    def key(self) -> str:
        """Directory name under tuned/, e.g. ``nvidia-h200-sm90``."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return f"{slug}-{self.arch.replace('_', '')}"


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def driver_loads() -> bool:
    """Whether the NVIDIA driver's user-space library (libcuda) can be loaded: False on a machine with no driver."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def no_gpu_reason(exc: BaseException) -> str:
    """Why CUDA cannot be used, in words: no driver at all reads differently from an old one.

    The CUDA runtime answers "CUDA driver version is insufficient" both when the driver is too old and when
    there is none; only the first is about versions.
    """
    status = getattr(exc, "status", None)
    if not driver_loads():
        return "there is no NVIDIA driver on this machine (libcuda cannot be loaded), so no GPU can be used"
    if status == 35:  # cudaErrorInsufficientDriver with a driver present: it is older than the runtime
        return "the NVIDIA driver is older than the CUDA runtime CuPy was built for; update the driver"
    if status == 100:  # cudaErrorNoDevice
        return "the NVIDIA driver finds no GPU (check CUDA_VISIBLE_DEVICES)"
    first = (str(exc).splitlines() or [""])[0][:120]
    return f"no usable CUDA GPU ({type(exc).__name__}: {first})"


def current_gpu(device: int | None = None) -> GPUInfo:
    """Describe ``device`` (default: the current one), or raise NoGPUError saying why there is none."""
    try:
        import cupy as cp
    except ImportError:
        raise NoGPUError("CuPy is not installed, so no GPU can be used; install cupy-cuda13x") from None
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - every flavour of "no driver / no device" is told apart in words
        raise NoGPUError(no_gpu_reason(exc)) from None
    if count < 1:
        raise NoGPUError("no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES)")
    dev = cp.cuda.Device(device) if device is not None else cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    attrs = dev.attributes
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return GPUInfo(
        name=name,
        arch=f"sm_{dev.compute_capability}",
        multiprocessors=attrs["MultiProcessorCount"],
        max_shared_per_block=attrs.get("MaxSharedMemoryPerBlockOptin", 48 * 1024),
        registers_per_block=attrs.get("MaxRegistersPerBlock", 64 * 1024),
        registers_per_sm=attrs.get("MaxRegistersPerMultiprocessor", 64 * 1024),
        shared_per_sm=attrs.get("MaxSharedMemoryPerMultiprocessor", 228 * 1024),
        threads_per_sm=attrs.get("MaxThreadsPerMultiProcessor", 2048),
        l2_bytes=attrs.get("L2CacheSize", 0),
        driver=_version(cp.cuda.runtime.driverGetVersion()),
        runtime=_version(cp.cuda.runtime.runtimeGetVersion()),
        memory_bytes=int(props.get("totalGlobalMem", 0)),
    )
