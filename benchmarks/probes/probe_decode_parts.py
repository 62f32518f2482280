"""Where a decode kernel's time goes: the stored wgmma_decode winner of each shape timed whole and with one part
left out of its source at a time, beside cuBLAS and W's read floor, in one process, timed as the harness times
(``autotune.measure.bench``: read flush and spin before each launch, median of >= 400 ms of launches).

    python3 benchmarks/probes/probe_decode_parts.py [--shapes 64x4096x4096 16x4096x4096 ...] [--dtype float16]
                                                    [--out DIR]

Variants (text edits of the kernel's rendered source; each edit must match, or the probe stops):
  whole     the stored kernel, verified against float64 before it is timed
  no_x      x's TMA copies left out (a stage expects W's bytes only): W streamed alone, the wgmmas read stale x
  no_mma    the wgmmas left out: the ring streams W and x, the consumers hand stages back without computing
  no_store  the stores of C skipped (a branch on alpha no launch takes): the rest computed as before
  w_only    no_x and no_mma together: the kernel's ring streaming W alone, its own floor
Only "whole" computes C; the others time a part of the work and are not verified. Writes <out>/probe_decode_parts.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from read_floor import flushed_ms  # noqa: E402

from autotune.build.compiler import compile_source  # noqa: E402
from autotune.core.device import current_gpu  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.bench import L2Flusher, time_launches  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, _runner, load_kernel, measure, prepare, time_vendor  # noqa: E402
from autotune.results.store import read, tuned_file  # noqa: E402
from autotune.tune.search import FINAL_PLAN, SEARCH_PLAN  # noqa: E402

GEMM = FAMILIES["gemm"]
X_LOAD = "        tma_load_2d(w + W_STAGE * 2, &xmap, kb * BK, m0, full + stage);  // 64 K x MB rows of x\n"
EDITS = {
    "no_x": [(X_LOAD, ""),
             ("mbar_expect_tx(full + stage, STAGE_BYTES);", "mbar_expect_tx(full + stage, W_STAGE * 2);")],
    "no_mma": [("        wgmma_tile(", "        if (alpha == 12345.f) wgmma_tile(")],
    "no_store": [("*dst = to_t(v);", "if (alpha == 12345.f) *dst = to_t(v);"),
                 ("*dst = to_t(x);", "if (alpha == 12345.f) *dst = to_t(x);")],
}  # fmt: skip
EDITS["w_only"] = EDITS["no_x"] + EDITS["no_mma"]  # the kernel's own ring streaming W and nothing else


def edited(source: str, name: str) -> str:
    """The source with variant ``name``'s edits; every edit's text must occur (store_pair's only with CLUSTER)."""
    for old, new in EDITS[name]:
        if old not in source and not old.endswith("to_t(x);"):
            raise SystemExit(f"probe_decode_parts: the {name} edit found no '{old.strip()}' in the kernel's source")
        source = source.replace(old, new)
    return source


def time_variant(c, settings, flush, source: str) -> float:
    """Median ms of the edited kernel, launched exactly as the harness launches the stored one."""
    cand = c.candidate
    params, problem = cand.config.as_dict(), cand.problem
    compiled = compile_source(source, c.kernel_name, settings.arch)
    if not compiled.ok:
        raise SystemExit(f"probe_decode_parts: an edited {c.kernel_name} failed to compile: {compiled.error[:300]}")
    launch = GEMM.launch(cand.template, params, problem)
    fn = load_kernel(compiled, launch.shared_bytes)
    inputs = GEMM.make_inputs(problem, seed=1)
    scratch = GEMM.new_scratch(cand.template, params, problem)
    args = GEMM.kernel_args(problem, inputs, GEMM.new_output(problem), scratch=scratch)
    return time_launches(_runner(compiled, launch, fn, args, ()), flush, settings.timing).median_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shapes = ["64x4096x4096", "64x14336x4096", "64x4096x14336", "16x4096x4096", "16x14336x4096"]
    ap.add_argument("--shapes", nargs="+", default=shapes)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    import cupy

    gpu = current_gpu()
    entries = read(tuned_file(ROOT / "tuned", gpu.key, "gemm"))["entries"]
    flush, rows = L2Flusher(), []
    for shape in args.shapes:
        e = entries.get(f"{args.dtype}/NT/{shape}")
        if e is None or e["template"] != "wgmma_decode":
            print(f"{shape}: no stored wgmma_decode entry for {args.dtype}; skipped")
            continue
        problem = GEMM.problem(shape, args.dtype, "NT")
        settings = Settings(arch=gpu.arch, tolerance=e["tolerance"], max_shared_bytes=gpu.max_shared_per_block,
                            timing=FINAL_PLAN)  # fmt: skip
        c = prepare(Candidate("gemm", "wgmma_decode", problem, Config.of(e["params"])), settings)
        whole = measure(c, settings, flush)
        if whole.timing is None:
            print(f"{shape}: the stored kernel did not verify ({whole.reason}); skipped")
            continue
        row = {"shape": shape, "kernel": c.kernel_name, "whole_ms": whole.timing.median_ms}
        for name in EDITS:
            row[f"{name}_ms"] = time_variant(c, settings, flush, edited(c.source, name))
        row["vendor_ms"] = time_vendor("gemm", problem, flush, FINAL_PLAN)[1].median_ms
        words = problem.N * problem.K * 2 // 4
        w = cupy.random.default_rng(7).integers(0, 1 << 31, words, dtype=cupy.int32)
        row["floor_ms"] = flushed_ms(w, flush, FINAL_PLAN, pick_plan=SEARCH_PLAN)[0]
        rows.append(row)
        print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": gpu.name, "versions": {"cupy": cupy.__version__, "cuda_driver": gpu.driver},
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "dtype": args.dtype}  # fmt: skip
    (args.out / "probe_decode_parts.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    cols = ("whole", *EDITS, "vendor", "floor")
    print(f"\n{'shape':>14} " + " ".join(f"{c + ' us':>11}" for c in cols) + "  kernel")
    for r in rows:
        print(f"{r['shape']:>14} " + " ".join(f"{1e3 * r[c + '_ms']:>11.2f}" for c in cols) + f"  {r['kernel']}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
