"""Host time the torch drop-in adds per call: ``autotune.torch.optimize(layer)`` against the same torch layer, eager.

Goal (issue 25): in eager mode the drop-in adds at most about 5 us of host time per call. The layers are
timed in the same process with perf_counter, in bursts of 100 calls (synchronized, untimed, between bursts),
torch's layer and the optimized variants in turn each round, on problems small enough that the host, not the GPU,
sets the pace; ``added_us`` is the median over rounds of the optimized layer's host time per call minus torch's
in the same round.

    python3 benchmarks/dropin_overhead.py              # on a GPU: nn.Linear and nn.Conv2d, our kernels
    python3 benchmarks/dropin_overhead.py --fake       # no GPU: the Python path with a no-op launch

``--fake`` (CPU only) measures the drop-in's own Python: the kernel launch is a no-op, tensors live on the
CPU, and the row "general path" is the route every call took before the fast serve (the backend's
``linear`` over ``autotune.serve.calls.gemm``, here with a no-op GEMM, so it is a lower bound of that path's cost).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def host_us(fn, bursts: int, burst: int = 100, sync=None) -> float:
    """Median host microseconds per call over ``bursts`` bursts of ``burst`` calls."""
    return statistics.median(interleaved_us({"": fn}, bursts, burst, sync)[""])


def interleaved_us(fns: dict, bursts: int, burst: int = 100, sync=None) -> dict[str, list[float]]:
    """Host microseconds per call of each function in ``fns``, one burst of ``burst`` calls each in turn,
    ``bursts`` rounds (synchronized, untimed, after every burst): a drift of the host's speed during the run hits
    every function alike, and a difference is taken within a round."""
    for fn in fns.values():
        for _ in range(3 * burst):
            fn()
    if sync:
        sync()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(bursts):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            times[name].append((time.perf_counter() - t0) / burst * 1e6)
            if sync:
                sync()
    return times


def _pair(torch, layer, x, bursts, sync) -> list[dict]:
    """torch's layer; the optimized copy; the optimized copy as before the fast paths (every call through
    ``calls.gemm``/``conv2d`` with torch tensors, CuPy views made per call); the optimized copy with every plan
    sent to the vendor (torch's op behind the router)."""
    import copy
    import dataclasses

    import autotune.torch as at
    from autotune.serve import torch_backend, torch_calls
    from autotune.serve.torch_backend import AutotuneBackend

    class Before(AutotuneBackend):
        def fast(self, *args):
            return None

    class NoEpilogue(AutotuneBackend):  # a Linear's bias by rows set to it first, as before the bias epilogue
        @staticmethod
        def bias_launcher(launcher, device):
            return None

    def cold(opt):  # the general path: every call through calls.gemm/conv2d
        def run():
            torch_calls.HOT = False
            try:
                opt(x)
            finally:
                torch_calls.HOT = True

        return run

    def cloned(opt):  # with no bias epilogue, the bias rows made by torch's clone, not device-to-device copies
        def run():
            torch_backend.BIAS_COPIES = False
            try:
                opt(x)
            finally:
                torch_backend.BIAS_COPIES = True

        return run

    routes = lambda opt: "/".join(sorted({p.route.value for p in opt.__dict__[at.ATTR].plans.values()}))  # noqa: E731
    with torch.inference_mode():
        base = copy.deepcopy(layer)
        backends = (None, Before(), None, NoEpilogue())
        opt, before, sent, copies = (at.optimize(copy.deepcopy(layer), backend=b) for b in backends)
        for m in (opt, before, sent, copies):
            m(x)  # decide, compile (and race, unless AUTOTUNE_VENDOR=0)
        router = sent.__dict__[at.ATTR]
        router.plans = {k: dataclasses.replace(p, route=at.Route.VENDOR) for k, p in router.plans.items()}
        router.fast.clear()  # the steady state's serves follow the plans again
        names = ("torch", f"optimized ({routes(opt)})", f"optimized, before (no fast paths) ({routes(before)})",
                 "optimized (vendor route)", "optimized, no bias epilogue: bias rows by device copies",
                 "optimized, no bias epilogue: bias rows by torch's clone")  # fmt: skip
        fns = (lambda: base(x), lambda: opt(x), cold(before), lambda: sent(x), lambda: copies(x), cloned(copies))
        times = interleaved_us(dict(zip(names, fns, strict=True)), bursts, sync=sync)
    theirs = times["torch"]
    rows = [{"what": "torch", "host_us": statistics.median(theirs)}]
    for name in names[1:]:
        added = statistics.median(t - u for t, u in zip(times[name], theirs, strict=True))
        rows.append({"what": name, "host_us": statistics.median(times[name]), "added_us": added})
    return rows


def gpu_rows(bursts: int = 300) -> list[dict]:
    """nn.Linear (decode-sized, with and without bias) and nn.Conv2d (1x1 and 3x3) in fp16 on the GPU."""
    import torch

    nn, dev, f16 = torch.nn, "cuda", torch.float16
    cases = [
        ("Linear 4096->4096 M=1 no bias", nn.Linear(4096, 4096, bias=False), (1, 4096)),
        ("Linear 4096->4096 M=16 no bias", nn.Linear(4096, 4096, bias=False), (16, 4096)),
        ("Linear 4096->4096 M=1 bias", nn.Linear(4096, 4096), (1, 4096)),
        ("Linear 4096->4096 M=16 bias", nn.Linear(4096, 4096), (16, 4096)),
        ("Linear 1024->1024 M=1 bias", nn.Linear(1024, 1024), (1, 1024)),
        ("Linear 1024->1024 M=16 bias", nn.Linear(1024, 1024), (16, 1024)),
        ("Conv2d 64->64 1x1 8x8 no bias", nn.Conv2d(64, 64, 1, bias=False), (1, 64, 8, 8)),
        ("Conv2d 64->64 3x3 8x8 bias", nn.Conv2d(64, 64, 3, padding=1), (1, 64, 8, 8)),
    ]
    found = []
    for name, layer, shape in cases:
        layer = layer.to(dev, f16).eval()
        x = torch.randn(shape, device=dev, dtype=f16)
        for r in _pair(torch, layer, x, bursts, torch.cuda.synchronize):
            found.append({"case": name, **r})
    return found


def fake_rows(bursts: int = 300) -> list[dict]:
    """The drop-in's Python per call on the CPU, the launch a no-op (see the module doc)."""
    import torch

    import autotune.torch as at

    backend = _fake_gpu()
    found = []
    for bias in (False, True):
        layer = torch.nn.Linear(64, 64, bias=bias).eval()
        x = torch.randn(1, 64)
        case = f"Linear 64->64 M=1 {'bias' if bias else 'no bias'}"
        with torch.inference_mode():
            plain = host_us(lambda layer=layer, x=x: layer(x), bursts)
            for what, fast in (("fast serve", True), ("general path", False)):
                opt = at.optimize(torch.nn.Linear(64, 64, bias=bias).eval(), backend=backend(fast))
                t = host_us(lambda opt=opt, x=x: opt(x), bursts)
                found.append({"case": case, "what": what, "host_us": t, "torch_cpu_linear_us": plain})
    return found + _parts(torch, bursts)


def _fake_gpu() -> type:
    """A backend that takes CPU tensors for GPU ones and launches nothing (``FakeGpu(fast=False)``: no fast
    serve, the general path over a no-op GEMM)."""
    from autotune.serve.torch_backend import AutotuneBackend

    class NoLaunch:
        vendor = provisional = False

        def launch_ptrs(self, a, b, out, alpha, beta, stream):
            pass

    class FakeGpu(AutotuneBackend):
        def __init__(self, fast: bool) -> None:
            super().__init__()
            self._fast_on = fast

        @staticmethod
        def step(kernel, problem, sizes, device):
            return "exact"

        @staticmethod
        def on_device(x):
            return True

        on_current_device = on_device

        @staticmethod
        def capturing():
            return False

        def fast(self, *args):
            return super().fast(*args) if self._fast_on else None

        @staticmethod
        def launcher(plan, device):
            return NoLaunch()

        @staticmethod
        def device_reader():
            return lambda: -1

        streams = {(-1, 0): "stream"}
        stream_of = staticmethod(lambda device, s=streams: s[(device, 0)])  # one dict lookup, as on the GPU

        @staticmethod
        def bias_rows(out, bias, rows, stream):
            return True  # the device-to-device copies, as no-ops (the CPU tensors' pointers are no device's)

        def gemm(self, a, b, out, alpha, beta):
            pass  # the general path's calls.gemm, as a no-op

    return FakeGpu


def _parts(torch, bursts: int) -> list[dict]:
    """What a fast serve's call is made of, on the CPU: a module call, torch.empty, the launch's Python."""
    import numpy as np

    from autotune.kernels import FAMILIES
    from autotune.kernels.base import Launch
    from autotune.serve import launcher
    from autotune.serve.runtime import Choice

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x

    x, ident = torch.randn(1, 64), Identity()
    gemm = FAMILIES["gemm"]
    template, params = gemm.default_config("float16", "NT")
    choice, problem = Choice(template, params, "default", "default"), gemm.problem([1, 64, 64], "float16", "NT")
    scratch = None if gemm.scratch(template, params, problem) is None else lambda: (np.zeros(1), np.zeros(1))
    no_op = lambda grid, block, args, shared_mem=0, stream=None: None  # noqa: E731 - the launch, as a no-op
    ours = launcher.Launcher("gemm", problem, choice, no_op, Launch((1, 1, 1), (128, 1, 1), 0), "k", scratch)
    stream = type("Stream", (), {"ptr": 0, "__enter__": lambda s: s, "__exit__": lambda s, *e: False})()
    found = [
        {"case": "parts", "what": "module call, identity forward", "host_us": host_us(lambda: ident(x), bursts)},
        {"case": "parts", "what": "torch.empty((1, 64))", "host_us": host_us(lambda: torch.empty((1, 64)), bursts)},
    ]
    for packed in (True, False):
        launcher.PACKED = packed
        ours._packed.clear()
        t = host_us(lambda: ours.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, stream), bursts)
        found.append({"case": "parts", "what": f"launch_ptrs Python, {'packed' if packed else 'plain'} args",
                      "host_us": t})  # fmt: skip
    launcher.PACKED = True
    return found


