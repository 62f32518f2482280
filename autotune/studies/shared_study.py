"""Several workers on one Optuna study: claims of configurations, heartbeats, retries, one final re-timing.

Every worker (a process with its own GPU, on this host or another) asks its own trials. A configuration it is
about to evaluate is *claimed* in the storage, so every other worker sees it:

1. Right after ``study.ask()`` the trial gets a heartbeat (RDB storages), so a worker killed from then on has its
   trial failed by Optuna once the grace period has passed, and the configuration is enqueued again.
2. Once the sampler has written all parameters, the worker re-reads the study. A configuration already finished
   by another worker is answered from it. If a *lower-numbered* running trial holds the same configuration, this
   one yields. If only higher-numbered ones do, it waits (milliseconds) for their verdict: the one that kept it
   wins, one that yielded does not count. Every trial writes its parameters before it reads, so of two
   claimants at least one sees the other; the one that sees a lower number yields, the lower one waits for the
   higher one's verdict, and so at most one keeps a configuration, whatever the interleaving.
3. The verdict "kept" is the user attribute ``claim`` equal to the trial's own number (a retried copy of a trial
   carries its original's attributes, but not its number).

The final re-timing of the top-k is claimed the same way, by a bookkeeping trial with no parameters
(``final_retiming``); the worker that keeps it waits for the others' candidates in flight, re-times, and leaves
the winner in that trial's attributes, which the other workers of the study read instead of re-timing.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

from ..core.space import Config
from ..measure.bench import Timing

log = logging.getLogger(__name__)

VERDICT_WAIT_S = 10.0  # how long a lower-numbered claimant waits for a higher one's verdict before yielding
MAINTAIN_S = 2.0  # how often a worker looks for stale or orphaned trials of other workers
MAX_RETRIES = 3  # a configuration whose worker died this often is not enqueued again
FINAL_MARK = "final_retiming"
WAIT_FOR_OTHERS_S = 140.0  # how long a worker out of candidates waits for the others' (a dead one's: grace + retry)


def retry(study: Any, trial: Any) -> None:
    """Enqueue the configuration of a failed trial of a dead worker again, up to MAX_RETRIES times.

    Like Optuna's ``RetryHeartbeatStaleTrialCallback``, but the copy carries none of the dead worker's attributes
    (its owner, its claim), so nothing mistakes the copy for the dead trial.
    """
    if _config_key(trial) is None:
        return
    retries = trial.user_attrs.get("retries", 0)
    if retries >= MAX_RETRIES:
        log.warning("trial %d failed %d times with its worker; not retried again", trial.number, retries + 1)
        return
    study.enqueue_trial(dict(trial.params), user_attrs={"retry_of": trial.number, "retries": retries + 1})


def _heartbeat_storage(storage: Any) -> Any | None:
    """``storage`` if it records heartbeats (an RDB storage with an interval), else None."""
    from optuna.storages import RDBStorage

    if isinstance(storage, RDBStorage) and storage.get_heartbeat_interval():
        return storage
    return None


def _config_key(t: Any) -> str | None:
    """The configuration a trial holds, or None for a bookkeeping trial (the final re-timing's claim)."""
    if FINAL_MARK in t.user_attrs or not t.params:
        return None
    return Config.of(t.params).key


def _kept(t: Any) -> bool:
    return t.user_attrs.get("claim") == t.number


def _complete(trials: list[Any]) -> int:
    """How many configurations of the study have a complete result (what a final re-timing chose from)."""
    return sum(t.user_attrs.get("status") == "complete" and "duplicate_of" not in t.user_attrs for t in trials)


def _result(t: Any, config: Config | None = None) -> Any | None:
    """The search's result of a finished trial of another worker; None if it holds none (a duplicate, a yield,
    an interrupted or unevaluated trial)."""
    from .trial_record import result_from_trial

    status = t.user_attrs.get("status")
    if status in (None, "interrupted", "unevaluated") or "duplicate_of" in t.user_attrs:
        return None
    return result_from_trial(t, config or Config.of(t.params))


class Claims:
    """One worker's view of a shared study: what other workers hold and have finished, and its heartbeats."""

    def __init__(self, study: Any, storage: Any) -> None:
        import threading

        self.study, self.storage = study, storage  # the storage the study was opened on (public API only)
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.heartbeat = _heartbeat_storage(storage)
        trials = study.get_trials(deepcopy=False)
        self.start_number = max((t.number for t in trials), default=-1)  # final claims up to here are old
        self.mine: set[int] = set()  # numbers of this worker's trials
        self.done: set[int] = set()  # finished trials already synced
        self.elsewhere = 0  # running trials of other workers that hold (or are claiming) a configuration
        self.held: set[str] = set()  # their configurations
        self.retries = 0  # configurations of dead workers' trials waiting to be evaluated again
        self.final_claimed = ""  # owner of a final re-timing claimed since this worker started the shape
        self._held: set[int] = set()  # trial ids this worker heartbeats
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_maintained = 0.0
        self._busy_since: float | None = None
        self._thread = None
        if self.heartbeat is not None:
            self._thread = threading.Thread(target=self._beat, name="autotune-heartbeat", daemon=True)
            self._thread.start()

    # heartbeats -------------------------------------------------------------------------------------
    def _beat(self) -> None:
        interval = self.heartbeat.get_heartbeat_interval()
        while not self._stop.wait(interval):
            with self._lock:
                held = list(self._held)
            for trial_id in held:
                try:
                    self.heartbeat.record_heartbeat(trial_id)
                except Exception as exc:  # noqa: BLE001 - a lost connection: the next beat tries again
                    log.warning("heartbeat failed: %s", exc)

    def asked(self, trial: Any) -> None:
        """A trial was just asked: from now on its death is noticed (a stale heartbeat, or a dead process of
        this host) and its configuration retried."""
        self.mine.add(trial.number)
        if self.heartbeat is not None:
            self.heartbeat.record_heartbeat(self.trial_id(trial))
        else:  # a journal: a dead process of this host is told by its id
            trial.set_user_attr("owner", _owner())

    def hold(self, trial: Any) -> None:
        with self._lock:
            self._held.add(self.trial_id(trial))

    def release(self, trial: Any) -> None:
        with self._lock:
            self._held.discard(self.trial_id(trial))

    def trial_id(self, trial: Any) -> int:
        """The storage's id of a trial of this study (Trial and FrozenTrial keep theirs private)."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    # other workers ------------------------------------------------------------------------------------
    def maintain(self) -> None:
        """Fail other workers' dead trials (a stale heartbeat, or a dead process of this host) and enqueue
        their configurations again; at most every MAINTAIN_S seconds."""
        import optuna

        from .orphans import failed_orphans

        now = time.monotonic()
        if now - self._last_maintained < MAINTAIN_S:
            return
        self._last_maintained = now
        if self.heartbeat is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(self.study)  # the storage's callback (retry) enqueues each
        for t in failed_orphans(self.study, self.storage):
            retry(self.study, t)

    def sync(self, state: Any) -> list[Any]:
        """Read the study: record other workers' finished results in ``state``; return the running trials."""
        from optuna.trial import TrialState

        self.maintain()
        running, held, retries, elsewhere = [], set(), 0, 0
        for t in self.study.get_trials(deepcopy=False):
            final = FINAL_MARK in t.user_attrs and t.number > self.start_number
            if t.state is TrialState.WAITING:
                retries += "retry_of" in t.user_attrs
            elif t.state is TrialState.RUNNING:
                running.append(t)
                if t.number not in self.mine and _config_key(t) is not None:  # held, or being claimed
                    held.add(_config_key(t))
                    elsewhere += 1
                if final and t.number not in self.mine:
                    self.final_claimed = self.final_claimed or t.user_attrs.get("owner", "another worker")
            elif t.state.is_finished() and t.number not in self.done:
                self.done.add(t.number)
                if t.number in self.mine:
                    continue
                if final and _kept(t):
                    self.final_claimed = self.final_claimed or t.user_attrs.get("owner", "another worker")
                r = _result(t) if state is not None else None
                if r is not None and r.config.key not in state.seen:
                    state.record(t, r, new=False)
        self.elsewhere, self.held, self.retries = elsewhere, held, retries
        return running

    def others(self, state: Any) -> int:
        """How many configurations not yet finished other workers hold: for the study's budget and to tell
        when the space is exhausted."""
        return len(self.held - state.seen.keys())

    def busy(self, state: Any, can_ask: bool) -> bool:
        """Whether this worker, out of candidates, should wait before it ends the search: other workers still
        hold configurations (a dead one's come back as retries), or retries wait and this worker ``can_ask``.
        Waits a moment first, and gives up after WAIT_FOR_OTHERS_S of waiting."""
        time.sleep(0.05)
        self.sync(state)
        now = time.monotonic()
        self._busy_since = self._busy_since or now
        if now - self._busy_since > WAIT_FOR_OTHERS_S:
            log.warning("other workers still hold %d configurations; ending the search without them", self.elsewhere)
            return False
        return bool(self.elsewhere or (can_ask and self.retries and not self.final_claimed))

    def claim(self, trial: Any, key: str, state: Any) -> int | None:
        """Claim configuration ``key`` for ``trial``: None if it is this worker's to evaluate now, else the
        number of the trial that has it (finished: it is then in ``state.seen``; running: another worker's)."""
        running = self.sync(state)
        if key in state.seen:
            return state.seen[key][0].number
        return self._tie_break(trial, running, lambda t: _config_key(t) == key)

    def _tie_break(self, trial: Any, running: list[Any], same: Callable[[Any], bool]) -> int | None:
        """None if ``trial`` keeps its claim against the running trials that claim the ``same``; else the number
        of the trial that keeps it."""
        rivals = [t for t in running if t.number != trial.number and same(t)]
        lower = [t.number for t in rivals if t.number < trial.number]
        if lower:
            return min(lower)
        for t in rivals:  # higher-numbered: they yield if they saw this trial; one that did not has kept it
            verdict = self._verdict(t)
            if verdict is not None:
                return verdict
        trial.set_user_attr("claim", trial.number)
        self.hold(trial)
        self._busy_since = None  # work again: a later wait for the others starts its own clock
        return None

    def _verdict(self, rival: Any) -> int | None:
        """Wait for a higher-numbered claimant's decision: its number if it kept the claim, else None."""
        deadline = time.monotonic() + VERDICT_WAIT_S
        while time.monotonic() < deadline:
            t = self.storage.get_trial(self.trial_id(rival))
            if _kept(t):
                return t.number
            if t.state.is_finished():
                return None
            time.sleep(0.005)
        return rival.number  # undecided for too long (a stuck worker): yielding is the safe side

    # the final re-timing ------------------------------------------------------------------------------
    def final(self, state: Any, retime: Callable[[], tuple[Any, tuple, Any]], vendor: Any) -> tuple:
        """Re-time the finalists on exactly one worker of the study: ``(best, front, vendor, final_by)``.

        ``retime()`` is this worker's re-timing (best, Pareto front, vendor). The worker that keeps the claim
        runs it and returns ``final_by=""``; the others wait for its result and return it with its owner. A
        verdict left by an earlier run, with no complete result since, is taken as it is, with ``final_by=""``
        (this run stores it: its own worker did so in its run).
        """
        from optuna.trial import TrialState

        for _ in range(MAX_RETRIES):  # a claimant that dies before it re-times leaves the claim to another
            marker = self.study.ask()
            self.asked(marker)
            marker.set_user_attr("owner", _owner())  # who re-times, for the others' tables
            marker.set_user_attr("duplicate_of", -1)  # bookkeeping, not a configuration: reports skip it
            marker.set_user_attr(FINAL_MARK, marker.number)
            winner = self._final_winner(marker, self.sync(state))
            if winner is None:
                try:
                    self._wait_for_others(state)
                    best, front, vendor = retime()
                    self._publish(marker, best, vendor)
                finally:
                    self.release(marker)
                    self.study.tell(marker, state=TrialState.FAIL)
                return best, front, vendor, ""
            self.study.tell(marker, state=TrialState.FAIL)
            result = self._await_final(winner, vendor)
            if result is not None:
                return result
        log.warning("no other worker finished the final re-timing; re-timing here")
        best, front, vendor = retime()
        return best, front, vendor, ""

    def _final_winner(self, marker: Any, running: list[Any]) -> Any | None:
        """The final claim that wins over ``marker``, or None if ``marker`` keeps it: a re-timing of the study as
        it is now (no complete result since), or a running claim that wins the tie-break."""
        trials = self.study.get_trials(deepcopy=False)
        complete = _complete(trials)
        for t in reversed(trials):
            if t.state.is_finished() and t.user_attrs.get("final_basis") == complete and "final_result" in t.user_attrs:
                return t
        number = self._tie_break(marker, running, lambda t: FINAL_MARK in t.user_attrs)
        return None if number is None else next(t for t in trials if t.number == number)

    def _wait_for_others(self, state: Any) -> None:
        """Wait until no other worker has a candidate in flight, so the finalists come from every result."""
        deadline = time.monotonic() + WAIT_FOR_OTHERS_S
        self.sync(state)
        while self.elsewhere and time.monotonic() < deadline:
            time.sleep(0.2)
            self.sync(state)
        if self.elsewhere:
            log.warning("%d candidates of other workers still in flight; re-timing without them", self.elsewhere)

    def _publish(self, marker: Any, best: Any, vendor: Any) -> None:
        """Leave the final verdict in the claim's attributes for the other workers."""
        from .trial_record import result_attrs

        marker.set_user_attr("final_vendor", [vendor[0], asdict(vendor[1])] if vendor else None)
        if best is not None:
            marker.set_user_attr("final_config", best.config.as_dict())
        marker.set_user_attr("final_basis", _complete(self.study.get_trials(deepcopy=False)))
        marker.set_user_attr("final_result", result_attrs(best) if best is not None else None)

    def _await_final(self, winner: Any, vendor: Any, limit_s: float = 3600.0) -> tuple | None:
        """The final verdict of the worker that claimed it; None if it died (or took ``limit_s``) without one."""
        deadline = time.monotonic() + limit_s
        t = winner
        while not t.state.is_finished() and time.monotonic() < deadline:
            time.sleep(0.2)
            self.maintain()
            t = self.storage.get_trial(self.trial_id(winner))
        if "final_result" not in t.user_attrs:
            return None
        owner = t.user_attrs.get("owner", "another worker") if t.number > self.start_number else ""
        v = t.user_attrs.get("final_vendor")
        vendor = (v[0], Timing(**v[1])) if v else vendor
        stored = t.user_attrs["final_result"]
        if stored is None:  # re-timed, and no finalist passed again
            return None, (), vendor, owner
        best = _result(SimpleNamespace(user_attrs=stored), Config.of(t.user_attrs["final_config"]))
        return best, (), vendor, owner


def _owner() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"
