"""The report's plots, each from a :func:`trials` frame (or :func:`best` for the speedup): one matplotlib Figure
per call, or :class:`PlotSkipped` saying why these data cannot make it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .figures import PlotSkipped, colors, figure, groups
from .frames import status_counts
from .roofline import Ceiling

STATUS_COLORS = {
    "complete": "#2a9d4b", "pruned": "#f0a030", "invalid": "#b0b0b0", "compile-failed": "#d62728",
    "verify-failed": "#9467bd", "launch-failed": "#8c564b", "timed-out": "#e377c2", "interrupted": "#17becf",
    "unevaluated": "#dddddd", "running": "#1f77b4",
}  # fmt: skip


def plot_statuses(df: Any) -> Any:
    """Trial outcomes per shape, as stacked horizontal bars."""
    counts = status_counts(df)
    statuses = [c for c in counts.columns if c not in ("run", "shape", "total")]
    labels = counts["shape"] if counts["run"].nunique() <= 1 else counts["run"] + ": " + counts["shape"]
    fig = figure(11, 1.2 + 0.45 * len(counts))
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
    """Per study: TFLOP/s of every complete trial and the best so far, by trial number and by wall time."""
    studies = groups(df)
    palette = colors([title for title, _ in studies])
    fig = figure(12, 0.6 + 2.8 * len(studies))
    axes = fig.subplots(len(studies), 2, squeeze=False)
    for (title, g), row in zip(studies, axes, strict=True):
        done = g[g["status"] == "complete"]
        if done.empty:
            for ax in row:
                ax.text(0.5, 0.5, "no complete trial", ha="center", va="center", transform=ax.transAxes)
                ax.set_title(title)
            continue
        vendor = g["vendor_median_ms"].dropna()
        flops = g["flops"].iloc[0]
        by_time = done.sort_values("elapsed_s")
        for ax, x, best_y, what in (
            (row[0], done["trial"], done["best_tflops_so_far"], "trial number"),
            (row[1], by_time["elapsed_s"], by_time["tflops"].cummax(), "wall time since the study started (s)"),
        ):
            ax.scatter(x, done.loc[x.index, "tflops"], s=12, alpha=0.45, color=palette[title], label="complete trial")
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


def _sort_key(v: Any) -> tuple[str, Any]:
    return (type(v).__name__, v)


def plot_params(title: str, g: Any, params: Sequence[str]) -> Any:
    """TFLOP/s of one study's complete trials by the value of each parameter (box plots with the points)."""
    done = g[g["status"] == "complete"]
    params = [p for p in params if done[p].notna().any()]
    if done.empty or not params:
        raise PlotSkipped(f"{title} has no complete trial")
    ncols = min(4, len(params))
    nrows = math.ceil(len(params) / ncols)
    fig = figure(12, 0.8 + 2.6 * nrows)
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


def _draw_roof(ax: Any, ceiling: Ceiling | None, lo: float, hi: float) -> None:
    if ceiling is None:
        ax.text(0.02, 0.97, "no measured ceiling: no roof drawn, no fraction of it computed", transform=ax.transAxes,
                va="top", color="#8a5a00")  # fmt: skip
        return
    peak, bw = ceiling.flops / 1e12, ceiling.bandwidth / 1e12
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", linewidth=2, label="roofline")
    ax.annotate(f"{ceiling.label} {peak:.1f} TFLOP/s", (hi, peak), xytext=(-4, 4), textcoords="offset points",
                ha="right", va="bottom")  # fmt: skip
    # The label follows the slope of y = bw * x as drawn on the log axes.
    ax.text(lo * 1.3, lo * 1.3 * bw * 1.15, f"bandwidth {bw:.1f} TB/s", rotation=math.degrees(math.atan(bw)),
            transform_rotates_text=True, rotation_mode="anchor")  # fmt: skip


def _draw_bests(ax: Any, studies: list[tuple[str, Any]], palette: dict[str, Any]) -> float:
    """Every complete trial (dots), each study's best (diamond) and the vendor (cross); the highest TFLOP/s."""
    top, vendor_done = 0.0, False
    for title, g in studies:
        ax.scatter(g["intensity"], g["tflops"], s=14, alpha=0.35, color=palette[title])
        b = g.loc[g["tflops"].idxmax()]
        of_roof = "" if math.isnan(b["roofline_fraction"]) else f" ({100 * b['roofline_fraction']:.0f}% of the roof)"
        ax.scatter([b["intensity"]], [b["tflops"]], s=90, marker="D", color=palette[title], edgecolor="black",
                   label=f"{title}: best {b['tflops']:.1f} TFLOP/s{of_roof}")  # fmt: skip
        top = max(top, b["tflops"])
        if b["vendor_median_ms"] > 0 and b["flops"] > 0:
            vt = b["flops"] / b["vendor_median_ms"] / 1e9
            ax.scatter([b["intensity"]], [vt], s=80, marker="x", color="#d62728", linewidths=2,
                       label=None if vendor_done else f"{b['vendor']} (same shape)")  # fmt: skip
            vendor_done, top = True, max(top, vt)
    return top


