"""Where a skinny_wgmma kernel's time goes (fp32, M x 4096 x 4096): the verified kernel, then copies of its source
with one phase cut out, each timed by the search's harness (L2 flushed before every launch).

    python3 benchmarks/ablate_skinny_wgmma.py [--shape 64x4096x4096] [--out results.json] ['{"WG": 2, ...}' ...]

Variants (diagnostic only: a cut kernel computes wrong numbers, so only "full" is verified):
  full         the kernel as given
  one_mma      only the high x high wgmma of each k-step (the two residual products removed)
  no_mma       no wgmma at all (copies, splits, fragment loads, barriers and the epilogue stay)
  no_split_a   A's split into the high/residual buffers removed
  no_b_frag    the B^T fragments made from constants instead of shared loads
  no_b_copy    B's cp.async copies removed (nothing read from device memory for B)
  no_a_copy    A's cp.async copies removed
  no_barrier   the chunk's __syncthreads removed
  no_tail      split-K's sum of the partial tiles removed (the partial stores stay)
  no_sum       the last block's sum removed (the fences and the count stay)
  no_fence2    the last block's second __threadfence removed
  fence_acqrel (right numbers) the two __threadfence of the split-K tail as fence.acq_rel.gpu
  one_round    (right numbers) the last block's loads of all partials in one round (RED 8 instead of 4)
  acqrel_round both
  atomic_c     partial tiles added into C by float atomics instead (the tail removed; C is not cleared first,
               so this only prices the atomics)
  no_epilogue  the partial stores removed too
  issue_late   (computes the right numbers) the chunk's copies issued after its wgmmas instead of before its
               fragment loads
  skeleton     no wgmma and no copies: splits, fragment loads, barriers, the split-K tail
The differences say what each phase costs where the others overlap it; they do not add up exactly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ablation import ablate

from autotune.kernels import FAMILIES

GEMM = FAMILIES["gemm"]
BASE = dict(WG=2, MB=64, KC=32, STAGES=4, ROUND=128, SPLIT_K=4, CLUSTER=False, MINB=1)

SMALL = ("wgmma_tf32(d, fl[F][j], a_desc(hi, j), !(FIRST && j == 0));", "wgmma_tf32(d, fh[F][j], a_desc(lo, j), 1);")
HIGH = "wgmma_tf32(d, fh[F][j], a_desc(hi, j), 1);"
ONE = "wgmma_tf32(d, fh[F][j], a_desc(hi, j), !(FIRST && j == 0));"
SPLIT_A = "if (s + 1 < nsteps) split_a(rd + 1 == STAGES ? 0 : rd + 1, sb == 2 ? 0 : sb + 1);"
R0 = "r[j][0] = *reinterpret_cast<const float2*>(bs + (8 * j + t) * BNP);"
R1 = "r[j][1] = *reinterpret_cast<const float2*>(bs + (8 * j + t + 4) * BNP);"
B_COPY = "cp_async16(bs + (b_r0 + B_ROWS * p) * BNP + b_c4, ok ? src + (size_t)B_ROWS * p * N : B, ok);"
A_COPY = "cp_async16(as + r * ALD + av_c, ok ? src : A, ok);"
BARRIER = "__syncthreads();      // chunk s is split"
TAIL = "if constexpr (SPLIT_K > 1) {\n    __threadfence();"
FENCE1 = "__threadfence();  // this block's partials"
FENCE2 = "__threadfence();  // the other blocks' partials"
ACQREL = 'asm volatile("fence.acq_rel.gpu;" ::: "memory");'
SUM = "    if (s_last) {"
RED = "constexpr int Q = BN / 4, RED = 4;"
NO_TAIL = "if constexpr (false) {\n    __threadfence();"
PARTIAL = "__stcg(reinterpret_cast<float2*>(p), make_float2(v[0], v[1]));"
ISSUE = "    issue(s + STAGES - 1, wr);\n"
COMMIT = "    wgmma_commit();\n    // chunk s + 1's A"
LATE = "    wgmma_commit();\n    issue(s + STAGES - 1, wr);\n    // chunk s + 1's A"
NO_MMA = [(SMALL[0], ""), (SMALL[1], ""), (HIGH, "")]
NO_COPY = [(B_COPY, "(void)ok;"), (A_COPY, "(void)src;")]
CUTS = {
    "full": [],
    "one_mma": [(SMALL[0], ""), (SMALL[1], ""), (HIGH, ONE)],
    "no_mma": NO_MMA,
    "no_split_a": [(SPLIT_A, "")],
    "no_b_frag": [(R0, "r[j][0] = make_float2(1.0f, 2.0f);"), (R1, "r[j][1] = r[j][0];")],
    "no_b_copy": [NO_COPY[0]],
    "no_a_copy": [NO_COPY[1]],
    "no_barrier": [(BARRIER, "//")],
    "fence_acqrel": [(FENCE1, ACQREL + "  //"), (FENCE2, ACQREL + "  //")],
    "one_round": [(RED, "constexpr int Q = BN / 4, RED = 8;")],
    "acqrel_round": [(FENCE1, ACQREL + "  //"), (FENCE2, ACQREL + "  //"), (RED, "constexpr int Q = BN / 4, RED = 8;")],
    "no_fence2": [(FENCE2, "//")],
    "issue_late": [(ISSUE, ""), (COMMIT, LATE)],
    "no_tail": [(TAIL, NO_TAIL)],
    "atomic_c": [(TAIL, NO_TAIL), (PARTIAL, "atomicAdd(C + o, v[0]); atomicAdd(C + o + 1, v[1]);")],
    "no_epilogue": [(TAIL, NO_TAIL), (PARTIAL, "(void)p;")],
    "skeleton": NO_MMA + NO_COPY,
    "no_sum": [(SUM, "    if (false) {")],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="64x4096x4096")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("configs", nargs="*", help="JSON parameter objects (default: WG 2, MB 64, KC 32, split-K 4)")
    args = ap.parse_args()
    problem = GEMM.problem(args.shape, "float32", "NN")
    inputs = GEMM.make_inputs(problem, seed=3)
    out = GEMM.new_output(problem)

    def kargs_for(params):  # fresh split-K counters for every variant (no_sum leaves them set)
        return GEMM.kernel_args(problem, inputs, out, scratch=GEMM.new_scratch("skinny_wgmma", params, problem))

    configs = [json.loads(c) for c in args.configs] or [BASE]
    return ablate("gemm", "skinny_wgmma", problem, configs, CUTS, kargs_for, args.out, {"shape": args.shape})


if __name__ == "__main__":
    raise SystemExit(main())
