"""What every kernel family provides to the rest of the flow."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

    def kind(self, param: str) -> str:
        return dict(self.kinds).get(param, "int>=1")


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


class Problem(Protocol):
    dtype: str
    layout: str

    @property
    def label(self) -> str: ...

    @property
    def flops(self) -> int: ...

    @property
    def bytes(self) -> int: ...


class Family(Protocol):
    """A kernel family (GEMM, convolution). GPU-touching methods import CuPy lazily."""

    name: str
    templates: Mapping[str, TemplateInfo]
    shape_help: str

    def problem(self, shape: Any, dtype: str, layout: str = ...) -> Problem: ...

    def resolve(self, template: str, params: Params) -> str: ...

    def derived(self, template: str, params: Params, problem: Any = None) -> dict[str, Any]: ...

    def context(self, template: str, params: Params, problem: Any) -> dict[str, Any]: ...

    def check(self, template: str, params: Params) -> str | None: ...

    def kernel_name(self, template: str, params: Params, problem: Any = None) -> str: ...

    def default_config(self, dtype: str, layout: str = ...) -> tuple[str, dict[str, Any]]: ...

    def launch(self, template: str, params: Params, problem: Any) -> Launch: ...

    def check_problem(self, template: str, params: Params, problem: Any) -> str | None: ...

    def scratch(self, template: str, params: Params, problem: Any) -> tuple[int, int] | None: ...

    def make_inputs(self, problem: Any, seed: int) -> Any: ...

    def reference(self, problem: Any, inputs: Any) -> Any: ...

    def new_output(self, problem: Any) -> Any: ...

    def decode(self, problem: Any, out: Any) -> Any: ...

    def new_scratch(self, template: str, params: Params, problem: Any) -> tuple[Any, ...]: ...

    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float = ..., beta: float = ...,
                    scratch: tuple[Any, ...] = ...) -> tuple[Any, ...]: ...  # fmt: skip

    def vendor(self, problem: Any, inputs: Any) -> tuple[str, Callable[[], Any]] | None: ...
