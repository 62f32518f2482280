"""A shared study's trials, each written once: proposals come from an in-memory copy of the study, and only a
valid, new configuration becomes a trial of the shared storage.

On a database, Optuna's ``study.ask()`` re-reads every unfinished trial of the study (with a few dozen candidates
in flight, dozens of trials) and every suggested parameter is a transaction of its own; a search that asked the
shared study directly spent more time on the database than the GPU on the candidates. Here the sampler asks and
is told in a local in-memory study that holds every finished configuration of the shared one (this worker's, the
other workers', an earlier run's). A configuration that passes the checks and is not already known is created in
the shared study as a running trial with its parameters and its owner in one write (so from its first moment a
dead owner is noticed, and every other worker reading the study sees what it holds); invalid proposals and
duplicates stay local. The result of a trial is written by a background thread while the loop goes on, and the
trial stays heartbeated until it is.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from .space import Config

log = logging.getLogger(__name__)


def _owner() -> str:
    from .study_storage import _owner as owner

    return owner()


class Mirror:
    """The sampler's side of a shared study: an in-memory study it proposes from, the shared trials it created,
    and a writer of their results."""

    def __init__(self, study: Any, storage: Any, study_id: int, sampler: Any, trials: list[Any]) -> None:
        import optuna

        self.study, self.storage, self.study_id = study, storage, study_id
        self.local = optuna.create_study(directions=study.directions, sampler=sampler)  # in memory
        self.ids: dict[int, int] = {}  # shared trial number -> the storage's trial id (known since created)
        self._proposals: dict[int, Any] = {}  # shared trial number -> its proposal in the local study
        self._retried: dict[str, dict[str, Any]] = {}  # config key -> the attributes of its dead worker's retry
        for t in trials:
            self.learn(t)
        self._writes: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write, name="autotune-results", daemon=True)
        self._writer.start()

    def learn(self, t: Any) -> None:
        """Let the sampler know a finished trial of the shared study: another worker's, or an earlier run's."""
        from optuna.trial import TrialState

        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and t.params and "duplicate_of" not in t.user_attrs:
            self.local.add_trial(t)

    def ask(self, fixed: dict[str, Any] | None) -> Any:
        """A local trial for the sampler's next proposal (``fixed``: the configuration to propose instead)."""
        if fixed:
            self.local.enqueue_trial(fixed)
        return self.local.ask()

    def create(self, proposal: Any) -> Any:
        """The shared study's running trial for ``proposal``'s configuration: parameters, owner and (for a
        retried configuration) its retry count written at once."""
        import optuna
        from optuna.trial import TrialState

        attrs = {"owner": _owner(), **self._retried.pop(Config.of(proposal.params).key, {})}
        frozen = optuna.trial.create_trial(
            state=TrialState.RUNNING, params=proposal.params, distributions=proposal.distributions, user_attrs=attrs
        )
        trial_id = self.storage.create_new_trial(self.study_id, template_trial=frozen)
        trial = optuna.trial.Trial(self.study, trial_id)
        self.ids[trial.number] = trial_id
        self._proposals[trial.number] = proposal
        return trial

    def take_retry(self) -> dict[str, Any] | None:
        """The configuration of a dead worker's trial waiting to be evaluated again (its waiting trial is closed as
        bookkeeping; the configuration goes on as a new trial), or None if no such trial waits any more."""
        from optuna.trial import TrialState

        trial = self.study.ask()  # the oldest waiting trial, or a new empty one when another worker took it
        attrs = trial.user_attrs
        trial.set_user_attr("duplicate_of", -1)
        self.study.tell(trial, state=TrialState.FAIL)
        config = attrs.get("config")
        if config is None:
            return None
        self._retried[Config.of(config).key] = {k: attrs[k] for k in ("retry_of", "retries") if k in attrs}
        return config

    def tell(self, trial: Any, r: Any, objectives: tuple[str, ...], then: Any = None) -> None:
        """Tell the local proposal of ``trial`` now and the shared trial in the background; ``then(trial)`` runs
        once the shared trial is written."""
        from .trial_record import _tell

        proposal = self._proposals.pop(trial.number, None)
        if proposal is not None:
            _tell(self.local, proposal, r, objectives=objectives)
        self._writes.put((trial, r, objectives, then))

    def forget(self, trial: Any) -> Any:
        """The local proposal of the shared ``trial``, no longer told by :meth:`tell`."""
        return self._proposals.pop(trial.number)

    def flush(self) -> None:
        """Wait until every result told so far is in the shared study."""
        self._writes.join()

    def close(self) -> None:
        self._writes.put(None)
        self._writer.join(30)

    def _write(self) -> None:
        from .trial_record import _tell

        while True:
            item = self._writes.get()
            try:
                if item is None:
                    return
                trial, r, objectives, then = item
                try:
                    _tell(self.study, trial, r, objectives=objectives)
                except Exception as exc:  # noqa: BLE001 - a lost connection: the trial's heartbeat lapses, it is retried
                    log.warning("trial %d: its result could not be stored (%s)", trial.number, exc)
                if then is not None:
                    then(trial)
            finally:
                self._writes.task_done()
