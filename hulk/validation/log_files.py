"""Reading the raw latency logs for validation: day partitions as batches, each file's log
columns in schemas.LOGS types, and an `InputError` naming the file, column and line for a file
that cannot be read (missing or mistyped column, an empty value where only ``elapsed_ms`` may be
empty, not UTF-8, not Parquet or CSV)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hulk import schemas
from hulk.errors import InputError
from hulk.parquet_columns import LOG_RULES, checked_schema
from hulk.validation._common import encoding_error, plural

NULLABLE = {"elapsed_ms"}  # the only log column that may be empty


@dataclass(frozen=True)
class LogBatch:
    label: str  # "day=2026-11-20" or the file name
    day: dt.date | None
    files: tuple[Path, ...]
    # How findings and the quarantine name the files: from the log folder's parent (the data
    # folder: "logs/day=…/probes.parquet"), so that they read the same wherever the folder is.
    names: tuple[str, ...] = ()

    def file_names(self) -> tuple[str, ...]:
        return self.names or tuple(str(path) for path in self.files)


def _shown(path: Path, logs_dir: Path) -> str:
    """`path` from the parent of `logs_dir` (as given when it lies elsewhere)."""
    try:
        return path.resolve().relative_to(logs_dir.resolve().parent).as_posix()
    except ValueError:
        return str(path)


def log_batches(logs_dir: Path) -> tuple[list[LogBatch], str]:
    """The log files grouped into batches (one per day partition, else one per file)."""
    from hulk.ingest import discover_logs

    try:
        log_set = discover_logs(Path(logs_dir))
    except InputError as exc:
        if exc.rule == "logs.no_files" and Path(logs_dir).is_dir():
            return [], "parquet"  # an empty folder: reported as an empty window
        raise
    logs_dir = Path(logs_dir)
    by_day: dict[dt.date, list[Path]] = defaultdict(list)
    loose: list[LogBatch] = []
    for log_file in log_set.files:
        path = log_file.path
        if log_file.day is None:
            loose.append(LogBatch(path.name, None, (path,), (_shown(path, logs_dir),)))
        else:
            by_day[log_file.day].append(path)
    days = []
    for day in sorted(by_day):
        files = tuple(sorted(by_day[day]))
        shown = tuple(_shown(path, logs_dir) for path in files)
        days.append(LogBatch(f"day={day.isoformat()}", day, files, shown))
    return days + loose, log_set.format


# What each log column becomes once read (naive timestamps are taken as UTC).
_ARROW_TYPES: dict[str, pa.DataType] = {
    "ts": pa.timestamp("us", tz="UTC"),
    "src": pa.int64(),
    "dst": pa.int64(),
    "msg_bytes": pa.int64(),
    "elapsed_ms": pa.float64(),
    "status": pa.string(),
}


def _read_parquet(path: Path) -> pa.Table:
    """The log columns of one Parquet file in schemas.LOGS types (naive ts is taken as UTC)."""
    checked_schema(path, LOG_RULES, "logs")
    try:
        table = pq.read_table(path, columns=list(schemas.LOGS))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(path, "logs.readable", f"not a readable Parquet file: {exc}") from None
    columns = []
    for column, target in _ARROW_TYPES.items():
        expected = LOG_RULES[column][0]
        data = table.column(column)
        if column not in NULLABLE and data.null_count:
            raise InputError(
                path,
                "logs.schema",
                f"column {column!r} has {plural(data.null_count, 'empty value')}; "
                "only elapsed_ms may be empty",
            )
        try:
            columns.append(data.cast(target, safe=column != "ts"))
        except pa.ArrowInvalid as exc:
            raise InputError(
                path, "logs.schema", f"column {column!r} must be {expected}: {exc}"
            ) from None
    return pa.table(columns, names=list(schemas.LOGS))


def _read_csv(path: Path) -> pa.Table:
    """The log columns of one CSV file; values that do not parse name the column and line."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except UnicodeDecodeError:
        raise encoding_error(path, "logs.encoding") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(path, "logs.readable", f"cannot parse the CSV file: {exc}") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    out: dict[str, object] = {}
    for column, target in _ARROW_TYPES.items():
        expected = LOG_RULES[column][0]
        if column not in raw.columns:
            raise InputError(
                path,
                "logs.schema",
                f"column {column!r} is missing from the header "
                f"(log columns: {', '.join(schemas.LOGS)})",
            )
        text = raw[column].str.strip()
        empty = text == ""
        if column == "status":
            values = text
            bad = empty
        elif column == "ts":
            values = pd.to_datetime(text.where(~empty), utc=True, format="ISO8601", errors="coerce")
            bad = values.isna()
        else:
            values = pd.to_numeric(text.where(~empty), errors="coerce")
            bad = values.isna() & ~(empty & (column in NULLABLE))
            if target == pa.int64():
                bad |= values.notna() & (values != np.round(values))
        if bad.any():
            rows = raw.index[bad.to_numpy()]
            raise InputError(
                path,
                "logs.schema",
                f"column {column!r} must be {expected}"
                + (" or empty" if column in NULLABLE else "")
                + f" on every row: {plural(len(rows), 'bad value')}",
                [f"line {i + 2}: {column}={raw.at[i, column]!r}" for i in rows[:5]],
            )
        if column == "ts":
            out[column] = pa.array(values.dt.as_unit("us"), type=target)
        elif column == "status":
            out[column] = pa.array(values.to_numpy(dtype=object), type=target)
        else:
            out[column] = pa.array(values.to_numpy(dtype="float64"), from_pandas=True).cast(target)
    return pa.table(out)


def read_batch(batch: LogBatch, fmt: str) -> tuple[pd.DataFrame, np.ndarray]:
    """One batch's rows (schemas.LOGS, RangeIndex) and the first row of each file in it."""
    read = _read_parquet if fmt == "parquet" else _read_csv
    tables = [read(path) for path in batch.files]
    offsets = np.cumsum([0] + [t.num_rows for t in tables])[:-1]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    frame = table.to_pandas()
    # Categorical: GX filters the whole frame once per expectation, and taking rows of an
    # Arrow-backed string column costs more than all the other columns together.
    frame["status"] = frame["status"].astype("category")
    return frame, offsets
