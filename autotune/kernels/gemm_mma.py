"""The mma.sync GEMM template (templates/gemm/mma.cu.j2): parameters, derived values and checks.

Tensor cores through inline PTX: ``mma.sync.aligned.m16n8k16`` on fragments that ``ldmatrix`` reads from
XOR-swizzled (or padded) shared memory, filled by a multi-stage ``cp.async`` pipeline. fp16 and bf16 inputs,
fp32 accumulation, every layout. It needs 16-byte rows: the leading dimensions of A and B must be multiples
of 8 elements (the wmma template covers the others). Every check here is mirrored by a ``static_assert``.

    block tile   BM x BN x BK, split among (BM/WM) x (BN/WN) warps
    warp tile    WM x WN, (WM/16) x (WN/8) m16n8k16 instructions per k-step of 16

Example::

    >>> p = dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=True, RASTER=8)
    >>> derived(p, {"LAYOUT": "NN"})["THREADS"], shared_bytes(p, "NN")
    (256, 98304)
"""

from __future__ import annotations

from typing import Any

from .base import Launch, Params

PARAMS = ("BM", "BN", "BK", "WM", "WN", "STAGES", "SWIZZLE", "RASTER")
KINDS = (("SWIZZLE", "bool"),)
DESCRIPTION = "tensor cores through mma.sync m16n8k16 + ldmatrix, swizzled shared memory, cp.async pipeline"
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("NN", "NT", "TN", "TT")
ALIGNMENT_VARIANT = False  # one source per dtype and layout: unaligned leading dimensions are refused

ES = 2  # bytes per element of every dtype here
CH = 8  # elements per 16-byte chunk
MAX_THREADS = 1024
MAX_ACCUMULATORS = 128  # floats per thread
MAX_STAGES = 5
MAX_GRID_Y = 65535


def _swizzles(cols: int) -> bool:
    """A row of ``cols`` elements can be XOR-swizzled in 16-byte chunks: a power of two or whole 64s."""
    chunks = cols // CH
    return chunks % 8 == 0 or chunks & (chunks - 1) == 0


def _tile_elems(rows: int, cols: int, swizzle: bool) -> int:
    """Elements of one shared tile stage, rounded up to 128 bytes (rows padded by 16 bytes without swizzle)."""
    n = rows * (cols if swizzle else cols + CH)
    return -(-n // 64) * 64


def shared_bytes(params: Params, layout: str) -> int:
    bm, bn, bk, sw = params["BM"], params["BN"], params["BK"], bool(params["SWIZZLE"])
    a = _tile_elems(bk, bm, sw) if layout[0] == "T" else _tile_elems(bm, bk, sw)
    b = _tile_elems(bn, bk, sw) if layout[1] == "T" else _tile_elems(bk, bn, sw)
    pipe = params["STAGES"] * (a + b) * ES
    warps = (bm // params["WM"]) * (bn // params["WN"])
    epilogue = warps * 16 * (params["WN"] + 8) * 4  # each warp stages 16 rows of floats
    return max(pipe, epilogue)


def derived(params: Params, variant: dict[str, Any]) -> dict[str, Any]:
    warps_m, warps_n = params["BM"] // params["WM"], params["BN"] // params["WN"]
    return {"WARPS_M": warps_m, "WARPS_N": warps_n, "THREADS": warps_m * warps_n * 32,
            "SHARED_BYTES": shared_bytes(params, variant["LAYOUT"])}  # fmt: skip


def check(params: Params) -> str | None:
    """Why this configuration can never be built (for any dtype and layout), or None."""
    p = params
    if p["BM"] % p["WM"] or p["BN"] % p["WN"]:
        return "the warp tile WMxWN must divide the block tile BMxBN"
    if p["WM"] % 16 or p["WN"] % 16:
        return "WM and WN must be multiples of 16"
    if p["BK"] % 16:
        return "BK must be a multiple of 16"
    threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    if threads > MAX_THREADS:
        return f"{threads} threads per block exceeds {MAX_THREADS}"
    if p["WM"] * p["WN"] // 32 > MAX_ACCUMULATORS:
        return f"more than {MAX_ACCUMULATORS} accumulators per thread (WM*WN/32)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    if p["SWIZZLE"] and not all(_swizzles(p[k]) for k in ("BM", "BN", "BK")):
        return "with SWIZZLE, BM, BN and BK must each be a power of two or a multiple of 64"
    if p["RASTER"] < 1:
        return "RASTER must be at least 1"
    return None


def check_problem(params: Params, problem: Any) -> str | None:
    """Why this configuration cannot compute this problem (dtype, 16-byte rows, grid), or None."""
    if problem.dtype not in DTYPES:
        return f"mma computes {', '.join(DTYPES)}, not {problem.dtype}"
    lda = problem.M if problem.layout[0] == "T" else problem.K
    ldb = problem.K if problem.layout[1] == "T" else problem.N
    if lda % CH or ldb % CH:
        return (
            f"mma needs leading dimensions of A and B that are multiples of {CH} (16-byte rows), "
            f"not {lda} and {ldb} in layout {problem.layout}; the wmma template takes any"
        )
    grid = launch(params, problem).grid
    if grid[1] > MAX_GRID_Y:
        return f"needs {grid[1]} row blocks, more than the {MAX_GRID_Y} a grid allows; use a larger BM"
    return None


def launch(params: Params, problem: Any) -> Launch:
    d = derived(params, {"LAYOUT": problem.layout})
    grid = (-(-problem.N // params["BN"]), -(-problem.M // params["BM"]), 1)
    return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """No split-K: the kernel takes the family's scratch arguments (to share its signature) and ignores them."""
    return 0, 0
