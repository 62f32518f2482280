"""Where a winograd kernel's time goes on the batch-1 56x56x64 layer: the verified kernel, then copies of its
source with one phase cut out, each timed by the search's harness (L2 flushed before every launch).

    python3 benchmarks/ablate_conv_b1.py [--layout NCHW] [--out results.json] ['{"TILES": 24, ...}' ...]

Variants (diagnostic only: a cut kernel computes wrong numbers, so only "full" is verified):
  full        the kernel as tuned
  no_gemm     the 16 GEMMs of every step removed (loads, transforms, barriers and epilogue stay)
  no_global   raw operands made from their addresses instead of loaded (transforms and GEMMs stay)
  gemm_only   the transforms removed, and with them the loads (GEMMs, barriers and epilogue stay)
  skeleton    transforms and GEMMs removed: launch, addressing, barriers and the epilogue
  x_quarter   the input patches of 3 in 4 channels not loaded (zeros instead): what a block would save if the
              4 blocks of a tile group shared their input loads
  v_quarter   the same, and those channels' input transforms replaced by stores of zeros: a block's share of
              the loads and transform arithmetic if a cluster of 4 shared V (less the cluster's barriers and
              remote stores)
  w_fake      (x_fake) the filters' (inputs') raw values made from their addresses instead of loaded
The differences say what each phase costs where the others overlap it; they do not add up exactly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ablation import ablate

from autotune.kernels import FAMILIES

CONV = FAMILIES["conv2d"]
W1915 = dict(TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, ROUNDS=1)

GEMM = "auto gemm = [&](const float* st) {"
TRANSFORM = "auto transform = [&](float* st, auto xv, auto wv) {"
LOAD = "const T v = ok ? *ptr : zero;"
FAKE = "const T v = ok ? __int_as_float(((int)(size_t)ptr & 0x007fffff) | 0x3f800000) : zero;"  # in [1, 2)
W1938 = dict(W1915, DEPTH=2, PREFETCH=1)  # the stored NCHW winner of 19:38
CH = "const bool ch = c0 + xc[j] < C;"
QUARTER = "const bool ch = c0 + xc[j] < C && (xc[j] & 3) == (int)(blockIdx.y & 3);"
XT = "float db[4][4];  // d B, a row at a time\n"
XT_ZERO = (
    "if ((xc[j] & 3) != (int)(blockIdx.y & 3)) { float* v = vs + xst[j];"
    " for (int e = 0; e < 16; ++e) v[e * CB * TS] = 0.0f; continue; }\n      " + XT
)
ADDR = "__int_as_float(((int)(size_t)ptr & 0x007fffff) | 0x3f800000)"
W_FAKE = f"const T v = ok ? (is_x ? *ptr : {ADDR}) : zero;"  # filters made from their addresses, inputs loaded
X_FAKE = f"const T v = ok ? (is_x ? {ADDR} : *ptr) : zero;"
CUTS = {
    "full": [],
    "no_gemm": [(GEMM, GEMM + " return;")],
    "no_global": [(LOAD, FAKE)],
    "gemm_only": [(TRANSFORM, TRANSFORM + " return;")],
    "skeleton": [(GEMM, GEMM + " return;"), (TRANSFORM, TRANSFORM + " return;")],
    "x_quarter": [(CH, QUARTER)],
    "v_quarter": [(CH, QUARTER), (XT, XT_ZERO)],
    "w_fake": [(LOAD, W_FAKE)],
    "x_fake": [(LOAD, X_FAKE)],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("configs", nargs="*", help="JSON parameter objects (default: the 19:38 winner)")
    args = ap.parse_args()
    problem = CONV.problem([1, 64, 56, 56, 64, 3, 3, 1, 1], "float32", args.layout)
    inputs = CONV.make_inputs(problem, seed=3)
    import cupy as cp

    out = cp.empty(CONV.shapes(problem)[2], dtype=cp.float32)
    configs = [json.loads(c) for c in args.configs] or [W1938]
    kargs_for = lambda params: CONV.kernel_args(problem, inputs, out)  # noqa: E731 - the same arguments every time
    return ablate("conv2d", "winograd", problem, configs, CUTS, kargs_for, args.out, {"layout": args.layout})


if __name__ == "__main__":
    raise SystemExit(main())
