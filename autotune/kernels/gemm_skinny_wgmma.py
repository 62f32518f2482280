"""Skinny-M fp32 GEMM on Hopper's warpgroup tensor cores with fp32 accuracy (3xTF32 wgmma):
C[M,N] = alpha * op(A) @ B + beta * C.

The template is templates/gemm/skinny_wgmma.cu.j2, the sm_90a sibling of skinny_tc (mma.sync). The split into
tf32 high parts and residuals and the three products per fragment are skinny_tc's; what changes is the tensor
core instruction. ``wgmma.mma_async`` m64nMBk8 takes B^T (64 columns of B x 8 rows of K, split in registers) as
its register operand and A^T (8 rows of K x MB rows of C, split once per chunk into shared memory) through a
shared-memory descriptor, so one instruction does the work of 8 * MB / 8 mma.sync, runs asynchronously, and
reads A's fragments without a shared load per mma. It exists because skinny_tc at M = 64 keeps the tensor pipe
busy only 38% of the time, bound by the per-mma work (benchmarks/README.md, "skinny_tc").

A block is WG warpgroups side by side along N, each 64 columns of B (BN = 64 * WG); MB rows of C per block (the
wgmma's N); KC rows of K per chunk through a cp.async ring of STAGES buffers; ROUND rows of K summed on the
tensor cores before each rounded fp32 add; one chunk's wgmmas in flight behind the current one's work; TMA: B's
(and NN's A's) chunks by the tensor memory accelerator (boxes of tensor maps made per operand, ``TensorMaps``)
instead of cp.async; grid
(ceil(M / MB), ceil(N / BN), SPLIT_K); with CLUSTER the SPLIT_K blocks of a tile form a thread-block cluster and
sum their partial tiles through distributed shared memory (else through global partials: the last block of a
tile to arrive keeps its own in shared memory and sums the others in z order). Every
derived quantity is computed here and only here; the template mirrors each check with a ``static_assert``.
Compiled for sm_90a (autotune/build/compiler.py's ARCH_SPECIFIC); on any other GPU it fails to compile, a candidate's
state.

Example::

    >>> p = dict(WG=2, MB=64, KC=32, STAGES=4, ROUND=128, SPLIT_K=4, CLUSTER=True, MINB=1, TMA=True)
    >>> launch(p, Problem(64, 4096, 4096, "float32")).grid
    (1, 32, 4)
"""

from __future__ import annotations

from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .gemm_problem import SPLIT_K_ABI, GemmTemplate
from .gemm_skinny import Problem as Problem  # the shape a launch needs, as for skinny
from .gemm_skinny import check_variant, grid_problem, reg_cap, split_k_scratch, unsupported
from .gemm_skinny_tc import launch as row_group_launch
from .gemm_skinny_tc import resident_reason
from .template import LaunchBound

PARAMS: tuple[str, ...] = ("WG", "MB", "KC", "STAGES", "ROUND", "SPLIT_K", "CLUSTER", "MINB", "TMA")
KINDS: tuple[tuple[str, str], ...] = (("CLUSTER", "bool"), ("TMA", "bool"))
CLUSTER_SPLITS = (2, 4, 8)  # a portable cluster holds at most 8 blocks
DESCRIPTION = "skinny-M fp32 GEMM on sm_90a warpgroup tensor cores, fp32-accurate (3xTF32 wgmma), split-K"

DTYPES = {"float32": ("float", 4)}
LAYOUTS = ("NN", "TN")  # NT (B stored N x K) is not implemented
WGS = (1, 2, 4)
MBS = (8, 16, 32, 64)  # the wgmma's N (it allows up to 256; C has few rows); powers of two divide THREADS
KCS = (16, 32)  # two chunks of B^T fragments live in registers: 2 x KC floats a thread
MAX_ROUND = 256  # rows of K summed by the tensor cores between rounded adds (error ~7e-9 x ROUND, relative)
MAX_STAGES = 8
REG_SLACK = 56  # addresses, loop state, split temporaries


