"""Link statistics over the rolling window, computed by DuckDB straight from the raw logs.

The raw latency logs (docs/contracts.md#latency-logs) are Parquet files partitioned by day
(`logs/day=YYYY-MM-DD/*.parquet`), or a folder of CSV files with the same columns. `link_stats`
reduces the probes of the rolling window to one row per unordered machine pair (schemas.LINKS):

- the window is the closed interval [window_end − window_days, window_end]; `window_end` defaults
  to the midnight after the latest `day=` partition (or to the latest `ts` when the files are not
  partitioned, e.g. CSV). Partitions outside the window are never opened, and the `ts` bounds are
  pushed into the Parquet scan (row groups outside the window are skipped);
- both directions of a pair are pooled; self-probes (src == dst) and probes involving a machine
  absent from the inventory are ignored (validation reports them); probes listed in the
  quarantine (matched on schemas.LOG_KEY) are removed by an anti-join, except that one copy of
  a probe quarantined as an exact repeat (`logs.duplicate`) is kept, the copy validation kept;
- a probe *succeeded* when its status is `ok` and its elapsed time is a finite number; any other
  probe counts as lost;
- `samples` counts the latency probes (`latency_probe_bytes`, 64 bytes) attempted, `loss_rate` is
  the share of them lost, p50/p95 are exact (`quantile_cont`, linear interpolation) and the mean is
  taken over the successful latency probes;
- α and β come from a robust fit: the median elapsed time per message size, then a least-squares
  line through those (size, median) points. α is its intercept (ms), β = 8e-6 / slope (Gbit/s;
  null when the slope is not positive or fewer than two sizes succeeded). With a single size
  (latency probes only) there is no line and α falls back to the latency median;
- a pair with no successful latency probe in the window has no row.

The output is byte-for-byte reproducible: rows sorted by (src, dst), fixed dtypes, and no
floating-point sum whose rounding depends on how DuckDB's threads split the work (the mean sums
exact decimals, the fit aggregates in a fixed order).

`hulk.ingest_reference` computes the same table with pandas, twice (the plain whole-window way,
and streaming one file at a time); all three agree to 1e-9.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from hulk import schemas
from hulk.errors import InputError
from hulk.parquet_columns import LOG_RULES, checked_schema
from hulk.settings import IngestSettings

LOG_COLUMNS: tuple[str, ...] = tuple(schemas.LOGS)
LogFormat = Literal["parquet", "csv"]
TsKind = Literal["utc", "naive"]

_DAY_DIR = re.compile(r"^day=(.*)$")
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
# Sums of elapsed times are taken over exact decimals (10 digits after the point, far below any
# clock's resolution) so the mean does not depend on the order DuckDB's threads add rows in.
# (A plain double sum saves about 10% of the query's CPU time but its last bits change with the
# thread split; a fixed-point BIGINT sum of elapsed × 2^34 saves about 5% but needs a guard
# against elapsed times beyond 2^29 ms, and the guard costs as much as it saves.)
_EXACT_SUM_TYPE = "DECIMAL(38, 10)"
# Column types a CSV file is read with (ts without an offset is read as UTC).
_CSV_TYPES = {
    "ts": "TIMESTAMPTZ",
    "src": "BIGINT",
    "dst": "BIGINT",
    "msg_bytes": "BIGINT",
    "elapsed_ms": "DOUBLE",
    "status": "VARCHAR",
}


# --------------------------------------------------------------------------------------------
# Finding the files and the window (shared with hulk.ingest_reference)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogFile:
    """One log file and the day of the `day=YYYY-MM-DD` folder holding it (None: unpartitioned)."""

    path: Path
    day: dt.date | None


@dataclass(frozen=True)
class LogSet:
    """Every log file under a folder, all of one format."""

    root: Path
    format: LogFormat
    files: tuple[LogFile, ...]

    @property
    def partitioned(self) -> bool:
        """True when every file sits in a `day=` partition."""
        return all(f.day is not None for f in self.files)


@dataclass(frozen=True)
class Window:
    """The closed interval [start, end] of probe timestamps a link table summarises (UTC)."""

    start: pd.Timestamp
    end: pd.Timestamp

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()}]"


def _hidden(part: str) -> bool:
    return part.startswith((".", "_"))


def _day_of(path: Path, root: Path) -> dt.date | None:
    """The date of the innermost `day=` folder between root and the file, if any."""
    day: dt.date | None = None
    parts = path.relative_to(root).parts[:-1]
    for depth, part in enumerate(parts, start=1):
        match = _DAY_DIR.match(part)
        if match is None:
            continue
        try:
            if not _ISO_DAY.fullmatch(match.group(1)):
                raise ValueError(match.group(1))
            day = dt.date.fromisoformat(match.group(1))
        except ValueError:
            raise InputError(
                root.joinpath(*parts[:depth]),
                "partition-name",
                f"partition folder {part!r} is not day=YYYY-MM-DD",
            ) from None
    return day


def discover_logs(logs: Path) -> LogSet:
    """List the log files under `logs`: Parquet files, or else CSV files (never both).

    Hidden files and folders (leading `.` or `_`, e.g. half-written temporaries) are skipped.
    """
    logs = Path(logs)
    if not logs.is_dir():
        raise InputError(logs, "logs.no_files", "the log folder does not exist or is not a folder")

    def find(suffix: str) -> list[Path]:
        found = (p for p in logs.rglob(f"*{suffix}") if p.is_file())
        visible = (p for p in found if not any(_hidden(s) for s in p.relative_to(logs).parts))
        return sorted(visible)

    parquet, csv_files = find(".parquet"), find(".csv")
    if parquet and csv_files:
        raise InputError(
            logs,
            "mixed-formats",
            f"the folder holds both Parquet ({len(parquet)}) and CSV ({len(csv_files)}) files; "
            "keep one format per log folder",
            [csv_files[0], parquet[0]],
        )
    if not parquet and not csv_files:
        raise InputError(
            logs, "logs.no_files", "no *.parquet or *.csv log files anywhere under the folder"
        )
    fmt: LogFormat = "parquet" if parquet else "csv"
    files = tuple(LogFile(p, _day_of(p, logs)) for p in (parquet or csv_files))
    outside = [f.path for f in files if f.day is None]
    if outside and len(outside) < len(files):
        # A stray copy beside the partitions: read, it would count its probes twice and move
        # the window to the wall clock.
        raise InputError(
            logs,
            "mixed-layout",
            f"{len(outside)} log file(s) lie outside the day=YYYY-MM-DD partitions the others "
            "are in; keep every file in its day's partition (or none in partitions)",
            outside[:5],
        )
    return LogSet(root=logs, format=fmt, files=files)


def utc_timestamp(value: dt.datetime | pd.Timestamp | str) -> pd.Timestamp:
    """A timestamp in UTC at microsecond resolution; a naive value is taken to be UTC."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.as_unit("us")


