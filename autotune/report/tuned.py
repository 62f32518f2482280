"""The stored winners of tuned/ as a DataFrame (:func:`best`), and the vendor library's time per shape from them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError
from .roofline import ceiling_lookup, problem_work

VendorLookup = Callable[[str | None, Mapping[str, Any]], "tuple[str, float] | None"]
_TIMES = ("median_ms", "min_ms", "max_ms", "iqr_ms")
_VERSIONS = ("cuda_driver", "cuda_runtime", "nvrtc", "cupy")


def num(v: Any) -> float:
    """``v`` as a float; NaN for None or anything that is not a number."""
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _tuned_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise AutotuneError(f"{path} does not exist; pass a tuned/ directory, one GPU's directory or one .json file")
    files = sorted(path.glob("*.json")) or sorted(path.glob("*/*.json"))
    if not files:
        raise AutotuneError(f"{path} holds no tuned results (<gpu-key>/<kernel>.json)")
    return files


def best(tuned_dir: str | Path, *, ceilings: Mapping[str, Any] | str | Path | None = None) -> Any:
    """The stored winners of a tuned/ directory (every GPU sub-directory and kernel file) as a DataFrame.

    ``tuned_dir`` may also be one GPU's directory or one ``<kernel>.json`` file. One row per entry (GPU,
    kernel, dtype, layout, shape) with its timing, ratio to the vendor library, the problem's FLOPs and
    bytes, roofline fraction (NaN where no ceiling is known: see ``report.roofline``) and provenance:
    template and source hashes, versions, date, trial count, spec, study and file.
    """
    import pandas as pd

    from ..results.store import read

    ceiling_of = ceiling_lookup(ceilings)
    rows = []
    for path in _tuned_files(Path(tuned_dir)):
        doc = read(path)
        info = doc.get("gpu") or {}
        gpu = info.get("key") or path.parent.name
        kernel = doc.get("kernel") or path.stem
        for key, e in doc["entries"].items():
            dtype, layout, shape = (key.split("/", 2) + ["", ""])[:3]
            row = {"gpu": gpu, "gpu_name": info.get("name"), "kernel": kernel, "dtype": dtype, "layout": layout,
                   "shape": shape}  # fmt: skip
            rows.append({**row, **_entry_columns(e, row, ceiling_of(gpu, dtype)), "file": str(path)})
    return pd.DataFrame(rows)


def _entry_columns(e: Mapping[str, Any], where: Mapping[str, str], ceiling: Any) -> dict[str, Any]:
    flops, nbytes = problem_work(where["kernel"], where["shape"], where["dtype"], where["layout"])
    intensity = flops / nbytes if nbytes > 0 else math.nan
    roof = ceiling.attainable(intensity) if ceiling is not None and intensity > 0 else math.nan
    params = e.get("params") or {}
    versions = e.get("versions") or {}
    median = num(e.get("median_ms"))
    return {
        "flops": flops, "bytes": nbytes, "template": e.get("template"), "kernel_name": e.get("kernel_name"),
        "params": ",".join(f"{k}={v}" for k, v in params.items()),
        **{k: num(e.get(k)) for k in _TIMES},
        "spread": num(e.get("iqr_ms")) / median if median > 0 else math.nan,
        "repeats": e.get("repeats"), "tflops": num(e.get("tflops")), "gbps": num(e.get("gbps")),
        "intensity": intensity,
        "roofline_fraction": num(e.get("tflops")) * 1e12 / roof if roof > 0 else math.nan,
        "registers": num(e.get("registers")), "error": num(e.get("error")),
        "energy_j": num(e.get("energy_j")), "gflops_per_j": num(e.get("gflops_per_j")),
        "energy_method": e.get("energy_method"), "pareto_points": len(e.get("pareto") or []),
        "tolerance": num(e.get("tolerance")), "verified": e.get("verified"),
        "vendor": e.get("vendor"), "vendor_median_ms": num(e.get("vendor_median_ms")),
        "vendor_ratio": num(e.get("vendor_ratio")), "trials": e.get("trials"), "study": e.get("study"),
        "spec": e.get("spec"), "template_hash": e.get("template_hash"), "source_hash": e.get("source_hash"),
        **{k: versions.get(k) for k in _VERSIONS},
        "date": e.get("date"),
    }  # fmt: skip


def vendor_lookup(tuned_dir: str | Path | None, vendor_ms: Mapping[str, float] | None) -> VendorLookup:
    """Vendor library time per shape (cuBLAS, cuDNN): from ``vendor_ms`` {shape: ms}, else from the tuned/ entries.

    tuned/ entries are matched by GPU key (the journal's name); when the run's name is not a GPU of the
    tuned directory and that directory holds a single GPU, that GPU's times are used.
    """
    table: dict[tuple[str, str, str, str, str], tuple[str, float]] = {}
    if tuned_dir is not None:
        for r in best(tuned_dir).to_dict("records"):
            if num(r["vendor_median_ms"]) > 0:
                key = (r["gpu"], r["kernel"], r["dtype"], r["layout"], r["shape"])
                table[key] = (r["vendor"] or "vendor", r["vendor_median_ms"])
    gpus = {k[0] for k in table}

    def lookup(gpu: str | None, parts: Mapping[str, Any]) -> tuple[str, float] | None:
        if vendor_ms and parts.get("shape") in vendor_ms:
            return "vendor", float(vendor_ms[parts["shape"]])
        key = (parts.get("kernel"), parts.get("dtype"), parts.get("layout", "NN"), parts.get("shape"))
        hit = table.get((gpu, *key))  # type: ignore[arg-type]
        if hit is None and gpu not in gpus and len(gpus) == 1:
            hit = table.get((next(iter(gpus)), *key))  # type: ignore[arg-type]
        return hit

    return lookup
