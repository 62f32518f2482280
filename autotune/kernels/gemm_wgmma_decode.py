"""Decode GEMM in nn.Linear's layout on Hopper's warpgroup tensor cores (templates/gemm/wgmma_decode.cu.j2):
C = alpha * A @ B^T + beta * C with B (the weight W) stored N x K and read in place, fp16 or bf16, small M.

The tensor cores compute C^T = W x^T: W's rows are the wgmma's M (BW rows a block, BW / CONSUMERS a consumer
warpgroup), x's rows its N (MB); a producer warpgroup streams W and x by TMA through a ring of STAGES stages;
SPLIT_K blocks share a tile of W's rows and the last to finish sums their fp32 partials in split order; with CLUSTER
(optional, default off) they form a thread-block cluster and sum them through distributed shared memory instead;
with SHARE_W or SHARE_X (optional, default 1) a group of blocks shares W's stages (blocks of neighbouring row
groups of x on one tile of W) or x's (blocks of neighbouring tiles of W) by TMA multicast; with ROTATE (optional,
default off) each block walks its run of K from an offset of its own, wrapping, so the blocks do not all read the same
stage of x from L2 at once; with SPLIT_X (optional, default off) the two consumer warpgroups split x's rows
instead of W's; with STAGE_C (optional, default off) a block's tile of C is stored through shared memory in 16-byte
vectors; with X_AS_M (optional, default off; MB 64) the roles are not swapped: x's 64 rows are the wgmma's M and a
block's BW rows of W (8 to 128 a consumer, a multiple of 8) its N, so narrow tiles of W fill the GPU without split-K;
with X_AS_M it also computes layout NN (B stored K x N, read N-major in 64-column boxes); with KBOXES (optional,
default 1) a stage holds 2 or 4 boxes of 64 K, so each row of W is asked for 256 or 512 neighbouring bytes at once;
W_PROMOTION (optional, default 256) is the L2 promotion of W's tensor map in bytes (0: none).
Every check here is mirrored by a ``static_assert``.

Example::

    >>> p = dict(BW=128, MB=16, CONSUMERS=1, STAGES=8, SPLIT_K=4)
    >>> launch(p, Problem(16, 4096, 4096, "float16", "NT")).grid
    (128, 1, 1)
"""

from __future__ import annotations

from typing import Any

from ..core.limits import SM90, DeviceLimits
from ..core.tensormap import L2_PROMOTIONS
from .base import Launch, Params
from .gemm_problem import GemmProblem as Problem
from .gemm_problem import GemmTemplate
from .template import LaunchBound

PARAMS = ("BW", "MB", "CONSUMERS", "STAGES", "SPLIT_K", "CLUSTER", "SHARE_X", "SHARE_W", "ROTATE", "SPLIT_X", "STAGE_C",
          "X_AS_M", "KBOXES", "W_PROMOTION")  # fmt: skip
# CLUSTER, SHARE_X, SHARE_W, ROTATE, SPLIT_X, STAGE_C, X_AS_M, KBOXES and W_PROMOTION came after winners were
# stored: at their defaults (or absent) the kernel renders and is named as before they existed
DEFAULTS: tuple[tuple[str, Any], ...] = (("CLUSTER", False), ("SHARE_X", 1), ("SHARE_W", 1), ("ROTATE", False),
                                          ("SPLIT_X", False), ("STAGE_C", False), ("X_AS_M", False),
                                          ("KBOXES", 1), ("W_PROMOTION", 256))  # fmt: skip
KINDS = (("CLUSTER", "bool"), ("ROTATE", "bool"), ("SPLIT_X", "bool"), ("STAGE_C", "bool"), ("X_AS_M", "bool"),
         ("W_PROMOTION", "int>=0"))  # fmt: skip
DESCRIPTION = (
    "sm_90a decode in nn.Linear's layout (NT; NN with X_AS_M): W streamed once by TMA, split-K over blocks or a cluster"
)
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("NT", "NN")  # NN (B stored K x N) with X_AS_M only
BK = 64  # elements of K per stage (one 128-byte swizzle row)
MBS = (8, 16, 32, 64, 128)  # 128: M up to 128 in one row of blocks (W read once)
CONSUMER_ROWS = (64, 128)
X_AS_M_ROWS = tuple(range(8, 129, 8))  # X_AS_M: rows of W a consumer (the wgmma's N, whole 8-row atoms)
MAX_STAGES = 24  # shared memory holds 24 only of the smallest stage (BW 64, MB 8: 9 KiB); past 12 came later
MAX_SPLIT_K = 64
SHARES = (1, 2, 4)  # blocks of a group sharing x's or W's stages
KBOXES = (1, 2, 4)  # boxes of 64 K (of W and of x) a stage
PROMOTIONS = L2_PROMOTIONS  # promotion bytes -> cuda.h's enum (core/tensormap.py)

