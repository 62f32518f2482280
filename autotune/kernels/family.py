"""``TemplateFamily``: what a kernel family does the same way for every template, written once.

A family (GEMM, conv2d) lists its ``Template`` objects in one registry; this base builds the ``templates`` table of
``TemplateInfo`` (with the "auto" template whose TEMPLATE parameter picks one of them), resolves "auto"
configurations to the template they render, and dispatches checks, derived values, the render context, kernel
names, launches, scratch and kernel arguments to that template. The family itself keeps what is its own: its
problem type (``problem``, and ``load_problem`` for ``autotune.load``'s sizes), inputs, reference, vendor baseline
and the vendor library served like a launcher (``vendor_library``, ``vendor_call``, ``vendor_torch_call``), the
default spec files that tune its problems (``spec_files``) and the plain kernel arguments. Generic code asks these
of ``FAMILIES[kernel]`` and never compares a family's name.

Callers that pass no ``limits`` get the sm_90 table's (``autotune.core.limits.SM90``), the GPU the stored entries
were tuned on.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from ..core.limits import SM90, DeviceLimits
from .base import Launch, Params, TemplateInfo, auto_info, check_auto
from .template import Template


class TemplateFamily(abc.ABC):
    """The dispatch shared by every family. Subclasses set ``name`` and ``shape_help`` and call
    ``__init__`` with their templates, in the order the "auto" template offers them."""

    name: str
    shape_help: str
    layouts: tuple[str, ...]  # the operand layouts of its problems; the first is a spec's default
    c_abi_note: str = ""  # what every template of the family shares in its exported C signature

    def __init__(self, templates: Sequence[Template], layouts: tuple[str, ...], auto_skip: tuple[str, ...] = ()):
        self._impl: dict[str, Template] = {t.name: t for t in templates}
        self.templates: dict[str, TemplateInfo] = {t.name: t.info() for t in templates}
        self.templates["auto"] = auto_info(self.templates, layouts, skip=auto_skip)

    # --- the registry -------------------------------------------------------------------------------------

    def resolve(self, template: str, params: Params) -> str:
        """The concrete template a configuration renders: "auto" defers to its TEMPLATE parameter."""
        return str(params.get("TEMPLATE", "")) if template == "auto" else template

    def template(self, template: str, params: Params | None = None) -> Template:
        """The ``Template`` a configuration renders ("auto" resolved through ``params``); KeyError if unknown."""
        return self._impl[self.resolve(template, params or {})]

    @property
    def template_dir(self) -> str:
        """The folder of its ``.cu.j2`` files under templates/: the family's name unless it says otherwise."""
        return self.name

    def auto_choices(self) -> tuple[str, ...]:
        """The templates the "auto" template's TEMPLATE parameter chooses from, in registry order."""
        return tuple(self.templates["auto"].kind("TEMPLATE").removeprefix("choice:").split(","))

    def implementations(self) -> tuple[Template, ...]:
        """Every concrete template, in registry order."""
        return tuple(self._impl.values())

    # --- configuration -> derived values ------------------------------------------------------------------

    def derived(self, template: str, params: Params, problem: Any = None) -> dict[str, Any]:
        return self.template(template, params).derived(params, problem)

    def context(self, template: str, params: Params, problem: Any) -> dict[str, Any]:
        """Everything a template renders from besides the parameters: derived values and the variant."""
        return self.template(template, params).context(params, problem)

    def check(self, template: str, params: Params, limits: DeviceLimits = SM90) -> str | None:
        """Why this configuration cannot be built, or None. Mirrors the templates' static_asserts."""
        if template not in self.templates:
            return f"unknown {self.name} template {template!r}; expected one of {', '.join(self.templates)}"
        if template == "auto":
            reason = check_auto(self.templates, params)
            if reason:
                return reason
        return self.template(template, params).check(params, limits)

    def check_problem(self, template: str, params: Params, problem: Any, limits: DeviceLimits = SM90) -> str | None:
        """Why this configuration cannot compute this problem (dtype, layout, grid and index limits), or None."""
        return self.template(template, params).check_problem(params, problem, limits)

    def value_text(self, value: Any) -> str:
        """A parameter's value as kernel names spell it."""
        return str(value)

    def kernel_name(self, template: str, params: Params, problem: Any = None) -> str:
        """``<family>_<template>[_<variant tag>]_<param><value>...``: names encode their configuration."""
        t = self.template(template, params)
        parts = [f"{k.lower()}{self.value_text(params[k])}" for k in self.templates[t.name].named_params(params)]
        tag = t.name_tag(problem) if problem is not None else ()
        return "_".join([self.name, t.name, *tag, *parts])

    def launch(self, template: str, params: Params, problem: Any) -> Launch:
        """The main kernel's launch; ``before``: kernels named after it, launched first on the same stream."""
        t = self.template(template, params)
        return t.launch(params, problem, self.kernel_name(t.name, params, problem))

    # --- scratch and arguments ----------------------------------------------------------------------------

    def scratch(self, template: str, params: Params, problem: Any) -> tuple[int, int] | None:
        """(partial-sum floats or work-matrix elements, counters) of templates that take scratch, else None."""
        return self.template(template, params).scratch(params, problem)

    def extra_bytes(self, template: str, params: Params, problem: Any) -> int:
        """Device memory a candidate needs besides its operands and output."""
        return self.template(template, params).extra_bytes(params, problem)

    def new_scratch(self, template: str, params: Params, problem: Any) -> tuple[Any, ...]:
        """The scratch buffers of one launch site (zeroed partials and counters, packed copies, tensor maps)."""
        return self.template(template, params).new_scratch(params, problem)

    def before_args(self, template: str, params: Params, problem: Any, inputs: Any,
                    scratch: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:  # fmt: skip
        """Arguments of each step of ``launch(...).before``; () for one-launch templates."""
        return self.template(template, params).before_args(params, problem, inputs, scratch)

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float = 1.0, beta: float = 0.0,
                    scratch: tuple[Any, ...] = ()) -> tuple[Any, ...]:  # fmt: skip
        """The main kernel's arguments: those of the template whose kind of scratch this is, else the family's
        plain ones followed by the scratch buffers."""
        owner = next((t for t in self._impl.values() if t.takes_scratch(scratch)), None)
        if owner is not None:
            return owner.kernel_args(problem, inputs, out, alpha, beta, scratch)
        return self.plain_args(problem, inputs, out, alpha, beta, scratch)

    def args_for(self, template: str, params: Params, problem: Any) -> Callable[..., tuple[Any, ...]]:
        """A function ``(a, b, out, alpha, beta, scratch) -> kernel arguments`` for one launch site, made once so
        that serving a call costs one Python call (the runtime's hot path)."""
        impl = self.template(template, params)
        if type(impl).takes_scratch is not Template.takes_scratch:  # its own kind of scratch: it decides per call
            return lambda a, b, out, alpha, beta, scratch: self.kernel_args(problem, (a, b), out, alpha, beta, scratch)
        return self.plain_args_for(problem)

    def plain_args_for(self, problem: Any) -> Callable[..., tuple[Any, ...]]:
        """``args_for`` of templates that take the family's plain arguments; families may precompute more."""
        return lambda a, b, out, alpha, beta, scratch: self.plain_args(problem, (a, b), out, alpha, beta, scratch)

    @abc.abstractmethod
    def plain_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                   scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """The arguments every template of the family takes unless its scratch says otherwise."""

    def matrix_dims(self, problem: Any) -> tuple[int, int, int]:
        """The M, N and K an exported row carries (``autotune_tuned_config``): a matrix product's sizes; 0, 0, 0
        for a family whose problems are not one."""
        return 0, 0, 0

    def c_abi(self, template: str) -> str:
        """The exported C signature of a template's kernels: the family's shared note, then the template's."""
        return " ".join(x for x in (self.c_abi_note, self._impl[template].c_abi()) if x)

    # --- per family ---------------------------------------------------------------------------------------

    @abc.abstractmethod
    def problem(self, shape: Any, dtype: str, layout: str = ...) -> Any: ...

    @abc.abstractmethod
    def default_config(self, dtype: str, layout: str = ...) -> tuple[str, dict[str, Any]]: ...

    def spec_files(self, problem: Any) -> tuple[str, ...]:
        """The spec files under configs/ whose search space tunes ``problem`` when a workload names none, in the
        order to try them (``autotune run workload.yaml``); () when none does."""
        return ()

    # --- the vendor library, served like our kernels (``autotune.measure.vendor``) --------------------------

    def vendor_library(self, dtype: str, torch_ok: Callable[[], bool]) -> tuple[str | None, str]:
        """(its name, "") when a vendor library computes the family's ``dtype`` problems here, else (None, the
        sentence that says why not); ``torch_ok()`` (whether torch imports with CUDA) is asked only where the
        library is reached through torch."""
        return None, f"no vendor library computes {self.name}"

    def vendor_call(self, problem: Any, on_cupy_stream: Callable[[], Any]) -> Callable[..., Any]:
        """The vendor library's ``(a, b, out, alpha, beta) -> out`` for one problem, called like a ``Launcher``
        (operands as stored, ``out`` filled) on CuPy's current stream; torch work runs inside
        ``on_cupy_stream()``. Made once per launcher; CuPy and torch are imported when it runs."""
        raise ValueError(f"no vendor library computes {self.name}")

    def vendor_torch_call(self, problem: Any) -> Callable[..., Any]:
        """The vendor library on torch tensors, on torch's current stream (the family says with which arguments)."""
        raise ValueError(f"no vendor library computes {self.name}")

    def load_problem(self, sizes: dict[str, int], dtype: str, layout: str) -> Any:
        """The problem ``autotune.load(<family>, **sizes)`` names (``sizes``: its keyword sizes); ValueError or
        TypeError with one sentence when they do not describe one."""
        return self.problem(dict(sizes), dtype, layout)
