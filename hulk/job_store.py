"""The state of every job, kept in the data folder: ``DATA/jobs/jobs.db`` (SQLite).

A job's life: ``submitted`` (known, not yet scheduled) → ``queued`` (waiting) → ``running``
(machines, stages, since when) → ``finished`` or ``cancelled``. A running job whose machines
failed goes back to ``queued`` until the next run restarts it. Every change is one SQLite
transaction, so the store is never half-written, and is logged in the ``events`` table (the
job's history: `JobStore.events`).

A waiting job carries the estimated start and finish the last scheduling run gave it
(``scheduled_start``, ``scheduled_finish``; None when unknown): `hulk jobs list` reads them here,
without scheduling again. Every scheduling run writes them for every waiting job, in the run's
transaction; a job whose spec changes, and any job that stops waiting, has none.

Progress is counted, not measured: a running job has done ``done_iterations`` when its current
placement started computing (``computing_since``), plus the time since over its estimated
seconds per iteration, never more than the job's length. Users who know better say so
(`JobStore.report_progress`); a job whose estimated iterations are done (`JobState.done_by`) has
done its length, and is finished by the next assign run at the moment they were done
(`JobStore.finish_done`).

The jobs file stays the list of upcoming jobs: `JobStore.sync_file` submits the jobs it lists
that the store does not know, updates waiting ones whose spec changed, and withdraws (cancels)
waiting jobs that came from the file and are no longer in it; a withdrawn job the file lists
again is back in line (its first submission time kept), so one run on another jobs file loses
nothing for good. A waiting or withdrawn job whose spec the file changes keeps its progress and
checkpoint record while its sizes stay (`hulk.jobs.job_sizes`: a change of priority, length,
submission time or deadline); new sizes are a different model, which starts from iteration 0,
and its event says so. A running job of the file takes a new length, priority, submission
time or deadline at once (machines and progress kept; a length it has already done finishes
it), while other sizes are refused (``jobs.running_resized``: another model would throw the
run's progress away); a waiting job whose progress already covers a new, shorter length is
finished (`JobStore.finish_done`). Finished jobs are never changed by the file. A name the
file shares with a different job submitted by `hulk jobs submit`, or with a finished or
cancelled job of another spec, is an error (``jobs.name_taken``): one name, one job.

Every row is read back as `put` wrote it, its spec validated as a jobs file's entry: a row that
cannot be read is a `DamagedRow` (``jobs_db.readable``) naming the job and the column, never
skipped (a job in an unknown state may hold machines). Reads take only the rows they need, so a
damaged finished row stops only what reads it; `JobStore.cancel` removes a damaged row, its
history kept.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from hulk.errors import InputError
from hulk.jobs import (
    MAX_ITERATIONS,
    NOT_SIZES,
    Job,
    format_time,
    job_sizes,
    job_to_dict,
    later,
    parse_jobs,
    utc_time,
)

SUBMITTED, QUEUED, RUNNING, FINISHED, CANCELLED = (
    "submitted",
    "queued",
    "running",
    "finished",
    "cancelled",
)
STATES = (SUBMITTED, QUEUED, RUNNING, FINISHED, CANCELLED)
WAITING = (SUBMITTED, QUEUED)
DONE = (FINISHED, CANCELLED)
FROM_FILE, FROM_CLI = "jobs-file", "cli"
WITHDRAWN = "removed from the jobs file"  # the reason of a job the file no longer lists
# PRAGMA user_version. 1: the first store; 2: a waiting job's estimated start and finish;
# 3: the scheduling runs (`runs`).
_FORMAT = 3
RUNS_KEPT = 1_000  # the newest scheduling runs the store remembers
BUSY_TIMEOUT_S = 60.0  # how long a command waits for another process's write to the store

# The tables as format 1 made them; a new store gets them, then the columns added since.
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    reason TEXT,
    nodes TEXT,
    layout TEXT,
    replicas TEXT,
    iteration_s REAL,
    started_at TEXT,
    computing_since TEXT,
    done_iterations REAL NOT NULL DEFAULT 0,
    moves INTEGER NOT NULL DEFAULT 0,
    finished_at TEXT
)""",
    """
CREATE TABLE IF NOT EXISTS plans (
    key TEXT PRIMARY KEY,
    plan TEXT NOT NULL,
    used_at TEXT NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    job TEXT NOT NULL,
    event TEXT NOT NULL,
    detail TEXT
)""",
    # Format 3. A scheduling run: when, and the newest event when it ended.
    """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    last_event INTEGER NOT NULL
)""",
)
# Columns later formats added to the jobs table: a store of an earlier format gets them (NULL in
# every row) when this Hulk first opens it, a new store when it is created.
_ADDED_COLUMNS = (
    ("scheduled_start", "TEXT"),  # format 2
    ("scheduled_finish", "TEXT"),  # format 2
)


