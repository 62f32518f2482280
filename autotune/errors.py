"""Errors a user can act on. Each carries one sentence that says what is wrong and where.

The CLI prints ``str(error)`` and exits non-zero without a traceback; anything that is not an
``AutotuneError`` is a bug in autotune itself and propagates with its traceback.
"""

from __future__ import annotations


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
