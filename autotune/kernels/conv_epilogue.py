"""The epilogue of a fused convolution (templates/conv/epilogue.cu.j2): after one of our convolutions, or cuDNN's
without its bias, one pass in place over the output adds the bias per output channel and a residual of the
output's shape and layout, then applies a ReLU, each optional; the torch drop-in's ``FusedConv2d`` launches it
(``autotune.serve.epilogue``) where torch would run up to three elementwise kernels.

Example::

    >>> grid(2 * 64 * 56 * 56, multiprocessors=132)
    (1056, 1, 1)
"""

from __future__ import annotations

TEMPLATE = "conv/epilogue.cu.j2"
KERNEL_NAME = "conv_epilogue"
DTYPES = ("float32", "float16")
THREADS = 256
BLOCKS_PER_SM = 8  # a grid-stride loop: enough blocks to cover the SMs several times, no more


def context(dtype: str) -> dict[str, object]:
    """The render context of the epilogue for ``dtype`` (one of ``DTYPES``)."""
    if dtype not in DTYPES:
        raise ValueError(f"the convolution epilogue computes {' or '.join(DTYPES)}, not {dtype}")
    return {"DTYPE": dtype, "THREADS": THREADS}


def grid(total: int, multiprocessors: int) -> tuple[int, int, int]:
    """Blocks for ``total`` output elements: one element a thread up to ``BLOCKS_PER_SM`` blocks an SM."""
    return (max(1, min(-(-total // THREADS), BLOCKS_PER_SM * max(1, multiprocessors))), 1, 1)
