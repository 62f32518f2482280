"""Real models end to end: torch against ``autotune.torch.optimize(model)``, eager and in a CUDA graph.

    python3 benchmarks/models.py [--quick] [--out DIR] [--case SUBSTRING ...]
    python3 benchmarks/models.py --record DIR [--case ...]     # only write each case's workload YAML
    python3 benchmarks/models.py --untuned [--quick]           # before any tuning: online choice and vendor only
    (autotune's git revision goes into the results: $AUTOTUNE_GIT_REV where set, else git's)

--zoo runs other models instead (ZOO below: MobileNetV3, EfficientNet-B0, ConvNeXt-T, ViT-B/16, a BERT
encoder, a small Llama; needs torchvision and transformers), written beside the judged cases.

Cases (BENCHMARKS.md, "Real models"): torchvision ResNet-50 with random weights in eval mode, fp32 NCHW at
batch 1 and 32 and fp16 channels-last at batch 8; the linear layers of a Llama-3-8B-sized decoder layer
(q 4096->4096, k and v 4096->1024, o 4096->4096, gate and up 4096->14336, down 14336->4096; no bias), fp16
and bf16, at M = 1, 4, 16 (decode) and 512, 2048 (prefill).

Per case, in one process: the first optimized forward (plans, compiles, the runtime's online choice); the
forward time of torch and of the optimized model, eager (back-to-back forwards between CUDA events, no L2
flush, median of repeats) and as CUDA graph replays; both outputs against a float64 copy of the model
(relative Frobenius error; ResNet: top-1 agreement); J per forward from NVML's energy counter over graph
replays (>= 1 s, autotune.measure.energy); the drop-in's calls per forward by route and its fallbacks; and per
routed layer: its input, route, GPU time of torch's op and ours (10 calls in a CUDA graph, median of
replays) and host time per eager call of each. cuDNN benchmark mode is on (--no-cudnn-benchmark: off);
TF32 settings are torch's defaults, written in the metadata. Writes <out>/models_<gpu-key>.json, .csv (a
row a case) and models_layers_<gpu-key>.csv with GPU, versions and date inside, and prints a table; the cases of an
earlier results file that this run did not measure are kept, each with its own date and revision (--fresh: not). A case
that fails is recorded with its error; the others still run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
import autotune.torch as at  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # "resnet50" | "llama-linears"
    dtype: str
    channels_last: bool
    batch: int  # images, or M (tokens)


def cases(zoo: bool = False) -> list[Case]:
    """The judged cases, or (``zoo``) the other models of ``ZOO``."""
    if zoo:
        return [Case(f"zoo-{name}-{'fp16' if dt == 'float16' else 'bf16' if dt == 'bfloat16' else 'fp32'}"
                     f"{'-cl' if cl else ''}-b{batch}", f"zoo:{name}", dt, cl, batch)
                for name, dt, cl, batch in ZOO]  # fmt: skip
    out = [Case("resnet50-fp32-nchw-b1", "resnet50", "float32", False, 1),
           Case("resnet50-fp32-nchw-b32", "resnet50", "float32", False, 32),
           Case("resnet50-fp16-cl-b8", "resnet50", "float16", True, 8)]  # fmt: skip
    for dtype, short in (("float16", "fp16"), ("bfloat16", "bf16")):
        out += [Case(f"llama-linears-{short}-m{m}", "llama-linears", dtype, False, m) for m in (1, 4, 16, 512, 2048)]
    return out


def llama_linears(torch: Any) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class LlamaLinears(nn.Module):
        """The seven projections of a Llama-3-8B decoder layer, chained as in the layer (attention itself,
        not a linear layer, is stood in for by q's output); returns [h + mlp, k, v] concatenated."""

        def __init__(self, hidden: int = 4096, kv: int = 1024, mlp: int = 14336) -> None:
            super().__init__()
            self.q_proj, self.o_proj = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
            self.k_proj, self.v_proj = nn.Linear(hidden, kv, bias=False), nn.Linear(hidden, kv, bias=False)
            self.gate_proj, self.up_proj = nn.Linear(hidden, mlp, bias=False), nn.Linear(hidden, mlp, bias=False)
            self.down_proj = nn.Linear(mlp, hidden, bias=False)

        def forward(self, x: Any) -> Any:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            h = x + self.o_proj(q)
            h = h + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
            return torch.cat([h, k, v], dim=-1)

    return LlamaLinears()


# --- other models (--zoo): what a user brings, not what was tuned. Random weights, built offline (torchvision
# constructors and transformers configs; nothing is downloaded). Each forward takes one tensor and returns one:
# torchvision classifiers on 224 x 224 images (MobileNetV3: depthwise and grouped convolutions, hardswish;
# EfficientNet-B0: SiLU, squeeze-excitation; ConvNeXt-T: 7 x 7 depthwise, LayerNorm, Linear on channels-last
# activations; ViT-B/16: Linear on [batch, tokens, 768]); a 4-layer BERT-base encoder (Linear with bias, GELU) on 128
# tokens and a 2-layer Llama with hidden size 2048 (grouped-query attention, SwiGLU) on 32 tokens, the wrapper
# returning the last hidden state.


@dataclass(frozen=True)
class ZooEntry:
    name: str
    source: str  # "torchvision" | "transformers"
    classifier: bool  # top-1 agreement is reported


ZOO_ENTRIES = {e.name: e for e in (
    ZooEntry("mobilenet_v3_large", "torchvision", True),
    ZooEntry("efficientnet_b0", "torchvision", True),
    ZooEntry("convnext_tiny", "torchvision", True),
    ZooEntry("vit_b_16", "torchvision", True),
    ZooEntry("bert4", "transformers", False),
    ZooEntry("llama2l", "transformers", False),
)}  # fmt: skip
ZOO_TOKENS = {"bert4": 128, "llama2l": 32}


def zoo_build(torch: Any, name: str) -> Any:
    """The model ``name`` (an ``ENTRIES`` key) on the current device, in eval mode, random weights."""
    entry = ZOO_ENTRIES[name]
    if entry.source == "torchvision":
        import torchvision

        return getattr(torchvision.models, name)(weights=None).eval()
    return _LastHidden(torch, _transformer(name)).eval()


def zoo_input(torch: Any, name: str, batch: int, generator: Any) -> Any:
    """The input of ``name`` for ``batch`` samples: float64 images, or token ids (int64)."""
    if ZOO_ENTRIES[name].source == "torchvision":
        return torch.randn((batch, 3, 224, 224), device="cuda", dtype=torch.float64, generator=generator)
    vocab = 30522 if name == "bert4" else 32000
    return torch.randint(0, vocab, (batch, ZOO_TOKENS[name]), device="cuda", generator=generator)


def _transformer(name: str) -> Any:
    import transformers

    if name == "bert4":
        return transformers.BertModel(transformers.BertConfig(num_hidden_layers=4), add_pooling_layer=False)
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                                      num_attention_heads=16, num_key_value_heads=4)  # fmt: skip
    return transformers.LlamaModel(config)


