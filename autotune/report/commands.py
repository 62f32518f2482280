"""``autotune report`` and ``autotune compare``: what cli.py calls after parsing the arguments."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .compare import compare, compare_view, config_ref, gpu_of
from .document import write_report
from .tables import best_display, markdown_table, status_display, text


def report_command(
    source: str,
    tuned_dir: Path | None,
    out: Path,
    ceilings: Mapping[str, Any] | str | Path | None = None,
    plots: bool = True,
) -> int:
    """``autotune report``: print the tables, write the files, say where they are."""
    rep = write_report(source, out, tuned_dir=tuned_dir, ceilings=ceilings, plots=plots)
    print("Best per shape")
    print(text(best_display(rep.best)))
    print("\nTrial outcomes per shape")
    print(text(status_display(rep.statuses)))
    for note in rep.notes:
        print(f"note: {note}", file=sys.stderr)
    drawn = f"{len(rep.plots)} plots in report.html" if plots else "no plots: --no-plots"
    print(f"\nwrote {', '.join(str(p) for p in rep.files)} ({drawn})")
    return 0


def compare_command(a: str, b: str, out: Path, show_all: bool = False) -> int:
    """``autotune compare``: print B over A per shape and write compare.csv (every row) and compare.md."""
    df = compare(a, b)
    shown, notes = compare_view(df, show_all, list_winners=config_ref(a) is None and config_ref(b) is None)
    sides = [f"{name}: {src}{gpu_of(df, f'gpu_{name.lower()}')}" for name, src in (("A", a), ("B", b))]
    print("\n".join(sides) + "\n")
    print(text(shown))
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
