"""A shared study's trials, each written once and off the search's critical path.

On a database, Optuna's ``study.ask()`` re-reads every unfinished trial of the study (with a few dozen candidates
in flight, dozens of trials) and every suggested parameter is a transaction of its own; a search that asked the
shared study directly spent more time on the database than the GPU on the candidates. Instead:

- The sampler asks and is told in a local in-memory study that holds every finished configuration of the shared
  one (this worker's, the other workers', an earlier run's). Invalid proposals and duplicates stay local.
- A configuration that passes the checks and is not already known is handed to a storage thread, and the loop
  goes on compiling it. The thread creates it in the shared study as a running trial with its parameters and its
  owner in one write (so from its first moment a dead owner is noticed, and every other worker reading the study
  sees what it holds), heartbeats it, and claims it (:class:`autotune.shared_study.Claims`); configurations that
  queued up meanwhile are created together and claimed after one read of the study. The loop waits for the
  verdict only when the candidate is next for the GPU, and skips it if another worker has it.
- A result is written as the trial's attributes and state, without the reads of ``study.tell``, before the next
  candidate starts, so a worker killed after that loses no result; the trial stays heartbeated until then.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from .space import Config

log = logging.getLogger(__name__)

FINAL_MARK = "final_retiming"  # the user attribute of the final re-timing's claim (autotune.shared_study)


def _owner() -> str:
    """This process, as a trial's owner (as autotune.study_storage writes it)."""
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _config_key(t: Any) -> str | None:
    """The configuration a trial holds, or None for a bookkeeping trial (the final re-timing's claim)."""
    if FINAL_MARK in t.user_attrs or not t.params:
        return None
    return Config.of(t.params).key


class Pending:
    """A configuration on its way into the shared study: the storage thread creates its trial and claims it."""

    def __init__(self, proposal: Any, key: str) -> None:
        self.proposal, self.key = proposal, key
        self.trial: Any = None  # the shared study's trial, once created
        self.holder: int | None = None  # the trial that keeps the configuration if not this one (-1: not created)
        self.ready = threading.Event()  # set once created and claimed (or failed to be)

    @property
    def number(self) -> int:
        self.ready.wait()
        return self.trial.number if self.trial is not None else -1


