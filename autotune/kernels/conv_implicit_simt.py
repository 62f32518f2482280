"""The implicit-GEMM conv2d template on CUDA cores (templates/conv/implicit_simt.cu.j2).

fp32 or fp16 storage, fp32 math, NCHW or NHWC (the GEMM view: conv_implicit.py). Block tile BM pixels x BN
channels x BK reduction, TM x TN register tile per thread, double-buffered shared memory (the next tile's loads in
flight during this tile's math), PAD floats per row. Every reason of check() is mirrored by a static_assert.

Example::

    >>> from autotune.kernels.conv_implicit import Shape
    >>> TEMPLATE.launch(dict(BM=128, BN=128, BK=8, TM=8, TN=8, PAD=4), Shape(32 * 56 * 56, 64), "").grid
    (784, 1, 1)
"""

from __future__ import annotations

from typing import Any

from ..core.limits import DeviceLimits
from .base import Launch, Params
from .conv_implicit import check_gemm_view, gemm_view, launch_geometry, pow2
from .conv_problem import ConvTemplate

VEC = 4  # elements per vector load when an operand allows it
MAX_ACCUMULATORS = 64  # TM*TN floats per thread


def shared_bytes(params: Params) -> int:
    """Two stages of A (BK rows of BM + PAD floats) and B (BK rows of BN + PAD floats)."""
    p = params
    return 2 * p["BK"] * (p["BM"] + p["BN"] + 2 * p["PAD"]) * 4


def load_split(params: Params, threads: int, v: dict[str, Any]) -> dict[str, Any]:
    """How the threads split a tile's loads: vector widths and thread grids of A (by layout) and of B."""
    p = params
    la, lb = max(1, p["BM"] * p["BK"] // threads), max(1, p["BN"] * p["BK"] // threads)  # per thread and tile
    if v["LAYOUT"] == "NHWC":  # reduction-fastest: vectors along C
        va = min(VEC, la) if v["ALIGN_A"] else 1
        ta_k = max(1, p["BK"] // va)
        ta_m = max(1, threads // ta_k)
        a_rows, a_cols = max(1, p["BM"] // ta_m), 1
    else:  # pixel-fastest: a warp reads neighbouring q
        va = 1
        ta_m = min(p["BM"], threads)
        ta_k = max(1, threads // ta_m)
        a_rows, a_cols = max(1, p["BM"] // ta_m), max(1, p["BK"] // ta_k)
    vb = min(VEC, lb) if v["ALIGN_B"] else 1
    tb_k = max(1, p["BK"] // vb)
    tb_n = max(1, threads // tb_k)
    return {"VA": va, "TA_M": ta_m, "TA_K": ta_k, "A_ROWS": a_rows, "A_COLS": a_cols,
            "VB": vb, "TB_N": tb_n, "TB_K": tb_k, "B_ROWS": max(1, p["BN"] // tb_n)}  # fmt: skip


class ImplicitSimtTemplate(ConvTemplate):
    """implicit_simt: CUDA cores, register-tiled, double-buffered shared memory."""

    name = "implicit_simt"
    params = ("BM", "BN", "BK", "TM", "TN", "PAD")
    kinds = (("PAD", "int>=0"),)
    dtypes = ("float32", "float16")
    layouts = ("NCHW", "NHWC")
    description = "implicit GEMM on CUDA cores: BM x BN pixel x channel tile, TM x TN per thread, im2col in the loads"

    def alignment(self, problem: Any) -> dict[str, bool]:
        """ALIGN_A: x is read in vectors along C (NHWC, C % 4 == 0); ALIGN_B: w along C*R*S."""
        kg = gemm_view(problem)[2]
        return {"ALIGN_A": problem.layout == "NHWC" and problem.C % VEC == 0, "ALIGN_B": kg % VEC == 0}

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        """Thread layout and the load split; the vector widths depend on the problem's alignment variant."""
        p = params
        v = self.variant_of(problem) if problem is not None else {"LAYOUT": "NCHW", "ALIGN_A": False, "ALIGN_B": False}
        tx_m, tx_n = max(1, p["BM"] // p["TM"]), max(1, p["BN"] // p["TN"])  # (>= 1 for configs check() rejects)
        threads = tx_m * tx_n
        return {"THREADS": threads, "TX_M": tx_m, "TX_N": tx_n, "VM": min(4, p["TM"]), "VN": min(4, p["TN"]),
                **load_split(p, threads, v), "SHARED_BYTES": shared_bytes(p)}  # fmt: skip

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        p = params
        if not all(pow2(p[k]) for k in ("BM", "BN", "BK", "TM", "TN")):
            return "BM, BN, BK, TM and TN must be powers of two"
        if p["TM"] > p["BM"] or p["TN"] > p["BN"]:
            return "the thread tile TM x TN must fit in the block tile BM x BN"
        if p["TM"] * p["TN"] > MAX_ACCUMULATORS:
            return f"at most {MAX_ACCUMULATORS} accumulators per thread (TM*TN)"
        threads = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])
        if threads % 32 or threads > limits.threads_per_block:
            return f"(BM/TM)*(BN/TN) threads must be a whole number of warps, at most {limits.threads_per_block}"
        if p["BK"] < 4 or p["BK"] > threads:
            return "BK must be at least 4 (one vector) and at most the thread count"
        if (p["BM"] * p["BK"]) % threads or (p["BN"] * p["BK"]) % threads:
            return "the BM x BK and BN x BK tiles must split evenly over the threads"
        if p["PAD"] % 4:
            return "PAD must be a multiple of 4 floats (16-byte rows for vector reads)"
        if shared_bytes(p) > limits.max_shared_per_block:
            return f"needs {shared_bytes(p)} bytes of shared memory, more than {limits.max_shared_per_block}"
        return None

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        return check_gemm_view(self.name, self.dtypes, self.layouts, params["BM"], params["BN"], problem, limits)

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        """grid (pixel blocks of BM, channel blocks of BN); pixel blocks are the fast index (they share w)."""
        threads = (max(1, params["BM"] // params["TM"])) * max(1, params["BN"] // params["TN"])
        return launch_geometry(params["BM"], params["BN"], threads, shared_bytes(params), problem)

    def c_abi(self) -> str:
        return "implicit_simt: the conv2d arguments above."


TEMPLATE = ImplicitSimtTemplate()
