"""The PyTorch drop-in: serve a model's ``nn.Linear`` and ``nn.Conv2d`` calls with autotune's kernels.

    model = autotune.torch.optimize(model.eval())   # BatchNorm folded, ReLUs fused, Linear and Conv2d routed
    with torch.inference_mode():
        y = model(x)
    print(autotune.torch.report(model))             # calls by autotune, by the vendor, fallbacks and why

Inference only. A routed module keeps its class, parameters and ``state_dict``; its instance ``forward``
decides once per input shape, dtype and memory format: ``nn.Linear`` is the GEMM of layout NT (W read in
place through ``.t()``, leading dims flattened as a view, bias as ``beta = 1`` over an output pre-filled
with it); ``nn.Conv2d`` the NCHW or, for channels-last input, NHWC convolution (bias added after). Where
the runtime serves the vendor, torch's own op runs directly (also reported to :func:`autotune.record`).
Every other call runs torch's op, counted under a :class:`Fallback` reason. Before routing, ``optimize``
rewrites the traced graph for inference (``autotune.serve.torch_fusion``: BatchNorm folding, conv + ReLU and
conv + residual + ReLU fusion, Linears sharing an input merged); ``fuse=False`` routes the model as it is. Torch
is imported only here and in the modules this one imports when called.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .serve import dispatch, recording, runtime
from .serve.torch_backend import AutotuneBackend, _torch, step_of
from .serve.torch_plans import Fallback, Kind, Plan, Route, plan_call, structural_reason

log = logging.getLogger(__name__)
_AUTOTUNE, _VENDOR, _TORCH = Route.AUTOTUNE, Route.VENDOR, Route.TORCH  # module globals: read on every call

__all__ = [
    "AutotuneBackend",
    "Fallback",
    "Kind",
    "LayerReport",
    "Plan",
    "Report",
    "Route",
    "optimize",
    "plan_call",
    "report",
    "restore",
    "step_of",
    "structural_reason",
]

ATTR = "_autotune_router"  # the router object a routed module carries


@dataclass(frozen=True)
class LayerReport:
    """One routed module: its calls by route, its fallbacks by reason, and the plan of each input seen."""

    name: str
    kind: str
    calls: dict[str, int]  # Route value -> calls
    fallbacks: dict[str, int]  # Fallback value -> calls
    plans: tuple[tuple[str, str, str], ...]  # (problem label or input shape, route, provenance step or reason)


@dataclass(frozen=True)
class Report:
    """Calls through the routed modules of a model, by route and by fallback reason."""

    layers: tuple[LayerReport, ...]
    skipped: dict[str, str] = field(default_factory=dict)  # module name -> why it is not routed at all
    fusion: str = ""  # what optimize's graph rewrite did (``torch_fusion.Fusion``), or why it did nothing

    def count(self, route: str) -> int:
        return sum(layer.calls.get(route, 0) for layer in self.layers)

    @property
    def fallbacks(self) -> dict[str, int]:  # reason -> calls, over all layers
        return dict(sorted(sum((Counter(layer.fallbacks) for layer in self.layers), Counter()).items()))

    def __str__(self) -> str:
        ours, vendor, torch = (self.count(r) for r in Route)
        head = f"{len(self.layers)} routed modules: {ours} calls by autotune, {vendor} by the vendor, {torch} fallbacks"
        lines = [head] + [f"  fallback: {n} x {reason}" for reason, n in self.fallbacks.items()]
        lines += [f"  not routed: {name} ({why})" for name, why in self.skipped.items()]
        lines += [f"  {self.fusion}"] if self.fusion else []
        return "\n".join(lines)


class Router:
    """The ``forward`` of one routed module: decides per input signature, then serves each call."""

    def __init__(self, module: Any, kind: str, backend: Any, fuse_bias: bool) -> None:
        self.module, self.kind, self.backend, self.fuse_bias = module, kind, backend, fuse_bias
        self.torch_forward: Callable[[Any], Any] = type(module).forward.__get__(module)
        self.static = structural_reason(kind, module)
        self.by_layout = kind == Kind.CONV2D  # served NCHW or NHWC, as each input comes
        self.plans: dict[tuple, Plan] = {}
        self.calls, self.fallbacks = Counter[str](), Counter[str]()
        self.weight_cache: dict[Any, Any] = {}  # the weight in the other memory format, made once
        self.params: dict[str, Any] = getattr(module, "_parameters", {})  # read directly: Module.__getattr__ is slow
        # key -> (runtime.generation, the fast serve of an AUTOTUNE plan, or None for a VENDOR plan): one lookup a call
        self.fast: dict[tuple, tuple[int, Any]] = {}
        self.fast_calls = 0  # calls served by a fast serve (counted apart: the steady state skips the Counter)
        self.vendor_calls = 0  # and calls sent to torch's own op by a vendor plan
        # the backend's per-call checks, looked up once (each call's host time is what the drop-in adds)
        self.grad_enabled, self.on_device, self.layout_of = backend.grad_enabled, backend.on_device, backend.layout_of
        self.built: dict[tuple, int] = {}  # key -> runtime.generation its fast serve was asked for
        # a fused module's epilogue (bias, residual, ReLU): our kernel then computes the convolution without the bias
        self.finish: Callable[..., Any] | None = getattr(module, "finish", None)

    def param(self, name: str) -> Any:
        params = self.params
        return params[name] if name in params else getattr(self.module, name)  # e.g. a parametrized weight

    def kernel_bias(self) -> Any:
        """The bias our kernel adds: none where the module's ``finish`` adds it."""
        return None if self.finish is not None else self.param("bias")

    def __call__(self, x: Any, *rest: Any) -> Any:
        """The module's forward; ``rest`` are a fused module's further inputs (the residual), which its
        ``finish`` takes after our kernel."""
        w = self.param("weight")
        reason = self.static or (Fallback.TRAINING if self.module.training else None)
        if reason is None and self.grad_enabled() and (x.requires_grad or w.requires_grad):
            reason = Fallback.AUTOGRAD
        if reason is not None or not self.on_device(x):
            return self._fallback(reason or Fallback.DEVICE, x, *rest)
        layout = self.layout_of(x) if self.by_layout else None
        key = (x.shape, x.dtype, w.dtype, x.device, layout)
        fast = self.fast.get(key)
        if fast is not None and fast[0] == runtime.generation:  # the steady state: our kernel, or torch's op
            serve = fast[1]
            if serve is None:
                return self._vendor(key, x, rest)
            try:
                out = serve(x, w, self.kernel_bias())
            except Exception as exc:  # noqa: BLE001 - as in _serve: torch serves this problem from now on
                return self._fallback(self._failed(self.plans[key], key, exc), x, *rest)
            if out is not None:
                self.fast_calls += 1
                return out if self.finish is None else self.finish(out, *rest)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._decide(key, x, layout, rest)
            if plan is None:
                return self._fallback(Fallback.CAPTURE, x, *rest)
        if plan.route is _AUTOTUNE:
            out = self._serve(plan, key, x, rest)
            if isinstance(out, Fallback):
                return self._fallback(out, x, *rest)
            self.calls[_AUTOTUNE] += 1
            return out
        if plan.route is _VENDOR:
            self.fast[key] = (runtime.generation, None)  # the next call finds it in one lookup
            return self._vendor(key, x, rest)
        return self._fallback(plan.reason, x, *rest)  # type: ignore[arg-type]

    def _vendor(self, key: tuple, x: Any, rest: tuple) -> Any:
        """torch's own op for a VENDOR plan, reported to the recording's observer while one records."""
        self.vendor_calls += 1
        observe = recording.observer()
        if observe is None:
            return self.torch_forward(x, *rest)
        plan = self.plans[key]
        return observe(plan.kernel, plan.problem, lambda: self.torch_forward(x, *rest))

    def _fallback(self, reason: Fallback, x: Any, *rest: Any) -> Any:
        self.calls[_TORCH] += 1
        self.fallbacks[reason] += 1
        return self.torch_forward(x, *rest)

    def _decide(self, key: tuple, x: Any, layout: str | None, rest: tuple = ()) -> Plan | None:
        """The plan for a new input signature; None (nothing kept) while a CUDA graph is being captured."""
        if self.backend.capturing():
            return None
        if not self.backend.on_current_device(x):
            plan = Plan(Route.TORCH, Fallback.DEVICE)
        elif self.kind == Kind.LINEAR and self.backend.rows(x, self.module.in_features) is None:
            plan = Plan(Route.TORCH, Fallback.INPUT)  # strided rows (a column slice of a merged Linear's output)
        else:
            dtypes = (str(key[1]).removeprefix("torch."), str(key[2]).removeprefix("torch."))  # "float16"
            plan = plan_call(self.kind, self.module, tuple(key[0]), dtypes, layout, self.backend, x.device)
            if plan.route is _AUTOTUNE:
                plan = self._race(plan, key, x, rest)
        self.plans[key] = plan
        if plan.route is not _AUTOTUNE:  # the race may have built a fast serve of ours: torch's op won
            self.fast.pop(key, None)
        return plan

    def _race(self, plan: Plan, key: tuple, x: Any, rest: tuple = ()) -> Plan:
        """Our kernel against torch's own op on this input, as the user's torch runs it (its TF32 and cuDNN
        settings): the faster serves from now on, so the drop-in is never slower than the model it replaces.
        A backend without ``race`` (the CPU tests' fakes) keeps the runtime's answer."""
        race = getattr(self.backend, "race", None)
        if race is None or not dispatch.vendor_enabled():  # AUTOTUNE_VENDOR=0: our kernels serve, unraced
            return plan
        self.plans[key] = plan  # _serve may replace it with a torch plan if our kernel fails

        def ours() -> Any:
            out = self._serve(plan, key, x, rest)
            if isinstance(out, Fallback):  # nothing launched: no time to compare (the race returns None)
                raise RuntimeError(f"our kernel does not take this input: {out.value}")
            return out

        timed = race(ours, lambda: self.torch_forward(x, *rest), x)
        if timed is None or self.plans[key] is not plan:
            return self.plans[key]
        ours_ms, torch_ms = timed
        detail = f"{plan.detail}; raced on this input: ours {ours_ms * 1e3:.1f} us, torch {torch_ms * 1e3:.1f} us"
        route = _AUTOTUNE if ours_ms < torch_ms else _VENDOR
        return Plan(route, None, plan.kernel, plan.problem, detail, plan.sizes)

    def _fast(self, plan: Plan, key: tuple, x: Any) -> Any:
        """The backend's fast serve of this input signature (asked for once per launcher generation), or None."""
        generation = runtime.generation
        got = self.fast.get(key)
        if got is not None and got[0] == generation:
            return got[1]
        if self.built.get(key) == generation:
            return None  # asked already: the backend has none for it
        self.built[key] = generation
        self.fast.pop(key, None)
        build = getattr(self.backend, "fast", None)
        serve = build(self.kind, self.module, plan, x, self.weight_cache, self.fuse_bias) if build else None
        if serve is not None:
            self.fast[key] = (generation, serve)
        return serve

    def _serve(self, plan: Plan, key: tuple, x: Any, rest: tuple = ()) -> Any:
        """Our kernel's output (a fused module's ``finish`` applied), or the reason this call cannot be served
        (a failing kernel's plan becomes one): the fast serve where it takes the call, else the runtime's gemm
        or conv2d on torch tensors."""
        m, backend = self.module, self.backend
        try:
            fast = self._fast(plan, key, x)
            out = fast(x, self.param("weight"), self.kernel_bias()) if fast is not None else None
            if out is None and self.kind == Kind.LINEAR:
                rows = backend.rows(x, m.in_features)
                if rows is None:  # not viewable as [M, in] rows (a strided input): torch serves this call
                    return Fallback.INPUT
                out = backend.linear(rows, self.param("weight"), self.kernel_bias(), self.fuse_bias)
                out = out.view(*x.shape[:-1], m.out_features)
            elif out is None:
                w, b = self.param("weight"), self.kernel_bias()
                out = backend.conv2d(x, w, b, m.stride[0], m.padding[0], key[4], self.weight_cache)
            return out if self.finish is None else self.finish(out, *rest)
        except Exception as exc:  # noqa: BLE001 - a kernel that fails is never served again; torch takes over
            return self._failed(plan, key, exc)

    def _failed(self, plan: Plan, key: tuple, exc: Exception) -> Fallback:
        """Our kernel failed on this signature: torch serves it from now on (re-raised under capture: the
        failure broke the capture, and torch's op cannot be captured in its place)."""
        if self.backend.capturing():
            raise exc
        log.warning("autotune.torch: %s %s failed, torch serves it from now on: %s", plan.kernel,
                    plan.problem.label, exc)  # fmt: skip
        self.plans[key] = Plan(Route.TORCH, Fallback.RUNTIME, plan.kernel, plan.problem, str(exc))
        self.fast.pop(key, None)
        return Fallback.RUNTIME

    def layer_report(self, name: str) -> LayerReport:
        plans = tuple((p.problem.label if p.problem else "x".join(map(str, k[0])), p.route.value,
                       str(p.reason or p.detail)) for k, p in list(self.plans.items()))  # fmt: skip
        calls, fallbacks = ({str(k): n for k, n in c.items()} for c in (self.calls, self.fallbacks))
        for route, n in ((_AUTOTUNE, self.fast_calls), (_VENDOR, self.vendor_calls)):
            if n:
                calls[route.value] = calls.get(route.value, 0) + n
        return LayerReport(name, self.kind, calls, fallbacks, plans)


