"""Elementwise kernels that the torch drop-in's graph rewrites launch (``autotune.serve.elementwise``), one pass
where torch would run two or three kernels:

- ``EPILOGUE`` (templates/conv/epilogue.cu.j2): after one of our convolutions, or cuDNN's without its bias, in
  place on the output: ``y = relu(y + bias[k] + z)``, each term optional, NCHW or NHWC;
- ``SILU_MUL`` (templates/gemm/silu_mul.cu.j2): ``silu(a) * b`` into a new dense output, a and b rows of a
  matrix each with its own row stride (the column slices of a merged Linear's output), as in a SwiGLU MLP.

Each computes in fp32 and rounds once. Example::

    >>> grid(2 * 64, 56 * 56, multiprocessors=132)  # an NCHW output of 2 x 64 x 56 x 56
    (13, 81, 1)
    >>> EPILOGUE.context("float16")["T"]
    '__half'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.limits import SM90, DeviceLimits

THREADS = 256
WAVES = 8  # blocks an SM gets: grid-stride loops, enough blocks to cover the SMs several times, no more
C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}


@dataclass(frozen=True)
class Elementwise:
    template: str
    kernel_name: str
    dtypes: tuple[str, ...]

    def context(self, dtype: str) -> dict[str, object]:
        """The render context for ``dtype`` (one of ``dtypes``)."""
        if dtype not in self.dtypes:
            raise ValueError(f"{self.kernel_name} computes {' or '.join(self.dtypes)}, not {dtype}")
        return {"DTYPE": dtype, "T": C_TYPES[dtype], "THREADS": THREADS}


EPILOGUE = Elementwise("conv/epilogue.cu.j2", "conv_epilogue", ("float32", "float16"))
SILU_MUL = Elementwise("gemm/silu_mul.cu.j2", "silu_mul", ("float32", "float16", "bfloat16"))
KERNELS = (EPILOGUE, SILU_MUL)


def grid(rows: int, cols: int, multiprocessors: int, limits: DeviceLimits = SM90) -> tuple[int, int, int]:
    """Blocks for a rows x cols pass: x over columns (``THREADS`` a block), y over rows, about ``WAVES`` blocks an
    SM in all (each strides over what is left)."""
    most = WAVES * max(1, multiprocessors)
    x = max(1, min(-(-cols // THREADS), most))
    return (x, max(1, min(rows, most // x, limits.max_grid_y)), 1)
