"""How ``wgmma``'s persistent blocks walk the tiles (templates/gemm/wgmma.cu.j2): clusters of CLUSTER_M vertically
adjacent tiles (``groups``), a block each in turn, and with SPLIT > 1 the split tail, the tiles past the last whole
wave cut along K into runs (``Tail``; ``walk`` deals them as the kernel's ``Walk`` does). The problem is the one
the kernel computes (with SWAP_AB the caller's swapped)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .base import Params
from .gemm_wgmma_maps import BK


def split(params: Params) -> int:
    """SPLIT of a configuration; 1 (the tail not split) when it has none (configurations stored before it existed)."""
    return int(params.get("SPLIT", 1))


def groups(params: Params, problem: Any) -> int:
    """Clusters' worth of tiles: CLUSTER_M vertically adjacent tiles each."""
    tiles_m = -(-problem.M // params["BM"])
    return -(-tiles_m // params["CLUSTER_M"]) * -(-problem.N // params["BN"])


@dataclasses.dataclass(frozen=True)
class Tail:
    """The kernel's cut (its ``Walk``): tiles [0, dp) whole, a block each in turn; the sk tiles from dp on split
    into ``pieces`` runs of K's kblocks stages each."""

    kblocks: int
    dp: int
    sk: int
    pieces: int

    @classmethod
    def of(cls, params: Params, problem: Any, blocks: int) -> Tail:
        tiles, kblocks = groups(params, problem), -(-problem.K // BK)
        sk = 0 if split(params) == 1 else tiles if tiles < blocks else tiles % blocks
        return cls(kblocks, tiles - sk, sk, min(split(params), kblocks))

    def unit(self, u: int) -> tuple[int, int, int]:
        """Tail unit u: (tile in raster numbering, first stage, stage past the last); run u // sk of tile u % sk."""
        z, s = divmod(u, self.sk)
        return self.dp + s, self.kblocks * z // self.pieces, self.kblocks * (z + 1) // self.pieces


def walk(params: Params, problem: Any, blocks: int) -> list[list[tuple[int, int, int]]]:
    """Each block's work as the kernel walks it: (tile in raster numbering, first stage, stage past the last)."""
    tail = Tail.of(params, problem, blocks)
    return [
        [(t, 0, tail.kblocks) for t in range(b, tail.dp, blocks)]
        + [tail.unit(u) for u in range(b, tail.sk * tail.pieces, blocks)]
        for b in range(blocks)
    ]