def _LastHidden(torch: Any, model: Any) -> Any:  # noqa: N802 - builds a module, as a class would
    class LastHidden(torch.nn.Module):
        """``model(ids).last_hidden_state``: one tensor in, one out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any) -> Any:
            return self.model(ids).last_hidden_state

    return LastHidden()


ZOO = (("mobilenet_v3_large", "float32", False, 1), ("mobilenet_v3_large", "float16", True, 8),
       ("efficientnet_b0", "float16", True, 8), ("convnext_tiny", "float32", False, 4),
       ("vit_b_16", "float16", False, 8),
       ("bert4", "float16", False, 8), ("llama2l", "bfloat16", False, 1))  # fmt: skip
_built: dict[tuple, tuple[Any, Any]] = {}  # the last (model, dtype, layout): cases of other sizes reuse it


def build(torch: Any, case: Case, fuse: bool = True) -> tuple[Any, Any, Any]:
    """(torch's model, a fresh optimized copy, the float64 reference), all on the GPU with the same weights."""
    key = (case.model, case.dtype, case.channels_last)
    if key not in _built:
        _built.clear()
        torch.cuda.empty_cache()
        torch.manual_seed(0)
        with torch.device("cuda"):
            if case.model == "resnet50":
                import torchvision

                base = torchvision.models.resnet50(weights=None)
            elif case.model.startswith("zoo:"):
                base = zoo_build(torch, case.model.removeprefix("zoo:"))
            else:
                base = llama_linears(torch)
        base = base.eval()
        ref = copy.deepcopy(base).double()
        fmt = torch.channels_last if case.channels_last else torch.contiguous_format
        _built[key] = (base.to(dtype=getattr(torch, case.dtype), memory_format=fmt), ref)
    base, ref = _built[key]
    return base, at.optimize(copy.deepcopy(base), fuse=fuse), ref


def make_input(torch: Any, case: Case) -> Any:
    g = torch.Generator(device="cuda").manual_seed(1)
    if case.model.startswith("zoo:"):
        return zoo_input(torch, case.model.removeprefix("zoo:"), case.batch, g)
    shape = (case.batch, 3, 224, 224) if case.model == "resnet50" else (case.batch, 4096)
    return torch.randn(shape, device="cuda", dtype=torch.float64, generator=g)


def time_loops(torch: Any, fns: list[Any], reps: int, target_ms: float) -> list[float]:
    """ms per call of each of ``fns`` run back to back: the median over ``reps`` loops of about ``target_ms``
    each, the functions' loops interleaved (a, b, a, b, ...) so that clock or thermal drift during the run
    falls on all of them alike."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iters = []
    for fn in fns:
        start.record()
        fn()
        end.record()
        end.synchronize()
        iters.append(max(1, min(1000, round(target_ms / max(start.elapsed_time(end), 1e-3)))))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, n, out in zip(fns, iters, times, strict=True):
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / n)
    return [statistics.median(t) for t in times]


def capture(torch: Any, fn: Any, calls: int = 1) -> tuple[Any, Any]:
    """A CUDA graph of ``calls`` calls of ``fn`` (warmed up on a side stream first), and its last output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            out = fn()
    return graph, out


def accuracy(torch: Any, out: Any, ref: Any, top1: bool) -> dict[str, float | None]:
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    agree = float((out.argmax(-1) == ref.argmax(-1)).double().mean()) if top1 else None
    return {"rel_error": err, "top1_agreement": agree}


def energy(torch: Any, graph: Any, ms: float, quick: bool) -> tuple[float | None, str | None]:
    from autotune.measure.energy import EnergyPlan, default_meter

    meter = default_meter()  # NVML opened once; it synchronizes the whole device, torch's streams too
    e = meter.measure(graph.replay, ms, EnergyPlan(seconds=1.0, max_seconds=2.0 if quick else 4.0))
    return (e.joules_per_launch, None) if e is not None else (None, meter.reason)


def measure_models(torch: Any, models: dict[str, Any], x: Any, ref: Any, top1: bool, quick: bool) -> dict[str, Any]:
    """Eager and graph time, accuracy and J per forward of each model on input ``x``; the models' timing loops
    interleaved."""
    reps, target = (7, 30.0) if quick else (21, 100.0)
    row: dict[str, Any] = {}
    graphs = {}
    for name, model in models.items():
        row.update({f"{name}_{k}": v for k, v in accuracy(torch, model(x), ref, top1).items()})
        graph, out = capture(torch, lambda model=model: model(x))
        graph.replay()
        row[f"{name}_graph_rel_error"] = accuracy(torch, out, ref, top1)["rel_error"]
        graphs[name] = graph
    eager = time_loops(torch, [lambda model=model: model(x) for model in models.values()], reps, target)
    replay = time_loops(torch, [g.replay for g in graphs.values()], reps, target)
    for name, e, g in zip(models, eager, replay, strict=True):
        row[f"{name}_eager_ms"], row[f"{name}_graph_ms"] = e, g
        row[f"{name}_j_per_forward"], why = energy(torch, graphs[name], g, quick)
        if why:
            row[f"{name}_energy_note"] = why
    return row


def weights_floor(torch: Any, model: Any, torch_graph_ms: float) -> dict[str, Any]:
    """The read floor of the model's weights (``read_floor.graph_ms``: each weight read once by a plain
    streaming kernel, one kernel per layer in a CUDA graph), and the most any forward that reads each weight once
    could gain over torch: torch's graph time over the floor."""
    import cupy as cp
    from read_floor import graph_ms

    weights = [cp.asarray(m.weight.detach().view(torch.int16 if m.weight.element_size() == 2 else torch.int32))
               for m in model.modules() if isinstance(m, torch.nn.Linear)]  # fmt: skip
    torch.cuda.synchronize()
    floor_ms, verified = graph_ms(weights)
    return {"read_floor_ms": floor_ms, "read_floor_verified": verified, "torch_over_floor": torch_graph_ms / floor_ms}


def layer_inputs(torch: Any, opt: Any, x: Any) -> list[tuple[str, Any, Any]]:
    """(name, module, copies of its inputs) for every routed module, from one forward (a fused convolution
    takes the residual as its second input)."""
    seen: list[tuple[str, Any, Any]] = []

    def keep(name: str) -> Any:
        return lambda module, args: seen.append((name, module, tuple(a.clone() for a in args)))

    hooks = [m.register_forward_pre_hook(keep(name)) for name, m in opt.named_modules() if at.ATTR in m.__dict__]
    try:
        opt(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


def host_us(torch: Any, fn: Any, bursts: int, burst: int = 50) -> float:
    """Host time per call (us): the median over bursts of ``burst`` calls, the GPU drained between bursts."""
    times = []
    for _ in range(bursts):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        times.append((time.perf_counter() - t0) / burst * 1e6)
    return statistics.median(times)


def time_layer(torch: Any, m: Any, inp: tuple, calls: int, reps: int) -> tuple[float, ...]:
    """GPU us per call of the module's own forward (torch's ops; a fused convolution's: cuDNN's fused op where
    faster) and of the routed call (each ``calls`` times in a CUDA graph), then the host us per eager call."""
    fns = (lambda: type(m).forward(m, *inp), lambda: m(*inp))
    graphs = [capture(torch, fn, calls)[0] for fn in fns]
    gpu = [ms / calls * 1e3 for ms in time_loops(torch, [g.replay for g in graphs], reps, 0.0)]
    del graphs
    host = [host_us(torch, fn, reps) for fn in fns]
    return (*gpu, *host)


def layer_table(torch: Any, opt: Any, x: Any, quick: bool) -> list[dict[str, Any]]:
    """Each routed layer: its input, route, and torch's time against ours (distinct layers timed once)."""
    plans = {layer.name: layer.plans for layer in at.report(opt).layers}
    rows, timed = [], {}
    calls, reps = (5, 5) if quick else (10, 15)
    for name, m, inp in layer_inputs(torch, opt, x):
        key = (type(m).__name__, tuple(inp[0].shape), inp[0].stride(), tuple(m.weight.shape), str(inp[0].dtype),
               getattr(m, "stride", None), getattr(m, "padding", None), m.bias is None, len(inp),
               getattr(m, "relu", None))  # fmt: skip
        if key not in timed:
            timed[key] = time_layer(torch, m, inp, calls, reps)
        torch_us, ours_us, torch_host, ours_host = timed[key]
        plan = "; ".join(f"{what} {route} ({why})" for what, route, why in plans.get(name, ()))
        rows.append({"layer": name, "kind": type(m).__name__, "input": "x".join(map(str, inp[0].shape)), "plan": plan,
                     "torch_us": torch_us, "ours_us": ours_us, "speedup": torch_us / ours_us,
                     "torch_host_us": torch_host, "ours_host_us": ours_host})  # fmt: skip
    return rows


def run_case(torch: Any, case: Case, quick: bool, fuse: bool = True, tag: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {"case": case.name + ("" if fuse else "+unfused") + tag, "model": case.model,
                           "dtype": case.dtype, "batch": case.batch,
                           "layout": "channels_last" if case.channels_last else "contiguous"}  # fmt: skip
    base, opt, ref = build(torch, case, fuse)
    x64 = make_input(torch, case)
    fmt = torch.channels_last if case.channels_last else torch.contiguous_format
    x = x64.to(dtype=getattr(torch, case.dtype), memory_format=fmt) if x64.is_floating_point() else x64
    top1 = case.model == "resnet50" or (case.model.startswith("zoo:") and ZOO_ENTRIES[case.model[4:]].classifier)
    with torch.inference_mode():
        want = ref(x64)
        t0 = time.perf_counter()
        opt(x)
        torch.cuda.synchronize()
        row["first_forward_s"] = time.perf_counter() - t0
        at.report(opt, reset=True)
        opt(x)
        rep = at.report(opt, reset=True)
        row.update({f"calls_{r}": rep.count(r) for r in ("autotune", "vendor", "torch")})
        row["fallbacks"] = rep.fallbacks
        row["fusion"] = rep.fusion
        row.update(measure_models(torch, {"torch": base, "ours": opt}, x, want, top1, quick))
        theirs = base(x).double()  # where the dtype itself is far from float64 (fp16 overflow), ours against torch's
        row["ours_vs_torch_rel"] = float(torch.linalg.norm(opt(x).double() - theirs) / torch.linalg.norm(theirs))
        row["eager_speedup"] = row["torch_eager_ms"] / row["ours_eager_ms"]
        row["graph_speedup"] = row["torch_graph_ms"] / row["ours_graph_ms"]
        if case.model == "llama-linears":
            row.update(weights_floor(torch, base, row["torch_graph_ms"]))
        try:
            row["layers"] = layer_table(torch, opt, x, quick)
        except Exception as exc:  # noqa: BLE001 - the model figures stand without the table
            row["layers_error"] = f"{type(exc).__name__}: {exc}"
    return row


def record_case(torch: Any, case: Case, out: Path) -> dict[str, Any]:
    _, opt, _ = build(torch, case)
    fmt = torch.channels_last if case.channels_last else torch.contiguous_format
    x = make_input(torch, case).to(dtype=getattr(torch, case.dtype), memory_format=fmt)
    with torch.inference_mode():
        opt(x)  # plans decided and kernels compiled outside the recording
        torch.cuda.synchronize()
        path = out / f"{case.name}.yaml"
        with autotune.record(path) as rec:
            opt(x)
    return {"case": case.name, "workload": str(path), "problems": len(rec.workload.problems),
            "calls": sum(p.calls for p in rec.workload.problems)}  # fmt: skip


def git_rev() -> str:
    if os.environ.get("AUTOTUNE_GIT_REV"):  # a copy of the tree whose .git is not the commit it holds
        return os.environ["AUTOTUNE_GIT_REV"]
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10).stdout.strip()  # fmt: skip
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("AUTOTUNE_GIT_REV", "unknown (no git checkout; set AUTOTUNE_GIT_REV)")


def metadata(torch: Any, args: argparse.Namespace) -> dict[str, Any]:
    import cupy

    from autotune.core.device import current_gpu

    tv = None
    with contextlib.suppress(PackageNotFoundError):
        tv = version("torchvision")
    gpu = current_gpu()
    versions = {"torch": torch.__version__, "torchvision": tv, "cudnn": torch.backends.cudnn.version(),
                "cupy": cupy.__version__, "autotune": autotune.__version__, "autotune_rev": git_rev()}  # fmt: skip
    settings = {"cudnn_benchmark": torch.backends.cudnn.benchmark, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                "matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "quick": args.quick}  # fmt: skip
    return {"gpu": gpu.name, "gpu_key": gpu.key, "versions": versions, "settings": settings,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}  # fmt: skip


CSV_SKIP = ("layers", "fallbacks", "traceback")


def merged(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This run's rows, and the cases of the results already at ``path`` that this run did not measure (each
    keeps the date and revision of the run that measured it), in the order of ``cases()``."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return rows
    now = {r["case"] for r in rows}
    kept = [{"date": earlier.get("date"), "autotune_rev": earlier.get("versions", {}).get("autotune_rev"), **r}
            for r in earlier.get("cases", []) if r.get("case") not in now]  # fmt: skip
    order = {c.name: i for i, c in enumerate(cases() + cases(zoo=True))}
    return sorted(rows + kept, key=lambda r: (order.get(r["case"].split("+")[0], len(order)), r["case"]))


def write(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]], fresh: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"models_{meta['gpu_key']}"
    if not fresh:
        rows = merged(out / f"{stem}.json", rows)
    (out / f"{stem}.json").write_text(json.dumps({**meta, "cases": rows}, indent=1, default=str) + "\n")
    flat_meta = {"gpu": meta["gpu"], **{f"{k}_version": v for k, v in meta["versions"].items()}, "date": meta["date"]}
    case_rows = [{**{k: v for k, v in r.items() if k not in CSV_SKIP}, "fallbacks": json.dumps(r.get("fallbacks", {})),
                  **flat_meta} for r in rows]  # fmt: skip
    layer_rows = [{"case": r["case"], **layer, **flat_meta} for r in rows for layer in r.get("layers", [])]
    for name, table in ((f"{stem}.csv", case_rows), (f"models_layers_{meta['gpu_key']}.csv", layer_rows)):
        fields = list(dict.fromkeys(k for row in table for k in row))
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(table)
    return out / f"{stem}.json"


def print_table(meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    print(f"\n{meta['gpu']}  {meta['versions']}  {meta['date']}")
    head = f"{'case':<26}{'eager ms torch/ours':>22}{'x':>6}{'graph ms torch/ours':>22}{'x':>6}"
    print(head + f"{'rel.err torch/ours':>20}{'vs torch':>9}{'top1':>6}{'J torch/ours':>16}  calls a/v/t  fallbacks")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:<26} FAILED: {r['error']}")
            continue
        j = "/".join("-" if r.get(f"{n}_j_per_forward") is None else f"{r[f'{n}_j_per_forward']:.3f}"
                     for n in ("torch", "ours"))  # fmt: skip
        top1 = "-" if r["ours_top1_agreement"] is None else f"{r['ours_top1_agreement']:.2f}"
        print(f"{r['case']:<26}{r['torch_eager_ms']:>11.3f}/{r['ours_eager_ms']:<10.3f}{r['eager_speedup']:>6.2f}"
              f"{r['torch_graph_ms']:>11.3f}/{r['ours_graph_ms']:<10.3f}{r['graph_speedup']:>6.2f}"
              f"{r['torch_rel_error']:>10.1e}/{r['ours_rel_error']:<9.1e}"
              f"{r.get('ours_vs_torch_rel', float('nan')):>9.1e}{top1:>6}{j:>16}"
              f"  {r['calls_autotune']}/{r['calls_vendor']}/{r['calls_torch']}  {r['fallbacks'] or ''}")  # fmt: skip
    floors = [r for r in rows if "read_floor_ms" in r]
    if floors:
        print("\nread floor of the weights (each read once, one plain streaming kernel per layer, one CUDA graph):")
        for r in floors:
            print(f"{r['case']:<26} floor {r['read_floor_ms']:.3f} ms (verified: {r['read_floor_verified']}); "
                  f"torch {r['torch_graph_ms']:.3f} ms = {r['torch_over_floor']:.2f}x the floor, "
                  f"ours {r['ours_graph_ms']:.3f} ms = {r['ours_graph_ms'] / r['read_floor_ms']:.2f}x")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (about 4 minutes on an H200)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--record", type=Path, metavar="DIR", help="only write each case's workload YAML into DIR")
    ap.add_argument("--case", action="append", metavar="SUBSTRING", help="run only cases whose name has it")
    ap.add_argument("--fresh", action="store_true",
                    help="write only this run's cases (default: keep the other cases of the results file, each with "
                    "its own date and revision)")  # fmt: skip
    ap.add_argument("--no-cudnn-benchmark", action="store_true", help="leave cuDNN's benchmark mode off")
    ap.add_argument("--no-fuse", action="store_true",
                    help="optimize(model, fuse=False): no BatchNorm folding, ReLU fusion or Linear merging (the "
                    "cases are written as CASE+unfused)")  # fmt: skip
    ap.add_argument("--zoo", action="store_true",
                    help="run the other models of ZOO (MobileNetV3, EfficientNet-B0, ConvNeXt-T, "
                    "ViT-B/16, a BERT encoder, a small Llama) instead of the judged cases")  # fmt: skip
    ap.add_argument("--untuned", action="store_true",
                    help="before any tuning: an empty tuned directory and a fresh online-choice cache (temporary "
                    "directories), so only the runtime's online choice and the vendor serve (cases written as "
                    "CASE+untuned)")  # fmt: skip
    args = ap.parse_args()
    if args.untuned:  # read by the runtime on every lookup; set before the first one
        os.environ["AUTOTUNE_TUNED_DIR"] = tempfile.mkdtemp(prefix="autotune-untuned-")
        os.environ["AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="autotune-cache-")
    try:
        import torch
    except ImportError:
        print("benchmarks/models.py needs torch (and torchvision for ResNet-50): pip install torch torchvision")
        return 2
    if not torch.cuda.is_available():
        print("benchmarks/models.py needs a CUDA GPU that torch can use; torch sees none")
        return 2
    torch.backends.cudnn.benchmark = not args.no_cudnn_benchmark
    meta = metadata(torch, args)  # first: a case that breaks the CUDA context cannot take it with it
    chosen = [c for c in cases(args.zoo) if not args.case or any(s in c.name for s in args.case)]
    if not chosen:
        print(f"no case matches {args.case}; cases: {', '.join(c.name for c in cases(args.zoo))}")
        return 2
    rows = []
    for case in chosen:
        t0 = time.perf_counter()
        try:
            tag = "+untuned" if args.untuned else ""
            row = (record_case(torch, case, args.record) if args.record
                   else run_case(torch, case, args.quick, not args.no_fuse, tag))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a failed case is recorded, the others still run
            row = {"case": case.name, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        row["wall_s"] = time.perf_counter() - t0
        row.update(date=meta["date"], autotune_rev=meta["versions"].get("autotune_rev"))
        print(f"{case.name}: {row.get('error') or 'done'} in {row['wall_s']:.1f} s", flush=True)
        rows.append(row)
        if not args.record:
            write(args.out, meta, rows, args.fresh)  # after every case: a run stopped midway keeps what it measured
        with contextlib.suppress(RuntimeError):  # a broken CUDA context: the next cases record their own errors
            torch.cuda.empty_cache()
    if args.record:
        for r in rows:
            print(f"{r['case']:<26} {r.get('error') or r['workload']}")
        return 0 if all("error" not in r for r in rows) else 1
    path = write(args.out, meta, rows, args.fresh)
    print_table(meta, rows)
    print(f"\nwrote {path} and its CSVs")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
