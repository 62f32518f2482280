"""What the torch drop-in (``autotune.torch``) decides for a routed module's input signature, before any tensor
is touched: the fallback reasons, the routes, and ``plan_call``, which asks the runtime (through the backend) who
serves the problem. Pure but for that question; no torch import.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

log = logging.getLogger("autotune.torch")

LINEAR_DTYPES = ("float32", "float16", "bfloat16")
CONV_DTYPES = ("float32", "float16")


class Fallback(StrEnum):
    """Why a call ran torch's own op instead of a kernel of autotune."""

    GROUPS = "groups != 1"
    DILATION = "dilation != 1"
    ASYMMETRIC = "stride or padding differs between height and width"
    PADDING_MODE = "padding_mode is not 'zeros'"
    PADDING_STRING = "string padding ('same' or 'valid')"
    TRAINING = "training mode"
    AUTOGRAD = "input or parameters need grad"
    DEVICE = "not a tensor on the current CUDA device"
    DTYPE = "dtype has no kernel"
    MIXED_DTYPE = "input and weight dtypes differ"
    INPUT = "input shape or memory layout not served"
    CAPTURE = "new shape first seen during CUDA graph capture"
    RUNTIME = "the runtime cannot serve the problem"


class Kind(StrEnum):
    """The torch modules the drop-in routes, named after their classes; the family that serves each is named
    where its problem is made (``plan_call``)."""

    LINEAR = "linear"  # nn.Linear: the GEMM of layout NT
    CONV2D = "conv2d"  # nn.Conv2d: the convolution, NCHW or NHWC


class Route(StrEnum):
    AUTOTUNE = "autotune"  # a kernel of autotune
    VENDOR = "vendor"  # the runtime serves the vendor library: torch's op directly
    TORCH = "torch"  # a fallback: torch's op, counted with its reason


def structural_reason(kind: str, module: Any) -> Fallback | None:
    """Why ``module`` (of a ``Kind``) can never be routed, from its attributes alone."""
    if kind != Kind.CONV2D:
        return None
    padding, fb = module.padding, Fallback
    checks = ((module.groups != 1, fb.GROUPS), (isinstance(padding, str), fb.PADDING_STRING),
              (module.padding_mode != "zeros", fb.PADDING_MODE), (tuple(module.dilation) != (1, 1), fb.DILATION),
              (len(set(module.stride)) != 1 or len(set(padding)) != 1, fb.ASYMMETRIC))  # fmt: skip
    return next((reason for failed, reason in checks if failed), None)


@dataclass(frozen=True)
class Plan:
    """How calls of one input signature are served; ``problem`` is the runtime's problem (None for TORCH)."""

    route: Route
    reason: Fallback | None = None
    kernel: str = ""
    problem: Any = None
    detail: str = ""
    sizes: dict[str, int] = field(default_factory=dict, compare=False)  # runtime.load's keywords


def plan_call(kind: str, module: Any, shape: tuple[int, ...], dtypes: tuple[str, str], layout: str | None,
              backend: Any, device: Any) -> Plan:  # fmt: skip
    """Decide how ``module`` serves inputs of ``shape`` (conv2d: logical NCHW, dense in ``layout``) and
    (input, weight) ``dtypes``; pure but for ``backend.step``, the runtime's answer."""
    if dtypes[0] != dtypes[1]:
        return Plan(Route.TORCH, Fallback.MIXED_DTYPE)
    if dtypes[0] not in (LINEAR_DTYPES if kind == Kind.LINEAR else CONV_DTYPES):
        return Plan(Route.TORCH, Fallback.DTYPE)
    if kind == Kind.LINEAR:
        n, k = module.out_features, module.in_features
        m = math.prod(shape[:-1]) if shape else 0
        if not shape or shape[-1] != k or min(m, n, k) < 1:
            return Plan(Route.TORCH, Fallback.INPUT)
        return _ask(backend, "gemm", [m, n, k], {"M": m, "N": n, "K": k}, dtypes[0], "NT", device)
    if layout is None or len(shape) != 4:
        return Plan(Route.TORCH, Fallback.INPUT)
    n, c, h, w = shape
    k, r, s = module.out_channels, *module.kernel_size
    stride, pad = module.stride[0], module.padding[0]
    if c != module.in_channels or min(n, c, k) < 1 or h + 2 * pad < r or w + 2 * pad < s:
        return Plan(Route.TORCH, Fallback.INPUT)
    dims = {"N": n, "C": c, "H": h, "W": w, "K": k, "R": r, "S": s, "stride": stride, "pad": pad}
    return _ask(backend, "conv2d", dims, dims, dtypes[0], layout, device)


def _ask(backend: Any, kernel: str, shape: Any, sizes: dict[str, int], dtype: str, layout: str, device: Any) -> Plan:
    """Ask the runtime (through ``backend``) who serves the problem; ``sizes`` are ``load()``'s keywords."""
    from ..kernels import FAMILIES

    try:
        problem = FAMILIES[kernel].problem(shape, dtype, layout)
        step = backend.step(kernel, problem, sizes, device)
    except Exception as exc:  # noqa: BLE001 - the model must still run: torch serves it, the reason is counted
        log.warning("autotune.torch: %s %s %s/%s goes to torch: %s", kernel, shape, dtype, layout, exc)
        return Plan(Route.TORCH, Fallback.RUNTIME, kernel, None, f"{type(exc).__name__}: {exc}")
    route = Route.VENDOR if step.startswith(Route.VENDOR) else Route.AUTOTUNE
    log.debug("autotune.torch: %s %s served by %s (%s)", kernel, problem.label, route.value, step)
    return Plan(route, None, kernel, problem, step, sizes)
