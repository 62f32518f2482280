"""The implicit-GEMM conv2d template on mma.sync (templates/conv/implicit_mma.cu.j2): parameters, checks.

The GEMM view of conv_implicit.py (M = N*P*Q output pixels, N_gemm = K output channels, reduction
kk = (r*S + s)*C + c over C*R*S), computed with the techniques of the mma GEMM (templates/gemm/mma.cu.j2):
``mma.sync.aligned.m16n8k16`` on fragments that ``ldmatrix`` reads from XOR-swizzled shared memory, filled by
a STAGES-deep ``cp.async`` pipeline whose 16-byte copies are zero-filled in the padding, past the image edges
and past the reduction. fp16 in and out, fp32 accumulation, NHWC only, C a multiple of 8 (a 16-byte copy
is 8 channels of one filter tap); any N, H, W, K, R, S, stride and padding otherwise.

    block tile   BM pixels x BN channels x BK reduction, split among (BM/WM) x (BN/WN) warps
    warp tile    WM x WN = (WM/16) x (WN/8) m16n8k16 instructions per k-step of 16
    shared       A tile BM x BK (pixel rows, reduction contiguous), B tile BN x BK (the filter's rows):
                 both are ldmatrix "row"/"col" operands without .trans
    epilogue     per warp, 16 rows at a time through shared memory, 16-byte stores when K % 8 == 0
    split-K      SPLIT_K > 1 (optional, default 1): grid.z slices of the reduction's BK tiles; each block stores
                 its fp32 tile in the scratch ``partial``, the last block of a tile to arrive at its counter sums
                 the slices in z order (deterministic) and writes y. The kernel then takes (partial, counters)
                 after the shape integers: ``scratch`` gives their sizes, the counters start at zero and every
                 launch leaves them zero. SPLIT_K = 1 renders, and names, the kernel as before split-K existed.

Every check here is mirrored by a ``static_assert`` in the template.

Example::

    >>> p = dict(BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=3)
    >>> derived(p)["THREADS"], derived(p)["SHARED_BYTES"]
    (128, 49152)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .conv_implicit import check_gemm_view, launch_geometry
from .conv_problem import SPLIT_ABI, ConvTemplate

PARAMS = ("BM", "BN", "BK", "WM", "WN", "STAGES", "SPLIT_K")
KINDS: tuple[tuple[str, str], ...] = ()
# Parameters a configuration may lack, and the value they then take. A configuration at the default renders
# and is named exactly as before the parameter existed, so stored winners keep their source and kernel name.
DEFAULTS: tuple[tuple[str, int], ...] = (("SPLIT_K", 1),)
DTYPES = ("float16",)
LAYOUTS = ("NHWC",)
DESCRIPTION = "implicit GEMM on tensor cores through mma.sync m16n8k16 + ldmatrix, swizzled cp.async pipeline"
NAME = "implicit_mma"

ES = 2  # bytes per element
CH = 8  # elements per 16-byte chunk
MAX_ACCUMULATORS = 128  # floats per thread
MAX_STAGES = 5
MAX_COORD = 2**14  # input row and column coordinates share one register as signed 16-bit halves
MAX_OFFSET = 2**31 - 1  # element offsets into x are ints
BKS = (16, 32, 64, 128)  # powers of two: a tile row's chunks XOR-swizzle over whole 128-byte lines
MAX_SPLIT_K = 64  # slices of the reduction (grid.z)
MAX_PARTIAL_BYTES = 512 * 1024 * 1024  # split-K partial tiles in scratch


def split_k(params: Params) -> int:
    """SPLIT_K of a configuration; 1 (no split) when it has none (configurations stored before it existed)."""
    return int(params.get("SPLIT_K", 1))


def alignment(problem: Any) -> dict[str, Any]:
    """No alignment variant: check_problem refuses what the 16-byte copies cannot take."""
    return {}


def shared_bytes(params: Params) -> int:
    """max(STAGES x (A + B stage), the epilogue's 16 rows of WN + 8 floats per warp)."""
    p = params
    pipe = p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * ES
    warps = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"])
    return max(pipe, warps * 16 * (p["WN"] + 8) * 4)


def derived(params: Params, variant: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Warps, threads, the copy split (CPR chunks per tile row, RP rows per pass) and shared memory."""
    p = params
    warps_m, warps_n = max(1, p["BM"] // p["WM"]), max(1, p["BN"] // p["WN"])
    threads = warps_m * warps_n * 32
    cpr = max(1, p["BK"] // CH)
    rp = max(1, threads // cpr)
    return {"WARPS_M": warps_m, "WARPS_N": warps_n, "THREADS": threads, "CPR": cpr, "RP": rp,
            "A_ITERS": -(-p["BM"] // rp), "B_ITERS": -(-p["BN"] // rp),
            "SHARED_BYTES": shared_bytes(p), "SPLIT_K": split_k(p), "MAX_SPLIT_K": MAX_SPLIT_K}  # fmt: skip


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Each reason is a static_assert message."""
    p = params
    if p["WM"] % 16 or p["WN"] % 16 or p["WM"] < 16 or p["WN"] < 16:
        return "WM and WN must be multiples of 16"
    if p["BM"] % p["WM"] or p["BN"] % p["WN"]:
        return "the warp tile WMxWN must divide the block tile BMxBN"
    if p["BK"] not in BKS:
        return "BK must be 16, 32, 64 or 128"
    threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    if threads > limits.threads_per_block:
        return f"{threads} threads per block exceeds {limits.threads_per_block}"
    if p["WM"] * p["WN"] // 32 > MAX_ACCUMULATORS:
        return f"more than {MAX_ACCUMULATORS} accumulators per thread (WM*WN/32)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    if shared_bytes(p) > limits.max_shared_per_block:
        return f"needs {shared_bytes(p)} bytes of shared memory, more than {limits.max_shared_per_block}"
    sk = p.get("SPLIT_K", 1)
    if not isinstance(sk, int) or isinstance(sk, bool) or not 1 <= sk <= MAX_SPLIT_K:
        return f"SPLIT_K must be 1 to {MAX_SPLIT_K}"
    return None


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem (dtype, layout, C % 8, indices, grid), or None."""
    reason = check_gemm_view(NAME, DTYPES, LAYOUTS, params["BM"], params["BN"], problem, limits)
    if reason:
        return reason
    p = problem
    if p.C % CH:
        return f"{NAME} needs C to be a multiple of {CH}, not {p.C}: its 16-byte copies take 8 channels of one tap"
    hp, wp = p.H + 2 * p.pad, p.W + 2 * p.pad
    if hp >= MAX_COORD or wp >= MAX_COORD:
        return f"{NAME} needs H + 2*pad and W + 2*pad below {MAX_COORD} (coordinates packed in 16 bits)"
    if p.N * hp * wp * p.C > MAX_OFFSET:
        return f"{NAME} needs the padded input N*(H+2*pad)*(W+2*pad)*C below 2**31 elements (32-bit offsets)"
    need = scratch(params, problem)
    if need is not None and need[0] * 4 > MAX_PARTIAL_BYTES:
        return f"{NAME}'s split-K partials need {need[0] * 4 >> 20} MiB, more than 512 MiB; use a smaller SPLIT_K"
    return None


def launch(params: Params, problem: Any) -> Launch:
    """grid (blocks of BM output pixels, blocks of BN output channels, SPLIT_K slices of the reduction);
    pixel blocks are the fast index."""
    d = derived(params)
    gx, gy, _ = launch_geometry(params["BM"], params["BN"], d["THREADS"], d["SHARED_BYTES"], problem).grid
    return Launch((gx, gy, split_k(params)), (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int] | None:
    """(floats of ``partial``, unsigned ``counters``) a split-K launch takes after the shape integers: SPLIT_K
    partial M x K tiles and one counter per (pixel block, channel block); None with SPLIT_K = 1, whose kernel
    takes no scratch arguments."""
    sk = split_k(params)
    if sk == 1:
        return None
    gx, gy, _ = launch(params, problem).grid
    m = problem.N * problem.P * problem.Q
    return sk * m * problem.K, gx * gy


class ImplicitMmaTemplate(ConvTemplate):
    name = NAME
    params = PARAMS
    kinds = KINDS
    defaults = DEFAULTS
    dtypes = DTYPES
    layouts = LAYOUTS
    description = DESCRIPTION

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        return derived(params)

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        return check(params, limits)

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        return check_problem(params, problem, limits)

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        return launch(params, problem)

    def scratch(self, params: Params, problem: Any) -> tuple[int, int] | None:
        return scratch(params, problem)

    def c_abi(self) -> str:
        return "implicit_mma: the conv2d arguments above; with SPLIT_K > 1 (grid_z) " + SPLIT_ABI


TEMPLATE = ImplicitMmaTemplate()
