"""The modules and functions that a model rewritten by ``autotune.serve.torch_fusion`` runs (for inference):
``FusedConv2d`` (a convolution with its bias, a residual add and a ReLU after it), ``MergedLinears`` (Linears
that read one input, run as one GEMM at decode sizes), ``silu_mul`` (a SwiGLU gate in one kernel) and
``fold_batchnorm``. Their GPU work beyond torch's ops is the elementwise kernels of ``autotune.serve.elementwise``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from . import elementwise
from .torch_backend import AutotuneBackend

log = logging.getLogger(__name__)
_epilogue_broken = False  # an elementwise kernel failed once (no compiler, say): torch's ops take over

# Merged Linears run as one GEMM up to this many rows of input: a 16-bit GEMM does M FLOPs per byte of weight
# read, so at decode sizes it is bound by reading the weights and one launch reading them all saves the others'
# ramp-up and tail (Llama-sized decode: 1.05x the weights' read floor). At prefill sizes it is bound by the tensor
# cores; there the parts run on their own, into dense outputs (their column slices slowed the elementwise ops
# after them: 0.91x torch at M = 2048 on the H200).
MERGE_MAX_ROWS = 64


class FusedConv2d(nn.Conv2d):
    """``relu(conv2d(x, weight, bias) + z)`` (``residual``) or ``relu(conv2d(x, weight, bias))`` (``relu``) or
    ``conv2d(x, weight, bias)``, for inference; made by :func:`fuse`."""

    def __init__(self, *args: Any, relu: bool = False, residual: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.relu, self.residual = relu, residual
        self._vendor: dict[tuple, Any] = {}  # input signature -> the faster of the fused and the separate ops

    @classmethod
    def like(cls, conv: nn.Conv2d, weight: Any = None, bias: Any = None) -> FusedConv2d:
        """A new module with ``conv``'s hyper-parameters; its weight and bias are ``conv``'s own Parameters
        (shared, not copied) unless new tensors are given."""
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                  conv.groups, bias=True, padding_mode=conv.padding_mode, device="meta")  # fmt: skip
        if isinstance(conv, FusedConv2d):
            new.relu, new.residual = conv.relu, conv.residual
        new.weight = conv.weight if weight is None else nn.Parameter(weight, requires_grad=False)
        new.bias = conv.bias if bias is None else nn.Parameter(bias, requires_grad=False)
        return new.train(conv.training)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", residual" if self.residual else "") + (", relu" if self.relu else "")

    def finish(self, out: Any, z: Any = None) -> Any:
        """The epilogue after the convolution computed without its bias: ``+ bias``, ``+ z`` and the ReLU, in
        place on ``out``; on the GPU one kernel (``autotune.serve.elementwise``) where it takes the tensors, else
        torch's ops."""
        global _epilogue_broken
        z = z if self.residual else None
        if out.is_cuda and not _epilogue_broken and not out.requires_grad:
            layout = AutotuneBackend.layout_of(out)
            if layout is not None:
                try:
                    if elementwise.conv_epilogue(out, self.bias, z, self.relu, layout == "NHWC"):
                        return out
                except Exception as exc:  # noqa: BLE001 - torch's ops compute the same: use them from now on
                    log.warning("autotune.torch: the convolution epilogue kernel failed, torch's ops run it: %s", exc)
                    _epilogue_broken = True
        if self.bias is not None:
            out = out.add_(self.bias.view(1, -1, 1, 1))
        if z is not None:
            out = out.add_(z) if z.shape == out.shape else out + z
        return out.relu_() if self.relu else out

    def separate(self, x: Any, z: Any = None) -> Any:
        """torch's convolution without the bias, then :meth:`finish`."""
        return self.finish(self._conv_forward(x, self.weight, None), z)

    def fused(self, x: Any, z: Any = None) -> Any:
        """cuDNN's fused convolution, bias, add and ReLU (``relu`` is required)."""
        args = (self.bias, list(self.stride), list(self.padding), list(self.dilation), self.groups)
        if self.residual:
            return torch.cudnn_convolution_add_relu(x, self.weight, z, 1.0, *args)
        return torch.cudnn_convolution_relu(x, self.weight, *args)

    def forward(self, x: Any, z: Any = None) -> Any:
        if self.training:
            raise RuntimeError(
                "autotune.torch: this convolution has a BatchNorm folded into it for inference; train the model "
                "from before autotune.torch.optimize (or optimize with fuse=False)"
            )
        if torch.is_grad_enabled() and (x.requires_grad or (z is not None and z.requires_grad)):
            return self.separate(x, z)  # torch's ops only (finish sees out.requires_grad): autograd records them
        if (self.residual and z is None) or not self.relu or not x.is_cuda:
            return self.separate(x, z)
        key = (x.shape, x.dtype, x.stride(), x.device, None if z is None else (z.shape, z.stride(), z.dtype))
        how = self._vendor.get(key)
        if how is None:
            how = self._choose(key, x, z)
        return how(x, z)

    def _choose(self, key: tuple, x: Any, z: Any) -> Any:
        """The faster of :meth:`fused` and :meth:`separate` on this input (separate while a CUDA graph is
        captured, or where cuDNN's fused op fails or disagrees)."""
        if AutotuneBackend.capturing() or self.padding_mode != "zeros" or (z is not None and z.shape != key[0]):
            return self.separate
        try:
            want, got = self.separate(x, z), self.fused(x, z)
            ok = got.shape == want.shape and bool((got - want).float().norm() <= 1e-2 * want.float().norm())
        except Exception as exc:  # noqa: BLE001 - the fused op is an optimisation: torch's own ops remain
            log.debug("autotune.torch: cuDNN's fused convolution failed: %s", exc)
            ok = False
        how = self.separate
        if ok:
            timed = AutotuneBackend.race(lambda: self.fused(x, z), lambda: self.separate(x, z), x)
            how = self.fused if timed is not None and timed[0] < timed[1] else self.separate
        self._vendor[key] = how
        return how