def partition_window_end(
    log_set: LogSet, now: dt.datetime | pd.Timestamp | None = None
) -> pd.Timestamp | None:
    """Midnight after the latest `day=` partition, or None when some file is unpartitioned.

    With `now`, partitions whose day starts after `now` are left out (a collector with a clock
    ahead must not decide the window); None when every partition is in the future.
    """
    if not log_set.partitioned:
        return None
    days = [f.day for f in log_set.files if f.day is not None]
    if now is not None:
        today = utc_timestamp(now).date()
        days = [d for d in days if d <= today]
    if not days:
        return None
    latest = max(days)
    return utc_timestamp(dt.datetime.combine(latest + dt.timedelta(days=1), dt.time()))


def window_end_for(logs: Path, now: dt.datetime) -> pd.Timestamp:
    """The window end a nightly run uses: midnight after the latest day partition that is not
    in the future, never later than `now` (a partition dated after today does not move the
    window: its rows are quarantined as logs.future_timestamp); for unpartitioned files the
    latest probe not after `now`, as the partitions' end follows their data. `now` when every
    partition is in the future, or when no file can be read (validation names it)."""
    now_ts = utc_timestamp(now)
    log_set = discover_logs(Path(logs))
    end = partition_window_end(log_set, now_ts)
    if end is None and not log_set.partitioned:
        try:
            end = latest_probe(log_set, now_ts)
        except InputError:
            end = None
    return now_ts if end is None else min(end, now_ts)


def latest_probe(log_set: LogSet, now: pd.Timestamp) -> pd.Timestamp | None:
    """The latest probe time not after `now` over every file of `log_set` (None: none)."""
    files = [f.path for f in log_set.files]
    check_columns(log_set, files)
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_progress_bar = false")
        table = _run(
            con,
            f"SELECT epoch_us(max(ts::TIMESTAMPTZ)) AS us FROM {_scan_sql(log_set.format)} "
            "WHERE ts::TIMESTAMPTZ <= $now::TIMESTAMPTZ",
            {"files": [str(p) for p in files], "now": utc_timestamp(now).isoformat()},
            log_set,
            files,
        )
    finally:
        con.close()
    micros = table.column("us")[0].as_py()
    return None if micros is None else pd.Timestamp(micros, unit="us", tz="UTC")


