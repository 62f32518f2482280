"""The optimization ladder of the kernel guide, measured: the tuned configuration with one technique
switched off at a time, so users see what each level buys on their GPU.

The rungs are the template's (``Template.ladder``; the SIMT GEMM template has one): as tuned, then one technique
off at a time. A rung the template cannot express for the tuned block shape is reported as such, never silently
replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..kernels import FAMILIES


@dataclass(frozen=True)
class Rung:
    label: str
    template: str
    params: dict[str, Any]
    problem: str | None = None  # why the template cannot express this rung, if it cannot


def rungs(kernel: str, template: str, tuned: dict[str, Any]) -> list[Rung]:
    """The configurations to measure, from the template's ladder (``Template.ladder``) of a tuned configuration;
    ValueError for a template without one."""
    family = FAMILIES[kernel]
    steps = family.template(template, tuned).ladder(tuned)
    if not steps:
        raise ValueError(f"no optimization ladder is defined for the {kernel} {template} template")
    out = [Rung(*steps[0])]
    for label, name, params in steps[1:]:
        if name == template and params == tuned:
            out.append(Rung(label, name, params, "already off in the tuned configuration"))
        else:
            out.append(Rung(label, name, params, family.check(name, params)))
    return out


def measure_ladder(kernel: str, dtype: str, shape: str, tuned: dict[str, Any], settings: Any) -> Any:
    """Measure every rung on the GPU (worker process) next to the vendor library; a DataFrame."""
    import pandas as pd

    from ..build.compile_pool import CompilePool
    from ..core.space import Config
    from ..measure.evaluate import Candidate, finish, render_candidate
    from ..measure.worker import GPUWorker
    from .search import FINAL_PLAN

    family = FAMILIES[kernel]
    problem = family.problem(shape, dtype)
    rows = []
    with GPUWorker() as worker, CompilePool(settings.arch) as compiler:
        vendor = worker.vendor(kernel, problem, FINAL_PLAN)
        for rung in rungs(kernel, tuned["template"], tuned["params"]):
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
