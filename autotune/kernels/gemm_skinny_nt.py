"""Skinny-M GEMM in nn.Linear's layout (decode): C[M,N] = alpha * A[M,K] @ W[N,K]^T + beta * C, fp32 accumulation.

The template is templates/gemm/skinny_nt.cu.j2. W (N x K, row-major, the weight as nn.Linear stores it) is read
once and in place with vector loads along K; A is small and read at the same K positions, each value reused for
the R rows of W a warp owns. Every derived quantity is computed here and only here; the template receives them in
its render context and mirrors each check with a ``static_assert``.

A block has WARPS_N x WARPS_K warps. A warp owns R consecutive rows of W and sweeps K in steps of 32 * VEC
elements (VEC contiguous elements per lane), U steps in flight, its steps interleaved with the other WARPS_K warps
of its rows. A lane accumulates MT rows of C x R columns; lanes are summed with warp shuffles, warps through shared
memory. With MMA (16-bit dtypes) the warp's R rows are R / 8 tiles of 8 and MT rows of C are MT / 16 tiles of 16
for mma.sync m16n8k16: each lane still loads 16 contiguous bytes of a row of W (and of A) per step of 32 elements of
K, because the K order inside an mma is permuted alike for both operands. With PREFETCH a warp issues the loads of
its next pass (U steps) before the math of this one, at twice the registers for W.
The grid is (ceil(M / MT) row groups, ceil(N / (WARPS_N * R)) column strips, SPLIT_K slices of K).

Example::

    >>> p = dict(VEC=8, R=4, WARPS_N=2, WARPS_K=4, U=2, MT=4, SPLIT_K=1, MINB=1, MMA=False, PREFETCH=False)
    >>> launch(p, Problem(4, 4096, 4096, "float16", "NT")).grid
    (1, 512, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .gemm_problem import SPLIT_K_ABI, GemmTemplate

PARAMS: tuple[str, ...] = ("VEC", "R", "WARPS_N", "WARPS_K", "U", "MT", "SPLIT_K", "MINB", "MMA", "PREFETCH")
KINDS: tuple[tuple[str, str], ...] = (("MMA", "bool"), ("PREFETCH", "bool"))
DESCRIPTION = "skinny-M GEMM in nn.Linear's layout (NT): W read once in place along K, lanes reduced by shuffles"

DTYPES = {"float32": ("float", 4), "float16": ("__half", 2), "bfloat16": ("__nv_bfloat16", 2)}
LAYOUTS = ("NT", "TT")  # W stored N x K; A row-major (NT) or stored K x M (TT, read with scalar loads)
VECS = (1, 2, 4, 8)
MAX_ACCUMULATORS = 128  # MT * R floats per thread
MAX_IN_FLIGHT = 32  # loads of W per lane before their math: R * U (MMA: R / 8 * U)
REG_SLACK = 24  # registers beyond accumulators, W in flight and converted operands (addresses, loop state)
WARP_SUM_BUDGET = 96 * 1024  # shared bytes of the cross-warp reduction (above 48 KiB the launch raises its limit)
MAX_PARTIAL_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    """The shape a launch needs (the framework's GemmProblem works the same)."""

    M: int
    N: int
    K: int
    dtype: str
    layout: str = "NT"


def variant(dtype: str, layout: str, bias: bool = False) -> dict[str, Any]:
    """The dtype/layout (and bias epilogue) keys of the render context, e.g. variant("float16", "NT")["T"] ==
    "__half"."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)} (W stored N x K)")
    t, es = DTYPES[dtype]
    return {"DTYPE": dtype, "T": t, "ES": es, "LAYOUT": layout, "TRANS_A": layout[0] == "T", "TRANS_B": True,
            "BIAS": bias}  # fmt: skip


def words(vec: int, es: int) -> int:
    """32-bit registers holding VEC elements of es bytes (at least one)."""
    return max(1, vec * es // 4)


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """Threads, tile sizes and shared memory of a configuration (none of them depend on the dtype)."""
    p = params
    threads = 32 * p["WARPS_N"] * p["WARPS_K"]
    bn = p["WARPS_N"] * p["R"]
    return {
        "THREADS": threads,
        "BN": bn,
        "KSTEP": 32 if p["MMA"] else 32 * p["VEC"],
        "SHARED_BYTES": p["WARPS_K"] * bn * p["MT"] * 4,
        # rendered: the template's static_assert states the sm_80/sm_90 register file
        "REG_CAP": min(SM90.registers_per_thread, SM90.registers_per_sm // (threads * p["MINB"]) // 8 * 8),
    }


def accumulators(params: Params) -> int:
    """fp32 accumulators per thread: MT x R partial sums, or with MMA 4 per (16-row, 8-row) tile pair."""
    return params["MT"] * params["R"] // 32 if params["MMA"] else params["MT"] * params["R"]


def in_flight(params: Params) -> int:
    """Loads of W per lane issued before their math: R rows x U steps (MMA: R / 8 tiles x U steps)."""
    return params["R"] // 8 * params["U"] if params["MMA"] else params["R"] * params["U"]


def register_estimate(params: Params, es: int) -> int:
    """Registers a thread needs for elements of es bytes: accumulators, W in flight (twice with PREFETCH),
    operands, slack."""
    p = params
    buffers = 2 if p["PREFETCH"] else 1
    if p["MMA"]:  # 16-byte loads: 4 registers each; A: two rows of 4 per 16-row tile
        return accumulators(p) + in_flight(p) * 4 * buffers + p["MT"] // 16 * 8 + REG_SLACK
    w = p["R"] * p["U"] * words(p["VEC"], es) * buffers
    return p["MT"] * p["R"] + w + p["R"] * p["VEC"] + 2 * p["VEC"] + REG_SLACK


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Mirrored by the template's static_asserts."""
    p = params
    if p["VEC"] not in VECS:
        return f"VEC must be one of {', '.join(map(str, VECS))}"
    threads = 32 * p["WARPS_N"] * p["WARPS_K"]
    if threads > limits.threads_per_block:
        return f"WARPS_N*WARPS_K = {threads // 32} warps exceed {limits.threads_per_block} threads per block"
    if threads * p["MINB"] > limits.threads_per_sm:
        return f"MINB = {p['MINB']} blocks of {threads} threads exceed {limits.threads_per_sm} threads per SM"
    if p["MMA"] and p["VEC"] != 8:
        return "MMA needs VEC = 8 (one 16-byte load of 16-bit elements per lane)"
    if p["MMA"] and (p["R"] % 8 or p["MT"] % 16):
        return f"MMA needs R a multiple of 8 and MT a multiple of 16 (mma tiles), not R = {p['R']}, MT = {p['MT']}"
    if accumulators(p) > MAX_ACCUMULATORS:
        return f"{accumulators(p)} accumulators per thread (MT*R, MMA: /32) exceed {MAX_ACCUMULATORS}"
    if in_flight(p) > MAX_IN_FLIGHT:
        return f"{in_flight(p)} loads of W in flight per thread (R*U, MMA: /8) exceed {MAX_IN_FLIGHT}"
    if p["SPLIT_K"] > limits.max_grid_z:
        return f"SPLIT_K = {p['SPLIT_K']} exceeds the grid's z limit of {limits.max_grid_z}"
    d = derived(p)
    budget = min(WARP_SUM_BUDGET, limits.max_shared_per_block)
    if d["SHARED_BYTES"] > budget:
        return f"the warp sums need {d['SHARED_BYTES']} bytes of shared memory (WARPS_K*BN*MT floats), over {budget}"
    # Registers are counted for 16-bit elements here, the cheapest dtype; check_problem counts the real one.
    if register_estimate(p, 2) > d["REG_CAP"]:
        return (
            f"needs about {register_estimate(p, 2)} registers per thread, more than the {d['REG_CAP']} that "
            f"MINB = {p['MINB']} blocks of {threads} threads allow"
        )
    return None


def launch(params: Params, problem: Any) -> Launch:
    d = derived(params)
    grid = (-(-problem.M // params["MT"]), -(-problem.N // d["BN"]), params["SPLIT_K"])
    return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of `partial`, unsigned `counters`) the launch needs; counters must start at zero."""
    if params["SPLIT_K"] == 1:
        return 0, 0
    grid = launch(params, problem).grid
    return params["SPLIT_K"] * problem.M * problem.N, grid[0] * grid[1]


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot run this problem, or None."""
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} is not supported by the skinny_nt template ({', '.join(DTYPES)})"
    if problem.layout not in LAYOUTS:
        return (
            f"layout {problem.layout} is not supported by the skinny_nt template, which reads B stored N x K "
            f"({' or '.join(LAYOUTS)}; nn.Linear's weight is NT)"
        )
    if min(problem.M, problem.N, problem.K) < 1:
        return "M, N and K must be at least 1"
    es = DTYPES[problem.dtype][1]
    if params["MMA"] and es != 2:
        return f"MMA (tensor cores, mma.sync) takes 16-bit inputs; {problem.dtype} needs MMA = false"
    regs, cap = register_estimate(params, es), derived(params)["REG_CAP"]
    if regs > cap:
        return f"needs about {regs} registers per thread for {problem.dtype}, more than the {cap} MINB allows"
    grid = launch(params, problem).grid
    if grid[1] > limits.max_grid_y:
        return f"needs {grid[1]} column strips, more than the {limits.max_grid_y} grid.y allows; use a larger WARPS_N*R"
    partial_bytes = scratch(params, problem)[0] * 4
    if partial_bytes > MAX_PARTIAL_BYTES:
        return f"split-K partials need {partial_bytes >> 20} MiB, more than 512 MiB; use a smaller SPLIT_K"
    return None


DECODE_M = 64  # up to this M, the family's default for 16-bit NT is this template (then tensor cores)


def default_params(M: int | None, dtype: str = "float32") -> dict[str, Any]:
    """A configuration for M rows (unknown: as for M > 16) that fits this dtype and both layouts: FMAs for float32
    and for M <= 4 (many warps, little math per load), tensor cores with PREFETCH for wider 16-bit problems."""
    if M is not None and M <= 1:
        return dict(VEC=8, R=2, WARPS_N=1, WARPS_K=4, U=4, MT=1, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=False)
    if M is not None and M <= 4:
        return dict(VEC=8, R=4, WARPS_N=1, WARPS_K=4, U=2, MT=4, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=False)
    if dtype == "float32":
        return dict(VEC=8, R=4, WARPS_N=1, WARPS_K=4, U=2, MT=16, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=False)
    # A is loaded once per 16-row tile and step and W once per 8-row tile: R >= MT / 2 keeps A's loads (L1 hits)
    # at most twice W's; WARPS_K = 8 and U loads in flight keep ~30 KiB of W in flight per SM at N = 4096.
    if M is not None and M <= 16:
        return dict(VEC=8, R=16, WARPS_N=1, WARPS_K=8, U=4, MT=16, SPLIT_K=1, MINB=2, MMA=True, PREFETCH=True)
    return dict(VEC=8, R=32, WARPS_N=1, WARPS_K=8, U=2, MT=64, SPLIT_K=1, MINB=1, MMA=True, PREFETCH=True)


def kernel_name(params: Params, dtype: str, layout: str) -> str:
    parts = [f"{k.lower()}{int(params[k])}" for k in PARAMS]
    return "_".join(["gemm_skinny_nt", dtype, layout.lower(), *parts])


def render(params: Params, dtype: str, layout: str, kernel_name: str) -> str:
    """The CUDA source of one configuration (the framework renders through autotune.build.templates)."""
    import jinja2

    root = Path(__file__).resolve().parent.parent.parent / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    v = variant(dtype, layout)
    context = {**params, **derived(params, v), **v, "kernel_name": kernel_name}
    return env.get_template("gemm/skinny_nt.cu.j2").render(context)


class SkinnyNtTemplate(GemmTemplate):
    name = "skinny_nt"
    bias_epilogue = True
    params = PARAMS
    dtypes = tuple(DTYPES)
    layouts = LAYOUTS
    kinds = KINDS
    description = DESCRIPTION

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        return derived(params)

    def variant_of(self, problem: Any) -> dict[str, Any]:
        return variant(problem.dtype, problem.layout) if problem is not None else variant("float32", "NT")

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        return check(params, limits)

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        return check_problem(params, problem, limits)

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        return launch(params, problem)

    def scratch(self, params: Params, problem: Any) -> tuple[int, int]:
        return scratch(params, problem)

    def c_abi(self) -> str:
        args = "(const T* A, const T* W, T* C, int M, int N, int K, float alpha, float beta)"
        return f"skinny_nt: {args} with W stored N x K (nn.Linear's weight), then {SPLIT_K_ABI}"


TEMPLATE = SkinnyNtTemplate()
