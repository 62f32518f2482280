"""Re-measure stored winners against the vendor library, in one process, and write the results.

    python3 benchmarks/tuned_vs_vendor.py [--tuned-dir tuned] [--kernel gemm] [--out benchmarks/results] [--quick]

For every entry of tuned/<this GPU's key>/<kernel>.json: verify the stored configuration again on fresh
random inputs, then time it and the vendor library on those same inputs in --rounds interleaved rounds (ours,
the vendor's; the vendor's, ours; ...), each a median of many launches with L2 flushed before each
(``autotune.measure.versus``); the ratio is the median of the rounds' ratios. Print a table and write
<out>/<kernel>_<gpu-key>.json and .csv with the GPU, versions and date inside. --quick times with the search's
short plan (>= 40 ms of repeats) instead of the final one (>= 400 ms, at most 200 launches): a smoke run, noisier.
Decode GEMMs (layout NT, M <= 64: bound by reading W once) also get their read floor, timed the same way in the
same process: a plain streaming read of W's bytes from a clean L2 (``read_floor.flushed_ms``), and each side's
share of it (``pct_floor``: floor time / kernel time).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.build.compiler import nvrtc_version  # noqa: E402
from autotune.build.templates import fits_installed  # noqa: E402
from autotune.core.device import current_gpu  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.bench import L2Flusher  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, prepare  # noqa: E402
from autotune.measure.versus import ROUNDS, summary, versus  # noqa: E402
from autotune.results.store import read, tuned_file  # noqa: E402
from autotune.tune.search import FINAL_PLAN, SEARCH_PLAN  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from read_floor import flushed_ms  # noqa: E402

DECODE_ROWS = 64  # NT GEMMs up to this M are bound by reading W: they get a read floor


def floor_of(problem: Any, layout: str, flush: Any, plan: Any) -> dict[str, Any]:
    """The read floor of a decode GEMM's weight (W, N x K), or nothing for other problems."""
    if layout != "NT" or getattr(problem, "M", DECODE_ROWS + 1) > DECODE_ROWS:
        return {}
    import cupy

    from autotune.kernels.gemm_problem import ITEMSIZE

    words = problem.N * problem.K * ITEMSIZE[problem.dtype] // 4
    w = cupy.random.default_rng(7).integers(0, 1 << 31, words, dtype=cupy.int32)
    ms, verified = flushed_ms(w, flush, plan, pick_plan=SEARCH_PLAN)
    return {"floor_ms": ms, "floor_verified": verified}


