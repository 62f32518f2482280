"""The WMMA (tensor-core) GEMM template: parameters, derived values and checks.

Every check here is mirrored by a ``static_assert`` in ``templates/gemm/wmma.cu.j2``.
"""

from __future__ import annotations

from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .gemm_problem import SPLIT_K_ABI, GemmTemplate

PARAMS = ("FRAG", "WARPS_M", "WARPS_N", "FRAGS_M", "FRAGS_N", "BK", "PAD", "STAGES", "SPLIT_K", "RASTER")
KINDS = (("FRAG", "str"), ("PAD", "int>=0"))
DESCRIPTION = "tensor cores through WMMA, multi-stage cp.async pipeline, split-K"
DTYPES = ("float16", "bfloat16", "tfloat32")
LAYOUTS = ("NN", "NT", "TN", "TT")
ALIGNMENT_VARIANT = True  # the source differs for operands whose leading dimension is not whole 16-byte copies

FRAGS = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16), "m16n16k8": (16, 16, 8)}
MAX_ACCUMULATORS = 128  # floats per thread
MAX_PARTIAL_BYTES = 512 << 20
ITEMSIZE = {"float16": 2, "bfloat16": 2, "tfloat32": 4}


def shape(params: Params) -> tuple[int, int, int]:
    return FRAGS[params["FRAG"]]


def tile(params: Params) -> tuple[int, int]:
    fm, fn, _ = shape(params)
    return params["WARPS_M"] * params["FRAGS_M"] * fm, params["WARPS_N"] * params["FRAGS_N"] * fn


def shared_bytes(params: Params, layout: str, es: int) -> int:
    bm, bn = tile(params)
    bk, pad, stages = params["BK"], params["PAD"], params["STAGES"]
    a_rows, a_cols = (bk, bm) if layout[0] == "T" else (bm, bk)
    b_rows, b_cols = (bn, bk) if layout[1] == "T" else (bk, bn)
    align = 128 // es

    def stage(rows: int, cols: int) -> int:
        return -(-(rows * (cols + pad)) // align) * align

    pipe = stages * (stage(a_rows, a_cols) + stage(b_rows, b_cols)) * es
    return max(pipe, bm * (bn + 4) * 4)


def derived(params: Params, variant: dict[str, Any]) -> dict[str, Any]:
    fm, fn, fk = shape(params)
    bm, bn = tile(params)
    threads = params["WARPS_M"] * params["WARPS_N"] * 32
    return {"FM": fm, "FN": fn, "FK": fk, "BM": bm, "BN": bn, "THREADS": threads,
            "SHARED_BYTES": shared_bytes(params, variant["LAYOUT"], variant["ES"])}  # fmt: skip


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built (for any dtype and layout), or None."""
    if params["FRAG"] not in FRAGS:
        return f"FRAG must be one of {', '.join(FRAGS)}"
    fm, fn, fk = shape(params)
    threads = params["WARPS_M"] * params["WARPS_N"] * 32
    if threads > limits.threads_per_block:
        return f"{threads} threads per block exceeds {limits.threads_per_block}"
    if params["FRAGS_M"] * params["FRAGS_N"] * fm * fn // 32 > MAX_ACCUMULATORS:
        return f"more than {MAX_ACCUMULATORS} accumulators per thread"
    if params["BK"] % fk or params["BK"] % 8:
        return f"BK must be a multiple of the fragment's K ({fk}) and of 8"
    if params["STAGES"] < 2:
        return "STAGES must be at least 2"
    return None


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem (dtype, layout, alignment of fragments, grid)."""
    dtype, layout = problem.dtype, problem.layout
    if dtype not in DTYPES:
        return f"wmma computes {', '.join(DTYPES)}, not {dtype}"
    fm, fn, fk = shape(params)
    if (dtype == "tfloat32") != (params["FRAG"] == "m16n16k8"):
        return "tfloat32 uses the m16n16k8 fragment and 16-bit types the k16 ones"
    es = ITEMSIZE[dtype]
    pad, bk = params["PAD"], params["BK"]
    if pad * es % 16:
        return f"PAD must be a multiple of {16 // es} elements (16 bytes) for {dtype}"
    bm, bn = tile(params)
    a_ld = (bm if layout[0] == "T" else bk) + pad
    b_ld = (bk if layout[1] == "T" else bn) + pad
    if (fm * es if layout[0] == "T" else fm * a_ld * es) % 32:
        return f"{params['FRAG']} fragments of A would start off a 32-byte boundary in layout {layout}"
    if (fn * b_ld * es if layout[1] == "T" else fn * es) % 32:
        return f"{params['FRAG']} fragments of B would start off a 32-byte boundary in layout {layout}"
    grid = launch(params, problem).grid
    if grid[1] > limits.max_grid_y:
        return f"needs {grid[1]} row blocks, more than the {limits.max_grid_y} a grid allows; use a larger block tile"
    split = params["SPLIT_K"]
    if split > 1:
        if split * bk > problem.K:
            return f"SPLIT_K={split} leaves slices without a whole BK={bk} tile of K={problem.K}"
        if split * problem.M * problem.N * 4 > MAX_PARTIAL_BYTES:
            return f"SPLIT_K={split} needs more than {MAX_PARTIAL_BYTES >> 20} MiB of partial sums"
    return None


def launch(params: Params, problem: Any) -> Launch:
    bm, bn = tile(params)
    grid = (-(-problem.N // bn), -(-problem.M // bm), params["SPLIT_K"])
    threads = params["WARPS_M"] * params["WARPS_N"] * 32
    return Launch(grid, (threads, 1, 1), shared_bytes(params, problem.layout, ITEMSIZE.get(problem.dtype, 2)))


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of partial sums, tile counters) the kernel needs; none without split-K."""
    if params["SPLIT_K"] == 1:
        return 0, 0
    grid = launch(params, problem).grid
    return params["SPLIT_K"] * problem.M * problem.N, grid[0] * grid[1]


class WmmaTemplate(GemmTemplate):
    name = "wmma"
    params = PARAMS
    dtypes = DTYPES
    layouts = LAYOUTS
    kinds = KINDS
    description = DESCRIPTION
    alignment_variant = ALIGNMENT_VARIANT

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
        return "wmma: (const T* A, const T* B, T* C, int M, int N, int K, float alpha, float beta), then " + SPLIT_K_ABI


TEMPLATE = WmmaTemplate()
