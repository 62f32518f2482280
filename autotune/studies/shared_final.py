"""The final re-timing of a shared study's top-k, on exactly one worker: claimed by a bookkeeping trial with no
parameters (``final_retiming``), like a configuration (:class:`autotune.studies.shared_study.Claims`). The worker
that keeps it waits for the others' candidates in flight, re-times, and leaves the winner in that trial's
attributes, which the other workers of the study read instead of re-timing."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

from ..core.space import Config
from ..measure.bench import Timing
from .shared_asks import FINAL_MARK, MAX_RETRIES

log = logging.getLogger(__name__)

WAIT_FOR_OTHERS_S = 140.0  # how long a worker out of candidates waits for the others' (a dead one's: grace + retry)


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


class FinalRetiming:
    """The final re-timing's part of :class:`autotune.studies.shared_study.Claims`."""

    def owner(self) -> str:
        """Who this worker is in the study's trials (``Claims`` says)."""
        raise NotImplementedError

    def final(self, state: Any, retime: Callable[[], tuple[Any, tuple, Any]], vendor: Any) -> tuple:
        """Re-time the finalists on exactly one worker of the study: ``(best, front, vendor, final_by)``.

        ``retime()`` is this worker's re-timing (best, Pareto front, vendor). The worker that keeps the claim
        runs it and returns ``final_by=""``; the others wait for its result and return it with its owner. A
        verdict left by an earlier run, with no complete result since, is taken as it is, with ``final_by=""``
        (this run stores it: its own worker did so in its run).
        """
        from optuna.trial import TrialState

        from .shared_asks import new_trial

        for _ in range(MAX_RETRIES):  # a claimant that dies before it re-times leaves the claim to another
            # owner: who re-times, for the others' tables; duplicate_of: bookkeeping, not a configuration
            marker = new_trial(self.storage, self.study_id, {"owner": self.owner(), "duplicate_of": -1})
            self.asked(marker)
            marker.set_user_attr(FINAL_MARK, marker.number)
            winner = self._final_winner(marker, self.sync(state))
            if winner is None:
                try:
                    self._wait_for_others(state)
                    best, front, vendor = retime()
                    self._publish(marker, best, vendor)
                finally:
                    self.release(marker)
                    self.study.tell(marker.number, state=TrialState.FAIL)
                return best, front, vendor, ""
            self.release(marker)
            self.study.tell(marker.number, state=TrialState.FAIL)
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
