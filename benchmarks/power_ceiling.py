"""Large fp16/bf16 GEMM at the card's power cap: ours and cuBLAS beside the tensor cores' own rate, in one process.

    python3 benchmarks/power_ceiling.py [--shapes 4096x4096x4096 8192x8192x8192] [--dtype float16 bfloat16]
                                        [--seconds 2.5] [--rounds 2] [--quick] [--out benchmarks/results]

Why: at 4096^3 the issue-26 goal (>= 1.0x cuBLAS) has measured at 0.996-1.01x in every interleaved re-timing. This
benchmark asks what sets that speed. For each dtype and shape, three sides run in sustained back-to-back batches
(``--seconds`` each, no L2 flush: the card settles at the clock its power cap allows), in ``--rounds`` interleaved
rounds (ceiling, ours, cuBLAS; the next round in reverse order):

- **ceiling**: a kernel that only issues the GEMM's tensor-core work, ``wgmma.mma_async m64n256k16`` from shared
  memory filled with the same standard-normal values (two warpgroups a block, one block per SM, four k-steps a
  commit as the GEMM's consumers do), with no global-memory traffic at all. Its rate under the cap is what any
  kernel issuing these MMAs on this data can sustain at that power, whatever its memory traffic and scheduling.
- **ours**: this GPU's stored winner (tuned/), verified against float64 on fresh inputs first.
- **cuBLAS**: the family's vendor on the same inputs (CuPy; bfloat16 through torch).

While a batch runs, a thread reads NVML (read only: nothing about the GPU is set): the total-energy counter (the
average power between its first and last change inside the batch, ``autotune.measure.energy.counter_power``), the
SM clock, the temperature and the clock-event reasons (0x4: the software power cap). Printed per side: TFLOP/s,
the mean SM clock, W, GFLOP per joule, TFLOP/s per GHz, the share of the ceiling's rate in the same round, and for
ours the ratio to cuBLAS (the median of the rounds' ratios). Writes <out>/power_ceiling_<gpu>.{json,csv} with the
GPU, versions and date inside.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.build.compiler import compile_source, nvrtc_version  # noqa: E402
from autotune.build.templates import template_root  # noqa: E402
from autotune.core.device import NoGPUError, current_gpu  # noqa: E402
from autotune.core.space import Config  # noqa: E402
from autotune.kernels import FAMILIES  # noqa: E402
from autotune.measure.energy import EnergyPlan, counter_power, handle_by_bus_id  # noqa: E402
from autotune.measure.evaluate import Candidate, Settings, load_kernel, prepare, verified_run  # noqa: E402
from autotune.results.store import read, tuned_file  # noqa: E402
from autotune.tune.search import FINAL_PLAN  # noqa: E402

SHAPES = ["4096x4096x4096", "8192x8192x8192"]
KSTEPS = 4  # m64n256k16 wgmmas a commit: one 64-wide k-block, as the GEMM's consumers issue them
WARPGROUPS = 2  # per block, as the stored 128 x 256 winners' consumers
TILE_BYTES = (WARPGROUPS * 64 + 256) * 128  # each warpgroup's 64 rows of A and the shared 256 rows of B, 128 B a row

# The ceiling kernel, rendered with the GEMM templates' own PTX helpers and wgmma macro (templates/common).
CEILING = r"""#define AUTOTUNE_ARCH_SPECIFIC 1
#include <cuda_fp16.h>
#include <cuda_bf16.h>
{% include "common/sm90_ptx.cuh.j2" %}
{% import "common/wgmma.j2" as sm90 -%}
{{ sm90.wgmma_tile(256, DTYPE, False, False) }}

