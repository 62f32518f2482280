"""The report's blocks as Markdown and as one self-contained HTML page (plots as embedded PNG data URIs).

A block is (kind, value): ("h2", title), ("p", text), ("note", text), ("table", DataFrame) or
("img", (title, PNG bytes)).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from typing import Any

from .tables import markdown_table

Block = tuple[str, Any]

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


def markdown(title: str, meta: str, blocks: Sequence[Block]) -> str:
    """report.md: the tables and notes; plots are named, and drawn in report.html."""
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


def _html_block(kind: str, value: Any) -> str:
    if kind == "h2":
        return f"<h2>{html.escape(value)}</h2>"
    if kind == "table":  # long kernel names may break after an underscore (<wbr> is not copied)
        table = value.to_html(index=False, escape=True, border=0)
        return re.sub(r"<td>([^<]*)</td>", lambda m: "<td>" + m[1].replace("_", "_<wbr>") + "</td>", table)
    if kind == "p":
        return f"<p>{html.escape(value)}</p>"
    if kind == "note":
        return f'<p class="note">{html.escape(value)}</p>'
    if kind == "img":
        alt, png = value
        data = base64.b64encode(png).decode("ascii")
        return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
    raise ValueError(f"unknown report block kind {kind!r}")


def page(title: str, meta: str, blocks: Sequence[Block]) -> str:
    """report.html: one page with no external resource (no scripts, links or remote images)."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(meta)}</p>',
        *(_html_block(kind, value) for kind, value in blocks),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
