"""Correctness before speed: fresh random inputs, a poisoned output, a float64 reference."""

from __future__ import annotations

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
    """Compare on the device; NaN or Inf anywhere fails, whatever the norm says."""
    import cupy as cp

    out64 = out.astype(cp.float64)
    finite = bool(cp.isfinite(out64).all())
    if not finite:
        bad = int((~cp.isfinite(out64)).sum())
        return Verdict(False, float("nan"), f"{bad} of {out.size} outputs are NaN or Inf (unwritten or overflowed)")
    denom = float(cp.linalg.norm(ref))
    err = float(cp.linalg.norm(out64 - ref)) / (denom if denom > 0 else 1.0)
    if err > tolerance:
        return Verdict(False, err, f"relative error {err:.3g} exceeds tolerance {tolerance:.3g}")
    return Verdict(True, err)
