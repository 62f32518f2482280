"""Opening an Optuna RDB storage (PostgreSQL, MySQL, SQLite) for workers that share it.

Heartbeats are on: a trial of a worker that died is failed after a grace period and its configuration enqueued
again (:func:`autotune.studies.shared_study.retry`). ``postgresql://`` gets the driver that is installed, and
workers that open an empty database together all get its tables.
"""

from __future__ import annotations

import random
import time
import warnings
from typing import Any

from ..core.errors import AutotuneError

HEARTBEAT_S = 5  # a worker records a heartbeat for each trial it holds this often
GRACE_S = 20  # a trial whose last heartbeat is older than this is failed and its configuration retried
SCHEMA_ATTEMPTS = 5  # tries to open a database whose tables other workers are creating at the same moment


def rdb_storage(url: str, heartbeat_s: int = HEARTBEAT_S, grace_s: int = GRACE_S) -> Any:
    """An Optuna RDB storage for ``url`` with heartbeats: a trial of a killed worker is failed after
    ``grace_s`` seconds and its configuration enqueued again (the heartbeat callback: ``shared_study.retry``)."""
    import inspect

    import optuna

    from .shared_study import retry

    url = with_driver(url)
    params = inspect.signature(optuna.storages.RDBStorage).parameters
    callback_arg = (
        "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params else "failed_trial_callback"
    )
    # Optuna warns at every ask() that heartbeats are meant for optimize(); the workers record them themselves.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
    kwargs = {"heartbeat_interval": heartbeat_s, "grace_period": grace_s, callback_arg: retry}
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **kwargs)
        except ImportError as exc:  # the database driver
            raise AutotuneError(
                f"storage {url.split('://')[0]}:// needs a database driver that is not installed ({exc}); "
                "for PostgreSQL: pip install psycopg2-binary (or psycopg[binary])"
            ) from None
        except Exception as exc:  # sqlalchemy's errors: no server, wrong database, or a race to create the tables
            if not type(exc).__module__.startswith("sqlalchemy"):
                raise
            import sqlalchemy.exc

            # Workers that start together on an empty database all create Optuna's tables: the losers retry.
            if isinstance(exc, (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError)):
                if attempt + 1 < SCHEMA_ATTEMPTS:
                    time.sleep(0.2 + random.random())
                    continue
            first = str(exc).strip().splitlines()[0][:200]
            raise AutotuneError(f"cannot open the storage {_redact(url)}: {first}") from None
    raise AssertionError("unreachable")


def with_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed: SQLAlchemy 2.1 means psycopg 3 by it, 2.0 psycopg2."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgresql", "postgres"):
        return url
    for module, dialect in (("psycopg2", "postgresql+psycopg2"), ("psycopg", "postgresql+psycopg")):
        if importlib.util.find_spec(module) is not None:
            return f"{dialect}{sep}{rest}"
    return url


def _redact(url: str) -> str:
    """The URL without its password."""
    scheme, _, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    return f"{scheme}://{creds.split(':')[0]}:***@{host}" if at and ":" in creds else url
