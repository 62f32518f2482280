"""Checks on a study storage before Optuna opens it, so that a bad one is one sentence, not a traceback.

- :func:`check_url` names what is wrong with a storage URL (unknown scheme, missing database driver, an SQLite
  file whose folder does not exist) before SQLAlchemy raises.
- :func:`set_aside_torn_tail` repairs a journal whose last record was cut short (a killed write, a full disk, a
  truncated copy): the fragment moves to a side file and the journal ends at its last whole record.
- :func:`first_bad_line` finds the line a journal cannot be replayed from, to name it in the error.

Only the standard library is used here; Optuna and SQLAlchemy stay in the callers.
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import json
import os
import re
from pathlib import Path

from ..core.errors import AutotuneError

# Journal operation codes Optuna 4 and 5 write (optuna.storages.journal._storage.JournalOperation, not public).
KNOWN_OP_CODES = frozenset(range(11))

# The default driver of each SQLAlchemy dialect, and of each named driver: the module to import and the package
# that provides it.
_DRIVERS = {
    "postgresql": ("psycopg2", "psycopg2-binary"),
    "postgresql+psycopg2": ("psycopg2", "psycopg2-binary"),
    "postgresql+psycopg": ("psycopg", "psycopg[binary]"),
    "postgresql+pg8000": ("pg8000", "pg8000"),
    "postgresql+asyncpg": ("asyncpg", "asyncpg"),
    "mysql": ("MySQLdb", "mysqlclient"),
    "mysql+mysqldb": ("MySQLdb", "mysqlclient"),
    "mysql+pymysql": ("pymysql", "pymysql"),
    "mysql+mysqlconnector": ("mysql.connector", "mysql-connector-python"),
    "mariadb": ("MySQLdb", "mysqlclient"),
    "mssql": ("pyodbc", "pyodbc"),
    "mssql+pyodbc": ("pyodbc", "pyodbc"),
    "mssql+pymssql": ("pymssql", "pymssql"),
    "oracle": ("cx_Oracle", "cx_Oracle"),
    "oracle+cx_oracle": ("cx_Oracle", "cx_Oracle"),
    "oracle+oracledb": ("oracledb", "oracledb"),
    "sqlite": ("sqlite3", "a Python built with sqlite3"),
    "sqlite+pysqlite": ("sqlite3", "a Python built with sqlite3"),
}
_TAIL_CHUNK = 1 << 16


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``, for messages."""
    return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", url)


def _installed(module: str) -> bool:
    """Whether ``module`` imports (a driver that is present but broken counts as missing)."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return False
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def check_url(url: str) -> None:
    """Raise one sentence when ``url`` cannot be an Optuna RDB storage here: its scheme is unknown, the
    database driver it names is not installed, or an SQLite file would go into a folder that does not exist.

    >>> check_url("postgresql://tuner@db/autotune")  # doctest: +SKIP
    AutotuneError: postgresql://tuner@db/autotune: psycopg2 is not installed: pip install psycopg2-binary
    """
    shown = redact(url)
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme:
        raise AutotuneError(f"{shown} is not a storage URL; pass a journal file path or e.g. sqlite:///runs/gemm.db")
    if scheme.lower() == "postgres":  # what Heroku and others print; SQLAlchemy knows only "postgresql"
        raise AutotuneError(f"{shown}: SQLAlchemy spells this scheme postgresql://, not postgres://")
    if scheme.lower() not in _DRIVERS:
        known = ", ".join(sorted({s.split("+")[0] for s in _DRIVERS}))
        raise AutotuneError(
            f"{shown}: unknown storage scheme {scheme!r}; use a journal file path or a URL of {known} "
            "(e.g. sqlite:///runs/gemm.db)"
        )
    if not _installed("sqlalchemy"):
        raise AutotuneError(f"{shown}: sqlalchemy is not installed: pip install sqlalchemy")
    module, package = _DRIVERS[scheme.lower()]
    if not _installed(module):
        raise AutotuneError(f"{shown}: {module} is not installed: pip install {package}")
    if scheme.lower().startswith("sqlite"):
        _check_sqlite_path(shown, rest)


def _check_sqlite_path(shown: str, rest: str) -> None:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite://`` (in memory)."""
    if not rest:
        return
    if not rest.startswith("/"):
        raise AutotuneError(f"{shown}: an SQLite URL has three slashes before a relative path (sqlite:///runs/x.db)")
    path = Path(rest[1:].split("?", 1)[0])
    if not str(path) or str(path) == ":memory:":
        return
    if path.is_dir():
        raise AutotuneError(f"{shown}: {path} is a directory, not an SQLite file")
    folder = path.parent
    if not folder.is_dir():
        raise AutotuneError(f"{shown}: the folder {folder} does not exist; create it or choose another path")
    if not os.access(folder, os.W_OK) and not path.exists():
        raise AutotuneError(f"{shown}: the folder {folder} is not writable")


