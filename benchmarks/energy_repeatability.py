"""Measure stored configurations' energy per launch twice and check that the two agree (GPU, NVML).

    python3 benchmarks/energy_repeatability.py [--tuned-dir tuned] [--kernel gemm] [--shape 4096x4096x4096]
                                               [--pareto] [--seconds 1.0] [--out benchmarks/results]
    python3 benchmarks/energy_repeatability.py --template simt --shape 4096x4096x4096 \\
                                               --params '{"BM": 128, "BN": 256, ...}'

For each entry of tuned/<this GPU's key>/<kernel>.json (the fastest configuration, and with --pareto every
point of its stored time-energy front), or for the one configuration given with --params: verify it on fresh
random inputs, time it, and measure its J per launch (NVML energy counter around a batch of back-to-back
launches, hot L2); then do all of it again, an independent second batch. Prints a table (kernel, J/launch
run 1 and run 2, relative difference, GFLOP/J, method, GPU, date) and writes
<out>/energy_repeatability_<gpu-key>.json and .csv. Exit status 1 when a pair differs by more than
--tolerance (default 5%), 2 when NVML cannot measure energy on this machine. Read only: no clocks or power
limits are changed.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.build.compiler import nvrtc_version  # noqa: E402
from autotune.core.device import current_gpu  # noqa: E402
from autotune.core.errors import AutotuneError  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.bench import L2Flusher  # noqa: E402
from autotune.measure.energy import EnergyMeter, EnergyPlan  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, evaluate  # noqa: E402
from autotune.measure.verify import tolerance_for  # noqa: E402
from autotune.results.store import read, tuned_file  # noqa: E402
from autotune.tune.search import FINAL_PLAN  # noqa: E402


def targets(args: argparse.Namespace, gpu) -> list[dict]:
    """(dtype, shape, template, params, tolerance, role) of every configuration to measure."""
    if args.params:
        if not (args.template and args.shape and len(args.shape) == 1):
            raise SystemExit("energy_repeatability: --params needs --template and exactly one --shape.")
        params = json.loads(args.params)
        return [dict(dtype=args.dtype, layout="NN", shape=args.shape[0], template=args.template, params=params,
                     tolerance=tolerance_for(args.dtype), role="given")]  # fmt: skip
    path = tuned_file(args.tuned_dir, gpu.key, args.kernel)
    doc = read(path)
    if not doc["entries"]:
        raise SystemExit(f"energy_repeatability: {path} has no entries; tune first or pass --params.")
    out = []
    for key, e in doc["entries"].items():
        dtype, layout, shape = key.split("/")
        if args.shape and shape not in args.shape:
            continue
        out.append(dict(dtype=dtype, layout=layout, shape=shape, template=e["template"], params=e["params"],
                        tolerance=e["tolerance"], role="fastest"))  # fmt: skip
        for p in e.get("pareto") or [] if args.pareto else []:
            if p["params"] != e["params"]:
                out.append(dict(dtype=dtype, layout=layout, shape=shape, template=p.get("template", e["template"]),
                                params=p["params"], tolerance=e["tolerance"], role="pareto"))  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuned-dir", type=Path, default=ROOT / "tuned")
    ap.add_argument("--kernel", default="gemm")
    ap.add_argument("--shape", action="append", help="only this shape (repeatable)")
    ap.add_argument("--pareto", action="store_true", help="also every point of the stored time-energy fronts")
    ap.add_argument("--template", help="with --params: the template of the given configuration")
    ap.add_argument("--params", help="a configuration as JSON instead of the stored entries")
    ap.add_argument("--dtype", default="float32", help="with --params (default float32)")
    ap.add_argument("--seconds", type=float, default=1.0, help="shortest energy batch (default 1 s)")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest relative difference (default 0.05)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()

    gpu = current_gpu()
    meter = EnergyMeter()
    if not meter.available:
        print(f"energy_repeatability: cannot measure energy on this machine: {meter.reason}.", file=sys.stderr)
        return 2
    method = meter.method
    meter.close()
    family = FAMILIES[args.kernel]
    flush = L2Flusher()
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rows = []
    for t in targets(args, gpu):
        problem = family.problem(t["shape"], t["dtype"], t["layout"])
        settings = Settings(arch=gpu.arch, tolerance=t["tolerance"], max_shared_bytes=gpu.max_shared_per_block,
                            timing=FINAL_PLAN, energy=True)  # fmt: skip
        settings = replace(settings, energy_plan=EnergyPlan(seconds=args.seconds))
        cand = Candidate(args.kernel, t["template"], problem, Config.of(t["params"]))
        runs = [evaluate(cand, settings, flush) for _ in range(2)]  # two independent verify+time+energy passes
        j = [r.energy_j for r in runs]
        ok = all(v is not None for v in j)
        rel = abs(j[1] - j[0]) / ((j[0] + j[1]) / 2) if ok else None
        rows.append({
            "kernel": runs[0].kernel_name, "role": t["role"], "dtype": t["dtype"], "shape": t["shape"],
            "status": "/".join(r.status.value for r in runs),
            "ms_1": runs[0].timing and runs[0].median_ms, "ms_2": runs[1].timing and runs[1].median_ms,
            "j_per_launch_1": j[0], "j_per_launch_2": j[1], "rel_diff": rel,
            "gflops_per_j_1": runs[0].gflops_per_j, "gflops_per_j_2": runs[1].gflops_per_j,
            "method": runs[0].energy_method or runs[0].energy_note, "gpu": gpu.name, "date": date,
        })  # fmt: skip

    meta = {
        "gpu": {"name": gpu.name, "key": gpu.key, "arch": gpu.arch, "driver": gpu.driver},
        "versions": {
            "cuda_driver": gpu.driver,
            "cuda_runtime": gpu.runtime,
            "nvrtc": nvrtc_version(),
            "cupy": getattr(sys.modules.get("cupy"), "__version__", None),
        },
        "date": date,
        "method": f"{method}: NVML total-energy counter watched during a batch of back-to-back launches lasting "
        f">= {args.seconds} s (hot L2, doubled until the counter stepped enough); power between the first and last "
        "counter change times the batch's wall time over its launches. Each configuration verified, timed and "
        "measured twice, independently. Read only.",
        "tolerance": args.tolerance,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"energy_repeatability_{gpu.key}"
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    with stem.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["kernel"])
        w.writeheader()
        w.writerows(rows)

    def f(v, s):
        return "-" if v is None else format(v, s)

    print(f"{gpu.name}  {date}  {method}")
    print(f"{'shape':>16} {'role':>8} {'J/launch 1':>11} {'J/launch 2':>11} {'diff':>7} {'GFLOP/J':>8} {'method':>20}"
          "  kernel")  # fmt: skip
    for r in rows:
        diff = 100 * r["rel_diff"] if r["rel_diff"] is not None else None
        print(f"{r['shape']:>16} {r['role']:>8} {f(r['j_per_launch_1'], '.4g'):>11} "
              f"{f(r['j_per_launch_2'], '.4g'):>11} {f(diff, '.2f'):>6}% "
              f"{f(r['gflops_per_j_1'], '.1f'):>8} {str(r['method'])[:20]:>20}  {r['kernel']}")  # fmt: skip
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.csv')}")
    bad = [r for r in rows if r["rel_diff"] is None or r["rel_diff"] > args.tolerance]
    if bad:
        print(f"energy_repeatability: {len(bad)} of {len(rows)} configurations were not measured or differ by more "
              f"than {100 * args.tolerance:.0f}% between the two runs.", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AutotuneError as exc:
        print(f"energy_repeatability: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
