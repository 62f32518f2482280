"""The tensor maps of a ``wgmma`` launch (templates/gemm/wgmma.cu.j2): A's, B's and C's, made per operand address
when the kernel is launched (a few of each are kept: making one is host work), passed by value.

The maps describe the problem the kernel computes. With SWAP_AB that is C^T = B^T A^T (``gemm_wgmma.swapped``):
its A is the caller's B, its B the caller's A, and its C the caller's C read column-major, so C's map then has
the caller's rows of N elements, and boxes of 64 of them (128 bytes) x the tile's BN rows of C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .template import LaunchBound

BK = 64  # elements of K per stage (the template's BK): one 128-byte swizzle row of a K-major tile


@dataclass(frozen=True)
class CMap:
    """C's map as the kernel stores it: ``width`` elements a row (contiguous), ``height`` rows, boxes of ``box``
    (elements, rows), ``swizzle`` cuda.h's CU_TENSOR_MAP_SWIZZLE_*."""

    width: int
    height: int
    box: tuple[int, int]
    swizzle: int


class TensorMaps(LaunchBound):
    """K-major operands (A in layout N?, B in ?T) are copied in boxes of 64 K x ``bm`` (A) or ``bn_box`` (B) rows,
    M/N-major ones in boxes of 64 M (N) x 64 K rows, all 128-byte swizzled with L2 promotion ``promotion`` (cuda.h's
    enum); C through ``c`` (None without the TMA store: 128 zero bytes the kernel never reads), 256-byte promotion.
    ``problem``: the one the kernel computes; ``swap``: it is the caller's with A and B swapped (SWAP_AB)."""

    def __init__(self, problem: Any, bm: int, bn_box: int, promotion: int, c: CMap | None, swap: bool = False) -> None:
        self.problem, self.bm, self.bn_box, self.promotion, self.c, self.swap = problem, bm, bn_box, promotion, c, swap
        self._maps: tuple[dict[int, Any], ...] = ({}, {}, {})

    def bind(self, a: Any, b: Any, out: Any) -> tuple[Any, Any, Any]:
        """The maps of the kernel's A, B and C (with SWAP_AB, the caller's B, A and C)."""
        return self._map(0, a.data.ptr), self._map(1, b.data.ptr), self._map(2, out.data.ptr)

    def _map(self, which: int, ptr: int) -> Any:
        cache = self._maps[which]
        found = cache.get(ptr)
        if found is None:
            found = self._make(which, ptr)
            if len(cache) >= 8:
                cache.clear()
            cache[ptr] = found
        return found

    def _make(self, which: int, ptr: int) -> Any:
        import numpy as np

        from ..core.tensormap import BFLOAT16, FLOAT16, L2_PROMOTION_256B, MAP_BYTES, SWIZZLE_128B, tiled_2d

        p = self.problem
        dtype = BFLOAT16 if p.dtype == "bfloat16" else FLOAT16
        if which == 2:
            if self.c is None:
                return np.zeros(1, dtype=np.dtype((np.void, MAP_BYTES)))
            c = self.c
            return tiled_2d(ptr, c.width, c.height, c.width * 2, c.box, c.swizzle, L2_PROMOTION_256B, dtype)
        trans = p.layout[which] == "T"
        rows_mn = p.M if which == 0 else p.N
        tile = self.bm if which == 0 else self.bn_box
        k_major = trans if which == 1 else not trans
        if k_major:  # stored (MN) x K: rows of K
            width, height, box = p.K, rows_mn, (BK, tile)
        else:  # stored K x (MN): rows of M or N
            width, height, box = rows_mn, p.K, (64, BK)
        return tiled_2d(ptr, width, height, width * 2, box, SWIZZLE_128B, self.promotion, dtype)