# The serving paths' host time per launch (runtime_overhead.py prints these rows): a tiny problem, calls timed with
# perf_counter in bursts of 100, the GPU time of the same bursts beside it.


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
    from autotune.core.device import current_gpu
    from autotune.serve import runtime

    m, n, k = 16, 64, 64
    problem = runtime.FAMILIES["gemm"].problem([m, n, k], "float16")
    arch = current_gpu().arch
    choice = runtime.Choice(*runtime.FAMILIES["gemm"].default_config("float16"), "default", "default")
    ours = runtime.build_launcher("gemm", problem, choice, arch)  # our kernel whatever the dispatch would pick
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
    from autotune.measure.streams import torch_stream

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
    from autotune.measure.streams import stream_of_torch
    from autotune.serve import launcher

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
    ap.add_argument("--fake", action="store_true", help="no GPU: the Python path with a no-op launch")
    ap.add_argument("--bursts", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    try:
        found = fake_rows(args.bursts) if args.fake else gpu_rows(args.bursts)
    except ImportError as exc:
        print(f"dropin_overhead needs torch: {exc}", file=sys.stderr)
        return 2
    for r in found:
        extra = "".join(f"  {k} {v:7.2f}" for k, v in r.items() if k not in ("case", "what", "host_us"))
        print(f"{r['case']:<34} {r['what']:<36} host {r['host_us']:7.2f} us/call{extra}")
    if args.out:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
