"""Reading an aliased model version of a local sqlite registry without MLflow.

`hulk assign` loads the champion every 15 minutes, and MLflow costs it about 2 s of CPU before
the first byte is read (importing mlflow, then its store checks the database schema). On the
default backend, a sqlite file in the data folder whose artifacts are local files, the few rows
needed — the alias, the version's source, run, location and tags, and the run's latest metrics —
are read here, read-only, straight from MLflow's tables, and the files from the version's folder.

Anything else returns None and the caller asks MLflow: another backend, a location that is not a
local folder, tables or columns this MLflow schema does not have, or more than one row where one
is expected. The rows read are those `MlflowClient.get_registered_model(...).aliases`,
`get_model_version` and `get_run(...).data.metrics` return (tests/model/test_registry.py compares
both ways on the same registry).
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class LocalVersion:
    """An aliased version's rows and the local folder holding its files."""

    version: int
    run_id: str | None
    source: str | None
    folder: Path
    tags: dict[str, str]
    metrics: dict[str, float]


class NoAlias(Exception):
    """The registry holds no version with the alias (or no such registered model)."""


class RegistryDamaged(Exception):
    """The registry file is not a readable sqlite database (overwritten, truncated): MLflow
    would fail on it with a traceback."""


class RegistryBusy(Exception):
    """Another process holds the registry database past the wait (a nightly registering a
    model): MLflow would wait on the same lock, minutes, before it failed."""


BUSY_TIMEOUT_S = 30.0  # how long a read waits for another process's write


def read_alias(db_path: Path, name: str, alias: str) -> LocalVersion | None:
    """The version `alias` of registered model `name` points at, from the sqlite file `db_path`.

    Raises `NoAlias` when the registry has no such alias, `RegistryBusy` when another process
    holds the database past `BUSY_TIMEOUT_S`, `RegistryDamaged` when the file is not a sqlite
    database; returns None when MLflow must answer instead (see the module docstring).
    """
    if not db_path.is_file():
        return None
    try:
        db = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error:
        return None
    with contextlib.closing(db):
        try:
            return _read(db, name, alias)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise RegistryBusy(f"{db_path}: {exc}") from None
            return None  # not MLflow's tables, or another schema: MLflow knows
        except sqlite3.DatabaseError as exc:
            if type(exc) is sqlite3.DatabaseError:  # "file is not a database", "malformed"
                raise RegistryDamaged(str(exc)) from None
            return None
        except sqlite3.Error:
            return None


def _read(db: sqlite3.Connection, name: str, alias: str) -> LocalVersion | None:
    versions = db.execute(
        "SELECT version FROM registered_model_aliases WHERE name = ? AND alias = ?", (name, alias)
    ).fetchall()
    if not versions:
        raise NoAlias(alias)
    if len(versions) > 1:
        return None
    version = int(versions[0][0])
    rows = db.execute(
        "SELECT source, run_id, storage_location, status FROM model_versions "
        "WHERE name = ? AND version = ?",
        (name, version),
    ).fetchall()
    if len(rows) != 1:
        return None
    source, run_id, location, status = rows[0]
    folder = _local_folder(location)
    if folder is None or status != "READY":
        return None
    tags = dict(
        db.execute(
            "SELECT key, value FROM model_version_tags WHERE name = ? AND version = ?",
            (name, version),
        ).fetchall()
    )
    metrics: dict[str, float] = {}
    if run_id:
        for key, value, is_nan in db.execute(
            "SELECT key, value, is_nan FROM latest_metrics WHERE run_uuid = ?", (run_id,)
        ):
            metrics[key] = math.nan if is_nan else float(value)
    return LocalVersion(version, run_id or None, source, folder, tags, metrics)


def _local_folder(location: str | None) -> Path | None:
    """The folder of a ``file://`` location, or None for any other kind."""
    if not location:
        return None
    parsed = urlparse(location)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    folder = Path(unquote(parsed.path))
    return folder if folder.is_dir() else None
