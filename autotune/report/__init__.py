"""Tables and plots for people.

``final_table`` and ``compile_table`` print what ``autotune run`` just did. The rest reads what runs left
behind: :func:`trials` (every non-duplicate trial of a journal, a runs/ directory or an Optuna storage URL,
one DataFrame row each), :func:`best` (the stored winners of tuned/), :func:`compare` (two runs or two GPUs
side by side) and :func:`write_report` (CSV, Markdown and one self-contained HTML page with plots).

pandas and Optuna load when these are called, matplotlib only when a plot is drawn (``autotune[report]``).
Roofline ceilings are never assumed: see :mod:`autotune.report.roofline`.

Modules, in the order data flows: ``studies`` (reading journals and storages), ``roofline`` (a problem's
work, a GPU's ceilings), ``tuned`` (tuned/ as a frame), ``frames`` (trials as frames), ``tables`` (text and
Markdown), ``figures`` / ``plots`` / ``importance`` (matplotlib), ``render`` (Markdown and HTML pages),
``document`` (``write_report``), ``compare``, ``commands`` (what the CLI calls).

Example::

    from autotune.report import trials
    df = trials("runs/gemm", tuned_dir="tuned")
    df[df.status == "complete"].groupby("shape").tflops.max()
"""

from __future__ import annotations

from .commands import compare_command, report_command
from .compare import compare, compare_view, config_ref
from .document import Report, write_report
from .figures import REPORT_EXTRA, PlotSkipped, require_matplotlib
from .frames import STATUS_ORDER, best_per_shape, name_parts, param_columns, status_counts, trials
from .importance import MIN_IMPORTANCE_TRIALS, param_importances, plot_importance
from .plots import STATUS_COLORS, plot_energy, plot_params, plot_progress, plot_roofline, plot_speedup, plot_statuses
from .roofline import Ceiling, ceiling_lookup, problem_work
from .tables import best_display, compile_table, final_table, markdown_table, problem_name
from .tuned import best

_best_display = best_display  # the name tests of other modules use

__all__ = [
    "MIN_IMPORTANCE_TRIALS",
    "REPORT_EXTRA",
    "STATUS_COLORS",
    "STATUS_ORDER",
    "Ceiling",
    "PlotSkipped",
    "Report",
    "best",
    "best_display",
    "best_per_shape",
    "ceiling_lookup",
    "compare",
    "compare_command",
    "compare_view",
    "compile_table",
    "config_ref",
    "final_table",
    "markdown_table",
    "name_parts",
    "param_columns",
    "param_importances",
    "plot_energy",
    "plot_importance",
    "plot_params",
    "plot_progress",
    "plot_roofline",
    "plot_speedup",
    "plot_statuses",
    "problem_name",
    "problem_work",
    "report_command",
    "require_matplotlib",
    "status_counts",
    "trials",
    "write_report",
]
