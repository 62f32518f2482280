"""GEMM, C[M, N] = alpha * op(A) @ op(B) + beta * C[M, N], C row-major (the problem: gemm_problem.py).

Each template is its own module (gemm_naive.py, gemm_simt.py, gemm_wmma.py, gemm_mma.py, gemm_skinny.py,
gemm_skinny_tc.py, gemm_skinny_wgmma.py), a ``Template`` listed once in ``REGISTRY`` below; the family's dispatch
(``TemplateFamily``) resolves "auto", whose TEMPLATE parameter picks a template, and hands each question to the
template. Derived quantities live in the template modules; the templates receive them in their render context and
mirror each check with a ``static_assert``. The family keeps the problem type, the inputs, the float64 reference
and the vendor baseline.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from ..core.errors import brief
from ..core.limits import SM90, DeviceLimits
from . import (
    gemm_mma,
    gemm_naive,
    gemm_simt,
    gemm_skinny,
    gemm_skinny_nt,
    gemm_skinny_tc,
    gemm_skinny_wgmma,
    gemm_wgmma,
    gemm_wgmma_decode,
    gemm_wgmma_tf32x3,
    gemm_wmma,
)
from .base import Params
from .family import TemplateFamily
from .gemm_problem import CTYPE, ITEMSIZE, LAYOUTS, SHORT, GemmProblem, bf16_bits, decode, gemm_args, problem_variant
from .gemm_problem import variant as variant
from .gemm_simt import PARAMS as SIMT_PARAMS

__all__ = ["CTYPE", "GEMM", "ITEMSIZE", "LAYOUTS", "SHORT", "SIMT_PARAMS", "GemmFamily", "GemmProblem", "bf16_bits",
           "decode", "problem_variant", "variant"]  # fmt: skip

MAX_DIM = 2**31 - 1 - 4096  # kernels index with int; keep k0 + tile offsets from wrapping
MAX_OPERAND_BYTES = 2**63 - 1  # element offsets are 64-bit (size_t): an operand's byte offsets must not wrap
# Every GEMM template, in the order "auto" offers them (naive is left out of "auto").
# The spec files (under configs/) whose space tunes a GEMM (``spec_files``), by dtype; small-M ones (M <= SMALL_M)
# are tried first, and before those the NT decode space for B stored N x K (nn.Linear's weight): small M in every
# dtype, and float32 at any M.
SPACES = {"float32": ("gemm.yaml",), "float16": ("gemm_fp16.yaml",), "bfloat16": ("gemm_bf16.yaml",)}
SMALL_M_SPACES = {"float32": ("gemm_skinny_fp32.yaml",), "float16": ("gemm_skinny.yaml",)}
NT_SPACES = ("gemm_decode_nt.yaml",)
SMALL_M = 64
REGISTRY = (gemm_naive, gemm_simt, gemm_wmma, gemm_mma, gemm_skinny, gemm_skinny_tc, gemm_skinny_wgmma,
            gemm_skinny_nt, gemm_wgmma, gemm_wgmma_decode, gemm_wgmma_tf32x3)  # fmt: skip


class GemmFamily(TemplateFamily):
    name = "gemm"
    shape_help = "[M, N, K] or 'MxNxK' with positive integers"
    layouts = LAYOUTS
    c_abi_note = (
        "gemm (C row-major M x N; A M x K or, layout T?, K x M; B K x N or, layout ?T, N x K; T the dtype's type, "
        "float for tfloat32):"
    )

    def __init__(self) -> None:
        super().__init__([m.TEMPLATE for m in REGISTRY], LAYOUTS, auto_skip=("naive",))

    def problem(self, shape: Any, dtype: str, layout: str = "NN") -> GemmProblem:
        if isinstance(shape, str):
            parts = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*", shape)
            dims = tuple(int(p) for p in parts.groups()) if parts else ()
        elif isinstance(shape, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            dims = tuple(shape)
        else:
            dims = ()
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"expected {self.shape_help}, got {brief(shape)}")
        if max(dims) > MAX_DIM:
            raise ValueError(f"dimensions above {MAX_DIM} are not supported (32-bit indices), got {brief(shape)}")
        if dtype not in ITEMSIZE:
            raise ValueError(f"unknown dtype {brief(dtype)}; expected one of {', '.join(ITEMSIZE)}")
        m, n, k = dims
        for name, elements in (("A", m * k), ("B", k * n), ("C", m * n)):
            if elements * ITEMSIZE[dtype] > MAX_OPERAND_BYTES:
                raise ValueError(
                    f"{name} would hold {elements:.3g} {dtype} elements, more than 2**63 bytes: the gemm kernels index "
                    "with int coordinates and 64-bit (size_t) element offsets, whose byte addresses would wrap"
                )
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
        return GemmProblem(*dims, dtype=dtype, layout=layout)

    def spec_files(self, problem: GemmProblem) -> tuple[str, ...]:
        small = problem.M <= SMALL_M
        nt = problem.layout in ("NT", "TT") and (small or problem.dtype == "float32")
        small_m = SMALL_M_SPACES.get(problem.dtype, ()) if small else ()
        return (NT_SPACES if nt else ()) + small_m + SPACES.get(problem.dtype, ())

    def load_problem(self, sizes: dict[str, int], dtype: str, layout: str) -> GemmProblem:
        """``load("gemm", M=, N=, K=)``: exactly those three sizes."""
        if set(sizes) != {"M", "N", "K"}:
            raise ValueError(f"needs M, N and K, got {', '.join(sizes) or 'none'}")
        return self.problem([sizes["M"], sizes["N"], sizes["K"]], dtype, layout)

    # --- configuration -> derived values ---------------------------------------------------------

    def value_text(self, value: Any) -> str:
        return str(int(value) if isinstance(value, bool) else value)

    def check_problem(self, template: str, params: Params, problem: GemmProblem,
                      limits: DeviceLimits = SM90) -> str | None:  # fmt: skip
        """Why this configuration cannot compute this problem (dtype, layout, grid limits), or None."""
        t = self.template(template, params)
        if problem.dtype not in t.dtypes:
            return f"{t.name} computes {', '.join(t.dtypes)}, not {problem.dtype}"
        if problem.bias and not getattr(t, "bias_epilogue", False):
            return f"{t.name} has no bias epilogue"
        return t.check_problem(params, problem, limits)

    def default_config(self, dtype: str, layout: str = "NN", M: int | None = None) -> tuple[str, dict[str, Any]]:
        """The runtime's last resort: a configuration the GPU test tier verifies on odd shapes. With B stored N x K
        (nn.Linear's weight), skinny_nt reads it in place: for float32 always, for 16 bits when M <= 64 is given."""
        nt = layout in gemm_skinny_nt.LAYOUTS and dtype in gemm_skinny_nt.DTYPES
        if nt and (dtype == "float32" or (M is not None and M <= gemm_skinny_nt.DECODE_M)):
            return "skinny_nt", gemm_skinny_nt.default_params(M, dtype)
        if dtype in gemm_wmma.DTYPES:  # no spills in any layout or alignment variant
            frag, pad, frags_m = ("m16n16k8", 4, 2) if dtype == "tfloat32" else ("m16n16k16", 8, 4)
            return "wmma", dict(FRAG=frag, WARPS_M=2, WARPS_N=2, FRAGS_M=frags_m, FRAGS_N=2, BK=32, PAD=pad, STAGES=3,
                                SPLIT_K=1, RASTER=1)  # fmt: skip
        if layout == "TN":  # the skinny template reads A transposed; fine for any M, fastest for small M
            return "skinny", dict(VEC=4, TX=32, TY=8, MT=8, KR=4, SPLIT_K=1, PREFETCH=True, MINB=2)
        if layout != "NN":
            raise ValueError(f"no {dtype} template computes layout {layout}; pass row-major operands")
        return "simt", dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)

    def matrix_dims(self, problem: GemmProblem) -> tuple[int, int, int]:
        return problem.M, problem.N, problem.K

    def plain_args_for(self, problem: GemmProblem) -> Callable[..., tuple[Any, ...]]:
        """(A, B, C, M, N, K, alpha, beta, *scratch) with M, N, K converted once."""
        import numpy as np

        dims, f32 = (np.int32(problem.M), np.int32(problem.N), np.int32(problem.K)), np.float32
        return lambda a, b, out, alpha, beta, scratch: (a, b, out, *dims, f32(alpha), f32(beta), *scratch)

    def plain_args(self, problem: GemmProblem, inputs: tuple[Any, Any], out: Any, alpha: float, beta: float,
                   scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """(A, B, C, M, N, K, alpha, beta, *scratch)."""
        return gemm_args(problem, inputs, out, alpha, beta, scratch)

    # --- GPU side: inputs, reference, vendor baseline ---------------------------------------------

    def make_inputs(self, problem: GemmProblem, seed: int) -> tuple[Any, Any]:
        """A and B as stored: A is M x K (K x M for a "T" layout), B is K x N (N x K)."""
        import cupy as cp

        rng = cp.random.default_rng(seed)
        a_shape = (problem.K, problem.M) if problem.layout[0] == "T" else (problem.M, problem.K)
        b_shape = (problem.N, problem.K) if problem.layout[1] == "T" else (problem.K, problem.N)
        a = rng.standard_normal(a_shape, dtype=cp.float32)
        b = rng.standard_normal(b_shape, dtype=cp.float32)
        if problem.dtype == "bfloat16":
            return bf16_bits(a), bf16_bits(b)
        dt = cp.dtype(problem.storage)
        return a.astype(dt, copy=False), b.astype(dt, copy=False)

    def make_bias(self, problem: GemmProblem, seed: int) -> Any:
        """A bias for the epilogue variant (``GemmProblem.bias``): N values as stored, as large as the products'
        sums (~sqrt(K)), so that a bias dropped or added at the wrong column cannot pass verification."""
        import cupy as cp

        values = cp.random.default_rng(seed).standard_normal(problem.N, dtype=cp.float32) * float(problem.K) ** 0.5
        return bf16_bits(values) if problem.dtype == "bfloat16" else values.astype(problem.storage, copy=False)

    def operands(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> tuple[Any, Any]:
        """op(A) (M x K) and op(B) (K x N) as views of the stored inputs."""
        a, b = inputs
        return (a.T if problem.layout[0] == "T" else a), (b.T if problem.layout[1] == "T" else b)

    def reference(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> Any:
        import cupy as cp

        a, b = self.operands(problem, inputs)
        return cp.matmul(decode(a, problem.dtype).astype(cp.float64), decode(b, problem.dtype).astype(cp.float64))

    def decode(self, problem: GemmProblem, out: Any) -> Any:
        """The output as numbers (for verification)."""
        return decode(out, problem.dtype)

    def new_output(self, problem: GemmProblem) -> Any:
        import cupy as cp

        return cp.empty((problem.M, problem.N), dtype=problem.storage)

    def vendor(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> tuple[str, Callable[[], Any]] | None:
        """cuBLAS on the same operands: through CuPy, or through torch for bfloat16 (None without torch)."""
        import cupy as cp

        a, b = self.operands(problem, inputs)
        if problem.dtype == "bfloat16":
            try:
                import torch
            except ImportError:
                return None
            ta, tb = (torch.from_dlpack(x).view(torch.bfloat16) for x in inputs)
            ta, tb = (ta.t() if problem.layout[0] == "T" else ta), (tb.t() if problem.layout[1] == "T" else tb)
            tout = torch.empty((problem.M, problem.N), dtype=torch.bfloat16, device=ta.device)
            return "cuBLAS (torch)", lambda: torch.matmul(ta, tb, out=tout)
        out = cp.empty((problem.M, problem.N), dtype=problem.storage)
        name = "cuBLAS fp32" if problem.dtype == "tfloat32" else "cuBLAS"
        return name, lambda: cp.matmul(a, b, out=out)

    # --- serving: the vendor library called like a Launcher (autotune.measure.vendor) -------------

    def vendor_library(self, dtype: str, torch_ok: Callable[[], bool]) -> tuple[str | None, str]:
        """cuBLAS through CuPy, bfloat16 through torch."""
        if dtype in ("float32", "float16"):
            return "cuBLAS (CuPy)", ""
        if dtype == "tfloat32":
            return "cuBLAS fp32 (CuPy)", ""  # full fp32: more precise than asked, never less
        if dtype == "bfloat16":
            if torch_ok():
                return "cuBLAS (torch)", ""
            return None, "bfloat16 GEMM has no vendor path here (no torch with CUDA): autotune's kernel serves it"
        return None, f"no vendor library computes {self.name}"

    def vendor_call(self, problem: GemmProblem, on_cupy_stream: Callable[[], Any]) -> Callable[..., Any]:
        """cuBLAS on the stored operands (views for the transposed layouts); bfloat16 through torch."""
        return functools.partial(_cublas, problem, on_cupy_stream)

    def vendor_torch_call(self, problem: GemmProblem) -> Callable[..., Any]:
        """``(a, b, out, alpha, beta)``: ``out = alpha * a @ b + beta * out`` on torch tensors (a[M, K], b[K, N]
        as logical views)."""
        return _torch_matmul


def _cublas(p: GemmProblem, on_cupy_stream: Callable[[], Any], a: Any, b: Any, out: Any, alpha: float,
            beta: float) -> Any:  # fmt: skip
    op_a = a.T if p.layout[0] == "T" else a
    op_b = b.T if p.layout[1] == "T" else b
    if p.dtype == "bfloat16":
        return _cublas_bf16(op_a, op_b, out, alpha, beta, on_cupy_stream)
    import cupy as cp

    if beta == 0:
        cp.matmul(op_a, op_b, out=out)
        if alpha != 1:
            out *= alpha
        return out
    product = cp.matmul(op_a, op_b)
    out *= beta
    product *= alpha
    out += product
    return out


def _cublas_bf16(op_a: Any, op_b: Any, out: Any, alpha: float, beta: float, on_cupy_stream: Callable[[], Any]) -> Any:
    import torch

    # bfloat16 bits travel as uint16; torch reads them as int16 (CAI) and views them as bfloat16
    dev = f"cuda:{out.device.id}"
    ta, tb, tout = (torch.as_tensor(x.view("int16"), device=dev).view(torch.bfloat16) for x in (op_a, op_b, out))
    with on_cupy_stream():
        _torch_matmul(ta, tb, tout, alpha, beta)
    return out


def _torch_matmul(a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
    import torch

    matmul = torch.backends.cuda.matmul
    allow = matmul.allow_tf32
    if allow and a.dtype == torch.float32:  # float32 and tfloat32 problems get full fp32 from the vendor
        matmul.allow_tf32 = False
    try:
        if beta == 0 and alpha == 1:
            return torch.matmul(a, b, out=out)
        return out.addmm_(a, b, beta=beta, alpha=alpha)  # beta 0 ignores NaN in out (torch's addmm contract)
    finally:
        matmul.allow_tf32 = allow


GEMM = GemmFamily()
