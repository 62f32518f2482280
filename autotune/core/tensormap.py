"""Tensor maps for Hopper's tensor memory accelerator (TMA): the 128-byte ``CUtensorMap`` a kernel's
``cp.async.bulk.tensor`` copies read, made by the driver's ``cuTensorMapEncodeTiled`` (cuda.h), which CuPy
does not wrap, so it is called through ctypes. A map names one operand's address, so it is made per operand and
passed by value (a one-element NumPy array of 128 bytes: CuPy passes size-one arrays by value).

Example (on a GPU)::

    >>> m = tiled_2d_f32(b.data.ptr, width=4096, height=4096, row_bytes=4096 * 4, box=(32, 32))
    >>> m.nbytes
    128
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from .errors import AutotuneError

MAP_BYTES = 128
# enum values of cuda.h (CUDA 12 and 13)
FLOAT16 = 6  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16
FLOAT32 = 7  # CU_TENSOR_MAP_DATA_TYPE_FLOAT32
BFLOAT16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
SWIZZLE_32B = 1  # CU_TENSOR_MAP_SWIZZLE_32B: the two 16-byte pieces of each 32 bytes swapped by bit 7 of the address
SWIZZLE_64B = 2  # CU_TENSOR_MAP_SWIZZLE_64B: 16-byte pieces of each 64 bytes permuted by bits 7..8 of the address
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B: 16-byte pieces of each 128 bytes permuted by bits 7..9
INTERLEAVE_NONE = 0
L2_PROMOTION_NONE = 0
L2_PROMOTION_256B = 3
L2_PROMOTIONS = {0: L2_PROMOTION_NONE, 64: 1, 128: 2, 256: L2_PROMOTION_256B}  # bytes -> CU_TENSOR_MAP_L2_PROMOTION_*
OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements past the tensor's edges read as zeros
ELEMENT_BYTES = {FLOAT16: 2, FLOAT32: 4, BFLOAT16: 2}


class TensorMapError(AutotuneError):
    """The driver refused to make a tensor map, or there is no driver."""


@functools.cache
def _encode() -> Any:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise TensorMapError(f"tensor maps need the CUDA driver (libcuda.so.1), which cannot be loaded: {exc}") from exc
    fn = cuda.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    ptr, enum = ctypes.c_void_p, ctypes.c_int
    fn.argtypes = [ptr, enum, ctypes.c_uint32, ptr, ptr, ptr, ptr, ptr, enum, enum, enum, enum]
    return fn


def tiled_2d_f32(ptr: int, width: int, height: int, row_bytes: int, box: tuple[int, int], swizzle: int = SWIZZLE_128B,
                 l2_promotion: int = L2_PROMOTION_NONE):  # fmt: skip
    """The map of a row-major float32 matrix at device address ``ptr`` (``height`` rows of ``width`` floats,
    ``row_bytes`` apart), copied in boxes of ``box`` = (columns, rows); as a one-element array of 128 bytes.
    ``l2_promotion``: cuda.h's CU_TENSOR_MAP_L2_PROMOTION_* (0 none, 1-3 64, 128, 256 bytes)."""
    return tiled_2d(ptr, width, height, row_bytes, box, swizzle, l2_promotion, FLOAT32)


def tiled_2d(ptr: int, width: int, height: int, row_bytes: int, box: tuple[int, int], swizzle: int = SWIZZLE_128B,
             l2_promotion: int = L2_PROMOTION_NONE, dtype: int = FLOAT32):  # fmt: skip
    """``tiled_2d_f32`` for any element type of ``ELEMENT_BYTES`` (cuda.h's CU_TENSOR_MAP_DATA_TYPE_*)."""
    import numpy as np

    if ptr % 16 or row_bytes % 16:
        raise TensorMapError(f"a tensor map needs 16-byte aligned rows (address {ptr:#x}, {row_bytes} bytes a row)")
    out = np.zeros(1, dtype=np.dtype((np.void, MAP_BYTES)))
    dims = (ctypes.c_uint64 * 2)(width, height)
    strides = (ctypes.c_uint64 * 1)(row_bytes)
    boxdim = (ctypes.c_uint32 * 2)(*box)
    elem = (ctypes.c_uint32 * 2)(1, 1)
    rc = _encode()(out.ctypes.data, dtype, 2, ptr, dims, strides, boxdim, elem, INTERLEAVE_NONE, swizzle,
                   l2_promotion, OOB_FILL_ZERO)  # fmt: skip
    if rc != 0:
        raise TensorMapError(
            f"cuTensorMapEncodeTiled refused a {height} x {width} map of {ELEMENT_BYTES[dtype]}-byte elements with "
            f"{box[0]} x {box[1]} boxes (CUresult {rc})"
        )
    return out
