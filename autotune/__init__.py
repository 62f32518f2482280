"""autotune: find, verify and store the fastest configuration of parameterized CUDA kernels.

Importing this package touches neither the GPU nor Optuna; those load when they are first used.
"""

from .core.errors import AutotuneError, ConstraintError, NoGPUError, SpecError, StoreError
from .core.expr import Expression
from .core.hooks import set_call_observer
from .core.space import Config, Param, Space
from .core.version import __version__ as __version__
from .measure.evaluate import Candidate, Settings, Status, TrialResult, evaluate
from .measure.vendor import VendorLauncher
from .serve.calls import conv2d, gemm
from .serve.dispatch import set_online
from .serve.runtime import Launcher, load
from .tune.spec import Spec, load_spec, parse_spec


def __getattr__(name: str):  # lazy: autotune.record and autotune.torch load only when first used
    if name == "record":
        from .serve.recording import record

        return record
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = [
    "AutotuneError",
    "Candidate",
    "Config",
    "ConstraintError",
    "Expression",
    "NoGPUError",
    "Param",
    "Settings",
    "Space",
    "Spec",
    "SpecError",
    "Status",
    "StoreError",
    "TrialResult",
    "VendorLauncher",
    "Launcher",
    "conv2d",
    "evaluate",
    "gemm",
    "load",
    "load_spec",
    "record",
    "parse_spec",
    "set_call_observer",
    "set_online",
]