__all__ = ["Problem", "check", "check_problem", "derived", "launch", "scratch"]


def cluster(params: Params) -> bool:
    """CLUSTER of a configuration; False when it has none (configurations stored before it existed)."""
    return bool(params.get("CLUSTER", False))


def share_x(params: Params) -> int:
    """SHARE_X of a configuration; 1 (x not shared) when it has none (configurations stored before it existed)."""
    return params.get("SHARE_X", 1)


def share_w(params: Params) -> int:
    """SHARE_W of a configuration; 1 (W not shared) when it has none (configurations stored before it existed)."""
    return params.get("SHARE_W", 1)


def rotate(params: Params) -> bool:
    """ROTATE of a configuration; False (every block walks K from its start) when it has none."""
    return bool(params.get("ROTATE", False))


def split_x(params: Params) -> bool:
    """SPLIT_X of a configuration; False (the consumers split W's rows) when it has none."""
    return bool(params.get("SPLIT_X", False))


def stage_c(params: Params) -> bool:
    """STAGE_C of a configuration; False (C stored from the wgmma's fragments) when it has none."""
    return bool(params.get("STAGE_C", False))


def x_as_m(params: Params) -> bool:
    """X_AS_M of a configuration; False (W's rows are the wgmma's M) when it has none."""
    return bool(params.get("X_AS_M", False))


def kboxes(params: Params) -> int:
    """KBOXES of a configuration; 1 (a stage is one box of 64 K) when it has none."""
    return params.get("KBOXES", 1)


def w_promotion(params: Params) -> int:
    """W_PROMOTION of a configuration: the bytes W's tensor map asks L2 to fetch a miss as; 256 when it has none."""
    return params.get("W_PROMOTION", 256)


def stage_bytes(params: Params) -> int:
    """Bytes of a stage of the ring: KBOXES boxes of 64 K of W's BW rows and of x's MB rows, 2 bytes each."""
    return (params["BW"] + params["MB"]) * BK * 2 * kboxes(params)


def cluster_blocks(params: Params) -> int:
    """Blocks of a thread-block cluster: the group sharing x or W, times SPLIT_K with CLUSTER; 1 for none."""
    return share_x(params) * share_w(params) * (params["SPLIT_K"] if cluster(params) else 1)


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    p = params
    shared = p["STAGES"] * stage_bytes(p) + 1024 + 16 * p["STAGES"] + 16
    return {"THREADS": 128 * (p["CONSUMERS"] + 1), "SHARED_BYTES": shared, "CLUSTER": cluster(p),
            "SHARE_X": share_x(p), "SHARE_W": share_w(p), "ROTATE": rotate(p), "SPLIT_X": split_x(p),
            "STAGE_C": stage_c(p), "X_AS_M": x_as_m(p), "KBOXES": kboxes(p),
            "W_PROMOTION": w_promotion(p)}  # fmt: skip


