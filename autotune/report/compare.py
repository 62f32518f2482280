"""Two runs, two GPUs' tuned results, or two configurations of a run, side by side per shape (B over A)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError
from .frames import best_per_shape, trials
from .tables import display
from .tuned import best

_SUMMARY = ["gpu", "kernel", "dtype", "layout", "shape", "template", "kernel_name", "median_ms", "tflops"]
_CONFIG_REF = re.compile(r"(?P<source>.+)@(?P<kernel>[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+)")
_COMPARE_LISTED = 3  # shapes named in the line that says which rows were left out
COMPARE_COLUMNS = {
    "gpu": ("gpu", ""), "kernel": ("kernel", ""), "dtype": ("dtype", ""), "layout": ("layout", ""),
    "shape": ("shape", ""), "gpu_a": ("A", ""), "gpu_b": ("B", ""), "kernel_name_a": ("A kernel", ""),
    "kernel_name_b": ("B kernel", ""), "median_ms_a": ("A ms", ".4f"), "median_ms_b": ("B ms", ".4f"),
    "ms_ratio": ("B/A time", ".3f"), "tflops_a": ("A TFLOP/s", ".1f"), "tflops_b": ("B TFLOP/s", ".1f"),
    "tflops_ratio": ("B/A TFLOP/s", ".3f"),
}  # fmt: skip


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


def _omitted(df: Any) -> list[str]:
    """One line per side naming the shapes only that side measured."""
    notes = []
    for side, other in (("a", "b"), ("b", "a")):
        only = df[df[f"median_ms_{side}"].notna() & df[f"median_ms_{other}"].isna()]
        if len(only):
            names = [row_label(r) for _, r in only.iterrows()]
            listed = ", ".join(names[:_COMPARE_LISTED]) + (", ..." if len(names) > _COMPARE_LISTED else "")
            what = "1 shape" if len(only) == 1 else f"{len(only)} shapes"
            notes.append(f"omitted: {what} only in {side.upper()} ({listed}); --all shows them")
    return notes


def compare_view(df: Any, show_all: bool = False, list_winners: bool = True) -> tuple[Any, list[str]]:
    """The narrow table people read, and lines saying what it leaves out (compare.csv keeps every column).

    Only shapes measured on both sides, unless ``show_all``; one GPU per side goes in the header, not in a
    column; kernel names, ~70 characters each, are listed below the table for the shapes whose winners differ.
    """
    both = df["median_ms_a"].notna() & df["median_ms_b"].notna()
    rows = df if show_all else df[both]
    notes = [] if show_all else _omitted(df)
    columns = {
        k: v for k, v in COMPARE_COLUMNS.items() if not k.startswith("kernel_name") and k not in ("gpu_a", "gpu_b")
    }
    if "gpu" not in df.columns:
        columns.pop("gpu", None)
    shown = display(rows, columns)
    same = [_same_kernel(r) for _, r in rows.iterrows()]
    shown["winner"] = ["same" if s else ("differs" if s is False else "-") for s in same]
    differing = [(row_label(r), r) for (_, r), s in zip(rows.iterrows(), same, strict=True) if s is False]
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


def row_label(r: Any) -> str:
    """A compare row's name: its shape, after its GPU when the rows are per GPU."""
    gpu, shape = r.get("gpu"), str(r.get("shape"))
    return f"{gpu} {shape}" if isinstance(gpu, str) else shape


def gpu_of(df: Any, column: str) -> str:
    """`` (nvidia-h200-sm90)`` when that side holds one GPU, else nothing."""
    if column not in df.columns:
        return ""
    gpus = sorted({g for g in df[column] if isinstance(g, str)})
    return f" ({gpus[0]})" if len(gpus) == 1 else ""
