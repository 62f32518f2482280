"""fp32 GEMM accuracy of what autotune serves against cuBLAS SGEMM, on the same inputs (issue 26).

    python3 benchmarks/fp32_accuracy.py [--shapes 4096x4096x4096 ...] [--out DIR]

For each shape, the kernel ``autotune.load("gemm", dtype="float32", ...)`` serves from the stored winners
(``AUTOTUNE_VENDOR=0``: our kernel even where the vendor would serve; the online choice off) and cuBLAS SGEMM
(``cupy.matmul``, TF32 off, CuPy's default) compute C = A B from the same inputs. Both are compared with a
float64 product of those inputs: the relative Frobenius error (the measure the tuner's fp32 tolerance, 1e-5,
applies to) and the largest element error relative to the largest reference element. Two input kinds, a fresh
seed each: standard normal, and normal values times 2^u with u uniform in [-16, 16] (a wide dynamic range, where
a 3xTF32 split loses the bits a TF32 residual cannot hold). Writes <out>/fp32_accuracy_<gpu-key>.{json,csv} with
the GPU, versions and date inside, and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = ["4096x4096x4096", "8192x8192x8192", "128x4096x4096", "1000x1000x1000", "4095x4097x4093"]
KINDS = ("normal", "wide")
TOLERANCE = 1e-5  # autotune.measure.verify's fp32 tolerance, restated for the table's last column


def inputs(cp: Any, m: int, n: int, k: int, kind: str, seed: int) -> tuple[Any, Any]:
    rng = cp.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=cp.float32)
    b = rng.standard_normal((k, n), dtype=cp.float32)
    if kind == "wide":
        a *= cp.exp2(rng.integers(-16, 17, a.shape).astype(cp.float32))
        b *= cp.exp2(rng.integers(-16, 17, b.shape).astype(cp.float32))
    return a, b


def errors(cp: Any, c: Any, ref: Any) -> tuple[float, float]:
    """(relative Frobenius error, largest element error over the largest reference element) against ref."""
    diff = c.astype(cp.float64) - ref
    fro = float(cp.linalg.norm(diff)) / float(cp.linalg.norm(ref))
    return fro, float(cp.abs(diff).max()) / float(cp.abs(ref).max())


def measure(shape: str, seed: int) -> list[dict[str, Any]]:
    import cupy as cp

    import autotune

    m, n, k = (int(v) for v in shape.split("x"))
    launcher = autotune.load("gemm", dtype="float32", M=m, N=n, K=k, online=False)
    prov = launcher.provenance
    rows = []
    for i, kind in enumerate(KINDS):
        a, b = inputs(cp, m, n, k, kind, seed + i)
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        ours = cp.full((m, n), cp.nan, dtype=cp.float32)
        launcher(a, b, ours)
        cublas = a @ b
        cp.cuda.Device().synchronize()
        (ours_fro, ours_max), (cublas_fro, cublas_max) = errors(cp, ours, ref), errors(cp, cublas, ref)
        rows.append({"shape": shape, "inputs": kind, "served": getattr(launcher, "kernel_name", "vendor"),
                     "template": prov.get("template"), "step": prov.get("step"), "ours_rel_fro": ours_fro,
                     "cublas_rel_fro": cublas_fro, "ours_over_cublas": ours_fro / cublas_fro,
                     "ours_rel_max": ours_max, "cublas_rel_max": cublas_max,
                     "within_fp32_tolerance": ours_fro <= TOLERANCE})  # fmt: skip
    return rows


def metadata() -> dict[str, Any]:
    import cupy as cp

    import autotune
    from autotune.core.device import current_gpu

    gpu = current_gpu()
    versions = {"cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
                "cuda_driver": cp.cuda.runtime.driverGetVersion(), "autotune": autotune.__version__}  # fmt: skip
    return {"gpu": gpu.name, "gpu_key": gpu.key, "versions": versions, "vendor": "cupy.matmul (cuBLAS SGEMM)",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=SHAPES, metavar="MxNxK")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    os.environ["AUTOTUNE_VENDOR"] = "0"  # our stored kernel, not the vendor it may be compared with
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no CuPy or no GPU: one sentence, no traceback
        print(f"benchmarks/fp32_accuracy.py needs CuPy and a CUDA GPU: {exc}")
        return 2
    meta = metadata()
    rows = [r for s in args.shapes for r in measure(s, args.seed)]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"fp32_accuracy_{meta['gpu_key']}"
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0], "gpu", "date"])
        w.writeheader()
        w.writerows({**r, "gpu": meta["gpu"], "date": meta["date"]} for r in rows)
    print(f"{meta['gpu']}  {meta['versions']}  {meta['date']}")
    print(f"{'shape':>16} {'inputs':>7} {'rel. Frobenius error ours / cuBLAS':>36} {'ratio':>6} "
          f"{'max error ours / cuBLAS':>26}  <= 1e-5  served")  # fmt: skip
    for r in rows:
        print(f"{r['shape']:>16} {r['inputs']:>7} {r['ours_rel_fro']:>17.2e} / {r['cublas_rel_fro']:<16.2e} "
              f"{r['ours_over_cublas']:>6.2f} {r['ours_rel_max']:>12.2e} / {r['cublas_rel_max']:<11.2e}  "
              f"{'yes' if r['within_fp32_tolerance'] else 'NO':>7}  {r['served']} ({r['step']})")  # fmt: skip
    print(f"\nwrote {stem}.json and .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