// Tensor-core work alone: each warpgroup multiplies its 64 rows of A by B's 256 rows (both K-major, 128-byte
// swizzled tiles copied once from src into shared memory) ITERS x KSTEPS times, KSTEPS wgmmas a commit group with
// one group in flight, then writes its accumulators' sum (so none of the work can be dropped).
extern "C" __global__ void __launch_bounds__(128 * {{ WARPGROUPS }}, 1)
mma_ceiling(const uint4* __restrict__ src, long long n16, float* __restrict__ out, int iters) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* tile = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  for (int i = threadIdx.x; i < {{ TILE_BYTES }} / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(tile)[i] = src[((long long)blockIdx.x * ({{ TILE_BYTES }} / 16) + i) % n16];
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the generic-proxy writes, read by wgmma
  const int wg = threadIdx.x / 128;
  const unsigned a = smem_u32(tile) + wg * 64 * 128, b = smem_u32(tile) + {{ WARPGROUPS }} * 64 * 128;
  float acc[128];
#pragma unroll
  for (int j = 0; j < 128; ++j) acc[j] = 0.f;
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < {{ KSTEPS }}; ++j) wgmma_tile(acc, tile_desc<false>(a, j), tile_desc<false>(b, j));
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 128; ++j) s += acc[j];
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def ceiling_source(dtype: str) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_root())), undefined=jinja2.StrictUndefined)
    return env.from_string(CEILING).render(DTYPE=dtype, WARPGROUPS=WARPGROUPS, KSTEPS=KSTEPS, TILE_BYTES=TILE_BYTES)


def ceiling_flops(blocks: int, iters: int) -> float:
    """FLOPs of one ceiling launch: blocks x warpgroups x iters x KSTEPS wgmmas of 64 x 256 x 16."""
    return 2.0 * 64 * 256 * 16 * KSTEPS * WARPGROUPS * iters * blocks


