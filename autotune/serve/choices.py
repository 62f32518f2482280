"""The online choices remembered per user: ``<cache_dir>/choices/<gpu-key>.json``.

One record per problem (key ``kernel/dtype/layout/label``): what was served ("ours" with its template,
parameters and source hash, or "vendor"), every candidate measured with its time and verification error,
the date and the versions that made it. A record made with other versions (autotune, CuPy, NVRTC, torch,
the CUDA runtime) is measured again. Writes hold an ``fcntl.lockf`` lock on a sidecar file and replace the
file atomically, so processes sharing the cache never see half a file; a corrupt file is ignored with one
warning (and replaced by the next write).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMA = 1
_warned: set[str] = set()


def choices_path(cache: Path, gpu_key: str) -> Path:
    return cache / "choices" / f"{gpu_key}.json"


def problem_key(kernel: str, problem: Any) -> str:
    return f"{kernel}/{problem.dtype}/{problem.layout}/{problem.label}"


@functools.cache
def versions() -> dict[str, str]:
    """What can change an online choice's answer: the software that built and timed it (torch's as installed,
    whether or not this process imported it, so processes with and without torch share the records)."""
    import importlib.metadata

    import cupy as cp

    from ..build.compiler import nvrtc_version
    from ..core.version import __version__

    found = {"autotune": __version__, "cupy": cp.__version__, "nvrtc": nvrtc_version()}
    try:
        found["cuda_runtime"] = str(cp.cuda.runtime.runtimeGetVersion())
    except Exception:  # noqa: BLE001 - no driver: the record says so rather than failing
        found["cuda_runtime"] = "unknown"
    try:
        found["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pass
    return found


def read_choices(path: Path) -> dict[str, Any]:
    """The records in ``path``; {} when it is missing, and {} with one warning when it is corrupt."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _warn_once(path, f"cannot be read ({type(exc).__name__})")
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("choices"), dict):
        _warn_once(path, "is not an autotune choices file of schema 1")
        return {}
    return {k: v for k, v in doc["choices"].items() if isinstance(v, dict)}


def _warn_once(path: Path, what: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(f"the online-choice cache {path} {what}; it is ignored and measured again", stacklevel=3)


def recall(path: Path, key: str, current: dict[str, str]) -> dict[str, Any] | None:
    """The record for ``key`` if it was made with the ``current`` versions, else None."""
    record = read_choices(path).get(key)
    if record is None:
        return None
    if record.get("versions") != current:
        log.debug("online choice for %s was made with %s, now %s: measured again", key, record.get("versions"),
                  current)  # fmt: skip
        return None
    return record


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


def remember(path: Path, key: str, record: dict[str, Any]) -> bool:
    """Add ``record`` under ``key`` (read, update, atomic replace, under the lock). False if the cache cannot
    be written (a read-only home, say): the choice then lasts for this process only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            records = read_choices(path)
            records[key] = record
            doc = {"schema": SCHEMA, "choices": dict(sorted(records.items()))}
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f, indent=1)
                    f.write("\n")
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except OSError as exc:
        log.warning("cannot write the online-choice cache %s (%s); the choice lasts for this process", path, exc)
        return False
    return True
