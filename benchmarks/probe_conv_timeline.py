"""Where a conv kernel's time goes inside one launch: the rendered source of a winograd configuration with a
timestamp (%globaltimer, ns) taken by thread 0 of every block at entry, after each __syncthreads and at the end,
launched after the harness's L2 flush. Prints, over the blocks, the median time from the launch's first block
entry to each stamp, and the span between consecutive stamps.

    python3 benchmarks/probe_conv_timeline.py [--layer 1,64,56,56,64] [--launches 50] NAME=JSON ...

The stamps add a few instructions to thread 0 only; the kernel is verified (with stamps) before it is timed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from autotune.bench import L2Flusher
from autotune.compiler import compile_source
from autotune.device import current_gpu
from autotune.evaluate import Candidate, Settings, load_kernel, make_fixture, render_candidate
from autotune.kernels import FAMILIES
from autotune.space import Config
from autotune.verify import compare, tolerance_for

CONV = FAMILIES["conv2d"]
SLOTS = 64
STAMP = (
    "#define STAMP() do { if (threadIdx.x == 0 && stamp_k_ < 64) { unsigned long long t_; "
    'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); '
    "stamps_[(blockIdx.y * gridDim.x + blockIdx.x) * 64 + stamp_k_] = t_; } ++stamp_k_; } while (0)\n"
)


def instrument(source: str) -> str:
    """Add the stamps buffer to the signature, a stamp at entry, after every __syncthreads, and at the end."""
    sig = "int P, int Q) {"
    assert source.count(sig) == 1, "the kernel signature is not where it was"
    head, body = source.split(sig)
    entry = "return;\n"  # the shared-memory and filter-shape guard: the first statement that can return
    at = body.index(entry) + len(entry)
    body = body[:at] + "  int stamp_k_ = 0;\n  STAMP();\n" + body[at:]
    body = re.sub(r"__syncthreads\(\);", "{ __syncthreads(); STAMP(); }", body)
    end = body.rstrip().rfind("}")
    body = body[:end] + "  STAMP();\n" + body[end:]
    return STAMP + head + "int P, int Q, unsigned long long* __restrict__ stamps_) {" + body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layer", default="1,64,56,56,64", help="N,C,H,W,K of a 3x3 stride-1 pad-1 layer")
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--launches", type=int, default=50)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("configs", nargs="+", help="NAME=JSON winograd parameters")
    args = ap.parse_args()

    import cupy as cp

    n, c, h, w, k = (int(v) for v in args.layer.split(","))
    problem = CONV.problem([n, c, h, w, k, 3, 3, 1, 1], "float32", args.layout)
    gpu = current_gpu()
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for("float32"), max_shared_bytes=gpu.max_shared_per_block)
    fixture = make_fixture("conv2d", problem, seed=7)
    flush = L2Flusher()
    report = {}
    for spec in args.configs:
        name, params = spec.split("=", 1)
        cand = Candidate("conv2d", "winograd", problem, Config.of(json.loads(params)))
        rendered = render_candidate(cand, settings)
        assert rendered.status is None, rendered.reason
        compiled = compile_source(instrument(rendered.source), rendered.kernel_name, gpu.arch)
        assert compiled.ok, compiled.error
        launch = CONV.launch("winograd", cand.config.as_dict(), problem)
        fn = load_kernel(compiled, launch.shared_bytes)
        blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
        stamps = cp.zeros(blocks * SLOTS, dtype=cp.uint64)
        out = CONV.new_output(problem)
        kargs = (*CONV.kernel_args(problem, fixture.inputs, out), stamps)
        fn(launch.grid, launch.block, kargs, shared_mem=launch.shared_bytes)
        verdict = compare(CONV.decode(problem, out), fixture.reference, settings.tolerance)
        assert verdict.ok, verdict.reason
        per_launch = []
        for _ in range(args.launches):
            flush()
            stamps.fill(0)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn(launch.grid, launch.block, kargs, shared_mem=launch.shared_bytes)
            end.record()
            end.synchronize()
            s = cp.asnumpy(stamps).reshape(blocks, SLOTS).astype("int64")
            used = int((s[0] > 0).sum())
            t0 = s[:, 0].min()
            per_launch.append((cp.cuda.get_elapsed_time(start, end) * 1e3, (s[:, :used] - t0) / 1e3))
        used = per_launch[0][1].shape[1]
        med = [statistics.median(float(statistics.median(p[1][:, i])) for p in per_launch) for i in range(used)]
        last = [statistics.median(float(p[1][:, i].max()) for p in per_launch) for i in range(used)]
        first = [statistics.median(float(p[1][:, i].min()) for p in per_launch) for i in range(used)]
        event_us = statistics.median(p[0] for p in per_launch)
        print(f"\n{name}: {rendered.kernel_name}\n  event time {event_us:.2f} us; {blocks} blocks; us from the first "
              f"block's entry (median over launches of the blocks' min / median / max)")  # fmt: skip
        for i in range(used):
            label = "entry" if i == 0 else "end" if i == used - 1 else f"barrier {i}"
            step = med[i] - med[i - 1] if i else 0.0
            print(f"  {label:<11} {first[i]:7.2f} {med[i]:7.2f} {last[i]:7.2f}   +{step:5.2f}")
        report[name] = {"params": json.loads(params), "kernel": rendered.kernel_name, "event_us": event_us,
                        "min": first, "median": med, "max": last}  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"gpu": gpu.name, "layer": args.layer, "layout": args.layout,
                                        "configs": report}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
