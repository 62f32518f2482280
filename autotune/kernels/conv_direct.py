"""The direct conv2d template (templates/conv/direct.cu.j2): fp32 or fp16, NCHW or NHWC, any filter.

A block computes a TP x TQ x KB output tile; a thread owns QT outputs along Q (strided by TQ/QT, so
neighbouring threads read neighbouring columns) and KT output channels. Each step stages CB input channels: the
input halo and the filter, both as float in shared memory. Filter size, stride and padding are kernel arguments,
not template constants: one source serves every shape of a dtype and layout, and only the shared-memory size
(computed here, guarded in the kernel) depends on the shape.

Example::

    >>> from autotune.kernels.conv import CONV
    >>> p = CONV.problem("n1c64h56w56k64r3s3u1p1", "float32")
    >>> TEMPLATE.launch(dict(TP=8, TQ=16, KB=64, QT=4, KT=8, CB=8, PAD=1), p, "").grid
    (28, 1, 1)
"""

from __future__ import annotations

from typing import Any

from ..core.limits import DeviceLimits
from .base import Launch, Params
from .conv_problem import LAYOUTS, ConvTemplate, variant

PARAMS = ("TP", "TQ", "KB", "QT", "KT", "CB", "PAD")
MAX_ACCUMULATORS = 64  # QT * KT floats per thread
FILTER_PAD = 4  # floats after each KB-wide filter row: keeps 16-byte rows, shifts banks between rows


class DirectTemplate(ConvTemplate):
    name = "direct"
    params = PARAMS
    dtypes = ("float32", "float16")
    kinds = (("PAD", "int>=0"),)
    description = (
        "direct convolution: TP x TQ x KB output tile per block, input halo and filter staged in shared memory"
    )

    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        """Thread layout of a configuration; with a problem also its halo tile and shared memory."""
        p = params
        tqg, kg = p["TQ"] // p["QT"], p["KB"] // p["KT"]
        d = {"TQG": tqg, "KG": kg, "THREADS": p["TP"] * tqg * kg, "KBS": p["KB"] + FILTER_PAD}
        if problem is not None:
            ht = (p["TP"] - 1) * problem.stride + problem.R  # input rows of TP output rows
            wt = (p["TQ"] - 1) * problem.stride + problem.S
            ws = wt + p["PAD"]
            floats = p["CB"] * problem.R * problem.S * d["KBS"] + p["CB"] * ht * ws
            d.update(HT=ht, WT=wt, WS=ws, SHARED_BYTES=4 * floats)
        return d

    def context(self, params: Params, problem: Any) -> dict[str, Any]:
        """The derived values that do not depend on the shape (shared memory does), and the variant."""
        return {**self.derived(params), **variant(problem.dtype, problem.layout)}

    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        p = params
        if p["TQ"] % p["QT"]:
            return "QT must divide TQ"
        if p["KB"] % p["KT"]:
            return "KT must divide KB"
        threads = self.derived(p)["THREADS"]
        if threads % 32 or threads > limits.threads_per_block:
            return f"TP*(TQ/QT)*(KB/KT) threads must be a whole number of warps, at most {limits.threads_per_block}"
        if p["QT"] * p["KT"] > MAX_ACCUMULATORS:
            return f"at most {MAX_ACCUMULATORS} accumulators per thread (QT*KT)"
        return None

    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        if problem.dtype not in self.dtypes:
            return f"direct computes {', '.join(self.dtypes)}, not {problem.dtype}"
        if problem.layout not in LAYOUTS:
            return f"direct computes layouts {', '.join(LAYOUTS)}, not {problem.layout}"
        smem, most = self.derived(params, problem)["SHARED_BYTES"], limits.max_shared_per_block
        if smem > most:
            return (
                f"needs {smem} bytes of shared memory for a {problem.R}x{problem.S} stride-{problem.stride} filter, "
                f"more than {most}; use a smaller CB, KB or TP x TQ"
            )
        gx, gy, gz = self.launch(params, problem, "").grid
        if gx > limits.max_grid_x:
            return f"needs {gx} spatial tiles, more than grid.x allows; use a larger TP x TQ"
        if gy > limits.max_grid_y:
            return f"needs {gy} channel blocks, more than the {limits.max_grid_y} grid.y allows; use a larger KB"
        if gz > limits.max_grid_z:
            return f"batch N = {gz} is more than the {limits.max_grid_z} grid.z allows"
        return None

    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        """grid (spatial tiles, channel blocks, images), one thread per (TQ/QT, TP, KB/KT) slot."""
        d = self.derived(params, problem)
        tiles = -(-problem.P // params["TP"]) * -(-problem.Q // params["TQ"])
        grid = (tiles, -(-problem.K // params["KB"]), problem.N)
        return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])

    def c_abi(self) -> str:
        return "direct: the conv2d arguments above."


TEMPLATE = DirectTemplate()