def rounds_arg(text: str) -> int:
    """--rounds: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--rounds must be a whole number of at least 1, not {text!r}")
    return int(text)


def selected(entries: dict[str, Any], only: list[str] | None) -> list[tuple[str, Any]]:
    """The (key, entry) pairs to time: those whose key (dtype/layout/shape) matches one of the ``only`` shell
    patterns, or all of them without patterns."""
    return [(k, e) for k, e in entries.items() if not only or any(fnmatch.fnmatchcase(k, pat) for pat in only)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuned-dir", type=Path, default=ROOT / "tuned")
    ap.add_argument("--kernel", default="gemm")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true", help="time with the search's short plan (a smoke run)")
    ap.add_argument("--rounds", type=rounds_arg, default=ROUNDS, help=f"interleaved rounds an entry (default {ROUNDS})")
    ap.add_argument("--only", action="append", metavar="PATTERN",
                    help="time only the entries whose key (dtype/layout/shape) matches this shell pattern, e.g. "
                    "'*/NN/4096x4096x4096' (repeatable; default: every entry)")  # fmt: skip
    args = ap.parse_args()

    import cupy

    gpu = current_gpu()
    plan = SEARCH_PLAN if args.quick else FINAL_PLAN
    path = tuned_file(args.tuned_dir, gpu.key, args.kernel)
    doc = read(path)
    if not doc["entries"]:
        print(f"tuned_vs_vendor: {path} holds no stored {args.kernel} entry for this GPU; tune first.", file=sys.stderr)
        return 1
    family = FAMILIES[args.kernel]
    flush = L2Flusher()
    rows = []
    for key, e in selected(doc["entries"], args.only):
        dtype, layout, label = key.split("/")
        problem = family.problem(label, dtype, layout)
        if not fits_installed(args.kernel, e["template"], e["params"]):
            print(f"{key}: skipped, stored by another version of template {e['template']} (tune it again)")
            continue
        settings = Settings(arch=gpu.arch, tolerance=e["tolerance"], max_shared_bytes=gpu.max_shared_per_block,
                            timing=plan)  # fmt: skip
        v = versus(prepare(Candidate(args.kernel, e["template"], problem, Config.of(e["params"])), settings),
                   settings, flush, rounds=args.rounds)  # fmt: skip
        r, vendor = v.result, v.vendor
        ok = r.ok and r.timing is not None
        floor = floor_of(problem, layout, flush, plan)
        if floor:
            floor["pct_floor"] = 100 * floor["floor_ms"] / r.timing.median_ms if ok else None
            floor["vendor_pct_floor"] = 100 * floor["floor_ms"] / vendor[1].median_ms if vendor else None
        rows.append({
            "dtype": dtype, "layout": layout, "shape": label, "kernel": r.kernel_name, "status": r.status.value,
            "rel_error": r.error, **summary(v),
            "iqr_pct": 100 * r.timing.spread if ok else None, "tflops": r.tflops, "tbps": r.gbps / 1e3 if ok else None,
            "vendor_tflops": problem.flops / vendor[1].median_ms / 1e9 if vendor else None,
            "vendor_tbps": problem.bytes / vendor[1].median_ms / 1e9 if vendor else None,
            "stored_x_vendor": e.get("vendor_ratio"), **floor,
        })  # fmt: skip
    if not rows:
        which = f" matching {' or '.join(args.only)}" if args.only else ""
        print(f"tuned_vs_vendor: no entry of {path}{which} fits the installed templates.", file=sys.stderr)
        return 1

    meta = {
        "gpu": {"name": gpu.name, "key": gpu.key, "arch": gpu.arch, "multiprocessors": gpu.multiprocessors},
        "versions": {
            "cuda_driver": gpu.driver,
            "cuda_runtime": gpu.runtime,
            "nvrtc": nvrtc_version(),
            "cupy": cupy.__version__,
            "torch": getattr(sys.modules.get("torch"), "__version__", None),  # the vendor for conv2d and bf16
        },  # fmt: skip
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "method": "fresh random normal inputs verified against float64; ours and the vendor on those same inputs "
        f"in {args.rounds} interleaved rounds, each the median of repeats filling >= {plan.target_ms:g} ms "
        f"(at most {plan.max_repeats}) of CUDA-event-timed launches with L2 flushed before each; ms: the median "
        "round's, x_vendor: the median of the rounds' ratios",
        "quick": args.quick,
        "only": args.only,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{args.kernel}_{gpu.key}"
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    with stem.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)

    print(f"{gpu.name}  {meta['versions']}  {meta['date']}")
    print(f"{'dtype':>8} {'layout':>6} {'shape':>16} {'status':>9} {'ms':>9} {'TFLOP/s':>8} {'TB/s':>6} "
          f"{'vendor':>8} {'vTB/s':>6} {'x vendor':>9} {'% floor':>8} {'vendor %':>8}  kernel")  # fmt: skip
    for r in rows:
        f = lambda v, s: "-" if v is None else format(v, s)  # noqa: E731
        print(f"{r['dtype']:>8} {r['layout']:>6} {r['shape']:>16} {r['status']:>9} {f(r['ms'], '.4f'):>9} "
              f"{f(r['tflops'], '.1f'):>8} {f(r['tbps'], '.2f'):>6} {f(r['vendor_tflops'], '.1f'):>8} "
              f"{f(r['vendor_tbps'], '.2f'):>6} {f(r['x_vendor'], '.3f'):>9} {f(r.get('pct_floor'), '.1f'):>8} "
              f"{f(r.get('vendor_pct_floor'), '.1f'):>8}  {r['kernel']}")  # fmt: skip
    return 0 if all(r["status"] == "complete" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