def accumulators(params: Params) -> int:
    """fp32 accumulators per consumer thread: its rows of W (all BW with SPLIT_X) in m64 slices, times its rows of x
    (MB / CONSUMERS with SPLIT_X) over 2."""
    p = params
    if x_as_m(p):
        return p["BW"] // p["CONSUMERS"] // 2
    if split_x(p):
        return p["BW"] // 64 * (p["MB"] // p["CONSUMERS"]) // 2
    return p["BW"] // p["CONSUMERS"] // 64 * p["MB"] // 2


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None."""
    p = params
    if p["CONSUMERS"] not in (1, 2):
        return "CONSUMERS must be 1 or 2 warpgroups"
    for name in ("ROTATE", "SPLIT_X", "X_AS_M"):
        if not isinstance(p.get(name, False), bool):
            return f"{name} must be true or false"
    if x_as_m(p):
        if p["BW"] % p["CONSUMERS"] or p["BW"] // p["CONSUMERS"] not in X_AS_M_ROWS:
            return "with X_AS_M, BW / CONSUMERS must be a multiple of 8 rows of W from 8 to 128 (the wgmma's N)"
        if p["MB"] != 64 or split_x(p):
            return "X_AS_M needs MB = 64 (x's rows are the wgmma's M), and not SPLIT_X"
    elif split_x(p):
        if p["CONSUMERS"] != 2:
            return "SPLIT_X needs CONSUMERS = 2 (the two consumer warpgroups split x's rows)"
        if p["BW"] not in CONSUMER_ROWS:
            return "with SPLIT_X, BW must be 64 or 128 rows of W (each consumer owns all of them)"
        if p["MB"] // 2 not in MBS[:4]:
            return "SPLIT_X needs MB of 16 to 128 (each consumer a wgmma on MB / 2 rows of x: 8 to 64)"
    elif p["BW"] % p["CONSUMERS"] or p["BW"] // p["CONSUMERS"] not in CONSUMER_ROWS:
        return "BW / CONSUMERS must be 64 or 128 rows of W (one or two m64 wgmmas per consumer)"
    if p["MB"] not in MBS:
        return f"MB must be one of {', '.join(map(str, MBS))} (the wgmma's N: rows of x per block)"
    if not 2 <= p["STAGES"] <= MAX_STAGES:
        return f"STAGES must be 2 to {MAX_STAGES}"
    if not 1 <= p["SPLIT_K"] <= MAX_SPLIT_K:
        return f"SPLIT_K must be 1 to {MAX_SPLIT_K}"
    if kboxes(p) not in KBOXES or isinstance(kboxes(p), bool):
        return f"KBOXES must be one of {', '.join(map(str, KBOXES))} (boxes of 64 K a stage)"
    if w_promotion(p) not in tuple(PROMOTIONS) or isinstance(w_promotion(p), bool):
        return f"W_PROMOTION must be one of {', '.join(map(str, PROMOTIONS))} (bytes of an L2 fetch of W; 0: none)"
    if kboxes(p) > 1 and share_x(p) * share_w(p) > 1:
        return "KBOXES above 1 is not with SHARE_X or SHARE_W (a stage's boxes are copied by the block alone)"
    d = derived(p)
    if d["SHARED_BYTES"] > limits.max_shared_per_block:
        need, most = d["SHARED_BYTES"], limits.max_shared_per_block
        return f"{p['STAGES']} stages need {need} bytes of shared memory, more than the {most} a block may use"
    return check_cluster(p, limits) or check_sharing(p, limits) or check_stage_c(p)


def check_stage_c(params: Params) -> str | None:
    """Why STAGE_C cannot be on in this configuration, or None: a block that stores its whole tile (not CLUSTER's
    ranks, each storing a share), staged as MB rows of BW + 4 floats in the drained ring."""
    p = params
    if not isinstance(p.get("STAGE_C", False), bool):
        return "STAGE_C must be true or false"
    if not stage_c(p):
        return None
    if cluster(p):
        return "STAGE_C stages a block's whole tile of C: not with CLUSTER, whose blocks each store a share"
    if p["MB"] * (p["BW"] + 4) * 4 > p["STAGES"] * stage_bytes(p):
        return "STAGE_C needs the staged tile of C (MB x (BW + 4) floats) to fit in the ring of STAGES stages"
    return None


def check_sharing(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why SHARE_X and SHARE_W cannot take their values in this configuration, or None: 1, 2 or 4 blocks, one of
    the two shared, each block copying whole 8-row swizzle atoms of x, in one portable cluster."""
    p, x, w = params, share_x(params), share_w(params)
    for name, v in (("SHARE_X", x), ("SHARE_W", w)):
        if v not in SHARES or isinstance(v, bool):
            return f"{name} must be one of {', '.join(map(str, SHARES))} (blocks sharing {name[-1]}'s stages)"
    if x > 1 and w > 1:
        return "SHARE_X and SHARE_W cannot both be above 1 (a group shares one operand)"
    if p["MB"] // x < 8:
        return f"SHARE_X = {x} needs MB >= {8 * x} (each block copies whole 8-row swizzle atoms of x)"
    if p["BW"] // w < 8 or p["BW"] % (8 * w):  # the second can fail only with X_AS_M's narrow tiles
        return f"SHARE_W = {w} needs BW a multiple of {8 * w} (each block copies whole 8-row swizzle atoms of W)"
    if cluster_blocks(p) > limits.cluster_blocks:
        name, v = ("SHARE_X", x) if x > 1 else ("SHARE_W", w)
        return (
            f"{name} = {v} with CLUSTER and SPLIT_K = {p['SPLIT_K']} makes clusters of {cluster_blocks(p)} blocks, "
            f"more than the {limits.cluster_blocks} of a portable cluster"
        )
    return None


