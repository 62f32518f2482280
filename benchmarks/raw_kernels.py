"""Compiling a probe's own CUDA source (not a template) with #defines prepended, for the probes that time
hand-written kernels: probe_copy_pipeline.py, probe_tma_stream.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.bench import L2Flusher, TimingPlan, time_launches
from autotune.compiler import compile_source


def build(source: str, kernel: str, arch: str, defines: dict[str, int]) -> Any:
    """A loaded CuPy module of ``source`` with ``#define k v`` for each of ``defines``; exits with the compiler's
    message if it does not compile."""
    import cupy as cp

    src = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + source
    r = compile_source(src, kernel, arch)
    if not r.ok:
        raise SystemExit(f"compile failed for {defines}: {r.error}")
    module = cp.cuda.function.Module()
    module.load(r.cubin)
    return module


def time_if_right(got: float, expect: float, scale: float, launch: Callable[[], Any], flush: L2Flusher,
                  plan: TimingPlan) -> dict[str, Any]:  # fmt: skip
    """{"us": median microseconds of ``launch`` (L2 flushed before each)} when the kernel's check sum ``got`` is
    ``expect`` within 1e-5 of ``scale`` (the sum of magnitudes); else {"us": nan, "wrong": why}, untimed."""
    if not abs(got - expect) <= 1e-5 * scale:
        return {"us": float("nan"), "wrong": f"sum {got} against {expect}"}
    return {"us": time_launches(launch, flush, plan).median_ms * 1e3}
