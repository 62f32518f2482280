"""The im2col + GEMM conv2d template (templates/conv/im2col_gemm.cu.j2): two launches per convolution.

NHWC, float16 only. A pre-kernel (``<kernel_name>_im2col``) unrolls the input into ``col``, an M x Kg
row-major matrix (M = N*P*Q output pixels, Kg = R*S*C taps in (r, s, c) order, zeros where the window
reads padding); the GEMM template ``templates/gemm/<GEMM>.cu.j2`` is included, not copied, and computes

    y (M x K, row-major = NHWC) = col (M x Kg) @ w^T,   w as stored (K x Kg row-major: the "T" operand)

so the GEMM problem is (M, K, Kg) in layout NT. Its parameters are this template's ``G_*`` parameters without
the prefix; its derived values and checks come from the gemm family (``GEMM.context``, ``GEMM.check``,
``GEMM.check_problem``), so they live in one place. GEMM is a choice parameter with one value today, "mma"
(fp16 tensor cores, 16-byte rows: Kg must be a multiple of 8; this template renders the GEMM's aligned
variant, without its pack steps). float32 is refused: the fp32 GEMM
template (simt) reads NN only, so it would need a transposed copy of the filter as well.

The unrolled matrix is the extra memory: M * Kg elements (``extra_bytes``), allocated once per candidate (and
per stream at run time) as the family's scratch. NCHW is refused: its y is not one row-major GEMM output.

Example::

    >>> p = dict(GEMM="mma", IM_THREADS=256, G_BM=128, G_BN=64, G_BK=32, G_WM=64, G_WN=32, G_STAGES=3,
    ...          G_SWIZZLE=True, G_RASTER=1)
    >>> gemm_params(p)["BM"], derived(p)["THREADS"]
    (128, 128)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.limits import SM90, DeviceLimits
from . import gemm_mma
from .base import Launch, Params, Step
from .conv_problem import ITEMSIZE, ConvTemplate, require_plain
from .gemm import GEMM

PREFIX = "G_"
GEMMS: dict[str, Any] = {"mma": gemm_mma}  # GEMM choice -> the gemm family's module describing it
PARAMS = ("GEMM", "IM_THREADS", *(PREFIX + p for p in gemm_mma.PARAMS))
KINDS = (("GEMM", "choice:" + ",".join(GEMMS)), *((PREFIX + k, v) for k, v in gemm_mma.KINDS))
DTYPES = ("float16",)
LAYOUTS = ("NHWC",)
DESCRIPTION = "im2col into a scratch matrix (extra memory M x R*S*C), then the included mma GEMM (layout NT)"
GEMM_LAYOUT = "NT"  # A = col (M x Kg row-major), B = the filter as stored (K x Kg row-major)

MAX_IM2COL_BLOCKS = 1 << 20  # the pre-kernel walks the matrix with a grid-stride loop
MAX_INDEX = 2**31 - 1


def alignment(problem: Any) -> dict[str, Any]:
    """One source per dtype: the GEMM's 16-byte rows are required (check_problem), not a variant."""
    return {}


def gemm_params(params: Params) -> dict[str, Any]:
    """The GEMM template's parameters: this template's ``G_*`` parameters without the prefix."""
    return {k.removeprefix(PREFIX): v for k, v in params.items() if k.startswith(PREFIX)}


def gemm_problem(problem: Any) -> Any:
    """The GEMM this convolution is: (M, N, K) = (N*P*Q, K, R*S*C), layout NT, the convolution's dtype."""
    p = problem
    return GEMM.problem([p.N * p.P * p.Q, p.K, p.R * p.S * p.C], p.dtype, GEMM_LAYOUT)


def _gemm_context(params: Params, dtype: str) -> dict[str, Any]:
    # the context never depends on the shape: any aligned problem of the dtype gives the same variant
    return GEMM.context(params["GEMM"], gemm_params(params), GEMM.problem([8, 8, 8], dtype, GEMM_LAYOUT))


def derived(params: Params, variant: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The GEMM's derived values (THREADS and SHARED_BYTES are the GEMM launch's)."""
    dtype = variant["DTYPE"] if variant else DTYPES[0]
    ctx = _gemm_context(params, dtype)
    return {"THREADS": ctx["THREADS"], "SHARED_BYTES": ctx["SHARED_BYTES"]}


def context(params: Params, variant: Mapping[str, Any]) -> dict[str, Any]:
    """The render context: the gemm family's (parameters unprefixed, its variant: DTYPE, T, LAYOUT "NT",
    TRANS_*, ALIGN_*) for the included GEMM, and CONV_LAYOUT / IM_THREADS for the im2col kernel."""
    return {**gemm_params(params), **_gemm_context(params, variant["DTYPE"]), "CONV_LAYOUT": variant["LAYOUT"],
            "IM_THREADS": params["IM_THREADS"]}  # fmt: skip


def check(params: Params, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration can never be built, or None. Each reason is a static_assert message."""
    if params["GEMM"] not in GEMMS:
        return f"GEMM must be one of {', '.join(GEMMS)}"
    t = params["IM_THREADS"]
    if t % 32 or t > limits.threads_per_block:
        return f"IM_THREADS must be a whole number of warps, at most {limits.threads_per_block}"
    return GEMM.check(params["GEMM"], gemm_params(params), limits)


