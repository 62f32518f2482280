"""The vendor libraries, served like our kernels: cuBLAS through CuPy (bfloat16 through torch) and cuDNN
through torch.

``VendorLauncher`` takes the arguments a ``Launcher`` takes (operands as stored for the problem's layout,
an output to fill, alpha and beta) and runs on CuPy's current stream. ``vendor_for`` says whether a vendor
path exists for a family and dtype here, and if not, the one sentence that says why. Which library serves a
family, and how it is called, is the family's (``TemplateFamily.vendor_library``, ``vendor_call``,
``vendor_torch_call``); this module keeps what every family shares: the observer, provenance and torch's check.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any

from ..core import hooks
from ..kernels import FAMILIES
from .streams import torch_on_cupy_stream

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
    family = FAMILIES.get(kernel)
    if family is None:
        return None, f"no vendor library computes {kernel}"
    return family.vendor_library(dtype, torch_importable)


class VendorLauncher:
    """The vendor library for one problem, called like a ``Launcher``: ``launcher(a, b, out, alpha, beta)``; what
    it calls, and how, is the family's (``vendor_call``, ``vendor_torch_call``)."""

    vendor = True

    def __init__(self, kernel: str, problem: Any, name: str, provenance: dict[str, Any]) -> None:
        self.kernel = kernel
        self.problem = problem
        self.name = name
        self.kernel_name = f"vendor:{name}"
        self._provenance = provenance
        self.provisional = not provenance.get("final", True)
        family = FAMILIES[kernel]
        self._launch = family.vendor_call(problem, torch_on_cupy_stream)  # (a, b, out, alpha, beta) -> out
        self._torch = family.vendor_torch_call(problem)

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

    def torch_gemm(self, a: Any, b: Any, out: Any, alpha: float = 1.0, beta: float = 0.0) -> Any:
        """``out = alpha * a @ b + beta * out`` on torch tensors (a[M, K], b[K, N] as logical views), on torch's
        current stream; through the call observer when one is set."""
        if hooks.observer is None:
            return self._torch(a, b, out, alpha, beta)
        return hooks.observer(self.kernel, self.problem, lambda: self._torch(a, b, out, alpha, beta))

    def torch_conv(self, x: Any, w: Any) -> Any:
        """cuDNN on torch tensors stored in the problem's layout; the result in that layout (a torch view).
        float32 runs without TF32 (our float32 kernels compute in full fp32), the caller's setting restored.
        Through the call observer when one is set."""
        if hooks.observer is None:
            return self._torch(x, w)
        return hooks.observer(self.kernel, self.problem, lambda: self._torch(x, w))

    def __repr__(self) -> str:
        return f"VendorLauncher({self.name}, {self.problem.label}, {self._provenance.get('step')})"
