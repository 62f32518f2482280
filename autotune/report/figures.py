"""What every plot shares: matplotlib loaded on demand (Agg, no pyplot), PNG bytes, colours, groups per study."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from ..core.errors import AutotuneError

REPORT_EXTRA = "pip install 'autotune[report]'"


class PlotSkipped(Exception):
    """A plot that cannot be drawn from these data; its message goes into the report as a note."""


def require_matplotlib() -> None:
    """Raise one sentence naming the extra to install when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise AutotuneError(f"the report's plots need matplotlib, which is not installed: {REPORT_EXTRA}") from None


def figure(width: float, height: float) -> Any:
    """A matplotlib Figure on an Agg canvas: no global state, no display needed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png(fig: Any) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def colors(labels: Sequence[str]) -> dict[str, Any]:
    """One tab10 colour per distinct label, in first-seen order."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {label: cmap(i % 10) for i, label in enumerate(dict.fromkeys(labels))}


def groups(df: Any) -> list[tuple[str, Any]]:
    """(title, rows) per study, in first-seen order; the run is named when there are several."""
    several = df["run"].nunique() > 1
    out = []
    for (run, _), g in df.groupby(["run", "study"], sort=False):
        t = g["template"].iloc[0]
        title = g["shape"].iloc[0] + (f" ({t})" if isinstance(t, str) else "")
        out.append((f"{run}: {title}" if several else title, g))
    return out
