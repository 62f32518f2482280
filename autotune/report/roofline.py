"""The numbers a roofline needs: a problem's work (its family's own FLOPs and fewest bytes) and a GPU's ceilings.

No GPU's numbers live here. Ceilings (compute peak per dtype, memory bandwidth) come from the caller, or from
files of measured ceilings; without one the roofline fraction is NaN and the plot says there is no measured
ceiling. ``ceilings=`` takes a mapping ``{"flops": FLOP/s or {dtype: FLOP/s}, "bandwidth": B/s[, "label": ...]}``
(for every GPU of the run), or a measured ceilings file, or a folder of them. When it is not given, the files
under ``benchmarks/results/`` of the working directory are read, if that folder exists. A measured ceilings file::

    {"gpu": {"key": "nvidia-h200-sm90", "name": "NVIDIA H200"}, "date": "...", "method": "how it was measured",
     "ceilings": {"bandwidth": 4.2e12, "flops": {"float32": 6.69e13}}}

Other JSON files in a folder (benchmark results with no ``ceilings`` key) are passed over.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError

MEASURED_DIR = Path("benchmarks") / "results"


@dataclass(frozen=True)
class Ceiling:
    """One GPU's roofline for one dtype: compute peak (FLOP/s), memory bandwidth (B/s), and where they came from."""

    flops: float
    bandwidth: float
    label: str  # what the compute roof is, e.g. "float16 peak"
    source: str  # "given", or the measured file

    def attainable(self, intensity: float) -> float:
        """FLOP/s the roofline allows at ``intensity`` (FLOP/byte)."""
        return min(self.flops, intensity * self.bandwidth)


CeilingLookup = Callable[[str | None, str | None], Ceiling | None]  # (gpu key, dtype) -> ceiling or None


def problem_work(kernel: Any, shape: Any, dtype: Any, layout: Any) -> tuple[float, float]:
    """FLOPs and fewest bytes of one problem, from its family's problem type; NaN when no family knows it."""
    from ..kernels import FAMILIES

    family = FAMILIES.get(kernel) if isinstance(kernel, str) else None
    if family is None or not isinstance(shape, str) or not isinstance(dtype, str) or not isinstance(layout, str):
        return math.nan, math.nan
    try:
        problem = family.problem(shape, dtype, layout)
    except (ValueError, TypeError, KeyError):  # a study name that is not a problem of this family
        return math.nan, math.nan
    return float(problem.flops), float(problem.bytes)


def ceiling_lookup(ceilings: Mapping[str, Any] | str | Path | None) -> CeilingLookup:
    """The ceiling per (GPU key, dtype) from ``ceilings`` (see the module's docstring); None where none is known."""
    if isinstance(ceilings, Mapping):
        return _given(ceilings)
    if ceilings is None:
        table = _read_measured(MEASURED_DIR) if MEASURED_DIR.is_dir() else {}
    else:
        path = Path(ceilings)
        if not path.exists():
            raise AutotuneError(f"{path} does not exist; pass a measured ceilings file or a folder of them")
        table = _read_measured(path)
        if not table:
            raise AutotuneError(f'{path} holds no measured ceilings (a JSON file with a "ceilings" key)')

    def lookup(gpu: str | None, dtype: str | None) -> Ceiling | None:
        entry = table.get(gpu or "")
        if entry is None or dtype not in entry["flops"]:
            return None
        return Ceiling(entry["flops"][dtype], entry["bandwidth"], f"{dtype} peak", entry["source"])

    return lookup


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _given(ceilings: Mapping[str, Any]) -> CeilingLookup:
    flops, bandwidth = ceilings.get("flops"), ceilings.get("bandwidth")
    per_dtype = isinstance(flops, Mapping)
    if not (_positive(flops) or (per_dtype and all(_positive(v) for v in flops.values()))):
        raise AutotuneError(f"ceilings: 'flops' must be FLOP/s (a positive number) or {{dtype: FLOP/s}}, got {flops!r}")
    if not _positive(bandwidth):
        raise AutotuneError(f"ceilings: 'bandwidth' must be bytes per second (a positive number), got {bandwidth!r}")
    label = str(ceilings.get("label") or "compute peak")

    def lookup(gpu: str | None, dtype: str | None) -> Ceiling | None:
        peak = flops.get(dtype) if per_dtype else flops
        return None if peak is None else Ceiling(float(peak), float(bandwidth), label, "given")

    return lookup


def _read_measured(path: Path) -> dict[str, dict[str, Any]]:
    """{gpu key: {"flops": {dtype: FLOP/s}, "bandwidth": B/s, "source": file}} of the measured files at ``path``."""
    files = [path] if path.is_file() else sorted(path.glob("*.json"))
    table: dict[str, dict[str, Any]] = {}
    for file in files:
        try:
            doc = json.loads(file.read_text())
        except (OSError, ValueError):
            if path.is_file():
                raise AutotuneError(f"{file} is not a readable JSON file of measured ceilings") from None
            continue  # a folder of benchmark results: only the files with ceilings are ours
        if isinstance(doc, dict) and "ceilings" in doc:
            gpu, entry = _measured_entry(file, doc)
            table[gpu] = entry
    return table


def _measured_entry(file: Path, doc: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    gpu = (doc.get("gpu") or {}).get("key") if isinstance(doc.get("gpu"), Mapping) else None
    if not isinstance(gpu, str) or not gpu:
        raise AutotuneError(f"{file}: gpu.key must name the GPU the ceilings were measured on")
    c = doc["ceilings"]
    flops = c.get("flops") if isinstance(c, Mapping) else None
    if not isinstance(flops, Mapping) or not flops or not all(_positive(v) for v in flops.values()):
        raise AutotuneError(f"{file}: ceilings.flops must map each dtype to its measured FLOP/s (positive numbers)")
    if not _positive(c.get("bandwidth")):
        raise AutotuneError(f"{file}: ceilings.bandwidth must be the measured bytes per second (a positive number)")
    return gpu, {"flops": {str(k): float(v) for k, v in flops.items()}, "bandwidth": float(c["bandwidth"]),
                 "source": str(file)}  # fmt: skip
