"""Skinny-M GEMM (decode / batch-1 shapes): C[M,N] = alpha * op(A) @ B + beta * C, fp32 accumulation.

The template is templates/gemm/skinny.cu.j2. Every derived quantity is computed here and only here; the
template receives them in its render context and mirrors each check with a ``static_assert``.

A block has TX x TY threads: TX along N, each with VEC contiguous columns of B, and TY thread rows along K,
each loading KR rows of B per step. A thread accumulates MT rows of C x VEC columns. The grid is
(ceil(M / MT) row groups, ceil(N / BN) column strips, SPLIT_K slices of K); row groups are the fastest
index so the blocks that read the same strip of B run together and share it through L2.

Example::

    >>> p = dict(VEC=4, TX=32, TY=8, MT=1, KR=4, SPLIT_K=8, PREFETCH=True, MINB=4)
    >>> launch(p, Problem(1, 4096, 4096, "float32", "NN")).grid
    (1, 32, 8)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params
from .gemm_problem import SPLIT_K_ABI, GemmTemplate

PARAMS: tuple[str, ...] = ("VEC", "TX", "TY", "MT", "KR", "SPLIT_K", "PREFETCH", "MINB")
KINDS: tuple[tuple[str, str], ...] = (("PREFETCH", "bool"),)
DESCRIPTION = "skinny-M GEMM: B streamed once with vector loads, A broadcast from shared memory, split-K"

DTYPES = {"float32": ("float", 4), "float16": ("__half", 2), "bfloat16": ("__nv_bfloat16", 2)}
LAYOUTS = ("NN", "TN")  # NT (B stored N x K) is not implemented
VECS = (1, 2, 4, 8, 16)
MAX_ACCUMULATORS = 128  # MT * VEC floats per thread
MAX_B_REGS = 64  # 32-bit registers of B rows in flight per thread (b_registers)
MAX_A_STAGE = 32  # A elements a thread carries to shared memory per step
REG_SLACK = 16  # registers beyond accumulators, B and A staging that ptxas needs (addresses, loop state)
STATIC_SHARED_ROOM = 3 * 1024  # dynamic shared memory stays this far below the device's opt-in limit
RED_BUDGET = 32 * 1024  # shared bytes the epilogue's reduction may use beyond the A buffers
MAX_PARTIAL_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    """The shape a skinny launch needs (the framework's problem object works the same)."""

    M: int
    N: int
    K: int
    dtype: str
    layout: str = "NN"


def check_variant(dtype: str, layout: str, dtypes: Any) -> None:
    """Raise ValueError unless dtype is one of dtypes and layout two letters of N/T (skinny and skinny_tc)."""
    if dtype not in dtypes:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(dtypes)}")
    if len(layout) != 2 or set(layout) - {"N", "T"}:
        raise ValueError(f"layout {layout!r} is not two letters of N/T such as 'NN' or 'TN'")


def variant(dtype: str, layout: str) -> dict[str, Any]:
    """The dtype/layout keys of the render context, e.g. variant("float16", "TN")["T"] == "__half"."""
    check_variant(dtype, layout, DTYPES)
    t, es = DTYPES[dtype]
    return {
        "DTYPE": dtype,
        "T": t,
        "ES": es,
        "LAYOUT": layout,
        "TRANS_A": layout[0] == "T",
        "TRANS_B": layout[1] == "T",
    }