def variant(dtype: str, layout: str) -> dict[str, Any]:
    """The dtype/layout keys of the render context."""
    check_variant(dtype, layout, DTYPES)
    return {"DTYPE": dtype, "LAYOUT": layout, "TRANS_A": layout[0] == "T", "TRANS_B": layout[1] == "T"}


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """Threads, tiles and shared memory of a configuration (the same for both layouts)."""
    p = params
    threads = 128 * p["WG"]
    bn = 64 * p["WG"]
    a_raw = max(p["MB"] * (p["KC"] + 4), p["KC"] * (p["MB"] + 4))  # A as stored, rows padded by 4 (either layout)
    stage = -(-(p["KC"] * bn + a_raw) // 256) * 256  # B's boxes, then A; whole 1024-byte blocks (TMA's swizzle)
    split = p["KC"] * p["MB"]  # A^T's high parts (or residuals) of one chunk, in core matrices
    return {
        "THREADS": threads,
        "BN": bn,
        "BNP": bn + 8,
        "KS": p["KC"] // 8,
        "ND": p["MB"] // 2,
        "ALD": (p["MB"] if variant and variant.get("TRANS_A") else p["KC"]) + 4,
        "STAGE": stage,
        "SPLIT": split,
        # the ring, 3 split buffers (high and residual), with CLUSTER the split-K slots (a tile's floats), up to
        # 1024 bytes to start the ring on a 1024-byte boundary, and the stage barriers (B's and A's, 8 bytes each)
        "SHARED_BYTES": (p["STAGES"] * stage + 6 * split + (p["MB"] * bn if p["CLUSTER"] else 0)) * 4
        + 1024
        + 16 * p["STAGES"],
        "REG_CAP": reg_cap(threads, p["MINB"], SM90),
    }


def register_estimate(params: Params) -> int:
    """The accumulators and the window's sums (2 x MB / 2), two chunks of split B^T fragments, and slack."""
    return 2 * (params["MB"] // 2) + 2 * params["KC"] + REG_SLACK


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Mirrored by the template's static_asserts."""
    p = params
    if p["WG"] not in WGS:
        return f"WG must be one of {', '.join(map(str, WGS))} (warpgroups of 128 threads)"
    if p["MB"] not in MBS:
        return f"MB must be one of {', '.join(map(str, MBS))} (the wgmma's N)"
    if p["KC"] not in KCS:
        return f"KC must be one of {', '.join(map(str, KCS))}"
    if p["ROUND"] < 2 * p["KC"] or p["ROUND"] % p["KC"] or p["ROUND"] > MAX_ROUND:
        return f"ROUND must be a multiple of KC = {p['KC']}, from 2 KC to {MAX_ROUND} rows (at 1 KC ptxas serializes)"
    if not 3 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 3 to {MAX_STAGES} (chunk s + 1 lands while chunk s is computed)"
    threads = 128 * p["WG"]
    if threads * p["MINB"] > limits.threads_per_sm:
        return f"MINB = {p['MINB']} blocks of {threads} threads exceed {limits.threads_per_sm} threads per SM"
    if p["SPLIT_K"] < 1 or p["SPLIT_K"] > limits.max_grid_z:
        return f"SPLIT_K = {p['SPLIT_K']} must be 1 to the grid's z limit of {limits.max_grid_z}"
    if p["CLUSTER"] and p["SPLIT_K"] not in CLUSTER_SPLITS:
        return f"CLUSTER needs SPLIT_K = 2, 4 or 8 (the blocks of a tile form one cluster), not {p['SPLIT_K']}"
    d = derived(p)
    if d["SHARED_BYTES"] > limits.max_shared_per_block:
        need, most = d["SHARED_BYTES"], limits.max_shared_per_block
        return f"the ring, A's split (and CLUSTER's slots) need {need} bytes of shared memory, more than {most}"
    return resident_reason(p["MINB"], d, register_estimate(p), limits)


def launch(params: Params, problem: Any) -> Launch:
    return row_group_launch(params, problem, derived(params))


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of `partial`, unsigned `counters`) the launch needs; counters must start at zero. Two counters a
    tile (blocks arrived, partials stored); none with CLUSTER: its partial tiles meet in the cluster's shared
    memory."""
    split_k = 1 if params["CLUSTER"] else params["SPLIT_K"]
    floats, counters = split_k_scratch(split_k, problem, launch(params, problem).grid)
    return floats, 2 * counters


class TensorMaps(LaunchBound):
    """Kernel arguments made per launch: the tensor maps of the launch's A and B, whose boxes are what the
    template's ``a_index`` and ``b_index`` read. B (K x N, row-major): boxes of 32 columns x KC rows, 128-byte
    swizzle. A (layout NN only, M x K): one box of KC columns x MB rows a chunk, 128-byte swizzle for KC = 32 and
    64-byte for KC = 16. The kernel copies by TMA only where N % 4 == 0 (for A: K % 4 == 0) and the operand is
    16-byte aligned, the conditions under which a map is made here (else 128 zero bytes stand in for it, never
    read). Maps are kept per operand address (a few of each: making one is host work on every new address)."""

    def __init__(self, params: Params, problem: Any) -> None:
        self.m, self.n, self.k = problem.M, problem.N, problem.K
        self.kc, self.mb = params["KC"], params["MB"]
        self.nn = problem.layout[0] == "N"
        self._maps: tuple[dict[int, Any], dict[int, Any]] = ({}, {})

    def bind(self, a: Any, b: Any) -> tuple[Any, Any]:
        """(A's map, B's map) for these operands."""
        return self._map(0, a.data.ptr), self._map(1, b.data.ptr)

    def _map(self, which: int, ptr: int) -> Any:
        cache = self._maps[which]
        m = cache.get(ptr)
        if m is None:
            import numpy as np

            from ..core.tensormap import MAP_BYTES, SWIZZLE_64B, SWIZZLE_128B, tiled_2d_f32

            if which == 1 and self.n % 4 == 0 and ptr % 16 == 0:
                m = tiled_2d_f32(ptr, self.n, self.k, self.n * 4, (32, self.kc), SWIZZLE_128B)
            elif which == 0 and self.nn and self.k % 4 == 0 and ptr % 16 == 0:
                swizzle = SWIZZLE_128B if self.kc == 32 else SWIZZLE_64B
                m = tiled_2d_f32(ptr, self.k, self.m, self.k * 4, (self.kc, self.mb), swizzle)
            else:
                m = np.zeros(1, dtype=np.dtype((np.void, MAP_BYTES)))
            if len(cache) >= 8:
                cache.clear()
            cache[ptr] = m
        return m


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot run this problem, or None."""
    return unsupported("skinny_wgmma", problem, DTYPES, LAYOUTS) or grid_problem(
        launch(params, problem).grid, scratch(params, problem)[0], "WG", limits
    )


TENSOR_MAP_ABI = (
    "then two CUtensorMaps by value (__grid_constant__), A's then B's, each from cuTensorMapEncodeTiled as float32 "
    "with element strides {1, 1}, no interleave, no L2 promotion, OOB fill none: B dims {N, K}, stride {N*4} bytes, "
    "box {32, KC}, CU_TENSOR_MAP_SWIZZLE_128B; A (layout NN) dims {K, M}, stride {K*4}, box {KC, MB}, SWIZZLE_128B "
    "for KC = 32 and SWIZZLE_64B for KC = 16 (KC, MB from params). 128 zero bytes for B when N % 4 != 0 or B is not "
    "16-byte aligned, for A when the layout is TN, K % 4 != 0 or A is not 16-byte aligned (the kernel then never "
    "reads that map)."
)


class SkinnyWgmmaTemplate(GemmTemplate):
    name = "skinny_wgmma"
    params = PARAMS
    dtypes = tuple(DTYPES)
    layouts = LAYOUTS
    kinds = KINDS
    description = DESCRIPTION
    arch = "sm_90a"
    arch_note = (
        "skinny_wgmma needs sm_90a (wgmma, TMA and thread-block clusters): for any other architecture it fails to "
        "compile."
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

    def new_scratch(self, params: Params, problem: Any) -> tuple[Any, ...]:
        """The split-K pair, then A's and B's tensor maps (made per operand address at launch)."""
        return (*super().new_scratch(params, problem), TensorMaps(params, problem))

    def takes_scratch(self, scratch: tuple[Any, ...]) -> bool:
        return len(scratch) == 3 and isinstance(scratch[2], TensorMaps)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """The split-K pair, then the maps of this launch's A and B."""
        a, b = inputs
        return super().kernel_args(problem, inputs, out, alpha, beta, (*scratch[:2], *scratch[2].bind(a, b)))

    def c_abi(self) -> str:
        return (
            "skinny_wgmma: (const float* A, const float* B, float* C, int M, int N, int K, float alpha, float beta), "
            + SPLIT_K_ABI.removesuffix(".")
            + "; "
            + TENSOR_MAP_ABI
        )


TEMPLATE = SkinnyWgmmaTemplate()