@dataclass(frozen=True)
class JobState:
    """One row of the store."""

    job: Job
    source: str
    state: str
    submitted_at: dt.datetime
    updated_at: dt.datetime
    reason: str | None = None
    nodes: tuple[int, ...] = ()  # node ids while running
    layout: str | None = None
    replicas: list[dict[str, Any]] | None = None  # the placements file's replica records
    iteration_s: float | None = None
    started_at: dt.datetime | None = None  # first start
    computing_since: dt.datetime | None = None  # current placement computes from then
    done_iterations: float = 0.0  # done at computing_since
    moves: int = 0
    finished_at: dt.datetime | None = None
    # A waiting job: when the last scheduling run expected it to start and finish (None:
    # unknown). The store keeps them for waiting jobs only (`JobStore.put`).
    scheduled_start: dt.datetime | None = None
    scheduled_finish: dt.datetime | None = None

    def progress(self, now: dt.datetime) -> float:
        """Iterations done by `now` (estimated from the plan's seconds per iteration), never
        more than the job's length: a running job `done_by` `now` has done them all."""
        if self.state != RUNNING or self.computing_since is None or not self.iteration_s:
            return self._at_most_length(self.done_iterations)
        if self.done_by(now):
            return self._at_most_length(math.inf)
        seconds = max(0.0, (now - self.computing_since).total_seconds())
        return self._at_most_length(self.done_iterations + seconds / self.iteration_s)

    def _at_most_length(self, iterations: float) -> float:
        length = self.job.iterations
        return iterations if length is None else min(iterations, float(length))

    def done_by(self, now: dt.datetime) -> bool:
        """Whether a running job's estimated iterations are all done by `now` (its estimated
        finish has come): the next assign run finishes it then (`JobStore.finish_done`)."""
        end = self.estimated_finish() if self.state == RUNNING else None
        return end is not None and end <= now

    def remaining(self, now: dt.datetime) -> float | None:
        """Iterations left at `now`; None for a job without a length."""
        if self.job.iterations is None:
            return None
        return max(0.0, self.job.iterations - self.progress(now))

    def estimated_finish(self) -> dt.datetime | None:
        """When a running job's iterations are done (None without a length or a plan); a
        waiting job's finish as the last scheduling run estimated it (None: unknown)."""
        if self.state in WAITING:
            return self.scheduled_finish
        if (
            self.state != RUNNING
            or self.job.iterations is None
            or self.computing_since is None
            or not self.iteration_s
        ):
            return None
        left = max(0.0, self.job.iterations - self.done_iterations) * self.iteration_s
        return later(self.computing_since, left)

    def to_dict(self, now: dt.datetime | None = None) -> dict[str, Any]:
        """The row as JSON-ready values (`hulk jobs list --json`)."""
        record: dict[str, Any] = {
            "job": self.job.name,
            "state": self.state,
            "source": self.source,
            "submitted_at": format_time(self.submitted_at),
            "updated_at": format_time(self.updated_at),
            "reason": self.reason,
            "nodes": list(self.nodes) if self.state == RUNNING else [],  # only while it runs
            "iterations": self.job.iterations,
            "done_iterations": (
                round(self.progress(now), 1) if now else self._at_most_length(self.done_iterations)
            ),
            "iteration_s": self.iteration_s,
            "started_at": _fmt(self.started_at),
            "finished_at": _fmt(self.finished_at),
            "estimated_start": _fmt(self.scheduled_start) if self.state in WAITING else None,
            "estimated_finish": _fmt(self.estimated_finish()),
            "deadline": _fmt(self.job.deadline),
            "moves": self.moves,
        }
        return record


def _fmt(moment: dt.datetime | None) -> str | None:
    return format_time(moment) if moment is not None else None


class DamagedRow(InputError):
    """A row of the store that cannot be read (rule ``jobs_db.readable``): its job, column and
    what is wrong, and the way out (`JobStore.cancel` removes the row)."""

    def __init__(self, path: str | Path, job: object, column: str, problem: str) -> None:
        self.job = job
        self.column = column
        self.problem = problem
        if isinstance(job, str) and job:
            way_out = (
                f"Hulk reads no job while it is there: `hulk jobs cancel {job}` removes the row "
                "(its machines return to the pool, its history stays; a jobs file that still "
                "lists the job submits it anew), or restore jobs.db from a backup"
            )
        else:
            way_out = "restore jobs.db from a backup"
        detail = f"job {job!r}, column {column!r}: {problem}; {way_out}"
        InputError.__init__(self, path, "jobs_db.readable", detail)

    def __reduce__(self) -> tuple:
        return (type(self), (self.path, self.job, self.column, self.problem))