def set_aside_torn_tail(path: Path, now: dt.datetime | None = None) -> str | None:
    """Cut a torn trailing record off a journal and keep it in ``<journal>.torn-<UTC time>``.

    A record is torn when the file does not end with a newline, or when its last line is not a JSON object
    (a write cut inside a multi-byte character, garbage appended). Returns one line saying what was set aside,
    or None when the journal ends with a whole record. The caller holds the journal's lock.
    """
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as f:
        cut = _last_whole_record_end(f, size)
        if cut == size:
            return None
        f.seek(cut)
        fragment = f.read()
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    side = path.with_name(f"{path.name}.torn-{stamp}")
    n = 1
    while side.exists():
        side, n = path.with_name(f"{path.name}.torn-{stamp}-{n}"), n + 1
    side.write_bytes(fragment)  # kept before the journal is cut: nothing is lost if we are killed in between
    with open(path, "r+b") as f:
        f.truncate(cut)
    return (
        f"{path}: its last record is cut short or unreadable ({len(fragment)} bytes); set aside in {side.name}, "
        "the study resumes from the record before it"
    )


def _last_whole_record_end(f: object, size: int) -> int:
    """Byte offset just past the last newline-terminated line that is a JSON object (0 if none)."""
    end = size
    for _ in range(2):  # the unterminated fragment, if any, then the last terminated line
        start = _line_start(f, end)
        f.seek(start)  # type: ignore[attr-defined]
        line = f.read(end - start)  # type: ignore[attr-defined]
        if end == size and not line.endswith(b"\n"):
            end = start  # a fragment with no newline: cut it, then look at the line before
            continue
        return end if _is_record(line) else start
    return end


def _line_start(f: object, end: int) -> int:
    """Offset of the first byte of the line that ends at ``end`` (``end`` itself excluded from the search)."""
    pos = end - 1  # skip the line's own newline
    while pos > 0:
        lo = max(0, pos - _TAIL_CHUNK)
        f.seek(lo)  # type: ignore[attr-defined]
        chunk = f.read(pos - lo)  # type: ignore[attr-defined]
        i = chunk.rfind(b"\n")
        if i >= 0:
            return lo + i + 1
        pos = lo
    return 0


def _is_record(line: bytes) -> bool:
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False
    return isinstance(record, dict) and "op_code" in record


def first_bad_line(path: Path) -> tuple[int, str] | None:
    """The first line (1-based) that is not a journal record Optuna knows, and what is wrong with it."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            problem = _line_problem(line)
            if problem:
                return number, problem
    return None


def _line_problem(line: bytes) -> str | None:
    if not line.endswith(b"\n"):
        return "it is cut short"
    try:
        record = json.loads(line)
    except UnicodeDecodeError:
        return "it is not UTF-8 text"
    except ValueError as exc:
        return f"it is not JSON ({exc.args[0].split(':')[0]})"
    if not isinstance(record, dict):
        return f"it is a JSON {type(record).__name__}, not a journal record"
    op = record.get("op_code")
    if not isinstance(op, int) or isinstance(op, bool):
        return "it has no op_code"
    if op not in KNOWN_OP_CODES:
        return f"op code {op} is unknown to this Optuna (written by a newer version, or edited)"
    return None
