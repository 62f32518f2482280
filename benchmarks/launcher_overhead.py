"""Host time per served call, the torch drop-in's cost per launch (target: about 5 us); run by runtime_overhead.py.

A tiny problem (the GPU finishes each kernel faster than the host issues the next), calls timed with
perf_counter in bursts of 100 (synchronized, untimed, between bursts). The GPU time of the same bursts (CUDA
events) is printed beside it: where gpu_us is close to host_us the GPU, not the host, set the pace.

    python3 benchmarks/launcher_overhead.py [--calls 20000] [--out overhead.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def per_call(fn, calls: int, burst: int = 100) -> dict[str, float]:
    """Host and GPU microseconds per call, timed in bursts (synchronized, untimed, between them) so the launch
    queue never fills and the host time is the host's own."""
    import cupy as cp

    for _ in range(200):
        fn()
    cp.cuda.Device().synchronize()
    host = gpu = 0.0
    for _ in range(max(1, calls // burst)):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        host += time.perf_counter() - t0
        end.record()
        end.synchronize()
        gpu += cp.cuda.get_elapsed_time(start, end) / 1e3
    n = max(1, calls // burst) * burst
    return {"host_us": host / n * 1e6, "gpu_us": gpu / n * 1e6}


def rows(calls: int) -> list[dict]:
    import cupy as cp

    import autotune
    from autotune import runtime
    from autotune.device import current_gpu

    m, n, k = 16, 64, 64
    problem = runtime.FAMILIES["gemm"].problem([m, n, k], "float16")
    arch = current_gpu().arch
    choice = runtime.Choice(*runtime.FAMILIES["gemm"].default_config("float16"), "default", "default")
    ours = runtime._build("gemm", problem, choice, arch)  # our kernel whatever the dispatch would pick
    a = cp.random.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    b = cp.random.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
    out = cp.empty((m, n), dtype=cp.float16)
    fn, grid, block, shared = ours._fn, ours._grid, ours._block, ours._shared
    scratch = ours._new_scratch() if ours._new_scratch is not None else ()  # split-K buffers the kernel takes
    args = ours._args(a, b, out, 1.0, 0.0, scratch)
    found = [
        ("cupy Function call (floor)", per_call(lambda: fn(grid, block, args, shared_mem=shared), calls)),
        ("Launcher.__call__", per_call(lambda: ours(a, b, out), calls)),
    ]
    autotune.set_call_observer(lambda kernel, problem, run: run())
    found.append(("Launcher.__call__ with a pass-through observer", per_call(lambda: ours(a, b, out), calls)))
    autotune.set_call_observer(None)
    found.append(("autotune.gemm (CuPy, hot path)", per_call(lambda: autotune.gemm(a, b, out), calls)))
    try:
        import torch
    except ImportError:
        return [{"what": w, **r} for w, r in found]
    ta, tb = (torch.randn(s, device="cuda", dtype=torch.float16) for s in ((m, k), (k, n)))
    tout = torch.empty(m, n, device="cuda", dtype=torch.float16)
    from autotune.streams import torch_stream

    def ours_on_torch_stream():
        with torch_stream():
            ours(a, b, out)

    found += [
        ("torch.matmul(out=) (reference)", per_call(lambda: torch.matmul(ta, tb, out=tout), calls)),
        ("Launcher.__call__ inside torch_stream()", per_call(ours_on_torch_stream, calls)),
        ("autotune.gemm (torch tensors)", per_call(lambda: autotune.gemm(ta, tb, out=tout), calls)),
    ]
    found += _pointer_rows(torch, ours, ta, tb, tout, calls)
    return [{"what": w, **r} for w, r in found]


def _pointer_rows(torch, ours, ta, tb, tout, calls: int) -> list[tuple[str, dict]]:
    """The drop-in's launch: data pointers on torch's current stream, read per call (packed arguments, then
    CuPy converting every argument per call), and what reading the stream costs."""
    from autotune import launcher
    from autotune.streams import stream_of_torch

    dev = ta.get_device()

    def by_pointers():
        ours.launch_ptrs(ta.data_ptr(), tb.data_ptr(), tout.data_ptr(), 1.0, 0.0, stream_of_torch(dev))

    found = [("Launcher.launch_ptrs on torch's stream (packed args)", per_call(by_pointers, calls))]
    packed, launcher.PACKED = launcher.PACKED, False
    ours._packed.clear()
    try:
        found.append(("Launcher.launch_ptrs on torch's stream (args per call)", per_call(by_pointers, calls)))
    finally:
        launcher.PACKED = packed
        ours._packed.clear()
    found += [
        ("streams.stream_of_torch (per call)", per_call(lambda: stream_of_torch(dev), calls)),
        ("torch.cuda.current_stream().cuda_stream", per_call(lambda: torch.cuda.current_stream().cuda_stream, calls)),
    ]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    found = rows(args.calls)
    for r in found:
        print(f"{r['what']:<50} host {r['host_us']:7.2f} us/call   gpu {r['gpu_us']:7.2f} us/call")
    if args.out:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
