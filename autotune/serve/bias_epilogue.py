"""A served GEMM with nn.Linear's bias in its epilogue: ``C = alpha op(A) op(B) + bias[n] (+ beta C)`` in one
launch, made from the configuration a launcher already serves.

Templates that have the epilogue (``bias_epilogue``) render it as a variant of the problem (``GemmProblem.bias``):
the same configuration, the bias read where C is stored. That source is not the one that was tuned and verified,
so the variant is verified on its first use: fresh random inputs and a bias as large as the products' sums,
against the float64 reference plus the bias, with the dtype's tolerance. ``with_bias`` gives None, and the
caller adds the bias its own way, for the vendor's launchers, templates without the epilogue, a variant that fails
to build or to verify, and during a CUDA graph capture (nothing may be synchronized then; not remembered).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from ..core.errors import AutotuneError
from ..kernels import FAMILIES
from . import dispatch, runtime
from .launcher import Launcher

log = logging.getLogger(__name__)

SEED = 20261202
_made: dict[Launcher, Launcher | None] = {}  # a served launcher -> its verified bias variant, or None
_lock = threading.Lock()


def with_bias(launcher: Any) -> Launcher | None:
    """``launcher``'s bias variant, built and verified on the first call for it (see the module doc), or None."""
    with _lock:
        if launcher in _made:
            return _made[launcher]
    from ..measure.streams import capturing

    if not can_have(launcher) or capturing():
        return None
    made = _build(launcher)
    with _lock:
        _made[launcher] = made
    return made


def forget() -> None:
    with _lock:
        _made.clear()


dispatch.on_setting_change(forget)


def can_have(launcher: Any) -> bool:
    """Whether ``launcher`` is ours, of a one-launch kernel whose problem can take the bias epilogue."""
    if type(launcher) is not Launcher:  # the vendor's, a staged one (launches before its kernel), a test's fake
        return False
    problem = launcher.problem
    return "bias" in {f.name for f in dataclasses.fields(problem)} and not problem.bias


def _build(launcher: Launcher) -> Launcher | None:
    """The verified bias variant of ``launcher``, built on the current device (``launcher``'s), or None."""
    import cupy as cp

    from ..core.device import current_gpu

    kernel, choice = launcher.kernel, launcher.choice
    problem = dataclasses.replace(launcher.problem, bias=True)
    reason = FAMILIES[kernel].check_problem(choice.template, choice.params, problem)
    if reason:
        log.debug("no bias epilogue for %s: %s", launcher.kernel_name, reason)
        return None
    try:
        biased = runtime.build_launcher(kernel, problem, choice, current_gpu(cp.cuda.Device().id).arch)
        ok, why = _verified(biased)
    except (AutotuneError, cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as exc:
        ok, why = False, str(exc).splitlines()[0][:200]
    if not ok:
        log.debug("the bias epilogue of %s is not served: %s", launcher.kernel_name, why)
        return None
    biased.serving = {**launcher.serving, "bias": f"epilogue verified on its first use ({why})"}
    log.debug("bias epilogue of %s: %s", launcher.kernel_name, why)
    return biased


def _verified(biased: Launcher) -> tuple[bool, str]:
    """Run ``biased`` on fresh random inputs and compare with the float64 reference plus the bias."""
    import cupy as cp

    from ..measure import verify

    family, problem = FAMILIES[biased.kernel], dataclasses.replace(biased.problem, bias=False)
    inputs = family.make_inputs(problem, seed=SEED)
    out = family.new_output(problem)
    bias = family.make_bias(problem, seed=SEED)
    verify.poison(out)
    biased._launch(*inputs, out, 1.0, 0.0, bias)
    cp.cuda.get_current_stream().synchronize()
    ref = family.reference(problem, inputs) + family.decode(problem, bias).astype(cp.float64)[None, :]
    verdict = verify.compare(family.decode(problem, out), ref, verify.tolerance_for(problem.dtype))
    return verdict.ok, verdict.reason or f"relative error {verdict.error:.2g}"
