"""A compile function that sabotages two named kernels: one faults (illegal address), one hangs.

It lives in its own module so a process pool could pickle it; the GPU tier injects it into a real run.
"""

from __future__ import annotations

from autotune.build.compiler import CompileResult, compile_source

FAULTING = "gemm_naive_bx8_by8"
HANGING = "gemm_naive_bx16_by4"

_STORE = "float* c = C + (size_t)row * N + col;"


def sabotaging_compile(source: str, kernel_name: str, arch: str) -> CompileResult:
    if kernel_name == FAULTING:
        assert _STORE in source
        source = source.replace(_STORE, "float* c = C + (size_t)row * N + col + (1ull << 40);")
    elif kernel_name == HANGING:
        assert _STORE in source
        # A volatile global load each turn: the compiler cannot drop the loop (inputs are never NaN).
        spin = "while (((volatile const float*)A)[0] == ((volatile const float*)A)[0]) {} "
        source = source.replace(_STORE, spin + _STORE)
    return compile_source(source, kernel_name, arch)
