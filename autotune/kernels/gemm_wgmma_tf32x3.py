"""fp32 GEMM at fp32 accuracy on Hopper's warpgroup tensor cores (templates/gemm/wgmma_tf32x3.cu.j2): 3xTF32
wgmma, every layout, any shape and leading dimension.

PRODUCERS warpgroups take turns at the stages: one reads a stage's A and B tiles from global memory, splits every
value x into a TF32 high part and its fp32 residual, and stores both as K-major, 128-byte swizzled tiles (at most
three warpgroups in all, four with BN = 64); CONSUMERS warpgroups of 64 rows
each run ``wgmma.mma_async`` m64n{BN}k8 .tf32 three times per product (lo*hi, hi*lo, hi*hi) and add the tensor
cores' sums into fp32 registers every ROUND rows of K. Blocks are persistent and walk work units: a tile and one
of its SPLITS = min(SPLIT_K, ceil(K / 32)) runs of K's stages. With SPLITS > 1 every warp stores its rows' sums as
a fp32 partial and counts itself on a (tile, warp) counter; the last to arrive sums the partials in split order
(deterministic), applies alpha and beta and stores C. With PREFETCH a producer loads its next stage into a second
set of registers before it stores the current one (at most three warpgroups; with 128 x 128 tiles setmaxnreg moves
registers from the consumers to the producer). SPLIT_K
(1) and PREFETCH (False) may be absent from a configuration (they came after the first probes). Every check here
is mirrored by a ``static_assert`` in the template.

Example::

    >>> p = dict(BN=128, PRODUCERS=2, CONSUMERS=2, STAGES=3, ROUND=256, RASTER=8, SPLIT_K=4)
    >>> derived(p)["SHARED_BYTES"]
    197680
    >>> problem = GemmProblem(128, 4096, 4096, "float32")
    >>> units(p, problem), scratch(p, problem)  # 32 tiles x 4 splits; a 128 x 128 partial per unit, 8 warps a tile
    (128, (2097152, 256))
"""

from __future__ import annotations

from typing import Any

from ..core.limits import SM90, DeviceLimits, multiprocessors
from .base import Launch, Params
from .gemm_problem import SPLIT_K_ABI, GemmTemplate
from .gemm_problem import GemmProblem as GemmProblem  # the docstring example's problem

PARAMS = ("BN", "PRODUCERS", "CONSUMERS", "STAGES", "ROUND", "RASTER", "SPLIT_K", "PREFETCH")
KINDS: tuple[tuple[str, str], ...] = (("PREFETCH", "bool"),)
DEFAULTS: tuple[tuple[str, Any], ...] = (("SPLIT_K", 1), ("PREFETCH", False))  # added after the first probes
DESCRIPTION = (
    "sm_90a 3xTF32 warpgroup MMA (wgmma) for fp32 at fp32 accuracy, producer-split operands, persistent, split-K"
)
DTYPES = ("float32",)
LAYOUTS = ("NN", "NT", "TN", "TT")
BK = 32  # floats of K per stage: one 128-byte swizzle row
BNS = (64, 128)
MAX_STAGES = 4
MAX_ROUND = 1024  # rows of K the tensor cores sum before a rounded fp32 add (error grows with it)
MAX_SPLIT_K = 32
MAX_PARTIAL_BYTES = 512 * 1024 * 1024  # split-K partial tiles in scratch