class _Damaged(Exception):
    """A column of a row that cannot be read (`JobStore._row` names its job)."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(column, problem)
        self.column = column
        self.problem = problem


def _unknown_state(state: object) -> str:
    return f"{state!r} is not a state of a job ({', '.join(STATES)}); it may hold machines"


def _time(row: dict[str, Any], column: str) -> dt.datetime | None:
    """A time column: None or ISO 8601 text."""
    return None if row[column] is None else _required_time(row, column)


def _required_time(row: dict[str, Any], column: str) -> dt.datetime:
    """A time column that is never NULL: ISO 8601 text."""
    text = row[column]
    try:
        value = utc_time(text) if isinstance(text, str) else text
    except (ValueError, OverflowError):
        value = text
    if not isinstance(value, dt.datetime):
        raise _Damaged(column, f"not an ISO 8601 time: {text!r}")
    return value


def _number(row: dict[str, Any], column: str) -> float:
    """A number column: finite and ≥ 0."""
    value = row[column]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Damaged(column, f"not a number: {value!r}")
    if not math.isfinite(value) or value < 0:
        raise _Damaged(column, f"not a finite number ≥ 0: {value!r}")
    return float(value)


def _json(row: dict[str, Any], column: str, kind: type) -> Any:
    """A JSON column holding a `kind` (list or dict), or None."""
    text = row[column]
    if text is None:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError as exc:
        raise _Damaged(column, f"not JSON ({exc}): {text!r:.80}") from None
    if not isinstance(value, kind):
        raise _Damaged(column, f"not a JSON {kind.__name__}: {text!r:.80}")
    return value


def _spec(row: dict[str, Any], path: Path) -> Job:
    """The job of a row: its spec, a jobs-file entry, validated as the jobs file is."""
    spec = _json(row, "spec", dict)
    if spec is None:
        raise _Damaged("spec", "empty")
    try:
        job = parse_jobs({"jobs": [spec]}, source=path)[0]
    except InputError as exc:
        raise _Damaged("spec", f"[{exc.rule}] {exc.detail}") from None
    if job.name != row["name"]:
        raise _Damaged("spec", f"the spec of job {job.name!r}")
    return job


@lru_cache(maxsize=1)
def _columns() -> dict[str, set[str]]:
    """The columns of each table of a store of this format."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in _SCHEMA:
            db.execute(statement)
        for column, kind in _ADDED_COLUMNS:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            table: {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            for table in tables
            if not table.startswith("sqlite_")
        }
    finally:
        db.close()


