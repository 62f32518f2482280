"""The array-level API: ``gemm`` and ``conv2d`` on CuPy arrays or GPU tensors, served by ``runtime.load``'s
launchers.

Each call turns its operands into the views the kernels read (copies only where needed), memoizes the
launcher per call signature (shapes, strides, dtypes, environment), and launches on the caller's stream:
CuPy's current stream for CuPy arrays, torch's current stream for torch tensors (``autotune.measure.streams``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..measure.streams import is_torch
from .runtime import _by_call, _env, _hot, load

_GEMM_DTYPES = ("float32", "float16")  # CuPy dtypes gemm() takes; bfloat16 arrives as torch tensors
_BY_CHAR = {"f": "float32", "e": "float16"}  # dtype.char -> name: the per-call path avoids dtype.name and str()


@functools.cache
def _torch_path() -> Any:
    """autotune.serve.torch_calls, imported on the first call with a torch tensor (it imports this module)."""
    from . import torch_calls

    return torch_calls


def _as_cupy(x: Any, name: str) -> tuple[Any, str, str]:
    """(CuPy view, where it came from, gemm dtype). bfloat16 torch tensors become uint16 views of their bits."""
    import cupy as cp

    if type(x) is cp.ndarray and x.dtype.char in _BY_CHAR:  # the common case, first and cheap
        return x, "cupy", _BY_CHAR[x.dtype.char]
    kind = "cupy" if isinstance(x, cp.ndarray) else type(x).__module__.split(".")[0]
    if kind == "numpy":
        raise TypeError(f"{name} is a NumPy array in host memory; pass a CuPy array (cupy.asarray) or a GPU tensor")
    if kind == "torch":
        if not getattr(x, "is_cuda", False):
            raise TypeError(f"{name} is a torch tensor on {getattr(x, 'device', 'the host')}; move it to the GPU first")
        x = x.detach()  # a tensor that requires grad refuses __cuda_array_interface__; the data is the same
    if kind == "torch" and str(getattr(x, "dtype", "")) == "torch.bfloat16":
        import torch

        return cp.asarray(x.view(torch.int16)).view(cp.uint16), kind, "bfloat16"  # CAI: no stream sync
    if isinstance(x, cp.ndarray):
        arr = x
    elif hasattr(x, "__cuda_array_interface__"):
        arr = cp.asarray(x)
    elif hasattr(x, "__dlpack__"):
        arr = cp.from_dlpack(x)
    else:
        raise TypeError(f"{name} must be a CuPy array or a GPU array with __cuda_array_interface__ or __dlpack__")
    if arr.dtype.name not in _GEMM_DTYPES:
        raise TypeError(f"{name} is {arr.dtype}; gemm takes float32, float16 or (torch) bfloat16")
    return arr, kind, arr.dtype.name


def _stored(x: Any, transposable: bool) -> tuple[Any, str]:
    """The operand as the kernels read it: row-major ("N"), or its transpose row-major ("T", no copy).

    The kernels load 16 bytes at a time from row starts: other views (strided, or starting off a 16-byte
    boundary) are copied first.
    """
    rows, cols = x.shape
    size, strides = x.itemsize, x.strides
    aligned = x.data.ptr % 16 == 0
    # strides first (cheap); flags (built per access) only for the degenerate cases strides cannot tell
    if aligned and (strides == (cols * size, size) or x.flags.c_contiguous):
        return x, "N"
    if transposable and aligned and (strides == (size, rows * size) or x.flags.f_contiguous):
        return x.T, "T"
    return x.copy(order="C"), "N"


def gemm(a: Any, b: Any, out: Any = None, alpha: float = 1.0, beta: float = 0.0, *, precision: str | None = None,
         tuned_dir: str | Path | None = None) -> Any:  # fmt: skip
    """``out = alpha * a @ b + beta * out`` with the tuned kernel for this GPU, dtype, layout and shape.

    Takes CuPy arrays, or any GPU array with ``__cuda_array_interface__`` or ``__dlpack__`` (PyTorch
    tensors, bfloat16 included); returns the same kind as ``a``. float32, float16 and bfloat16 operands
    compute in that type with fp32 accumulation; ``precision="tf32"`` runs float32 operands on tensor cores
    with tf32 inputs (faster, lower precision). Transposed views (``x.T`` of a row-major array) are read in
    place by the 16-bit and tf32 kernels; other non-contiguous operands are copied first.
    """
    if is_torch(a) or is_torch(b):  # on torch's current stream, temporaries from torch's allocator
        return _torch_path().gemm_torch(_gemm, a, b, out, alpha, beta, precision, tuned_dir)
    import cupy as cp

    # Hot path: CuPy operands and out exactly as in an earlier call (shapes, strides, dtypes) and aligned.
    nd = cp.ndarray
    if precision is None and type(a) is nd and type(b) is nd and type(out) is nd:
        sig = (a.shape, b.shape, out.shape, a.strides, b.strides, out.strides, a.dtype.char, b.dtype.char,
               out.dtype.char, tuned_dir, _env(), cp.cuda.runtime.getDevice())  # fmt: skip
        hot = _hot.get(sig)
        if hot is not None and not (a.data.ptr | b.data.ptr | out.data.ptr) & 15:
            launcher, ta, tb = hot
            launcher(a.T if ta else a, b.T if tb else b, out, alpha, beta)
            return out
    else:
        sig = None
    return _gemm(a, b, out, alpha, beta, precision, tuned_dir, sig)


def _gemm(a: Any, b: Any, out: Any, alpha: float, beta: float, precision: str | None, tuned_dir: str | Path | None,
          sig: tuple | None = None, torch_args: tuple[Any, Any, Any] | None = None,
          seen: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """gemm() past its hot path. ``torch_args``: the logical torch operands and out, for the vendor's torch path;
    ``seen``: filled with the launcher and whether the operands and out were read in place (no copy)."""
    import cupy as cp

    a_cp, kind, adt = _as_cupy(a, "a")
    b_cp, _, bdt = _as_cupy(b, "b")
    if a_cp.ndim != 2 or b_cp.ndim != 2 or a_cp.shape[1] != b_cp.shape[0]:
        raise ValueError(f"gemm needs a[M, K] and b[K, N]; got {a_cp.shape} and {b_cp.shape}")
    if adt != bdt:
        raise TypeError(f"a and b must have the same dtype; got {adt} and {bdt}")
    dtype = _computed(adt, precision)
    m, k = a_cp.shape
    n = b_cp.shape[1]
    storage = a_cp.dtype
    if out is None:
        if beta != 0:
            raise ValueError("beta != 0 needs an out array to accumulate into")
        out_cp = cp.empty((m, n), dtype=storage)
    else:
        out_cp, _, odt = _as_cupy(out, "out")
        if (
            out_cp.shape != (m, n)
            or odt != adt
            or not (out_cp.strides == (n * out_cp.itemsize, out_cp.itemsize) or out_cp.flags.c_contiguous)
        ):
            raise ValueError(f"out must be a C-contiguous {adt} array of shape {(m, n)}")
    transposable = dtype != "float32"  # the fp32 SIMT kernels read row-major operands only
    given = a_cp, b_cp
    a_cp, la = _stored(a_cp, transposable)
    b_cp, lb = _stored(b_cp, transposable)
    layout = la + lb
    target = None
    if out_cp.data.ptr % 16:
        target, out_cp = out_cp, out_cp.copy()
    if m == 0 or n == 0:
        return out if out is not None else _like(out_cp, kind, dtype)
    if k == 0:
        _empty_sum(out_cp, beta, dtype)
    else:
        launcher = _gemm_launcher(m, n, k, dtype, layout, tuned_dir)
        if launcher.vendor and torch_args is not None:
            launcher.torch_gemm(*torch_args, alpha, beta)  # type: ignore[attr-defined]
        else:
            launcher(a_cp, b_cp, out_cp, alpha, beta)
        stored_as_given = (a_cp is a or la == "T") and (b_cp is b or lb == "T") and out_cp is out
        if seen is not None:
            in_place = (a_cp is given[0] or la == "T") and (b_cp is given[1] or lb == "T") and target is None
            seen.update(launcher=launcher, in_place=in_place)
        if sig is not None and target is None and stored_as_given and not launcher.provisional:
            _hot[sig] = (launcher, la == "T", lb == "T")
    if target is not None:
        target[...] = out_cp
    if out is not None:
        return out
    return _like(out_cp, kind, dtype)


def _gemm_launcher(m: int, n: int, k: int, dtype: str, layout: str, tuned_dir: str | Path | None) -> Any:
    """``load``'s launcher for the GEMM, memoized per call signature (skips building a problem per call)."""
    import cupy as cp

    fast = (m, n, k, dtype, layout, tuned_dir, _env(), cp.cuda.runtime.getDevice())
    launcher = _by_call.get(fast)
    if launcher is None:
        launcher = load("gemm", M=m, N=n, K=k, dtype=dtype, layout=layout, tuned_dir=tuned_dir)
        if not launcher.provisional:
            _by_call[fast] = launcher
    return launcher


