"""Text tables for people: the final table of ``autotune run``, the compile table, and the column selections,
formats and Markdown rendering the report and compare use. pandas is imported when these are called.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def problem_name(problem: Any) -> str:
    """The shape, with dtype and layout when they are not the float32 / NN default."""
    extra = [x for x in (getattr(problem, "dtype", "float32"), getattr(problem, "layout", "NN"))
             if x not in ("float32", "NN")]  # fmt: skip
    return " ".join([problem.label, *extra])


def _final_row(o: Any, stored: Mapping[str, str]) -> dict[str, str]:
    b = o.best
    return {
        "shape": problem_name(o.problem),
        "best": b.kernel_name if b else "(none verified)",
        "ms": _fmt(b.median_ms if b else None, ".4f"),
        "spread": _fmt(b.timing.spread * 100 if b and b.timing else None, ".1f") + "%" if b else "-",
        "TFLOP/s": _fmt(b.tflops if b else None, ".1f"),
        "vendor": o.vendor_name or "-",
        "vendor TFLOP/s": _fmt(o.problem.flops / o.vendor.median_ms / 1e9 if o.vendor else None, ".1f"),
        "x vendor": _fmt(o.vendor_ratio, ".2f"),
        "error": _fmt(b.error if b else None, ".1e"),  # measured vs float64 (Winograd is less exact)
        "J/launch": _fmt(b.energy_j if b else None, ".4g"),
        "GFLOP/J": _fmt(b.gflops_per_j if b else None, ".1f"),
        "front": str(len(o.pareto)) if getattr(o, "pareto", ()) else "-",
        "extra MB": _fmt(b.extra_bytes / 1e6 if b and b.extra_bytes is not None else None, ".1f"),
        "trials": f"{o.evaluated} ({o.new} new)",
        "stored": stored.get(problem_name(o.problem), "-"),
    }


def final_table(outcomes: Sequence[Any], stored: dict[str, str]) -> str:
    """Best verified configuration per shape next to the vendor library, as aligned text."""
    import pandas as pd

    df = pd.DataFrame([_final_row(o, stored) for o in outcomes])
    if not any(o.best is not None and o.best.energy_j is not None for o in outcomes):
        df = df.drop(columns=["J/launch", "GFLOP/J", "front"])
    if not any(o.best is not None and o.best.extra_bytes for o in outcomes):  # im2col, packed mma, split partials
        df = df.drop(columns=["extra MB"])
    return df.to_string(index=False)


def compile_table(rows: Sequence[dict[str, Any]]) -> str:
    """The compile-only results (one dict per candidate) as aligned text."""
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False) if rows else "(no candidates)"


def display(df: Any, columns: Mapping[str, tuple[str, str]]) -> Any:
    """Selected columns renamed and formatted for people: {column: (title, format spec or "")}; NaN is "-"."""
    import pandas as pd

    out = {}
    for col, (title, spec) in columns.items():
        if col not in df.columns:
            continue
        out[title] = [_cell(v, spec) for v in df[col]]
    return pd.DataFrame(out)


def _cell(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if spec.startswith("%"):  # "%" or "%.1": a fraction shown as a percentage
        return f"{100 * v:{spec[1:] or '.0'}f}%"
    if spec == "x":
        return f"{v:.2f}x"
    return format(v, spec) if spec else str(v)


BEST_COLUMNS = {
    "run": ("run", ""), "dtype": ("dtype", ""), "layout": ("layout", ""), "shape": ("shape", ""),
    "template": ("template", ""), "kernel_name": ("best", ""),
    "trial": ("trial", ".0f"), "median_ms": ("ms", ".4f"), "spread": ("spread", "%.1"), "tflops": ("TFLOP/s", ".1f"),
    "roofline_fraction": ("of roofline", "%"), "vendor_ratio": ("x vendor", "x"), "error": ("error", ".1e"),
    "energy_j": ("J/launch", ".4g"), "gflops_per_j": ("GFLOP/J", ".1f"), "energy_method": ("energy by", ""),
    "complete": ("complete", "d"),
    "evaluated": ("evaluated", "d"), "trials": ("trials", "d"),
}  # fmt: skip
TUNED_COLUMNS = {
    "gpu": ("gpu", ""), "kernel": ("kernel", ""), "dtype": ("dtype", ""), "layout": ("layout", ""),
    "shape": ("shape", ""), "kernel_name": ("kernel name", ""), "median_ms": ("ms", ".4f"),
    "tflops": ("TFLOP/s", ".1f"), "roofline_fraction": ("of roofline", "%"), "vendor_median_ms": ("vendor ms", ".4f"),
    "vendor_ratio": ("x vendor", "x"), "error": ("error", ".1e"), "energy_j": ("J/launch", ".4g"),
    "gflops_per_j": ("GFLOP/J", ".1f"), "energy_method": ("energy by", ""), "pareto_points": ("front", "d"),
    "trials": ("trials", ""),
    "date": ("date", ""),
}  # fmt: skip
_ENERGY_COLUMNS = ("energy_j", "gflops_per_j", "energy_method", "pareto_points")


def best_display(best_df: Any) -> Any:
    """The best-per-shape table as people read it (the run column only when there are several runs)."""
    cols = dict(BEST_COLUMNS)
    if best_df["run"].nunique() <= 1:
        del cols["run"]
    return display(best_df, without_energy(best_df, cols))


def without_energy(df: Any, columns: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """The columns, less the energy ones when no row has an energy measurement."""
    if "energy_j" in df.columns and df["energy_j"].notna().any():
        return columns
    return {k: v for k, v in columns.items() if k not in _ENERGY_COLUMNS}


def status_display(counts: Any) -> Any:
    """The status counts as people read them (the run column only when there are several runs)."""
    return counts.drop(columns=["run"]) if counts["run"].nunique() <= 1 else counts


def markdown_table(df: Any) -> str:
    """A GitHub-flavoured Markdown table (no ``tabulate`` needed)."""

    def cell(v: Any) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).replace("|", "\\|")

    head = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def text(df: Any) -> str:
    """A frame as aligned text, or "(none)"."""
    return df.to_string(index=False) if len(df) else "(none)"
