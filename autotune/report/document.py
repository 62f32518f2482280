"""``write_report``: trials.csv, best.csv, tuned.csv, report.md and one self-contained report.html per source."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .figures import PlotSkipped, groups, png, require_matplotlib
from .frames import best_per_shape, param_columns, status_counts, trials_frame
from .importance import plot_importance
from .plots import plot_energy, plot_params, plot_progress, plot_roofline, plot_speedup, plot_statuses
from .render import Block, markdown, page
from .roofline import MEASURED_DIR, CeilingLookup, ceiling_lookup
from .studies import Study, load_studies
from .tables import TUNED_COLUMNS, best_display, display, status_display, without_energy
from .tuned import best, vendor_lookup


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` made: the frames, the plots' titles, notes on plots skipped, files."""

    trials: Any
    best: Any
    statuses: Any
    tuned: Any | None
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


class _Page:
    """The blocks of the page being made; plots drawn or skipped are recorded in the Report."""

    def __init__(self, rep: Report, draw: bool = True) -> None:
        self.rep = rep
        self.blocks: list[Block] = []
        self.draw = draw  # False: the tables and notes only (write_report's plots=False)

    def add(self, kind: str, value: Any) -> None:
        self.blocks.append((kind, value))

    def note(self, text: str) -> None:
        self.rep.notes.append(text)
        self.blocks.append(("note", text))

    def plot(self, title: str, draw: Callable[[], Any]) -> None:
        if not self.draw:
            return
        try:
            fig = draw()
        except PlotSkipped as exc:
            self.note(f"{title}: not drawn: {exc}")
            return
        self.rep.plots.append(title)
        self.blocks.append(("img", (title, png(fig))))


def write_report(
    source: str | Path,
    out: str | Path,
    *,
    tuned_dir: str | Path | None = None,
    ceilings: Mapping[str, Any] | str | Path | None = None,
    plots: bool = True,
) -> Report:
    """Write trials.csv, best.csv (best per shape), tuned.csv (with ``tuned_dir``), report.md, report.html.

    report.html is one self-contained page: tables and every plot as an embedded PNG (data URI).
    ``ceilings``: the roofline's, as :func:`trials` takes them (see ``report.roofline``). ``plots=False``: the
    tables and notes without a plot (seconds faster; matplotlib not needed).
    """
    if plots:
        require_matplotlib()
    studies = load_studies(source)
    ceiling_of = ceiling_lookup(ceilings)
    tuned = best(tuned_dir, ceilings=ceilings) if tuned_dir is not None else None
    df = trials_frame(studies, ceiling_of, vendor_lookup(tuned_dir, None))
    rep = Report(df, best_per_shape(df), status_counts(df), tuned)
    pg = _Page(rep, draw=plots)
    if not plots:
        pg.note("Plots: not drawn (plots=False, autotune report --no-plots)")
    _search_sections(pg, df, studies)
    _roofline_section(pg, df, ceiling_of)
    _energy_section(pg, df)
    _vendor_section(pg, tuned)
    _write_files(rep, pg.blocks, str(source), tuned_dir, Path(out))
    return rep


def _search_sections(pg: _Page, df: Any, studies: Sequence[Study]) -> None:
    pg.add("h2", "Best per shape")
    pg.add("table", best_display(pg.rep.best))
    pg.add("h2", "Trial outcomes per shape")
    pg.add("table", status_display(pg.rep.statuses))
    pg.plot("Trial outcomes per shape", lambda: plot_statuses(df))
    pg.add("h2", "Search progress")
    pg.plot("Best so far vs trial number and wall time", lambda: plot_progress(df))
    pg.add("h2", "Parameter importance")
    importance_notes: list[str] = []
    pg.plot("Parameter importance", lambda: plot_importance(df, studies, importance_notes))
    for n in importance_notes:
        pg.note(n)
    pg.add("h2", "Parameters vs performance")
    params = param_columns(df)
    for title, g in groups(df):
        pg.plot(f"Parameters vs TFLOP/s, {title}", lambda g=g, title=title: plot_params(title, g, params))


def _roofline_section(pg: _Page, df: Any, ceiling_of: CeilingLookup) -> None:
    pg.add("h2", "Roofline")
    for (run, dtype), g in df.groupby(["run", "dtype"], sort=False, dropna=False):
        dtype = dtype if isinstance(dtype, str) else None
        gpu = g["gpu"].iloc[0] if isinstance(g["gpu"].iloc[0], str) else None
        ceiling = ceiling_of(gpu, dtype)
        what = " ".join(["Roofline", *([run] if df["run"].nunique() > 1 else []),
                         *([dtype] if dtype and df["dtype"].nunique() > 1 else [])])  # fmt: skip
        if ceiling is None:
            pg.note(
                f"{what}: no measured ceiling for {' '.join(x for x in (gpu or run, dtype) if x)}, so no roof and no "
                f"fraction of it; pass ceilings, or put a measured ceilings file in {MEASURED_DIR}/"
            )
        else:
            pg.add("p", f"Ceilings: {ceiling.label} {ceiling.flops / 1e12:.1f} TFLOP/s, bandwidth "
                        f"{ceiling.bandwidth / 1e12:.1f} TB/s (from {ceiling.source}).")  # fmt: skip
        pg.plot(what, lambda g=g, ceiling=ceiling: plot_roofline(g, ceiling))


def _energy_section(pg: _Page, df: Any) -> None:
    if not df["energy_j"].notna().any():
        return
    pg.add("h2", "Time vs energy")
    about = "J per launch from NVML's energy counter around a batch of back-to-back launches (hot L2); "
    pg.add("p", about + "the Pareto front joins the trials no other beats on both time and energy.")
    pg.plot("Time vs energy per launch, Pareto front", lambda: plot_energy(df))


def _vendor_section(pg: _Page, tuned: Any | None) -> None:
    pg.add("h2", "Speedup vs the vendor library")
    if tuned is None:
        pg.note("Speedup vs the vendor library: not drawn: no tuned directory given (--tuned-dir)")
        return
    pg.plot("Speedup vs the vendor library per shape", lambda: plot_speedup(tuned))
    pg.add("h2", "Stored winners (tuned/)")
    pg.add("table", display(tuned, without_energy(tuned, TUNED_COLUMNS)))


def _write_files(rep: Report, blocks: Sequence[Block], source: str, tuned_dir: Any, out: Path) -> None:
    df = rep.trials
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
        **({"tuned.csv": rep.tuned.to_csv(index=False)} if rep.tuned is not None else {}),
        "report.md": markdown(title, meta, blocks),
        "report.html": page(title, meta, blocks),
    }
    for name, text in files.items():
        (out / name).write_text(text)
        rep.files.append(out / name)