def ceiling_launch(dtype: str, arch: str, sms: int, flops_like: float) -> tuple[Any, float]:
    """(launch, flops): the ceiling kernel on every SM, with about ``flops_like`` FLOPs a launch (the GEMM's)."""
    import cupy as cp

    name = "mma_ceiling"
    r = compile_source(ceiling_source(dtype), name, arch)
    if not r.ok:
        raise RuntimeError(f"the ceiling kernel did not compile: {r.error}")
    shared = TILE_BYTES + 1024
    fn = load_kernel(r, shared)
    rng = cp.random.default_rng(11)
    src = rng.standard_normal(sms * TILE_BYTES // 2, dtype=cp.float32).astype(cp.float16)
    if dtype == "bfloat16":  # bf16's bits: the float32's upper half, rounded to nearest even
        bits = rng.standard_normal(sms * TILE_BYTES // 2, dtype=cp.float32).view(cp.uint32)
        src = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(cp.uint16)
    src = src.view(cp.uint32).reshape(-1, 4)
    out = cp.zeros(sms * 128 * WARPGROUPS, dtype=cp.float32)
    iters = max(1, round(flops_like / ceiling_flops(sms, 1)))
    args = (src, cp.int64(src.shape[0]), out, cp.int32(iters))

    def launch() -> None:
        fn((sms,), (128 * WARPGROUPS,), args, shared_mem=shared)

    return launch, ceiling_flops(sms, iters)


class Nvml:
    """Read-only NVML readings of the current CUDA device: (time, energy mJ, SM MHz, temperature C, reasons)."""

    def __init__(self) -> None:
        import cupy as cp
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        bus = cp.cuda.Device().pci_bus_id
        self.handle = handle_by_bus_id(pynvml, bus)
        if self.handle is None:
            raise RuntimeError(f"NVML has no device with PCI bus id {bus}")
        self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1e3
        self.max_sm_mhz = pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM)

    def sample(self) -> tuple[float, float, int, int, int]:
        n, h = self.nvml, self.handle
        t0 = time.perf_counter()
        mj = n.nvmlDeviceGetTotalEnergyConsumption(h)
        t = (t0 + time.perf_counter()) / 2
        mhz = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        temp = n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        return t, float(mj), mhz, temp, n.nvmlDeviceGetCurrentClocksEventReasons(h)


def sustained(launch: Any, flops: float, nvml: Nvml, seconds: float) -> dict[str, Any]:
    """``launch`` back to back for ``seconds``: ms a launch (CUDA events over the batch) and NVML's readings."""
    import cupy as cp

    for _ in range(10):
        launch()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    launch()
    e.record()
    e.synchronize()
    n = max(20, int(seconds * 1e3 / max(cp.cuda.get_elapsed_time(s, e), 1e-3)))
    samples: list[tuple[float, float, int, int, int]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            samples.append(nvml.sample())
            stop.wait(0.002)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    s.record()
    for _ in range(n):
        launch()
    e.record()
    e.synchronize()
    t1 = time.perf_counter()
    stop.set()
    thread.join()
    ms = cp.cuda.get_elapsed_time(s, e) / n
    settled = [x for x in samples if t0 + 0.25 * (t1 - t0) <= x[0] <= t1]  # past the clock's first settling
    watts = counter_power([(x[0], x[1]) for x in samples], t0, t1, EnergyPlan())
    mhz = statistics.mean(x[2] for x in settled) if settled else None
    reasons = 0
    for x in settled:
        reasons |= x[4]
    tflops = flops / ms / 1e9
    return {"ms": ms, "launches": n, "tflops": tflops, "sm_mhz": mhz, "watts": watts,
            "temp_c": max((x[3] for x in settled), default=None), "clock_reasons": hex(reasons),
            "gflop_per_j": flops / 1e9 / (watts * ms / 1e3) if watts else None,
            "tflops_per_ghz": tflops / (mhz / 1e3) if mhz else None}  # fmt: skip


def sides_for(problem: Any, entry: dict[str, Any], settings: Settings, arch: str, sms: int) -> dict[str, Any]:
    """{"ceiling", "ours", "cuBLAS"} -> (launch, flops, name), ours verified first; a str says why none."""
    family = FAMILIES["gemm"]
    c = prepare(Candidate("gemm", entry["template"], problem, Config.of(entry["params"])), settings)
    checked = verified_run(c, settings)
    if not isinstance(checked, tuple):
        return {"error": f"the stored winner did not verify: {checked.status.value} ({checked.reason})"}
    run, fixture, _, _ = checked
    vendor = family.vendor(problem, fixture.inputs)
    if vendor is None:
        return {"error": "no vendor library for this problem (torch is needed for bfloat16)"}
    launch, flops = ceiling_launch(problem.dtype, arch, sms, problem.flops)
    return {"ceiling": (launch, flops, f"wgmma m64n256k16 from shared memory, {WARPGROUPS} warpgroups x {sms}"),
            "ours": (run, problem.flops, c.kernel_name), "cuBLAS": (vendor[1], problem.flops, vendor[0])}  # fmt: skip


def measure(sides: dict[str, Any], nvml: Nvml, seconds: float, rounds: int) -> list[dict[str, Any]]:
    """Every side once a round, the order reversed every other round; each row says its round."""
    order = ["ceiling", "ours", "cuBLAS"]
    rows = []
    for r in range(rounds):
        got = {}
        for side in order if r % 2 == 0 else order[::-1]:
            launch, flops, name = sides[side]
            got[side] = {"round": r, "side": side, "name": name, **sustained(launch, flops, nvml, seconds)}
        for row in got.values():
            row["pct_ceiling"] = 100 * row["tflops"] / got["ceiling"]["tflops"]
        rows += [got[s] for s in order]
    return rows


def x_vendor(rows: list[dict[str, Any]]) -> float | None:
    """cuBLAS's time over ours, the median of the rounds' ratios (above 1: ours is faster)."""
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["side"]] = row["ms"]
    ratios = [r["cuBLAS"] / r["ours"] for r in by_round.values() if "cuBLAS" in r and "ours" in r]
    return statistics.median(ratios) if ratios else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="MxNxK, layout NN (default: %(default)s)")
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"], choices=["float16", "bfloat16"])
    ap.add_argument("--seconds", type=float, default=2.5, help="length of one sustained batch (default 2.5)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    ap.add_argument("--quick", action="store_true", help="one shape, one dtype, short batches (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if args.seconds <= 0 or args.rounds < 1:
        print("power_ceiling: --seconds must be above 0 and --rounds at least 1", file=sys.stderr)
        return 2
    try:
        import cupy
        import pynvml  # noqa: F401
    except ImportError as exc:
        print(f"power_ceiling: needs cupy and nvidia-ml-py ({exc})", file=sys.stderr)
        return 2
    try:
        gpu = current_gpu()
    except NoGPUError as exc:
        print(f"power_ceiling: {exc}", file=sys.stderr)
        return 2
    if not gpu.arch.startswith("sm_90"):
        print(f"power_ceiling: the ceiling kernel needs Hopper (sm_90); this GPU is {gpu.arch}", file=sys.stderr)
        return 2
    if args.quick:
        args.shapes, args.dtype, args.seconds, args.rounds = args.shapes[:1], args.dtype[:1], 0.8, 1
    try:
        nvml = Nvml()
    except Exception as exc:  # noqa: BLE001 - NVML missing or refusing: one sentence, no traceback
        print(f"power_ceiling: NVML cannot read this GPU ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    stored = read(tuned_file(ROOT / "tuned", gpu.key, "gemm"))["entries"]
    family = FAMILIES["gemm"]
    results = []
    print(f"{gpu.name}: power limit {nvml.power_limit_w:.0f} W, SM clock up to {nvml.max_sm_mhz} MHz")
    print(f"{'dtype':>8} {'shape':>16} {'side':>7} {'rnd':>3} {'TFLOP/s':>8} {'MHz':>5} {'W':>5} {'GFLOP/J':>8} "
          f"{'TF/GHz':>7} {'% ceil':>6}  reasons")  # fmt: skip
    for dtype in args.dtype:
        for shape in args.shapes:
            problem = family.problem(shape, dtype, "NN")
            entry = stored.get(f"{dtype}/NN/{problem.label}")
            if entry is None:
                print(f"{dtype:>8} {shape:>16}  no stored winner on this GPU: tune it first")
                continue
            settings = Settings(arch=gpu.arch, tolerance=entry["tolerance"], timing=FINAL_PLAN,
                                max_shared_bytes=gpu.max_shared_per_block)  # fmt: skip
            sides = sides_for(problem, entry, settings, gpu.arch, gpu.multiprocessors)
            if "error" in sides:
                print(f"{dtype:>8} {shape:>16}  {sides['error']}")
                results.append({"dtype": dtype, "shape": shape, "error": sides["error"]})
                continue
            rows = measure(sides, nvml, args.seconds, args.rounds)
            for row in rows:
                f = lambda v, s: "-" if v is None else format(v, s)  # noqa: E731
                print(f"{dtype:>8} {shape:>16} {row['side']:>7} {row['round']:>3} {row['tflops']:8.1f} "
                      f"{f(row['sm_mhz'], '5.0f')} {f(row['watts'], '5.0f')} {f(row['gflop_per_j'], '8.0f')} "
                      f"{f(row['tflops_per_ghz'], '7.1f')} {row['pct_ceiling']:6.1f}  "
                      f"{row['clock_reasons']}")  # fmt: skip
            ratio = x_vendor(rows)
            print(f"{dtype:>8} {shape:>16}  ours / cuBLAS sustained: {ratio:.3f}x (median of the rounds' ratios)")
            results.append({"dtype": dtype, "shape": shape, "x_vendor": ratio, "rows": rows})
    meta = {
        "gpu": {"name": gpu.name, "key": gpu.key, "arch": gpu.arch, "multiprocessors": gpu.multiprocessors,
                "power_limit_w": nvml.power_limit_w, "max_sm_mhz": nvml.max_sm_mhz},
        "versions": {"cuda_driver": gpu.driver, "cuda_runtime": gpu.runtime, "nvrtc": nvrtc_version(),
                     "cupy": cupy.__version__, "torch": getattr(sys.modules.get("torch"), "__version__", None)},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "method": f"sustained back-to-back batches of {args.seconds:g} s (no flush), {args.rounds} interleaved "
        "rounds; power from NVML's energy counter, clocks read every few ms (read only)",
        "quick": args.quick,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"power_ceiling_{gpu.key}"
    stem.with_suffix(".json").write_text(json.dumps({**meta, "results": results}, indent=1) + "\n")
    flat = [{"dtype": r["dtype"], "shape": r["shape"], **row} for r in results for row in r.get("rows", [])]
    with stem.with_suffix(".csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(flat[0]) if flat else ["dtype", "shape"])
        w.writeheader()
        w.writerows(flat)
    return 0 if results and all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
