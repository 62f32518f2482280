"""The sampler's side of a shared study: an in-memory mirror that proposes, and each trial written to the shared
study once, whole.

On a database, ``study.ask()`` re-reads the study's waiting trials, every ``suggest`` is a transaction of its own
(a dozen per configuration), and a model-based sampler re-reads every unfinished trial of the study at each ask
(with the candidates in flight, dozens). A search that asked the shared study directly spent more time on the
database than the GPU on its candidates (PostgreSQL 0.46 of the journal's configurations per minute). Instead:

- The sampler proposes in an in-memory study (:class:`Mirror`) that holds every finished configuration of the
  shared one: this worker's, the other workers' (learned at each read of the study), an earlier run's. Proposals
  that are duplicates, invalid or already in flight stay there.
- A configuration about to be compiled is created in the shared study as a running trial with its parameters and
  its owner in one write (:func:`new_trial`), heartbeated from then on and claimed
  (:meth:`autotune.studies.shared_study.Claims.claim`), so every other worker sees it at its next read.
- Its result is written as the trial's attributes and state by the trial's id
  (:func:`autotune.studies.trial_record.write_result`), by a thread of its own while the next candidate starts
  and more are asked, and stored before the next measurement is collected; heartbeated until then.
- A dead worker's configuration is enqueued again with the configuration in its attributes (:func:`retry`).

Optuna's public API only: ``optuna.create_study`` (in memory), ``Study.add_trial``, ``enqueue_trial``, ``ask`` and
``tell``, ``optuna.trial.create_trial``, and the storage's ``create_new_trial``, ``set_trial_param``,
``set_trial_user_attr`` and ``set_trial_state_values`` (:class:`optuna.storages.BaseStorage`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

FINAL_MARK = "final_retiming"  # the user attribute of the final re-timing's claim (shared_final.py)
MAX_RETRIES = 3  # a dead worker's configuration is enqueued again this often; claimants of the final re-timing too


@dataclass(frozen=True)
class SharedTrial:
    """A trial of the shared study by its number and its storage id (an ``optuna.trial.Trial`` re-reads the trial
    when it is made; this worker writes to its trials only)."""

    storage: Any
    number: int
    trial_id: int

    def set_user_attr(self, key: str, value: Any) -> None:
        self.storage.set_trial_user_attr(self.trial_id, key, value)


class Mirror:
    """An in-memory study with the shared study's sampler and its finished configurations, for the sampler to
    propose from without reading the database."""

    def __init__(self, study: Any, trials: list[Any]) -> None:
        import optuna

        self.local = optuna.create_study(directions=study.directions, sampler=study.sampler)
        self.local.add_trials([t for t in trials if _learnable(t)])

    def learn(self, t: Any) -> None:
        """Let the sampler know a finished trial of the shared study (another worker's)."""
        if _learnable(t):
            self.local.add_trial(t)

    def ask(self, fixed: dict[str, Any] | None) -> Any:
        """A trial of the in-memory study for the next proposal (``fixed``: the configuration to propose)."""
        if fixed:
            self.local.enqueue_trial(fixed)
        return self.local.ask()

    def system_attrs(self, trial: Any) -> dict[str, Any]:
        """What the sampler noted on ``trial`` (a generation, say), for the shared study's copy."""
        from optuna.trial import TrialState

        for t in self.local.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.number == trial.number:
                return {k: v for k, v in t.system_attrs.items() if k != "fixed_params"}
        return {}


def _learnable(t: Any) -> bool:
    """A finished evaluation with its parameters: what the sampler models (not a duplicate, not bookkeeping)."""
    from optuna.trial import TrialState

    return t.state in (TrialState.COMPLETE, TrialState.PRUNED) and bool(t.params) and "duplicate_of" not in t.user_attrs


def new_trial(
    storage: Any, study_id: int, attrs: dict[str, Any], proposal: Any = None, system: dict[str, Any] | None = None
) -> SharedTrial:
    """A running trial of the shared study with ``attrs`` and the parameters of ``proposal`` (a trial of the
    mirror; none for bookkeeping), created in one write."""
    import optuna
    from optuna.trial import TrialState

    frozen = optuna.trial.create_trial(
        state=TrialState.RUNNING, params=proposal.params if proposal else None,
        distributions=proposal.distributions if proposal else None, user_attrs=attrs, system_attrs=system,
    )  # fmt: skip
    trial_id = storage.create_new_trial(study_id, template_trial=frozen)
    return SharedTrial(storage, storage.get_trial_number_from_id(trial_id), trial_id)


def write_params(trial: SharedTrial, proposal: Any) -> None:
    """The parameters of ``proposal`` (a trial of the mirror) on ``trial``, a retried trial taken from the queue."""
    for name, value in proposal.params.items():
        dist = proposal.distributions[name]
        trial.storage.set_trial_param(trial.trial_id, name, dist.to_internal_repr(value), dist)


def close(study: Any, trial: SharedTrial, holder: int, status: str | None = None) -> None:
    """End ``trial``, which evaluates nothing: a duplicate of trial ``holder`` (-1: bookkeeping), or with
    ``status`` (unevaluated: free for a later run)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        trial.set_user_attr("duplicate_of" if status is None else "status", holder if status is None else status)
        study.tell(trial.number, state=TrialState.PRUNED if status is None else TrialState.FAIL, skip_if_finished=True)
    except UpdateFinishedTrialError:  # failed meanwhile (its heartbeat lapsed, or as an orphan): ended already
        pass


def retry(study: Any, trial: Any) -> None:
    """Enqueue the configuration of a failed trial of a dead worker again, up to MAX_RETRIES times.

    Like Optuna's ``RetryHeartbeatStaleTrialCallback``, but the copy carries none of the dead worker's attributes
    (its owner, its claim), so nothing mistakes the copy for the dead trial.
    """
    config = dict(trial.params) or trial.user_attrs.get("config")  # a retry taken, its worker killed before params
    if FINAL_MARK in trial.user_attrs or not config:
        return
    retries = trial.user_attrs.get("retries", 0)
    if retries >= MAX_RETRIES:
        log.warning("trial %d failed %d times with its worker; not retried again", trial.number, retries + 1)
        return
    study.enqueue_trial(config, user_attrs={"retry_of": trial.number, "retries": retries + 1, "config": config})


def _heartbeat_storage(storage: Any) -> Any | None:
    """``storage`` if it records heartbeats (an RDB storage with an interval), else None."""
    from optuna.storages import RDBStorage

    if isinstance(storage, RDBStorage) and storage.get_heartbeat_interval():
        return storage
    return None