class JobStore:
    """The SQLite job store at `path` (created on first use; with ``create=False`` a store that
    does not exist reads as empty, and nothing is written to disk). Use as a context manager or
    call `close`; every method commits its own transaction."""

    def __init__(self, path: str | Path, create: bool = True) -> None:
        self.path = Path(path)
        self._depth = 0  # open transactions (`transaction` nests as savepoints)
        target: str | Path = self.path
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            target = ":memory:"  # no store yet: no job, and none made by reading
        try:
            self.db = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            version = self._version()
            if version != _FORMAT:
                self._upgrade(version)
            else:
                self._check_tables()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise _busy_or(exc, self.path) from None
        except InputError:
            self.close()
            raise

    def _version(self) -> int:
        """The store's format (0: a new, empty file); `InputError` for one a newer Hulk wrote."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > _FORMAT:
            raise InputError(
                self.path,
                "jobs_db.format",
                f"format {version}, written by a newer Hulk; this Hulk reads formats up to "
                f"{_FORMAT}: use a Hulk as new as the one that wrote it",
            )
        return version

    def _upgrade(self, version: int) -> None:
        """Create a new store's tables, or bring an earlier format's up to this one (adding the
        columns `_ADDED_COLUMNS` lists), in one transaction: a store is never half-migrated.
        The format is read again once the transaction holds the write lock, so that two
        processes opening an old store at once migrate it once."""
        try:
            with self.transaction():
                if self._version() == _FORMAT:
                    return
                for statement in _SCHEMA:
                    self.db.execute(statement)
                have = {row[1] for row in self.db.execute("PRAGMA table_info(jobs)")}
                for column, kind in _ADDED_COLUMNS:
                    if column not in have:
                        self.db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
                self._check_tables()  # a file whose tables are not a store's stays as it was
                self.db.execute(f"PRAGMA user_version = {_FORMAT}")
        except sqlite3.DatabaseError as exc:
            what = "create it" if version == 0 else f"bring it from format {version} to {_FORMAT}"
            raise InputError(self.path, "jobs_db.upgrade", f"cannot {what}: {exc}") from None

    def _check_tables(self) -> None:
        """`InputError` (``jobs_db.readable``) naming a table that lacks a column of the store."""
        for table, want in _columns().items():
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            missing = sorted(want - have)
            if missing:
                what = f"no table {table!r}" if not have else f"table {table!r} lacks {missing}"
                raise InputError(self.path, "jobs_db.readable", f"not a job store: {what}")

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """SQLite's own errors while reading (a damaged file) as ``jobs_db.readable``."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, "jobs_db.readable", f"cannot read it: {exc}") from None

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        self.close()
        refused = None if exc is None else _write_refused(exc, self.path)
        if refused is not None:
            raise refused from None

    def close(self) -> None:
        if hasattr(self, "db"):
            self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All changes inside land together or not at all. Nested, the inner block is a
        savepoint of the outer: an assign run's changes commit as one before its placements
        are renamed into place, and none of them when it fails."""
        savepoint = f"hulk_{self._depth + 1}"
        try:
            self.db.execute("BEGIN IMMEDIATE" if self._depth == 0 else f"SAVEPOINT {savepoint}")
        except sqlite3.OperationalError as exc:
            raise _busy_or(exc, self.path) from None
        self._depth += 1
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK" if self._depth == 1 else f"ROLLBACK TO {savepoint}")
            if self._depth > 1:
                self.db.execute(f"RELEASE {savepoint}")
            raise
        finally:
            self._depth -= 1
        self.db.execute("COMMIT" if self._depth == 0 else f"RELEASE {savepoint}")

    # -- reading --

    def jobs(self, states: Sequence[str] | None = None) -> list[JobState]:
        """Jobs in submission order (then name), optionally only those in `states`.
        `DamagedRow` for a row of those that cannot be read, and for a row of any state Hulk
        does not know (it may hold machines: nothing is scheduled without it)."""
        query, args = "SELECT * FROM jobs", tuple[str, ...]()
        if states is not None:
            query += f" WHERE state IN ({', '.join('?' for _ in states)})"
            args = tuple(states)
        with self._reading():
            marks = ", ".join("?" for _ in STATES)
            unknown = self.db.execute(
                f"SELECT name, state FROM jobs WHERE state IS NULL OR state NOT IN ({marks}) "
                "ORDER BY name LIMIT 1",
                STATES,
            ).fetchone()
            if unknown is not None:
                raise DamagedRow(self.path, unknown[0], "state", _unknown_state(unknown[1]))
            cursor = self.db.execute(query + " ORDER BY submitted_at, name", args)
            columns = [c[0] for c in cursor.description]
            rows = cursor.fetchall()
        return [self._row(dict(zip(columns, row, strict=True))) for row in rows]

    def get(self, name: str) -> JobState | None:
        """The job `name`, None when the store holds none; `DamagedRow` when its row cannot be
        read."""
        with self._reading():
            cursor = self.db.execute("SELECT * FROM jobs WHERE name = ?", (name,))
            columns = [c[0] for c in cursor.description]
            row = cursor.fetchone()
        return None if row is None else self._row(dict(zip(columns, row, strict=True)))

    def _states(self, names: Sequence[str]) -> dict[str, str]:
        """The state column of the jobs `names` the store holds, without reading their rows."""
        found: dict[str, str] = {}
        with self._reading():
            for start in range(0, len(names), 500):
                chunk = list(names[start : start + 500])
                marks = ", ".join("?" for _ in chunk)
                query = f"SELECT name, state FROM jobs WHERE name IN ({marks})"
                found.update(dict(self.db.execute(query, chunk).fetchall()))
        return found

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The history: every change, oldest first (of one job when `name` is given: one the
        store holds, or held until its damaged row was removed)."""
        query = "SELECT at, job, event, detail FROM events"
        args: tuple[str, ...] = ()
        if name is not None:
            query, args = query + " WHERE job = ?", (name,)
        with self._reading():
            # By time: a run records a job finished by its estimate at the moment it was done,
            # before the run's own changes (ISO 8601 UTC text sorts as time); then as written.
            rows = self.db.execute(query + " ORDER BY at, id", args).fetchall()
            if name is not None and not rows and not self._states([name]):
                raise InputError(self.path, "jobs.unknown_job", f"no job named {name!r}")
        return [{"at": a, "job": j, "event": e, "detail": d} for a, j, e, d in rows]

    def _row(self, row: dict[str, Any]) -> JobState:
        """One row as a `JobState`; `DamagedRow` naming its job and the column that cannot be
        read (the store holds only what `put` wrote: anything else is damage)."""
        try:
            if not isinstance(row["name"], str) or not row["name"]:
                raise _Damaged("name", f"not a job name: {row['name']!r}")
            if row["state"] not in STATES:
                raise _Damaged("state", _unknown_state(row["state"]))
            if row["source"] not in (FROM_FILE, FROM_CLI):
                raise _Damaged("source", f"{row['source']!r} is not {FROM_FILE} or {FROM_CLI}")
            for column in ("reason", "layout"):
                if row[column] is not None and not isinstance(row[column], str):
                    raise _Damaged(column, f"not text: {row[column]!r}")
            nodes = _json(row, "nodes", list) or []
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in nodes):
                raise _Damaged("nodes", f"not a list of machine ids: {row['nodes']!r:.80}")
            replicas = _json(row, "replicas", list)
            if replicas is not None and not all(isinstance(r, dict) for r in replicas):
                raise _Damaged("replicas", f"not a list of replicas: {row['replicas']!r:.80}")
            moves = row["moves"]
            if isinstance(moves, bool) or not isinstance(moves, int) or moves < 0:
                raise _Damaged("moves", f"not a count: {moves!r}")
            return JobState(
                job=_spec(row, self.path),
                source=row["source"],
                state=row["state"],
                submitted_at=_required_time(row, "submitted_at"),
                updated_at=_required_time(row, "updated_at"),
                reason=row["reason"],
                nodes=tuple(nodes),
                layout=row["layout"],
                replicas=replicas,
                iteration_s=None if row["iteration_s"] is None else _number(row, "iteration_s"),
                started_at=_time(row, "started_at"),
                computing_since=_time(row, "computing_since"),
                done_iterations=_number(row, "done_iterations"),
                moves=moves,
                finished_at=_time(row, "finished_at"),
                scheduled_start=_time(row, "scheduled_start"),
                scheduled_finish=_time(row, "scheduled_finish"),
            )
        except _Damaged as exc:
            raise DamagedRow(self.path, row["name"], exc.column, exc.problem) from None

    # -- writing --

    def put(self, state: JobState, event: str | None, detail: str | None = None) -> None:
        """Insert or replace one job's row and log `event` unless None (inside a transaction
        or alone). The estimated start and finish are kept for a waiting job only: a job that
        starts, finishes or is cancelled drops them."""
        waiting = state.state in WAITING
        values = {
            "name": state.job.name,
            "spec": json.dumps(job_to_dict(state.job), sort_keys=True),
            "source": state.source,
            "state": state.state,
            "submitted_at": format_time(state.submitted_at),
            "updated_at": format_time(state.updated_at),
            "reason": state.reason,
            "nodes": json.dumps(list(state.nodes)) if state.nodes else None,
            "layout": state.layout,
            "replicas": json.dumps(state.replicas) if state.replicas is not None else None,
            "iteration_s": state.iteration_s,
            "started_at": _fmt(state.started_at),
            "computing_since": _fmt(state.computing_since),
            "done_iterations": state.done_iterations,
            "moves": state.moves,
            "finished_at": _fmt(state.finished_at),
            "scheduled_start": _fmt(state.scheduled_start) if waiting else None,
            "scheduled_finish": _fmt(state.scheduled_finish) if waiting else None,
        }
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        insert = f"INSERT OR REPLACE INTO jobs ({names}) VALUES ({marks})"
        self.db.execute(insert, tuple(values.values()))
        if event is None:
            return
        self.db.execute(
            "INSERT INTO events (at, job, event, detail) VALUES (?, ?, ?, ?)",
            (format_time(state.updated_at), state.job.name, event, detail),
        )

    # -- the planner's memory: runs every 15 minutes ask it the same questions --

    def cached_plans(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Plans remembered under `keys` (see `remember_plans`)."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ", ".join("?" for _ in chunk)
            with self._reading():
                query = f"SELECT key, plan FROM plans WHERE key IN ({marks})"
                rows = self.db.execute(query, chunk).fetchall()
            for key, plan in rows:
                try:
                    value = json.loads(plan)
                except (TypeError, ValueError):
                    continue
                if isinstance(value, dict):  # else damaged: planned again
                    found[key] = value
        return found

    def remember_plans(
        self, plans: dict[str, dict[str, Any]], now: dt.datetime, keep: int = 20_000
    ) -> None:
        """Remember plans by content key (fleet, planner settings, job, machines); the `keep`
        most recently used stay."""
        stamp = format_time(now)
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO plans (key, plan, used_at) VALUES (?, ?, ?)",
                [(key, json.dumps(plan), stamp) for key, plan in plans.items()],
            )
            self.db.execute(
                "DELETE FROM plans WHERE key NOT IN "
                "(SELECT key FROM plans ORDER BY used_at DESC, key LIMIT ?)",
                (keep,),
            )

    def submit(
        self,
        jobs: Sequence[Job],
        now: dt.datetime,
        source: str = FROM_CLI,
        file: Path | None = None,
    ) -> list[str]:
        """Submit new jobs; returns the names of those it added. A job's ``submitted_at``
        defaults to `now`. A job the store already holds with the same spec, still waiting or
        running, is left as it is (submitting again is no error: a retried command changes
        nothing). `InputError` (``jobs.name_taken``) naming `file`, the jobs file they came
        from, for any other name the store holds: its state, and the keys that differ."""
        known = self._states([job.name for job in jobs])
        taken: list[str] = []
        again: set[str] = set()
        for job in jobs:
            if job.name not in known:
                continue
            have = self.get(job.name)
            changed = [] if have is None else _changed(have.job, job)
            if have is not None and not changed and have.state in (*WAITING, RUNNING):
                again.add(job.name)
                continue
            differ = f"; another spec: {', '.join(changed)} differ" if changed else ""
            taken.append(f"{job.name} ({known[job.name]}{differ})")
        if taken:
            raise InputError(
                file or self.path,
                "jobs.name_taken",
                f"job name(s) already in the store {self.path}: {'; '.join(taken)}; use a new name",
            )
        added = [job for job in jobs if job.name not in again]
        with self.transaction():
            for job in added:
                self.put(_new_state(job, source, now), "submitted", f"from {source}")
        return [job.name for job in added]

    def sync_file(
        self, jobs: Sequence[Job], now: dt.datetime, source: str | Path | None = None
    ) -> dict[str, list[str]]:
        """Bring the store in line with the jobs file `source` (module docstring); what
        changed. `InputError` (``jobs.name_taken``) when the file gives another spec under the
        name of a job the CLI submitted, still waiting or running, or of a finished or
        cancelled job (`_name_taken`); a job the file lists as it finished stays finished.
        A running job of the file takes a new length, priority or times at once, keeping its
        machines and progress; other sizes are refused (``jobs.running_resized``).
        Reads the store's waiting and running jobs and those the file names: a finished job's
        row matters only while the file lists it."""
        known = {j.job.name: j for j in self.jobs([*WAITING, RUNNING])}
        for job in jobs:
            if job.name not in known and (have := self.get(job.name)) is not None:
                known[job.name] = have
        listed = {job.name for job in jobs}
        for rule, refuses in (
            ("jobs.name_taken", _name_taken),
            ("jobs.running_resized", _resized_while_running),
        ):
            problems = [
                problem
                for job in jobs
                if (have := known.get(job.name)) is not None
                and (problem := refuses(have, job)) is not None
            ]
            if problems:
                raise InputError(source, rule, "; ".join(problems))
        changes: dict[str, list[str]] = {
            "submitted": [],
            "updated": [],
            "withdrawn": [],
            "resubmitted": [],
        }
        with self.transaction():
            for job in jobs:
                have = known.get(job.name)
                if have is None:
                    self.put(_new_state(job, FROM_FILE, now), "submitted", "from the jobs file")
                    changes["submitted"].append(job.name)
                elif have.state == CANCELLED and have.reason == WITHDRAWN:
                    state, how = _respecified(have, job, now, self._first_seen(have))
                    state = replace(state, state=SUBMITTED, reason=None, finished_at=None)
                    self.put(state, "resubmitted", f"listed in the jobs file again{how}")
                    changes["resubmitted"].append(job.name)
                elif have.state in (*WAITING, RUNNING) and job_to_dict(have.job) != job_to_dict(
                    job
                ):
                    # A running job takes the new length, priority, times (its sizes are the
                    # same: `_resized_while_running`) and keeps its machines and progress.
                    state, how = _respecified(have, job, now, self._first_seen(have))
                    if have.state == RUNNING:
                        fields = ", ".join(_changed(have.job, job))
                        how = f" ({fields}); it runs on, its machines and progress kept"
                    self.put(state, "updated", f"spec changed in the jobs file{how}")
                    changes["updated"].append(job.name)
            for name, have in known.items():
                if have.source == FROM_FILE and have.state in WAITING and name not in listed:
                    state = replace(have, state=CANCELLED, updated_at=now, reason=WITHDRAWN)
                    self.put(state, "cancelled", WITHDRAWN)
                    changes["withdrawn"].append(name)
        return changes

    def _first_seen(self, have: JobState) -> dt.datetime:
        """When the store first recorded a job: its first event (its ``submitted_at`` for a job
        whose history is gone)."""
        row = self.db.execute(
            "SELECT at FROM events WHERE job = ? ORDER BY id LIMIT 1", (have.job.name,)
        ).fetchone()
        try:
            seen = utc_time(row[0]) if row is not None else None
        except (ValueError, OverflowError):
            seen = None
        return seen if isinstance(seen, dt.datetime) else have.submitted_at

    def _change(self, name: str, allowed: Sequence[str], verb: str) -> JobState:
        have = self.get(name)
        if have is None:
            raise InputError(self.path, "jobs.unknown_job", f"no job named {name!r}")
        if have.state not in allowed:
            raise InputError(
                self.path,
                "jobs.wrong_state",
                f"cannot {verb} {name!r}: it is {have.state} (only {'/'.join(allowed)} jobs)",
            )
        return have

    def cancel(self, name: str, now: dt.datetime) -> JobState | None:
        """Cancel a waiting or running job; its machines return to the pool. A job whose row
        cannot be read (`DamagedRow`), whatever its state, is removed from the store instead,
        its history kept and told why: None."""
        try:
            have = self._change(name, (SUBMITTED, QUEUED, RUNNING), "cancel")
        except DamagedRow as exc:
            if exc.job != name:
                raise
            with self.transaction():
                self.db.execute("DELETE FROM jobs WHERE name = ?", (name,))
                detail = (
                    f"by the user; its row could not be read (column {exc.column!r}: "
                    f"{exc.problem}) and was removed from the store"
                )
                self.db.execute(
                    "INSERT INTO events (at, job, event, detail) VALUES (?, ?, 'cancelled', ?)",
                    (format_time(now), name, detail),
                )
            return None
        state = replace(
            have,
            state=CANCELLED,
            updated_at=now,
            finished_at=now,
            done_iterations=have.progress(now),  # what it did before it was cancelled
            reason="cancelled",
        )
        with self.transaction():
            self.put(state, "cancelled", "by the user")
        return state

    def finish(self, name: str, now: dt.datetime, reason: str = "marked finished") -> JobState:
        """Mark a running job finished now; its machines return to the pool."""
        have = self._change(name, (RUNNING,), "finish")
        state = replace(
            have,
            state=FINISHED,
            updated_at=now,
            finished_at=now,
            done_iterations=have.progress(now),
            reason=reason,
        )
        with self.transaction():
            self.put(state, "finished", reason)
        return state

    def report_progress(self, name: str, done: float, now: dt.datetime) -> JobState:
        """A running job has done `done` iterations at `now` (estimates restart from there)."""
        have = self._change(name, (RUNNING,), "report progress of")
        length = have.job.iterations
        most = MAX_ITERATIONS if length is None else length
        if not math.isfinite(done) or done < 0 or done > most:
            whose = "its" if length is not None else "any job's"
            bound = f" and at most {whose} {most:,} iterations"
            raise InputError(
                self.path,
                "jobs.bad_progress",
                f"{name}: iterations done {done:g}; give a number ≥ 0{bound}",
            )
        state = replace(have, updated_at=now, computing_since=now, done_iterations=float(done))
        with self.transaction():
            self.put(state, "progress", f"{done:g} iterations done")
        return state

    def finished_since_last_run(self) -> list[str]:
        """The jobs finished (by `finish`, or by a run's estimate) since the last scheduling
        run `record_run` recorded, oldest first; none before the first."""
        last = self.db.execute("SELECT last_event FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        if last is None:
            return []
        rows = self.db.execute(
            "SELECT job FROM events WHERE event = 'finished' AND id > ? ORDER BY at, id",
            (last[0],),
        ).fetchall()
        return list(dict.fromkeys(row[0] for row in rows))

    def last_run(self) -> dt.datetime | None:
        """When the newest scheduling run `record_run` recorded scheduled; None before the
        first (or for a time the store cannot read)."""
        row = self.db.execute("SELECT at FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        try:
            moment = utc_time(row[0]) if row is not None else None
        except (ValueError, OverflowError):
            return None
        return moment if isinstance(moment, dt.datetime) else None

    def record_run(self, now: dt.datetime) -> None:
        """Record a scheduling run at `now`, after its changes (the `RUNS_KEPT` newest stay)."""
        with self.transaction():
            newest = self.db.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
            self.db.execute(
                "INSERT INTO runs (at, last_event) VALUES (?, ?)", (format_time(now), newest)
            )
            self.db.execute(
                "DELETE FROM runs WHERE id <= (SELECT MAX(id) FROM runs) - ?", (RUNS_KEPT,)
            )

    def finish_done(self, now: dt.datetime) -> list[str]:
        """Finish the running jobs whose estimated iterations are done by `now` (at the moment
        they were done), and the waiting ones whose progress already covers their length (a
        stopped job whose length was shortened since: at `now`); their names."""
        done = []
        with self.transaction():
            for have in self.jobs(list(WAITING)):
                length = have.job.iterations
                if length is not None and have.done_iterations >= length:
                    state = replace(
                        have,
                        state=FINISHED,
                        updated_at=now,
                        finished_at=now,
                        done_iterations=float(length),
                        scheduled_start=None,
                        scheduled_finish=None,
                        reason="length reached",
                    )
                    self.put(state, "finished", f"its {length:,} iterations were already done")
                    done.append(have.job.name)
            for have in self.jobs([RUNNING]):
                end = have.estimated_finish()
                if end is not None and have.done_by(now):
                    state = replace(
                        have,
                        state=FINISHED,
                        updated_at=end,
                        finished_at=end,
                        done_iterations=have.progress(end),  # its length
                        reason="estimated iterations done",
                    )
                    self.put(state, "finished", "estimated iterations done")
                    done.append(have.job.name)
        return done


def _name_taken(have: JobState, job: Job) -> str | None:
    """Why the jobs file's `job` cannot have the name of the store's `have`, or None: one name,
    one job. The same spec is the same job (a finished one stays finished); another spec may
    not take the name of a job submitted with `hulk jobs submit` that still waits or runs, nor
    of a finished or cancelled job (a withdrawn one is back in line instead)."""
    if job_to_dict(have.job) == job_to_dict(job):
        return None
    if have.source != FROM_FILE and have.state not in DONE:
        return (
            f"{job.name}: the job store holds a {have.state} job of that name with another "
            f"spec ({', '.join(_changed(have.job, job))}), submitted with `hulk jobs submit`; "
            "rename the file's job, or cancel the other"
        )
    if have.state == FINISHED or (have.state == CANCELLED and have.reason != WITHDRAWN):
        return (
            f"{job.name}: the job store holds a {have.state} job of that name with another "
            f"spec ({', '.join(_changed(have.job, job))}), and a {have.state} job is never run "
            "again; give the file's job a new name"
        )
    return None


def _write_refused(exc: BaseException, path: Path) -> InputError | None:
    """The error for a write SQLite refused as "attempt to write a readonly database", naming
    what refused it: the store's file system is read-only (``io.read_only``), or this user may
    not write the store or its folder, where SQLite keeps its journal (``io.permission_denied``).
    None for any other error. SQLite's own text says "readonly" for all three."""
    if not (isinstance(exc, sqlite3.OperationalError) and "readonly database" in str(exc)):
        return None
    try:
        read_only = bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        reason = "the file system is read-only"
        where = path
    elif path.exists() and not os.access(path, os.W_OK):
        reason = "permission denied (the file is not writable)"
        where = path
    else:
        reason = "permission denied (its folder, where SQLite writes its journal, is not writable)"
        where = path.parent
    rule = "io.read_only" if read_only else "io.permission_denied"
    return InputError(where, rule, f"cannot write the job store: {reason}; nothing was changed")


def _busy_or(exc: sqlite3.DatabaseError, path: Path) -> InputError:
    """The error for a store SQLite refused: held by another process (``jobs_db.busy``: try
    again), a write the storage refuses (`_write_refused`), or not a job store
    (``jobs_db.readable``)."""
    refused = _write_refused(exc, path)
    if refused is not None:
        return refused
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return InputError(
            path,
            "jobs_db.busy",
            f"another process holds the job store ({exc}) past the wait: nothing was changed; "
            "run again once it is done",
        )
    return InputError(path, "jobs_db.readable", f"not a job store: {exc}")


def _resized_while_running(have: JobState, job: Job) -> str | None:
    """Why the jobs file may not give a running job of the file other sizes, or None: that is
    another model, and taking it would throw away the run's progress on one edit."""
    if have.state != RUNNING or have.source != FROM_FILE:
        return None
    if job_sizes(have.job) == job_sizes(job):
        return None
    changed = [key for key in _changed(have.job, job) if key not in NOT_SIZES]
    return (
        f"{job.name}: it is running, and the file gives it other sizes ({', '.join(changed)}), "
        "a different model; put the sizes back, or cancel the job (`hulk jobs cancel`) and "
        "list the new model under a new name"
    )


def _changed(before: Job, after: Job) -> list[str]:
    """The jobs-file keys whose values differ between two specs of a job."""
    old, new = job_to_dict(before), job_to_dict(after)
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def _respecified(
    have: JobState, job: Job, now: dt.datetime, first_seen: dt.datetime
) -> tuple[JobState, str]:
    """A waiting or withdrawn job as the jobs file now gives it, and how its spec changed (for
    its event). Its progress, checkpoint record (``replicas``), first start and moves stay when
    its sizes do (`job_sizes`: a change of name, priority, length, submission time or
    deadline); other sizes are a different model, which starts from iteration 0. Either way
    the estimates of the last scheduling run go: no run has scheduled it as it is now. A
    ``submitted_at`` the file no longer gives falls back to the default, `first_seen` (when
    the store first recorded the job)."""
    unknown: dict[str, Any] = {"scheduled_start": None, "scheduled_finish": None}
    before, after = job_to_dict(have.job), job_to_dict(job)
    if before == after:
        return replace(have, updated_at=now, **unknown), ""
    fields = ", ".join(_changed(have.job, job))
    submitted = job.submitted_at or (first_seen if have.job.submitted_at else have.submitted_at)
    progress = f"its progress ({have.done_iterations:,.0f} iterations) and checkpoint"
    ran = have.done_iterations > 0 or have.replicas is not None or have.started_at is not None
    if job_sizes(have.job) == job_sizes(job):
        kept = replace(have, job=job, updated_at=now, submitted_at=submitted, **unknown)
        return kept, f" ({fields}){f'; {progress} kept' if ran else ''}"
    fresh = replace(_new_state(job, have.source, now), state=have.state, submitted_at=submitted)
    lost = f", so {progress} do not carry over: it starts from iteration 0" if ran else ""
    return fresh, f" ({fields}): other sizes, a different model{lost}"


def _new_state(job: Job, source: str, now: dt.datetime) -> JobState:
    return JobState(
        job=job,
        source=source,
        state=SUBMITTED,
        submitted_at=job.submitted_at or now,
        updated_at=now,
    )
