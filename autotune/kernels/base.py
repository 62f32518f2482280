"""The records every kernel family shares: a template's declaration (``TemplateInfo``), launches (``Launch``,
``Step``) and the problem protocol. The dispatch itself is ``family.TemplateFamily``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Params = Mapping[str, Any]


@dataclass(frozen=True)
class TemplateInfo:
    """A template of a family: its file, its parameters and the dtypes it implements."""

    name: str
    params: tuple[str, ...]
    dtypes: tuple[str, ...]
    description: str
    optional: tuple[str, ...] = ()  # parameters that may be conditional (absent from some configurations)
    # parameter -> "int>=1" | "int>=0" | "bool" | "str" | "choice:a,b,c"; unlisted: "int>=1"
    kinds: tuple[tuple[str, str], ...] = ()
    layouts: tuple[str, ...] = ()  # the operand layouts it computes; empty: every layout of the family
    # optional parameters with the value they take when absent (e.g. SPLIT_K 1): a configuration at a default is
    # named as if the parameter did not exist, so entries stored before it was added keep their kernel names
    defaults: tuple[tuple[str, Any], ...] = ()

    def kind(self, param: str) -> str:
        return dict(self.kinds).get(param, "int>=1")

    def named_params(self, params: Params) -> tuple[str, ...]:
        """The parameters a kernel name lists: every one, less those absent or at their default."""
        defaults = dict(self.defaults)
        return tuple(k for k in self.params if k not in defaults or params.get(k, defaults[k]) != defaults[k])


def auto_info(
    templates: Mapping[str, TemplateInfo], layouts: tuple[str, ...], skip: tuple[str, ...] = ()
) -> TemplateInfo:
    """The "auto" template of a family: TEMPLATE picks one of ``templates`` (less ``skip``), and every other
    parameter exists only under the branches that take it. Built from the family's templates dict, so a
    template registered there is a choice of TEMPLATE without further changes."""
    concrete = [t for t in templates.values() if t.name not in (*skip, "auto")]
    params: list[str] = []
    kinds: dict[str, str] = {}
    for t in concrete:
        params += [p for p in t.params if p not in params]
        kinds.update(t.kinds)
    dtypes = tuple(dict.fromkeys(d for t in concrete for d in t.dtypes))
    choice = "choice:" + ",".join(t.name for t in concrete)
    layouts = tuple(dict.fromkeys(lay for t in concrete for lay in (t.layouts or layouts)))
    return TemplateInfo("auto", ("TEMPLATE", *params), dtypes, "the template is a search dimension (TEMPLATE)",
                        optional=tuple(params), kinds=(("TEMPLATE", choice), *kinds.items()),
                        layouts=layouts)  # fmt: skip


def check_auto(templates: Mapping[str, TemplateInfo], params: Params) -> str | None:
    """Why an "auto" configuration names no template or lacks a parameter of the one it names, or None."""
    chosen = str(params.get("TEMPLATE", ""))
    kind = templates["auto"].kind("TEMPLATE") if "auto" in templates else ""
    allowed = [t for t in templates if t != "auto"]
    if kind.startswith("choice:"):  # what auto_info offers (gemm leaves "naive" out)
        allowed = kind.removeprefix("choice:").split(",")
    if chosen not in allowed or chosen not in templates:
        return f"TEMPLATE must name a template ({', '.join(allowed)})"
    missing = [n for n in templates[chosen].params if n not in params and n not in dict(templates[chosen].defaults)]
    if missing:
        return f"TEMPLATE={chosen} needs {', '.join(missing)} (check the 'when' conditions)"
    return None


@dataclass(frozen=True)
class Step:
    """A kernel of the same source launched before the main one, e.g. im2col_gemm's unrolling kernel."""

    kernel_name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    # kernels launched first, in order, on the same stream; their arguments come from the family's
    # before_args(template, params, problem, inputs, scratch). Empty for every one-launch template.
    before: tuple[Step, ...] = ()


class Problem(Protocol):
    dtype: str
    layout: str

    @property
    def label(self) -> str: ...

    @property
    def flops(self) -> int: ...

    @property
    def bytes(self) -> int: ...
