"""What a GEMM's partial last wave costs: the stored winner of one shape run unchanged on shapes with more or fewer
rows, beside cuBLAS, flushed (interleaved rounds) and sustained at the power cap (NVML, read only).

At 4096^3 the stored ``wgmma`` winner cuts C into 512 tiles of 128 x 256 for 132 SMs: three whole waves and a last
of 116 tiles, 16 SMs idle. With M = 4224 the same kernel has 528 tiles (four whole waves), with M = 3968 496. If
the idle SMs cost nothing (a kernel bound by energy at the card's power cap), time follows the FLOPs; if they cost
their share of the wave, M = 4224 takes about the time of 4096.

    PYTHONPATH=$PWD python3 benchmarks/probes/probe_last_wave.py                        # fp16 and bf16, 4096^3
    PYTHONPATH=$PWD python3 benchmarks/probes/probe_last_wave.py --dtype float16 --rows 4096 4224 --rounds 9

Prints a row per kernel and the time ratios; ``--out`` writes every round's times as JSON. ``--fixup KB`` also
times what balancing the last wave along K (stream-K) would add to each block: one fp32 partial of KB kilobytes
stored to L2 by 256 threads (16-byte ``st.global.cg``, as the split tail's) and one loaded, every SM at once and an
eighth of them; ``--dtype`` with no value times only that.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # power_ceiling: NVML's sustained batches

import power_ceiling as pc  # noqa: E402

from autotune.core.device import current_gpu  # noqa: E402
from autotune.core.errors import AutotuneError  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.bench import L2Flusher, time_launches  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, prepare, verified_run  # noqa: E402
from autotune.measure.verify import tolerance_for  # noqa: E402
from autotune.measure.versus import interleave  # noqa: E402
from autotune.results.store import read, tuned_file  # noqa: E402
from autotune.tune.search import FINAL_PLAN  # noqa: E402

FIXUP = r"""
extern "C" __global__ void __launch_bounds__(256) fixup(float4* buf, int n, int reps, int load, float* sink) {
  float4* mine = buf + (size_t)blockIdx.x * n;
  const float4* other = buf + (size_t)((blockIdx.x + 1) % gridDim.x) * n;
  float s = 0.f;
  for (int r = 0; r < reps; ++r) {
    if (load) {
      for (int i = threadIdx.x; i < n; i += 256) {
        const float4 v = __ldcg(other + i);
        s += v.x + v.y + v.z + v.w;
      }
    } else {
      for (int i = threadIdx.x; i < n; i += 256) __stcg(mine + i, make_float4(s + i, r, 0.f, 1.f));
    }
    __syncthreads();
  }
  if (s == 12345.f) sink[0] = s;  // keeps the loads
}
"""


def fixup_us(kb: int, blocks: int, reps: int = 32) -> dict[str, float]:
    """Microseconds for every one of ``blocks`` blocks to store (and, apart, to load) ``kb`` KB of fp32 through
    L2, from the median of 20 launches of ``reps`` passes each (the launch's own cost divided among them)."""
    import cupy as cp

    kernel = cp.RawKernel(FIXUP, "fixup")
    n = kb * 1024 // 16
    buf, sink = cp.zeros(blocks * n * 4, cp.float32), cp.zeros(1, cp.float32)
    out = {}
    for name, load in (("store", 0), ("load", 1)):
        times = []
        for _ in range(21):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            kernel((blocks,), (256,), (buf, cp.int32(n), cp.int32(reps), cp.int32(load), sink))
            e.record()
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e) * 1e3 / reps)
        out[name] = statistics.median(times[1:])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dtype", nargs="*", default=["float16", "bfloat16"], help="dtypes (default: float16 bfloat16)")
    ap.add_argument("--shape", default="4096x4096x4096", help="the stored NN winner to run (default 4096x4096x4096)")
    ap.add_argument("--rows", type=int, nargs="+", default=[3968, 4096, 4224], help="M values to run it on")
    ap.add_argument("--rounds", type=int, default=7, help="flushed interleaved rounds (default 7)")
    ap.add_argument("--seconds", type=float, default=1.2, help="each sustained batch, 2 rounds (0: none)")
    ap.add_argument("--fixup", type=int, default=0, metavar="KB", help="also time a KB-sized partial's exchange")
    ap.add_argument("--out", type=Path, help="write the rounds' times as JSON here")
    args = ap.parse_args()
    dims = args.shape.split("x")
    if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
        print(f"--shape {args.shape!r} is not MxNxK with positive integers, e.g. 4096x4096x4096")
        return 2
    base, n, k = dims[0], int(dims[1]), int(dims[2])
    try:
        gpu = current_gpu()
    except AutotuneError as exc:
        print(f"probe_last_wave: {exc}")
        return 2
    fam, flush = FAMILIES["gemm"], L2Flusher()
    nvml = pc.Nvml() if args.seconds > 0 else None
    stored = read(tuned_file(Path("tuned"), gpu.key, "gemm"))["entries"]
    out = {"gpu": gpu.name, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "cases": []}
    for dtype in args.dtype:
        entry = stored.get(f"{dtype}/NN/{args.shape}")
        if entry is None:
            print(f"{dtype}: no stored NN entry for {args.shape} in tuned/{gpu.key}/gemm.json")
            continue
        sides: dict[str, tuple[object, float]] = {}
        st = Settings(arch=gpu.arch, tolerance=tolerance_for(dtype), timing=FINAL_PLAN,
                      max_shared_bytes=gpu.max_shared_per_block)  # fmt: skip
        for m in args.rows:
            problem = fam.problem(f"{m}x{n}x{k}", dtype, "NN")
            candidate = Candidate("gemm", entry["template"], problem, Config.of(entry["params"]))
            ran = verified_run(prepare(candidate, st), st)
            if not isinstance(ran, tuple):
                print(f"{dtype} M={m}: not verified ({ran.status}: {ran.reason})")
                continue
            sides[f"ours M={m}"] = (ran[0], problem.flops)
            sides[f"cuBLAS M={m}"] = (fam.vendor(problem, ran[1].inputs)[1], problem.flops)
        names = list(sides)
        timed = interleave([sides[x][0] for x in names], args.rounds, lambda fn: time_launches(fn, flush, FINAL_PLAN))
        ms = {x: [t.median_ms for t in timed[i]] for i, x in enumerate(names)}
        for x in names:
            med = statistics.median(ms[x])
            print(f"{dtype:>8} {x:>14}  flushed {med * 1e3:7.1f} us  {sides[x][1] / med / 1e9:6.1f} TFLOP/s")
        for who in ("ours", "cuBLAS"):
            for m in args.rows:
                ref, key = f"{who} M={base}", f"{who} M={m}"
                if m != int(base) and ref in ms and key in ms:
                    r = statistics.median(a / b for a, b in zip(ms[key], ms[ref], strict=True))
                    print(f"{dtype:>8} {who:>6}: time M={m} / M={base} {r:.4f} (FLOPs {m / int(base):.4f})")
        sustained: dict[str, list[dict]] = {x: [] for x in names}
        for r in range(2 if nvml else 0):
            for x in names if r % 2 == 0 else names[::-1]:
                sustained[x].append(pc.sustained(sides[x][0], sides[x][1], nvml, args.seconds))
        for x in names:
            if sustained[x]:
                print(f"{dtype:>8} {x:>14}  sustained " + " | ".join(
                    f"{s['tflops']:.1f} TFLOP/s {s['sm_mhz']:.0f} MHz {s['watts']:.0f} W {s['gflop_per_j']:.0f} GFLOP/J"
                    for s in sustained[x]))  # fmt: skip
        out["cases"].append({"dtype": dtype, "params": entry["params"], "flushed_ms": ms, "sustained": sustained})
    if args.fixup:
        out["fixup_us"] = {}
        for blocks in (gpu.multiprocessors, gpu.multiprocessors // 8):  # every SM at once, and an eighth of them
            out["fixup_us"][blocks] = t = fixup_us(args.fixup, blocks)
            print(f"a {args.fixup} KB fp32 partial a block, {blocks} blocks at once through L2: "
                  f"stored in {t['store']:.2f} us, loaded in {t['load']:.2f} us")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
