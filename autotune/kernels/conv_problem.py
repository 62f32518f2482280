"""The forward 2-D convolution problem (groups 1, dilation 1, zero padding, fp32 accumulation) and
``ConvTemplate``, the base of every conv2d template: its render context, kernel names and kernel arguments.

    y[n, k, p, q] = sum_{c, r, s} x[n, c, p*stride + r - pad, q*stride + s - pad] * w[k, c, r, s]

Layouts: "NCHW" (x: N,C,H,W; w: K,C,R,S; y: N,K,P,Q) and "NHWC" (x: N,H,W,C; w: K,R,S,C; y: N,P,Q,K).
Dtypes: float32, and float16 (half inputs and output, fp32 accumulation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .template import Template

ITEMSIZE = {"float32": 4, "float16": 2}
CTYPE = {"float32": "float", "float16": "__half"}
SHORT = {"float32": "f32", "float16": "f16"}
LAYOUTS = ("NCHW", "NHWC")
FIELDS = ("N", "C", "H", "W", "K", "R", "S", "stride", "pad")
LABEL = re.compile(r"n(\d+)c(\d+)h(\d+)w(\d+)k(\d+)r(\d+)s(\d+)u(\d+)p(\d+)")


@dataclass(frozen=True)
class ConvProblem:
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int
    pad: int
    dtype: str
    layout: str = "NCHW"

    @property
    def P(self) -> int:
        return (self.H + 2 * self.pad - self.R) // self.stride + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.pad - self.S) // self.stride + 1

    @property
    def label(self) -> str:
        """e.g. "n32c64h56w56k64r3s3u1p1" (u: stride, p: pad); ``CONV.problem(label, ...)`` parses it back."""
        return "".join(f"{t}{v}" for t, v in zip("nchwkrsup", self.dims, strict=True))

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.N, self.C, self.H, self.W, self.K, self.R, self.S, self.stride, self.pad)

    @property
    def flops(self) -> int:
        return 2 * self.N * self.K * self.P * self.Q * self.C * self.R * self.S

    @property
    def bytes(self) -> int:
        """Fewest bytes a convolution moves: x and w read once, y written once."""
        elems = (
            self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.S + self.N * self.K * self.P * self.Q
        )
        return elems * ITEMSIZE[self.dtype]

    @property
    def device_bytes(self) -> int:
        """Device memory tuning this problem holds at its peak, besides a candidate's own scratch
        (``extra_bytes``): x and w as stored, y twice (the candidate's and the vendor's), and the float64
        reference: float64 copies of x (also padded) and w, and y with one filter tap's product beside it."""
        x, w = self.N * self.C * self.H * self.W, self.K * self.C * self.R * self.S
        y, padded = (
            self.N * self.K * self.P * self.Q,
            self.N * self.C * (self.H + 2 * self.pad) * (self.W + 2 * self.pad),
        )
        return (x + w + 2 * y) * ITEMSIZE[self.dtype] + (x + padded + w + 2 * y) * 8

    @property
    def storage(self) -> str:
        return self.dtype


def variant(dtype: str, layout: str) -> dict[str, Any]:
    """The render-context keys a source depends on besides the parameters (never the shape)."""
    return {"DTYPE": dtype, "T": CTYPE[dtype], "ES": ITEMSIZE[dtype], "LAYOUT": layout}


def require_plain(alpha: float, beta: float) -> None:
    """Raise ValueError unless alpha is 1 and beta 0: a convolution kernel overwrites y."""
    if alpha != 1.0 or beta != 0.0:
        raise ValueError(f"conv2d computes y = conv(x, w) only (alpha 1, beta 0), got alpha={alpha}, beta={beta}")


def conv_args(problem: ConvProblem, inputs: tuple[Any, Any], out: Any, alpha: float, beta: float,
              scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
    """x, w, y and the nine shape integers plus P and Q, then the scratch buffers if any."""
    import numpy as np

    require_plain(alpha, beta)
    x, w = inputs
    return (x, w, out, *(np.int32(v) for v in (*problem.dims, problem.P, problem.Q)), *scratch)


SPLIT_ABI = "add (float* partial, unsigned* counters) after Q, sized and zeroed as for gemm's split-K."


class ConvTemplate(Template):
    """A conv2d template: its context is its derived values and the problem's variant (dtype, layout and, for
    templates with vectorised loads, ``alignment``), and its kernels take ``conv_args``."""

    family = "conv2d"
    layouts = LAYOUTS

    def alignment(self, problem: ConvProblem) -> dict[str, Any]:
        """ALIGN_A / ALIGN_B for templates whose source differs for operands read in vectors; {} for others."""
        return {}

    def variant_of(self, problem: ConvProblem) -> dict[str, Any]:
        """The render-context keys besides the parameters: dtype, layout and (implicit GEMM) alignment."""
        return {**variant(problem.dtype, problem.layout), **self.alignment(problem)}

    def context(self, params: Any, problem: ConvProblem) -> dict[str, Any]:
        v = self.variant_of(problem)
        return {**self.derived(params, problem), **v}

    def name_tag(self, problem: ConvProblem) -> tuple[str, ...]:
        a = self.alignment(problem)
        unaligned = ("a" if problem.layout == "NHWC" and not a.get("ALIGN_A", True) else "") + (
            "" if a.get("ALIGN_B", True) else "b"
        )
        return (SHORT[problem.dtype], problem.layout.lower(), *([f"u{unaligned}"] if unaligned else []))

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        return conv_args(problem, inputs, out, alpha, beta, scratch)

    def extra_bytes(self, params: Any, problem: Any) -> int:
        """Split-K partial tiles and counters (4 bytes each), else 0."""
        need = self.scratch(params, problem)
        return 4 * (need[0] + need[1]) if need is not None else 0
