"""A data folder's MLflow registry stays with the folder when the folder is copied or moved.

MLflow keeps absolute artifact locations in its database: the experiments' folder
(``file:///…/data/mlartifacts``), every run's ``artifact_uri`` and every model version's
``source`` and ``storage_location``. A relative ``artifact_location`` is no way out: MLflow makes
it absolute against the current directory when the experiment is created. So a copy of a data
folder would load the champion from the original folder, and training on the copy would write
into the original's artifacts.

`repoint_artifacts` re-points them. When the database lives inside the data folder (a relative
sqlite path) and the artifact folder is inside it too (a relative ``mlflow.artifact_location``),
the locations that end in that relative folder but name another data folder (the one the
database was copied or moved from) are rewritten to the folder in use, in one transaction, before
MLflow opens the database. Absolute locations configured in params.yaml, and anything else MLflow
stores, are left as they are.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

# (table, column) holding artifact locations; tables or columns MLflow does not have are skipped.
_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
    ("logged_models", "artifact_location"),
)


def _old_roots(db: sqlite3.Connection, relative: PurePosixPath, new_root: str) -> set[str]:
    """Experiment folders that are `relative` inside another data folder than `new_root`'s."""
    roots = set()
    for (location,) in db.execute("SELECT artifact_location FROM experiments"):
        if not isinstance(location, str) or not location.startswith("file://"):
            continue
        path = PurePosixPath(unquote(urlparse(location).path))
        tail = path.parts[len(path.parts) - len(relative.parts) :]
        if tail == relative.parts and location.rstrip("/") != new_root:
            roots.add(location.rstrip("/"))
    return roots


def repoint_artifacts(db_path: Path, data_dir: Path, relative: Path) -> int:
    """Re-point the artifact locations of the sqlite registry `db_path`, inside `data_dir`, at
    the artifact folder `relative` inside `data_dir` when they name another data folder.

    Returns the number of rows changed (0 when the database is new, in place, not MLflow's, not
    inside the data folder, or cannot be written: MLflow then reports what it cannot do).
    """
    data_dir = data_dir.absolute()
    if relative.is_absolute() or not db_path.is_file() or not db_path.is_relative_to(data_dir):
        return 0
    new_root = (data_dir / relative).as_uri().rstrip("/")
    with contextlib.closing(sqlite3.connect(db_path, timeout=30)) as db:
        try:
            if not _old_roots(db, PurePosixPath(relative.as_posix()), new_root):
                return 0  # the common case: a read, no write
            db.execute("BEGIN IMMEDIATE")  # re-read under the write lock: another run may be first
            roots = _old_roots(db, PurePosixPath(relative.as_posix()), new_root)
            changed = 0
            for table, column in _COLUMNS:
                columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if column not in columns:
                    continue
                for old in roots:
                    cursor = db.execute(
                        f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                        f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                        (new_root, len(old) + 1, old, len(old) + 1, old + "/"),
                    )
                    changed += cursor.rowcount
            db.commit()
        except sqlite3.Error:  # no MLflow tables yet, not a database, read-only: MLflow reports it
            with contextlib.suppress(sqlite3.Error):
                db.rollback()
            return 0
    return changed
