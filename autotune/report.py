"""Tables and plots for people.

``final_table`` and ``compile_table`` print what ``autotune run`` just did. The rest reads what runs left
behind: :func:`trials` (every non-duplicate trial of a journal, a runs/ directory or an Optuna storage URL,
one DataFrame row each), :func:`best` (the stored winners of tuned/), :func:`compare` (two runs or two GPUs
side by side) and :func:`write_report` (CSV, Markdown and one self-contained HTML page with plots).

pandas and Optuna load when these are called, matplotlib only when a plot is drawn (``autotune[report]``).

Example::

    from autotune.report import trials
    df = trials("runs/gemm", tuned_dir="tuned")
    df[df.status == "complete"].groupby("shape").tflops.max()
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import logging
import math
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AutotuneError
from .storage_checks import check_url, first_bad_line, redact, set_aside_torn_tail

log = logging.getLogger(__name__)

# Ceilings measured on the H200 test host (/work/shared/GPU.md): fp32 FMA peak and device-to-device copy
# bandwidth (bytes read + written). Runs of a GPU not listed here use these unless ``ceilings`` is given.
H200_CEILINGS = {"flops": 66.9e12, "bandwidth": 4.2e12, "label": "fp32 FMA peak"}
CEILINGS = {"nvidia-h200-sm90": H200_CEILINGS}
# Tensor-core dtypes have their own compute roof (the H200's dense datasheet figures; GPU.md: WMMA/mma.sync
# reach about 65% of them on Hopper).
TENSOR_PEAKS = {"nvidia-h200-sm90": {"float16": 990e12, "bfloat16": 990e12, "tfloat32": 495e12}}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "tfloat32": 4, "float64": 8}
REPORT_EXTRA = "pip install 'autotune[report]'"
MIN_IMPORTANCE_TRIALS = 5  # fewer complete trials than this say nothing about parameter importance

STATUS_ORDER = (
    "complete", "pruned", "invalid", "compile-failed", "verify-failed", "launch-failed", "timed-out",
    "interrupted", "unevaluated", "running",
)  # fmt: skip
STATUS_COLORS = {
    "complete": "#2a9d4b", "pruned": "#f0a030", "invalid": "#b0b0b0", "compile-failed": "#d62728",
    "verify-failed": "#9467bd", "launch-failed": "#8c564b", "timed-out": "#e377c2", "interrupted": "#17becf",
    "unevaluated": "#dddddd", "running": "#1f77b4",
}  # fmt: skip

_STUDY_NAME = re.compile(
    r"(?P<kernel>[^.]+)\.(?P<template>[^.]+)\.(?P<dtype>[^.]+)\.(?P<shape>[^.]+)(?:\.(?P<layout>NN|NT|TN|TT|NCHW|NHWC))?"
    r"\.(?P<hash>[\w.]+)"
)
_GEMM_SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)")
_RESULT_KEYS = (
    "reason", "kernel_name", "config_key", "median_ms", "min_ms", "max_ms", "iqr_ms", "repeats", "tflops", "gbps",
    "error", "compile_s", "registers", "shared_bytes", "spills", "occupancy", "source_hash", "gflops_per_j",
    "energy_method", "extra_bytes",
)  # fmt: skip
_HEAD = ("run", "gpu", "study", "kernel", "template", "dtype", "layout", "shape", "M", "N", "K", "template_hash",
         "trial")  # fmt: skip
_TAIL = (
    "state", "status", "reason", "kernel_name", "config_key", "median_ms", "min_ms", "max_ms", "iqr_ms", "spread",
    "repeats", "tflops", "gbps", "intensity", "roofline_fraction", "best_ms_so_far", "best_tflops_so_far", "vendor",
    "vendor_median_ms", "vendor_ratio", "error", "compile_s", "registers", "shared_bytes", "spills", "occupancy",
    "source_hash", "datetime_start", "datetime_complete", "duration_s", "elapsed_s", "energy_j", "gflops_per_j",
    "energy_method", "extra_bytes", "owner", "source",
)  # fmt: skip


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def problem_name(problem: Any) -> str:
    """The shape, with dtype and layout when they are not the float32 / NN default."""
    extra = [x for x in (getattr(problem, "dtype", "float32"), getattr(problem, "layout", "NN"))
             if x not in ("float32", "NN")]  # fmt: skip
    return " ".join([problem.label, *extra])


def final_table(outcomes: Sequence[Any], stored: dict[str, str]) -> str:
    """Best verified configuration per shape next to the vendor library, as aligned text."""
    import pandas as pd

    rows = []
    for o in outcomes:
        b = o.best
        rows.append({
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
        })  # fmt: skip
    df = pd.DataFrame(rows)
    if not any(o.best is not None and o.best.energy_j is not None for o in outcomes):
        df = df.drop(columns=["J/launch", "GFLOP/J", "front"])
    if not any(o.best is not None and o.best.extra_bytes for o in outcomes):  # im2col, packed mma, split partials
        df = df.drop(columns=["extra MB"])
    return df.to_string(index=False)


def compile_table(rows: Sequence[dict[str, Any]]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False) if rows else "(no candidates)"


# --- reading studies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Study:
    run: str  # the journal's path under the source directory without .journal, or the storage URL
    gpu: str | None  # the journal's name without .journal: by convention the GPU key (runs/<spec>/<gpu-key>.journal)
    source: str  # the journal file or storage URL it came from
    name: str
    trials: tuple[Any, ...]  # optuna FrozenTrial, every one (duplicates included)


def _load_studies(source: str | Path) -> list[_Study]:
    """Every study of a journal file, of every *.journal under a directory, or of an Optuna storage URL."""
    text = str(source)
    if "://" in text:
        return _read_url(text)
    path = Path(text)
    if path.is_dir():
        journals = sorted(path.rglob("*.journal"))
        if not journals:
            raise AutotuneError(f"{path} holds no study journals (*.journal); pass a journal, runs/ or a URL")
        runs = [(str(j.relative_to(path).with_suffix("")), j) for j in journals]
    elif path.is_file():
        runs = [(path.stem, path)]
    else:
        raise AutotuneError(f"{path} does not exist; pass a study journal, a runs/ directory or an Optuna storage URL")
    studies = [s for run, journal in runs for s in _read_journal(journal, run)]
    if not studies:
        raise AutotuneError(f"{path} holds no Optuna studies")
    return studies


def _read_journal(path: Path, run: str) -> list[_Study]:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    # Read a copy: the backend opens its file for appending and wants a lock file beside it, and the run
    # may be read-only (or still being written by a tuning process).
    with tempfile.TemporaryDirectory(prefix="autotune-report-") as tmp:
        copy = Path(tmp) / "copy.journal"
        try:
            shutil.copyfile(path, copy)
            if set_aside_torn_tail(copy):  # a killed write, or a record a tuner is writing right now
                log.warning("%s: its last record is cut short; reading the records before it", path)
            storage = JournalStorage(JournalFileBackend(str(copy)))
            return _studies_of(storage, run, path.stem, str(path))
        except OSError as exc:
            raise AutotuneError(f"{path} cannot be read ({exc.strerror})") from None
        except (ValueError, KeyError, TypeError, AssertionError) as exc:  # JSONDecodeError is a ValueError
            bad = first_bad_line(copy)
            if bad is not None:
                raise AutotuneError(
                    f"{path}, line {bad[0]}: {bad[1]}, so it is not a readable Optuna study journal"
                ) from None
            raise AutotuneError(f"{path} is not an Optuna study journal ({type(exc).__name__}: {exc})") from None


def _read_url(url: str) -> list[_Study]:
    import optuna

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise AutotuneError(f"{redact(url)}: no such SQLite file")
    check_url(url)
    from .study_database import with_driver  # postgresql:// with the PostgreSQL driver that is installed

    try:
        storage = optuna.storages.get_storage(with_driver(url))
    except Exception as exc:  # noqa: BLE001 - drivers raise their own types; each means "cannot open this URL"
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise AutotuneError(
            f"{redact(url)} cannot be opened as an Optuna storage ({type(exc).__name__}: {first})"
        ) from None
    studies = _studies_of(storage, url, None, url)
    if not studies:
        raise AutotuneError(f"{redact(url)} holds no Optuna studies")
    return studies


def _studies_of(storage: Any, run: str, gpu: str | None, source: str) -> list[_Study]:
    return [
        _Study(run, gpu, source, s.study_name, tuple(storage.get_all_trials(s._study_id, deepcopy=False)))
        for s in storage.get_all_studies()
    ]


def _name_parts(name: str) -> dict[str, Any]:
    """``gemm.simt.float32.4096x4096x4096.34107aaa`` -> kernel, template, dtype, shape, hash, M, N, K."""
    m = _STUDY_NAME.fullmatch(name)
    if m is None:  # not one of ours: keep its rows, with the study name standing in for the shape
        return {"shape": name, "layout": None}
    parts = {**m.groupdict(), "template_hash": m["hash"], "layout": m["layout"] or "NN"}
    del parts["hash"]
    dims = _GEMM_SHAPE.fullmatch(m["shape"])
    if dims:
        parts.update(M=int(dims[1]), N=int(dims[2]), K=int(dims[3]))
    return parts


def _work(parts: Mapping[str, Any]) -> tuple[float, float]:
    """FLOPs and fewest bytes (A and B read once, C written once) of a GEMM shape; NaN for other kernels."""
    size = ITEMSIZE.get(parts.get("dtype", ""))
    if parts.get("kernel") != "gemm" or "M" not in parts or size is None:
        return math.nan, math.nan
    m, n, k = parts["M"], parts["N"], parts["K"]
    return 2.0 * m * n * k, float((m * k + k * n + m * n) * size)


def _ceilings_for(gpu: str | None, given: Mapping[str, Any] | None, dtype: str | None = None) -> Mapping[str, Any]:
    if given is not None:
        return given
    base = CEILINGS.get(gpu or "", H200_CEILINGS)
    peak = TENSOR_PEAKS.get(gpu or "", TENSOR_PEAKS["nvidia-h200-sm90"]).get(dtype or "")
    return {**base, "flops": peak, "label": f"{dtype} tensor-core peak (datasheet)"} if peak else base


def _attainable(intensity: float, ceilings: Mapping[str, float]) -> float:
    return min(ceilings["flops"], intensity * ceilings["bandwidth"])


VendorLookup = Callable[[str | None, Mapping[str, Any]], "tuple[str, float] | None"]


def _vendor_lookup(tuned_dir: str | Path | None, vendor_ms: Mapping[str, float] | None) -> VendorLookup:
    """Vendor library time per shape (cuBLAS, cuDNN): from ``vendor_ms`` {shape: ms}, else from the tuned/ entries.

    tuned/ entries are matched by GPU key (the journal's name); when the run's name is not a GPU of the
    tuned directory and that directory holds a single GPU, that GPU's times are used.
    """
    table: dict[tuple[str, str, str, str], tuple[str, float]] = {}
    if tuned_dir is not None:
        for r in best(tuned_dir).to_dict("records"):
            if _num(r["vendor_median_ms"]) > 0:
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


def _num(v: Any) -> float:
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


# --- trials ------------------------------------------------------------------------------------------


def trials(
    source: str | Path,
    *,
    ceilings: Mapping[str, float] | None = None,
    tuned_dir: str | Path | None = None,
    vendor_ms: Mapping[str, float] | None = None,
) -> Any:
    """One row per non-duplicate trial of every study in ``source``, as a pandas DataFrame.

    ``source``: a study journal, a directory (every ``*.journal`` under it, e.g. ``runs/``) or an Optuna
    storage URL. Columns: run, gpu, study, kernel, template, dtype, shape, M, N, K, template_hash, trial,
    one column per parameter, then state, status, reason, kernel_name, timing (median/min/max/iqr ms,
    ``spread`` = IQR/median, repeats), tflops, gbps, ``intensity`` (FLOP/byte of the shape),
    ``roofline_fraction`` (achieved FLOP/s over min(peak, intensity x bandwidth) from ``ceilings``
    {"flops": FLOP/s, "bandwidth": B/s}; default: the H200's measured fp32 FMA peak and copy bandwidth),
    best_ms_so_far / best_tflops_so_far (over complete trials, by trial number), vendor, vendor_median_ms
    and ``vendor_ratio`` (vendor time over ours; needs ``tuned_dir`` or ``vendor_ms`` {shape: ms}), error,
    compile_s, registers, shared_bytes, spills, occupancy, datetime_start/complete, duration_s,
    ``elapsed_s`` (since the study's first trial started), ``energy_j`` (not measured yet: NaN), owner.
    """
    return _trials_frame(_load_studies(source), ceilings, _vendor_lookup(tuned_dir, vendor_ms))


def _trials_frame(studies: Sequence[_Study], ceilings: Mapping[str, float] | None, vendor: VendorLookup) -> Any:
    import pandas as pd

    rows: list[dict[str, Any]] = []
    params: dict[str, None] = {}  # ordered set, first-seen order
    for st in studies:
        parts = _name_parts(st.name)
        flops, nbytes = _work(parts)
        intensity = flops / nbytes if nbytes > 0 else math.nan
        limits = _ceilings_for(st.gpu, ceilings, parts.get("dtype"))
        roof = _attainable(intensity, limits) if intensity > 0 else math.nan
        vend = vendor(st.gpu, parts)
        starts = [t.datetime_start for t in st.trials if t.datetime_start is not None]
        t0 = min(starts) if starts else None
        for t in sorted(st.trials, key=lambda t: t.number):
            if "duplicate_of" in t.user_attrs:
                continue
            a = t.user_attrs.get("result") or {}
            row: dict[str, Any] = {"run": st.run, "gpu": st.gpu, "study": st.name, **parts, "trial": t.number}
            for name, value in t.params.items():
                params.setdefault(name, None)
                row[_param_column(name)] = value
            row.update({k: a.get(k) for k in _RESULT_KEYS})
            status = t.user_attrs.get("status") or ("running" if t.state.name == "RUNNING" else t.state.name.lower())
            median = _num(a.get("median_ms"))
            tflops = _num(a.get("tflops"))
            if math.isnan(tflops) and median > 0 and flops > 0:
                tflops = flops / median / 1e9
            end = t.datetime_complete
            row.update(
                state=t.state.name, status=status, tflops=tflops,
                spread=_num(a.get("iqr_ms")) / median if median > 0 else math.nan,
                intensity=intensity, roofline_fraction=tflops * 1e12 / roof if roof > 0 else math.nan,
                vendor=vend[0] if vend else None, vendor_median_ms=vend[1] if vend else math.nan,
                vendor_ratio=vend[1] / median if vend and median > 0 else math.nan,
                datetime_start=t.datetime_start, datetime_complete=end,
                duration_s=(end - t.datetime_start).total_seconds() if end and t.datetime_start else math.nan,
                elapsed_s=(end - t0).total_seconds() if end and t0 else math.nan,
                energy_j=_num(a.get("energy_j")), owner=t.user_attrs.get("owner"), source=st.source,
            )  # fmt: skip
            rows.append(row)
    columns = [*_HEAD, *(_param_column(p) for p in params), *_TAIL]
    df = pd.DataFrame(rows, columns=columns)
    numeric = ("M", "N", "K", "median_ms", "min_ms", "max_ms", "iqr_ms", "repeats", "tflops", "gbps", "error",
               "compile_s", "registers", "shared_bytes", "spills", "occupancy", "energy_j", "gflops_per_j")  # fmt: skip
    for c in numeric:
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
            **{c: b[c] if b is not None else math.nan for c in (
                "median_ms", "min_ms", "max_ms", "iqr_ms", "spread", "tflops", "gbps", "intensity",
                "roofline_fraction", "vendor_median_ms", "vendor_ratio", "error", "registers", "energy_j",
                "gflops_per_j")},
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


# --- tuned/ --------------------------------------------------------------------------------------------


def _tuned_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise AutotuneError(f"{path} does not exist; pass a tuned/ directory, one GPU's directory or one .json file")
    files = sorted(path.glob("*.json")) or sorted(path.glob("*/*.json"))
    if not files:
        raise AutotuneError(f"{path} holds no tuned results (<gpu-key>/<kernel>.json)")
    return files


def best(tuned_dir: str | Path, *, ceilings: Mapping[str, float] | None = None) -> Any:
    """The stored winners of a tuned/ directory (every GPU sub-directory and kernel file) as a DataFrame.

    ``tuned_dir`` may also be one GPU's directory or one ``<kernel>.json`` file. One row per entry (GPU,
    kernel, dtype, layout, shape) with its timing, ratio to the vendor library, roofline fraction (for
    GPUs in ``CEILINGS`` or with ``ceilings`` given) and provenance: template and source hashes, versions,
    date, trial count, spec, study and file.
    """
    import pandas as pd

    from .store import read

    rows = []
    for path in _tuned_files(Path(tuned_dir)):
        doc = read(path)
        info = doc.get("gpu") or {}
        gpu = info.get("key") or path.parent.name
        kernel = doc.get("kernel") or path.stem
        for key, e in doc["entries"].items():
            dtype, layout, shape = (key.split("/", 2) + ["", ""])[:3]
            parts = {"kernel": kernel, "dtype": dtype, **_name_parts(f"{kernel}.x.{dtype}.{shape}.0")}
            flops, nbytes = _work(parts)
            intensity = flops / nbytes if nbytes > 0 else math.nan
            limits = _ceilings_for(gpu, ceilings, dtype) if ceilings is not None or gpu in CEILINGS else None
            roof = _attainable(intensity, limits) if limits and intensity > 0 else math.nan
            params = e.get("params") or {}
            versions = e.get("versions") or {}
            median = _num(e.get("median_ms"))
            rows.append({
                "gpu": gpu, "gpu_name": info.get("name"), "kernel": kernel, "dtype": dtype, "layout": layout,
                "shape": shape, "M": parts.get("M"), "N": parts.get("N"), "K": parts.get("K"),
                "template": e.get("template"), "kernel_name": e.get("kernel_name"),
                "params": ",".join(f"{k}={v}" for k, v in params.items()),
                **{k: _num(e.get(k)) for k in ("median_ms", "min_ms", "max_ms", "iqr_ms")},
                "spread": _num(e.get("iqr_ms")) / median if median > 0 else math.nan,
                "repeats": e.get("repeats"), "tflops": _num(e.get("tflops")), "gbps": _num(e.get("gbps")),
                "intensity": intensity,
                "roofline_fraction": _num(e.get("tflops")) * 1e12 / roof if roof > 0 else math.nan,
                "registers": _num(e.get("registers")), "error": _num(e.get("error")),
                "energy_j": _num(e.get("energy_j")), "gflops_per_j": _num(e.get("gflops_per_j")),
                "energy_method": e.get("energy_method"), "pareto_points": len(e.get("pareto") or []),
                "tolerance": _num(e.get("tolerance")), "verified": e.get("verified"),
                "vendor": e.get("vendor"), "vendor_median_ms": _num(e.get("vendor_median_ms")),
                "vendor_ratio": _num(e.get("vendor_ratio")), "trials": e.get("trials"), "study": e.get("study"),
                "spec": e.get("spec"), "template_hash": e.get("template_hash"), "source_hash": e.get("source_hash"),
                **{k: versions.get(k) for k in ("cuda_driver", "cuda_runtime", "nvrtc", "cupy")},
                "date": e.get("date"), "file": str(path),
            })  # fmt: skip
    return pd.DataFrame(rows)


# --- compare ---------------------------------------------------------------------------------------------

_SUMMARY = ["gpu", "kernel", "dtype", "layout", "shape", "template", "kernel_name", "median_ms", "tflops"]


def _is_tuned(source: str | Path) -> bool:
    text = str(source)
    if "://" in text:
        return False
    path = Path(text)
    if path.is_file():
        return path.suffix == ".json"
    if path.is_dir() and not any(path.rglob("*.journal")):
        return bool(list(path.glob("*.json")) or list(path.glob("*/*.json")))
    return False


def _config_summary(source: str, kernel_name: str) -> Any:
    """One configuration's measurements per shape in a run, by its kernel name (the fastest if repeated)."""
    df = trials(source)
    df = df[(df["kernel_name"] == kernel_name) & (df["status"] == "complete")]
    if df.empty:
        raise AutotuneError(f"{source} has no complete trial of {kernel_name}")
    df = df.sort_values("median_ms").drop_duplicates(["gpu", "kernel", "dtype", "shape"])
    return df.assign(layout=None, gpu=df["gpu"].fillna(df["run"]))[_SUMMARY]


_CONFIG_REF = re.compile(r"(?P<source>.+)@(?P<kernel>[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+)")


def config_ref(text: str) -> tuple[str, str] | None:
    """``runs/gemm@gemm_simt_bm128_...`` -> (source, kernel name); None for a plain source, including a URL
    with a user (``postgresql://tuner@db/autotune``): a kernel name has no ``/``, ``:`` or ``.``."""
    m = _CONFIG_REF.fullmatch(text)
    return (m["source"], m["kernel"]) if m else None


def _summary(source: str | Path) -> Any:
    """Best per shape of a run (journal, runs/ directory, URL) or of tuned results (directory or file);
    ``SOURCE@KERNEL_NAME`` picks one configuration of a run instead of its best."""
    ref = config_ref(str(source))
    if ref is not None:
        return _config_summary(*ref)
    if _is_tuned(source):
        return best(source)[_SUMMARY]
    df = best_per_shape(trials(source))
    df = df[df["complete"] > 0].assign(gpu=df["gpu"].fillna(df["run"]))
    return df[_SUMMARY]


def compare(a: str | Path, b: str | Path) -> Any:
    """Two runs, two GPUs' tuned results, or two configurations, side by side per shape: B over A.

    Each side is a journal, a runs/ directory, an Optuna storage URL, a tuned/ (GPU) directory, a tuned
    .json file, or ``SOURCE@KERNEL_NAME`` for one configuration measured in a run (e.g.
    ``runs/gemm@gemm_simt_bm128_bn256_...``). ``ms_ratio`` above 1: B is slower; ``tflops_ratio`` above 1:
    B is faster.
    """
    sa, sb = _summary(a), _summary(b)
    na, nb = sa["gpu"].nunique(), sb["gpu"].nunique()
    key = ["kernel", "dtype", "shape"]
    if na > 1 and nb > 1:
        key = ["gpu", *key]  # e.g. two tuned/ trees: compare each GPU with itself
    elif na > 1 or nb > 1:
        many = a if na > 1 else b
        raise AutotuneError(f"{many} holds results of several GPUs; pass one GPU's journal or directory")
    if sa["layout"].notna().all() and sb["layout"].notna().all():
        key.insert(-1, "layout")
    merged = sa.merge(sb, on=key, how="outer", suffixes=("_a", "_b"), sort=False)
    merged["ms_ratio"] = merged["median_ms_b"] / merged["median_ms_a"]
    merged["tflops_ratio"] = merged["tflops_b"] / merged["tflops_a"]
    lead = [c for c in ("gpu_a", "gpu_b") if c in merged.columns]
    rest = [c for c in merged.columns if c not in key and c not in lead]
    return merged[[*key, *lead, *rest]]


# --- text, Markdown, HTML ----------------------------------------------------------------------------------


def _display(df: Any, columns: Mapping[str, tuple[str, str]]) -> Any:
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


_BEST_COLUMNS = {
    "run": ("run", ""), "dtype": ("dtype", ""), "layout": ("layout", ""), "shape": ("shape", ""),
    "template": ("template", ""), "kernel_name": ("best", ""),
    "trial": ("trial", ".0f"), "median_ms": ("ms", ".4f"), "spread": ("spread", "%.1"), "tflops": ("TFLOP/s", ".1f"),
    "roofline_fraction": ("of roofline", "%"), "vendor_ratio": ("x vendor", "x"), "error": ("error", ".1e"),
    "energy_j": ("J/launch", ".4g"), "gflops_per_j": ("GFLOP/J", ".1f"), "energy_method": ("energy by", ""),
    "complete": ("complete", "d"),
    "evaluated": ("evaluated", "d"), "trials": ("trials", "d"),
}  # fmt: skip
_TUNED_COLUMNS = {
    "gpu": ("gpu", ""), "kernel": ("kernel", ""), "dtype": ("dtype", ""), "layout": ("layout", ""),
    "shape": ("shape", ""), "kernel_name": ("kernel name", ""), "median_ms": ("ms", ".4f"),
    "tflops": ("TFLOP/s", ".1f"), "roofline_fraction": ("of roofline", "%"), "vendor_median_ms": ("vendor ms", ".4f"),
    "vendor_ratio": ("x vendor", "x"), "error": ("error", ".1e"), "energy_j": ("J/launch", ".4g"),
    "gflops_per_j": ("GFLOP/J", ".1f"), "energy_method": ("energy by", ""), "pareto_points": ("front", "d"),
    "trials": ("trials", ""),
    "date": ("date", ""),
}  # fmt: skip
_ENERGY_COLUMNS = ("energy_j", "gflops_per_j", "energy_method", "pareto_points")
_COMPARE_COLUMNS = {
    "gpu": ("gpu", ""), "kernel": ("kernel", ""), "dtype": ("dtype", ""), "layout": ("layout", ""),
    "shape": ("shape", ""), "gpu_a": ("A", ""), "gpu_b": ("B", ""), "kernel_name_a": ("A kernel", ""),
    "kernel_name_b": ("B kernel", ""), "median_ms_a": ("A ms", ".4f"), "median_ms_b": ("B ms", ".4f"),
    "ms_ratio": ("B/A time", ".3f"), "tflops_a": ("A TFLOP/s", ".1f"), "tflops_b": ("B TFLOP/s", ".1f"),
    "tflops_ratio": ("B/A TFLOP/s", ".3f"),
}  # fmt: skip


def _best_display(best_df: Any) -> Any:
    cols = dict(_BEST_COLUMNS)
    if best_df["run"].nunique() <= 1:
        del cols["run"]
    return _display(best_df, _without_energy(best_df, cols))


def _without_energy(df: Any, columns: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """The columns, less the energy ones when no row has an energy measurement."""
    if "energy_j" in df.columns and df["energy_j"].notna().any():
        return columns
    return {k: v for k, v in columns.items() if k not in _ENERGY_COLUMNS}


def _status_display(counts: Any) -> Any:
    return counts.drop(columns=["run"]) if counts["run"].nunique() <= 1 else counts


def markdown_table(df: Any) -> str:
    """A GitHub-flavoured Markdown table (no ``tabulate`` needed)."""

    def cell(v: Any) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).replace("|", "\\|")

    head = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def _text(df: Any) -> str:
    return df.to_string(index=False) if len(df) else "(none)"


# --- plots ---------------------------------------------------------------------------------------------------


class PlotSkipped(Exception):
    """A plot that cannot be drawn from these data; its message goes into the report as a note."""


def require_matplotlib() -> None:
    """Raise one sentence naming the extra to install when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise AutotuneError(f"the report's plots need matplotlib, which is not installed: {REPORT_EXTRA}") from None


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # Agg, and no pyplot: no global state, no display needed
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _colors(labels: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {label: cmap(i % 10) for i, label in enumerate(dict.fromkeys(labels))}


def _groups(df: Any) -> list[tuple[str, Any]]:
    """(title, rows) per study, in first-seen order; the run is named when there are several."""
    several = df["run"].nunique() > 1
    out = []
    for (run, _), g in df.groupby(["run", "study"], sort=False):
        t = g["template"].iloc[0]
        title = g["shape"].iloc[0] + (f" ({t})" if isinstance(t, str) else "")
        out.append((f"{run}: {title}" if several else title, g))
    return out


def plot_statuses(df: Any) -> Any:
    counts = status_counts(df)
    statuses = [c for c in counts.columns if c not in ("run", "shape", "total")]
    labels = counts["shape"] if counts["run"].nunique() <= 1 else counts["run"] + ": " + counts["shape"]
    fig = _figure(11, 1.2 + 0.45 * len(counts))
    ax = fig.add_subplot()
    left = [0] * len(counts)
    for s in statuses:
        vals = counts[s].tolist()
        ax.barh(labels, vals, left=left, color=STATUS_COLORS.get(s, "#444444"), label=s, edgecolor="white")
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("trials (duplicates not counted)")
    ax.set_title("Trial outcomes per shape")
    ax.legend(loc="lower right", ncols=min(len(statuses), 5), fontsize="small")
    return fig


def plot_progress(df: Any) -> Any:
    groups = _groups(df)
    colors = _colors([title for title, _ in groups])
    fig = _figure(12, 0.6 + 2.8 * len(groups))
    axes = fig.subplots(len(groups), 2, squeeze=False)
    for (title, g), row in zip(groups, axes, strict=True):
        done = g[g["status"] == "complete"]
        if done.empty:
            for ax in row:
                ax.text(0.5, 0.5, "no complete trial", ha="center", va="center", transform=ax.transAxes)
                ax.set_title(title)
            continue
        vendor = g["vendor_median_ms"].dropna()
        flops = 2.0 * g["M"].iloc[0] * g["N"].iloc[0] * g["K"].iloc[0] if g["M"].notna().all() else math.nan
        by_time = done.sort_values("elapsed_s")
        for ax, x, best_y, what in (
            (row[0], done["trial"], done["best_tflops_so_far"], "trial number"),
            (row[1], by_time["elapsed_s"], by_time["tflops"].cummax(), "wall time since the study started (s)"),
        ):
            ax.scatter(x, done.loc[x.index, "tflops"], s=12, alpha=0.45, color=colors[title], label="complete trial")
            ax.step(x, best_y, where="post", color="black", linewidth=1.6, label="best so far")
            if len(vendor) and flops > 0:
                vt = flops / vendor.iloc[0] / 1e9
                ax.axhline(vt, color="#d62728", linestyle="--", linewidth=1.2,
                           label=f"{g['vendor'].dropna().iloc[0]} {vt:.1f} TFLOP/s")  # fmt: skip
            ax.set_xlabel(what)
            ax.set_ylabel("TFLOP/s")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.set_title(f"{title}: best so far vs {what.split(' (')[0]}", fontsize="medium")
        row[0].legend(fontsize="small", loc="best")
    return fig


def param_importances(trials_of_study: Sequence[Any], direction: str = "minimize") -> tuple[dict[str, float], str]:
    """Optuna's parameter importances over the complete trials of one study, and the evaluator's name.

    fANOVA (Optuna's default) when scikit-learn is installed, PED-ANOVA otherwise. PlotSkipped when the
    study has too few complete trials or Optuna cannot compute them.
    """
    import importlib.util

    import optuna
    from optuna.trial import TrialState

    done = [t for t in trials_of_study if t.state == TrialState.COMPLETE]
    if len(done) < MIN_IMPORTANCE_TRIALS:
        raise PlotSkipped(f"{len(done)} complete trials (importance needs {MIN_IMPORTANCE_TRIALS})")
    if importlib.util.find_spec("sklearn") is not None:
        evaluator, name = optuna.importance.FanovaImportanceEvaluator(seed=0), "fANOVA"
    else:
        evaluator, name = optuna.importance.PedAnovaImportanceEvaluator(), "PED-ANOVA"
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = len(done[0].values)  # a time-energy study has two values: rank parameters for the time
            study = optuna.create_study(directions=[direction] * n)
            study.add_trials(done)
            target = (lambda t: t.values[0]) if n > 1 else None
            importances = optuna.importance.get_param_importances(study, evaluator=evaluator, target=target)
    except Exception as exc:  # noqa: BLE001 - any failure of Optuna here costs one plot, not the report
        raise PlotSkipped(f"Optuna could not compute importances ({type(exc).__name__}: {exc})") from None
    finally:
        optuna.logging.set_verbosity(verbosity)
    if not importances:
        raise PlotSkipped("Optuna found no parameter to rank")
    return dict(importances), name


def plot_importance(df: Any, studies: Sequence[_Study], notes: list[str]) -> Any:
    by_key = {(s.run, s.name): s for s in studies}
    results = []
    for title, g in _groups(df):
        st = by_key[(g["run"].iloc[0], g["study"].iloc[0])]
        kept = [t for t in st.trials if "duplicate_of" not in t.user_attrs]
        try:
            imp, evaluator = param_importances(kept)
        except PlotSkipped as exc:
            notes.append(f"parameter importance for {title} skipped: {exc}")
            continue
        results.append((title, imp, evaluator, int((g["status"] == "complete").sum())))
    if not results:
        raise PlotSkipped("no study had enough complete trials for parameter importance")
    ncols = min(2, len(results))
    nrows = math.ceil(len(results) / ncols)
    fig = _figure(12, 0.6 + 3.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (title, imp, evaluator, n) in zip(axes, results, strict=False):
        names = list(imp)[::-1]
        ax.barh(names, [imp[k] for k in names], color="#1f77b4")
        ax.set_xlabel("importance for the median time")
        ax.set_title(f"{title}\n{evaluator} over {n} complete trials", fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(results) :]:
        ax.set_visible(False)
    return fig


def _sort_key(v: Any) -> tuple[str, Any]:
    return (type(v).__name__, v)


def plot_params(title: str, g: Any, params: Sequence[str]) -> Any:
    done = g[g["status"] == "complete"]
    params = [p for p in params if done[p].notna().any()]
    if done.empty or not params:
        raise PlotSkipped(f"{title} has no complete trial")
    ncols = min(4, len(params))
    nrows = math.ceil(len(params) / ncols)
    fig = _figure(12, 0.8 + 2.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for i, (ax, p) in enumerate(zip(axes, params, strict=False)):
        values = sorted(done[p].dropna().unique().tolist(), key=_sort_key)
        data = [done.loc[done[p] == v, "tflops"].dropna().tolist() for v in values]
        ax.boxplot(data, positions=range(len(values)), widths=0.55, showfliers=False)
        for j, ys in enumerate(data):
            jitter = [j + 0.18 * math.sin(7.3 * k) for k in range(len(ys))]  # deterministic spread of the dots
            ax.scatter(jitter, ys, s=10, alpha=0.5, color="#1f77b4")
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set_title(p)
        ax.grid(axis="y", alpha=0.3)
        if i % ncols == 0:
            ax.set_ylabel("TFLOP/s")
    for ax in axes[len(params) :]:
        ax.set_visible(False)
    fig.suptitle(f"{title}: TFLOP/s of the {len(done)} complete trials by parameter value")
    return fig


def plot_roofline(df: Any, ceilings: Mapping[str, float]) -> Any:
    done = df[(df["status"] == "complete") & (df["intensity"] > 0)]
    if done.empty:
        raise PlotSkipped("no complete trial of a shape with a known arithmetic intensity")
    groups = [(title, g[g.index.isin(done.index)]) for title, g in _groups(df)]
    groups = [(t, g) for t, g in groups if len(g)]
    colors = _colors([t for t, _ in groups])
    peak, bw = ceilings["flops"] / 1e12, ceilings["bandwidth"] / 1e12
    ridge = peak / bw
    lo = min(done["intensity"].min(), ridge) / 4
    hi = max(done["intensity"].max(), ridge) * 4
    fig = _figure(11, 6.5)
    ax = fig.add_subplot()
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", linewidth=2, label="roofline")
    ax.annotate(f"{ceilings.get('label', 'compute peak')} {peak:.1f} TFLOP/s", (hi, peak), xytext=(-4, 4),
                textcoords="offset points", ha="right", va="bottom")  # fmt: skip
    # The label follows the slope of y = bw * x as drawn on the log axes.
    ax.text(lo * 1.3, lo * 1.3 * bw * 1.15, f"bandwidth {bw:.1f} TB/s", rotation=math.degrees(math.atan(bw)),
            transform_rotates_text=True, rotation_mode="anchor")  # fmt: skip
    vendor_done = False
    for title, g in groups:
        ax.scatter(g["intensity"], g["tflops"], s=14, alpha=0.35, color=colors[title])
        b = g.loc[g["tflops"].idxmax()]
        label = f"{title}: best {b['tflops']:.1f} TFLOP/s ({100 * b['roofline_fraction']:.0f}% of the roof)"
        ax.scatter([b["intensity"]], [b["tflops"]], s=90, marker="D", color=colors[title], edgecolor="black",
                   label=label)  # fmt: skip
        if b["vendor_median_ms"] > 0 and b["M"] > 0:
            vt = 2.0 * b["M"] * b["N"] * b["K"] / b["vendor_median_ms"] / 1e9
            ax.scatter([b["intensity"]], [vt], s=80, marker="x", color="#d62728", linewidths=2,
                       label=None if vendor_done else f"{b['vendor']} (same shape)")  # fmt: skip
            vendor_done = True
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(max(done["tflops"].min() / 4, 1e-3), peak * 2)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, fewest bytes: A and B read, C written once)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("Roofline: every complete trial (dots), best per shape (diamonds)")
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize="small", loc="lower right")
    return fig


def plot_energy(df: Any) -> Any:
    """Median time vs J per launch of every complete, energy-measured trial per study; the front joined."""
    from .energy import pareto_front

    done = df[(df["status"] == "complete") & (df["energy_j"] > 0) & (df["median_ms"] > 0)]
    if done.empty:
        raise PlotSkipped("no complete trial has an energy measurement")
    groups = [(t, g[g.index.isin(done.index)]) for t, g in _groups(df)]
    groups = [(t, g) for t, g in groups if len(g)]
    colors = _colors([t for t, _ in groups])
    fig = _figure(12, 0.6 + 4.2 * math.ceil(len(groups) / 2))
    axes = fig.subplots(math.ceil(len(groups) / 2), min(2, len(groups)), squeeze=False).ravel()
    for ax, (title, g) in zip(axes, groups, strict=False):
        rows = list(g[["median_ms", "energy_j", "kernel_name"]].itertuples(index=False))
        front = pareto_front(rows, lambda r: r.median_ms, lambda r: r.energy_j)
        ax.scatter(g["median_ms"], g["energy_j"], s=14, alpha=0.4, color=colors[title], label="complete trial")
        ax.step([r.median_ms for r in front], [r.energy_j for r in front], where="post", color="black",
                linewidth=1.2)  # fmt: skip
        ax.scatter([r.median_ms for r in front], [r.energy_j for r in front], s=70, marker="D", color=colors[title],
                   edgecolor="black", label=f"Pareto front ({len(front)})", zorder=3)  # fmt: skip
        ax.set_xlabel("median time per launch (ms)")
        ax.set_ylabel("energy per launch (J)")
        ax.set_title(f"{title}: time vs energy", fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    return fig


def plot_speedup(tuned: Any) -> Any:
    rows = tuned[tuned["vendor_ratio"] > 0]
    if rows.empty:
        raise PlotSkipped("the tuned results hold no vendor times")
    shapes = list(dict.fromkeys(rows["dtype"] + " " + rows["shape"]))
    gpus = list(dict.fromkeys(rows["gpu"]))
    colors = _colors(gpus)
    fig = _figure(12, 5.5)
    ax = fig.add_subplot()
    width = 0.8 / len(gpus)
    for i, gpu in enumerate(gpus):
        r = rows[rows["gpu"] == gpu]
        xs = [shapes.index(s) - 0.4 + width * (i + 0.5) for s in r["dtype"] + " " + r["shape"]]
        bars = ax.bar(xs, r["vendor_ratio"], width=width * 0.95, color=colors[gpu], label=gpu)
        ax.bar_label(bars, labels=[f"{v:.2f}x" for v in r["vendor_ratio"]], padding=2, fontsize="small")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="as fast as the vendor library")
    ax.set_xticks(range(len(shapes)), shapes, rotation=15)
    ax.set_ylabel("vendor time / our time (above 1: faster)")
    vendors = ", ".join(sorted(set(rows["vendor"].dropna())))
    ax.set_title(f"Stored winners vs {vendors or 'the vendor library'}, per shape (from tuned/)")
    ax.set_ylim(0, max(1.2, rows["vendor_ratio"].max() * 1.2))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return fig


# --- the report ---------------------------------------------------------------------------------------------


@dataclass
class Report:
    """What :func:`write_report` made: the frames, the plots' titles, notes on plots skipped, files."""

    trials: Any
    best: Any
    statuses: Any
    tuned: Any | None
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def write_report(
    source: str | Path,
    out: str | Path,
    *,
    tuned_dir: str | Path | None = None,
    ceilings: Mapping[str, float] | None = None,
) -> Report:
    """Write trials.csv, best.csv (best per shape), tuned.csv (with ``tuned_dir``), report.md, report.html.

    report.html is one self-contained page: tables and every plot as an embedded PNG (data URI).
    """
    require_matplotlib()
    studies = _load_studies(source)
    tuned = best(tuned_dir) if tuned_dir is not None else None
    df = _trials_frame(studies, ceilings, _vendor_lookup(tuned_dir, None))
    rep = Report(df, best_per_shape(df), status_counts(df), tuned)
    blocks: list[tuple[str, Any]] = []

    def plot(title: str, draw: Callable[[], Any]) -> None:
        try:
            fig = draw()
        except PlotSkipped as exc:
            rep.notes.append(f"{title}: not drawn: {exc}")
            blocks.append(("note", f"{title}: not drawn: {exc}"))
            return
        rep.plots.append(title)
        blocks.append(("img", (title, _png(fig))))

    blocks.append(("h2", "Best per shape"))
    blocks.append(("table", _best_display(rep.best)))
    blocks.append(("h2", "Trial outcomes per shape"))
    blocks.append(("table", _status_display(rep.statuses)))
    plot("Trial outcomes per shape", lambda: plot_statuses(df))
    blocks.append(("h2", "Search progress"))
    plot("Best so far vs trial number and wall time", lambda: plot_progress(df))
    blocks.append(("h2", "Parameter importance"))
    importance_notes: list[str] = []
    plot("Parameter importance", lambda: plot_importance(df, studies, importance_notes))
    for n in importance_notes:
        rep.notes.append(n)
        blocks.append(("note", n))
    blocks.append(("h2", "Parameters vs performance"))
    params = param_columns(df)
    for title, g in _groups(df):
        plot(f"Parameters vs TFLOP/s, {title}", lambda g=g, title=title: plot_params(title, g, params))
    blocks.append(("h2", "Roofline"))
    for (run, dtype), g in df.groupby(["run", "dtype"], sort=False, dropna=False):
        limits = _ceilings_for(g["gpu"].iloc[0], ceilings, dtype if isinstance(dtype, str) else None)
        what = " ".join(["Roofline", *([run] if df["run"].nunique() > 1 else []),
                         *([dtype] if df["dtype"].nunique() > 1 else [])])  # fmt: skip
        blocks.append(("p", f"Ceilings: {limits['flops'] / 1e12:.1f} TFLOP/s, {limits['bandwidth'] / 1e12:.1f} TB/s."))
        plot(what, lambda g=g, limits=limits: plot_roofline(g, limits))
    if df["energy_j"].notna().any():
        blocks.append(("h2", "Time vs energy"))
        about = "J per launch from NVML's energy counter around a batch of back-to-back launches (hot L2); "
        blocks.append(("p", about + "the Pareto front joins the trials no other beats on both time and energy."))
        plot("Time vs energy per launch, Pareto front", lambda: plot_energy(df))
    blocks.append(("h2", "Speedup vs the vendor library"))
    if tuned is None:
        note = "Speedup vs the vendor library: not drawn: no tuned directory given (--tuned-dir)"
        rep.notes.append(note)
        blocks.append(("note", note))
    else:
        plot("Speedup vs the vendor library per shape", lambda: plot_speedup(tuned))
        blocks.append(("h2", "Stored winners (tuned/)"))
        blocks.append(("table", _display(tuned, _without_energy(tuned, _TUNED_COLUMNS))))

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title = f"autotune report: {source}"
    meta = (
        f"Source: {source}. {len(df)} trials (duplicates not counted) in {df['study'].nunique()} studies. "
        f"Tuned results: {tuned_dir or 'none'}. Made {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}. "
    )
    measured = df["energy_j"].notna().any()
    meta += "Energy: J per launch from NVML (energy_j)." if measured else "Energy: not measured (energy_j is empty)."
    files = {
        "trials.csv": df.to_csv(index=False),
        "best.csv": rep.best.to_csv(index=False),
        **({"tuned.csv": tuned.to_csv(index=False)} if tuned is not None else {}),
        "report.md": _markdown(title, meta, blocks),
        "report.html": _html(title, meta, blocks),
    }
    for name, text in files.items():
        (out / name).write_text(text)
        rep.files.append(out / name)
    return rep


def _markdown(title: str, meta: str, blocks: Sequence[tuple[str, Any]]) -> str:
    lines = [f"# {title}", "", meta, "", "Plots: report.html (one self-contained page).", ""]
    for kind, value in blocks:
        if kind == "h2":
            lines += [f"## {value}", ""]
        elif kind == "table":
            lines += [markdown_table(value), ""]
        elif kind in ("p", "note"):
            lines += [("> " if kind == "note" else "") + value, ""]
        elif kind == "img":
            lines += [f"- plot: {value[0]} (in report.html)", ""]
    return "\n".join(lines)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1260px;
       color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f0f3f6; } td { font-variant-numeric: tabular-nums; }
img { max-width: 100%; display: block; margin: 10px 0; border: 1px solid #eee; }
.note { color: #8a5a00; background: #fff7e0; padding: 4px 8px; border-left: 3px solid #e0b040; }
.meta { color: #555; }
"""


def _html(title: str, meta: str, blocks: Sequence[tuple[str, Any]]) -> str:
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(meta)}</p>',
    ]
    for kind, value in blocks:
        if kind == "h2":
            parts.append(f"<h2>{html.escape(value)}</h2>")
        elif kind == "table":  # long kernel names may break after an underscore (<wbr> is not copied)
            table = value.to_html(index=False, escape=True, border=0)
            parts.append(re.sub(r"<td>([^<]*)</td>", lambda m: "<td>" + m[1].replace("_", "_<wbr>") + "</td>", table))
        elif kind == "p":
            parts.append(f"<p>{html.escape(value)}</p>")
        elif kind == "note":
            parts.append(f'<p class="note">{html.escape(value)}</p>')
        elif kind == "img":
            alt, png = value
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# --- commands (cli.py calls these) ------------------------------------------------------------------------------


def report_command(source: str, tuned_dir: Path | None, out: Path) -> int:
    """``autotune report``: print the tables, write the files, say where they are."""
    rep = write_report(source, out, tuned_dir=tuned_dir)
    print("Best per shape")
    print(_text(_best_display(rep.best)))
    print("\nTrial outcomes per shape")
    print(_text(_status_display(rep.statuses)))
    for note in rep.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"\nwrote {', '.join(str(p) for p in rep.files)} ({len(rep.plots)} plots in report.html)")
    return 0


def compare_command(a: str, b: str, out: Path, show_all: bool = False) -> int:
    """``autotune compare``: print B over A per shape and write compare.csv (every row) and compare.md."""
    df = compare(a, b)
    shown, notes = compare_view(df, show_all, list_winners=config_ref(a) is None and config_ref(b) is None)
    sides = [f"{name}: {src}{_gpu_of(df, f'gpu_{name.lower()}')}" for name, src in (("A", a), ("B", b))]
    print("\n".join(sides) + "\n")
    print(_text(shown))
    for note in notes:
        print(note)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "compare.csv", index=False)
    md = "# autotune compare\n\n" + "".join(f"- {s}\n" for s in sides)
    md += f"\nB/A time above 1: B is slower.\n\n{markdown_table(shown)}\n"
    md += "".join(f"\n{note}\n" for note in notes)
    (out / "compare.md").write_text(md)
    print(f"\nwrote {out / 'compare.csv'}, {out / 'compare.md'}")
    return 0


_COMPARE_LISTED = 3  # shapes named in the line that says which rows were left out


def compare_view(df: Any, show_all: bool = False, list_winners: bool = True) -> tuple[Any, list[str]]:
    """The narrow table people read, and lines saying what it leaves out (compare.csv keeps every column).

    Only shapes measured on both sides, unless ``show_all``; one GPU per side goes in the header, not in a
    column; kernel names, ~70 characters each, are listed below the table for the shapes whose winners differ.
    """
    both = df["median_ms_a"].notna() & df["median_ms_b"].notna()
    rows = df if show_all else df[both]
    notes = []
    for side, other in (("a", "b"), ("b", "a")):
        only = df[df[f"median_ms_{side}"].notna() & df[f"median_ms_{other}"].isna()]
        if len(only) and not show_all:
            names = [_row_label(r) for _, r in only.iterrows()]
            listed = ", ".join(names[:_COMPARE_LISTED]) + (", ..." if len(names) > _COMPARE_LISTED else "")
            what = "1 shape" if len(only) == 1 else f"{len(only)} shapes"
            notes.append(f"omitted: {what} only in {side.upper()} ({listed}); --all shows them")
    columns = {
        k: v for k, v in _COMPARE_COLUMNS.items() if not k.startswith("kernel_name") and k not in ("gpu_a", "gpu_b")
    }
    if "gpu" not in df.columns:
        columns.pop("gpu", None)
    shown = _display(rows, columns)
    same = [_same_kernel(r) for _, r in rows.iterrows()]
    shown["winner"] = ["same" if s else ("differs" if s is False else "-") for s in same]
    differing = [(_row_label(r), r) for (_, r), s in zip(rows.iterrows(), same, strict=True) if s is False]
    if differing and list_winners:  # (two configurations of a run: their names are the sides already)
        notes.append("winners that differ:")
        for label, r in differing:
            notes.append(f"  {label}\n    A {r['kernel_name_a']}\n    B {r['kernel_name_b']}")
    if not both.any():
        notes.insert(0, "no shape is measured on both sides")
    return shown, notes


def _same_kernel(r: Any) -> bool | None:
    a, b = r.get("kernel_name_a"), r.get("kernel_name_b")
    if not isinstance(a, str) or not isinstance(b, str):
        return None
    return a == b


def _row_label(r: Any) -> str:
    gpu, shape = r.get("gpu"), str(r.get("shape"))
    return f"{gpu} {shape}" if isinstance(gpu, str) else shape


def _gpu_of(df: Any, column: str) -> str:
    """`` (nvidia-h200-sm90)`` when that side holds one GPU, else nothing."""
    if column not in df.columns:
        return ""
    gpus = sorted({g for g in df[column] if isinstance(g, str)})
    return f" ({gpus[0]})" if len(gpus) == 1 else ""
