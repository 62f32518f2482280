"""Runtime costs of ``autotune.gemm``: the first call of a fresh process, and the per-call overhead.

    python3 benchmarks/runtime_overhead.py [--out benchmarks/results]   -> <out>/runtime_overhead.json and .csv

1. First call: two fresh processes share an empty cubin cache directory; each creates its operands,
   then times its first ``autotune.gemm`` call up to the synchronized result (lookup, compile or disk
   cache, module load, launch). The first process finds a cold cache, the second a warm one.
2. Per-call overhead on a tiny problem: host time per call of ``autotune.gemm(a, b, out=c)`` against a
   bare ``cupy.RawKernel`` launch of the same kernel source with pre-built arguments. Calls are timed in
   bursts of 100 (then synchronized, untimed) so the launch queue never fills and host time is measured.
3. The torch drop-in (``benchmarks/dropin_overhead.py``): host time per call of ``autotune.torch.optimize(layer)``
   minus torch's own layer, eager, on host-bound problems (served by our kernels: AUTOTUNE_VENDOR=0 here).
Goals (issue: runtime): first call with a warm disk cache <= 50 ms; overhead <= 10 us per call; (issue 25) the
drop-in adds at most about 5 us of host time per call.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST_CALL = """
import time, cupy as cp, numpy as np
a = cp.random.standard_normal(({m}, {k}), dtype=cp.float32); b = cp.random.standard_normal(({k}, {n}), dtype=cp.float32)
cp.cuda.Device().synchronize()
t_import = time.perf_counter()
import autotune
t0 = time.perf_counter()
c = autotune.gemm(a, b)
cp.cuda.Device().synchronize()
t1 = time.perf_counter()
ref = a.astype(cp.float64) @ b.astype(cp.float64)
err = float(cp.linalg.norm(c - ref) / cp.linalg.norm(ref))
step = autotune.load("gemm", M={m}, N={n}, K={k}).provenance["step"]
print((t1 - t0) * 1e3, err, step, (t0 - t_import) * 1e3)
"""


def first_call(shape: tuple[int, int, int], cache: str) -> tuple[float, float, str, float]:
    m, n, k = shape
    env = {
        **os.environ,
        "AUTOTUNE_CACHE_DIR": cache,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    out = subprocess.run([sys.executable, "-c", FIRST_CALL.format(m=m, n=n, k=k)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    return float(out[0]), float(out[1]), out[2], float(out[3])


def per_call_us(fn, bursts: int = 300, burst: int = 100) -> float:
    import cupy as cp

    times = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        t1 = time.perf_counter()
        cp.cuda.Device().synchronize()
        times.append((t1 - t0) / burst * 1e6)
    return statistics.median(times)


def _dropin_rows() -> list[dict]:
    """The drop-in's host time per call and what it adds over torch's own layer (goal: about 5 us at most)."""
    try:
        from dropin_overhead import gpu_rows  # beside this script; needs torch
    except ImportError:
        print("torch is not importable: the drop-in's added host time is not measured")
        return []
    return [{"measure": f"drop-in host per call, {r['what']}", "shape": r["case"], "value": r["host_us"], "unit": "us",
             "added_us": r.get("added_us")} for r in gpu_rows()]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    # This measures our launch path: serve our kernels even where the vendor would win (AUTOTUNE_VENDOR=0).
    os.environ.setdefault("AUTOTUNE_VENDOR", "0")

    import cupy as cp
    import numpy as np

    import autotune
    from autotune.build.compiler import nvrtc_version
    from autotune.build.templates import render
    from autotune.core.device import current_gpu

    gpu = current_gpu()
    rows = []
    for shape in [(4096, 4096, 4096), (256, 256, 256)]:
        with tempfile.TemporaryDirectory() as cache:
            cold = first_call(shape, cache)
            warm = first_call(shape, cache)
        for label, (ms, err, step, import_ms) in (("cold cache", cold), ("warm cache", warm)):
            rows.append({"measure": f"first call, {label}", "shape": "x".join(map(str, shape)), "value": ms,
                         "unit": "ms", "lookup": step, "rel_error": err, "import_autotune_ms": import_ms})  # fmt: skip

    m = n = k = 64
    a = cp.random.standard_normal((m, k), dtype=cp.float32)
    b = cp.random.standard_normal((k, n), dtype=cp.float32)
    c = cp.empty((m, n), dtype=cp.float32)
    launcher = autotune.load("gemm", M=m, N=n, K=k)
    autotune.gemm(a, b, out=c)
    rendered = render("gemm", launcher.choice.template, launcher.choice.params, launcher.problem)
    raw = cp.RawKernel(rendered.source, rendered.kernel_name, options=("-std=c++17",))
    if launcher._shared > 48 * 1024:
        raw.max_dynamic_shared_size_bytes = launcher._shared
    raw_args = (a, b, c, np.int32(m), np.int32(n), np.int32(k), np.float32(1.0), np.float32(0.0))
    grid, block, shared = launcher._grid, launcher._block, launcher._shared
    raw(grid, block, raw_args, shared_mem=shared)
    cp.cuda.Device().synchronize()
    bare = per_call_us(lambda: raw(grid, block, raw_args, shared_mem=shared))
    ours = per_call_us(lambda: autotune.gemm(a, b, out=c))
    loaded = per_call_us(lambda: launcher(a, b, c))
    rows += [
        {"measure": "per call, bare cupy.RawKernel", "shape": "64x64x64", "value": bare, "unit": "us"},
        {"measure": "per call, autotune.gemm", "shape": "64x64x64", "value": ours, "unit": "us"},
        {"measure": "per call, autotune.load(...) launcher", "shape": "64x64x64", "value": loaded, "unit": "us"},
        {"measure": "overhead of autotune.gemm over bare", "shape": "64x64x64", "value": ours - bare, "unit": "us"},
    ]
    from dropin_overhead import rows as host_rows  # beside this script

    for r in host_rows(20000):  # host time of each serving path, the drop-in's per-call cost
        rows.append({"measure": f"host per call, {r['what']}", "shape": "16x64x64 fp16", "value": r["host_us"],
                     "unit": "us", "gpu_us": r["gpu_us"]})  # fmt: skip
    rows += _dropin_rows()
    meta = {"gpu": gpu.name, "gpu_key": gpu.key, "versions": {"cupy": cp.__version__, "cuda_runtime": gpu.runtime,
            "cuda_driver": gpu.driver, "nvrtc": nvrtc_version()},
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runtime_overhead.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    with (args.out / "runtime_overhead.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["gpu", "date", *dict.fromkeys(k for r in rows for k in r)])
        w.writeheader()
        w.writerows({"gpu": gpu.name, "date": meta["date"], **r} for r in rows)
    print(f"{gpu.name}  cupy {cp.__version__}  {meta['date']}")
    for r in rows:
        extra = ""
        if "lookup" in r:
            extra = (
                f"  ({r['lookup']}, rel. error {r['rel_error']:.1e}; import autotune {r['import_autotune_ms']:.0f} ms)"
            )
        if r.get("added_us") is not None:
            extra = f"  (added over torch: {r['added_us']:+.2f} us)"
        print(f"{r['measure']:<40} {r['shape']:>15} {r['value']:9.2f} {r['unit']}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
