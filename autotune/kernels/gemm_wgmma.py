"""The large-GEMM template on Hopper's warpgroup tensor cores (templates/gemm/wgmma.cu.j2): fp16 and bf16 with
fp32 accumulation, every layout, operands read in place through TMA tensor maps.

A block is a producer warpgroup (one thread issues the TMA copies of a ring of STAGES stages) and CONSUMERS (1-3)
warpgroups that run ``wgmma.mma_async`` m64n{BN}k16 from shared memory, each on BM / CONSUMERS rows of the
BM x BN block tile; blocks are persistent (one per SM, tiles walked in a RASTER-grouped order). Every check here
is mirrored by a ``static_assert`` in the template. Three consumers make 192-row tiles, for tile counts just past a
whole wave of SMs in 128- or 256-row tiles (2040x2056: 144 tiles of 128 x 256 on 132 SMs; 121 of 192 x 192).

The tensor maps need 16-byte aligned rows (leading dimensions a multiple of 8 elements) and 16-byte aligned operands;
``check_problem`` refuses other problems, which the mma template packs and computes. Example::

    >>> p = dict(BM=128, BN=256, CONSUMERS=2, STAGES=4, RASTER=8, CLUSTER_M=2, TMA_STORE=False)
    >>> d = derived(p)
    >>> d["THREADS"], d["SHARED_BYTES"]
    (384, 197696)

CLUSTER_M = 2 pairs blocks on vertically adjacent tiles into a thread-block cluster that loads B's tile once, by
TMA multicast. TMA_STORE stages each tile in shared memory and stores it by TMA (C's rows must then be whole 16
bytes too); EPI_BOXES (optional, default 0: whole rows) stages a consumer's rows in 1 or 2 boxes of 64 columns used in
turn, leaving shared memory for another stage. PINGPONG (optional, default False; CONSUMERS = 2) gives the two
consumers alternate tiles, each the whole BM x BN tile, so one stores its tile while the other computes::

    >>> derived(dict(p, CLUSTER_M=1, STAGES=4, TMA_STORE=True, EPI_BOXES=2))["SHARED_BYTES"]  # 4 stages + 4 boxes
    230464

BN may be any multiple of 16 from 64 to 256; one that is no multiple of 64 (176: 2040 x 2056 in 132 tiles of 192 x 176)
takes whole 64-column boxes of the ring, and its TMA store (no EPI_BOXES) boxes of 16 columns, ending at the tile::

    >>> check(dict(p, BM=192, BN=176, CONSUMERS=3, STAGES=3, CLUSTER_M=1, TMA_STORE=True)) is None
    True
    >>> nmajor = {"TRANS_B": False}  # B stored K x N: its tile in whole 64-column boxes (a K-major one takes BN rows)
    >>> derived(dict(p, BN=176), nmajor)["SHARED_BYTES"] == derived(dict(p, BN=192), nmajor)["SHARED_BYTES"]
    True
    >>> staging_bytes(dict(p, BM=192, BN=176, CONSUMERS=3, TMA_STORE=True))  # 192 rows x 176 columns x 2 bytes
    67584

L2_PROMOTION (optional, default 256): the L2 promotion of A's and B's tensor maps in bytes (0: none; 64, 128), how much
L2 fetches on a miss; only the maps made at launch change (TensorMaps). 128 won 2040x2056x2072 (rows not whole 128 B).

SWAP_AB (optional, default False) computes C^T = B^T A^T (``swapped``: the caller's B as the kernel's A, M and N
swapped, each operand in the layout that reads the same memory; C stored transposed), so BM runs along C's columns
and BN, any multiple of 16, along its rows: 272x4096x4096 in tiles of 64 columns by 144 rows computes 288 rows.

SNAKE (optional, default False) turns the walk back for L2: a block's every other tile reads K backwards, so a
wave's first stages are those the wave before read last, and every other group of RASTER tile rows walks its columns
right to left (4096^3 in 128 x 256 tiles walked 16 rows at a time read 116 MB from DRAM with it, 144 without).

EVICT_A, EVICT_B, EVICT_C (optional, default normal: no hint) give the TMA copies of A's and B's tiles and C's TMA
store an L2 eviction priority, last or first: L2 keeps A's panels, which the next wave of a RASTER group reads again,
and lets B's (one wave's) and C's (written once) go first::

    >>> check(dict(p, EVICT_A="last", EVICT_B="first")) is None, check(dict(p, EVICT_C="keep"))[:33]
    (True, 'EVICT_A, EVICT_B and EVICT_C must')

SPLIT > 1 (optional, default 1; CLUSTER_M = 1) splits the tail: the tiles past the last whole wave of blocks (all
of them when there are fewer tiles than blocks) are cut along K into SPLIT equal runs, which the blocks take in turn
after their whole tiles, neighbouring tiles' same runs side by side (so concurrent blocks read the same stages of K);
the runs' fp32 partials are summed in run order by whichever run counts last (``walk`` deals as the kernel does)::

    >>> tail = walk(dict(p, CLUSTER_M=1, SPLIT=4), Problem(2040, 2056, 2072, "float16", "NN"), blocks=132)
    >>> tail[0], tail[13]  # 144 tiles: 132 whole, then the last 12 in 4 runs of their 33 stages
    ([(0, 0, 33), (132, 0, 8)], [(13, 0, 33), (133, 8, 16)])
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.limits import SM90, DeviceLimits, multiprocessors
from ..core.tensormap import L2_PROMOTIONS, SWIZZLE_32B, SWIZZLE_128B
from .base import Launch, Params
from .gemm_problem import GemmProblem as Problem  # noqa: F401 (the examples above use it)
from .gemm_problem import GemmTemplate, problem_variant
from .gemm_wgmma_maps import BK, CMap, TensorMaps
from .gemm_wgmma_walk import Tail, groups, split, walk  # noqa: F401 (walk: the examples above; tests)

PARAMS = (
    "BM",
    "BN",
    "CONSUMERS",
    "STAGES",
    "RASTER",
    "CLUSTER_M",
    "TMA_STORE",
    "SPLIT",
    "EPI_BOXES",
    "PINGPONG",
    "L2_PROMOTION",
    "SWAP_AB",
    "SNAKE",
    "EVICT_A",
    "EVICT_B",
    "EVICT_C",
)
# these came after winners were stored: at their defaults (or absent) the kernel renders and is named as before
DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("SPLIT", 1), ("EPI_BOXES", 0), ("PINGPONG", False), ("L2_PROMOTION", 256), ("SWAP_AB", False),
    ("SNAKE", False), ("EVICT_A", "normal"), ("EVICT_B", "normal"), ("EVICT_C", "normal"),
)  # fmt: skip
EVICTIONS = ("normal", "last", "first")  # L2 eviction priority of an operand's lines (normal: no hint)
KINDS = (("TMA_STORE", "bool"), ("PINGPONG", "bool"), ("EPI_BOXES", "int>=0"), ("L2_PROMOTION", "int>=0"),
         ("SWAP_AB", "bool"), ("SNAKE", "bool"),
         *((f"EVICT_{x}", "choice:" + ",".join(EVICTIONS)) for x in "ABC"))  # fmt: skip
DESCRIPTION = "sm_90a warpgroup MMA (wgmma) fed by TMA, warp-specialized producer/consumers, persistent blocks"
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("NN", "NT", "TN", "TT")
BN_STEP = 16  # BN: a multiple of 16 from 64 to 256 (wgmma's N; a block pair's halves of K-major rows whole 8-row atoms)
CLUSTERS = (1, 2)
CONSUMER_ROWS = (64, 128)  # rows of the tile per consumer warpgroup: one or two m64 wgmmas per k-step
MAX_ACCUMULATORS = 128  # floats per consumer thread
MAX_STAGES = 8
MAX_SPLIT = 32
EPI_BOXES = (0, 1, 2)  # 64-column staging boxes a consumer; 0: its whole rows
PROMOTIONS = L2_PROMOTIONS  # promotion bytes -> cuda.h's enum (core/tensormap.py)
# setmaxnreg with two consumers: 384 threads start at 168 registers (65536 / 384, in steps of 8); the producer
# gives 128 of its registers back and each consumer takes 64 more. With three (BM = 192: 64 rows each) 512 threads
# start at 128, which is also what ptxas compiles every path for (__launch_bounds__(512, 1)): a consumer holds at
# most 96 accumulators (BN <= 192; 128 of them need 154 registers); the producer gives 88 back, each consumer takes 24
REGS = {1: (40, 240), 2: (40, 232), 3: (40, 152)}
MAX_ACCUMULATORS_3 = 96  # floats per consumer thread with three consumers
MAX_BM = 256  # A's K-major tile is one TMA box of BM rows, and a box spans at most 256


def b_rows(params: Params, variant: dict[str, Any] | None = None) -> int:
    """Rows of B's tile in a ring stage: BN, or BN in whole 64-column boxes where it is no multiple of 64 and B is
    N-major (not the variant's TRANS_B: copied in boxes of 64 columns). Without a variant the fewest, BN."""
    whole = variant is not None and not variant["TRANS_B"]
    return -(-params["BN"] // 64) * 64 if whole else params["BN"]


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """The template's derived values; SHARED_BYTES for the variant of the problem the kernel computes (the
    fewest bytes of any layout without one)."""
    p = params
    stage = (p["BM"] + b_rows(p, variant)) * BK * 2
    producer, consumer = REGS.get(p["CONSUMERS"], (40, 232))
    return {
        "THREADS": 128 * (p["CONSUMERS"] + 1),
        "SHARED_BYTES": p["STAGES"] * stage + staging_bytes(p) + 1024 + 16 * p["STAGES"],
        "PRODUCER_REGS": producer,
        "CONSUMER_REGS": consumer,
        "SPLIT": split(p),
        "MAX_SPLIT": MAX_SPLIT,
        "EPI_BOXES": epi_boxes(p),
        "PINGPONG": pingpong(p),
        "SWAP_AB": swap_ab(p),
        "SNAKE": bool(p.get("SNAKE", False)),
        **{f"EVICT_{x}": p.get(f"EVICT_{x}", "normal") for x in "ABC"},
    }


def pingpong(params: Params) -> bool:
    """Whether the consumers take alternate tiles (each the whole tile); False for configurations without it."""
    return bool(params.get("PINGPONG", False))


def epi_boxes(params: Params) -> Any:
    """EPI_BOXES of a configuration; 0 (the staging holds a consumer's whole rows) when it has none."""
    return params.get("EPI_BOXES", 0)


def consumer_rows(params: Params) -> int:
    """Rows of the block tile a consumer warpgroup computes: all of them with PINGPONG, else its share."""
    return params["BM"] if pingpong(params) else params["BM"] // params["CONSUMERS"]


def staging_bytes(params: Params) -> int:
    """The TMA store's staging in shared memory: each consumer's rows, whole or EPI_BOXES boxes of 64 columns."""
    if not params["TMA_STORE"]:
        return 0
    row_bytes = 128 * epi_boxes(params) if epi_boxes(params) else 2 * params["BN"]
    return params["CONSUMERS"] * consumer_rows(params) * row_bytes


def c_box(params: Params) -> int:
    """Columns of a TMA store's box: 64, or 16 (32-byte swizzle) where BN is no multiple of 64 (none crosses a tile)."""
    return 16 if params["BN"] % 64 else 64


def l2_promotion(params: Params) -> Any:
    """L2_PROMOTION of a configuration: the bytes A's and B's tensor maps ask L2 to fetch a miss as; 256 (what every
    configuration stored before it used) when it has none."""
    return params.get("L2_PROMOTION", 256)


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None."""
    p = params
    if p["CONSUMERS"] not in REGS:
        return "CONSUMERS must be 1, 2 or 3 warpgroups"
    if p["BM"] > MAX_BM:
        return f"BM must be at most {MAX_BM} rows (one TMA box of A's rows)"
    if p["CONSUMERS"] == 3 and p["BM"] // 3 // 64 * p["BN"] // 2 > MAX_ACCUMULATORS_3:
        return (
            f"with three consumers at most {MAX_ACCUMULATORS_3} accumulators per consumer thread (BN <= 192): "
            "512 threads compile at 128 registers each"
        )
    if p["BN"] % BN_STEP or not 64 <= p["BN"] <= 256:
        return f"BN must be a multiple of {BN_STEP} from 64 to 256 (the wgmma's N)"
    if swap_ab(p) and epi_boxes(p):
        return "SWAP_AB stages each consumer's rows whole (boxes of 64 of C's columns x BN rows): EPI_BOXES must be 0"
    if p["BN"] % 64 and epi_boxes(p):
        return f"EPI_BOXES needs BN a multiple of 64 (its boxes are 64 columns), not {p['BN']}: EPI_BOXES must be 0"
    if pingpong(p) and (p["CONSUMERS"] != 2 or p["CLUSTER_M"] != 1 or split(p) != 1):
        return "PINGPONG needs CONSUMERS = 2 and CLUSTER_M = 1, without a split tail (SPLIT = 1)"
    rows = "BM" if pingpong(p) else "BM / CONSUMERS"
    if p["BM"] % p["CONSUMERS"] or consumer_rows(p) not in CONSUMER_ROWS:
        return f"{rows} must be 64 or 128 rows (one or two m64 wgmmas per consumer)"
    if consumer_rows(p) // 64 * p["BN"] // 2 > MAX_ACCUMULATORS:
        return f"more than {MAX_ACCUMULATORS} accumulators per consumer thread: {rows} x BN above 64 x 256"
    if epi_boxes(p) not in EPI_BOXES or (epi_boxes(p) and not p["TMA_STORE"]):
        return "EPI_BOXES must be 1 or 2, with TMA_STORE (or 0: the staging holds a consumer's whole rows)"
    if l2_promotion(p) not in tuple(PROMOTIONS) or isinstance(l2_promotion(p), bool):
        sizes = ", ".join(map(str, PROMOTIONS))
        return f"L2_PROMOTION must be one of {sizes} (bytes of an L2 fetch of A and B; 0: none)"
    if any(p.get(f"EVICT_{x}", "normal") not in EVICTIONS for x in "ABC"):
        return "EVICT_A, EVICT_B and EVICT_C must each be normal, last or first (the L2 eviction priority of its lines)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    if p["RASTER"] < 1:
        return "RASTER must be at least 1"
    if p["CLUSTER_M"] not in CLUSTERS:
        return "CLUSTER_M must be 1 or 2 blocks"
    if not 1 <= split(p) <= MAX_SPLIT:
        return f"SPLIT must be 1 to {MAX_SPLIT} blocks a tile"
    if split(p) > 1 and p["CLUSTER_M"] != 1:
        return "SPLIT > 1 (a split tail) needs CLUSTER_M = 1"
    d = derived(p)
    if d["THREADS"] > limits.threads_per_block:
        return f"{d['THREADS']} threads per block exceeds {limits.threads_per_block}"
    if d["SHARED_BYTES"] > limits.max_shared_per_block:
        need, most = d["SHARED_BYTES"], limits.max_shared_per_block
        staging = " and the staging tile" if p["TMA_STORE"] else ""
        return f"{p['STAGES']} stages{staging} need {need} bytes of shared memory, more than the {most} a block may use"
    return None


def _leading(problem: Any) -> tuple[int, int]:
    """Elements per stored row of A and of B."""
    lda = problem.M if problem.layout[0] == "T" else problem.K
    ldb = problem.K if problem.layout[1] == "T" else problem.N
    return lda, ldb


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem, or None: the dtype, and the tensor maps' 16-byte rows."""
    if problem.dtype not in DTYPES:
        return f"wgmma computes {', '.join(DTYPES)}, not {problem.dtype}"
    lda, ldb = _leading(problem)
    if lda % 8 or ldb % 8:
        return (
            f"wgmma reads A and B through TMA tensor maps, whose rows must be whole 16 bytes: leading dimensions "
            f"{lda} (A) and {ldb} (B) must be multiples of 8 (the mma template packs such operands)"
        )
    if params["TMA_STORE"] and problem.N % 8:
        return (
            f"TMA_STORE stores C through a tensor map, whose rows must be whole 16 bytes: N = {problem.N} is no "
            "multiple of 8"
        )
    need, most = derived(params, computed_variant(params, problem))["SHARED_BYTES"], limits.max_shared_per_block
    if need > most:  # B N-major with BN no multiple of 64: its tile in whole 64-column boxes
        return f"in layout {problem.layout}, {params['STAGES']} stages need {need} bytes of shared memory, not {most}"
    return None


def computed_variant(params: Params, problem: Any) -> dict[str, Any]:
    """The variant (dtype, layout, TRANS_A, TRANS_B) of the problem the kernel computes."""
    return problem_variant(computed(params, problem))


def launch(params: Params, problem: Any) -> Launch:
    """One persistent block per SM (or per tile, SPLIT blocks a tile with a split tail, when there are fewer or no
    GPU to count SMs on), in whole clusters."""
    d, cluster = derived(params, computed_variant(params, problem)), params["CLUSTER_M"]
    n = groups(params, computed(params, problem)) * split(params)
    sms = multiprocessors()
    return Launch((cluster * (min(n, sms // cluster) if sms else n), 1, 1), (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats, counters) of a split tail: a partial tile (BM x BN floats) a run of every tail tile, a counter per
    consumer of each; none without it."""
    if split(params) == 1:
        return 0, 0
    tail = Tail.of(params, computed(params, problem), launch(params, problem).grid[0])
    return tail.sk * tail.pieces * params["BM"] * params["BN"], tail.sk * params["CONSUMERS"]


def swap_ab(params: Params) -> bool:
    """Whether the kernel computes C^T = B^T A^T (SWAP_AB); False for configurations without it."""
    return bool(params.get("SWAP_AB", False))


def swapped(problem: Any) -> Any:
    """The problem a SWAP_AB kernel computes: C^T (N x M) = B^T A^T, its A the caller's B and its B the caller's A,
    each in the layout that reads the same memory (a row-major B is a B^T stored transposed)."""
    layout = ("N" if problem.layout[1] == "T" else "T") + ("T" if problem.layout[0] == "N" else "N")
    return dataclasses.replace(problem, M=problem.N, N=problem.M, layout=layout)


def computed(params: Params, problem: Any) -> Any:
    """The problem the kernel computes: ``swapped`` with SWAP_AB, else the caller's."""
    return swapped(problem) if swap_ab(params) else problem


def tensor_maps(params: Params, problem: Any) -> TensorMaps:
    """The launch's maps (gemm_wgmma_maps). C's is over the caller's C (rows of N): boxes of 64 columns x a
    consumer's rows, 16 columns (32-byte swizzle) where BN is no multiple of 64; with SWAP_AB 64 columns (the
    kernel's rows) x BN rows (its columns)."""
    c = None
    if params["TMA_STORE"]:
        box = (64, params["BN"]) if swap_ab(params) else (c_box(params), consumer_rows(params))
        c = CMap(problem.N, problem.M, box, SWIZZLE_128B if box[0] == 64 else SWIZZLE_32B)
    bn_box = params["BN"] // params["CLUSTER_M"]
    promotion = PROMOTIONS[l2_promotion(params)]
    return TensorMaps(computed(params, problem), params["BM"], bn_box, promotion, c, swap_ab(params))


class WgmmaTemplate(GemmTemplate):
    name = "wgmma"
    bias_epilogue = True
    params = PARAMS
    defaults = DEFAULTS
    dtypes = DTYPES
    layouts = LAYOUTS
    kinds = KINDS
    description = DESCRIPTION
    arch = "sm_90a"
    arch_note = (
        "wgmma needs sm_90a (warpgroup MMA, TMA, setmaxnreg): for any other architecture it fails to compile; "
        "mma computes the same problems there."
    )

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        return derived(params, None if problem is None else computed_variant(params, problem))

    def context(self, params: Params, problem: Any) -> dict[str, Any]:
        """With SWAP_AB the variant (layout, TRANS_A, TRANS_B) of the problem the kernel computes; the kernel's
        name keeps the caller's."""
        return {**self.derived(params, problem), **computed_variant(params, problem)}

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        return check(params, limits)

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        return check_problem(params, problem, limits)

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        return launch(params, problem)

    def scratch(self, params: Params, problem: Any) -> tuple[int, int]:
        return scratch(params, problem)

    def new_scratch(self, params: Params, problem: Any) -> tuple[Any, ...]:
        """The split tail's pair (partials, zeroed counters; unused without SPLIT), then the tensor maps, made per
        operand address at launch."""
        return (*super().new_scratch(params, problem), tensor_maps(params, problem))

    def takes_scratch(self, scratch: tuple[Any, ...]) -> bool:
        return len(scratch) == 3 and isinstance(scratch[2], TensorMaps)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        a, b = inputs[::-1] if scratch[2].swap else inputs  # SWAP_AB: the caller's B is the kernel's A
        maps = scratch[2].bind(a, b, out)
        return super().kernel_args(scratch[2].problem, (a, b), out, alpha, beta, (*scratch[:2], *maps))

    def c_abi(self) -> str:
        return (
            "wgmma: (const T* A, const T* B, T* C, int M, int N, int K, float alpha, float beta, float* partial, "
            "unsigned* counters, CUtensorMap amap, CUtensorMap bmap, CUtensorMap cmap), the scratch sized by "
            "scratch_floats/scratch_counters (none without SPLIT), counters zeroed once (the kernel leaves them "
            "zero); the "
            "maps by value (__grid_constant__), from cuTensorMapEncodeTiled with the dtype's 16-bit type, element "
            "strides {1, 1}, CU_TENSOR_MAP_SWIZZLE_128B, L2 promotion L2_PROMOTION bytes for A and B (0: none; "
            "256 if absent) and 256 for C, OOB fill none: an operand stored with "
            "K contiguous (A in layout N?, B in ?T) has dims {K, rows}, stride {K*2} bytes, box {64, BM} (A) or "
            "{64, BN/CLUSTER_M} (B); one stored with K as rows (A in T?, B in ?N) has dims {M or N, K}, stride "
            "{(M or N)*2}, box {64, 64}; C (TMA_STORE, else 128 zero bytes) dims {N, M}, stride {N*2}, box "
            "{64, BM/CONSUMERS} ({64, BM} with PINGPONG; 16 columns, 32-byte swizzle where BN % 64 != 0). Grid: "
            "(CLUSTER_M * min(groups * SPLIT, SMs / CLUSTER_M), 1, 1), groups = ceil(ceil(M/BM) / CLUSTER_M) * "
            "ceil(N/BN); block 128 * (CONSUMERS + 1) threads; with CLUSTER_M = 2 a cluster of (2, 1, 1). With "
            "SWAP_AB all of this is for C^T = B^T A^T: pass B as A and A as B, M and N swapped, each operand's map "
            "made in the swapped layout (a layout letter flips: B stored K x N is B^T stored transposed), and C's map "
            "over the caller's C (dims {N, M}) with box {64, BN}."
        )


TEMPLATE = WgmmaTemplate()
