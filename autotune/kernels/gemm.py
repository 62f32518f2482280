"""GEMM, C[M, N] = alpha * A[M, K] @ B[K, N] + beta * C[M, N], row-major.

Derived quantities (threads, warp iterations, shared memory) are computed here and only here; the
templates receive them in their render context and mirror each check with a ``static_assert``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import Launch, Params, TemplateInfo

ITEMSIZE = {"float32": 4}
MAX_THREADS = 1024
MAX_DIM = 2**31 - 1 - 4096  # kernels index with int; keep k0 + tile offsets from wrapping
MAX_GRID_Y = 65535
MAX_ACCUMULATORS = 128  # per thread; above this the register file spills on every architecture we target


@dataclass(frozen=True)
class GemmProblem:
    M: int
    N: int
    K: int
    dtype: str

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


SIMT_PARAMS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "VEC", "PAD", "DBUF")


class GemmFamily:
    name = "gemm"
    shape_help = "[M, N, K] or 'MxNxK' with positive integers"
    templates = {
        "naive": TemplateInfo("naive", ("BX", "BY"), ("float32",), "one thread per output, no tiling"),
        "simt": TemplateInfo(
            "simt",
            SIMT_PARAMS,
            ("float32",),
            "block, warp and register tiled SIMT",
            kinds=(("PAD", "int>=0"), ("DBUF", "bool")),
        ),  # fmt: skip
    }

    def problem(self, shape: Any, dtype: str) -> GemmProblem:
        if isinstance(shape, str):
            parts = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*", shape)
            dims = tuple(int(p) for p in parts.groups()) if parts else ()
        elif isinstance(shape, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            dims = tuple(shape)
        else:
            dims = ()
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"expected {self.shape_help}, got {shape!r}")
        if max(dims) > MAX_DIM:
            raise ValueError(f"dimensions above {MAX_DIM} are not supported (32-bit indices), got {shape!r}")
        return GemmProblem(*dims, dtype=dtype)

    # --- configuration -> derived values ---------------------------------------------------------

    def derived(self, template: str, params: Params) -> dict[str, Any]:
        p = params
        if template == "naive":
            return {"THREADS": p["BX"] * p["BY"]}
        threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
        per_iter = 32 * p["TM"] * p["TN"] * p["WNITER"]
        wmiter = (p["WM"] * p["WN"]) // per_iter
        stages = 2 if p["DBUF"] else 1
        smem = stages * p["BK"] * (p["BM"] + p["PAD"] + p["BN"] + p["PAD"]) * 4
        return {"THREADS": threads, "WMITER": wmiter, "SHARED_BYTES": smem}

    def check(self, template: str, params: Params) -> str | None:
        """Why this configuration cannot be built, or None. Mirrors the templates' static_asserts."""
        p = params
        if template == "naive":
            if p["BX"] * p["BY"] > MAX_THREADS:
                return f"BX*BY = {p['BX'] * p['BY']} threads exceeds {MAX_THREADS}"
            return None
        if p["BM"] % p["WM"] or p["BN"] % p["WN"]:
            return "warp tile WMxWN must divide block tile BMxBN"
        per_iter = 32 * p["TM"] * p["TN"] * p["WNITER"]
        if (p["WM"] * p["WN"]) % per_iter:
            return "warp tile WM*WN must be a multiple of 32*TM*TN*WNITER"
        d = self.derived(template, p)
        wmiter, threads = d["WMITER"], d["THREADS"]
        if p["WM"] % wmiter or p["WN"] % p["WNITER"]:
            return "warp sub-tiles must divide the warp tile"
        wsubm, wsubn = p["WM"] // wmiter, p["WN"] // p["WNITER"]
        if wsubm % p["TM"] or wsubn % p["TN"] or (wsubm // p["TM"]) * (wsubn // p["TN"]) != 32:
            return "the 32 lanes of a warp must tile a warp sub-tile exactly"
        if threads > MAX_THREADS:
            return f"{threads} threads per block exceeds {MAX_THREADS}"
        if p["BK"] % p["VEC"] or p["BN"] % p["VEC"]:
            return "VEC must divide BK and BN"
        if (p["BM"] * p["BK"] // p["VEC"]) % threads or (p["BK"] * p["BN"] // p["VEC"]) % threads:
            return "tile loads must split evenly over the threads"
        if wmiter * p["TM"] * p["WNITER"] * p["TN"] > MAX_ACCUMULATORS:
            return f"more than {MAX_ACCUMULATORS} accumulators per thread"
        return None

    def default_config(self, dtype: str) -> tuple[str, dict[str, Any]]:
        """The runtime's last resort: a configuration the GPU test tier verifies on odd shapes."""
        return "simt", dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)

    def kernel_name(self, template: str, params: Params) -> str:
        order = self.templates[template].params
        parts = [f"{k.lower()}{int(params[k]) if isinstance(params[k], bool) else params[k]}" for k in order]
        return "_".join([self.name, template, *parts])

    def check_problem(self, template: str, params: Params, problem: GemmProblem) -> str | None:
        """Why this configuration cannot launch for this problem (grid limits), or None."""
        rows = self.launch(template, params, problem).grid[1]
        if rows > MAX_GRID_Y:
            return f"needs {rows} row blocks, more than the {MAX_GRID_Y} a grid allows; use a larger BM"
        return None

    def launch(self, template: str, params: Params, problem: GemmProblem) -> Launch:
        if template == "naive":
            bx, by = params["BX"], params["BY"]
            grid = (-(-problem.N // bx), -(-problem.M // by), 1)
            return Launch(grid, (bx * by, 1, 1), 0)
        d = self.derived(template, params)
        grid = (-(-problem.N // params["BN"]), -(-problem.M // params["BM"]), 1)
        return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])

    # --- GPU side: inputs, reference, vendor baseline ---------------------------------------------

    def make_inputs(self, problem: GemmProblem, seed: int) -> tuple[Any, Any]:
        import cupy as cp

        rng = cp.random.default_rng(seed)
        dt = cp.dtype(problem.dtype)
        a = rng.standard_normal((problem.M, problem.K), dtype=cp.float32).astype(dt, copy=False)
        b = rng.standard_normal((problem.K, problem.N), dtype=cp.float32).astype(dt, copy=False)
        return a, b

    def reference(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> Any:
        import cupy as cp

        a, b = inputs
        return cp.matmul(a.astype(cp.float64), b.astype(cp.float64))

    def new_output(self, problem: GemmProblem) -> Any:
        import cupy as cp

        return cp.empty((problem.M, problem.N), dtype=problem.dtype)

    def kernel_args(
        self, problem: GemmProblem, inputs: tuple[Any, Any], out: Any, alpha: float = 1.0, beta: float = 0.0
    ) -> tuple[Any, ...]:
        import numpy as np

        a, b = inputs
        m, n, k = np.int32(problem.M), np.int32(problem.N), np.int32(problem.K)
        return (a, b, out, m, n, k, np.float32(alpha), np.float32(beta))

    def vendor(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> tuple[str, Callable[[], Any]]:
        import cupy as cp

        a, b = inputs
        out = cp.empty((problem.M, problem.N), dtype=problem.dtype)
        return "cuBLAS", lambda: cp.matmul(a, b, out=out)


GEMM = GemmFamily()
