"""Where studies live: a journal file by default (a torn tail set aside on open) or any Optuna storage URL, and
the trials a dead process left running (failed with their reason, through Optuna's public API)."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError
from ..tune.spec import Spec
from .orphans import fail_orphans, failed_orphans, orphan_reason  # noqa: F401 - re-exported: the search's names
from .storage_checks import check_url, first_bad_line, redact, set_aside_torn_tail

log = logging.getLogger(__name__)


def default_storage(spec: Spec, gpu_key: str, runs_dir: Path) -> str:
    return str(runs_dir / spec.name / f"{gpu_key}.journal")


def open_storage(storage: str) -> Any:
    """A journal file path or any Optuna storage URL (sqlite:///..., postgresql://...).

    A bad URL, a missing database driver or an unreadable journal is one sentence (AutotuneError). A journal
    whose last record was cut short is repaired first: the fragment is set aside beside it (one warning).
    """

    if "://" in storage:  # a database: heartbeats let workers that share it fail a dead one's trials
        from .study_database import rdb_storage

        check_url(storage)
        try:
            return rdb_storage(storage)
        except AutotuneError:
            raise
        except Exception as exc:  # noqa: BLE001 - drivers raise their own types; each means "cannot open this URL"
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise AutotuneError(
                f"{redact(storage)} cannot be opened as an Optuna storage ({type(exc).__name__}: {first})"
            ) from None
    path = Path(storage)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = _journal_file(storage)
        note = _repair_journal(path)
    except OSError as exc:
        raise AutotuneError(f"journal {path} cannot be opened ({exc.strerror or exc})") from None
    if note:
        log.warning("%s", note)
    return open_journal(path, backend)


def _repair_journal(path: Path) -> str | None:
    """Set a torn trailing record aside under the journal's own lock (no writer appends meanwhile)."""
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))  # the lock file the backend's appends take
    lock.acquire()
    try:
        return set_aside_torn_tail(path)
    finally:
        lock.release()


def open_journal(path: Path, backend: Any) -> Any:
    """Optuna's JournalStorage over ``backend``; a journal it cannot replay is one sentence naming the line."""
    from optuna.storages import JournalStorage

    try:
        return JournalStorage(backend)
    except (ValueError, KeyError, TypeError, AssertionError) as exc:  # JSONDecodeError is a ValueError
        bad = first_bad_line(path)
        if bad is None:
            raise AutotuneError(
                f"{path}: Optuna cannot replay this journal ({type(exc).__name__}); move it aside to start afresh"
            ) from None
        raise AutotuneError(
            f"{path}, line {bad[0]}: {bad[1]}; remove that line, or move the journal aside to start afresh"
        ) from None


def _journal_file(path: str) -> Any:
    """Optuna's journal file backend, minus the fsync after every record.

    A trial writes some 20 records (each parameter, each attribute); an fsync each cost 0.3-1 ms, tens of ms
    per candidate on the search's critical path. Records still go to the operating system at once (under
    the same lock), so a killed or crashed run loses nothing; only a power cut could lose the last moments.
    """
    from optuna.storages.journal import JournalFileBackend

    try:
        from optuna.storages.journal._file import get_lock_file
    except ImportError:  # another Optuna: use its backend as it is
        return JournalFileBackend(path)

    class JournalFile(JournalFileBackend):
        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode()
            with get_lock_file(self._lock), open(self._file_path, "ab") as f:
                f.write(data)

    backend = JournalFile(path)
    if not (hasattr(backend, "_lock") and hasattr(backend, "_file_path")):  # another Optuna: use it as it is
        return JournalFileBackend(path)
    return backend


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
