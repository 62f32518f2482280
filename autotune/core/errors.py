"""Errors a user can act on. Each carries one sentence that says what is wrong and where.

The CLI prints ``str(error)`` and exits non-zero without a traceback; anything that is not an
``AutotuneError`` is a bug in autotune itself and propagates with its traceback.
"""

from __future__ import annotations

import reprlib


class AutotuneError(Exception):
    """Base class for problems the user can fix (bad input, missing GPU, missing headers)."""

    exit_code = 2


class SpecError(AutotuneError):
    """A tuning spec is malformed: the message names the file, the key and what was expected."""

    def __init__(self, path: str, key: str, problem: str) -> None:
        self.path, self.key, self.problem = path, key, problem
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem}")


class ConstraintError(AutotuneError):
    """A constraint expression uses something the safe evaluator does not allow."""


class NoGPUError(AutotuneError):
    """A GPU was needed but none is usable."""


class HeadersNotFoundError(AutotuneError):
    """No CUDA include directory with the headers a template needs was found."""


class StoreError(AutotuneError):
    """A tuned/ file exists but cannot be read as autotune results."""


class _BriefRepr(reprlib.Repr):
    """reprlib with every container, string and integer cut while it is rendered."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict, self.maxset = 3, 6, 6, 4, 6
        self.maxstring = self.maxother = limit

    def repr_int(self, x: int, level: int) -> str:
        # str() of an integer of thousands of digits is slow, and raises past 4300 digits
        return repr(x) if x.bit_length() <= 128 else f"<an integer of {x.bit_length()} bits>"

    def repr_bool(self, x: bool, level: int) -> str:
        return repr(x)


def brief(value: object, limit: int = 60) -> str:
    """A repr of ``value`` for an error message, at most about ``limit`` characters, and never built in full.

    >>> brief(list(range(10**6)))
    '[0, 1, 2, 3, 4, 5, ...]'
    """
    text = _BriefRepr(limit).repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
