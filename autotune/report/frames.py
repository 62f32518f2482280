"""DataFrames of trials: :func:`trials` (one row per non-duplicate trial), :func:`best_per_shape` and
:func:`status_counts` over it. pandas is imported when these are called.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.study_key import StudyKey
from .roofline import CeilingLookup, ceiling_lookup, problem_work
from .studies import Study, load_studies
from .tuned import VendorLookup, num, vendor_lookup

STATUS_ORDER = (
    "complete", "pruned", "invalid", "compile-failed", "verify-failed", "launch-failed", "timed-out",
    "interrupted", "unevaluated", "running",
)  # fmt: skip
_RESULT_KEYS = (
    "reason", "kernel_name", "config_key", "median_ms", "min_ms", "max_ms", "iqr_ms", "repeats", "tflops", "gbps",
    "error", "compile_s", "registers", "shared_bytes", "spills", "occupancy", "source_hash", "gflops_per_j",
    "energy_method", "extra_bytes",
)  # fmt: skip
_HEAD = ("run", "gpu", "study", "kernel", "template", "dtype", "layout", "shape", "flops", "bytes", "template_hash",
         "space_digest", "trial")  # fmt: skip
_TAIL = (
    "state", "status", "reason", "kernel_name", "config_key", "median_ms", "min_ms", "max_ms", "iqr_ms", "spread",
    "repeats", "tflops", "gbps", "intensity", "roofline_fraction", "best_ms_so_far", "best_tflops_so_far", "vendor",
    "vendor_median_ms", "vendor_ratio", "error", "compile_s", "registers", "shared_bytes", "spills", "occupancy",
    "source_hash", "datetime_start", "datetime_complete", "duration_s", "elapsed_s", "energy_j", "gflops_per_j",
    "energy_method", "extra_bytes", "owner", "source",
)  # fmt: skip
_NUMERIC = ("flops", "bytes", "median_ms", "min_ms", "max_ms", "iqr_ms", "repeats", "tflops", "gbps", "error",
            "compile_s", "registers", "shared_bytes", "spills", "occupancy", "energy_j", "gflops_per_j")  # fmt: skip


def trials(
    source: str | Path,
    *,
    ceilings: Mapping[str, Any] | str | Path | None = None,
    tuned_dir: str | Path | None = None,
    vendor_ms: Mapping[str, float] | None = None,
) -> Any:
    """One row per non-duplicate trial of every study in ``source``, as a pandas DataFrame.

    ``source``: a study journal, a directory (every ``*.journal`` under it, e.g. ``runs/``) or an Optuna
    storage URL. Columns: run, gpu, study, kernel, template, dtype, layout, shape, flops and bytes (the
    problem's FLOPs and fewest bytes, from its family), template_hash, space_digest, trial, one column per
    parameter, then state, status, reason, kernel_name, timing (median/min/max/iqr ms, ``spread`` =
    IQR/median, repeats), tflops, gbps, ``intensity`` (FLOP/byte of the problem), ``roofline_fraction``
    (achieved FLOP/s over min(peak, intensity x bandwidth); NaN without a ceiling: see ``report.roofline``
    for ``ceilings``), best_ms_so_far / best_tflops_so_far (over complete trials, by trial number), vendor,
    vendor_median_ms and ``vendor_ratio`` (vendor time over ours; needs ``tuned_dir`` or ``vendor_ms``
    {shape: ms}), error, compile_s, registers, shared_bytes, spills, occupancy, datetime_start/complete,
    duration_s, ``elapsed_s`` (since the study's first trial started), ``energy_j``, owner.
    """
    return trials_frame(load_studies(source), ceiling_lookup(ceilings), vendor_lookup(tuned_dir, vendor_ms))


def name_parts(name: str) -> dict[str, Any]:
    """The columns a study name gives: kernel, template, dtype, layout, shape, template_hash, space_digest.
    A name autotune did not build keeps its rows, with the name standing in for the shape."""
    key = StudyKey.parse(name)
    if key is None:
        return {"shape": name, "layout": None}
    return {
        "kernel": key.kernel, "template": key.template, "dtype": key.dtype, "layout": key.layout,
        "shape": key.shape_label, "template_hash": key.template_hash8, "space_digest": key.space_digest,
    }  # fmt: skip


def trials_frame(studies: Sequence[Study], ceiling_of: CeilingLookup, vendor: VendorLookup) -> Any:
    """The :func:`trials` frame of studies already read."""
    params: dict[str, None] = {}  # ordered set, first-seen order
    rows = [row for st in studies for row in _study_rows(st, ceiling_of, vendor, params)]
    return _typed_frame(rows, [*_HEAD, *(_param_column(p) for p in params), *_TAIL])


def _study_rows(st: Study, ceiling_of: CeilingLookup, vendor: VendorLookup, params: dict[str, None]) -> list[dict]:
    parts = name_parts(st.name)
    flops, nbytes = problem_work(parts.get("kernel"), parts["shape"], parts.get("dtype"), parts["layout"])
    intensity = flops / nbytes if nbytes > 0 else math.nan
    ceiling = ceiling_of(st.gpu, parts.get("dtype"))
    study = {
        "run": st.run, "gpu": st.gpu, "study": st.name, **parts, "flops": flops, "bytes": nbytes,
        "intensity": intensity, "roof": ceiling.attainable(intensity) if ceiling and intensity > 0 else math.nan,
        "vendor": vendor(st.gpu, parts), "source": st.source,
    }  # fmt: skip
    starts = [t.datetime_start for t in st.trials if t.datetime_start is not None]
    t0 = min(starts) if starts else None
    rows = []
    for t in sorted(st.trials, key=lambda t: t.number):
        if "duplicate_of" in t.user_attrs:
            continue
        for name in t.params:
            params.setdefault(name, None)
        rows.append(_trial_row(t, study, t0))
    return rows


def _trial_row(t: Any, study: Mapping[str, Any], t0: Any) -> dict[str, Any]:
    a = t.user_attrs.get("result") or {}
    vend, roof = study["vendor"], study["roof"]
    row = {k: v for k, v in study.items() if k not in ("roof", "vendor")}
    row["trial"] = t.number
    row.update({_param_column(name): value for name, value in t.params.items()})
    row.update({k: a.get(k) for k in _RESULT_KEYS})
    status = t.user_attrs.get("status") or ("running" if t.state.name == "RUNNING" else t.state.name.lower())
    median, tflops = num(a.get("median_ms")), num(a.get("tflops"))
    if math.isnan(tflops) and median > 0 and study["flops"] > 0:
        tflops = study["flops"] / median / 1e9
    end, start = t.datetime_complete, t.datetime_start
    row.update(
        state=t.state.name, status=status, tflops=tflops,
        spread=num(a.get("iqr_ms")) / median if median > 0 else math.nan,
        roofline_fraction=tflops * 1e12 / roof if roof > 0 else math.nan,
        vendor=vend[0] if vend else None, vendor_median_ms=vend[1] if vend else math.nan,
        vendor_ratio=vend[1] / median if vend and median > 0 else math.nan,
        datetime_start=start, datetime_complete=end,
        duration_s=(end - start).total_seconds() if end and start else math.nan,
        elapsed_s=(end - t0).total_seconds() if end and t0 else math.nan,
        energy_j=num(a.get("energy_j")), owner=t.user_attrs.get("owner"),
    )  # fmt: skip
    return row


def _typed_frame(rows: list[dict[str, Any]], columns: list[str]) -> Any:
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns)
    for c in _NUMERIC:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    for c in ("datetime_start", "datetime_complete"):
        df[c] = pd.to_datetime(df[c])
    groups = [df["source"], df["study"]]
    ok = df["status"] == "complete"
    df["best_ms_so_far"] = df["median_ms"].where(ok).groupby(groups).cummin().groupby(groups).ffill()
    df["best_tflops_so_far"] = df["tflops"].where(ok).groupby(groups).cummax().groupby(groups).ffill()
    return df


def _param_column(name: str) -> str:
    return f"param_{name}" if name in _HEAD or name in _TAIL else name


def param_columns(df: Any) -> list[str]:
    """The parameter columns of a :func:`trials` frame (between ``trial`` and ``state``)."""
    cols = list(df.columns)
    return cols[cols.index("trial") + 1 : cols.index("state")]


_BEST_NUMBERS = ("median_ms", "min_ms", "max_ms", "iqr_ms", "spread", "tflops", "gbps", "intensity",
                 "roofline_fraction", "vendor_median_ms", "vendor_ratio", "error", "registers", "energy_j",
                 "gflops_per_j")  # fmt: skip


def best_per_shape(df: Any) -> Any:
    """The fastest complete trial per (run, kernel, dtype, shape) of a :func:`trials` frame, with counts."""
    import pandas as pd

    rows = []
    keys = ["run", "gpu", "kernel", "dtype", "layout", "shape"]
    for key, g in df.groupby(keys, sort=False, dropna=False):
        done = g[g["status"] == "complete"]
        b = done.loc[done["median_ms"].idxmin()] if len(done) else None
        rows.append({
            **dict(zip(keys, key, strict=True)),
            "template": b["template"] if b is not None else g["template"].iloc[0],
            "study": b["study"] if b is not None else g["study"].iloc[0],
            "kernel_name": b["kernel_name"] if b is not None else "(none verified)",
            "trial": b["trial"] if b is not None else None,
            **{c: b[c] if b is not None else math.nan for c in _BEST_NUMBERS},
            "energy_method": b["energy_method"] if b is not None else None,
            "vendor": g["vendor"].dropna().iloc[0] if g["vendor"].notna().any() else None,
            "complete": len(done),
            "evaluated": int((g["status"] != "invalid").sum()),
            "trials": len(g),
        })  # fmt: skip
    return pd.DataFrame(rows)


def status_counts(df: Any) -> Any:
    """Trials per status for every (run, shape) of a :func:`trials` frame; statuses in a fixed order.
    A shape tuned in several dtypes or layouts is named with them (``4096x4096x4096 float16 TN``)."""
    import pandas as pd

    extra = [df[c].where(~df[c].isin(["float32", "NN"]) & df[c].notna(), "") for c in ("dtype", "layout")]
    df = df.assign(
        shape=(df["shape"] + " " + extra[0] + " " + extra[1]).str.strip().str.replace(r"\s+", " ", regex=True)
    )
    index = ["run", "shape"]
    counts = pd.crosstab([df[c] for c in index], df["status"])
    order = [s for s in STATUS_ORDER if s in counts.columns] + sorted(set(counts.columns) - set(STATUS_ORDER))
    counts = counts[order]
    counts["total"] = counts.sum(axis=1)
    first_seen = list(dict.fromkeys(zip(df["run"], df["shape"], strict=True)))
    return counts.reindex(first_seen).reset_index().rename_axis(columns=None)
