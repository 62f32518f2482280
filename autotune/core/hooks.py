"""A hook around every served call, for recording what a workload runs.

``set_call_observer(fn)`` makes every served call (``gemm()``, ``conv2d()``, ``Launcher.__call__`` and the
vendor dispatches) go through ``fn(kernel, problem, run)``: ``kernel`` is the family name ("gemm",
"conv2d"), ``problem`` the family's problem record, ``run`` a zero-argument callable doing the launch; ``fn``
returns what ``run()`` returns. ``set_call_observer(None)`` removes it; unset, a call pays one ``is None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Observer = Callable[[str, Any, Callable[[], Any]], Any]

observer: Observer | None = None  # read by the launchers on every call


def set_call_observer(fn: Observer | None) -> Observer | None:
    """Install ``fn`` (or remove the observer with None); returns the one it replaces."""
    global observer
    if fn is not None and not callable(fn):
        raise TypeError(f"set_call_observer takes a callable (kernel, problem, run) or None, got {type(fn).__name__}")
    previous, observer = observer, fn
    return previous
