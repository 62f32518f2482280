"""A trial's result as the study stores it (user attributes) and read back, and how a finished trial is told."""

from __future__ import annotations

from typing import Any

from ..core.space import Config
from ..measure.bench import Timing
from ..measure.evaluate import Status, TrialResult

_ATTRS = ("median_ms", "min_ms", "max_ms", "iqr_ms", "repeats")


def result_attrs(r: TrialResult) -> dict[str, Any]:
    """What a trial stores: ``status`` for queries, everything else in one ``result`` mapping."""
    result: dict[str, Any] = {
        "reason": r.reason,
        "kernel_name": r.kernel_name,
        "config_key": r.config.key,
        "error": r.error,
        "tflops": r.tflops,
        "gbps": r.gbps,
        "registers": r.registers,
        "shared_bytes": r.shared_bytes,
        "spills": r.spills,
        "compile_s": r.compile_s,
        "occupancy": r.occupancy,
        "source_hash": r.source_hash,
        "template_hash": r.template_hash,
        "energy_j": r.energy_j,
        "gflops_per_j": r.gflops_per_j,
        "energy_method": r.energy_method,
        "energy_note": r.energy_note,
        "extra_bytes": r.extra_bytes,
    }
    if r.timing:
        result.update({k: getattr(r.timing, k) for k in _ATTRS})
    return {"status": r.status.value, "result": {k: v for k, v in result.items() if v is not None}}


def result_from_trial(t: Any, config: Config) -> TrialResult:
    a = t.user_attrs.get("result", {})
    timing = Timing(*(a[k] for k in _ATTRS)) if "median_ms" in a else None
    return TrialResult(
        Status(t.user_attrs["status"]), a.get("reason"), a.get("kernel_name", ""), config, timing, a.get("error"),
        a.get("tflops"), a.get("gbps"), a.get("registers"), a.get("shared_bytes"), a.get("spills"),
        a.get("compile_s"), a.get("source_hash", ""), a.get("template_hash", ""), a.get("occupancy"),
        energy_j=a.get("energy_j"), gflops_per_j=a.get("gflops_per_j"), energy_method=a.get("energy_method"),
        energy_note=a.get("energy_note"), extra_bytes=a.get("extra_bytes"),
    )  # fmt: skip


def objective_values(r: TrialResult, objectives: tuple[str, ...]) -> list[float] | None:
    """What the study minimizes for a complete trial: ms and/or J per launch; None if energy is missing."""
    values = [r.median_ms if o == "time" else r.energy_j for o in objectives]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def finished_state(r: TrialResult, objectives: tuple[str, ...] = ("time",)) -> tuple[Any, list[float] | None]:
    """The state a trial with result ``r`` ends in, and its objective values (None unless COMPLETE)."""
    from optuna.trial import TrialState

    values = objective_values(r, objectives) if r.status is Status.COMPLETE else None
    if values is not None:
        return TrialState.COMPLETE, values
    if r.status in (Status.INVALID, Status.PRUNED):
        # Pruned (not failed) so that TPE counts the region as bad and steers away from it. A complete result
        # without the energy the study needs (not measured) fails.
        return TrialState.PRUNED, None
    return TrialState.FAIL, None


def _tell(
    study: Any, trial: Any, r: TrialResult, extra: dict[str, Any] | None = None, objectives: tuple[str, ...] = ("time",)
) -> None:
    for k, v in {**result_attrs(r), **(extra or {})}.items():
        trial.set_user_attr(k, v)
    state, values = finished_state(r, objectives)
    if values is not None:
        study.tell(trial, values if len(values) > 1 else values[0])
    else:
        study.tell(trial, state=state)


def write_result(storage: Any, trial_id: int, r: TrialResult, objectives: tuple[str, ...] = ("time",)) -> None:
    """What :func:`_tell` stores, written through the storage by the trial's id: its attributes, then its state
    and values (without ``study.tell``'s reads of the trial; a shared study's result on the search's critical path)."""
    for k, v in result_attrs(r).items():
        storage.set_trial_user_attr(trial_id, k, v)
    state, values = finished_state(r, objectives)
    storage.set_trial_state_values(trial_id, state, values)
