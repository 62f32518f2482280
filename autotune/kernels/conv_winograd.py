"""The Winograd F(2x2, 3x3) conv2d template (templates/conv/winograd.cu.j2): parameters, derived values, checks.

Only 3x3 filters at stride 1 (any padding). The output is cut into 2x2 tiles; tile t of image n covers
outputs (2*tp .. 2*tp+1, 2*tq .. 2*tq+1) and reads the 4x4 input patch starting at (2*tp - pad, 2*tq - pad).
With V = B^T d B (the input patch transformed), U = G g G^T (the filter transformed) and M[e] = sum_c U[e] V[e]
for each of the 16 elements e of the 4x4 transform domain, the tile's outputs are A^T M A: 16 multiplications
per 4 outputs and input channel instead of 36.

One fused kernel, so a candidate's time includes every transform:
  block    TILES output tiles (flattened over images and tile rows, so batch 1 still fills the GPU) x KB output
           channels; grid = (ceil(N * ceil(P/2) * ceil(Q/2) / TILES), ceil(K / KB), 1)
  step     CB input channels: V of the block's tiles and U of its KB channels (computed from the raw 3x3
           filter) are staged in shared memory as [16][CB][TILES + SPAD] and [16][CB][KB + SPAD] floats
  thread   ET of the 16 elements x KT channels x TT tiles accumulated in registers; each KT (TT) is read as
           float4 chunks strided by 4 * KB/KT (4 * TILES/TT), so a warp's reads are contiguous
  PIPE     1: two shared stages, the next step's raw operands loaded into registers during this step's GEMMs
           and transformed into the other stage after them (one __syncthreads per step); 2: the same, the raw
           operands copied by 4-byte cp.async into a third shared buffer instead of registers; 0: one stage
  MINB     __launch_bounds__ minimum resident blocks per SM (2 caps registers at 65536 / (2 * threads))
  SPLIT_C  (optional, default 1) grid.z = SPLIT_C slices of the input channels for layers with few blocks
           (batch 1): each block stores its slice's partial outputs as floats in scratch, and the last block
           of a tile sums them in slice order (deterministic) and writes y. Scratch: SPLIT_C x N*K*P*Q floats
           and one counter per (tiles, channels) block, zeroed once (the kernel leaves the counters at zero).
  UNROLL   (optional, default 0: 2, or 1 for PIPE 2 without DEPTH) unrolling of the GEMMs' loop over the CB
           channels of a step; at CB or more it is straight-line code, so the next channel's shared loads can be
           issued during this channel's FMAs (more registers)
  DEPTH    (optional, default 1; PIPE 1 or 2) DEPTH raw buffers in a ring (PIPE 1: register sets, PIPE 2: shared
           buffers): step s + DEPTH's loads are issued before step s's GEMMs, so a block has DEPTH steps of loads in
           flight instead of one. For layers too small to fill the GPU with warps (batch 1).
  PREFETCH (optional, default 0) 1: the GEMMs read the next channel's U and V fragments from shared memory
           during this channel's FMAs (a register double buffer), so FMAs wait for shared loads once a step;
           2: the next two channels' (two buffers, so a load has two channels of FMAs to land in)
  WSTAGE   (optional, default 0; fp32 with PIPE 1, DEPTH >= 2, CGROUPS 1, CB % 4 == 0, C % 4 == 0) 1: the step's
           filters are copied by 16-byte cp.async into a ring of DEPTH shared buffers [KB][CB * 9 + 4], spread over
           the threads (a filter's output channels are C * 9 floats apart, so a thread's own 9 taps are scattered
           loads), and the filter transforms read their taps from shared memory.
  MMA      (optional, default 0; fp32, KB % 16 == 0, TILES % 8 == 0, CB % 8 == 0, ROUNDS 1, CGROUPS 1, PREFETCH 0,
           UNROLL 0) 1: the 16 GEMMs on tensor cores with fp32 accuracy (3xTF32: each operand split into a tf32
           high part and a residual in registers, three mma.sync.m16n8k8 a product). A warp takes whole (element,
           16 output channels) units over all of the block's tiles, so ET, KT and TT only set the threads (and the
           transforms' share of each). For layers whose FMA loop is bound by shared-memory loads (batch 1).
           Its error grows with C (the accumulators do not round like FMAs): C above MMA_MAX_C is refused.
  UPAD     (optional, default: SPAD) the padding of U's rows alone (KBS = KB + UPAD), so U and V get their own:
           with SPAD 0 at KB 16 the MMA fragment reads and the filter transforms' stores of U hit each bank twice
           (rows 16 floats apart), while V's rows of TILES 24 want no padding.
  LEAN     (optional, default 0) 1: fewer instructions before the first global loads, which batch-1 layers wait
           on: unsigned 32-bit divisions for the tile coordinates, the in-image mask of a 4x4 patch built from a
           nibble of rows and one of columns (instead of 16 pairs of compares), the channel check folded into it
           once a step. The same kernel otherwise. 2 (DEPTH >= 2, CGROUPS 1): also the epilogue's (channel, tile)
           coordinates computed in the prologue, while the first loads are in flight, and the epilogue's first
           barrier dropped (the step loop already ends at one).
  CGROUPS  (optional, default 1) the block is CGROUPS groups of THREADS threads; each group runs the step loop
           on its own slice of the input channels (whole CB steps) with its own stages and its own named barrier,
           and the epilogue sums the groups' M in shared memory in group order. More warps an SM and shorter
           chains of steps for layers whose channel loop is the critical path (batch 1), without SPLIT_C's
           partial outputs in global memory. Shared memory and threads: CGROUPS x those of one group.
  epilogue ROUNDS rounds (optional, default 0: KT rounds): the accumulators of KT / ROUNDS channels of each
           thread's tile go through shared memory ([16][KT/ROUNDS][KB/KT][TILES + SPAD], aliasing the U/V
           buffers) and A^T M A is stored, predicated on P, Q, K. Fewer rounds: fewer barriers and more
           independent (channel, tile) pairs a thread, for more shared memory.

Every check here is mirrored by a ``static_assert`` in the template.

Example::

    >>> p = dict(TILES=32, KB=64, CB=8, KT=8, TT=4, ET=2, SPAD=4, PIPE=0, MINB=1)
    >>> derived(p)["THREADS"], derived(p)["SHARED_BYTES"]
    (512, 53248)
    >>> derived(dict(p, PIPE=1))["SHARED_BYTES"]
    106496
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .conv_problem import SPLIT_ABI, ConvTemplate

PARAMS = (
    "TILES", "KB", "CB", "KT", "TT", "ET", "SPAD", "PIPE", "MINB", "SPLIT_C", "DEPTH", "UNROLL", "ROUNDS", "CGROUPS",
    "PREFETCH", "WSTAGE", "MMA", "LEAN", "UPAD",
)  # fmt: skip
# Parameters added after winners were stored: absent means this value, and at this value the kernel name and
# source are those of before the parameter existed (stored entries keep their source_hash).
DEFAULTS = (("SPLIT_C", 1), ("DEPTH", 1), ("UNROLL", 0), ("ROUNDS", 0), ("CGROUPS", 1), ("PREFETCH", 0), ("WSTAGE", 0),
            ("MMA", 0), ("LEAN", 0), ("UPAD", -1))  # fmt: skip
KINDS = (
    ("SPAD", "int>=0"), ("PIPE", "int>=0"), ("UNROLL", "int>=0"), ("ROUNDS", "int>=0"), ("PREFETCH", "int>=0"),
    ("WSTAGE", "int>=0"), ("MMA", "int>=0"), ("LEAN", "int>=0"), ("UPAD", "int>=0"),
)  # fmt: skip
DTYPES = ("float32", "float16")
DESCRIPTION = "Winograd F(2x2,3x3), 3x3 stride 1 only: transforms fused, 16 GEMMs of KB x TILES per CB-channel step"

MAX_ACCUMULATORS = 128  # ET * KT * TT floats per thread
MAX_DEPTH = 8  # raw buffers in the ring (PIPE 1: register sets, PIPE 2: shared buffers)
MAX_CGROUPS = 8  # thread groups of a block: named barriers 1..CGROUPS (0 is __syncthreads)
MAX_X_ITEMS = 4  # input tiles a thread transforms per step (their coordinates stay in registers)
MAX_IMAGE = 2**31 - 1  # elements of one input image (H*W*C): the kernel's offsets within an image are ints
# MMA sums all C input channels in the tensor cores' fp32 accumulators, which do not round like FMAs: its error
# grows with C (on the H200: 5.2e-7 at C = 64, 1.9e-6 at 256, 3.7e-6 at 512, against the 1e-5 tolerance). Larger
# C is refused, so the runtime never serves an MMA entry to a layer its accuracy was not measured on.
MMA_MAX_C = 512
ETS = (1, 2, 4, 8, 16)
LAYOUTS = ("NCHW", "NHWC")


def alignment(problem: Any) -> dict[str, Any]:
    """No alignment variant: every read is a scalar gather."""
    return {}


def derived(params: Params, variant: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Threads (of one group: the block has CGROUPS x THREADS), per-thread work and shared memory (none depend on
    the shape, dtype or layout)."""
    p = params
    kg, tg, eg = p["KB"] // p["KT"], p["TILES"] // p["TT"], 16 // p["ET"]
    threads = eg * kg * tg
    kbs, ts = p["KB"] + upad(p), p["TILES"] + p["SPAD"]
    stages = 2 if p["PIPE"] else 1
    x_items, w_items = -(-p["CB"] * p["TILES"] // threads), -(-p["CB"] * p["KB"] // threads)
    raw = 16 * x_items + 9 * w_items if p["PIPE"] == 2 else 0  # floats a thread copies per step
    staged = stages * 16 * p["CB"] * (kbs + ts) + depth(p) * raw * threads  # U and V per stage; PIPE 2's raw ring
    wf = 9 * p["CB"] + 4  # WSTAGE: floats per output channel of a filter buffer
    staged += depth(p) * p["KB"] * wf if wstage(p) else 0
    rc = p["KT"] // rounds(p) if p["KT"] % rounds(p) == 0 else 1  # thread-tile channels an epilogue round
    epilogue = 16 * rc * kg * ts  # rc channels of every thread's tile, all 16 elements
    return {
        "KG": kg,
        "TG": tg,
        "EG": eg,
        "THREADS": threads,
        "KBS": kbs,
        "TS": ts,
        "X_ITEMS": x_items,
        "W_ITEMS": w_items,
        "ROUNDS": rounds(p),
        "RC": rc,
        "Y_ITEMS": -(-rc * kg * p["TILES"] // (threads * cgroups(p))),  # RC*TT*ET/16 <= 8 (at most 128 accumulators)
        "STAGES": stages,
        "RAW": raw,
        "WF": wf,
        "SHARED_BYTES": 4 * cgroups(p) * max(staged, epilogue),
    }


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Each reason is a static_assert message."""
    p = params
    if p["KT"] % 4 or p["TT"] % 4:
        return "KT and TT must be multiples of 4 (float4 reads of U and V)"
    if p["KB"] % p["KT"]:
        return "KT must divide KB"
    if p["KT"] % rounds(p):
        return "ROUNDS must divide KT"
    if p["TILES"] % p["TT"]:
        return "TT must divide TILES"
    if p["ET"] not in ETS:
        return "ET must divide 16"
    if p["SPAD"] % 4:
        return "SPAD must be a multiple of 4 (16-byte rows)"
    if upad(p) % 4 or upad(p) < 0:
        return "UPAD must be a non-negative multiple of 4 (16-byte rows)"
    if p["PIPE"] not in (0, 1, 2):
        return "PIPE must be 0, 1 or 2"
    if not 1 <= split_c(p) <= limits.max_grid_z:
        return f"SPLIT_C must be 1 to {limits.max_grid_z} (grid.z)"
    if not 1 <= depth(p) <= MAX_DEPTH:
        return f"DEPTH must be 1 to {MAX_DEPTH}"
    if depth(p) > 1 and p["PIPE"] not in (1, 2):
        return "DEPTH > 1 needs PIPE 1 or 2 (a ring of register sets or cp.async buffers)"
    if int(p.get("PREFETCH", 0)) not in (0, 1, 2):
        return "PREFETCH must be 0, 1 or 2"
    if not 1 <= cgroups(p) <= MAX_CGROUPS:
        return f"CGROUPS must be 1 to {MAX_CGROUPS} (named barriers 1..CGROUPS)"
    if wstage(p) not in (0, 1):
        return "WSTAGE must be 0 or 1"
    if wstage(p) and (p["PIPE"] != 1 or depth(p) < 2):
        return "WSTAGE needs PIPE 1 and DEPTH >= 2 (a ring of DEPTH filter buffers)"
    if wstage(p) and p["CB"] % 4:
        return "WSTAGE needs CB % 4 == 0 (16-byte chunks of whole channel groups)"
    if wstage(p) and cgroups(p) != 1:
        return "WSTAGE needs CGROUPS 1 (one ring of filter buffers a block)"
    if int(p.get("LEAN", 0)) not in (0, 1, 2):
        return "LEAN must be 0, 1 or 2"
    if int(p.get("LEAN", 0)) == 2 and (depth(p) < 2 or cgroups(p) != 1):
        return "LEAN 2 needs DEPTH >= 2 and CGROUPS 1 (the step loop ends at a block barrier)"
    if mma(p) not in (0, 1):
        return "MMA must be 0 or 1"
    if mma(p) and (p["KB"] % 16 or p["TILES"] % 8 or p["CB"] % 8):
        return "MMA needs KB % 16 == 0, TILES % 8 == 0 and CB % 8 == 0 (m16n8k8 tiles)"
    if mma(p) and (rounds(p) != 1 or cgroups(p) != 1):
        return "MMA needs ROUNDS 1 and CGROUPS 1 (its M goes through shared memory in one round)"
    if mma(p) and (int(p.get("PREFETCH", 0)) or int(p.get("UNROLL", 0))):
        return "MMA needs PREFETCH 0 and UNROLL 0 (they shape the FMA loop it replaces)"
    return _resource_reason(p, limits)


def _resource_reason(p: Params, limits: DeviceLimits) -> str | None:
    """Why the configuration's threads, accumulators or shared memory do not fit a block or an SM, or None."""
    d = derived(p)
    most = limits.threads_per_block
    if p["MINB"] * cgroups(p) * d["THREADS"] > limits.threads_per_sm:
        return f"MINB blocks of THREADS threads must fit one SM (at most {limits.threads_per_sm} threads)"
    if d["THREADS"] % 32 or d["THREADS"] > most:
        return f"(16/ET)*(KB/KT)*(TILES/TT) threads must be a whole number of warps, at most {most}"
    if cgroups(p) * d["THREADS"] > most:
        return f"CGROUPS groups of THREADS threads must be at most {most} threads"
    if p["ET"] * p["KT"] * p["TT"] > MAX_ACCUMULATORS:
        return f"at most {MAX_ACCUMULATORS} accumulators per thread (ET*KT*TT)"
    if d["X_ITEMS"] > MAX_X_ITEMS:
        return f"at most {MAX_X_ITEMS} input tiles per thread and step (CB*TILES over the threads)"
    smem, minb, reserved = d["SHARED_BYTES"], p["MINB"], limits.shared_reserved_per_block
    if smem > limits.max_shared_per_block:
        return (
            f"needs {smem} bytes of shared memory, more than {limits.max_shared_per_block}; use a smaller CB, KB or "
            "TILES"
        )
    if minb * (smem + reserved) > limits.shared_per_sm:
        return (
            f"MINB blocks need {minb} x ({smem} + {reserved}) bytes of shared memory, more than an SM's "
            f"{limits.shared_per_sm}"
        )
    return None


def tiles(problem: Any) -> int:
    """Output 2x2 tiles of the problem, over every image."""
    return problem.N * -(-problem.P // 2) * -(-problem.Q // 2)


def split_c(params: Params) -> int:
    return int(params.get("SPLIT_C", dict(DEFAULTS)["SPLIT_C"]))


def cgroups(params: Params) -> int:
    return int(params.get("CGROUPS", dict(DEFAULTS)["CGROUPS"]))


def rounds(params: Params) -> int:
    """Epilogue rounds: ROUNDS, or KT when absent or 0 (one thread-tile channel a round)."""
    return int(params.get("ROUNDS", 0)) or int(params["KT"])


def depth(params: Params) -> int:
    return int(params.get("DEPTH", dict(DEFAULTS)["DEPTH"]))


def wstage(params: Params) -> int:
    return int(params.get("WSTAGE", dict(DEFAULTS)["WSTAGE"]))


def upad(params: Params) -> int:
    """Padding of U's rows: UPAD, or SPAD when absent (both operands padded alike)."""
    u = int(params.get("UPAD", dict(DEFAULTS)["UPAD"]))
    return int(params["SPAD"]) if u < 0 else u


def mma(params: Params) -> int:
    return int(params.get("MMA", dict(DEFAULTS)["MMA"]))


def launch(params: Params, problem: Any) -> Launch:
    d = derived(params)
    grid = (-(-tiles(problem) // params["TILES"]), -(-problem.K // params["KB"]), split_c(params))
    return Launch(grid, (cgroups(params) * d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int] | None:
    """SPLIT_C > 1: (partial-output floats, tile counters); None without split (the kernel takes no scratch)."""
    split = split_c(params)
    if split <= 1:
        return None
    p = problem
    gx, gy, _ = launch(params, problem).grid
    return split * p.N * p.K * p.P * p.Q, gx * gy


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem, or None (3x3 stride 1 only)."""
    if (problem.R, problem.S, problem.stride) != (3, 3, 1):
        return (
            f"winograd computes F(2x2,3x3), 3x3 filters at stride 1 only, not "
            f"{problem.R}x{problem.S} stride {problem.stride}"
        )
    if problem.dtype not in DTYPES:
        return f"winograd computes {', '.join(DTYPES)}, not {problem.dtype}"
    if problem.layout not in LAYOUTS:
        return f"winograd computes layouts {', '.join(LAYOUTS)}, not {problem.layout}"
    if problem.H * problem.W * problem.C > MAX_IMAGE:
        return f"winograd indexes one image with 32-bit offsets: H*W*C must be at most {MAX_IMAGE}"
    if problem.K * problem.C * 9 > MAX_IMAGE:
        return f"winograd indexes the filters with 32-bit offsets: K*C*9 must be at most {MAX_IMAGE}"
    if wstage(params) and problem.dtype != "float32":
        return f"WSTAGE copies float32 filters only, not {problem.dtype}"
    if mma(params) and problem.dtype != "float32":
        return f"MMA computes float32 convolutions only (3xTF32), not {problem.dtype}"
    if mma(params) and problem.C > MMA_MAX_C:
        return (
            f"MMA sums the input channels in tensor-core accumulators, whose error grows with C: it is verified up "
            f"to C = {MMA_MAX_C}, not {problem.C}"
        )
    if wstage(params) and problem.C % 4:
        return f"WSTAGE copies filters in 16-byte chunks of 4 channels: C = {problem.C} is not a multiple of 4"
    gx, gy, _ = launch(params, problem).grid
    if gx > limits.max_grid_x:
        return f"needs {gx} blocks of output tiles, more than grid.x allows; use a larger TILES"
    if gy > limits.max_grid_y:
        return f"needs {gy} channel blocks, more than the {limits.max_grid_y} grid.y allows; use a larger KB"
    return None


class WinogradTemplate(ConvTemplate):
    name = "winograd"
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
        return "winograd: the conv2d arguments above; with SPLIT_C > 1 (grid_z) " + SPLIT_ABI


TEMPLATE = WinogradTemplate()