def _computed(dtype: str, precision: str | None) -> str:
    """The dtype a GEMM computes in: the operands', or tfloat32 for float32 operands with precision="tf32"."""
    if precision == "tf32":
        if dtype != "float32":
            raise ValueError(f"precision='tf32' applies to float32 operands, not {dtype}")
        return "tfloat32"
    if precision is not None:
        raise ValueError(f"precision must be None or 'tf32', got {precision!r}")
    return dtype


def _empty_sum(out: Any, beta: float, dtype: str) -> None:
    """K = 0: an empty sum, so only the beta term is left."""
    if beta == 0:
        out.fill(0)
    elif dtype == "bfloat16":
        from ..kernels.gemm import bf16_bits, decode

        out[...] = bf16_bits(decode(out, dtype) * beta)
    else:
        out *= beta


def _like(x: Any, kind: str, dtype: str = "float32") -> Any:
    if kind == "torch":
        import torch

        t = torch.from_dlpack(x)
        return t.view(torch.bfloat16) if dtype == "bfloat16" else t
    return x


def conv2d(x: Any, w: Any, stride: int = 1, padding: int = 0, layout: str = "NCHW", out: Any = None, *,
           tuned_dir: str | Path | None = None) -> Any:  # fmt: skip
    """2-D convolution (cross-correlation, as ``torch.nn.functional.conv2d``) with the tuned kernel for this
    GPU, dtype, layout and shape; groups 1, dilation 1.

    ``layout="NCHW"``: x[N, C, H, W], w[K, C, R, S] -> out[N, K, P, Q]; ``"NHWC"``: x[N, H, W, C],
    w[K, R, S, C] -> out[N, P, Q, K]. Takes CuPy arrays or GPU arrays with ``__cuda_array_interface__`` /
    ``__dlpack__`` (PyTorch tensors; a channels-last tensor is NHWC data: pass ``layout="NHWC"`` with it
    permuted to N, H, W, C). Operands that are not C-contiguous are copied first.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    for name, v, low in (("stride", stride, 1), ("padding", padding, 0)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"{name} must be an integer >= {low} (the same for both dimensions), got {v!r}")
    if is_torch(x) or is_torch(w):  # on torch's current stream, temporaries from torch's allocator
        return _torch_path().conv_torch(_conv2d, x, w, stride, padding, layout, out, tuned_dir)
    return _conv2d(x, w, stride, padding, layout, out, tuned_dir)


def _conv2d(x: Any, w: Any, stride: int, padding: int, layout: str, out: Any, tuned_dir: str | Path | None,
            torch_args: tuple[Any, Any] | None = None, seen: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """conv2d() past its argument checks. ``torch_args``: x and w as torch tensors (C-contiguous, aligned), for
    the vendor's torch path and for an output allocated by torch; ``seen``: filled with the launcher, the output
    shape and whether x, w and out were read in place (no copy)."""
    import cupy as cp

    x_cp, kind, xdt = _as_cupy(x, "x")
    w_cp, _, wdt = _as_cupy(w, "w")
    if x_cp.ndim != 4 or w_cp.ndim != 4:
        raise ValueError(f"conv2d needs 4-D x and w; got {x_cp.shape} and {w_cp.shape}")
    if xdt != wdt:
        raise TypeError(f"x and w must have the same dtype; got {xdt} and {wdt}")
    if layout == "NCHW":
        (n, c, h, wd), (k, c2, r, s) = x_cp.shape, w_cp.shape
    else:
        (n, h, wd, c), (k, r, s, c2) = x_cp.shape, w_cp.shape
    if c != c2:
        raise ValueError(f"x has {c} channels but w expects {c2} ({layout})")
    p, q = (h + 2 * padding - r) // stride + 1, (wd + 2 * padding - s) // stride + 1
    if min(n, c, k) < 1 or p < 1 or q < 1:
        raise ValueError(f"no output: x {x_cp.shape} and w {w_cp.shape} with stride {stride}, padding {padding}")
    out_shape = (n, k, p, q) if layout == "NCHW" else (n, p, q, k)
    if out is not None:
        out_cp, _, odt = _as_cupy(out, "out")
        if out_cp.shape != out_shape or odt != xdt or not out_cp.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous {xdt} array of shape {out_shape}")
    launcher = _conv_launcher((n, c, h, wd, k, r, s, stride, padding), xdt, layout, tuned_dir)
    if seen is not None:
        seen.update(launcher=launcher, out_shape=out_shape, in_place=True)
    if launcher.vendor and torch_args is not None:
        y = launcher.torch_conv(*torch_args)  # type: ignore[attr-defined]
        return y if out is None else out.copy_(y)
    given = x_cp.data.ptr, w_cp.data.ptr
    x_cp, _ = _stored(x_cp.reshape(x_cp.shape[0], -1), False)
    w_cp, _ = _stored(w_cp.reshape(w_cp.shape[0], -1), False)
    if out is None and torch_args is not None:
        import torch

        out = torch.empty(out_shape, dtype=torch_args[0].dtype, device=torch_args[0].device)
        out_cp = _as_cupy(out, "out")[0]
    elif out is None:
        out_cp = cp.empty(out_shape, dtype=x_cp.dtype)
    target = None
    if out_cp.data.ptr % 16:
        target, out_cp = out_cp, out_cp.copy()
    launcher(x_cp, w_cp, out_cp)
    if seen is not None:
        seen["in_place"] = (x_cp.data.ptr, w_cp.data.ptr) == given and target is None
    if target is not None:
        target[...] = out_cp
    if out is not None:
        return out
    return _like(out_cp, kind, xdt)


def _conv_launcher(dims: tuple[int, ...], dtype: str, layout: str, tuned_dir: str | Path | None) -> Any:
    """``load``'s launcher for the convolution (N, C, H, W, K, R, S, stride, pad), memoized per call signature."""
    import cupy as cp

    key = ("conv2d", *dims, dtype, layout, tuned_dir, _env(), cp.cuda.runtime.getDevice())
    launcher = _by_call.get(key)
    if launcher is None:
        sizes = dict(zip(("N", "C", "H", "W", "K", "R", "S", "stride", "pad"), dims, strict=True))
        launcher = load("conv2d", dtype=dtype, layout=layout, tuned_dir=tuned_dir, **sizes)
        if not launcher.provisional:
            _by_call[key] = launcher
    return launcher
