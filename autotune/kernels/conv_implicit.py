"""Implicit-GEMM convolution: the conv2d templates ``implicit_simt`` and ``implicit_wmma``.

The convolution is computed as a GEMM whose A operand is never stored: the im2col gather happens inside the
tile loads.

    M = N*P*Q output pixels (rows),  N_gemm = K output channels (columns),  K_gemm = C*R*S (reduction)
    A[m, kk] = x[n, c, p*stride + r - pad, q*stride + s - pad]   (zero outside the image and past K_gemm)
    B[kk, k] = w[k, kk]: the filter is already a K x K_gemm matrix in both layouts, because the reduction
               index follows the filter's stored order: kk = (c*R + r)*S + s in NCHW, (r*S + s)*C + c in NHWC

In NHWC the channels are contiguous, so when C is a multiple of the vector width a vector of the reduction
is one vector load of x (compile-time variant ALIGN_A, like the GEMM templates' ALIGN_A); B is vectorised
when K_gemm is (ALIGN_B). Odd C and K_gemm take predicated scalar loads. Each thread decomposes its output
rows m -> (n, p, q) once, before the reduction loop, and advances its (c, r, s) reduction coordinates by the
tile depth with carries: no integer division inside the loop.

- implicit_simt: fp32 or fp16 storage, fp32 math; block tile BM x BN x BK, TM x TN register tile per thread,
  double-buffered shared memory (the next tile's loads in flight during this tile's math), PAD floats per row.
- implicit_wmma: fp16 tensor cores (m16n16k16, fp32 accumulation); WARPS_M x WARPS_N warps, FRAGS_M x FRAGS_N
  fragments each; STAGES-deep cp.async pipeline whose copies zero-fill padding and tails (src-size 0) when
  C % 8 == 0 (NHWC), register gathers otherwise (odd C, and every NCHW input); the epilogue goes through
  shared memory so stores are coalesced.

The templates are conv_implicit_simt.py and conv_implicit_wmma.py; this module holds what they share with
implicit_mma (conv_implicit_mma.py): the GEMM view, the launch geometry and the problem checks. Every reason of
check() is mirrored by a static_assert in templates/conv/<template>.cu.j2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.limits import DeviceLimits
from .base import Launch

MAX_INDEX = 2**31 - 1  # 32-bit m and reduction indices in the kernels (addresses are 64-bit)


@dataclass(frozen=True)
class Shape:
    """The GEMM view of a convolution: M output pixels by K output channels (for launch geometry)."""

    M: int
    K: int


def gemm_view(problem: Any) -> tuple[int, int, int]:
    """(M, N_gemm, K_gemm) = (N*P*Q, K, C*R*S)."""
    p = problem
    return p.N * p.P * p.Q, p.K, p.C * p.R * p.S


def pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


def launch_geometry(bm: int, bn: int, threads: int, shared: int, problem: Any) -> Launch:
    m = problem.M if isinstance(problem, Shape) else gemm_view(problem)[0]
    return Launch((-(-m // bm), -(-problem.K // bn), 1), (threads, 1, 1), shared)


def check_gemm_view(name: str, dtypes: tuple[str, ...], layouts: tuple[str, ...], bm: int, bn: int,
                   problem: Any, limits: DeviceLimits) -> str | None:  # fmt: skip
    if problem.dtype not in dtypes:
        return f"{name} computes {', '.join(dtypes)}, not {problem.dtype}"
    if problem.layout not in layouts:
        return f"{name} computes layouts {', '.join(layouts)}, not {problem.layout}"
    m, _, kg = gemm_view(problem)
    if m > MAX_INDEX or kg > MAX_INDEX or problem.K * kg > MAX_INDEX:
        return f"N*P*Q = {m}, C*R*S = {kg} or the filter's K*C*R*S elements exceed 32-bit indices"
    if problem.C * problem.H * problem.W > MAX_INDEX:
        return "an image of more than 2**31 - 1 elements (C*H*W) exceeds 32-bit offsets"
    gx, gy, _ = launch_geometry(bm, bn, 32, 0, problem).grid
    if gx > limits.max_grid_x:
        return f"needs {gx} pixel blocks, more than grid.x allows; use a larger block tile"
    if gy > limits.max_grid_y:
        return f"needs {gy} channel blocks, more than the {limits.max_grid_y} grid.y allows; use a larger block tile"
    return None
