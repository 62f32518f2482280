"""Skinny-M fp32 GEMM on tensor cores with fp32 accuracy (3xTF32): C[M,N] = alpha * op(A) @ B + beta * C.

The template is templates/gemm/skinny_tc.cu.j2. Each fp32 operand is split into a tf32 high part and a tf32
residual, and each fragment product is three mma.sync.m16n8k8 tf32 (high x high, high x residual, residual x
high) with fp32 accumulation: fp32's accuracy (the float32 tolerance, not tfloat32's) from tensor cores. It
exists because for M of 32-64 the fp32 FMA peak, not bandwidth, bounds a SIMT kernel (M = 64 needs 81% of it
to reach 1.5x cuBLAS), while three tf32 mmas per product still leave the bytes of B as the bound.

A block is WARPS warps side by side along N, each warp 32 * CW columns; MB rows of C per block (MB / 8 mmas);
KC rows of K per chunk, copied (B and A) by cp.async into a ring of STAGES shared buffers, STAGES - 1 chunks
in flight and one barrier per chunk; grid
(ceil(M / MB), ceil(N / BN), SPLIT_K). Every derived quantity is computed here and only here; the template
mirrors each check with a ``static_assert``.

Example::

    >>> p = dict(WARPS=8, CW=1, MB=64, KC=16, STAGES=4, SPLIT_K=8, MINB=1)
    >>> launch(p, Problem(64, 4096, 4096, "float32")).grid
    (1, 16, 8)
"""

from __future__ import annotations

from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .gemm_problem import SPLIT_K_ABI, GemmTemplate
from .gemm_skinny import Problem as Problem  # the shape a launch needs, as for skinny
from .gemm_skinny import check_variant, dynamic_shared_limit, grid_problem, reg_cap, split_k_scratch, unsupported

PARAMS: tuple[str, ...] = ("WARPS", "CW", "MB", "KC", "STAGES", "SPLIT_K", "MINB")
KINDS: tuple[tuple[str, str], ...] = ()
DESCRIPTION = "skinny-M fp32 GEMM on tensor cores, fp32-accurate (3xTF32 mma.sync), B streamed once, split-K"

DTYPES = {"float32": ("float", 4)}
LAYOUTS = ("NN", "TN")  # NT (B stored N x K) is not implemented
CWS = (1, 2, 4)
MAX_WARPS = 16
MAX_MB = 64
MAX_KC = 128
MAX_STAGES = 8
MAX_ACCUMULATORS = 128  # 8 * CW * NT floats per thread
REG_SLACK = 64  # addresses, copy loops, the A^T fragments (measured on sm_90: about 2 x accumulators + 16 CW + 64)


def variant(dtype: str, layout: str) -> dict[str, Any]:
    """The dtype/layout keys of the render context."""
    check_variant(dtype, layout, DTYPES)
    return {"DTYPE": dtype, "LAYOUT": layout, "TRANS_A": layout[0] == "T", "TRANS_B": layout[1] == "T"}


def _stride(least: int, residue: int) -> int:
    """The smallest row stride >= least floats that is residue mod 32 (conflict-free fragment reads)."""
    return least + (residue - least) % 32


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """Threads, tile sizes and shared memory of a configuration. A's stage is sized for either layout, so
    none of these depend on the variant except LDA (NN: [MB][LDA], LDA 4 mod 32; TN: [KC][LDA], 8 mod 32)."""
    p = params
    threads = 32 * p["WARPS"]
    bn = 32 * p["CW"] * p["WARPS"]
    nn, tn = _stride(p["KC"], 4), _stride(p["MB"], 8)
    a_floats = max(p["MB"] * nn, p["KC"] * tn)
    a_floats += -a_floats % 4
    stage = p["KC"] * (bn + 8) + a_floats
    return {
        "THREADS": threads,
        "BN": bn,
        "BNP": bn + 8,
        "NT": p["MB"] // 8,
        "KS": p["KC"] // 8,
        "LDA": tn if variant and variant.get("TRANS_A") else nn,
        "A_FLOATS": a_floats,
        "SHARED_BYTES": p["STAGES"] * stage * 4,
        "REG_CAP": reg_cap(threads, p["MINB"], SM90),  # rendered: the template's static_assert states 65536
    }


