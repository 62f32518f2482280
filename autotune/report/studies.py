"""Reading studies: every study of a journal file, of every ``*.journal`` under a directory, or of an Optuna
storage URL, with the trials it holds. Journals are read from a copy, so a run may be read-only or still running.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError
from ..studies.storage_checks import check_url, first_bad_line, redact, set_aside_torn_tail

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Study:
    """One Optuna study as read, with where it came from."""

    run: str  # the journal's path under the source directory without .journal, or the storage URL
    gpu: str | None  # the journal's name without .journal: by convention the GPU key (runs/<spec>/<gpu-key>.journal)
    source: str  # the journal file or storage URL it came from
    name: str
    trials: tuple[Any, ...]  # optuna FrozenTrial, every one (duplicates included)


def load_studies(source: str | Path) -> list[Study]:
    """Every study of a journal file, of every *.journal under a directory, or of an Optuna storage URL."""
    text = str(source)
    if "://" in text:
        return _read_url(text)
    path = Path(text)
    if path.is_dir():
        journals = sorted(path.rglob("*.journal"))
        if not journals:
            raise AutotuneError(f"{path} holds no study journals (*.journal); pass a journal, runs/ or a URL")
        runs = [(str(j.relative_to(path).with_suffix("")), j) for j in journals]
    elif path.is_file():
        runs = [(path.stem, path)]
    else:
        raise AutotuneError(f"{path} does not exist; pass a study journal, a runs/ directory or an Optuna storage URL")
    studies = [s for run, journal in runs for s in _read_journal(journal, run)]
    if not studies:
        raise AutotuneError(f"{path} holds no Optuna studies")
    return studies


def _read_journal(path: Path, run: str) -> list[Study]:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    # Read a copy: the backend opens its file for appending and wants a lock file beside it, and the run
    # may be read-only (or still being written by a tuning process).
    with tempfile.TemporaryDirectory(prefix="autotune-report-") as tmp:
        copy = Path(tmp) / "copy.journal"
        try:
            shutil.copyfile(path, copy)
            if set_aside_torn_tail(copy):  # a killed write, or a record a tuner is writing right now
                log.warning("%s: its last record is cut short; reading the records before it", path)
            storage = JournalStorage(JournalFileBackend(str(copy)))
            return _studies_of(storage, run, path.stem, str(path))
        except OSError as exc:
            raise AutotuneError(f"{path} cannot be read ({exc.strerror})") from None
        except (ValueError, KeyError, TypeError, AssertionError) as exc:  # JSONDecodeError is a ValueError
            bad = first_bad_line(copy)
            if bad is not None:
                raise AutotuneError(
                    f"{path}, line {bad[0]}: {bad[1]}, so it is not a readable Optuna study journal"
                ) from None
            raise AutotuneError(f"{path} is not an Optuna study journal ({type(exc).__name__}: {exc})") from None


def _read_url(url: str) -> list[Study]:
    import optuna

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise AutotuneError(f"{redact(url)}: no such SQLite file")
    check_url(url)
    from ..studies.study_database import with_driver

    try:
        storage = optuna.storages.get_storage(with_driver(url))
    except Exception as exc:  # noqa: BLE001 - drivers raise their own types; each means "cannot open this URL"
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise AutotuneError(
            f"{redact(url)} cannot be opened as an Optuna storage ({type(exc).__name__}: {first})"
        ) from None
    studies = _studies_of(storage, url, None, url)
    if not studies:
        raise AutotuneError(f"{redact(url)} holds no Optuna studies")
    return studies


def _studies_of(storage: Any, run: str, gpu: str | None, source: str) -> list[Study]:
    studies = []
    for s in storage.get_all_studies():
        study_id = storage.get_study_id_from_name(s.study_name)
        studies.append(Study(run, gpu, source, s.study_name, tuple(storage.get_all_trials(study_id, deepcopy=False))))
    return studies
