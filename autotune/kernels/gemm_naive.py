"""The naive GEMM template (templates/gemm/naive.cu.j2): one thread per output, no tiling; fp32, layout NN.

A BX x BY block computes BX columns by BY rows of C; the grid is (ceil(N / BX), ceil(M / BY)). The ladder's
first rung and a correctness baseline, not a search choice ("auto" leaves it out).
"""

from __future__ import annotations

from typing import Any

from ..core.limits import DeviceLimits
from .base import Launch, Params
from .gemm_problem import GemmTemplate


class NaiveTemplate(GemmTemplate):
    name = "naive"
    params = ("BX", "BY")
    dtypes = ("float32",)
    layouts = ("NN",)
    description = "one thread per output, no tiling"
    variant_named = False

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        return {"THREADS": params["BX"] * params["BY"]}

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        threads = params["BX"] * params["BY"]
        if threads > limits.threads_per_block:
            return f"BX*BY = {threads} threads exceeds {limits.threads_per_block}"
        return None

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        if problem.layout != "NN":
            return f"naive computes layout NN only, not {problem.layout}"
        rows = self.launch(params, problem, "").grid[1]
        if rows > limits.max_grid_y:
            return f"needs {rows} row blocks, more than the {limits.max_grid_y} a grid allows; use a larger BM"
        return None

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        bx, by = params["BX"], params["BY"]
        grid = (-(-problem.N // bx), -(-problem.M // by), 1)
        return Launch(grid, (bx * by, 1, 1), 0)

    def c_abi(self) -> str:
        return "naive: (const float* A, const float* B, float* C, int M, int N, int K, float alpha, float beta)."


TEMPLATE = NaiveTemplate()
