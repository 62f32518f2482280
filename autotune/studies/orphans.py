"""Trials that no live process will finish (their worker was killed): found from their owner (host:pid) and failed
through Optuna's public API, so a resumed or shared study enqueues their configurations again."""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime
from typing import Any

log = logging.getLogger(__name__)

UNMARKED_S = 30.0  # how long a running trial with no owner may be waiting for its worker to mark it


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def orphan_reason(trial: Any, host: str | None = None, shared: bool = False) -> str | None:
    """Why a RUNNING trial can no longer finish, or None while its process may still be running it.

    Every trial the search asks for carries its owner (host:pid) from the moment it exists (see
    :func:`autotune.tune.search._ask_owned`). A trial with no owner was asked by a process killed before it could
    mark it (an older autotune asked first and marked later); a trial whose owner on this host is gone was
    interrupted.
    Owners on other hosts cannot be checked from here and are left alone. A trial with no owner is given
    UNMARKED_S to get one in a ``shared`` study (a retried configuration's waiting trial, just taken by a worker).
    """
    owner = trial.user_attrs.get("owner")
    if not owner:
        young = trial.datetime_start and (datetime.now() - trial.datetime_start).total_seconds() < UNMARKED_S
        if shared and young:
            return None  # a waiting trial just taken by another worker, about to mark it
        return "interrupted: its process ended before it marked the trial as its own"
    h, _, pid = str(owner).rpartition(":")
    if h == (host or socket.gethostname()) and pid.isdigit() and not _pid_alive(int(pid)):
        return f"interrupted: its process ({owner}) ended before the trial finished"
    return None


def fail_orphans(study: Any, storage: Any, shared: bool = False) -> int:
    """Fail the study's RUNNING trials that no live process will finish, each with its reason; how many."""
    return len(failed_orphans(study, storage, shared))


def failed_orphans(study: Any, storage: Any, shared: bool = False) -> list[Any]:
    """Fail the study's RUNNING trials that no live process will finish, each with its reason; return them.

    Public Optuna API only: the reason goes in through the storage's ``set_trial_user_attr`` and the trial
    ends with ``study.tell(number, state=FAIL)``.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    failed: list[Any] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        reason = orphan_reason(t, shared=shared)
        if reason is None:
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            storage.set_trial_user_attr(trial_id, "status", "interrupted")
            storage.set_trial_user_attr(trial_id, "result", {"reason": reason})
        except UpdateFinishedTrialError:  # another process starting at the same time failed it first
            continue
        try:
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
        except UpdateFinishedTrialError:  # another process failed it between the two writes
            continue
        failed.append(t)
    if failed:
        log.warning("%s: %d interrupted trial(s) marked failed", study.study_name, len(failed))
    return failed