def extra_bytes(problem: Any) -> int:
    """Bytes of the unrolled matrix (M x Kg elements)."""
    p = problem
    return p.N * p.P * p.Q * p.R * p.S * p.C * ITEMSIZE[p.dtype]


def check_problem(params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
    """Why this configuration cannot compute this problem (dtype, layout, 16-byte rows, grid), or None."""
    if problem.layout not in LAYOUTS:
        return "im2col_gemm computes NHWC only: an NCHW output would need a batched GEMM or a transpose"
    if problem.dtype not in DTYPES:
        return f"im2col_gemm computes {', '.join(DTYPES)}, not {problem.dtype}: the fp32 GEMM reads NN only"
    p = problem
    m, kg = p.N * p.P * p.Q, p.R * p.S * p.C
    if m > MAX_INDEX or kg > MAX_INDEX or p.K > MAX_INDEX:
        return "im2col_gemm needs N*P*Q, R*S*C and K below 2**31 (the GEMM's int sizes)"
    if kg % gemm_mma.CH:  # both GEMM operands' rows are R*S*C long; the included GEMM is the aligned variant
        return f"im2col_gemm's GEMM reads 16-byte rows: R*S*C = {kg} must be a multiple of {gemm_mma.CH}"
    reason = GEMM.check_problem(params["GEMM"], gemm_params(params), gemm_problem(problem), limits)
    return f"im2col_gemm's GEMM (M={m}, N={p.K}, K={kg}): {reason}" if reason else None


def im2col_step(params: Params, problem: Any, kernel_name: str) -> Step:
    """The pre-kernel's launch: IM_THREADS threads a block, a grid-stride loop over the M x Kg elements."""
    p = problem
    total = p.N * p.P * p.Q * p.R * p.S * p.C
    blocks = max(1, min(-(-total // params["IM_THREADS"]), MAX_IM2COL_BLOCKS))
    return Step(kernel_name + "_im2col", (blocks, 1, 1), (params["IM_THREADS"], 1, 1), 0)


def launch(params: Params, problem: Any, kernel_name: str) -> Launch:
    """The GEMM's launch, after the im2col step."""
    main = GEMM.launch(params["GEMM"], gemm_params(params), gemm_problem(problem))
    return Launch(main.grid, main.block, main.shared_bytes, before=(im2col_step(params, problem, kernel_name),))


def scratch(params: Params, problem: Any) -> tuple[int, int]:
    """(elements of the unrolled matrix, 0)."""
    p = problem
    return p.N * p.P * p.Q * p.R * p.S * p.C, 0


class Im2colScratch(tuple):
    """im2col_gemm's scratch: (the unrolled matrix, *the GEMM's scratch buffers). Its own type, so the conv
    family's kernel_args knows to pass the GEMM's arguments rather than the convolution's."""

    __slots__ = ()

    @property
    def col(self) -> Any:
        return self[0]

    @property
    def gemm(self) -> tuple[Any, ...]:
        return tuple(self[1:])


def new_scratch(params: Params, problem: Any) -> Im2colScratch:
    """The unrolled matrix (uninitialised: the im2col step writes every element), then the GEMM's scratch."""
    import cupy as cp

    p = problem
    col = cp.empty((p.N * p.P * p.Q, p.R * p.S * p.C), dtype=p.dtype)
    return Im2colScratch((col, *GEMM.new_scratch(params["GEMM"], gemm_params(params), gemm_problem(problem))))


class Im2colGemmTemplate(ConvTemplate):
    name = "im2col_gemm"
    params = PARAMS
    kinds = KINDS
    dtypes = DTYPES
    layouts = LAYOUTS
    description = DESCRIPTION

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        return derived(params, self.variant_of(problem) if problem is not None else None)

    def context(self, params: Params, problem: Any) -> dict[str, Any]:
        return context(params, self.variant_of(problem))

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

    def new_scratch(self, params: Params, problem: Any) -> Im2colScratch:
        return new_scratch(params, problem)

    def before_args(self, params: Params, problem: Any, inputs: Any, scratch: tuple[Any, ...]) -> tuple[Any, ...]:
        """The im2col kernel takes (x, col) and the nine shape integers plus P and Q."""
        import numpy as np

        return ((inputs[0], scratch[0], *(np.int32(v) for v in (*problem.dims, problem.P, problem.Q))),)

    def takes_scratch(self, scratch: tuple[Any, ...]) -> bool:
        return isinstance(scratch, Im2colScratch)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """The GEMM's arguments: A = the unrolled matrix, B = w, C = y, M = N*P*Q, N = K, K = R*S*C, alpha 1,
        beta 0, then the GEMM's buffers."""
        import numpy as np

        require_plain(alpha, beta)
        p, col_scratch = problem, Im2colScratch(scratch)
        mnk = (np.int32(p.N * p.P * p.Q), np.int32(p.K), np.int32(p.R * p.S * p.C))
        return (col_scratch.col, inputs[1], out, *mnk, np.float32(1.0), np.float32(0.0), *col_scratch.gemm)

    def c_abi(self) -> str:
        return (
            "im2col_gemm (NHWC): first `<kernel_name>_im2col` (const T* x, T* col, then the 11 ints above) with col a "
            "buffer of `scratch_floats` elements of T (N*P*Q x R*S*C, the extra memory), then `kernel_name` as a gemm "
            "(layout NT) on (col, w, y, N*P*Q, K, R*S*C, 1.0f, 0.0f, partial, counters)."
        )


TEMPLATE = Im2colGemmTemplate()