def check_cluster(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why CLUSTER cannot be on in this configuration, or None: a portable cluster of the tile's SPLIT_K blocks,
    and the partial tile (BW x MB floats) left in the drained ring."""
    p = params
    if not isinstance(p.get("CLUSTER", False), bool):
        return "CLUSTER must be true or false"
    if not cluster(p):
        return None
    if not 2 <= p["SPLIT_K"] <= limits.cluster_blocks:
        most = limits.cluster_blocks
        return f"CLUSTER needs SPLIT_K = 2 to {most} (the tile's blocks form one portable cluster)"
    if p["BW"] * p["MB"] * 4 > p["STAGES"] * stage_bytes(p):
        return "CLUSTER needs the partial tile (BW x MB floats) to fit in the ring of STAGES stages"
    return None


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem, or None: the dtype, the layout, 16-byte rows, the grid."""
    if problem.dtype not in DTYPES:
        return f"wgmma_decode computes {', '.join(DTYPES)}, not {problem.dtype}"
    if problem.layout not in LAYOUTS:
        return f"wgmma_decode computes layouts NT (nn.Linear's: B stored N x K) and NN, not {problem.layout}"
    if problem.layout == "NN":
        why = "in layout NN, KBOXES must be 1" if kboxes(params) > 1 else check_nn(params, problem)
        if why:
            return why
    if problem.K % 8:
        return (
            f"wgmma_decode reads x and W through TMA tensor maps, whose rows must be whole 16 bytes: K = "
            f"{problem.K} is no multiple of 8"
        )
    grid = launch(params, problem).grid
    if grid[0] > limits.max_grid_x or grid[1] > limits.max_grid_y:
        return f"the grid {grid[:2]} exceeds the device's; use a larger MB or BW"
    return None


def check_nn(params: Params, problem: Any) -> str | None:
    """Why this configuration cannot compute a layout NN problem (B stored K x N, N-major), or None: X_AS_M (W's
    columns the wgmma's N), whole 64-column swizzle atoms of B a consumer, B's rows whole 16 bytes, no SHARE_W."""
    if not x_as_m(params):
        return "wgmma_decode computes layout NN (B stored K x N) only with X_AS_M (B's columns the wgmma's N)"
    if params["BW"] % params["CONSUMERS"] or params["BW"] // params["CONSUMERS"] % 64:
        return "in layout NN, BW / CONSUMERS must be 64 or 128 (whole 64-column swizzle atoms of B)"
    if share_w(params) > 1:
        return "in layout NN, SHARE_W must be 1 (B is copied in whole 64-column boxes)"
    if problem.N % 8:
        return (
            f"in layout NN wgmma_decode reads B through a TMA tensor map, whose rows must be whole 16 bytes: N = "
            f"{problem.N} is no multiple of 8"
        )
    return None


def launch(params: Params, problem: Any) -> Launch:
    """Grid (tiles of BW rows of W rounded up to whole SHARE_X groups, times SPLIT_K; row groups of MB of x rounded
    up to whole SHARE_W groups)."""
    d = derived(params)
    x, w = share_x(params), share_w(params)
    tiles = -(-problem.N // params["BW"] // x) * x
    grid = (tiles * params["SPLIT_K"], -(-problem.M // params["MB"] // w) * w, 1)
    return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of the split partials, counters): a partial tile per split of every tile, a counter per tile; none
    without split-K, or with CLUSTER (the partials meet in the cluster's shared memory)."""
    if params["SPLIT_K"] == 1 or cluster(params):
        return 0, 0
    tiles = -(-problem.N // params["BW"]) * -(-problem.M // params["MB"])
    per_split = 128 * params["CONSUMERS"] * accumulators(params)
    return tiles * params["SPLIT_K"] * per_split, tiles


class TensorMaps(LaunchBound):
    """The tensor maps of a launch's x (A: M x K, boxes of 64 K x MB / SHARE_X rows) and W (B stored N x K, boxes of
    64 K x BW / SHARE_W rows; layout NN: B stored K x N, boxes of 64 columns x 64 K), 128-byte swizzle, made per
    operand address (a few of each are kept)."""

    def __init__(self, params: Params, problem: Any) -> None:
        self.problem, self.mb, self.bw = problem, params["MB"] // share_x(params), params["BW"] // share_w(params)
        self.w_promotion = PROMOTIONS[w_promotion(params)]  # cuda.h's enum for W's map; x's is 256 bytes
        self._maps: tuple[dict[int, Any], dict[int, Any]] = ({}, {})

    def bind(self, a: Any, b: Any) -> tuple[Any, Any]:
        return self._map(0, a.data.ptr), self._map(1, b.data.ptr)

    def _map(self, which: int, ptr: int) -> Any:
        from ..core.tensormap import BFLOAT16, FLOAT16, L2_PROMOTION_256B, SWIZZLE_128B, tiled_2d

        cache = self._maps[which]
        found = cache.get(ptr)
        if found is None:
            p = self.problem
            dtype = BFLOAT16 if p.dtype == "bfloat16" else FLOAT16
            if which == 1 and p.layout == "NN":  # B stored K x N: 64 columns x 64 rows (of K) a box
                found = tiled_2d(ptr, p.N, p.K, p.N * 2, (64, BK), SWIZZLE_128B, self.w_promotion, dtype)
            else:
                rows, box_rows = (p.M, self.mb) if which == 0 else (p.N, self.bw)
                promotion = L2_PROMOTION_256B if which == 0 else self.w_promotion
                found = tiled_2d(ptr, p.K, rows, p.K * 2, (BK, box_rows), SWIZZLE_128B, promotion, dtype)
            if len(cache) >= 8:
                cache.clear()
            cache[ptr] = found
        return found


class WgmmaDecodeTemplate(GemmTemplate):
    name = "wgmma_decode"
    bias_epilogue = True
    params = PARAMS
    defaults = DEFAULTS
    kinds = KINDS
    dtypes = DTYPES
    layouts = LAYOUTS
    description = DESCRIPTION
    arch = "sm_90a"
    arch_note = (
        "wgmma_decode needs sm_90a (warpgroup MMA and TMA): for any other architecture it fails to compile; "
        "skinny_nt computes the same problems there."
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
        """The split-K pair (partials, zeroed counters), then the tensor maps, made per operand address."""
        return (*super().new_scratch(params, problem), TensorMaps(params, problem))

    def takes_scratch(self, scratch: tuple[Any, ...]) -> bool:
        return len(scratch) == 3 and isinstance(scratch[2], TensorMaps)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        a, b = inputs
        return super().kernel_args(problem, inputs, out, alpha, beta, (*scratch[:2], *scratch[2].bind(a, b)))

    def c_abi(self) -> str:
        return (
            "wgmma_decode (layout NT; NN with X_AS_M): (const T* A, const T* B, T* C, int M, int N, int K, float "
            "alpha, float beta, float* partial, unsigned* counters, CUtensorMap xmap, CUtensorMap wmap), the scratch "
            "sized by scratch_floats/scratch_counters, counters zeroed once (the kernel leaves them zero); the maps by "
            "value (__grid_constant__) from cuTensorMapEncodeTiled with the dtype's 16-bit type, element strides {1, "
            "1}, CU_TENSOR_MAP_SWIZZLE_128B, OOB fill none: x (A) dims {K, M}, stride {K*2} bytes, box {64, MB / "
            "SHARE_X}, L2 promotion 256B; W (B) dims {K, N}, stride {K*2}, box {64, BW / SHARE_W} (layout NN: dims "
            "{N, K}, stride {N*2}, box {64, 64}), L2 promotion W_PROMOTION bytes (0: none; 256 if absent). Grid "
            "(ceil(ceil(N/BW) / SHARE_X) * SHARE_X * SPLIT_K, ceil(ceil(M/MB) "
            "/ SHARE_W) * SHARE_W, 1), block 128 * (CONSUMERS + 1) threads; with CLUSTER no scratch is used; with "
            "CLUSTER, SHARE_X or SHARE_W the kernel carries its "
            "__cluster_dims__."
        )


TEMPLATE = WgmmaDecodeTemplate()