class MergedLinears(nn.Module):
    """Linears that read one input (``parts``, in order) and one ``merged`` Linear over their concatenated
    weights (the parts' weights are views of it). Up to ``MERGE_MAX_ROWS`` rows of input, the merged Linear runs
    and the outputs are column slices of its output (strided views); above, each part runs on its own, into its
    own dense output. Returns the outputs as a tuple."""

    def __init__(self, merged: nn.Linear, parts: dict[str, nn.Linear]) -> None:
        super().__init__()
        self.merged, self.parts = merged, nn.ModuleDict(parts)
        self.widths = [p.out_features for p in parts.values()]

    def forward(self, x: Any) -> tuple[Any, ...]:
        if x.numel() <= MERGE_MAX_ROWS * x.shape[-1]:
            return self.merged(x).split(self.widths, dim=-1)
        return tuple(part(x) for part in self.parts.values())


def silu_mul(a: Any, b: Any) -> Any:
    """``silu(a) * b``: one kernel on the GPU where it takes the tensors (``autotune.serve.elementwise``), else
    torch's two ops. Above ``MERGE_MAX_ROWS`` rows only its 16-byte-pack form runs: its element-a-step form was
    slower than torch's vectorized pair at 2048 x 14336 (Llama prefill 0.95x on the H200). The rewritten graph calls
    this for ``F.silu(a) * b`` (a SwiGLU MLP's gate)."""
    global _epilogue_broken
    if a.is_cuda and not _epilogue_broken and not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
        rows = a.numel() // max(1, a.shape[-1]) if a.dim() else 1
        try:
            out = elementwise.silu_mul(a, b, packed_only=rows > MERGE_MAX_ROWS)
            if out is not None:
                return out
        except Exception as exc:  # noqa: BLE001 - torch's ops compute the same: use them from now on
            log.warning("autotune.torch: the silu_mul kernel failed, torch's ops run it: %s", exc)
            _epilogue_broken = True
    return nn.functional.silu(a) * b


def fold_batchnorm(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> FusedConv2d:
    """``conv`` followed by ``bn`` (eval mode, running statistics) as one convolution with a bias."""
    with torch.no_grad():
        w = conv.weight.detach().double()
        b = conv.bias.detach().double() if conv.bias is not None else torch.zeros(w.shape[0], dtype=w.dtype,
                                                                                  device=w.device)  # fmt: skip
        scale = torch.rsqrt(bn.running_var.double() + bn.eps)
        if bn.weight is not None:
            scale = scale * bn.weight.detach().double()
        shift = -bn.running_mean.double() * scale + (bn.bias.detach().double() if bn.bias is not None else 0.0)
        weight = (w * scale.view(-1, 1, 1, 1)).to(conv.weight.dtype)
        nhwc = AutotuneBackend.layout_of(conv.weight) == "NHWC"
        weight = weight.contiguous(memory_format=torch.channels_last if nhwc else torch.contiguous_format)
        bias = (b * scale + shift).to(conv.weight.dtype)
    return FusedConv2d.like(conv, weight, bias)
