"""The GEMM table of benchmarks/README.md, from a tuned_vs_vendor.py run and the tuned file it timed.

Each row is a stored winner as re-timed beside cuBLAS (results/gemm_<gpu>.json): its template with the options that
set it apart from the template's usual kernel, our and cuBLAS's times of the median round, the ratio of the run and
the one stored when it was tuned, and for decode shapes the share of W's read floor. Prints the table; --write puts
it in place of the table in benchmarks/README.md (the one whose header this prints).

    python3 benchmarks/readme_table.py --write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HEADER = (
    "| dtype | layout | shape | template | ours us | cuBLAS us | x cuBLAS | x cuBLAS when tuned "
    "| % of read floor ours / cuBLAS |"
)
DEFAULT_L2 = 256  # wgmma's L2 promotion when a configuration names none


def options(template: str, p: dict[str, Any]) -> list[str]:
    """The parameters worth naming in the table: those that set this kernel apart from the template's usual one."""
    named: list[str] = []
    if template == "wgmma":
        named += ["SWAP_AB"] if p.get("SWAP_AB") else []
        named += ["CONSUMERS 3"] if p.get("CONSUMERS") == 3 else []
        named += ["CLUSTER_M 2"] if p.get("CLUSTER_M") == 2 else []
        named += [f"EPI_BOXES {p['EPI_BOXES']}"] if p.get("EPI_BOXES") else []
        named += ["PINGPONG"] if p.get("PINGPONG") else []
        named += [f"SPLIT {p['SPLIT']}"] if p.get("SPLIT", 1) > 1 else []
        named += [f"BM {p['BM']} x BN {p['BN']}"] if p.get("BN", 64) % 64 else []
        named += [f"L2_PROMOTION {p['L2_PROMOTION']}"] if p.get("L2_PROMOTION", DEFAULT_L2) != DEFAULT_L2 else []
    elif template == "wgmma_decode":
        named += ["STAGE_C"] if p.get("STAGE_C") else []
        named += [f"KBOXES {p['KBOXES']}"] if p.get("KBOXES", 1) > 1 else []
        named += [f"W_PROMOTION {p['W_PROMOTION']}"] if "W_PROMOTION" in p else []
    return named


def dash(value: float | None, spec: str) -> str:
    """A number in ``spec``, or "-" where there is none."""
    return "-" if value is None else format(value, spec)


def table(results: dict[str, Any], entries: dict[str, Any]) -> list[str]:
    """The table's lines: the header, its rule, a row per timed entry (in the results' order)."""
    lines = [HEADER, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["rows"]:
        e = entries.get(f"{r['dtype']}/{r['layout']}/{r['shape']}")
        if e is None or r.get("ms") is None:
            continue  # not stored any more, or not timed: no row
        named = options(e["template"], e["params"])
        template = e["template"] + (f" ({', '.join(named)})" if named else "")
        if r.get("kernel") and r["kernel"] != e.get("kernel_name"):
            template = f"{r['kernel']} (stored since: {template})"  # the results predate the stored entry
        floor = "-"
        if r.get("pct_floor") is not None and r.get("vendor_pct_floor") is not None:
            floor = f"{r['pct_floor']:.0f}% / {r['vendor_pct_floor']:.0f}%"
        vendor_us = None if r.get("vendor_ms") is None else r["vendor_ms"] * 1e3
        lines.append(
            f"| {r['dtype']} | {r['layout']} | {r['shape']} | {template} | {r['ms'] * 1e3:.1f} | "
            f"{dash(vendor_us, '.1f')} | **{dash(r.get('x_vendor'), '.2f')}** | "
            f"{dash(r.get('stored_x_vendor'), '.2f')} | {floor} |"
        )
    return lines


def replace_table(readme: str, lines: list[str]) -> str:
    """``readme`` with the table that starts with HEADER (up to the next blank line) replaced by ``lines``."""
    start = readme.find(HEADER)
    if start < 0:
        raise ValueError("benchmarks/README.md has no GEMM table header to replace")
    end = readme.find("\n\n", start)
    return readme[:start] + "\n".join(lines) + (readme[end:] if end >= 0 else "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks/results/gemm_nvidia-h200-sm90.json")
    ap.add_argument("--tuned", type=Path, default=ROOT / "tuned/nvidia-h200-sm90/gemm.json")
    ap.add_argument("--write", action="store_true", help="replace the table in benchmarks/README.md")
    args = ap.parse_args()
    try:
        results = json.loads(args.results.read_text())
        entries = json.loads(args.tuned.read_text())["entries"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"readme_table: cannot read {args.results} and {args.tuned}: {exc}", file=sys.stderr)
        return 1
    lines = table(results, entries)
    print("\n".join(lines))
    if args.write:
        readme = ROOT / "benchmarks/README.md"
        readme.write_text(replace_table(readme.read_text(), lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
