"""How a conv kernel's time splits into a fixed part and a per-step part: one configuration timed on the
same layer with growing input channels C (so growing reduction steps), verified first, by the search's
harness (L2 flushed before every launch). The intercept of time against steps is launch, prologue and
epilogue; the slope is what a step costs.

    python3 benchmarks/probe_conv_steps.py [--layer 1,64,56,56,64] [--channels 8 16 32 64 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from autotune.bench import L2Flusher, TimingPlan
from autotune.device import current_gpu
from autotune.evaluate import Candidate, Settings, evaluate
from autotune.kernels import FAMILIES
from autotune.space import Config
from autotune.verify import tolerance_for

CONV = FAMILIES["conv2d"]
WINNER = dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=2)  # batch-1 56x56 (17:07 UTC)
DEEP = dict(WINNER, PIPE=2, MINB=1)
# batch-1 56x56 winner of 18:11 UTC (13.6 us)
W1811 = dict(TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=8, PIPE=1, MINB=1, DEPTH=2, UNROLL=16, ROUNDS=1)
# ... and of 19:15 UTC (configs/conv_b1.yaml, 13.7 us)
W1915 = dict(TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, ROUNDS=1)
W1938 = dict(TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, PREFETCH=1)
B14 = dict(TILES=32, KB=16, CB=8, KT=8, TT=4, ET=1, SPAD=8, PIPE=1, MINB=1, SPLIT_C=4, DEPTH=2, UNROLL=16, ROUNDS=2,
           CGROUPS=2, PREFETCH=1)  # fmt: skip
CONFIGS = {
    "winner": WINNER,
    "pipe2": DEEP,
    "deep2": dict(DEEP, DEPTH=2),
    "deep4": dict(DEEP, DEPTH=4),
    "deep6": dict(DEEP, DEPTH=6),
    "deep4t16": dict(DEEP, TILES=16, TT=4, DEPTH=4),
    # 33 x 4 = 132 blocks (one per SM) or 66 x 4 = 264 (two) instead of 100 at TILES 32
    "t24": dict(WINNER, TILES=24),
    "t24x384": dict(WINNER, TILES=24, TT=4, MINB=1),
    "t12": dict(WINNER, TILES=12, TT=4),
    "t12k32": dict(WINNER, TILES=12, TT=4, KB=32, KT=8),
    "t24deep": dict(DEEP, TILES=24, DEPTH=3),
    # the GEMMs' channel loop as straight-line code
    "unroll8": dict(WINNER, UNROLL=8),
    "unroll8m1": dict(WINNER, UNROLL=8, MINB=1),
    "cb16u16": dict(WINNER, CB=16, UNROLL=16, MINB=1),  # the 17:51 winner
    # loads DEPTH steps ahead in a ring of register sets (PIPE 1), 32-channel steps
    "reg2": dict(WINNER, CB=16, UNROLL=16, MINB=1, DEPTH=2),
    "reg3cb8": dict(WINNER, UNROLL=16, MINB=1, DEPTH=3),
    "reg2cb8": dict(WINNER, UNROLL=16, MINB=1, DEPTH=2),
    "cb32": dict(WINNER, CB=32, SPAD=0, UNROLL=16, MINB=1),
    "cb32p0": dict(WINNER, CB=32, PIPE=0, UNROLL=16, MINB=1),
    # the epilogue in one round (four output pairs a thread)
    "reg2r1": dict(WINNER, UNROLL=16, MINB=1, DEPTH=2, ROUNDS=1),
    "reg2r2": dict(WINNER, UNROLL=16, MINB=1, DEPTH=2, ROUNDS=2),
    "w1811": W1811,
    # CGROUPS: 2 or 4 chains of channel steps in one block, M summed in the epilogue
    "cg2p0": dict(W1811, PIPE=0, DEPTH=1, CGROUPS=2),  # 768 threads, 2 steps a group
    "cg2p0cb8": dict(W1811, PIPE=0, DEPTH=1, CB=8, CGROUPS=2),  # 768 threads, 4 steps a group
    "cg2p1": dict(W1811, DEPTH=1, UNROLL=0, CGROUPS=2),
    "cg2p1cb8": dict(W1811, DEPTH=1, UNROLL=0, CB=8, CGROUPS=2),
    "cg2p2cb8": dict(W1811, PIPE=2, DEPTH=1, CB=8, CGROUPS=2),
    "cg2t8": dict(W1811, TT=8, CB=8, CGROUPS=2),  # 384 threads, register ring, 4 steps a group
    "cg2t8cb16": dict(W1811, TT=8, DEPTH=1, CGROUPS=2),
    "cg2t8p2": dict(W1811, TT=8, CB=8, PIPE=2, CGROUPS=2),
    "cg4t8p0": dict(W1811, TT=8, CB=8, PIPE=0, DEPTH=1, UNROLL=0, CGROUPS=4),  # 768 threads, 2 steps a group
    # PREFETCH: the GEMMs' next channel's fragments read during this channel's FMAs
    "w1915": W1915,
    "w1915pf": dict(W1915, PREFETCH=1),
    "w1915pfd2": dict(W1915, PREFETCH=1, DEPTH=2),
    "w1811pf": dict(W1811, PREFETCH=1),
    # the stored NCHW winner of 19:38; the 14x14x256 NCHW winner for --layer 1,256,14,14,256
    "w1938": W1938,
    "w1938u16": dict(W1938, UNROLL=16),
    "b14": B14,
    # WSTAGE: the step's filters copied into shared buffers by 16-byte cp.async
    "ws": dict(W1938, WSTAGE=1),
    "wsd3": dict(W1938, WSTAGE=1, DEPTH=3),
    "wsu16": dict(W1938, WSTAGE=1, UNROLL=16),
    "wscb8": dict(W1938, WSTAGE=1, CB=8),
    "wscb8d3": dict(W1938, WSTAGE=1, CB=8, DEPTH=3),
    "wsnopf": dict(W1938, WSTAGE=1, PREFETCH=0),
    "wst32": dict(W1938, WSTAGE=1, TILES=32, TT=8),
    "b14ws": dict(B14, CGROUPS=1, WSTAGE=1),
    # PREFETCH 2: the next two channels' fragments in flight (WSTAGE 2, measured at 00:29 and removed, is in the
    # history and logs/probe_conv_pf2_ws2.log)
    "pf2": dict(W1938, PREFETCH=2),
    "wspf2": dict(W1938, WSTAGE=1, PREFETCH=2),
    # MMA: the 16 GEMMs on tensor cores (3xTF32 mma.sync)
    "mma": dict(W1938, WSTAGE=1, PREFETCH=0, MMA=1),
    "mma_s8": dict(W1938, WSTAGE=1, PREFETCH=0, SPAD=8, MMA=1),
    "mma_d3": dict(W1938, WSTAGE=1, PREFETCH=0, DEPTH=3, MMA=1),
    "mma_t32": dict(W1938, WSTAGE=1, PREFETCH=0, TILES=32, TT=8, MMA=1),  # 100 blocks of 256 threads
    "mma_t16": dict(W1938, WSTAGE=1, PREFETCH=0, TILES=16, MMA=1),  # 196 blocks of 256 threads
    "mma_k32": dict(W1938, WSTAGE=1, PREFETCH=0, TILES=16, KB=32, KT=8, MMA=1),  # 98 blocks of 256 threads
    "mma_cb8": dict(W1938, WSTAGE=1, PREFETCH=0, CB=8, MMA=1),
    "mma_cb32": dict(W1938, WSTAGE=1, PREFETCH=0, CB=32, MMA=1),  # 2 steps
    "mma_cb8d3": dict(W1938, WSTAGE=1, PREFETCH=0, CB=8, DEPTH=3, MMA=1),
    "mma_nows": dict(W1938, PREFETCH=0, MMA=1),
    # LEAN: fewer instructions before the first loads
    "lean": dict(W1938, WSTAGE=1, PREFETCH=0, MMA=1, LEAN=1),
    "lean_pf2": dict(W1938, WSTAGE=1, PREFETCH=2, LEAN=1),
    "lean_pf1": dict(W1938, WSTAGE=1, LEAN=1),
    # LEAN 2: the epilogue's coordinates computed in the prologue (MMA 2, the mmas spread evenly over the warps,
    # and WLEAD, the filter copies further ahead, measured slower at 02:30-02:39 UTC and were removed: in the
    # history and logs/probe_conv_mma2.log, logs/probe_conv_wlead_lean2.log)
    "l2": dict(W1938, WSTAGE=1, PREFETCH=0, MMA=1, LEAN=2),
    "l2_s8": dict(W1938, WSTAGE=1, PREFETCH=0, SPAD=8, MMA=1, LEAN=2),
    # UPAD: U's own row padding (SPAD 0 leaves the A-fragment reads and the U stores 2-way bank conflicted)
    "lean_u8": dict(W1938, WSTAGE=1, PREFETCH=0, MMA=1, LEAN=1, UPAD=8),
    "l2_u8": dict(W1938, WSTAGE=1, PREFETCH=0, MMA=1, LEAN=2, UPAD=8),
    "l2_u4": dict(W1938, WSTAGE=1, PREFETCH=0, MMA=1, LEAN=2, UPAD=4),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layer", default="1,64,56,56,64", help="N,C,H,W,K of a 3x3 stride-1 pad-1 layer")
    ap.add_argument("--channels", nargs="+", type=int, default=[8, 16, 32, 64, 128])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--only", nargs="+", choices=sorted(CONFIGS), default=None, help="configurations to time")
    ap.add_argument("--rounds", type=int, default=1, help="time the list this many times over (interleaved)")
    args = ap.parse_args()
    n, _, h, w, k = (int(v) for v in args.layer.split(","))
    gpu = current_gpu()
    settings = Settings(arch=gpu.arch, tolerance=tolerance_for(args.dtype), max_shared_bytes=gpu.max_shared_per_block,
                        timing=TimingPlan(warmup=3, min_repeats=50, max_repeats=300, target_ms=30.0))  # fmt: skip
    flush = L2Flusher()
    rows = []
    head = f"{'config':<8} " + " ".join(f"{'C=' + str(c):>9}" for c in args.channels) + "   (us, L2 flushed)"
    labels = [label for label in CONFIGS if not args.only or label in args.only]
    times: dict[str, list[list[float]]] = {label: [] for label in labels}
    for rnd in range(args.rounds):
        print(head if args.rounds == 1 else f"round {rnd + 1}: " + head)
        for label in labels:
            params = CONFIGS[label]
            row = []
            for c in args.channels:
                problem = CONV.problem([n, c, h, w, k, 3, 3, 1, 1], args.dtype, args.layout)
                r = evaluate(Candidate("conv2d", "winograd", problem, Config.of(params)), settings, flush)
                us = r.timing.median_ms * 1e3 if r.timing else float("nan")
                row.append(us)
                rows.append({"config": label, "params": params, "C": c, "round": rnd, "status": r.status.value,
                             "us": us, "reason": r.reason})  # fmt: skip
            times[label].append(row)
            print(f"{label:<8} " + " ".join(f"{t:>9.2f}" for t in row))
    if args.rounds > 1:
        print(f"median of {args.rounds} rounds: " + head)
        for label in labels:
            med = [statistics.median(r[i] for r in times[label]) for i in range(len(args.channels))]
            print(f"{label:<8} " + " ".join(f"{t:>9.2f}" for t in med))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