def make_window(end: pd.Timestamp, settings: IngestSettings) -> Window:
    """The rolling window of `settings.window_days` days ending at `end`."""
    end = utc_timestamp(end)
    return Window(start=end - pd.Timedelta(days=settings.window_days), end=end)


def files_in_window(log_set: LogSet, window: Window) -> list[Path]:
    """The files that can hold a probe of the window: partition pruning by day.

    A `day=D` partition holds the probes of [D, D + 1 day); unpartitioned files are always kept
    (their rows are filtered by `ts`).
    """
    first, last = window.start.date(), window.end.date()
    return [f.path for f in log_set.files if f.day is None or first <= f.day <= last]


def empty_window_error(log_set: LogSet, window: Window, detail: str) -> InputError:
    """The error for a window that leaves nothing to summarise."""
    return InputError(log_set.root, "empty-window", f"window {window}: {detail}")


# --------------------------------------------------------------------------------------------
# Column checks
# --------------------------------------------------------------------------------------------


def check_parquet_columns(paths: Sequence[Path]) -> TsKind:
    """Check every file has the log columns with usable types (reads only the footers).

    Returns "naive" when every file stores `ts` without a time zone (taken to be UTC), else
    "utc": DuckDB reads files of both kinds as instants, a naive one in the session's time zone,
    UTC (collectors upgraded mid-window write both).
    """
    kinds: set[TsKind] = set()
    for path in paths:
        schema = checked_schema(path, LOG_RULES, "logs")
        kinds.add("naive" if schema.field("ts").type.tz is None else "utc")
    return "naive" if kinds == {"naive"} else "utc"


def check_csv_columns(paths: Sequence[Path]) -> None:
    """Check every CSV file's header names all log columns (types are checked while reading)."""
    for path in paths:
        with open(path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
        names = set(header)
        missing = [column for column in LOG_COLUMNS if column not in names]
        if missing:
            raise InputError(
                path,
                "logs.schema",
                f"column {missing[0]!r} is missing from the header "
                f"(log columns: {', '.join(LOG_COLUMNS)})",
            )


def check_columns(log_set: LogSet, paths: Sequence[Path]) -> TsKind:
    """Check the columns of the given files of a log set; returns the kind of `ts`."""
    if log_set.format == "parquet":
        return check_parquet_columns(paths)
    check_csv_columns(paths)
    return "utc"


def inventory_ids(inventory: pd.DataFrame) -> np.ndarray:
    """The inventory's machine ids as sorted int64."""
    if "node_id" not in inventory.columns:
        raise InputError(None, "inventory", "the inventory has no 'node_id' column")
    ids = pd.to_numeric(inventory["node_id"], errors="coerce").dropna()
    return np.unique(ids.to_numpy(dtype="int64"))


DUPLICATE_RULE = "logs.duplicate"


def _typed_keys(keys: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": pd.to_datetime(keys["ts"], utc=True).dt.as_unit("us"),
            "src": keys["src"].astype("int64"),
            "dst": keys["dst"].astype("int64"),
            "msg_bytes": keys["msg_bytes"].astype("int64"),
        }
    ).reset_index(drop=True)


