"""What a GPU allows a kernel launch: shared memory, registers, threads and grid sizes (``DeviceLimits``).

Read from the device (``from_device``, CuPy imported lazily) or, for an offline compile, taken from the
per-architecture table ``ARCH_LIMITS``. This is the only module that states a device limit: kernel checks take a
``DeviceLimits`` and never keep their own copy.

The table is the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" (Compute
Capabilities appendix, https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html):

    compute capability            8.0     8.6     8.7     8.9     9.0
    threads per SM                2048    1536    2048    1536    2048
    resident blocks per SM        32      16      16      24      32
    shared memory per SM          164 KB  100 KB  164 KB  100 KB  228 KB
    shared memory per block       163 KB  99 KB   163 KB  99 KB   227 KB   (dynamic, after the opt-in)
    and for all five: 64 K 32-bit registers per SM and per block, 255 per thread, 1024 threads per block,
    grid (2**31 - 1, 65535, 65535), 1 KB of shared memory reserved by the system per resident block.

Example::

    >>> for_arch("sm_90a").max_shared_per_block
    232448
    >>> for_arch("sm_86").threads_per_sm
    1536
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

KB = 1024


@dataclass(frozen=True)
class DeviceLimits:
    """The launch limits of one GPU (or one architecture), in bytes, registers, threads and blocks."""

    arch: str  # e.g. "sm_90" (never the "a" suffix: sm_90a's limits are sm_90's)
    max_shared_per_block: int  # dynamic shared memory one block may use after opting in
    shared_per_sm: int
    shared_reserved_per_block: int  # taken by the system from an SM's shared memory for every resident block
    registers_per_sm: int
    registers_per_block: int
    registers_per_thread: int
    threads_per_block: int
    threads_per_sm: int
    blocks_per_sm: int
    max_grid: tuple[int, int, int]
    cluster_blocks: int = 8  # blocks in a portable thread-block cluster (sm_90; the older GPUs have no clusters)

    @property
    def max_grid_x(self) -> int:
        return self.max_grid[0]

    @property
    def max_grid_y(self) -> int:
        return self.max_grid[1]

    @property
    def max_grid_z(self) -> int:
        return self.max_grid[2]


def _ampere_like(arch: str, shared_kb: int, threads_per_sm: int, blocks_per_sm: int) -> DeviceLimits:
    """A row of the table: what differs between 8.0 and 9.0 is shared memory, threads and blocks per SM."""
    return DeviceLimits(
        arch=arch,
        max_shared_per_block=(shared_kb - 1) * KB,
        shared_per_sm=shared_kb * KB,
        shared_reserved_per_block=1 * KB,
        registers_per_sm=64 * KB,
        registers_per_block=64 * KB,
        registers_per_thread=255,
        threads_per_block=1024,
        threads_per_sm=threads_per_sm,
        blocks_per_sm=blocks_per_sm,
        max_grid=(2**31 - 1, 65535, 65535),
    )


ARCH_LIMITS: dict[str, DeviceLimits] = {
    "sm_80": _ampere_like("sm_80", 164, 2048, 32),
    "sm_86": _ampere_like("sm_86", 100, 1536, 16),
    "sm_87": _ampere_like("sm_87", 164, 2048, 16),
    "sm_89": _ampere_like("sm_89", 100, 1536, 24),
    "sm_90": _ampere_like("sm_90", 228, 2048, 32),
}
SM90 = ARCH_LIMITS["sm_90"]  # what a caller that names no device gets (the H200 the tuned/ entries come from)


def for_arch(arch: str) -> DeviceLimits:
    """The table's limits for ``arch`` ("sm_80" ... "sm_90", an "a" suffix allowed); ValueError names the known
    ones for any other."""
    base = re.sub(r"a$", "", arch.strip())
    if base not in ARCH_LIMITS:
        raise ValueError(f"no device limits are known for {arch!r}; expected one of {', '.join(ARCH_LIMITS)}")
    return ARCH_LIMITS[base]


# CuPy's device attribute for each field (the CUDA driver's CU_DEVICE_ATTRIBUTE_* names without the prefix)
_ATTRIBUTES = {
    "max_shared_per_block": "MaxSharedMemoryPerBlockOptin",
    "shared_per_sm": "MaxSharedMemoryPerMultiprocessor",
    "shared_reserved_per_block": "ReservedSharedMemoryPerBlock",
    "registers_per_sm": "MaxRegistersPerMultiprocessor",
    "registers_per_block": "MaxRegistersPerBlock",
    "threads_per_block": "MaxThreadsPerBlock",
    "threads_per_sm": "MaxThreadsPerMultiProcessor",
    "blocks_per_sm": "MaxBlocksPerMultiprocessor",
}


def limits_from_attributes(arch: str, attributes: dict[str, Any]) -> DeviceLimits:
    """Limits from a device's attributes (``cupy.cuda.Device().attributes``); an attribute the driver does not
    report keeps the architecture table's value (or sm_90's for an architecture the table lacks)."""
    table = ARCH_LIMITS.get(re.sub(r"a$", "", arch), SM90)
    fields = {name: int(attributes.get(attr, getattr(table, name))) for name, attr in _ATTRIBUTES.items()}
    grid = tuple(int(attributes.get(f"MaxGridDim{axis}", table.max_grid[i])) for i, axis in enumerate("XYZ"))
    return DeviceLimits(arch=arch, registers_per_thread=table.registers_per_thread, max_grid=grid, **fields)  # type: ignore[arg-type]


@functools.cache
def from_device(device: int = 0) -> DeviceLimits:
    """The limits of CUDA device ``device``, read once through CuPy (imported here, so ``import autotune`` needs no
    GPU). Raises what CuPy raises when there is no device."""
    import cupy as cp

    dev = cp.cuda.Device(device)
    return limits_from_attributes(f"sm_{dev.compute_capability}", dict(dev.attributes))


def multiprocessors() -> int | None:
    """The streaming multiprocessors of the current CUDA device, for grids of persistent blocks; None without a
    GPU (a persistent kernel then gets a block per tile, which is also correct). Not a limit: no check uses it."""
    try:
        import cupy as cp

        return _multiprocessors(cp.cuda.runtime.getDevice())
    except Exception:  # no CuPy, no driver, no device: the caller plans without it
        return None


@functools.cache
def _multiprocessors(device: int) -> int:
    import cupy as cp

    return int(cp.cuda.Device(device).attributes["MultiProcessorCount"])