def derived(params: Params, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """Threads, tile sizes and shared memory of a configuration (none of them depend on the dtype)."""
    p = params
    threads = p["TX"] * p["TY"]
    bn = p["TX"] * p["VEC"]
    kchunk = p["TY"] * p["KR"]
    mt = p["MT"]
    # A warp that spans several thread rows (TX < 32) reads several A rows at once: pad against conflicts.
    pad = 0 if p["TX"] >= 32 else (4 if mt % 4 == 0 else 2 if mt % 2 == 0 else 0)
    as_ld = mt + pad
    a_bytes = 2 * kchunk * as_ld * 4
    rrows = max(1, min(mt, max(a_bytes, RED_BUDGET) // (p["TY"] * bn * 4)))
    red_bytes = p["TY"] * rrows * bn * 4
    return {
        "THREADS": threads,
        "BN": bn,
        "KCHUNK": kchunk,
        "AS_LD": as_ld,
        "ACNT": -(-kchunk * mt // threads),
        "RROWS": rrows,
        "SHARED_BYTES": max(a_bytes, red_bytes),
        "REG_CAP": reg_cap(threads, p["MINB"], SM90),  # rendered: the template's static_assert states 65536
    }


def reg_cap(threads: int, minb: int, limits: DeviceLimits) -> int:
    """Registers a thread may use so that ``minb`` blocks of ``threads`` threads fit one SM (multiples of 8).
    Shared with skinny_tc and skinny_wgmma."""
    return min(limits.registers_per_thread, limits.registers_per_sm // (threads * minb) // 8 * 8)


def dynamic_shared_limit(limits: DeviceLimits) -> int:
    """The dynamic shared memory a skinny block may use: the opt-in limit less room for static shared memory."""
    return limits.max_shared_per_block - STATIC_SHARED_ROOM


def b_registers(params: Params, es: int) -> int:
    """32-bit registers holding B rows in flight: KR rows of VEC elements of es bytes, twice with PREFETCH."""
    p = params
    return p["KR"] * max(1, p["VEC"] * es // 4) * (2 if p["PREFETCH"] else 1)


def register_estimate(params: Params, es: int) -> int:
    """Registers a thread needs for elements of es bytes: accumulators, B in flight, A staging, slack."""
    p = params
    return p["MT"] * p["VEC"] + b_registers(p, es) + derived(p)["ACNT"] + REG_SLACK


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Mirrored by the template's static_asserts."""
    p = params
    if p["VEC"] not in VECS:
        return f"VEC must be one of {', '.join(map(str, VECS))}"
    threads = p["TX"] * p["TY"]
    if threads % 32 or threads > limits.threads_per_block:
        return f"TX*TY = {threads} threads must be a whole number of warps, at most {limits.threads_per_block}"
    if threads * p["MINB"] > limits.threads_per_sm:
        return f"MINB = {p['MINB']} blocks of {threads} threads exceed {limits.threads_per_sm} threads per SM"
    if p["MT"] * p["VEC"] > MAX_ACCUMULATORS:
        return f"MT*VEC = {p['MT'] * p['VEC']} accumulators per thread exceeds {MAX_ACCUMULATORS}"
    # Registers are counted for 16-bit elements here, the cheapest dtype; check_problem counts the real one.
    if b_registers(p, 2) > MAX_B_REGS:
        twice = " (x2, PREFETCH)" if p["PREFETCH"] else ""
        return f"KR rows of VEC elements{twice} need more than {MAX_B_REGS} B registers"
    if p["SPLIT_K"] > limits.max_grid_z:
        return f"SPLIT_K = {p['SPLIT_K']} exceeds the grid's z limit of {limits.max_grid_z}"
    d = derived(p)
    if d["ACNT"] > MAX_A_STAGE:
        return f"each thread would stage {d['ACNT']} A elements per step (KR*MT/TX), more than {MAX_A_STAGE}"
    if d["SHARED_BYTES"] > dynamic_shared_limit(limits):
        return f"needs {d['SHARED_BYTES']} bytes of shared memory, more than {dynamic_shared_limit(limits)}"
    cap = reg_cap(threads, p["MINB"], limits)
    if register_estimate(p, 2) > cap:
        return (
            f"needs about {register_estimate(p, 2)} registers per thread, more than the {cap} that "
            f"MINB = {p['MINB']} blocks of {threads} threads allow"
        )
    return None


def launch(params: Params, problem: Any) -> Launch:
    d = derived(params)
    grid = (-(-problem.M // params["MT"]), -(-problem.N // d["BN"]), params["SPLIT_K"])
    return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])


def split_k_scratch(split_k: int, problem: Any, grid: tuple[int, int, int]) -> tuple[int, int]:
    """(floats of `partial`, unsigned `counters`) of a split-K launch of this grid (row groups x strips x
    SPLIT_K); counters must start at zero. Shared with skinny_tc, whose split-K works the same way."""
    if split_k == 1:
        return 0, 0
    return split_k * problem.M * problem.N, grid[0] * grid[1]


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(floats of `partial`, unsigned `counters`) the launch needs; counters must start at zero."""
    return split_k_scratch(params["SPLIT_K"], problem, launch(params, problem).grid)


def unsupported(template: str, problem: Any, dtypes: Any, layouts: tuple[str, ...]) -> str | None:
    """Why a streaming template (B read K x N row-major) cannot take this problem at all, or None."""
    if problem.dtype not in dtypes:
        return f"dtype {problem.dtype} is not supported by the {template} template ({', '.join(dtypes)})"
    if problem.layout not in layouts:
        return (
            f"layout {problem.layout} is not supported by the {template} template, which needs B stored K x N "
            f"row-major ({' or '.join(layouts)})"
        )
    if min(problem.M, problem.N, problem.K) < 1:
        return "M, N and K must be at least 1"
    return None


def grid_problem(grid: tuple[int, int, int], floats: int, wider: str, limits: DeviceLimits = SM90) -> str | None:
    """Why a launch of this grid with this many split-K partial floats cannot run, or None."""
    if grid[1] > limits.max_grid_y:
        return f"needs {grid[1]} column strips, more than the {limits.max_grid_y} grid.y allows; use a larger {wider}"
    if floats * 4 > MAX_PARTIAL_BYTES:
        return f"split-K partials need {floats * 4 >> 20} MiB, more than 512 MiB; use a smaller SPLIT_K"
    return None


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot run this problem, or None."""
    reason = unsupported("skinny", problem, DTYPES, LAYOUTS)
    if reason:
        return reason
    es = DTYPES[problem.dtype][1]
    if b_registers(params, es) > MAX_B_REGS:
        return f"KR rows of VEC {problem.dtype} elements need more than {MAX_B_REGS} B registers per thread"
    regs, cap = register_estimate(params, es), reg_cap(derived(params)["THREADS"], params["MINB"], limits)
    if regs > cap:
        return f"needs about {regs} registers per thread for {problem.dtype}, more than the {cap} MINB allows"
    return grid_problem(launch(params, problem).grid, scratch(params, problem)[0], "TX*VEC", limits)


def kernel_name(params: Params, dtype: str, layout: str) -> str:
    parts = [f"{k.lower()}{int(params[k])}" for k in PARAMS]
    return "_".join(["gemm_skinny", dtype, layout.lower(), *parts])


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
    return env.get_template("gemm/skinny.cu.j2").render(context)


class SkinnyTemplate(GemmTemplate):
    name = "skinny"
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
        args = "(const T* A, const T* B, T* C, int M, int N, int K, float alpha, float beta)"
        return f"skinny: {args}, then {SPLIT_K_ABI}"


TEMPLATE = SkinnyTemplate()
