"""What a thread-block cluster costs on this card, before building on one: the per-step price of a cluster
barrier against __syncthreads, of pushing a step's transformed values into every block of the cluster by
distributed shared memory (st.shared::cluster) against local stores, and whether 132 blocks in clusters of 2 or
4 run in one wave (each block records its SM and start and end times).

The step imitates the batch-1 Winograd kernel's (384 threads, 24 tiles x 16 channels x 16 elements of V a block):
every block writes its V (alone, or a 1/CL share of it into all CL blocks), meets at the barrier, then reads a
few values back. Per-step cost = (time at 36 steps - time at 4 steps) / 32, L2 flushed before each launch.

    python3 benchmarks/probe_cluster.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SOURCE = r"""
constexpr int THREADS = 384, ITEMS = 24 * 16, VALUES = 16, ROW = 24 * 16;
extern "C" __global__ void
#if CL > 1
__cluster_dims__(1, CL, 1)
#endif
__launch_bounds__(THREADS, 1) probe(float* out, unsigned long long* times, int steps) {
  __shared__ __align__(16) float vs[2][VALUES * ROW];
  const int tid = threadIdx.x;
  unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  unsigned rank = 0;
#if CL > 1
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#endif
  float acc = 0.0f;
  for (int s = 0; s < steps; ++s) {
    float* st = vs[s & 1];
#if PUSH  // items [rank * ITEMS / CL, (rank + 1) * ITEMS / CL) into every block of the cluster
    if (tid < ITEMS / CL) {
      const int i = rank * (ITEMS / CL) + tid;
      const unsigned local = (unsigned)__cvta_generic_to_shared(st + i);
      for (int r = 0; r < CL; ++r) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(r));
#pragma unroll
        for (int e = 0; e < VALUES; ++e)
          asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote + 4u * e * ROW), "f"((float)(s + e + i))
                       : "memory");
      }
    }
#else  // every block its own items
    if (tid < ITEMS) {
#pragma unroll
      for (int e = 0; e < VALUES; ++e) st[e * ROW + tid] = (float)(s + e + tid);
    }
#endif
#if CL > 1 && CLUSTER_SYNC
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __syncthreads();
#endif
#pragma unroll
    for (int e = 0; e < VALUES; ++e) acc += st[e * ROW + (tid * 7 + e) % ROW];
  }
#if CL > 1  // no block leaves while another may still write into its shared memory
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
  out[(blockIdx.y * gridDim.x + blockIdx.x) * THREADS + tid] = acc;
  if (tid == 0) {
    unsigned long long t1; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    times[3 * b] = t0; times[3 * b + 1] = t1; times[3 * b + 2] = sm;
  }
}
"""

VARIANTS = [  # name, CL, PUSH, CLUSTER_SYNC
    ("syncthreads, no cluster", 1, 0, 0),
    ("cluster 2, local stores, __syncthreads", 2, 0, 0),
    ("cluster 2, local stores, cluster barrier", 2, 0, 1),
    ("cluster 2, push 1/2 to both", 2, 1, 1),
    ("cluster 4, local stores, __syncthreads", 4, 0, 0),
    ("cluster 4, local stores, cluster barrier", 4, 0, 1),
    ("cluster 4, push 1/4 to all 4", 4, 1, 1),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()

    import cupy as cp

    from autotune.bench import L2Flusher, TimingPlan, time_launches

    plan = TimingPlan(warmup=3, min_repeats=50, max_repeats=300, target_ms=30.0)
    flush = L2Flusher()
    grid = (33, 4, 1)  # 132 blocks; cluster ranks along y, as the K-blocks of a tile group would be
    blocks = grid[0] * grid[1]
    out = cp.empty(blocks * 384, cp.float32)
    times = cp.zeros(3 * blocks, cp.uint64)
    rows = []
    print(f"{'variant':44} {'us/step':>8} {'us@4':>7} {'waves?':>7} {'SMs':>4}")
    for name, cl, push, csync in VARIANTS:
        opts = ("-std=c++17", "-arch=sm_90", f"-DCL={cl}", f"-DPUSH={push}", f"-DCLUSTER_SYNC={csync}")
        kernel = cp.RawModule(code=SOURCE, options=opts).get_function("probe")
        t = {}
        for steps in (4, 36):
            t[steps] = time_launches(lambda s=steps, k=kernel: k(grid, (384,), (out, times, cp.int32(s))), flush, plan)
        kernel(grid, (384,), (out, times, cp.int32(36)))
        cp.cuda.Device().synchronize()
        tt = times.get().reshape(blocks, 3).astype("int64")
        start, end = tt[:, 0] - tt[:, 0].min(), tt[:, 1] - tt[:, 0].min()
        # A second wave: some block starts after another block of the launch has ended.
        waves = bool((start > end.min()).any())
        per = (t[36].median_ms - t[4].median_ms) / 32 * 1e3
        row = {"variant": name, "cluster": cl, "push": push, "cluster_sync": csync, "us_per_step": per,
               "us_at_4_steps": t[4].median_ms * 1e3, "second_wave": waves, "sms": int(len(set(tt[:, 2])))}  # fmt: skip
        rows.append(row)
        print(f"{name:44} {per:8.3f} {row['us_at_4_steps']:7.2f} {str(waves):>7} {row['sms']:4d}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