def register_estimate(params: Params) -> int:
    """Accumulators and a k-step's mma sums beside them, the split B^T fragments of a k-step, and slack."""
    p = params
    return 2 * 8 * p["CW"] * (p["MB"] // 8) + 16 * p["CW"] + REG_SLACK


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Mirrored by the template's static_asserts."""
    p = params
    if not 1 <= p["WARPS"] <= MAX_WARPS:
        return f"WARPS must be 1 to {MAX_WARPS}"
    if p["CW"] not in CWS:
        return f"CW must be one of {', '.join(map(str, CWS))}"
    if p["MB"] % 8 or not 8 <= p["MB"] <= MAX_MB:
        return f"MB must be a multiple of 8 from 8 to {MAX_MB} (one mma covers 8 rows of C)"
    if p["KC"] % 8 or not 8 <= p["KC"] <= MAX_KC:
        return f"KC must be a multiple of 8 from 8 to {MAX_KC} (one mma covers 8 rows of K)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    threads = 32 * p["WARPS"]
    if threads * p["MINB"] > limits.threads_per_sm:
        return f"MINB = {p['MINB']} blocks of {threads} threads exceed {limits.threads_per_sm} threads per SM"
    if 8 * p["CW"] * (p["MB"] // 8) > MAX_ACCUMULATORS:
        return f"CW*MB = {p['CW'] * p['MB']} accumulators per thread exceeds {MAX_ACCUMULATORS}"
    if p["SPLIT_K"] < 1 or p["SPLIT_K"] > limits.max_grid_z:
        return f"SPLIT_K = {p['SPLIT_K']} must be 1 to the grid's z limit of {limits.max_grid_z}"
    d = derived(p)
    if d["SHARED_BYTES"] > dynamic_shared_limit(limits):
        need, most = d["SHARED_BYTES"], dynamic_shared_limit(limits)
        return f"STAGES x (KC x BN of B + A) need {need} bytes of shared memory, more than {most}"
    return resident_reason(p["MINB"], d, register_estimate(p), limits)


def resident_reason(minb: int, d: dict[str, Any], registers: int, limits: DeviceLimits = SM90) -> str | None:
    """Why MINB blocks with d's shared memory and threads, needing about ``registers`` registers a thread, cannot
    share an SM, or None. Shared with skinny_wgmma."""
    per_sm, cap = limits.shared_per_sm, reg_cap(d["THREADS"], minb, limits)
    if minb * (d["SHARED_BYTES"] + limits.shared_reserved_per_block) > per_sm:
        return f"MINB = {minb} blocks of {d['SHARED_BYTES']} bytes of shared memory exceed an SM's {per_sm}"
    if registers > cap:
        return (
            f"needs about {registers} registers per thread, more than the {cap} that "
            f"MINB = {minb} blocks of {d['THREADS']} threads allow"
        )
    return None


def launch(params: Params, problem: Any, d: dict[str, Any] | None = None) -> Launch:
    """Row groups of MB x column strips of BN x SPLIT_K slices (``d``: the derived values, skinny_wgmma's)."""
    d = d or derived(params)
    grid = (-(-problem.M // params["MB"]), -(-problem.N // d["BN"]), params["SPLIT_K"])
    return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of `partial`, unsigned `counters`) the launch needs; counters must start at zero."""
    return split_k_scratch(params["SPLIT_K"], problem, launch(params, problem).grid)


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot run this problem, or None."""
    return unsupported("skinny_tc", problem, DTYPES, LAYOUTS) or grid_problem(
        launch(params, problem).grid, scratch(params, problem)[0], "WARPS*CW", limits
    )


class SkinnyTcTemplate(GemmTemplate):
    name = "skinny_tc"
    params = PARAMS
    dtypes = tuple(DTYPES)
    layouts = LAYOUTS
    kinds = KINDS
    description = DESCRIPTION

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
            "skinny_tc: (const float* A, const float* B, float* C, int M, int N, int K, float alpha, float beta), "
            "then " + SPLIT_K_ABI
        )


TEMPLATE = SkinnyTcTemplate()
