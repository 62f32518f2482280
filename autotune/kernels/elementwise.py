"""Elementwise kernels that the torch drop-in's graph rewrites launch (``autotune.serve.elementwise``), one pass
where torch would run two or three kernels:

- ``EPILOGUE`` (templates/conv/epilogue.cu.j2): after one of our convolutions, or cuDNN's without its bias, in
  place on the output: ``y = relu(y + bias[k] + z)``, each term optional, NCHW or NHWC;
- ``SILU_MUL`` (templates/gemm/silu_mul.cu.j2): ``silu(a) * b`` into a new dense output, a and b rows of a
  matrix each with its own row stride (the column slices of a merged Linear's output), as in a SwiGLU MLP; in
  16-byte packs (``vector``) where the columns, the row strides and the addresses allow, else an element a step.

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
SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}
PACK_BYTES = 16  # one vector load or store


@dataclass(frozen=True)
class Elementwise:
    template: str
    kernel_name: str
    dtypes: tuple[str, ...]

    def context(self, dtype: str, vector: bool = False) -> dict[str, object]:
        """The render context for ``dtype`` (one of ``dtypes``); ``vector``: 16-byte packs (SILU_MUL)."""
        if dtype not in self.dtypes:
            raise ValueError(f"{self.kernel_name} computes {' or '.join(self.dtypes)}, not {dtype}")
        return {"DTYPE": dtype, "T": C_TYPES[dtype], "THREADS": THREADS, "VEC": vec(dtype) if vector else 1}


def vec(dtype: str) -> int:
    """Elements in one 16-byte pack of ``dtype``."""
    return PACK_BYTES // SIZES[dtype]


def packs(dtype: str, cols: int, strides: tuple[int, ...], addresses: tuple[int, ...]) -> bool:
    """Whether rows of ``cols`` elements, ``strides`` elements apart, at ``addresses`` can be read in 16-byte packs.

    >>> packs("float16", 14336, (28672, 28672), (0x7F0000000000, 0x7F0000007000))
    True
    >>> packs("float16", 14337, (14337,), (0,)), packs("float32", 64, (64,), (8,))
    (False, False)
    """
    v = vec(dtype)
    return cols % v == 0 and all(s % v == 0 for s in strides) and all(p % PACK_BYTES == 0 for p in addresses)


EPILOGUE = Elementwise("conv/epilogue.cu.j2", "conv_epilogue", ("float32", "float16"))
SILU_MUL = Elementwise("gemm/silu_mul.cu.j2", "silu_mul", ("float32", "float16", "bfloat16"))
KERNELS = (EPILOGUE, SILU_MUL)


def grid(rows: int, cols: int, multiprocessors: int, limits: DeviceLimits = SM90) -> tuple[int, int, int]:
    """Blocks for a rows x cols pass: x over columns (``THREADS`` a block), y over rows, about ``WAVES`` blocks an
    SM in all (each strides over what is left)."""
    most = WAVES * max(1, multiprocessors)
    x = max(1, min(-(-cols // THREADS), most))
    return (x, max(1, min(rows, most // x, limits.max_grid_y)), 1)
