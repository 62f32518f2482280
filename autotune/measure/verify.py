"""Correctness before speed: fresh random inputs, a poisoned output, a float64 reference."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Relative Frobenius error ||out - ref|| / ||ref|| allowed per dtype (fp32 accumulation over K up to
# ~10^5 stays well under this; see GPU.md's measuring notes).
# 16-bit outputs are rounded once (fp16 2^-11, bf16 2^-8 relative); tf32 rounds the inputs to 10-bit
# mantissas, a lower-precision result by design.
DEFAULT_TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.5e-2, "tfloat32": 5e-3}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    error: float
    reason: str | None = None


def tolerance_for(dtype: str, override: float | None = None) -> float:
    return override if override is not None else DEFAULT_TOLERANCE[dtype]


def poison(out: Any) -> None:
    """Fill the output with NaN so an element the kernel never writes cannot pass."""
    if out.dtype.kind == "u":  # bfloat16 bits: a quiet NaN
        out.fill(0x7FC0)
    else:
        out.fill(float("nan"))


def compare(out: Any, ref: Any, tolerance: float) -> Verdict:
    """Compare on the device; NaN or Inf anywhere fails, whatever the norm says.

    The sums of squares are cuBLAS dot products: CuPy's reduction kernels would be compiled on first use,
    seconds before the first candidate of a run on a machine with an empty CuPy cache.
    """
    import cupy as cp

    diff = (out.astype(cp.float64) - ref).ravel()
    squares = float(cp.vdot(diff, diff))  # NaN or Inf if any output is
    if not math.isfinite(squares):
        bad = int((~cp.isfinite(out)).sum()) if out.dtype.kind == "f" else 0
        if bad:
            return Verdict(False, float("nan"), f"{bad} of {out.size} outputs are NaN or Inf (unwritten or overflowed)")
    flat = ref.ravel()
    denom = math.sqrt(float(cp.vdot(flat, flat)))
    err = math.sqrt(squares) / (denom if denom > 0 else 1.0)
    if not err <= tolerance:
        return Verdict(False, err, f"relative error {err:.3g} exceeds tolerance {tolerance:.3g}")
    return Verdict(True, err)