def plot_roofline(df: Any, ceiling: Ceiling | None) -> Any:
    """Achieved TFLOP/s against arithmetic intensity; the roof only where a ceiling is known."""
    done = df[(df["status"] == "complete") & (df["intensity"] > 0)]
    if done.empty:
        raise PlotSkipped("no complete trial of a shape with a known arithmetic intensity")
    studies = [(title, g[g.index.isin(done.index)]) for title, g in groups(df)]
    studies = [(t, g) for t, g in studies if len(g)]
    span = [done["intensity"].min(), done["intensity"].max()]
    if ceiling is not None:
        span.append(ceiling.flops / ceiling.bandwidth)  # the ridge point
    lo, hi = min(span) / 4, max(span) * 4
    fig = figure(11, 6.5)
    ax = fig.add_subplot()
    _draw_roof(ax, ceiling, lo, hi)
    top = _draw_bests(ax, studies, colors([t for t, _ in studies]))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(max(done["tflops"].min() / 4, 1e-3), 2 * (ceiling.flops / 1e12 if ceiling is not None else top))
    ax.set_xlabel("arithmetic intensity (FLOP / byte: the problem's FLOPs over the fewest bytes it moves)")
    ax.set_ylabel("achieved TFLOP/s")
    what = "Roofline" if ceiling is not None else "Roofline (no measured ceiling)"
    ax.set_title(f"{what}: every complete trial (dots), best per shape (diamonds)")
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize="small", loc="lower right")
    return fig


def plot_energy(df: Any) -> Any:
    """Median time vs J per launch of every complete, energy-measured trial per study; the front joined."""
    from ..measure.energy import pareto_front

    done = df[(df["status"] == "complete") & (df["energy_j"] > 0) & (df["median_ms"] > 0)]
    if done.empty:
        raise PlotSkipped("no complete trial has an energy measurement")
    studies = [(t, g[g.index.isin(done.index)]) for t, g in groups(df)]
    studies = [(t, g) for t, g in studies if len(g)]
    palette = colors([t for t, _ in studies])
    fig = figure(12, 0.6 + 4.2 * math.ceil(len(studies) / 2))
    axes = fig.subplots(math.ceil(len(studies) / 2), min(2, len(studies)), squeeze=False).ravel()
    for ax, (title, g) in zip(axes, studies, strict=False):
        rows = list(g[["median_ms", "energy_j", "kernel_name"]].itertuples(index=False))
        front = pareto_front(rows, lambda r: r.median_ms, lambda r: r.energy_j)
        ax.scatter(g["median_ms"], g["energy_j"], s=14, alpha=0.4, color=palette[title], label="complete trial")
        ax.step([r.median_ms for r in front], [r.energy_j for r in front], where="post", color="black",
                linewidth=1.2)  # fmt: skip
        ax.scatter([r.median_ms for r in front], [r.energy_j for r in front], s=70, marker="D", color=palette[title],
                   edgecolor="black", label=f"Pareto front ({len(front)})", zorder=3)  # fmt: skip
        ax.set_xlabel("median time per launch (ms)")
        ax.set_ylabel("energy per launch (J)")
        ax.set_title(f"{title}: time vs energy", fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    for ax in axes[len(studies) :]:
        ax.set_visible(False)
    return fig


def plot_speedup(tuned: Any) -> Any:
    """Vendor time over ours per stored winner of a :func:`best` frame, one bar per GPU."""
    rows = tuned[tuned["vendor_ratio"] > 0]
    if rows.empty:
        raise PlotSkipped("the tuned results hold no vendor times")
    shapes = list(dict.fromkeys(rows["dtype"] + " " + rows["shape"]))
    gpus = list(dict.fromkeys(rows["gpu"]))
    palette = colors(gpus)
    fig = figure(12, 5.5)
    ax = fig.add_subplot()
    width = 0.8 / len(gpus)
    for i, gpu in enumerate(gpus):
        r = rows[rows["gpu"] == gpu]
        xs = [shapes.index(s) - 0.4 + width * (i + 0.5) for s in r["dtype"] + " " + r["shape"]]
        bars = ax.bar(xs, r["vendor_ratio"], width=width * 0.95, color=palette[gpu], label=gpu)
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
