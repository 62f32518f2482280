"""Implicit-GEMM convolution: the conv2d templates ``implicit_simt`` and ``implicit_wmma``.

The convolution is computed as a GEMM whose A operand is never stored: the im2col gather happens inside the
tile loads.

    M = N*P*Q output pixels (rows),  N_gemm = K output channels (columns),  K_gemm = C*R*S (reduction)
    A[m, kk] = x[n, c, p*stride + r - pad, q*stride + s - pad]   (zero outside the image and past K_gemm)
    B[kk, k] = w[k, kk]: the filter is already a K x K_gemm matrix in both layouts, because the reduction
               index follows the filter's stored order: kk = (c*R + r)*S + s in NCHW, (r*S + s)*C + c in NHWC

In NHWC the channels are contiguous, so when C is a multiple of the vector width a vector of the reduction
is one vector load of x (compile-time variant ALIGN_A, like the GEMM templates' ALIGN_A); B is vectorised
when K_gemm is (ALIGN_B). Odd C and K_gemm take predicated scalar loads. Each thread decomposes its output
rows m -> (n, p, q) once, before the reduction loop, and advances its (c, r, s) reduction coordinates by the
tile depth with carries: no integer division inside the loop.

- implicit_simt: fp32 or fp16 storage, fp32 math; block tile BM x BN x BK, TM x TN register tile per thread,
  double-buffered shared memory (the next tile's loads in flight during this tile's math), PAD floats per row.
- implicit_wmma: fp16 tensor cores (m16n16k16, fp32 accumulation); WARPS_M x WARPS_N warps, FRAGS_M x FRAGS_N
  fragments each; STAGES-deep cp.async pipeline whose copies zero-fill padding and tails (src-size 0) when
  C % 8 == 0 (NHWC), register gathers otherwise (odd C, and every NCHW input); the epilogue goes through
  shared memory so stores are coalesced.

Every reason of check() is mirrored by a static_assert in templates/conv/<template>.cu.j2.

Example::

    >>> SIMT.launch(dict(BM=128, BN=128, BK=8, TM=8, TN=8, PAD=4), Shape(32 * 56 * 56, 64)).grid
    (784, 1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Launch, Params

MAX_THREADS = 1024
MAX_SHARED = 227 * 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_Y = 65535
MAX_INDEX = 2**31 - 1  # 32-bit m and reduction indices in the kernels (addresses are 64-bit)


@dataclass(frozen=True)
class Shape:
    """The GEMM view of a convolution: M output pixels by K output channels (for launch geometry)."""

    M: int
    K: int


def gemm_view(problem: Any) -> tuple[int, int, int]:
    """(M, N_gemm, K_gemm) = (N*P*Q, K, C*R*S)."""
    p = problem
    return p.N * p.P * p.Q, p.K, p.C * p.R * p.S


def _pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


def _launch(bm: int, bn: int, threads: int, shared: int, problem: Any) -> Launch:
    m = problem.M if isinstance(problem, Shape) else gemm_view(problem)[0]
    return Launch((-(-m // bm), -(-problem.K // bn), 1), (threads, 1, 1), shared)


def _check_problem(name: str, dtypes: tuple[str, ...], layouts: tuple[str, ...], bm: int, bn: int,
                   problem: Any) -> str | None:  # fmt: skip
    if problem.dtype not in dtypes:
        return f"{name} computes {', '.join(dtypes)}, not {problem.dtype}"
    if problem.layout not in layouts:
        return f"{name} computes layouts {', '.join(layouts)}, not {problem.layout}"
    m, _, kg = gemm_view(problem)
    if m > MAX_INDEX or kg > MAX_INDEX or problem.K * kg > MAX_INDEX:
        return f"N*P*Q = {m}, C*R*S = {kg} or the filter's K*C*R*S elements exceed 32-bit indices"
    if problem.C * problem.H * problem.W > MAX_INDEX:
        return "an image of more than 2**31 - 1 elements (C*H*W) exceeds 32-bit offsets"
    gx, gy, _ = _launch(bm, bn, 32, 0, problem).grid
    if gx > MAX_GRID_X:
        return f"needs {gx} pixel blocks, more than grid.x allows; use a larger block tile"
    if gy > MAX_GRID_Y:
        return f"needs {gy} channel blocks, more than the {MAX_GRID_Y} grid.y allows; use a larger block tile"
    return None


class SimtTemplate:
    """implicit_simt: CUDA cores, register-tiled, double-buffered shared memory."""

    name = "implicit_simt"
    PARAMS: tuple[str, ...] = ("BM", "BN", "BK", "TM", "TN", "PAD")
    KINDS: tuple[tuple[str, str], ...] = (("PAD", "int>=0"),)
    DTYPES: tuple[str, ...] = ("float32", "float16")
    LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC")
    DESCRIPTION = "implicit GEMM on CUDA cores: BM x BN pixel x channel tile, TM x TN per thread, im2col in the loads"
    VEC = 4  # elements per vector load when an operand allows it
    MAX_ACCUMULATORS = 64  # TM*TN floats per thread

    def alignment(self, problem: Any) -> dict[str, bool]:
        """ALIGN_A: x is read in vectors along C (NHWC, C % 4 == 0); ALIGN_B: w along C*R*S."""
        kg = gemm_view(problem)[2]
        return {"ALIGN_A": problem.layout == "NHWC" and problem.C % self.VEC == 0, "ALIGN_B": kg % self.VEC == 0}

    def derived(self, params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
        """Thread layout and the load split; the vector widths depend on the problem's alignment variant."""
        p = params
        v = variant or {"LAYOUT": "NCHW", "ALIGN_A": False, "ALIGN_B": False}
        tx_m, tx_n = max(1, p["BM"] // p["TM"]), max(1, p["BN"] // p["TN"])  # (>= 1 for configs check() rejects)
        threads = tx_m * tx_n
        la, lb = max(1, p["BM"] * p["BK"] // threads), max(1, p["BN"] * p["BK"] // threads)  # per thread and tile
        if v["LAYOUT"] == "NHWC":  # reduction-fastest: vectors along C
            va = min(self.VEC, la) if v["ALIGN_A"] else 1
            ta_k = max(1, p["BK"] // va)
            ta_m = max(1, threads // ta_k)
            a_rows, a_cols = max(1, p["BM"] // ta_m), 1
        else:  # pixel-fastest: a warp reads neighbouring q
            va = 1
            ta_m = min(p["BM"], threads)
            ta_k = max(1, threads // ta_m)
            a_rows, a_cols = max(1, p["BM"] // ta_m), max(1, p["BK"] // ta_k)
        vb = min(self.VEC, lb) if v["ALIGN_B"] else 1
        tb_k = max(1, p["BK"] // vb)
        tb_n = max(1, threads // tb_k)
        return {"THREADS": threads, "TX_M": tx_m, "TX_N": tx_n, "VM": min(4, p["TM"]), "VN": min(4, p["TN"]),
                "VA": va, "TA_M": ta_m, "TA_K": ta_k, "A_ROWS": a_rows, "A_COLS": a_cols,
                "VB": vb, "TB_N": tb_n, "TB_K": tb_k, "B_ROWS": max(1, p["BN"] // tb_n),
                "SHARED_BYTES": self.shared_bytes(p)}  # fmt: skip

    def shared_bytes(self, params: Params) -> int:
        """Two stages of A (BK rows of BM + PAD floats) and B (BK rows of BN + PAD floats)."""
        p = params
        return 2 * p["BK"] * (p["BM"] + p["BN"] + 2 * p["PAD"]) * 4

    def check(self, params: Params) -> str | None:
        """Why this configuration can never be built, or None. Mirrored by the template's static_asserts."""
        p = params
        if not all(_pow2(p[k]) for k in ("BM", "BN", "BK", "TM", "TN")):
            return "BM, BN, BK, TM and TN must be powers of two"
        if p["TM"] > p["BM"] or p["TN"] > p["BN"]:
            return "the thread tile TM x TN must fit in the block tile BM x BN"
        if p["TM"] * p["TN"] > self.MAX_ACCUMULATORS:
            return f"at most {self.MAX_ACCUMULATORS} accumulators per thread (TM*TN)"
        threads = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])
        if threads % 32 or threads > MAX_THREADS:
            return f"(BM/TM)*(BN/TN) threads must be a whole number of warps, at most {MAX_THREADS}"
        if p["BK"] < 4 or p["BK"] > threads:
            return "BK must be at least 4 (one vector) and at most the thread count"
        if (p["BM"] * p["BK"]) % threads or (p["BN"] * p["BK"]) % threads:
            return "the BM x BK and BN x BK tiles must split evenly over the threads"
        if p["PAD"] % 4:
            return "PAD must be a multiple of 4 floats (16-byte rows for vector reads)"
        if self.shared_bytes(p) > MAX_SHARED:
            return f"needs {self.shared_bytes(p)} bytes of shared memory, more than {MAX_SHARED}"
        return None

    def check_problem(self, params: Params, problem: Any) -> str | None:
        return _check_problem(self.name, self.DTYPES, self.LAYOUTS, params["BM"], params["BN"], problem)

    def launch(self, params: Params, problem: Any) -> Launch:
        """grid (pixel blocks of BM, channel blocks of BN); pixel blocks are the fast index (they share w)."""
        d = self.derived(params)
        return _launch(params["BM"], params["BN"], d["THREADS"], d["SHARED_BYTES"], problem)


class WmmaTemplate:
    """implicit_wmma: fp16 tensor cores, multi-stage cp.async pipeline."""

    name = "implicit_wmma"
    PARAMS: tuple[str, ...] = ("WARPS_M", "WARPS_N", "FRAGS_M", "FRAGS_N", "BK", "PAD", "STAGES")
    KINDS: tuple[tuple[str, str], ...] = (("PAD", "int>=0"),)
    DTYPES: tuple[str, ...] = ("float16",)
    LAYOUTS: tuple[str, ...] = ("NHWC", "NCHW")
    DESCRIPTION = "implicit GEMM on tensor cores (WMMA m16n16k16, fp32 accumulation), cp.async pipeline"
    VEC = 8  # halves per 16-byte copy
    FRAG = 16
    MAX_ACCUMULATORS = 128  # floats per thread

    def alignment(self, problem: Any) -> dict[str, bool]:
        """ALIGN_A: x tiles are 16-byte cp.async copies (NHWC, C % 8 == 0); ALIGN_B: w tiles (C*R*S % 8 == 0)."""
        kg = gemm_view(problem)[2]
        return {"ALIGN_A": problem.layout == "NHWC" and problem.C % self.VEC == 0, "ALIGN_B": kg % self.VEC == 0}

    def tile(self, params: Params) -> tuple[int, int]:
        p = params
        return p["WARPS_M"] * p["FRAGS_M"] * self.FRAG, p["WARPS_N"] * p["FRAGS_N"] * self.FRAG

    def shared_bytes(self, params: Params) -> int:
        """max(STAGES x (A + B stage) halves, the fp32 epilogue tile BM x (BN + 4))."""
        bm, bn = self.tile(params)
        pipe = params["STAGES"] * (bm + bn) * (params["BK"] + params["PAD"]) * 2
        return max(pipe, bm * (bn + 4) * 4)

    def derived(self, params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
        bm, bn = self.tile(params)
        threads = params["WARPS_M"] * params["WARPS_N"] * 32
        cpr = params["BK"] // self.VEC  # 16-byte chunks per tile row
        rp = max(1, threads // max(1, cpr))  # tile rows per pass of the block
        return {"BM": bm, "BN": bn, "THREADS": threads, "CPR": cpr, "RP": rp, "A_ITERS": -(-bm // rp),
                "B_ITERS": -(-bn // rp), "SHARED_BYTES": self.shared_bytes(params)}  # fmt: skip

    def check(self, params: Params) -> str | None:
        """Why this configuration can never be built, or None. Mirrored by the template's static_asserts."""
        p = params
        threads = p["WARPS_M"] * p["WARPS_N"] * 32
        if threads > MAX_THREADS:
            return f"WARPS_M*WARPS_N*32 = {threads} threads per block exceeds {MAX_THREADS}"
        if p["FRAGS_M"] * p["FRAGS_N"] * self.FRAG * self.FRAG // 32 > self.MAX_ACCUMULATORS:
            return f"at most {self.MAX_ACCUMULATORS} accumulators per thread (FRAGS_M*FRAGS_N*8)"
        if p["BK"] % self.FRAG:
            return "BK must be a multiple of the fragment's K (16)"
        if threads % (p["BK"] // self.VEC):
            return "BK/8 (16-byte copies per tile row) must divide the thread count"
        if p["PAD"] % 8:
            return "PAD must be a multiple of 8 halves (16 bytes)"
        if p["STAGES"] < 2:
            return "STAGES must be at least 2"
        if self.shared_bytes(p) > MAX_SHARED:
            return f"needs {self.shared_bytes(p)} bytes of shared memory, more than {MAX_SHARED}"
        return None

    def check_problem(self, params: Params, problem: Any) -> str | None:
        bm, bn = self.tile(params)
        return _check_problem(self.name, self.DTYPES, self.LAYOUTS, bm, bn, problem)

    def launch(self, params: Params, problem: Any) -> Launch:
        bm, bn = self.tile(params)
        threads = params["WARPS_M"] * params["WARPS_N"] * 32
        return _launch(bm, bn, threads, self.shared_bytes(params), problem)


SIMT = SimtTemplate()
WMMA = WmmaTemplate()
TEMPLATES = {SIMT.name: SIMT, WMMA.name: WMMA}
