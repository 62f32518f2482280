"""The optimization ladder of the kernel guide, measured: the tuned configuration with one technique
switched off at a time, so users see what each level buys on their GPU.

Rungs for the SIMT GEMM template: as tuned; without double buffering; without shared-memory padding;
without vector loads; with 4x4 register fragments (the same outputs per thread, cut finer); and the naive
kernel (no shared-memory tiling and no register tiling at all). A rung the template cannot express for the
tuned block shape is reported as such, never silently replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .kernels import FAMILIES


@dataclass(frozen=True)
class Rung:
    label: str
    template: str
    params: dict[str, Any]
    problem: str | None = None  # why the template cannot express this rung, if it cannot


def rungs(kernel: str, template: str, tuned: dict[str, Any]) -> list[Rung]:
    """The configurations to measure, derived from a tuned SIMT GEMM configuration."""
    family = FAMILIES[kernel]
    if kernel != "gemm" or template != "simt":
        raise ValueError("the ladder is defined for the SIMT GEMM template")
    out = [Rung("as tuned", template, dict(tuned))]
    switches = [
        ("without double buffering", {"DBUF": False}),
        ("without shared-memory padding", {"PAD": 0}),
        ("without vector loads (VEC=1)", {"VEC": 1}),
        # Outputs per thread stay WM*WN/32: the template cannot drop register tiling for a given warp tile,
        # only cut it into 4x4 fragments; the naive rung below has none at all.
        ("4x4 register fragments (TM=TN=4, WNITER=1; same outputs per thread)", {"TM": 4, "TN": 4, "WNITER": 1}),
    ]
    for label, change in switches:
        params = {**tuned, **change}
        if params == tuned:
            out.append(Rung(label, template, params, "already off in the tuned configuration"))
            continue
        out.append(Rung(label, template, params, family.check(template, params)))
    out.append(Rung("naive: no shared-memory or register tiling", "naive", {"BX": 16, "BY": 16}))
    return out


def measure_ladder(kernel: str, dtype: str, shape: str, tuned: dict[str, Any], settings: Any) -> Any:
    """Measure every rung on the GPU (worker process) next to the vendor library; a DataFrame."""
    import pandas as pd

    from .compile_pool import CompilePool
    from .evaluate import Candidate, finish, render_candidate
    from .search import FINAL_PLAN
    from .space import Config
    from .worker import GPUWorker

    family = FAMILIES[kernel]
    problem = family.problem(shape, dtype)
    rows = []
    with GPUWorker() as worker, CompilePool(settings.arch) as compiler:
        vendor = worker.vendor(kernel, problem, FINAL_PLAN)
        for rung in rungs(kernel, "simt", tuned["params"]):
            row: dict[str, Any] = {"rung": rung.label, "kernel": family.kernel_name(rung.template, rung.params)}
            if rung.problem:
                rows.append({**row, "status": "not measured", "note": rung.problem})
                continue
            c = render_candidate(Candidate(kernel, rung.template, problem, Config.of(rung.params)), settings)
            if c.status is None:
                c = finish(c, compiler.result(compiler.submit(c)), settings)
            r = worker.measure(c, settings)
            row.update({"status": r.status.value, "note": r.reason or "", "ms": r.median_ms if r.ok else None,
                        "TFLOP/s": r.tflops if r.ok else None, "registers": r.registers})  # fmt: skip
            rows.append(row)
    df = pd.DataFrame(rows)
    if vendor is not None:
        df[f"x {vendor[0]}"] = [vendor[1].median_ms / ms if ms else None for ms in df.get("ms", [None] * len(df))]
        base = df["ms"].iloc[0] if "ms" in df and df["ms"].iloc[0] else None
        df["slowdown"] = [ms / base if ms and base else None for ms in df["ms"]]
    return df
