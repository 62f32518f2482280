"""Verify one configuration, then launch it a few times: a target for a profiler (Nsight Compute, nsys).

    python3 benchmarks/probes/launch_config.py gemm skinny_tc 64x4096x4096 '{"WARPS": 4, "CW": 1, "MB": 64, ...}'
    ncu --clock-control none --set full -k regex:skinny_tc --launch-skip 3 --launch-count 1 -o r \\
        python3 benchmarks/probes/launch_config.py gemm skinny_tc 64x4096x4096 '{...}'

Prints the verification verdict and the median time of the search's harness (L2 flushed before each launch).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel")
    ap.add_argument("template")
    ap.add_argument("shape")
    ap.add_argument("params", type=json.loads)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="NN")
    args = ap.parse_args()

    from autotune.bench import TimingPlan
    from autotune.device import current_gpu
    from autotune.evaluate import Candidate, Settings, evaluate
    from autotune.kernels import FAMILIES
    from autotune.space import Config
    from autotune.verify import tolerance_for

    gpu = current_gpu()
    problem = FAMILIES[args.kernel].problem(args.shape, args.dtype, args.layout)
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for(args.dtype), max_shared_bytes=gpu.max_shared_per_block,
                        timing=TimingPlan(warmup=2, min_repeats=5, max_repeats=5, target_ms=1.0))  # fmt: skip
    r = evaluate(Candidate(args.kernel, args.template, problem, Config.of(args.params)), settings)
    ms = r.timing.median_ms if r.timing else float("nan")
    print(f"{r.kernel_name}: {r.status.value} {r.reason or ''} error {r.error} median {ms * 1e3:.2f} us")
    return 0 if r.timing else 1


if __name__ == "__main__":
    raise SystemExit(main())
