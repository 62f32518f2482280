"""Launch batch-1 56x56x64 fp32 winograd configurations (default: the 17:07 winner and its 4-deep cp.async
variant; or JSON objects given as arguments) a few times, for a profiler:

    ncu --clock-control none -k regex:winograd --launch-count 2 --section WarpStateStats \\
        --section SchedulerStats --section Occupancy --section SpeedOfLight python3 benchmarks/profile_conv_b1.py

Verification runs first (evaluate), so the profiled launches are checked kernels."""

from __future__ import annotations

import json
import sys

from autotune.bench import TimingPlan
from autotune.device import current_gpu
from autotune.evaluate import Candidate, Settings, evaluate
from autotune.kernels import FAMILIES
from autotune.space import Config

CONV = FAMILIES["conv2d"]
WINNER = dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=2)


def main() -> None:
    gpu = current_gpu()
    settings = Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block,
                        timing=TimingPlan(warmup=1, min_repeats=2, max_repeats=3, target_ms=0.1, probe=2))  # fmt: skip
    problem = CONV.problem([1, 64, 56, 56, 64, 3, 3, 1, 1], "float32", "NCHW")
    configs = [json.loads(a) for a in sys.argv[1:]] or [WINNER, dict(WINNER, PIPE=2, MINB=1, DEPTH=4)]
    for params in configs:
        r = evaluate(Candidate("conv2d", "winograd", problem, Config.of(params)), settings)
        print(r.kernel_name, r.status.value, r.timing.median_ms if r.timing else None)


if __name__ == "__main__":
    main()
