"""Warp samples of an Nsight Compute source-page CSV by region of the SASS, cut at each BAR.SYNC, with the top
stall reasons per region, the most sampled instructions and the shared-memory bank conflicts by instruction:

    ncu --clock-control none -k regex:NAME --launch-skip 2 --launch-count 1 --section SourceCounters \
        --section WarpStateStats -o rep python3 benchmarks/probes/launch_config.py KERNEL TEMPLATE SHAPE 'JSON'
    ncu -i rep.ncu-rep --page source --print-source sass --csv > src.csv
    python3 benchmarks/probes/ncu_regions.py src.csv
"""

from __future__ import annotations

import collections
import csv
import sys


def num(x: str) -> float:
    try:
        return float(x)
    except ValueError:
        return 0.0


def main() -> int:
    rows = list(csv.reader(open(sys.argv[1])))
    hdr = rows[1]
    data = [dict(zip(hdr, r, strict=True)) for r in rows[2:] if len(r) == len(hdr)]
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    regions, cur = [], []
    for d in data:
        cur.append(d)
        if "BAR.SYNC" in d["Source"]:
            regions.append(cur)
            cur = []
    regions.append(cur)
    total = sum(num(d["# Samples"]) for d in data)
    print(f"{total:.0f} samples, {sum(num(d['Instructions Executed']) for d in data):.0f} warp instructions executed")
    for k, reg in enumerate(regions):
        s = sum(num(d["# Samples"]) for d in reg)
        ie = sum(num(d["Instructions Executed"]) for d in reg)
        exc = sum(num(d["L1 Wavefronts Shared Excessive"]) for d in reg)
        st: collections.Counter[str] = collections.Counter()
        for d in reg:
            for h in stalls:
                st[h[6:]] += num(d[h])
        top = ", ".join(f"{a} {int(b)}" for a, b in st.most_common(6))
        print(f"region {k}: {len(reg)} SASS, {s:.0f} samples ({100 * s / total:.1f}%), {ie:.0f} executed, "
              f"{exc:.0f} excess shared wavefronts | {top}")  # fmt: skip
    print("most sampled instructions:")
    for d in sorted(data, key=lambda d: -num(d["# Samples"]))[:15]:
        st = collections.Counter({h[6:]: num(d[h]) for h in stalls})
        why = ", ".join(f"{a} {int(b)}" for a, b in st.most_common(2))
        print(f"  {d['Address'][-5:]} {num(d['# Samples']):5.0f} {d['Source'].strip()[:60]:60} {why}")
    print("most excess shared wavefronts (bank conflicts):")
    for d in sorted(data, key=lambda d: -num(d["L1 Wavefronts Shared Excessive"]))[:8]:
        exc, all_ = num(d["L1 Wavefronts Shared Excessive"]), num(d["L1 Wavefronts Shared"])
        print(f"  {d['Address'][-5:]} {exc:8.0f} of {all_:8.0f}  {d['Source'].strip()[:70]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