def opt(params: Params, name: str) -> Any:
    """A parameter with a default (SPLIT_K, PREFETCH): its value, or the default where a configuration lacks it."""
    return params.get(name, dict(DEFAULTS)[name])


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    p = params
    stage = 2 * (64 * p["CONSUMERS"] + p["BN"]) * BK * 4  # hi and lo of A's and B's tiles
    return {"THREADS": 128 * (p["PRODUCERS"] + p["CONSUMERS"]),
            "SHARED_BYTES": p["STAGES"] * stage + 1024 + 16 * p["STAGES"],
            "SPLIT_K": opt(p, "SPLIT_K"), "PREFETCH": bool(opt(p, "PREFETCH"))}  # fmt: skip


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None."""
    p = params
    if p["PRODUCERS"] not in (1, 2, 3):
        return "PRODUCERS must be 1 to 3 warpgroups"
    if p["CONSUMERS"] not in (1, 2):
        return "CONSUMERS must be 1 or 2 warpgroups of 64 rows"
    if p["PRODUCERS"] + p["CONSUMERS"] > 3 and p["BN"] != 64:
        return (
            "four warpgroups (PRODUCERS + CONSUMERS) leave 128 registers a thread: too few for d and acc unless BN = 64"
        )
    if p["BN"] not in BNS:
        return "BN must be 64 or 128 (the wgmma's N: d and acc take BN floats a thread)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    if p["ROUND"] < 2 * BK or p["ROUND"] % BK or p["ROUND"] > MAX_ROUND:
        # ROUND = 32 (a wait_group 0 and a rounding at every stage) gave relative errors of ~1e-2 on some runs on
        # the H200 (2026-12-02), a race not yet found; two or more stages per window verify
        return f"ROUND must be a multiple of {BK} rows from {2 * BK} to {MAX_ROUND}"
    if p["RASTER"] < 1:
        return "RASTER must be at least 1"
    if not 1 <= opt(p, "SPLIT_K") <= MAX_SPLIT_K:
        return f"SPLIT_K must be 1 to {MAX_SPLIT_K}"
    if opt(p, "PREFETCH") and p["PRODUCERS"] + p["CONSUMERS"] > 3:
        # two stages of loads a producer thread: with 128 x 128 tiles 128 registers, which fit only at 184 (setmaxnreg)
        return "PREFETCH needs at most three warpgroups (two stages of loads a producer thread; 128 registers each)"
    d = derived(p)
    if d["SHARED_BYTES"] > limits.max_shared_per_block:
        need, most = d["SHARED_BYTES"], limits.max_shared_per_block
        return f"{p['STAGES']} stages need {need} bytes of shared memory, more than the {most} a block may use"
    return None


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    if problem.dtype not in DTYPES:
        return f"wgmma_tf32x3 computes float32 (at fp32 accuracy), not {problem.dtype}"
    floats = scratch(params, problem)[0]
    if floats * 4 > MAX_PARTIAL_BYTES:
        return f"split-K partials need {floats * 4 >> 20} MiB, more than 512 MiB; use a smaller SPLIT_K"
    return None


def tiles(params: Params, problem: Any) -> int:
    return -(-problem.M // (64 * params["CONSUMERS"])) * -(-problem.N // params["BN"])


def splits(params: Params, problem: Any) -> int:
    """Units a tile: SPLIT_K, or one per stage of K where K has fewer (the kernel computes the same)."""
    return min(opt(params, "SPLIT_K"), -(-problem.K // BK))


def units(params: Params, problem: Any) -> int:
    return tiles(params, problem) * splits(params, problem)


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of `partial`, unsigned `counters`); counters must start at zero (the kernel leaves them zero). A
    BM x BN partial a unit, and a counter per tile and warp (BM / 16 warps of rows); none with one split."""
    s = splits(params, problem)
    if s == 1:
        return 0, 0
    bm = 64 * params["CONSUMERS"]
    n = tiles(params, problem)
    return n * s * bm * params["BN"], n * (bm // 16)


def launch(params: Params, problem: Any) -> Launch:
    """One persistent block per SM (or per work unit, when there are fewer or no GPU to count SMs on)."""
    d = derived(params)
    n = units(params, problem)
    sms = multiprocessors()
    return Launch((min(n, sms) if sms else n, 1, 1), (d["THREADS"], 1, 1), d["SHARED_BYTES"])


class WgmmaTf32x3Template(GemmTemplate):
    name = "wgmma_tf32x3"
    params = PARAMS
    dtypes = DTYPES
    layouts = LAYOUTS
    kinds = KINDS
    defaults = DEFAULTS
    description = DESCRIPTION
    arch = "sm_90a"
    arch_note = (
        "wgmma_tf32x3 needs sm_90a (warpgroup MMA): for any other architecture it fails to compile; simt computes "
        "float32 there."
    )

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        return derived(params, self.variant_of(problem))

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        return check(params, limits)

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        return check_problem(params, problem, limits)

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        return launch(params, problem)

    def scratch(self, params: Params, problem: Any) -> tuple[int, int]:
        return scratch(params, problem)

    def c_abi(self) -> str:
        return (
            "wgmma_tf32x3: (const float* A, const float* B, float* C, int M, int N, int K, float alpha, float beta), "
            + SPLIT_K_ABI.removesuffix(".")
            + "; grid (min(units, SMs), 1, 1), units = tiles * min(SPLIT_K, ceil(K / 32)), tiles = "
            "ceil(M / (64 * CONSUMERS)) * ceil(N / BN); block 128 * (PRODUCERS + CONSUMERS) threads."
        )


TEMPLATE = WgmmaTf32x3Template()