def optimize(model: Any, *, backend: Any = None, fuse_bias: bool = True, fuse: bool = True) -> Any:
    """Route ``model``'s ``nn.Linear`` and ``nn.Conv2d`` modules through autotune for inference; returns the
    model to run. With ``fuse`` (an eval-mode model that ``torch.fx`` can trace), that is a traced copy with each
    BatchNorm folded into its convolution and ReLUs (and residual adds before them) fused into the convolution
    (``autotune.serve.torch_fusion``); the model passed in keeps its own forward. Otherwise ``model`` itself.
    Routing changes the modules in place (:func:`restore` undoes it; calling again re-routes and counts afresh)."""
    nn = _torch().nn
    backend = backend if backend is not None else AutotuneBackend()
    fusion = None
    if fuse:
        from .serve import torch_fusion

        model, fusion = torch_fusion.fuse(model)
        fused_type = torch_fusion.FusedConv2d
    skipped: dict[str, str] = {}
    for name, m in model.named_modules():
        kind, base = (Kind.LINEAR, nn.Linear) if isinstance(m, nn.Linear) else (Kind.CONV2D, nn.Conv2d)
        if not isinstance(m, base):
            continue
        lazy = isinstance(m, nn.modules.lazy.LazyModuleMixin)
        if fusion is not None and type(m) is fused_type:
            m.__dict__[ATTR] = m.__dict__["forward"] = Router(m, kind, backend, fuse_bias)
        elif lazy or type(m).forward is not base.forward:
            skipped[name or "(model)"] = "lazy, not made yet" if lazy else f"{type(m).__name__} overrides forward"
        else:
            m.__dict__[ATTR] = m.__dict__["forward"] = Router(m, kind, backend, fuse_bias)
    model.__dict__["_autotune_skipped"] = skipped
    model.__dict__["_autotune_fusion"] = str(fusion) if fusion is not None else "fuse=False"
    return model


def restore(model: Any) -> Any:
    """Undo :func:`optimize`: every module's own ``forward`` again. Returns ``model``."""
    for m in model.modules():
        if m.__dict__.pop(ATTR, None) is not None:
            m.__dict__.pop("forward", None)
    model.__dict__.pop("_autotune_skipped", None)
    model.__dict__.pop("_autotune_fusion", None)
    return model


def report(model: Any, *, reset: bool = False) -> Report:
    """Calls served so far by each routed module of ``model``, by route and fallback reason; ``reset=True``
    starts the counts again (the plans stay)."""
    layers = []
    for name, m in model.named_modules():
        if (router := m.__dict__.get(ATTR)) is None:
            continue
        layers.append(router.layer_report(name or "(model)"))
        if reset:
            router.calls.clear()
            router.fallbacks.clear()
            router.fast_calls = router.vendor_calls = 0
    skipped = dict(model.__dict__.get("_autotune_skipped", {}))
    return Report(tuple(layers), skipped, str(model.__dict__.get("_autotune_fusion", "")))
