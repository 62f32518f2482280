"""The mma.sync GEMM template (templates/gemm/mma.cu.j2): parameters, derived values and checks.

Tensor cores through inline PTX: ``mma.sync.aligned.m16n8k16`` on fragments that ``ldmatrix`` reads from
XOR-swizzled (or padded) shared memory, filled by a multi-stage ``cp.async`` pipeline. fp16 and bf16 inputs,
fp32 accumulation, every layout. Every check here is mirrored by a ``static_assert``.

The tiles are copied in 16-byte chunks, so rows must be whole chunks. An operand whose leading dimension is
not a multiple of 8 elements is packed first: a source variant (ALIGN_A/ALIGN_B false, kernel name tagged
``ua``, ``ub`` or ``uab``) adds the kernel ``<kernel_name>_pack``, launched once per such operand before the
GEMM (``Launch.before``), which copies it into a scratch buffer with rows rounded up to 8 elements, zeros in
the padding; the GEMM reads the packed copies with that padded leading dimension. The packed buffers are the
extra memory (``extra_bytes``); aligned problems render the same source as before packing existed.

    block tile   BM x BN x BK, split among (BM/WM) x (BN/WN) warps
    warp tile    WM x WN, (WM/16) x (WN/8) m16n8k16 instructions per k-step of 16

Example::

    >>> p = dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=True, RASTER=8)
    >>> derived(p, {"LAYOUT": "NN"})["THREADS"], shared_bytes(p, "NN")
    (256, 98304)
"""

from __future__ import annotations

from typing import Any

from .base import Launch, Params, Step

PARAMS = ("BM", "BN", "BK", "WM", "WN", "STAGES", "SWIZZLE", "RASTER")
KINDS = (("SWIZZLE", "bool"),)
DESCRIPTION = "tensor cores through mma.sync m16n8k16 + ldmatrix, swizzled shared memory, cp.async pipeline"
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("NN", "NT", "TN", "TT")
ALIGNMENT_VARIANT = True  # an operand whose leading dimension is not whole 16-byte chunks is packed first

ES = 2  # bytes per element of every dtype here
CH = 8  # elements per 16-byte chunk
MAX_THREADS = 1024
MAX_ACCUMULATORS = 128  # floats per thread
MAX_STAGES = 5
MAX_GRID_Y = 65535
PACK_THREADS = 256


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
            "SHARED_BYTES": shared_bytes(params, variant["LAYOUT"]), "PACK_THREADS": PACK_THREADS}  # fmt: skip


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
    """Why this configuration cannot compute this problem (dtype, grid), or None. Any leading dimension
    works: misaligned operands are packed first."""
    if problem.dtype not in DTYPES:
        return f"mma computes {', '.join(DTYPES)}, not {problem.dtype}"
    grid = _grid(params, problem)
    if grid[1] > MAX_GRID_Y:
        return f"needs {grid[1]} row blocks, more than the {MAX_GRID_Y} a grid allows; use a larger BM"
    return None


def packed(problem: Any) -> tuple[tuple[str, int, int], ...]:
    """The operands to pack, in launch order (A first): (name, rows, cols) of each as stored (A is M x K, or
    K x M in a "T" layout; B is K x N, or N x K), for those whose rows (cols) are not whole 16-byte chunks.

    >>> from autotune.kernels.gemm import GEMM
    >>> packed(GEMM.problem("4095x4097x4093", "float16"))
    (('A', 4095, 4093), ('B', 4093, 4097))
    """
    p = problem
    a = ("A", p.K, p.M) if p.layout[0] == "T" else ("A", p.M, p.K)
    b = ("B", p.N, p.K) if p.layout[1] == "T" else ("B", p.K, p.N)
    return tuple(op for op in (a, b) if op[2] % CH)


def packed_ld(cols: int) -> int:
    """A packed row: ``cols`` elements rounded up to whole 16-byte chunks."""
    return -(-cols // CH) * CH


def extra_bytes(problem: Any) -> int:
    """Bytes of the packed copies (0 when both operands are aligned)."""
    return sum(rows * packed_ld(cols) * ES for _, rows, cols in packed(problem))


def pack_step(rows: int, cols: int, kernel_name: str) -> Step:
    """The pack kernel's launch for one operand: a thread per 16-byte chunk of a packed row (grid.x), a block
    row per matrix row (grid.y, which loops over the rows beyond MAX_GRID_Y)."""
    grid = (-(-packed_ld(cols) // CH // PACK_THREADS), min(rows, MAX_GRID_Y), 1)
    return Step(kernel_name + "_pack", grid, (PACK_THREADS, 1, 1), 0)


def _grid(params: Params, problem: Any) -> tuple[int, int, int]:
    return -(-problem.N // params["BN"]), -(-problem.M // params["BM"]), 1


def launch(params: Params, problem: Any, kernel_name: str = "") -> Launch:
    """The GEMM's launch, after a pack step per misaligned operand (``kernel_name``: the GEMM's, which the pack
    kernel's name extends; required when there is one)."""
    d = derived(params, {"LAYOUT": problem.layout})
    ops = packed(problem)
    if ops and not kernel_name:
        raise ValueError("an mma launch that packs operands needs the kernel name")
    before = tuple(pack_step(rows, cols, kernel_name) for _, rows, cols in ops)
    return Launch(_grid(params, problem), (d["THREADS"], 1, 1), d["SHARED_BYTES"], before=before)


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """No split-K: the kernel takes the family's scratch arguments (to share its signature) and ignores them."""
    return 0, 0
