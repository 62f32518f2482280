"""tuned/<gpu-key>/<kernel>.json: the best verified configuration per (dtype, layout, shape).

Files are merged, never blindly overwritten: an entry is replaced only by a faster verified one (faster when
the two were timed side by side, if the caller did so; else by their stored times) or when forced, and every write
goes to a temporary file that is renamed into place. A merge reads, modifies
and writes under an inter-process lock (``fcntl.lockf`` on a sidecar ``.<kernel>.json.lock``), so concurrent
tuners lose nothing. Runs that measured energy also keep a ``pareto`` list in the entry: the verified
configurations no other one beats on both time and J per launch, merged with the front already stored.

Entries are ``records.TunedEntry`` records under ``records.EntryKey`` keys, and files carry the schema version
``records.SCHEMA``; files of older schemas are migrated on read. Readers skip a malformed entry with one warning
naming the file and the key; a file that cannot be read at all (not UTF-8 text, not JSON, no entries object, an
unknown schema) is a ``StoreError`` with one sentence.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.records import MIGRATES, SCHEMA, EntryKey, RecordError, TunedEntry
from ..measure.energy import pareto_front

log = logging.getLogger(__name__)

__all__ = ["SCHEMA", "MergeOutcome", "TunedFile", "entry_key", "load", "merge", "merge_front", "migrate", "read",
           "read_or_empty", "tuned_file", "write_atomic"]  # fmt: skip


def entry_key(dtype: str, layout: str, label: str) -> str:
    """The key of an entry in a tuned file, e.g. ``float32/NN/64x64x64`` (see ``records.EntryKey``)."""
    return str(EntryKey(dtype, layout, label))


def tuned_file(tuned_dir: Path, gpu_key: str, kernel: str) -> Path:
    return tuned_dir / gpu_key / f"{kernel}.json"


@dataclass(frozen=True)
class TunedFile:
    """A tuned file as read: its header (kernel, gpu), its valid entries, and the entries it holds that are
    not valid records (raw, with the reason), which readers skip and merges keep as they are."""

    header: Mapping[str, Any]
    entries: Mapping[str, TunedEntry]
    rejected: Mapping[str, tuple[Any, str]]
    schema: int  # the schema it was written with (older ones are migrated on read)


def load(path: Path) -> TunedFile:
    """The file's records, an empty file if it does not exist; StoreError if it cannot be read at all."""
    if not path.exists():
        return TunedFile({}, {}, {}, SCHEMA)
    doc = _document(path)
    schema = doc.get("schema", 1)  # files of the first format carried no version
    for name, kind in (("kernel", str), ("gpu", dict)):
        if name in doc and not isinstance(doc[name], kind):
            what = "a string" if kind is str else "an object"
            raise StoreError(f"{path}: '{name}' must be {what}; fix or move it away")
    kernel = path.stem
    entries: dict[str, TunedEntry] = {}
    rejected: dict[str, tuple[Any, str]] = {}
    for key, raw in doc["entries"].items():
        try:
            _check_key(kernel, key)
            entries[key] = TunedEntry.from_json(raw)
        except RecordError as exc:
            rejected[key] = (raw, str(exc))
    header = {k: v for k, v in doc.items() if k not in ("schema", "entries")}
    return TunedFile(header, entries, rejected, schema)


def read(path: Path) -> dict[str, Any]:
    """The file as a document whose entries all passed validation (as dicts); a bad entry is skipped with one
    warning naming the file and the key. StoreError if the file cannot be read at all."""
    tf = load(path)
    _warn_rejected(path, tf.rejected)
    return _as_document(tf.header, {k: e.to_json() for k, e in tf.entries.items()})


def read_or_empty(path: Path) -> dict[str, Any]:
    """``read``, for serving: a file that cannot be read at all counts as one without entries, with one warning
    (once per file and reason in a process), so lookups fall back to other files or the defaults."""
    try:
        return read(path)
    except StoreError as exc:
        _warn_once((str(path), "", str(exc)), "%s; serving without it", exc)
        return _as_document({}, {})


