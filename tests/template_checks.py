"""Checks every template test file makes the same way: its good configurations compile cleanly, and a broken one
is refused both by the module's ``check`` (naming what is wrong) and by the template's ``static_assert``s."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from autotune.build.compiler import CompileResult, compile_source


def assert_compile_cleanly(module: Any, rendered: Callable[..., Any], good: dict[str, dict], layout: str
                           ) -> dict[str, CompileResult]:  # fmt: skip
    """Every good configuration passes ``module.check``, compiles (for sm_90, or the target its source asks for)
    within the register cap its MINB allows, and spills nothing; the compile results by label."""
    results = {}
    for label, p in good.items():
        assert module.check(p) is None, label
        r = rendered(p, layout)
        c = compile_source(r.source, r.kernel_name, "sm_90")
        assert c.ok, f"{label}: {c.error}"
        assert c.registers and c.registers <= module.derived(p)["REG_CAP"], label
        assert c.spills == 0, f"{label} spills {c.spills} bytes"
        results[label] = c
    return results


def assert_compiles_for_sm90(rendered: Any) -> CompileResult:
    """A rendered sm90 kernel (its source asks for sm_90a) compiles and spills nothing; its compile result."""
    c = compile_source(rendered.source, rendered.kernel_name, "sm_90")
    assert c.ok, c.error
    assert c.spills == 0, f"{rendered.kernel_name} spills {c.spills} bytes"
    return c


def assert_refused_twice(module: Any, rendered: Callable[..., Any], p: dict, words: Iterable[str]) -> None:
    """``module.check`` refuses ``p`` with a reason naming every word, and the rendered template does not compile
    (one of its static_asserts)."""
    reason = module.check(p)
    assert reason and all(w in reason for w in words), reason
    r = rendered(p, "NN")
    c = compile_source(r.source, r.kernel_name, "sm_90")
    assert not c.ok and "static assert" in c.error, f"the template accepted {p}"
