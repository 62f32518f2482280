"""Build the launcher that serves a problem: gather what ``dispatch.decide`` needs on this GPU (vendor
availability, capture state, the remembered choice, the candidates to measure), then build what it decides.

Called by ``runtime.load``; the runtime passes in how to build one of our kernels (``build_ours``), so this
module does not reach back into it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..build.templates import installed_renders, render, template_hash
from ..core.errors import AutotuneError
from ..kernels import FAMILIES
from ..measure.vendor import VendorLauncher, vendor_for
from . import choices, dispatch, online

log = logging.getLogger(__name__)

MAX_STORED_CANDIDATES = 3  # nearest stored winners measured online, besides the default and the vendor


def options(kernel: str, problem: Any, ranked: list[Any], vendor: str | None, default: Any,
            build_ours: Callable[[Any], Any]) -> list[online.Option]:  # fmt: skip
    """The vendor first (its output is the reference), then the nearest stored winners, then the default."""
    opts: list[online.Option] = []
    if vendor is not None:
        opts.append(online.Option(vendor, "vendor", lambda: VendorLauncher(kernel, problem, vendor, {"final": False})))
    seen: set[tuple[str, tuple]] = set()
    for c in [*ranked[:MAX_STORED_CANDIDATES], *([default] if default is not None else [])]:
        key = (c.template, tuple(sorted(c.params.items())))
        if key in seen or FAMILIES[kernel].check_problem(c.template, c.params, problem):
            continue
        seen.add(key)
        name = FAMILIES[kernel].kernel_name(c.template, c.params, problem)
        opts.append(online.Option(name, f"{c.step} {c.source}".strip(), lambda c=c: _loaded(build_ours, c), c))
    return opts


def _loaded(build_ours: Callable[[Any], Any], choice: Any) -> Any:
    """``build_ours(choice)``, a driver's refusal to load the kernel (too much shared memory, say) as an
    AutotuneError: the candidate is recorded as not built, not a crash of the caller's call."""
    import cupy as cp

    try:
        return build_ours(choice)
    except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as exc:
        raise AutotuneError(f"cannot load {choice.template}: {str(exc).splitlines()[0][:200]}") from None


def _valid(kernel: str, problem: Any, record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A remembered record still applies: ours renders the same source and fits the problem."""
    if record is None or record.get("served") not in ("ours", "vendor") or not isinstance(record.get("winner"), int):
        return None
    rows = record.get("candidates")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "name" in r for r in rows):
        return None
    if not 0 <= record["winner"] < len(rows):
        return None
    if record["served"] == "vendor":
        return record
    try:
        ok = isinstance(record.get("params"), dict) and installed_renders(kernel, record, problem)
        ok = ok and not FAMILIES[kernel].check_problem(record["template"], record["params"], problem)
    except (KeyError, TypeError, ValueError):
        ok = False
    return record if ok else None


def _augment(kernel: str, problem: Any, record: dict[str, Any], opts: list[online.Option]) -> dict[str, Any]:
    """What the cache needs to re-validate a winner of ours: template, params and the hashes it rendered."""
    record = {**record, "problem": choices.problem_key(kernel, problem), "versions": choices.versions()}
    if record["served"] == "ours":
        c = opts[record["winner"]].choice
        record.update(template=c.template, params=dict(c.params), template_hash=template_hash(kernel, c.template),
                      source_hash=render(kernel, c.template, c.params, problem).source_hash)  # fmt: skip
    return record


def serve(kernel: str, problem: Any, lookup: Any, *, ranked: list[Any], default: Any, gpu_key: str,
          cache: Path, build_ours: Callable[[Any], Any], make_choice: Callable[..., Any],
          online_on: bool, budget_s: float = online.DEFAULT_BUDGET_S) -> Any:  # fmt: skip
    """The launcher for ``problem``: ours (a ``Launcher`` from ``build_ours``) or a ``VendorLauncher``; its
    ``provenance`` says which step chose it, why, and the measurement behind an online choice."""
    from ..measure.streams import capturing

    if not dispatch.vendor_enabled():
        if lookup is None:
            raise AutotuneError(f"no template of ours computes {kernel} {problem.dtype} {problem.layout} "
                                f"{problem.label}, and {dispatch.ENV_VENDOR}=0 rules out the vendor")  # fmt: skip
        launcher = build_ours(lookup)
        launcher.serving = {"step": lookup.step, "why": f"{dispatch.ENV_VENDOR}=0: the lookup chain's kernel"}
        return launcher
    vendor, missing = vendor_for(kernel, problem.dtype)
    path = choices.choices_path(cache, gpu_key)
    key = choices.problem_key(kernel, problem)
    proven = lookup is not None and lookup.step == "exact" and dispatch._exact(lookup, vendor, "") is not None
    remembered = None if proven or not online_on else choices.recall(path, key, choices.versions())
    cached = _valid(kernel, problem, remembered)
    opts: list[online.Option] = []

    def measure() -> dict[str, Any]:
        try:
            runner = online.GpuRunner(kernel, problem)
        except MemoryError as exc:  # the problem's fresh inputs do not fit beside the caller's data
            return {"served": "none", "winner": None, "candidates": [], "reason": f"out of memory: {exc}"}
        opts.extend(options(kernel, problem, ranked, vendor, default, build_ours))
        record = online.measure_options(opts, runner, budget_s)
        if record["served"] != "none":
            record = _augment(kernel, problem, record, opts)
            choices.remember(path, key, record)
        return record

    decision = dispatch.decide(lookup, vendor=vendor, vendor_missing=missing, online=online_on,
                               capturing=capturing(), cached=cached, measure=measure)  # fmt: skip
    info = {"step": decision.step, "why": decision.why, "measurement": decision.record, "final": decision.final}
    log.debug("%s %s %s: %s (%s)", kernel, problem.dtype, problem.label, decision.step, decision.why)
    if decision.vendor:
        return VendorLauncher(kernel, problem, decision.source, {**info, "source": decision.source,
                                                                 "template": None, "entry": None})  # fmt: skip
    choice = make_choice(decision.template, decision.params, decision.step, decision.source, decision.entry)
    launcher = build_ours(choice)
    launcher.serving = info
    launcher.provisional = not decision.final
    return launcher