def _document(path: Path) -> dict[str, Any]:
    """The JSON object of a tuned file, its schema checked; StoreError with one sentence otherwise."""
    try:
        text = path.read_bytes().decode("utf-8")
        doc = json.loads(text)
    except UnicodeDecodeError:
        raise StoreError(f"{path} is not a text file (not UTF-8): fix or move it away and run again") from None
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path} is not valid JSON (line {exc.lineno}): fix or move it away and run again") from None
    except RecursionError:
        raise StoreError(f"{path} is nested too deeply to be an autotune results file: fix or move it away") from None
    except OSError as exc:
        raise StoreError(f"{path} cannot be read ({exc.strerror})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
        raise StoreError(f"{path} is not an autotune results file (no 'entries' mapping): fix or move it away")
    schema = doc.get("schema", 1)
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA:
        raise StoreError(f"{path} has schema {schema}, written by a newer autotune; this one reads schema {SCHEMA} "
                         "and older: upgrade autotune")  # fmt: skip
    if schema != SCHEMA and schema not in MIGRATES or isinstance(schema, bool):
        raise StoreError(f"{path} has schema {str(schema)[:40]!r}; this autotune reads schema {SCHEMA} and "
                         f"{', '.join(map(str, MIGRATES))}")  # fmt: skip
    return doc


def _check_key(kernel: str, key: str) -> None:
    """RecordError unless ``key`` is dtype/layout/label naming a problem of ``kernel``, label as the family
    writes it (checked only for kernel families this autotune knows)."""
    k = EntryKey.parse(key)
    from ..kernels import FAMILIES

    family = FAMILIES.get(kernel)
    if family is None:
        return
    try:
        label = family.problem(k.label, k.dtype, k.layout).label
    except (ValueError, TypeError) as exc:
        raise RecordError(f"key {key!r} names no {kernel} problem: {str(exc)[:200]}") from None
    if label != k.label:
        raise RecordError(f"key {key!r} is not as autotune writes it ({k.dtype}/{k.layout}/{label})")


_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def _warn_rejected(path: Path, rejected: Mapping[str, tuple[Any, str]]) -> None:
    """One warning per bad entry (file, key and reason), however often the file is read in this process."""
    for key, (_, why) in rejected.items():
        _warn_once((str(path), str(key), why), "%s: skipped entry %s: %s", path, _shown(key), why)


def _warn_once(mark: tuple[str, str, str], message: str, *args: Any) -> None:
    with _warned_lock:
        if mark in _warned:
            return
        _warned.add(mark)
    log.warning(message, *args)


def _shown(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def _as_document(header: Mapping[str, Any], entries: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, "entries": dict(sorted(entries.items())), **header}


@dataclass(frozen=True)
class MergeOutcome:
    key: str
    stored: bool
    why: str


def merge(
    path: Path,
    header: dict[str, Any],
    key: str,
    entry: dict[str, Any],
    force: bool = False,
    pareto: list[dict[str, Any]] | None = None,
    installed: Callable[[str], str | None] | None = None,
    unchanged: Callable[[dict[str, Any]], bool] | None = None,
    rival: tuple[float, float] | None = None,
) -> MergeOutcome:
    """Store ``entry`` under ``key`` if it is faster than what is there (or ``force``); atomic, and under an
    inter-process lock, so merges from many processes (on one machine, or over NFS with lockd) lose nothing.

    ``rival``: (the new kernel's ms, the stored kernel's ms) timed side by side in the caller's process; when given,
    it decides instead of the stored entry's own time, which another run measured (the stored kernel that failed
    there: inf).

    A stored entry tuned with another version of its template is replaced regardless of time: ``installed``
    gives the installed hash of a template name; without it, only an entry of the same template with
    another hash counts as outdated (an entry of another template is compared by time). ``unchanged`` says
    whether the installed templates still render a stored entry's source byte for byte (a template edit that
    left it alone): such an entry is compared by time whatever its template hash.
    ``pareto`` (time-energy front points: params, kernel_name, median_ms, energy_j, ..., verified) is merged
    with the stored front of the key even when the entry itself is kept. Entries of the file that are not valid
    records are kept as they are (with a warning), so a merge never drops what another version wrote.
    """
    if entry.get("verified") is not True or any(p.get("verified") is not True for p in pareto or ()):
        raise ValueError("only verified results may be stored")  # a bug in the caller, not user input
    TunedEntry.from_json(entry)  # a malformed entry is a bug in the caller: RecordError (a ValueError)
    EntryKey.parse(key)
    with _locked(path):
        tf = load(path)
        _warn_rejected(path, tf.rejected)
        entries: dict[str, Any] = {k: e.to_json() for k, e in tf.entries.items()}
        entries.update({k: raw for k, (raw, _) in tf.rejected.items() if k != key})
        outcome = _merge_entry(entries, key, entry, force, pareto, installed, unchanged, rival)
        if outcome is not None:
            write_atomic(path, _as_document({**tf.header, **header}, entries))
        return outcome or MergeOutcome(key, False, _kept(entries[key], entry, rival))


def _merge_entry(
    entries: dict[str, Any],
    key: str,
    entry: dict[str, Any],
    force: bool,
    pareto: list[dict[str, Any]] | None,
    installed: Callable[[str], str | None] | None,
    unchanged: Callable[[dict[str, Any]], bool] | None,
    rival: tuple[float, float] | None = None,
) -> MergeOutcome | None:
    """Merge one entry into ``entries`` in place; the outcome, or None when nothing changed."""
    old = entries.get(key)
    stale = old is not None and _outdated(old, entry, installed) and not (unchanged and unchanged(old))
    if old is not None and not force and not stale and not _faster(old, entry, rival):
        if not pareto:
            return None
        front = merge_front(old.get("pareto") or [], pareto)
        entries[key] = TunedEntry.from_json({**old, "pareto": front}).to_json()
        return MergeOutcome(key, False, _kept(old, entry, rival) + f"; time-energy front now {len(front)} points")
    if pareto or (old and old.get("pareto") and not force and not stale):
        kept = [] if force or stale or old is None else old.get("pareto") or []
        entry = {**entry, "pareto": merge_front(kept, pareto or [])}
    entries[key] = TunedEntry.from_json(entry).to_json()
    if old is None:
        why = "new entry"
    elif force:
        why = "forced"
    elif stale:
        why = "replaces an entry tuned with another version of the template"
    elif rival is not None:
        why = f"faster than the stored kernel timed beside it ({rival[0]:.4g} ms against {rival[1]:.4g})"
    else:
        why = f"faster than the stored {old['median_ms']:.4g} ms"
    return MergeOutcome(key, True, why)


def _faster(old: dict[str, Any], new: dict[str, Any], rival: tuple[float, float] | None) -> bool:
    """Whether the new entry beats the stored one: side by side when timed so, else by their stored times."""
    return rival[0] < rival[1] if rival is not None else new["median_ms"] < old["median_ms"]


def _kept(old: dict[str, Any], new: dict[str, Any], rival: tuple[float, float] | None = None) -> str:
    if rival is not None:
        return f"kept the stored kernel: timed beside the new one, {rival[1]:.4g} ms against {rival[0]:.4g}"
    return f"kept the stored {old['median_ms']:.4g} ms (new {new['median_ms']:.4g} ms)"


def migrate(path: Path) -> bool:
    """Rewrite a tuned file of an older schema as the current one, under the merge lock; whether it changed.
    Entries that are not valid records are kept as they are."""
    with _locked(path):
        tf = load(path)
        if not path.exists() or tf.schema == SCHEMA:
            return False
        _warn_rejected(path, tf.rejected)
        entries: dict[str, Any] = {k: e.to_json() for k, e in tf.entries.items()}
        entries.update({k: raw for k, (raw, _) in tf.rejected.items()})
        write_atomic(path, _as_document(tf.header, entries))
        return True


_process_lock = threading.Lock()  # lockf locks belong to the process: threads of one process queue here first


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the tuned file's lock: POSIX ``lockf`` on a sidecar ``.<name>.lock`` beside it (record locks work
    on NFS through lockd, where ``flock`` may not). The lock file is never removed: removing it would let two
    writers hold locks on two different files."""
    import fcntl

    lock = path.parent / f".{path.name}.lock"
    with _process_lock:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot lock {path}: {lock} cannot be opened ({exc.strerror})") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def _outdated(old: dict[str, Any], new: dict[str, Any], installed: Callable[[str], str | None] | None) -> bool:
    if installed is not None:
        return old.get("template_hash") != installed(str(old.get("template")))
    return old.get("template") == new.get("template") and old.get("template_hash") != new.get("template_hash")


def merge_front(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The time-energy front of two fronts' points, fastest first; a kernel in both keeps its new numbers."""
    names = {p.get("kernel_name") for p in new}
    points = [p for p in old if p.get("kernel_name") not in names] + list(new)
    points = [p for p in points if p.get("energy_j") is not None and p.get("median_ms") is not None]
    return pareto_front(points, lambda p: p["median_ms"], lambda p: p["energy_j"])


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; tuned/ files are shared results
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
