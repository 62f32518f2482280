"""The vendor libraries, served like our kernels: cuBLAS through CuPy (bfloat16 through torch) and cuDNN
through torch.

``VendorLauncher`` takes the arguments a ``Launcher`` takes (operands as stored for the problem's layout,
an output to fill, alpha and beta) and runs on CuPy's current stream. ``vendor_for`` says whether a vendor
path exists for a family and dtype here, and if not, the one sentence that says why.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any

from ..core import hooks

log = logging.getLogger(__name__)


@functools.cache
def torch_importable() -> bool:
    """Whether torch imports here with CUDA (imported on the first question, never at ``import autotune``)."""
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def vendor_for(kernel: str, dtype: str) -> tuple[str | None, str]:
    """(vendor name, "") when a vendor path serves ``kernel`` in ``dtype`` here, else (None, why not)."""
    if kernel == "gemm" and dtype in ("float32", "float16"):
        return "cuBLAS (CuPy)", ""
    if kernel == "gemm" and dtype == "tfloat32":
        return "cuBLAS fp32 (CuPy)", ""  # full fp32: more precise than asked, never less
    if kernel == "gemm" and dtype == "bfloat16":
        if torch_importable():
            return "cuBLAS (torch)", ""
        return None, "bfloat16 GEMM has no vendor path here (no torch with CUDA): autotune's kernel serves it"
    if kernel == "conv2d":
        if torch_importable():
            return "cuDNN (torch)", ""
        return None, "cuDNN is unavailable (no torch with CUDA): autotune's conv2d kernel serves it, unchecked"
    return None, f"no vendor library computes {kernel}"


class VendorLauncher:
    """The vendor library for one problem, called like a ``Launcher``: ``launcher(a, b, out, alpha, beta)``."""

    vendor = True

    def __init__(self, kernel: str, problem: Any, name: str, provenance: dict[str, Any]) -> None:
        self.kernel = kernel
        self.problem = problem
        self.name = name
        self.kernel_name = f"vendor:{name}"
        self._provenance = provenance
        self.provisional = not provenance.get("final", True)
        self._shapes = None
        if kernel == "conv2d":
            from ..kernels import FAMILIES

            self._shapes = FAMILIES["conv2d"].shapes(problem)  # type: ignore[attr-defined]

    @property
    def config(self) -> dict[str, Any]:
        return {}

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self._provenance)

    def __call__(self, a: Any, b: Any, out: Any, alpha: float = 1.0, beta: float = 0.0) -> Any:
        if hooks.observer is None:
            return self._launch(a, b, out, alpha, beta)
        return hooks.observer(self.kernel, self.problem, lambda: self._launch(a, b, out, alpha, beta))

    def _launch(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
        if self.kernel == "conv2d":
            return self._conv(a, b, out, alpha, beta)
        p = self.problem
        op_a = a.T if p.layout[0] == "T" else a
        op_b = b.T if p.layout[1] == "T" else b
        if p.dtype == "bfloat16":
            return self._bf16(op_a, op_b, out, alpha, beta)
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

    def _bf16(self, op_a: Any, op_b: Any, out: Any, alpha: float, beta: float) -> Any:
        import torch

        from .streams import torch_on_cupy_stream

        # bfloat16 bits travel as uint16; torch reads them as int16 (CAI) and views them as bfloat16
        dev = f"cuda:{out.device.id}"
        ta, tb, tout = (torch.as_tensor(x.view("int16"), device=dev).view(torch.bfloat16) for x in (op_a, op_b, out))
        with torch_on_cupy_stream():
            self._torch_gemm(ta, tb, tout, alpha, beta)
        return out

    def torch_gemm(self, a: Any, b: Any, out: Any, alpha: float = 1.0, beta: float = 0.0) -> Any:
        """``out = alpha * a @ b + beta * out`` on torch tensors (a[M, K], b[K, N] as logical views), on torch's
        current stream; through the call observer when one is set."""
        if hooks.observer is None:
            return self._torch_gemm(a, b, out, alpha, beta)
        return hooks.observer(self.kernel, self.problem, lambda: self._torch_gemm(a, b, out, alpha, beta))

    def _torch_gemm(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
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

    def _conv(self, x: Any, w: Any, out: Any, alpha: float, beta: float) -> Any:
        import torch

        from .streams import torch_on_cupy_stream

        if alpha != 1.0 or beta != 0.0:
            raise ValueError(f"conv2d computes y = conv(x, w) only (alpha 1, beta 0), got alpha={alpha}, beta={beta}")
        xs, ws, _ = self._shapes  # type: ignore[misc]
        dev = f"cuda:{out.device.id}"
        tx, tw, tout = (torch.as_tensor(v, device=dev) for v in (x.reshape(xs), w.reshape(ws), out))
        with torch_on_cupy_stream():
            y = self._torch_conv(tx, tw)
            tout.copy_(y)
        return out

    def torch_conv(self, x: Any, w: Any) -> Any:
        """cuDNN on torch tensors stored in the problem's layout; the result in that layout (a torch view).
        float32 runs without TF32 (our float32 kernels compute in full fp32), the caller's setting restored.
        Through the call observer when one is set."""
        if hooks.observer is None:
            return self._torch_conv(x, w)
        return hooks.observer(self.kernel, self.problem, lambda: self._torch_conv(x, w))

    def _torch_conv(self, x: Any, w: Any) -> Any:
        import torch

        p = self.problem
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

    def __repr__(self) -> str:
        return f"VendorLauncher({self.name}, {self.problem.label}, {self._provenance.get('step')})"