class Asks:
    """The sampler's side of a shared study (an in-memory study it proposes from) and the storage thread that
    writes this worker's trials into the shared one."""

    def __init__(self, claims: Any, sampler: Any, trials: list[Any]) -> None:
        import optuna

        self.claims, self.study = claims, claims.study
        self.local = optuna.create_study(directions=self.study.directions, sampler=sampler)  # in memory
        self.ids: dict[int, int] = {}  # shared trial number -> the storage's trial id (known since created)
        self._retried: dict[str, dict[str, Any]] = {}  # config key -> the attributes of its dead worker's retry
        for t in trials:
            self.learn(t)
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="autotune-storage", daemon=True)
        self._thread.start()

    # the main thread ---------------------------------------------------------------------------------
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

    def submit(self, proposal: Any, key: str) -> Pending:
        """Have configuration ``key`` of local ``proposal`` created and claimed in the shared study."""
        pending = Pending(proposal, key)
        self._jobs.put(pending)
        return pending

    def tell(self, pending: Pending, r: Any, objectives: tuple[str, ...]) -> None:
        """Store a result in the shared trial (before the next candidate starts, so a worker killed later loses
        no result) and tell the local proposal. Written through the storage: attributes and state, no reads."""
        from optuna.trial import TrialState

        from .evaluate import Status
        from .trial_record import _tell, objective_values, result_attrs

        _tell(self.local, pending.proposal, r, objectives=objectives)
        trial_id = self.ids[pending.trial.number]
        try:
            for key, value in result_attrs(r).items():
                self.claims.storage.set_trial_user_attr(trial_id, key, value)
            values = objective_values(r, objectives) if r.status is Status.COMPLETE else None
            if values is not None:
                self.claims.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, values)
            else:  # as trial_record._tell: invalid and pruned are PRUNED (the sampler steers away), else FAIL
                pruned = r.status in (Status.INVALID, Status.PRUNED)
                self.claims.storage.set_trial_state_values(trial_id, TrialState.PRUNED if pruned else TrialState.FAIL)
        except Exception as exc:  # noqa: BLE001 - a lost connection: its heartbeat lapses, and it is retried
            log.warning("trial %d: its result could not be stored (%s)", pending.trial.number, exc)
        self.claims.release(pending.trial)

    def kept(self, pending: Pending) -> bool:
        """Whether ``pending`` kept its claim (waiting for the verdict); if not, the sampler learns so."""
        pending.ready.wait()
        if pending.holder is None:
            return True
        other = self.claims.finished.get(pending.key)
        objectives = self.claims.objectives
        _close(self.local, pending.proposal, other[1] if other else None, pending.holder, objectives)
        return False

    def abandon(self, pending: Pending) -> None:
        """A candidate that was not evaluated: its shared trial (if it kept the claim) fails as unevaluated, free
        for a later run."""
        from optuna.trial import TrialState

        pending.ready.wait()
        if pending.trial is None or pending.holder is not None:  # never created, or yielded to another worker
            return
        pending.trial.set_user_attr("status", "unevaluated")
        self.study.tell(pending.trial, state=TrialState.FAIL, skip_if_finished=True)
        self.claims.release(pending.trial)

    def take_retry(self) -> dict[str, Any] | None:
        """The configuration of a dead worker's trial waiting to be evaluated again (its waiting trial is closed as
        bookkeeping; the configuration goes on as a new trial), or None if no such trial waits any more."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        trial = self.study.ask()  # the oldest waiting trial, or a new empty one when another worker took it
        attrs = trial.user_attrs
        try:
            trial.set_user_attr("duplicate_of", -1)
        except UpdateFinishedTrialError:  # another worker failed it meanwhile, as a trial with no owner yet
            pass
        self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        config = attrs.get("config")
        if config is None:
            return None
        self._retried[Config.of(config).key] = {k: attrs[k] for k in ("retry_of", "retries") if k in attrs}
        return config

    def flush(self) -> None:
        """Wait until every trial handed over so far is created and claimed."""
        self._jobs.join()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(60)

    # the storage thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            jobs = [self._jobs.get()]
            while True:  # whatever queued up meanwhile goes in one batch: one read of the study claims them all
                try:
                    jobs.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            try:
                self._create([p for p in jobs if p is not None])
            except Exception:  # noqa: BLE001 - the thread goes on with the next batch
                log.exception("the storage thread failed on a batch of trials")
            finally:
                for p in jobs:  # never left waiting: one not claimed by now yields (its heartbeat lapses)
                    if p is not None and not p.ready.is_set():
                        p.holder = -1 if p.holder is None else p.holder
                        if p.trial is not None:
                            self.claims.release(p.trial)
                        p.ready.set()
                for _ in jobs:
                    self._jobs.task_done()
            if None in jobs:
                return

    def new_trial(self, attrs: dict[str, Any], proposal: Any = None) -> Any:
        """A running trial of the shared study, created with ``attrs`` (the owner added) and the parameters of
        local ``proposal`` in one write, and heartbeated from then on (:meth:`Claims.started`)."""
        import optuna
        from optuna.trial import TrialState

        frozen = optuna.trial.create_trial(
            state=TrialState.RUNNING, params=proposal.params if proposal else None,
            distributions=proposal.distributions if proposal else None, user_attrs={"owner": _owner(), **attrs},
        )  # fmt: skip
        trial_id = self.claims.storage.create_new_trial(self.claims.study_id, template_trial=frozen)
        trial = optuna.trial.Trial(self.study, trial_id)
        self.ids[trial.number] = trial_id
        self.claims.started(trial)
        return trial

    def _create(self, pendings: list[Pending]) -> None:
        for p in pendings:
            try:
                p.trial = self.new_trial(self._retried.pop(p.key, {}), p.proposal)
            except Exception as exc:  # noqa: BLE001 - a lost connection: the configuration is not evaluated now
                log.warning("a trial could not be created in the shared study (%s)", exc)
                p.trial, p.holder = None, -1
                p.ready.set()
        self._claim([p for p in pendings if p.trial is not None])

    def _claim(self, pendings: list[Pending]) -> None:
        """Claim the just-created trials of ``pendings`` after one read of the study."""
        claims = self.claims
        try:
            running = claims.sync() if pendings else []
        except Exception as exc:  # noqa: BLE001 - a lost connection: none is claimed; their heartbeats lapse
            log.warning("the shared study could not be read (%s)", exc)
            running = None
        for p in pendings:
            try:
                if running is None:
                    raise RuntimeError("no read of the study")
                other = claims.finished.get(p.key)  # finished by another worker meanwhile
                same = lambda t, key=p.key: _config_key(t) == key  # noqa: E731
                p.holder = other[0].number if other else claims.tie_break(p.trial, running, same)
                if p.holder is not None:  # closed as a duplicate (with the holder's result once it is finished)
                    _close(self.study, p.trial, other[1] if other else None, p.holder, claims.objectives)
            except Exception as exc:  # noqa: BLE001 - a lost connection: yield; its heartbeat lapses, it is retried
                log.warning("trial %d could not be claimed (%s)", p.trial.number, exc)
                p.holder = -1
            finally:
                if p.holder is not None:
                    claims.release(p.trial)
                p.ready.set()


def _close(study: Any, trial: Any, r: Any, holder: int, objectives: tuple[str, ...]) -> None:
    """Close ``trial`` of ``study`` as a duplicate of trial ``holder``: with its result ``r`` if finished, else
    pruned."""
    from optuna.trial import TrialState

    from .trial_record import _tell

    if r is not None:
        _tell(study, trial, r, {"duplicate_of": holder}, objectives)
    else:
        trial.set_user_attr("duplicate_of", holder)
        study.tell(trial, state=TrialState.PRUNED)
