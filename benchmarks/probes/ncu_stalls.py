"""Print the warp-stall breakdown and shared-memory counters of an Nsight Compute report, one metric a line:

    ncu --clock-control none --set full -k regex:winograd --launch-skip 2 --launch-count 1 -o r python3 ...
    ncu --import r.ncu-rep --page raw --csv | python3 benchmarks/probes/ncu_stalls.py

Reads the raw page's CSV (a header row of metric names, a row of units, a row per profiled kernel) and keeps
the metrics whose names contain one of the patterns (default: stall reasons per issued instruction, shared
wavefronts and bank conflicts, instructions, cycles and duration)."""

from __future__ import annotations

import csv
import sys

PATTERNS = (
    "issue_stalled",
    "mem_shared_op_ld",
    "mem_shared_op_st",
    "data_bank_conflicts",
    "smsp__inst_executed.sum",
    "sm__cycles_active.avg",
    "gpu__time_duration.sum",
    "Kernel Name",
)


def main() -> int:
    patterns = sys.argv[1:] or PATTERNS
    rows = list(csv.reader(sys.stdin))
    if len(rows) < 3:
        print("no kernel in the report", file=sys.stderr)
        return 1
    names, units, kernels = rows[0], rows[1], rows[2:]
    for i, name in enumerate(names):
        if not any(p in name for p in patterns):
            continue
        values = [k[i] if i < len(k) else "" for k in kernels]
        if "issue_stalled" in name and all(v in ("", "0", "0.00") for v in values):
            continue
        print(f"{name:<90} {units[i]:<10} " + "  ".join(v[:60] for v in values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
