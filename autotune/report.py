"""Tables for people: the final per-shape summary of a run, and compile-only reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def final_table(outcomes: Sequence[Any], stored: dict[str, str]) -> str:
    """Best verified configuration per shape next to the vendor library, as aligned text."""
    import pandas as pd

    rows = []
    for o in outcomes:
        b = o.best
        rows.append({
            "shape": o.problem.label,
            "best": b.kernel_name if b else "(none verified)",
            "ms": _fmt(b.median_ms if b else None, ".4f"),
            "spread": _fmt(b.timing.spread * 100 if b and b.timing else None, ".1f") + "%" if b else "-",
            "TFLOP/s": _fmt(b.tflops if b else None, ".1f"),
            "vendor": o.vendor_name or "-",
            "vendor TFLOP/s": _fmt(o.problem.flops / o.vendor.median_ms / 1e9 if o.vendor else None, ".1f"),
            "x vendor": _fmt(o.vendor_ratio, ".2f"),
            "trials": f"{o.evaluated} ({o.new} new)",
            "stored": stored.get(o.problem.label, "-"),
        })  # fmt: skip
    return pd.DataFrame(rows).to_string(index=False)


def compile_table(rows: Sequence[dict[str, Any]]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False) if rows else "(no candidates)"
