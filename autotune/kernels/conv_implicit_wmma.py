"""The implicit-GEMM conv2d template on fp16 tensor cores (templates/conv/implicit_wmma.cu.j2).

WMMA m16n16k16 with fp32 accumulation (the GEMM view: conv_implicit.py); WARPS_M x WARPS_N warps, FRAGS_M x
FRAGS_N fragments each; a STAGES-deep cp.async pipeline whose copies zero-fill padding and tails (src-size 0) when
C % 8 == 0 (NHWC), register gathers otherwise (odd C, and every NCHW input); the epilogue goes through shared
memory so stores are coalesced. Every reason of check() is mirrored by a static_assert.
"""

from __future__ import annotations

from typing import Any

from ..core.limits import DeviceLimits
from .base import Launch, Params
from .conv_implicit import check_gemm_view, gemm_view, launch_geometry
from .conv_problem import ConvTemplate

VEC = 8  # halves per 16-byte copy
FRAG = 16
MAX_ACCUMULATORS = 128  # floats per thread


def tile(params: Params) -> tuple[int, int]:
    p = params
    return p["WARPS_M"] * p["FRAGS_M"] * FRAG, p["WARPS_N"] * p["FRAGS_N"] * FRAG


def shared_bytes(params: Params) -> int:
    """max(STAGES x (A + B stage) halves, the fp32 epilogue tile BM x (BN + 4))."""
    bm, bn = tile(params)
    pipe = params["STAGES"] * (bm + bn) * (params["BK"] + params["PAD"]) * 2
    return max(pipe, bm * (bn + 4) * 4)


class ImplicitWmmaTemplate(ConvTemplate):
    """implicit_wmma: fp16 tensor cores, multi-stage cp.async pipeline."""

    name = "implicit_wmma"
    params = ("WARPS_M", "WARPS_N", "FRAGS_M", "FRAGS_N", "BK", "PAD", "STAGES")
    kinds = (("PAD", "int>=0"),)
    dtypes = ("float16",)
    layouts = ("NHWC", "NCHW")
    description = "implicit GEMM on tensor cores (WMMA m16n16k16, fp32 accumulation), cp.async pipeline"

    def alignment(self, problem: Any) -> dict[str, bool]:
        """ALIGN_A: x tiles are 16-byte cp.async copies (NHWC, C % 8 == 0); ALIGN_B: w tiles (C*R*S % 8 == 0)."""
        kg = gemm_view(problem)[2]
        return {"ALIGN_A": problem.layout == "NHWC" and problem.C % VEC == 0, "ALIGN_B": kg % VEC == 0}

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        bm, bn = tile(params)
        threads = params["WARPS_M"] * params["WARPS_N"] * 32
        cpr = params["BK"] // VEC  # 16-byte chunks per tile row
        rp = max(1, threads // max(1, cpr))  # tile rows per pass of the block
        return {"BM": bm, "BN": bn, "THREADS": threads, "CPR": cpr, "RP": rp, "A_ITERS": -(-bm // rp),
                "B_ITERS": -(-bn // rp), "SHARED_BYTES": shared_bytes(params)}  # fmt: skip

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        p = params
        threads = p["WARPS_M"] * p["WARPS_N"] * 32
        if threads > limits.threads_per_block:
            return f"WARPS_M*WARPS_N*32 = {threads} threads per block exceeds {limits.threads_per_block}"
        if p["FRAGS_M"] * p["FRAGS_N"] * FRAG * FRAG // 32 > MAX_ACCUMULATORS:
            return f"at most {MAX_ACCUMULATORS} accumulators per thread (FRAGS_M*FRAGS_N*8)"
        if p["BK"] % FRAG:
            return "BK must be a multiple of the fragment's K (16)"
        if threads % (p["BK"] // VEC):
            return "BK/8 (16-byte copies per tile row) must divide the thread count"
        if p["PAD"] % 8:
            return "PAD must be a multiple of 8 halves (16 bytes)"
        if p["STAGES"] < 2:
            return "STAGES must be at least 2"
        if shared_bytes(p) > limits.max_shared_per_block:
            return f"needs {shared_bytes(p)} bytes of shared memory, more than {limits.max_shared_per_block}"
        return None

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        bm, bn = tile(params)
        return check_gemm_view(self.name, self.dtypes, self.layouts, bm, bn, problem, limits)

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        bm, bn = tile(params)
        threads = params["WARPS_M"] * params["WARPS_N"] * 32
        return launch_geometry(bm, bn, threads, shared_bytes(params), problem)

    def c_abi(self) -> str:
        return "implicit_wmma: the conv2d arguments above."


TEMPLATE = ImplicitWmmaTemplate()
