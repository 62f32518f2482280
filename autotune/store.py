"""tuned/<gpu-key>/<kernel>.json: the best verified configuration per (dtype, layout, shape).

Files are merged, never blindly overwritten: an entry is replaced only by a faster verified one
(or when forced), and every write goes to a temporary file that is renamed into place. Runs that measured
energy also keep a ``pareto`` list in the entry: the verified configurations no other one beats on both
time and J per launch, merged with the front already stored.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .energy import pareto_front
from .errors import StoreError

SCHEMA = 1


def entry_key(dtype: str, layout: str, label: str) -> str:
    return f"{dtype}/{layout}/{label}"


def tuned_file(tuned_dir: Path, gpu_key: str, kernel: str) -> Path:
    return tuned_dir / gpu_key / f"{kernel}.json"


def read(path: Path) -> dict[str, Any]:
    """The file's content, an empty document if it does not exist; StoreError if it is corrupt."""
    if not path.exists():
        return {"schema": SCHEMA, "entries": {}}
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path} is not valid JSON (line {exc.lineno}): fix or move it away and run again") from None
    except OSError as exc:
        raise StoreError(f"{path} cannot be read ({exc.strerror})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
        raise StoreError(f"{path} is not an autotune results file (no 'entries' mapping): fix or move it away")
    if doc.get("schema") != SCHEMA:
        raise StoreError(f"{path} has schema {doc.get('schema')!r}; this autotune reads schema {SCHEMA}")
    return doc


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
) -> MergeOutcome:
    """Store ``entry`` under ``key`` if it is faster than what is there (or ``force``); atomic.

    A stored entry tuned with another version of its template is replaced regardless of time: ``installed``
    gives the installed hash of a template name; without it, only an entry of the same template with
    another hash counts as outdated (an entry of another template is compared by time). ``unchanged`` says
    whether the installed templates still render a stored entry's source byte for byte (a template edit that
    left it alone): such an entry is compared by time whatever its template hash.
    ``pareto`` (time-energy front points: params, kernel_name, median_ms, energy_j, ..., verified) is merged
    with the stored front of the key even when the entry itself is kept.
    """
    if entry.get("verified") is not True or any(p.get("verified") is not True for p in pareto or ()):
        raise ValueError("only verified results may be stored")  # a bug in the caller, not user input
    doc = read(path)
    old = doc["entries"].get(key)
    stale = old is not None and _outdated(old, entry, installed) and not (unchanged and unchanged(old))
    if old is not None and not force and not stale and old.get("median_ms", float("inf")) <= entry["median_ms"]:
        why = f"kept the stored {old['median_ms']:.4g} ms (new {entry['median_ms']:.4g} ms)"
        if pareto:
            old["pareto"] = merge_front(old.get("pareto") or [], pareto)
            doc.update(header)
            write_atomic(path, doc)
            why += f"; time-energy front now {len(old['pareto'])} points"
        return MergeOutcome(key, False, why)
    doc.update(header)
    doc["schema"] = SCHEMA
    if pareto or (old and old.get("pareto") and not force and not stale):
        kept = [] if force or stale or old is None else old.get("pareto") or []
        entry = {**entry, "pareto": merge_front(kept, pareto or [])}
    doc["entries"][key] = entry
    doc["entries"] = dict(sorted(doc["entries"].items()))
    write_atomic(path, doc)
    if old is None:
        why = "new entry"
    elif force:
        why = "forced"
    elif stale:
        why = "replaces an entry tuned with another version of the template"
    else:
        why = f"faster than the stored {old['median_ms']:.4g} ms"
    return MergeOutcome(key, True, why)


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