def quarantine_keys(quarantine: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(keys to drop, keys to keep once) of a quarantine table, typed like schemas.LOGS.

    Rows quarantined as repeats of an earlier probe (rule `logs.duplicate`) name a key whose
    first copy validation kept: those keys are kept once rather than dropped. Every other
    quarantined key is dropped with all its copies. Naive timestamps are taken to be UTC.
    """
    if quarantine is None:
        nothing = _typed_keys(schemas.empty({k: schemas.LOGS[k] for k in schemas.LOG_KEY}))
        return nothing, nothing.copy()
    missing = [k for k in schemas.LOG_KEY if k not in quarantine.columns]
    if missing:
        raise InputError(
            None,
            "quarantine",
            f"the quarantine table lacks column {missing[0]!r} (key: {', '.join(schemas.LOG_KEY)})",
        )
    repeat = (
        (quarantine["rule"] == DUPLICATE_RULE).fillna(False).to_numpy(bool)
        if "rule" in quarantine.columns
        else np.zeros(len(quarantine), dtype=bool)
    )
    keys = quarantine[schemas.LOG_KEY]
    drop = _typed_keys(keys[~repeat].dropna().drop_duplicates())
    once = _typed_keys(keys[repeat].dropna().drop_duplicates())
    once = once.merge(drop, on=schemas.LOG_KEY, how="left", indicator=True)
    once = once.loc[once["_merge"] == "left_only", schemas.LOG_KEY].reset_index(drop=True)
    return drop, once


def finish(frame: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Stamp the window, then conform to schemas.LINKS, sorted by (src, dst)."""
    frame = frame.assign(window_start=window.start, window_end=window.end)
    out = schemas.conform(frame, schemas.LINKS)
    return out.sort_values(["src", "dst"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# DuckDB
# --------------------------------------------------------------------------------------------


def _connect(settings: IngestSettings, spill_dir: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(
        ":memory:",
        config={
            "threads": settings.threads,
            "memory_limit": settings.memory_limit,
            "temp_directory": spill_dir,
            "preserve_insertion_order": False,
        },
    )
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # a library call prints nothing, however slow
    return con


def _scan_sql(fmt: LogFormat) -> str:
    """The table function reading the file list `$files`."""
    if fmt == "parquet":
        return "read_parquet($files, hive_partitioning = false, union_by_name = true)"
    types = ", ".join(f"'{name}': '{kind}'" for name, kind in _CSV_TYPES.items())
    return f"read_csv($files, header = true, union_by_name = true, types = {{{types}}})"


def _run(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict, log_set: LogSet, files: list[Path]
) -> pa.Table:
    """Run a query over the log files; a CSV value of the wrong type becomes an InputError."""
    try:
        return con.sql(sql, params=params).to_arrow_table()
    except (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.IOException) as exc:
        if log_set.format == "csv" and not isinstance(exc, duckdb.IOException):
            raise _diagnose_csv(con, files, exc) from None
        raise InputError(log_set.root, "logs.readable", str(exc).splitlines()[0]) from None


def _diagnose_csv(con: duckdb.DuckDBPyConnection, files: list[Path], exc: Exception) -> InputError:
    """Find the file and column whose values DuckDB could not convert."""
    for path in files:
        checks = ", ".join(
            f'count(*) FILTER (WHERE "{c}" IS NOT NULL AND TRY_CAST("{c}" AS {t}) IS NULL), '
            f'any_value("{c}") FILTER (WHERE "{c}" IS NOT NULL AND TRY_CAST("{c}" AS {t}) '
            "IS NULL)"
            for c, t in _CSV_TYPES.items()
        )
        row = con.execute(
            f"SELECT {checks} FROM read_csv($file, header = true, all_varchar = true)",
            {"file": str(path)},
        ).fetchone()
        assert row is not None
        for i, (column, kind) in enumerate(_CSV_TYPES.items()):
            bad, example = row[2 * i], row[2 * i + 1]
            if bad:
                return InputError(
                    path,
                    "logs.schema",
                    f"column {column!r}: {bad} value(s) are not {kind}",
                    [repr(example)],
                )
    return InputError(files[0].parent, "logs.readable", str(exc).splitlines()[0])


def _max_ts(con: duckdb.DuckDBPyConnection, log_set: LogSet) -> pd.Timestamp:
    """The latest probe time over every file (cheap for Parquet: read from the statistics)."""
    files = [f.path for f in log_set.files]
    table = _run(
        con,
        f"SELECT epoch_us(max(ts)) AS us FROM {_scan_sql(log_set.format)}",
        {"files": [str(p) for p in files]},
        log_set,
        files,
    )
    micros = table.column("us")[0].as_py()
    if micros is None:
        raise InputError(log_set.root, "empty-window", "no log file holds a timestamp")
    return pd.Timestamp(micros, unit="us", tz="UTC")


_STATS_SQL = """
WITH probes AS NOT MATERIALIZED (
    SELECT ts::TIMESTAMPTZ AS ts, src, dst, msg_bytes, elapsed_ms::DOUBLE AS elapsed_ms, status
    FROM {scan}
    WHERE ts BETWEEN {lo} AND {hi} {pass_filter}
),
clean AS NOT MATERIALIZED (
    SELECT * FROM probes {anti_join} {dedupe}
),
attempted AS (
    -- Latency probes sent, per pair: counted per direction first (src and dst as read, so a
    -- small perfect-hash aggregate with no per-row least/greatest), then both directions added.
    SELECT least(src, dst) AS a, greatest(src, dst) AS b, sum(n)::BIGINT AS samples
    FROM (SELECT src, dst, count(*) AS n FROM clean WHERE msg_bytes = $probe GROUP BY src, dst)
    WHERE src <> dst
    GROUP BY a, b
),
per_size AS MATERIALIZED (
    -- Successful probes per pair and message size: the exact quantiles and an exact sum. A probe
    -- succeeded when its status is ok and its elapsed time finite (NULL fails both); written as
    -- plain conjuncts, the test is pushed into the Parquet scan (status checked on the
    -- dictionary) so the lost probes never reach the projection below. Not as a range
    -- (elapsed_ms < 'inf'): DuckDB drops a range filter the Parquet min/max statistics say
    -- always holds, and those statistics leave NaN out.
    SELECT least(src, dst) AS a, greatest(src, dst) AS b, msg_bytes,
           count(*) AS n_ok,
           quantile_cont(elapsed_ms, [0.5, 0.95]) AS q,
           sum(elapsed_ms::{exact}) AS total
    FROM clean
    WHERE src <> dst AND status = 'ok' AND isfinite(elapsed_ms)
    GROUP BY a, b, msg_bytes
),
fits AS (
    -- The line through each pair's (size, median) points, aggregated in a fixed order.
    SELECT a, b,
           count(msg_bytes) AS n_sizes,
           regr_slope(q[1], msg_bytes::DOUBLE ORDER BY msg_bytes) AS slope,
           regr_intercept(q[1], msg_bytes::DOUBLE ORDER BY msg_bytes) AS intercept
    FROM per_size
    GROUP BY a, b
)
SELECT lat.a AS src, lat.b AS dst, att.samples,
       (att.samples - lat.n_ok)::DOUBLE / att.samples AS loss_rate,
       lat.q[1] AS latency_p50_ms,
       lat.q[2] AS latency_p95_ms,
       lat.total::DOUBLE / lat.n_ok AS latency_mean_ms,
       CASE WHEN fit.n_sizes >= 2 THEN fit.intercept ELSE lat.q[1] END AS alpha_ms,
       CASE WHEN fit.n_sizes >= 2 AND fit.slope > 0 THEN 8e-6 / fit.slope END AS beta_gbps
FROM per_size AS lat
JOIN attempted AS att USING (a, b)
JOIN fits AS fit USING (a, b)
WHERE lat.msg_bytes = $probe
  AND lat.a IN (SELECT node_id FROM inventory)
  AND lat.b IN (SELECT node_id FROM inventory)
ORDER BY src, dst
"""

# One copy of each probe logged more than once. Validation lists such a key as logs.duplicate
# only when its copies are identical (conflicting copies are logs.duplicate_conflict, dropped
# whole with the quarantine), so any copy is the one it kept; the order is only deterministic.
_DEDUPE_SQL = """
    UNION ALL
    SELECT * FROM probes SEMI JOIN repeated USING (ts, src, dst, msg_bytes)
    QUALIFY row_number() OVER (
        PARTITION BY ts, src, dst, msg_bytes ORDER BY elapsed_ms NULLS LAST, status
    ) = 1
"""

_COUNT_SQL = """
WITH probes AS NOT MATERIALIZED (
    SELECT ts::TIMESTAMPTZ AS ts, src, dst, msg_bytes, elapsed_ms, status
    FROM {scan}
    WHERE ts BETWEEN {lo} AND {hi}
)
SELECT (SELECT count(*) FROM probes) AS n_window,
       (SELECT count(*) FROM (SELECT * FROM probes {anti_join} {dedupe})
        WHERE src <> dst
          AND src IN (SELECT node_id FROM inventory)
          AND dst IN (SELECT node_id FROM inventory)) AS n_fleet
"""


# Machine pairs of a sample of the logs (the newest partition, or every file unpartitioned).
_PAIRS_SQL = """
SELECT count(*) AS pairs FROM (SELECT DISTINCT least(src, dst), greatest(src, dst) FROM {scan})
"""


def _passes(
    con: duckdb.DuckDBPyConnection, log_set: LogSet, files: list[Path], settings: IngestSettings
) -> int:
    """How many passes over the pairs (split by the lower node id modulo the count) keep each
    pass within `max_pairs_per_pass`: one for every fleet but the largest."""
    sample = [max(files, key=str)] if log_set.partitioned else files
    table = _run(
        con,
        _PAIRS_SQL.format(scan=_scan_sql(log_set.format)),
        {"files": [str(p) for p in sample]},
        log_set,
        sample,
    )
    return max(1, math.ceil(table.column("pairs")[0].as_py() / settings.max_pairs_per_pass))


def _pass_filter(part: int, passes: int) -> str:
    """The probes of pass `part` of `passes`: pairs whose lower node id is `part` modulo
    `passes` (nothing to filter in a single pass)."""
    return "" if passes == 1 else f"AND least(src, dst) % {passes} = {part}"


def _bound_sql(name: str, ts_kind: TsKind) -> str:
    """A window bound parameter typed like the files' `ts`, so the filter reaches the scan."""
    return f"${name}::TIMESTAMPTZ" if ts_kind == "utc" else f"${name}::TIMESTAMP"


def link_stats(
    logs: Path,
    inventory: pd.DataFrame,
    settings: IngestSettings,
    quarantine: pd.DataFrame | None = None,
    window_end: dt.datetime | None = None,
) -> pd.DataFrame:
    """Summarise the probes of the rolling window into one row per unordered pair.

    Args:
        logs: the log folder (`day=YYYY-MM-DD/*.parquet` partitions, or CSV files).
        inventory: the machines (schemas.INVENTORY); only its `node_id` column is used.
        settings: window length, latency probe size, DuckDB threads and memory limit.
        quarantine: rows to exclude, matched on schemas.LOG_KEY (extra columns are ignored).
        window_end: end of the window (naive means UTC); defaults to the midnight after the
            latest partition, or the latest `ts` for unpartitioned files.

    Returns:
        A frame conforming to schemas.LINKS, sorted by (src, dst), src < dst.

    Raises:
        InputError: no log files, a missing or mistyped column, or nothing in the window.
    """
    log_set = discover_logs(Path(logs))
    ids = inventory_ids(inventory)
    with tempfile.TemporaryDirectory(prefix="hulk-duckdb-") as spill_dir:
        con = _connect(settings, spill_dir)
        try:
            end = window_end if window_end is not None else partition_window_end(log_set)
            if end is None:  # unpartitioned files: every one is read to find the latest probe
                check_columns(log_set, [f.path for f in log_set.files])
                end = _max_ts(con, log_set)
            window = make_window(end, settings)
            files = files_in_window(log_set, window)
            if not files:
                raise empty_window_error(log_set, window, "no day= partition falls in the window")
            ts_kind = check_columns(log_set, files)

            keys, once = quarantine_keys(quarantine)
            con.register("quarantine", keys)
            con.register("repeated", once)
            con.register("inventory", pd.DataFrame({"node_id": ids}))
            fmt = "%Y-%m-%d %H:%M:%S.%f" + ("+00:00" if ts_kind == "utc" else "")
            params = {
                "files": [str(p) for p in files],
                "lo": window.start.strftime(fmt),
                "hi": window.end.strftime(fmt),
            }
            parts = {
                "scan": _scan_sql(log_set.format),
                "lo": _bound_sql("lo", ts_kind),
                "hi": _bound_sql("hi", ts_kind),
                "anti_join": " ".join(
                    f"ANTI JOIN {name} USING (ts, src, dst, msg_bytes)"
                    for name, table in (("quarantine", keys), ("repeated", once))
                    if len(table)
                ),
                "dedupe": _DEDUPE_SQL if len(once) else "",
            }
            passes = _passes(con, log_set, files, settings)
            tables = [
                _run(
                    con,
                    _STATS_SQL.format(
                        exact=_EXACT_SUM_TYPE,
                        pass_filter=_pass_filter(part, passes),
                        **parts,
                    ),
                    {**params, "probe": settings.latency_probe_bytes},
                    log_set,
                    files,
                )
                for part in range(passes)
            ]
            table = pa.concat_tables(tables)
            if passes > 1:  # each pass is sorted; together they are sorted again
                table = table.sort_by([("src", "ascending"), ("dst", "ascending")])
            if table.num_rows == 0:
                counts = _run(con, _COUNT_SQL.format(**parts), params, log_set, files)
                n_window, n_fleet = (counts.column(c)[0].as_py() for c in counts.column_names)
                if n_window == 0:
                    raise empty_window_error(log_set, window, "no probe falls in the window")
                if n_fleet == 0:
                    raise empty_window_error(
                        log_set,
                        window,
                        f"none of the {n_window} probes in the window is left once quarantined "
                        "rows and probes involving machines outside the inventory are removed",
                    )
        finally:
            con.close()
    return finish(table.to_pandas(), window)
