"""The GEMM problem, C[M, N] = alpha * op(A) @ op(B) + beta * C[M, N] (C row-major), and ``GemmTemplate``, the
base of every GEMM template: what they share in their render context, kernel names and kernel arguments.

The layout names op(): "NN" takes A (M x K) and B (K x N) row-major as given; a "T" stores that operand
transposed (A as K x M, B as N x K), the way a column-major caller or a ``.T`` view hands it over.
Dtypes: float32, float16, bfloat16 (inputs and C in that type, fp32 accumulation), and tfloat32
(float32 arrays, tf32 tensor-core math: lower precision, its own tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .template import Template

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "tfloat32": 4}
CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "tfloat32": "float"}
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "tfloat32": "tf32"}
LAYOUTS = ("NN", "NT", "TN", "TT")
MAX_ACCUMULATORS = 128  # per thread; above this the register file spills on every architecture we target


@dataclass(frozen=True)
class GemmProblem:
    M: int
    N: int
    K: int
    dtype: str
    layout: str = "NN"
    bias: bool = False  # the epilogue adds bias[n] (N values of the dtype, the kernel's last argument): nn.Linear's

    @property
    def label(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def bytes(self) -> int:
        """Fewest bytes a GEMM moves: A and B read once, C written once."""
        return (self.M * self.K + self.K * self.N + self.M * self.N) * ITEMSIZE[self.dtype]

    @property
    def device_bytes(self) -> int:
        """Device memory tuning this problem holds at its peak, besides a candidate's own scratch
        (``extra_bytes``, split-K partials): A and B as stored, C twice (the candidate's and the vendor's), and
        the float64 reference with the float64 copies of A and B it is computed from."""
        a, b, c = self.M * self.K, self.K * self.N, self.M * self.N
        return (a + b + 2 * c) * ITEMSIZE[self.dtype] + (a + b + c) * 8

    @property
    def storage(self) -> str:
        """The array dtype of A, B and C (bfloat16 travels as its 16 bits: CuPy has no bfloat16 type)."""
        return {"tfloat32": "float32", "bfloat16": "uint16"}.get(self.dtype, self.dtype)


def bf16_bits(x: Any) -> Any:
    """float32 CuPy array -> bfloat16 bits (uint16), rounded to nearest even."""
    import cupy as cp

    u = x.astype(cp.float32).view(cp.uint32)
    return ((u + cp.uint32(0x7FFF) + ((u >> 16) & cp.uint32(1))) >> 16).astype(cp.uint16)


def decode(x: Any, dtype: str) -> Any:
    """A GEMM array as numbers: bfloat16 bits widened to float32, anything else unchanged."""
    import cupy as cp

    return (x.astype(cp.uint32) << 16).view(cp.float32) if dtype == "bfloat16" else x


def variant(dtype: str, layout: str, align_a: bool = True, align_b: bool = True, bias: bool = False) -> dict[str, Any]:
    """What a template's source depends on besides its parameters: element type, operand layout, whether each
    operand's leading dimension is a whole number of 16-byte vectors, and the bias epilogue (never the shape)."""
    return {"DTYPE": dtype, "T": CTYPE[dtype], "ES": ITEMSIZE[dtype], "LAYOUT": layout, "TRANS_A": layout[0] == "T",
            "TRANS_B": layout[1] == "T", "ALIGN_A": align_a, "ALIGN_B": align_b, "BIAS": bias}  # fmt: skip


def problem_variant(p: GemmProblem) -> dict[str, Any]:
    per_vector = 16 // ITEMSIZE[p.dtype]
    lda = p.M if p.layout[0] == "T" else p.K
    ldb = p.K if p.layout[1] == "T" else p.N
    return variant(p.dtype, p.layout, lda % per_vector == 0, ldb % per_vector == 0, p.bias)


def gemm_args(problem: Any, inputs: tuple[Any, Any], out: Any, alpha: float, beta: float,
              scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
    """(A, B, C, M, N, K, alpha, beta, *scratch): what every GEMM kernel takes."""
    import numpy as np

    a, b = inputs
    m, n, k = np.int32(problem.M), np.int32(problem.N), np.int32(problem.K)
    return (a, b, out, m, n, k, np.float32(alpha), np.float32(beta), *scratch)


SPLIT_K_ABI = (
    "after beta (float* partial, unsigned* counters): buffers of `scratch_floats` floats and `scratch_counters` "
    "unsigned ints, zeroed once before the first launch (the kernels leave the counters zero; any non-null pointer "
    "will do when both counts are 0)."
)


class GemmTemplate(Template):
    """A GEMM template: its context is its derived values and the problem's variant, and its kernels take
    ``gemm_args``. ``variant_named``: the kernel name carries the dtype and layout (and, with
    ``alignment_variant``, the operands whose rows are not whole 16-byte vectors). ``bias_epilogue``: its source
    renders the bias variant (``GemmProblem.bias``; with the bias off, byte for byte the source without it)."""

    family = "gemm"
    layouts = LAYOUTS
    variant_named = True
    alignment_variant = False
    bias_epilogue = False

    def variant_of(self, problem: GemmProblem | None) -> dict[str, Any]:
        """The problem's variant, or the template's first dtype in layout NN without a problem."""
        return problem_variant(problem) if problem is not None else variant(tuple(self.dtypes)[0], "NN")

    def context(self, params: Any, problem: GemmProblem) -> dict[str, Any]:
        return {**self.derived(params, problem), **problem_variant(problem)}

    def name_tag(self, problem: GemmProblem) -> tuple[str, ...]:
        if not self.variant_named:
            return ()
        v = problem_variant(problem)
        unaligned = "".join(x for x, ok in (("a", v["ALIGN_A"]), ("b", v["ALIGN_B"])) if not ok)
        unaligned = unaligned if self.alignment_variant else ""
        bias = ("bias",) if problem.bias else ()
        return (SHORT[problem.dtype], problem.layout.lower(), *([f"u{unaligned}"] if unaligned else []), *bias)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        return gemm_args(problem, inputs, out, alpha, beta, scratch)
