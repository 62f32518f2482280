"""The one plug-in type of the kernel families: ``Template``, a parameterized CUDA kernel (its ``.cu.j2`` file).

A template declares its parameters, the dtypes and layouts it computes, the architecture it needs, and answers for
one configuration (``params``): whether it can be built (``check``), whether it can compute a problem
(``check_problem``), its derived values and render context, its launch, its scratch buffers and kernel arguments,
and the C signature an exported kernel is called with (``c_abi``). A family (``family.TemplateFamily``) holds its
templates in one registry and dispatches to them; adding a template means its module, its ``.cu.j2``, its tests
and a config, and one line in the family's registry.

Device limits are never constants of a template: ``check`` and ``check_problem`` take a ``DeviceLimits``
(``autotune.core.limits``), the real device's or an architecture's from the table.
"""

from __future__ import annotations

import abc
import re
from typing import Any, ClassVar

from ..core.limits import DeviceLimits
from .base import Launch, Params, TemplateInfo


class LaunchBound(abc.ABC):  # noqa: B024 - a marker: its subclasses share no method
    """A scratch element whose kernel arguments are made per launch from the launch's operands (skinny_wgmma's
    tensor maps), so it is not a buffer handed to the kernel as it is."""


class Template(abc.ABC):
    """A parameterized kernel of one family, rendered from ``templates/<family dir>/<name>.cu.j2``.

    Class attributes:
        name: the template's name, and its file's (``<name>.cu.j2``).
        family: the family it belongs to ("gemm", "conv2d").
        params: its parameters, in the order kernel names list them.
        dtypes: the dtypes it computes.
        layouts: the operand layouts it computes.
        kinds: ``(parameter, kind)`` pairs, kind one of "int>=1" (unlisted), "int>=0", "bool", "str",
            "choice:a,b".
        defaults: ``(parameter, value)`` of parameters a configuration may lack (added after winners were
            stored); at its default a parameter is left out of the kernel name, so the source stays the same.
        description: one line for catalogues and ``autotune templates``.
        arch: the oldest architecture it compiles for, e.g. "sm_80", or "sm_90a" for wgmma and TMA.
        arch_note: for a template that needs more than sm_80, the one sentence a user compiling for another
            architecture reads.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    params: ClassVar[tuple[str, ...]]
    dtypes: ClassVar[tuple[str, ...]]
    layouts: ClassVar[tuple[str, ...]]
    kinds: ClassVar[tuple[tuple[str, str], ...]] = ()
    defaults: ClassVar[tuple[tuple[str, Any], ...]] = ()
    description: ClassVar[str]
    arch: ClassVar[str] = "sm_80"
    arch_note: ClassVar[str] = ""

    def info(self) -> TemplateInfo:
        """The template's declaration as the generic layers read it (``Family.templates[name]``).

        Returns:
            A ``TemplateInfo`` with this template's name, parameters, dtypes, description, kinds, layouts and
            defaults (the defaulted parameters are its optional ones).
        """
        return TemplateInfo(self.name, self.params, self.dtypes, self.description,
                            optional=tuple(k for k, _ in self.defaults), kinds=self.kinds, layouts=self.layouts,
                            defaults=self.defaults)  # fmt: skip

    def arch_reason(self, arch: str) -> str | None:
        """Why this template cannot be compiled for ``arch`` ("sm_80" ... "sm_90a"), or None.

        Returns:
            None when ``arch`` has what the template needs (a later architecture for a plain ``arch``, the same
            one for an arch-specific "a" feature set such as sm_90a's wgmma), else ``arch_note`` (or a sentence
            naming both architectures).
        """
        digits = re.fullmatch(r"sm_(\d+)a?", arch.strip())
        if digits is None:
            return f"{arch!r} is not an architecture name like sm_90"
        have, need = int(digits.group(1)), int(self.arch[3:].rstrip("a"))
        ok = have == need if self.arch.endswith("a") else have >= need
        return None if ok else (self.arch_note or f"{self.name} needs {self.arch} or newer, not {arch}")

    # --- configuration -> derived values ------------------------------------------------------------------

    @abc.abstractmethod
    def derived(self, params: Params, problem: Any = None) -> dict[str, Any]:
        """Values computed from the parameters (threads, tiles, shared memory ...), the ones the template's
        ``static_assert``s and launch use.

        Args:
            params: one configuration.
            problem: the problem, for values that depend on its variant or shape; None for those that do not.

        Returns:
            A dict of upper-case names, with at least THREADS and SHARED_BYTES for templates that launch.
        """

    @abc.abstractmethod
    def context(self, params: Params, problem: Any) -> dict[str, Any]:
        """The render context besides the parameters and the kernel name.

        Args:
            params: one configuration.
            problem: the problem; only its variant (dtype, layout, alignment) may change the context, never its
                shape, so one source serves every shape.

        Returns:
            The derived values and the variant's keys (DTYPE, T, LAYOUT ...).
        """

    @abc.abstractmethod
    def name_tag(self, problem: Any) -> tuple[str, ...]:
        """The parts of the kernel name that name the problem's variant (e.g. ("f16", "nn", "uab")); () for
        templates named by their parameters alone."""

    # --- checks ------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def check(self, params: Params, limits: DeviceLimits) -> str | None:
        """Why this configuration can never be built, or None. Each reason mirrors a ``static_assert``.

        Args:
            params: one configuration.
            limits: the device's (or the target architecture's) limits.

        Returns:
            One sentence naming what is wrong, or None.
        """

    @abc.abstractmethod
    def check_problem(self, params: Params, problem: Any, limits: DeviceLimits) -> str | None:
        """Why this (buildable) configuration cannot compute this problem (dtype, layout, alignment, grid and
        index limits), or None.

        Args:
            params: a configuration that ``check`` accepts.
            problem: the family's problem.
            limits: the device's (or the target architecture's) limits.

        Returns:
            One sentence naming what is wrong, or None.
        """

    # --- launch, scratch and arguments -------------------------------------------------------------------

    @abc.abstractmethod
    def launch(self, params: Params, problem: Any, kernel_name: str) -> Launch:
        """The main kernel's launch, and the kernels launched before it (``Launch.before``).

        Args:
            params: one configuration.
            problem: the problem.
            kernel_name: the main kernel's name; the kernels launched before it are named after it.

        Returns:
            Grid, block, dynamic shared bytes and the steps before.
        """

    def scratch(self, params: Params, problem: Any) -> tuple[int, int] | None:
        """Sizes of the scratch buffers the kernel takes after its own arguments.

        Returns:
            (floats of partial sums or elements of a work matrix, unsigned counters), or None when the kernel
            takes no scratch arguments.
        """
        return None

    def new_scratch(self, params: Params, problem: Any) -> tuple[Any, ...]:
        """The scratch buffers of one launch site (CuPy arrays): by default zeroed float32 partials and uint32
        counters of ``scratch``'s sizes (at least one element each), () when there is no scratch."""
        need = self.scratch(params, problem)
        if need is None:
            return ()
        import cupy as cp

        floats, counters = need
        return cp.zeros(max(floats, 1), dtype=cp.float32), cp.zeros(max(counters, 1), dtype=cp.uint32)

    def before_args(self, params: Params, problem: Any, inputs: Any, scratch: tuple[Any, ...]) -> tuple[Any, ...]:
        """Arguments of each kernel of ``launch(...).before``, in order; () for one-launch templates."""
        return ()

    def takes_scratch(self, scratch: tuple[Any, ...]) -> bool:
        """Whether these scratch buffers are this template's own kind, whose kernel arguments only it makes
        (``kernel_args``); False for templates whose kernels take the family's arguments plus the scratch."""
        return False

    @abc.abstractmethod
    def kernel_args(self, problem: Any, inputs: Any, out: Any, alpha: float, beta: float,
                    scratch: tuple[Any, ...]) -> tuple[Any, ...]:  # fmt: skip
        """The main kernel's arguments.

        Args:
            problem: the problem.
            inputs: the family's input arrays (``make_inputs``).
            out: the output array.
            alpha, beta: the epilogue's scalars (conv2d: 1 and 0 only).
            scratch: ``new_scratch``'s buffers.

        Returns:
            The argument tuple, in the kernel's order.
        """

    def extra_bytes(self, params: Params, problem: Any) -> int:
        """Device memory a candidate needs besides the operands (packed copies, work matrices, partials)."""
        return 0

    def ladder(self, params: Params) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """The kernel guide's optimization ladder from a tuned configuration (``autotune ladder``): the rungs to
        measure, as (label, template, params), the first the configuration as tuned, each next one switching a
        technique off. () for templates without a ladder."""
        return ()

    @abc.abstractmethod
    def c_abi(self) -> str:
        """The C signature text ``autotune export`` writes for this template's kernels: the arguments in order,
        the scratch buffers and the kernels launched before, for a caller outside Python."""
