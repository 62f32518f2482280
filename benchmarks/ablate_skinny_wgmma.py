"""Where a skinny_wgmma kernel's time goes (fp32, M x 4096 x 4096): the verified kernel, then copies of its source
with one phase cut out, each timed by the search's harness (L2 flushed before every launch).

    python3 benchmarks/ablate_skinny_wgmma.py [--shape 64x4096x4096] [--out results.json] ['{"WG": 2, ...}' ...]

Variants (diagnostic only: a cut kernel computes wrong numbers, so only "full" is verified):
  full         the kernel as given
  one_mma      only the high x high wgmma of each k-step (the two residual products removed)
  no_mma       no wgmma at all (copies, splits, fragment loads, barriers and the epilogue stay)
  no_split_a   A's split into the high/residual buffers removed
  no_b_frag    the B^T fragments made from constants instead of shared loads
  no_b_copy    B's copies removed (TMA boxes with their waits, or cp.async): nothing read from memory for B
  no_a_copy    A's copies removed (the same)
  no_barrier   the chunk's __syncthreads removed
  no_partial_store  the partial tiles of the blocks that are not last left unstored (they still count)
  no_sum       the last block's sum over the partial tiles removed (its wait for the others' stores stays)
  no_epilogue  the whole split-K epilogue removed: every block returns after its main loop
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
BASE = dict(WG=2, MB=64, KC=32, STAGES=5, ROUND=256, SPLIT_K=4, CLUSTER=False, MINB=1, TMA=True)  # the 08:01 winner

SMALL = (
    "if (first) wgmma_tf32_zero(d, fl[F][0], a_desc(hi, 0));",
    "else wgmma_tf32(d, fl[F][0], a_desc(hi, 0));",
    "if (j > 0) wgmma_tf32(d, fl[F][j], a_desc(hi, j));",
    "wgmma_tf32(d, fh[F][j], a_desc(lo, j));",
)
HIGH = "wgmma_tf32(d, fh[F][j], a_desc(hi, j));"
ONE = "if (j == 0 && first) wgmma_tf32_zero(d, fh[F][j], a_desc(hi, j)); else wgmma_tf32(d, fh[F][j], a_desc(hi, j));"
SPLIT_A = "if (s + 1 < nsteps) split_a(rd + 1 == STAGES ? 0 : rd + 1, sb == 2 ? 0 : sb + 1, vec);"
R0 = "r[j][0] = *reinterpret_cast<const float2*>(bs + b_lo + 256 * j);"
R1 = "r[j][1] = *reinterpret_cast<const float2*>(bs + b_hi + 256 * j);"
# B's and A's copies (TMA=true, layout NN): the boxes, their byte counts and the waits on them go together (a wait
# on a box never issued would hang); with TMA=false the 16-byte cp.async copies
B_TMA = [
    ("mbar_expect_tx(landed + buf, KC * BN * 4);", ""),
    ("tma_load_2d(bs + q * (KC * 32), &bmap, n0 + 32 * q, k0, landed + buf);", "(void)q;"),
    ("if constexpr (BOXES_B) mbar_wait(landed + rd, ph);", ""),
]
A_TMA = [
    ("mbar_expect_tx(landed_a + buf, MB * KC * 4);", ""),
    ("tma_load_2d(as, &amap, k0, m0, landed_a + buf);", ""),
    ("mbar_wait(landed_a", "(void)(landed_a"),
]
B_COPY = "cp_async16(bs + b_index(b_r0 + B_ROWS * p, b_c4), ok ? src + (size_t)B_ROWS * p * N : B, ok);"
A_COPY = "cp_async16(as + r * ALD + av_c, ok ? src : A, ok);"
BARRIER = "__syncthreads();      // chunk s is split"
ISSUE = "    issue(s + STAGES - 1, wr, vec);\n"
COMMIT = "    wgmma_commit();\n    // chunk s + 1's A"
LATE = "    wgmma_commit();\n    issue(s + STAGES - 1, wr, vec);\n    // chunk s + 1's A"
ARRIVE = "    if (tid == 0) s_last = atomicAdd(arrived, 1u) == (unsigned)(SPLIT_K - 1);"
PARTIAL = (
    "__stcg(reinterpret_cast<float2*>(p + (size_t)(8 * j + e) * N), make_float2(acc[4 * j + e], acc[4 * j + 2 + e]));"
)
SUM = "for (int base = tid; base < rows * Q; base += RED * THREADS) {"
NO_MMA = [(t, "") for t in (*SMALL, HIGH)]
NO_COPY = [[(B_COPY, "(void)ok;"), *B_TMA], [(A_COPY, "(void)src;"), *A_TMA]]
CUTS = {
    "full": [],
    "one_mma": [*((t, "") for t in SMALL), (HIGH, ONE)],
    "no_mma": NO_MMA,
    "no_split_a": [(SPLIT_A, "")],
    "no_b_frag": [(R0, "r[j][0] = make_float2(1.0f, 2.0f);"), (R1, "r[j][1] = r[j][0];")],
    "no_b_copy": NO_COPY[0],
    "no_a_copy": NO_COPY[1],
    "no_barrier": [(BARRIER, "//")],
    "issue_late": [(ISSUE, ""), (COMMIT, LATE)],
    "no_partial_store": [(PARTIAL, "(void)p;")],
    "no_sum": [(SUM, "for (int base = tid; false; base += RED * THREADS) {")],
    "no_epilogue": [(ARRIVE, "    if (acc[0] != 1234.5f) return;  // (keeps acc live)\n" + ARRIVE)],
    "skeleton": NO_MMA + NO_COPY[0] + NO_COPY[1],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="64x4096x4096")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("configs", nargs="*", help="JSON parameter objects (default: the stored M = 64 winner of 08:01)")
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
