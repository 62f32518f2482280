"""The SIMT GEMM template (templates/gemm/simt.cu.j2): block, warp and register tiled, fp32 on CUDA cores,
layout NN.

    block tile   BM x BN x BK, (BM/WM) x (BN/WN) warps; DBUF: two shared stages; PAD floats after each row
    warp tile    WM x WN in WMITER x WNITER sub-tiles
    thread tile  TM x TN per sub-tile; VEC-wide loads of A and B

Every check here is mirrored by a ``static_assert`` in the template.

Example::

    >>> TEMPLATE.derived(dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True))
    {'THREADS': 256, 'WMITER': 1, 'SHARED_BYTES': 16896}
"""

from __future__ import annotations

from typing import Any

from ..core.limits import DeviceLimits
from .base import Launch, Params
from .gemm_problem import MAX_ACCUMULATORS, GemmTemplate

PARAMS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "VEC", "PAD", "DBUF")


def _tiling_reason(p: Params, wmiter: int) -> str | None:
    """Why the warp and thread tiles do not tile the block, or None."""
    if p["WM"] % wmiter or p["WN"] % p["WNITER"]:
        return "warp sub-tiles must divide the warp tile"
    wsubm, wsubn = p["WM"] // wmiter, p["WN"] // p["WNITER"]
    if wsubm % p["TM"] or wsubn % p["TN"] or (wsubm // p["TM"]) * (wsubn // p["TN"]) != 32:
        return "the 32 lanes of a warp must tile a warp sub-tile exactly"
    return None


class SimtTemplate(GemmTemplate):
    name = "simt"
    params = PARAMS
    dtypes = ("float32",)
    layouts = ("NN",)
    kinds = (("PAD", "int>=0"), ("DBUF", "bool"))
    description = "block, warp and register tiled SIMT"
    variant_named = False

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        p = params
        threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
        per_iter = 32 * p["TM"] * p["TN"] * p["WNITER"]
        wmiter = (p["WM"] * p["WN"]) // per_iter
        stages = 2 if p["DBUF"] else 1
        smem = stages * p["BK"] * (p["BM"] + p["PAD"] + p["BN"] + p["PAD"]) * 4
        return {"THREADS": threads, "WMITER": wmiter, "SHARED_BYTES": smem}

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        p = params
        if p["BM"] % p["WM"] or p["BN"] % p["WN"]:
            return "warp tile WMxWN must divide block tile BMxBN"
        if (p["WM"] * p["WN"]) % (32 * p["TM"] * p["TN"] * p["WNITER"]):
            return "warp tile WM*WN must be a multiple of 32*TM*TN*WNITER"
        d = self.derived(p)
        wmiter, threads = d["WMITER"], d["THREADS"]
        reason = _tiling_reason(p, wmiter)
        if reason:
            return reason
        if threads > limits.threads_per_block:
            return f"{threads} threads per block exceeds {limits.threads_per_block}"
        if p["VEC"] not in (1, 2, 4):  # the template has float, float2 and float4 loads (Vec<1|2|4>)
            return "VEC must be 1, 2 or 4"
        if p["BK"] % p["VEC"] or p["BN"] % p["VEC"]:
            return "VEC must divide BK and BN"
        if (p["BM"] * p["BK"] // p["VEC"]) % threads or (p["BK"] * p["BN"] // p["VEC"]) % threads:
            return "tile loads must split evenly over the threads"
        if wmiter * p["TM"] * p["WNITER"] * p["TN"] > MAX_ACCUMULATORS:
            return f"more than {MAX_ACCUMULATORS} accumulators per thread"
        return None

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        if problem.layout != "NN":
            return f"simt computes layout NN only, not {problem.layout}"
        rows = self.launch(params, problem, "").grid[1]
        if rows > limits.max_grid_y:
            return f"needs {rows} row blocks, more than the {limits.max_grid_y} a grid allows; use a larger BM"
        return None

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        d = self.derived(params)
        grid = (-(-problem.N // params["BN"]), -(-problem.M // params["BM"]), 1)
        return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])

    def ladder(self, params: Params) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """As tuned; without double buffering; without padding; without vector loads; with 4x4 register fragments
        (the same outputs per thread, cut finer: the template cannot drop register tiling for a given warp tile);
        and the naive kernel, with no shared-memory or register tiling at all."""
        switches = (
            ("without double buffering", {"DBUF": False}),
            ("without shared-memory padding", {"PAD": 0}),
            ("without vector loads (VEC=1)", {"VEC": 1}),
            ("4x4 register fragments (TM=TN=4, WNITER=1; same outputs per thread)", {"TM": 4, "TN": 4, "WNITER": 1}),
        )
        return (
            ("as tuned", self.name, dict(params)),
            *((label, self.name, {**params, **change}) for label, change in switches),
            ("naive: no shared-memory or register tiling", "naive", {"BX": 16, "BY": 16}),
        )

    def c_abi(self) -> str:
        return "simt: (const float* A, const float* B, float* C, int M, int N, int K, float alpha, float beta)."


TEMPLATE = SimtTemplate()
