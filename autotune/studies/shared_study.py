"""Several workers on one Optuna study: claims of configurations, heartbeats, retries, one final re-timing.

Every worker (a process with its own GPU, on this host or another) proposes from its own in-memory mirror of the
study (:mod:`autotune.studies.shared_asks`). A configuration it is about to compile is *claimed* in the storage, so
every other worker sees it:

1. Its trial is created running, with its parameters and its owner, and gets a heartbeat (RDB storages), so a
   worker killed from then on has its trial failed by Optuna once the grace period has passed (or, on this host,
   as an orphan), and the configuration is enqueued again.
2. The worker re-reads the study (once for the claims created since its last read, at the latest before the
   candidate starts: :meth:`Claims.settle`). A configuration already finished by another worker is answered
   from it. If a *lower-numbered* running trial holds the same configuration, this one yields. If only
   higher-numbered ones do, it waits for their verdict: the one that kept it wins, one that yielded does not
   count. Every trial is created with its parameters before its worker reads, so of two claimants at least one
   sees the other; the one that sees a lower number yields, the lower one waits for the higher one's verdict,
   and so at most one keeps a configuration, whatever the interleaving.
3. The verdict "kept" is the user attribute ``claim`` equal to the trial's own number (a retried copy of a trial
   carries its original's attributes, but not its number).
4. Its result is written by a thread while the next candidate starts and more are asked, and stored before the
   next candidate's measurement is collected; a worker killed before that has the trial failed through its
   heartbeat, and the configuration is evaluated again (nothing is lost).

The final re-timing of the top-k is claimed the same way (:mod:`autotune.studies.shared_final`).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..core.space import Config
from .shared_asks import FINAL_MARK, _heartbeat_storage, retry  # noqa: F401 - re-exported: the storage's stale-trial callback
from .shared_final import WAIT_FOR_OTHERS_S, FinalRetiming, _config_key, _kept, _result

log = logging.getLogger(__name__)

VERDICT_WAIT_S = 10.0  # how long a lower-numbered claimant waits for a higher one's verdict before yielding
MAINTAIN_S = 4.0  # how often a worker looks for stale or orphaned trials of other workers
SETTLE_BATCH, SETTLE_S = 8, 0.5  # claims decided together: this many, or the oldest waited this long
QUIET_S = 1.0  # a worker out of candidates ends its search once the study has looked finished this long


class Claims(FinalRetiming):
    """One worker's view of a shared study: what other workers hold and have finished, and its heartbeats."""

    def __init__(self, study: Any, storage: Any, objectives: tuple[str, ...] = ("time",)) -> None:
        import threading

        from .shared_asks import Mirror

        self.study, self.storage = study, storage  # the storage the study was opened on (public API only)
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.heartbeat = _heartbeat_storage(storage)
        trials = study.get_trials(deepcopy=False)
        self.mirror = Mirror(study, trials)  # where the sampler proposes (autotune.studies.shared_asks)
        self.local = self.mirror.local
        self.objectives = objectives
        self._shared: dict[int, Any] = {}  # number of a trial of the mirror -> its claimed trial of the study
        self._taken: dict[str, Any] = {}  # config key -> a dead worker's retried trial, taken from the queue
        self._pending: list[tuple[Any, Any, str]] = []  # (proposal, its trial, key) created, claim not decided
        self._pending_since = 0.0
        self._yielded: dict[int, tuple[int, str]] = {}  # proposal number -> (the holder's number, key)
        self._unwritten: list[tuple[Any, Any]] = []  # (trial, result) to write while the GPU measures
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="autotune-results")
        self._writing: Future | None = None  # the writer's batch in progress
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
        self._idle_since: float | None = None
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

    def owner(self) -> str:
        return _owner()  # looked up at each call (tests stand in another host for it)

    def asked(self, trial: Any) -> None:
        """A trial was just created with its owner: from now on its death is noticed (a stale heartbeat, or a dead
        process of this host) and its configuration retried. Heartbeated until released."""
        self.mine.add(trial.number)
        if self.heartbeat is not None:
            self.heartbeat.record_heartbeat(trial.trial_id)
        self.hold(trial)

    def hold(self, trial: Any) -> None:
        with self._lock:
            self._held.add(self.trial_id(trial))

    def release(self, trial: Any) -> None:
        with self._lock:
            self._held.discard(self.trial_id(trial))

    def trial_id(self, trial: Any) -> int:
        """The storage's id of a trial of this study (Trial and FrozenTrial keep theirs private)."""
        if isinstance(getattr(trial, "trial_id", None), int):
            return trial.trial_id
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)

    def close(self) -> None:
        from .shared_asks import close

        self.flush()
        for trial in self._taken.values():  # taken from the queue, never claimed: nothing left to evaluate
            close(self.study, trial, -1)
        self._writer.shutdown()
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
        for t in failed_orphans(self.study, self.storage, shared=True):
            retry(self.study, t)

    def sync(self, state: Any) -> list[Any]:
        """Read the study: record other workers' finished results in ``state``; return the running trials."""
        from optuna.trial import TrialState

        self.flush()  # this worker's results first: other workers may be waiting for them
        self.maintain()
        running, held, waiting, elsewhere = [], set(), [], 0
        for t in self.study.get_trials(deepcopy=False):
            final = FINAL_MARK in t.user_attrs and t.number > self.start_number
            if t.state is TrialState.WAITING:
                if "retry_of" in t.user_attrs:
                    waiting.append(t.user_attrs.get("config") or t.params)
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
                    self.mirror.learn(t)
        seen = state.seen if state is not None else {}  # a retry of a configuration finished since is not one
        retries = sum(1 for c in waiting if not (c and Config.of(c).key in seen))
        self.elsewhere, self.held, self.retries = elsewhere, held, retries
        return running

    def others(self, state: Any) -> int:
        """How many configurations not yet finished other workers hold: for the study's budget and to tell
        when the space is exhausted."""
        return len(self.held - state.seen.keys())

    def busy(self, state: Any, can_ask: bool) -> bool:
        """Whether this worker, out of candidates, should wait before it ends the search: other workers still
        hold configurations (a dead one's come back as retries), or retries wait and this worker ``can_ask``.
        Waits a moment first, and gives up after WAIT_FOR_OTHERS_S of waiting. Idle means idle at reads QUIET_S
        apart: a dead worker's trial is failed a moment before its configuration is enqueued again."""
        time.sleep(0.05)
        self.sync(state)
        now = time.monotonic()
        self._busy_since = self._busy_since or now
        if now - self._busy_since > WAIT_FOR_OTHERS_S:
            log.warning("other workers still hold %d configurations; ending the search without them", self.elsewhere)
            return False
        if self.elsewhere or (can_ask and self.retries and not self.final_claimed):
            self._idle_since = None
            return True
        self._idle_since = self._idle_since or now
        return now - self._idle_since < QUIET_S

    def claim(self, proposal: Any, key: str, state: Any) -> int | None:
        """Claim configuration ``key`` of ``proposal`` (a trial of the mirror): its trial is created in the study
        (or a retried one taken from the queue is used) and heartbeated; whether it keeps the configuration is
        decided by :meth:`settle`, with the claims made since the last one. The number of the trial that holds
        it if that is known now (finished), or -1 if the retried trial was failed meanwhile."""
        from optuna.exceptions import UpdateFinishedTrialError

        from .shared_asks import new_trial, write_params

        if key in state.seen:
            return state.seen[key][0].number
        trial = self._taken.pop(key, None)
        if trial is None:
            attrs = {"owner": _owner()}
            trial = new_trial(self.storage, self.study_id, attrs, proposal, self.mirror.system_attrs(proposal))
            self.asked(trial)
        else:  # a dead worker's configuration, evaluated again in the trial taken from the queue
            try:
                write_params(trial, proposal)
            except UpdateFinishedTrialError:  # failed meanwhile as an orphan: a copy of it waits again
                self.release(trial)
                return -1
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append((proposal, trial, key))
        self._shared[proposal.number] = trial
        self.settle(state, due=True)
        return None

    def settle(self, state: Any, due: bool = False) -> None:
        """Decide the claims created since the last read of the study, after one read: each keeps its
        configuration or yields it (:meth:`_tie_break`). ``due``: only once SETTLE_BATCH claims wait or the
        oldest has waited SETTLE_S (so that a rival waiting for a verdict waits no longer)."""
        from optuna.exceptions import UpdateFinishedTrialError

        from .shared_asks import close

        if not self._pending or (
            due and len(self._pending) < SETTLE_BATCH and time.monotonic() - self._pending_since < SETTLE_S
        ):
            return
        running = self.sync(state)
        pending, self._pending = self._pending, []
        for proposal, trial, key in pending:
            holder = state.seen[key][0].number if key in state.seen else None
            try:
                if holder is None:
                    holder = self._tie_break(trial, running, lambda t, key=key: _config_key(t) == key)
            except UpdateFinishedTrialError:  # failed as stale (this worker stalled): its retry comes back
                holder = -1
            if holder is not None:
                del self._shared[proposal.number]
                self.release(trial)
                close(self.study, trial, holder)
                self._yielded[proposal.number] = (holder, key)

    def kept(self, proposal: Any, state: Any) -> bool:
        """Whether this worker evaluates ``proposal`` (claimed, about to start). If another worker has its
        configuration, the mirror learns so (with that worker's result once it is finished)."""
        from optuna.trial import TrialState

        from .trial_record import _tell

        if any(p is proposal for p, _, _ in self._pending):
            self.settle(state)
        if proposal.number not in self._yielded:
            return True
        holder, key = self._yielded.pop(proposal.number)
        if key in state.seen:
            _tell(self.local, proposal, state.seen[key][1], {"duplicate_of": holder}, self.objectives)
        else:
            proposal.set_user_attr("duplicate_of", holder)
            self.local.tell(proposal, state=TrialState.PRUNED)
        return False

    def take_retry(self, state: Any, inflight: set[str]) -> dict[str, Any] | None:
        """The configuration of a dead worker's trial waiting to be evaluated again, taken from the queue (its
        trial is the one that evaluates it, see :meth:`claim`); None if there is none to evaluate here."""
        from optuna.exceptions import UpdateFinishedTrialError

        from .shared_asks import SharedTrial, close

        self.retries -= 1
        asked = self.study.ask()  # the oldest waiting trial, or a new one if another worker took the last
        trial = SharedTrial(self.storage, asked.number, self.trial_id(asked))
        try:
            trial.set_user_attr("owner", _owner())
        except UpdateFinishedTrialError:  # failed meanwhile as a trial without owner: a copy of it waits again
            return None
        self.asked(trial)
        config = asked.user_attrs.get("config")
        key = Config.of(config).key if config else None
        if key is None or key in state.seen or key in inflight or key in self.held or key in self._taken:
            self.release(trial)
            close(self.study, trial, -1)  # bookkeeping: nothing to evaluate, or evaluated elsewhere
            return None
        self._taken[key] = trial
        return config

    def told(self, proposal: Any, r: Any, later: bool = False) -> Any:
        """The result ``r`` of ``proposal`` (a claimed trial of the mirror, told there) for its trial of the
        study: written now, or with ``later`` by a thread while the search goes on (the next candidate starts,
        more are asked), done at the next :meth:`flush`; the trial stays heartbeated until then. Returns it."""
        trial = self._shared.pop(proposal.number)
        self._unwritten.append((trial, r))
        self.flush(wait=not later)
        return trial

    def flush(self, wait: bool = True) -> None:
        """Write the results told since the last flush, and stop their trials' heartbeats; with ``wait`` False
        in a thread of its own, finished (its error raised) by the next flush or read."""
        if self._writing is not None:
            self._writing.result()
            self._writing = None
        batch, self._unwritten = self._unwritten, []
        if batch and wait:
            self._write(batch)
        elif batch:
            self._writing = self._writer.submit(self._write, batch)

    def _write(self, batch: list[tuple[Any, Any]]) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        from .trial_record import write_result

        for trial, r in batch:
            try:
                write_result(self.storage, trial.trial_id, r, self.objectives)
            except UpdateFinishedTrialError:  # its heartbeat lapsed (a stalled worker): retried elsewhere
                log.warning("trial %d was failed as stale before its result was written", trial.number)
            self.release(trial)

    def abandon(self, proposal: Any) -> None:
        """A claimed candidate that was not evaluated: its trial of the study fails as unevaluated, free for a
        later run (as does a retried trial taken but not claimed)."""
        from .shared_asks import close

        self._pending = [p for p in self._pending if p[0] is not proposal]
        for trial in [self._shared.pop(proposal.number, None), *self._taken.values()]:
            if trial is not None:
                close(self.study, trial, -1, "unevaluated")
                self.release(trial)
        self._taken.clear()

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
        self._busy_since = self._idle_since = None  # work again: a later wait for the others starts its own clock
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
            time.sleep(0.02)
        return rival.number  # undecided for too long (a stuck worker): yielding is the safe side


def _owner() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"
