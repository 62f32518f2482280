"""autotune: find, verify and store the fastest configuration of parameterized CUDA kernels.

Importing this package touches neither the GPU nor Optuna; those load when they are first used.
"""

from .calls import conv2d, gemm
from .dispatch import set_online
from .errors import AutotuneError, ConstraintError, NoGPUError, SpecError, StoreError
from .evaluate import Candidate, Settings, Status, TrialResult, evaluate
from .expr import Expression
from .hooks import set_call_observer
from .runtime import Launcher, load
from .space import Config, Param, Space
from .spec import Spec, load_spec, parse_spec
from .vendor import VendorLauncher
from .version import __version__ as __version__


def __getattr__(name: str):  # lazy: autotune.record and autotune.torch load only when first used
    if name == "record":
        from .recording import record

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
