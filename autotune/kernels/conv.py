"""Forward 2-D convolution (groups 1, dilation 1, zero padding), fp32 accumulation (the problem: conv_problem.py).

    y[n, k, p, q] = sum_{c, r, s} x[n, c, p*stride + r - pad, q*stride + s - pad] * w[k, c, r, s]

Each template is its own module (conv_direct.py, conv_implicit_simt.py, conv_implicit_wmma.py,
conv_implicit_mma.py, conv_winograd.py, conv_im2col.py), a ``Template`` listed once in ``REGISTRY`` below; the
family's dispatch (``TemplateFamily``) resolves "auto" and hands each question to the template. The family keeps
the problem type, the inputs, the float64 reference and the vendor baseline (cuDNN through torch).

Example::

    >>> p = CONV.problem("n1c64h56w56k64r3s3u1p1", "float32")
    >>> CONV.launch("direct", dict(TP=8, TQ=16, KB=64, QT=4, KT=8, CB=8, PAD=1), p).grid
    (28, 1, 1)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import brief
from . import conv_direct, conv_im2col, conv_implicit_mma, conv_implicit_simt, conv_implicit_wmma, conv_winograd
from .conv_problem import CTYPE, FIELDS, ITEMSIZE, LABEL, LAYOUTS, SHORT, ConvProblem, conv_args
from .conv_problem import variant as variant
from .family import TemplateFamily

__all__ = ["CONV", "CTYPE", "FIELDS", "ITEMSIZE", "LABEL", "LAYOUTS", "SHORT", "ConvFamily", "ConvProblem", "variant"]

MAX_DIM = 2**31 - 1 - 4096  # coordinates are ints in the kernel (offsets are 64-bit)
MAX_TENSOR_BYTES = 2**63 - 1  # element offsets are 64-bit (long long): a tensor's byte offsets must not wrap
# Every conv2d template, in the order "auto" offers them.
SPACES = {"float32": ("conv.yaml",), "float16": ("conv_fp16.yaml",)}  # the spec files that tune a conv2d, by dtype
REGISTRY = (conv_direct, conv_implicit_simt, conv_implicit_wmma, conv_implicit_mma, conv_winograd, conv_im2col)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class ConvFamily(TemplateFamily):
    name = "conv2d"
    template_dir = "conv"  # templates/conv/
    shape_help = (
        "a mapping {N, C, H, W, K, R, S, stride, pad} (stride defaults to 1, pad to 0), "
        "a label such as 'n32c64h56w56k64r3s3u1p1' or a list [N, C, H, W, K, R, S, stride, pad]"
    )
    layouts = LAYOUTS
    c_abi_note = (
        "conv2d (layout NCHW or NHWC; `shape` is nNcChHwWkKrRsSuSTRIDEpPAD): (const T* x, const T* w, T* y, int N, "
        "int C, int H, int W, int K, int R, int S, int stride, int pad, int P, int Q)."
    )

    def __init__(self) -> None:
        super().__init__([m.TEMPLATE for m in REGISTRY], LAYOUTS)

    def problem(self, shape: Any, dtype: str, layout: str = "NCHW") -> ConvProblem:
        if isinstance(shape, str):
            m = LABEL.fullmatch(shape.strip())
            if not m:
                raise ValueError(f"expected {self.shape_help}, got {brief(shape)}")
            dims = [int(g) for g in m.groups()]
        elif isinstance(shape, Mapping):
            unknown = sorted(str(k) for k in shape if k not in FIELDS)
            if unknown:
                raise ValueError(f"unknown convolution key {brief(unknown[0])}; expected keys {', '.join(FIELDS)}")
            missing = [k for k in FIELDS[:7] if k not in shape]
            if missing:
                raise ValueError(f"convolution shape misses {', '.join(missing)}; expected {self.shape_help}")
            dims = [shape[k] for k in FIELDS[:7]] + [shape.get("stride", 1), shape.get("pad", 0)]
        elif isinstance(shape, (list, tuple)):
            if len(shape) != len(FIELDS):
                raise ValueError(
                    f"expected a list of 9 integers [N, C, H, W, K, R, S, stride, pad], got {brief(shape)}"
                )
            dims = list(shape)
        else:
            raise ValueError(f"expected {self.shape_help}, got {brief(shape)}")
        for name, v in zip(FIELDS, dims, strict=True):
            low = 0 if name == "pad" else 1
            if not _int(v) or v < low:
                raise ValueError(f"convolution {name} must be an integer >= {low}, got {brief(v)}")
            if v > MAX_DIM:
                raise ValueError(f"convolution {name} = {brief(v)} is above {MAX_DIM} (32-bit coordinates)")
        n, c, h, w, k, r, s, stride, pad = dims
        if h + 2 * pad > MAX_DIM or w + 2 * pad > MAX_DIM:
            raise ValueError(f"padded input {h + 2 * pad}x{w + 2 * pad} is above {MAX_DIM} (32-bit coordinates)")
        if r > h + 2 * pad or s > w + 2 * pad:
            raise ValueError(f"filter {r}x{s} is larger than the padded input {h + 2 * pad}x{w + 2 * pad}")
        if dtype not in ITEMSIZE:
            raise ValueError(f"unknown conv2d dtype {brief(dtype)}; expected one of {', '.join(ITEMSIZE)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown conv2d layout {brief(layout)}; expected one of {', '.join(LAYOUTS)}")
        p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
        for name, elements in (("x", n * c * h * w), ("w", k * c * r * s), ("y", n * k * p * q)):
            if elements * ITEMSIZE[dtype] > MAX_TENSOR_BYTES:
                raise ValueError(
                    f"{name} would hold {elements:.3g} {dtype} elements, more than 2**63 bytes: the conv2d kernels "
                    "index with int coordinates and 64-bit (long long) offsets, whose byte addresses would wrap "
                    "(templates with int offsets refuse smaller tensors, per configuration)"
                )
        return ConvProblem(*dims, dtype=dtype, layout=layout)

    # --- configuration -> derived values ---------------------------------------------------------

    def variant(self, template: str, problem: ConvProblem) -> dict[str, Any]:
        """The render-context keys besides the parameters: dtype, layout and (implicit GEMM) alignment."""
        return self.template(template).variant_of(problem)

    def spec_files(self, problem: ConvProblem) -> tuple[str, ...]:
        return SPACES.get(problem.dtype, ())

    def default_config(self, dtype: str, layout: str = "NCHW") -> tuple[str, dict[str, Any]]:
        """The runtime's last resort (256 threads, 32 accumulators; 3x3 filters need 26 KB of shared memory)."""
        if dtype not in ITEMSIZE or layout not in LAYOUTS:
            raise ValueError(f"no conv2d template computes {dtype} {layout}")
        return "direct", dict(TP=8, TQ=16, KB=64, QT=4, KT=8, CB=8, PAD=1)

    def plain_args(self, problem: ConvProblem, inputs: tuple[Any, Any], out: Any, alpha: float, beta: float,
                   scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """x, w, y and the nine shape integers plus P and Q, then the scratch buffers (split-K's partial,
        counters) if any. y is overwritten: alpha must be 1 and beta 0."""
        return conv_args(problem, inputs, out, alpha, beta, scratch)

    # --- GPU side: inputs, reference, vendor baseline ---------------------------------------------

    def shapes(self, problem: ConvProblem) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Array shapes of x, w and y as stored in the problem's layout."""
        p = problem
        if p.layout == "NHWC":
            return (p.N, p.H, p.W, p.C), (p.K, p.R, p.S, p.C), (p.N, p.P, p.Q, p.K)
        return (p.N, p.C, p.H, p.W), (p.K, p.C, p.R, p.S), (p.N, p.K, p.P, p.Q)

    def make_inputs(self, problem: ConvProblem, seed: int) -> tuple[Any, Any]:
        """Fresh standard-normal x and w in the storage dtype and layout."""
        import cupy as cp

        rng = cp.random.default_rng(seed)
        xs, ws, _ = self.shapes(problem)
        dt = cp.dtype(problem.storage)
        x = rng.standard_normal(xs, dtype=cp.float32).astype(dt, copy=False)
        w = rng.standard_normal(ws, dtype=cp.float32).astype(dt, copy=False)
        return x, w

    def reference(self, problem: ConvProblem, inputs: tuple[Any, Any]) -> Any:
        """float64 on the GPU: one (K x C) @ (C x N*P*Q) product per filter tap over a strided input view."""
        import cupy as cp

        p = problem
        x, w = (a.astype(cp.float64) for a in inputs)
        if p.layout == "NHWC":
            x, w = x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
        xp = cp.pad(x, ((0, 0), (0, 0), (p.pad, p.pad), (p.pad, p.pad)))
        y = cp.zeros((p.K, p.N, p.P, p.Q), dtype=cp.float64)
        hi, wi = p.stride * (p.P - 1) + 1, p.stride * (p.Q - 1) + 1
        for r in range(p.R):
            for s in range(p.S):
                window = xp[:, :, r : r + hi : p.stride, s : s + wi : p.stride]  # N, C, P, Q
                y += cp.tensordot(w[:, :, r, s], window, axes=([1], [1]))
        return y.transpose(1, 2, 3, 0) if p.layout == "NHWC" else y.transpose(1, 0, 2, 3)

    def decode(self, problem: ConvProblem, out: Any) -> Any:
        return out

    def new_output(self, problem: ConvProblem) -> Any:
        import cupy as cp

        return cp.empty(self.shapes(problem)[2], dtype=problem.storage)

    def vendor(self, problem: ConvProblem, inputs: tuple[Any, Any]) -> tuple[str, Callable[[], Any]] | None:
        """cuDNN through torch (benchmark mode, no TF32 for float32), on the same arrays; None without torch."""
        try:
            import torch
        except ImportError:
            return None
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False  # our float32 kernel computes in full fp32
        tx, tw = (torch.from_dlpack(a) for a in inputs)
        if problem.layout == "NHWC":  # logical NCHW views with channels_last strides
            tx, tw = tx.permute(0, 3, 1, 2), tw.permute(0, 3, 1, 2)
        conv = torch.nn.functional.conv2d
        return "cuDNN (torch)", lambda: conv(tx, tw, stride=problem.stride, padding=problem.pad)

    # --- serving: the vendor library called like a Launcher (autotune.measure.vendor) -------------

    def vendor_library(self, dtype: str, torch_ok: Callable[[], bool]) -> tuple[str | None, str]:
        """cuDNN through torch, in every dtype."""
        if torch_ok():
            return "cuDNN (torch)", ""
        return None, "cuDNN is unavailable (no torch with CUDA): autotune's conv2d kernel serves it, unchecked"

    def vendor_call(self, problem: ConvProblem, on_cupy_stream: Callable[[], Any]) -> Callable[..., Any]:
        """cuDNN through torch on x, w and y as stored; y = conv(x, w) only (alpha 1, beta 0)."""
        return functools.partial(_cudnn, problem, self.shapes(problem), on_cupy_stream)

    def vendor_torch_call(self, problem: ConvProblem) -> Callable[..., Any]:
        """``(x, w) -> y``: cuDNN on torch tensors stored in the problem's layout; the result in that layout (a
        torch view). float32 runs without TF32 (our float32 kernels compute in full fp32), the caller's setting
        restored."""
        return functools.partial(_torch_conv, problem)


def _cudnn(p: ConvProblem, shapes: tuple[tuple[int, ...], ...], on_cupy_stream: Callable[[], Any], x: Any, w: Any,
           out: Any, alpha: float, beta: float) -> Any:  # fmt: skip
    import torch

    if alpha != 1.0 or beta != 0.0:
        raise ValueError(f"conv2d computes y = conv(x, w) only (alpha 1, beta 0), got alpha={alpha}, beta={beta}")
    xs, ws, _ = shapes
    dev = f"cuda:{out.device.id}"
    tx, tw, tout = (torch.as_tensor(v, device=dev) for v in (x.reshape(xs), w.reshape(ws), out))
    with on_cupy_stream():
        y = _torch_conv(p, tx, tw)
        tout.copy_(y)
    return out


def _torch_conv(p: ConvProblem, x: Any, w: Any) -> Any:
    import torch

    if p.layout == "NHWC":  # logical NCHW views with channels-last strides
        x, w = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
    cudnn = torch.backends.cudnn
    allow = cudnn.allow_tf32
    if p.dtype == "float32" and allow:
        cudnn.allow_tf32 = False
    try:
        y = torch.nn.functional.conv2d(x, w, stride=p.stride, padding=p.pad)
    finally:
        cudnn.allow_tf32 = allow
    return y.permute(0, 2, 3, 1) if p.layout == "NHWC" else y


CONV = ConvFamily()
