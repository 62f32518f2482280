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

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params, Step
from .gemm_problem import GemmTemplate
from .template import LaunchBound

PARAMS = ("BM", "BN", "BK", "WM", "WN", "STAGES", "SWIZZLE", "RASTER")
KINDS = (("SWIZZLE", "bool"),)
DESCRIPTION = "tensor cores through mma.sync m16n8k16 + ldmatrix, swizzled shared memory, cp.async pipeline"
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("NN", "NT", "TN", "TT")
ALIGNMENT_VARIANT = True  # an operand whose leading dimension is not whole 16-byte chunks is packed first

ES = 2  # bytes per element of every dtype here
CH = 8  # elements per 16-byte chunk
MAX_ACCUMULATORS = 128  # floats per thread
MAX_STAGES = 5
PACK_THREADS = 256
# The limits a pack step's grid is planned for; grid.y is 65535 on every architecture the table knows, so the
# launch (and the stored winners' launches) do not depend on the device. Tests shrink it to make the kernel loop.
LAUNCH_LIMITS = SM90


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


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built (for any dtype and layout), or None."""
    p = params
    if p["BM"] % p["WM"] or p["BN"] % p["WN"]:
        return "the warp tile WMxWN must divide the block tile BMxBN"
    if p["WM"] % 16 or p["WN"] % 16:
        return "WM and WN must be multiples of 16"
    if p["BK"] % 16:
        return "BK must be a multiple of 16"
    threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    if threads > limits.threads_per_block:
        return f"{threads} threads per block exceeds {limits.threads_per_block}"
    if p["WM"] * p["WN"] // 32 > MAX_ACCUMULATORS:
        return f"more than {MAX_ACCUMULATORS} accumulators per thread (WM*WN/32)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    if p["SWIZZLE"] and not all(_swizzles(p[k]) for k in ("BM", "BN", "BK")):
        return "with SWIZZLE, BM, BN and BK must each be a power of two or a multiple of 64"
    if p["RASTER"] < 1:
        return "RASTER must be at least 1"
    return None


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem (dtype, grid), or None. Any leading dimension
    works: misaligned operands are packed first."""
    if problem.dtype not in DTYPES:
        return f"mma computes {', '.join(DTYPES)}, not {problem.dtype}"
    grid = _grid(params, problem)
    if grid[1] > limits.max_grid_y:
        return f"needs {grid[1]} row blocks, more than the {limits.max_grid_y} a grid allows; use a larger BM"
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


def pack_step(rows: int, cols: int, kernel_name: str, limits: DeviceLimits | None = None) -> Step:
    """The pack kernel's launch for one operand: a thread per 16-byte chunk of a packed row (grid.x), a block
    row per matrix row (grid.y, which loops over the rows beyond the grid's y limit)."""
    grid = (-(-packed_ld(cols) // CH // PACK_THREADS), min(rows, (limits or LAUNCH_LIMITS).max_grid_y), 1)
    return Step(kernel_name + "_pack", grid, (PACK_THREADS, 1, 1), 0)


def _grid(params: Params, problem: Any) -> tuple[int, int, int]:
    return -(-problem.N // params["BN"]), -(-problem.M // params["BM"]), 1


def launch(params: Params, problem: Any, kernel_name: str = "", limits: DeviceLimits | None = None) -> Launch:
    """The GEMM's launch, after a pack step per misaligned operand (``kernel_name``: the GEMM's, which the pack
    kernel's name extends; required when there is one); ``limits``: LAUNCH_LIMITS by default."""
    d = derived(params, {"LAYOUT": problem.layout})
    ops = packed(problem)
    if ops and not kernel_name:
        raise ValueError("an mma launch that packs operands needs the kernel name")
    before = tuple(pack_step(rows, cols, kernel_name, limits) for _, rows, cols in ops)
    return Launch(_grid(params, problem), (d["THREADS"], 1, 1), d["SHARED_BYTES"], before=before)


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """No split-K: the kernel takes the family's scratch arguments (to share its signature) and ignores them."""
    return 0, 0


class MmaTemplate(GemmTemplate):
    name = "mma"
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
        return launch(params, problem, kernel_name)

    def scratch(self, params: Params, problem: Any) -> tuple[int, int]:
        return scratch(params, problem)

    def extra_bytes(self, params: Params, problem: Any) -> int:
        return extra_bytes(problem)

    def new_scratch(self, params: Params, problem: Any) -> tuple[Any, ...]:
        """The split-K pair (unused, zeroed), then one buffer per packed operand (rows x padded row, A first;
        the pack steps write all of it)."""
        import cupy as cp

        packs = [cp.empty((rows, packed_ld(cols)), problem.storage) for _, rows, cols in packed(problem)]
        return (*super().new_scratch(params, problem), *packs)

    def before_args(self, params: Params, problem: Any, inputs: Any, scratch: tuple[Any, ...]) -> tuple[Any, ...]:
        """The pack kernel takes (operand as stored, its packed buffer, rows, cols, padded row) once per packed
        operand."""
        import numpy as np

        stored = dict(zip("AB", inputs, strict=True))
        return tuple((stored[name], buf, np.int32(rows), np.int32(cols), np.int32(packed_ld(cols)))
                     for (name, rows, cols), buf in zip(packed(problem), scratch[2:], strict=True))  # fmt: skip

    def takes_scratch(self, scratch: tuple[Any, ...]) -> bool:
        """Packed operands follow the split-K pair."""
        return len(scratch) > 2 and not isinstance(scratch[2], LaunchBound)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """The GEMM reads the packed copies in place of the misaligned A and/or B."""
        packs = dict(zip((name for name, _, _ in packed(problem)), scratch[2:], strict=True))
        a, b = packs.get("A", inputs[0]), packs.get("B", inputs[1])
        return super().kernel_args(problem, (a, b), out, alpha, beta, scratch[:2])

    def c_abi(self) -> str:
        return (
            "mma: (const T* A, const T* B, T* C, int M, int N, int K, float alpha, float beta, float* partial, "
            "unsigned* counters) (the scratch is unused: 0 floats, 0 counters). An A or B whose leading dimension "
            "is not a multiple of 8 (name tagged _ua, _ub or _uab) is packed first: `<kernel_name>_pack` (const T* "
            "src, T* dst, int rows, int cols, int ld) once per such operand, A first, with src the operand as "
            "stored (rows x cols: A M x K or K x M, B K x N or N x K) and dst a buffer of rows x ld elements of T, "
            "ld = cols rounded up to a multiple of 8; `kernel_name` then takes the packed buffers in place of those "
            "operands."
        )


TEMPLATE = MmaTemplate()
