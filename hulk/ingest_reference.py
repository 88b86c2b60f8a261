"""The link statistics of hulk.ingest, computed a second way: pandas, no DuckDB.

It exists to check `hulk.ingest.link_stats` (tests assert they agree to 1e-9 on small data) and as
the comparison in bench/bench_ingest.py. It shares only the plumbing with hulk.ingest (finding the
files, the window, the column checks, the output conformance); every statistic is recomputed here
with pandas group-bys, following the definitions in hulk.ingest's module docstring.

Two readers feed the same statistics (`_statistics`):

- `link_stats_plain_pandas` is what a data scientist would write: `pd.read_parquet` on the list of
  the window's files (the log columns), one DataFrame holding every probe, then the window
  filter, the quarantine, the pooling, the group-bys. Peak memory grows with the whole window
  (about 5 GB for the default 32.7M rows). This is the "plain pandas implementation" the ingest
  speed target is measured against.
- `link_stats_reference` streams: files are read one at a time (only the needed columns, the
  window filter applied while reading). Of each file only mergeable counts (latency probes sent
  per pair) and the successful probes (pair, message size, elapsed time) are kept: exact
  quantiles need every successful elapsed time, so those are concatenated and grouped at the
  end. Lighter (about 3.5 GB) and about twice as fast as the plain version, it is the bench's
  second, harder comparison.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hulk import schemas
from hulk.errors import InputError
from hulk.ingest import (
    LOG_COLUMNS,
    LogSet,
    Window,
    check_columns,
    discover_logs,
    empty_window_error,
    files_in_window,
    finish,
    inventory_ids,
    make_window,
    partition_window_end,
    quarantine_keys,
)
from hulk.settings import IngestSettings

_CSV_DTYPES = {"src": "int64", "dst": "int64", "msg_bytes": "int64", "elapsed_ms": "float64"}


def _read_csv(path: Path, columns: list[str]) -> pd.DataFrame:
    """One CSV file with the log column types; a bad value is an InputError naming the column."""
    frame = pd.read_csv(path, usecols=columns, dtype={"status": "string"}, skipinitialspace=True)
    for column in columns:
        try:
            if column == "ts":
                frame["ts"] = pd.to_datetime(frame["ts"], utc=True, format="ISO8601")
            elif column in _CSV_DTYPES:
                values = pd.to_numeric(frame[column], errors="raise").astype("float64")
                if _CSV_DTYPES[column] == "int64":
                    if not (values.dropna() % 1 == 0).all():
                        raise ValueError("values are not integers")
                    values = values.astype("Int64")
                frame[column] = values
        except (ValueError, TypeError) as exc:
            raise InputError(path, "logs.schema", f"column {column!r}: {exc}") from None
    if "ts" in frame:
        frame["ts"] = frame["ts"].dt.as_unit("us")
    return frame


def _read_file(path: Path, fmt: str, window: Window, columns: list[str]) -> pd.DataFrame:
    """The probes of one file that fall in the window (closed interval), given columns only."""
    if fmt == "csv":
        frame = _read_csv(path, sorted(set(columns) | {"ts"}))
        inside = frame["ts"].between(window.start, window.end, inclusive="both")
        return frame.loc[inside, columns]
    lo, hi = window.start, window.end
    naive = pq.read_schema(path).field("ts").type.tz is None  # per file: kinds may mix
    if naive:
        lo, hi = lo.tz_localize(None), hi.tz_localize(None)
    table = pq.read_table(path, columns=columns, filters=[("ts", ">=", lo), ("ts", "<=", hi)])
    frame = table.to_pandas()
    if "ts" in frame and naive:
        frame["ts"] = frame["ts"].dt.tz_localize("UTC")
    return frame


def _compact(
    frame: pd.DataFrame, keys: pd.DataFrame, once: pd.DataFrame, ids: np.ndarray
) -> pd.DataFrame:
    """Anti-join the quarantine, keep one copy of repeated probes, pool directions, keep fleet
    pairs: columns a, b, msg_bytes, elapsed_ms, ok."""
    if len(once):
        # The copy with the smallest elapsed time stands in for a repeated probe, as in DuckDB.
        frame = frame.sort_values(["elapsed_ms", "status"], na_position="last", kind="stable")
        frame = frame.drop_duplicates(schemas.LOG_KEY, keep="first")
    if len(keys):
        frame = frame.assign(ts=frame["ts"].dt.tz_convert("UTC").dt.as_unit("us"))
        for column in ("src", "dst", "msg_bytes"):
            frame[column] = frame[column].astype("Int64")
        joined = frame.merge(
            keys.astype({"src": "Int64", "dst": "Int64", "msg_bytes": "Int64"}),
            on=schemas.LOG_KEY,
            how="left",
            indicator=True,
        )
        frame = joined.loc[joined["_merge"] == "left_only"].drop(columns="_merge")
    frame = frame.dropna(subset=["src", "dst", "msg_bytes"])
    src = frame["src"].to_numpy(dtype="int64")
    dst = frame["dst"].to_numpy(dtype="int64")
    elapsed = frame["elapsed_ms"].to_numpy(dtype="float64", na_value=np.nan)
    ok = (frame["status"] == schemas.PROBE_OK).fillna(False).to_numpy(dtype=bool)
    ok = ok & np.isfinite(elapsed)
    keep = (src != dst) & np.isin(src, ids) & np.isin(dst, ids)
    return pd.DataFrame(
        {
            "a": np.minimum(src, dst)[keep],
            "b": np.maximum(src, dst)[keep],
            "msg_bytes": frame["msg_bytes"].to_numpy(dtype="int64")[keep],
            "elapsed_ms": np.where(ok, elapsed, np.nan)[keep],
            "ok": ok[keep],
        }
    )


def _max_ts(log_set: LogSet) -> pd.Timestamp:
    """The latest probe time over every file."""
    latest: pd.Timestamp | None = None
    for log_file in log_set.files:
        if log_set.format == "csv":
            ts = _read_csv(log_file.path, ["ts"])["ts"]
        else:
            ts = pq.read_table(log_file.path, columns=["ts"]).to_pandas()["ts"]
            if ts.dt.tz is None:  # per file: kinds may mix
                ts = ts.dt.tz_localize("UTC")
        if ts.notna().any() and (latest is None or ts.max() > latest):
            latest = ts.max()
    if latest is None:
        raise InputError(log_set.root, "empty-window", "no log file holds a timestamp")
    return latest


def _fit(medians: pd.DataFrame) -> pd.DataFrame:
    """Least-squares line through each pair's (size, median elapsed) points: n_sizes, slope,
    intercept (slope and intercept NaN below two sizes)."""
    x = medians["msg_bytes"].astype("float64")
    y = medians["elapsed_ms"]
    group = [medians["a"], medians["b"]]
    x_mean = x.groupby(group).transform("mean")
    y_mean = y.groupby(group).transform("mean")
    dx, dy = x - x_mean, y - y_mean
    sxx = (dx * dx).groupby(group).sum()
    sxy = (dx * dy).groupby(group).sum()
    n_sizes = x.groupby(group).size()
    slope = (sxy / sxx).where(n_sizes >= 2)
    intercept = y.groupby(group).mean() - slope * x.groupby(group).mean()
    return pd.DataFrame({"n_sizes": n_sizes, "slope": slope, "intercept": intercept})


@dataclass(frozen=True)
class _Job:
    """What both readers need: the files and window to read, the quarantine, the fleet."""

    log_set: LogSet
    window: Window
    files: list[Path]
    keys: pd.DataFrame
    once: pd.DataFrame
    ids: np.ndarray


def _prepare(
    logs: Path,
    inventory: pd.DataFrame,
    settings: IngestSettings,
    quarantine: pd.DataFrame | None,
    window_end: dt.datetime | None,
) -> _Job:
    """Find the files, fix the window, check the columns, type the quarantine keys."""
    log_set = discover_logs(Path(logs))
    ids = inventory_ids(inventory)
    end = window_end if window_end is not None else partition_window_end(log_set)
    if end is None:  # unpartitioned files: every one is read to find the latest probe
        check_columns(log_set, [f.path for f in log_set.files])
        end = _max_ts(log_set)
    window = make_window(end, settings)
    files = files_in_window(log_set, window)
    if not files:
        raise empty_window_error(log_set, window, "no day= partition falls in the window")
    check_columns(log_set, files)
    keys, once = quarantine_keys(quarantine)
    return _Job(log_set, window, files, keys, once, ids)


def _check_not_empty(job: _Job, n_window: int, n_fleet: int) -> None:
    """The empty-window errors of hulk.ingest, from the probe counts before and after cleaning."""
    if n_window == 0:
        raise empty_window_error(job.log_set, job.window, "no probe falls in the window")
    if n_fleet == 0:
        raise empty_window_error(
            job.log_set,
            job.window,
            f"none of the {n_window} probes in the window is left once quarantined "
            "rows and probes involving machines outside the inventory are removed",
        )


_PAIR = ["a", "b"]


def _statistics(
    ok: pd.DataFrame, attempted: pd.Series, probe_bytes: int, window: Window
) -> pd.DataFrame:
    """The link table from every successful probe (a, b, msg_bytes, elapsed_ms) and the latency
    probes sent per pair (`attempted`, indexed by a, b)."""
    ok_latency = ok.loc[ok["msg_bytes"] == probe_bytes].groupby(_PAIR)["elapsed_ms"]
    quantiles = ok_latency.quantile([0.5, 0.95]).unstack().reindex(columns=[0.5, 0.95])
    stats = pd.DataFrame(
        {
            "n_ok": ok_latency.size(),
            "latency_p50_ms": quantiles[0.5],
            "latency_p95_ms": quantiles[0.95],
            "latency_mean_ms": ok_latency.mean(),
        }
    ).join(attempted.rename("samples"))
    stats = stats.loc[stats["n_ok"] > 0]

    medians = ok.groupby([*_PAIR, "msg_bytes"])["elapsed_ms"].median().reset_index()
    stats = stats.join(_fit(medians))
    fitted = stats["n_sizes"] >= 2
    stats["alpha_ms"] = stats["intercept"].where(fitted, stats["latency_p50_ms"])
    stats["beta_gbps"] = (8e-6 / stats["slope"]).where(fitted & (stats["slope"] > 0))
    stats["loss_rate"] = (stats["samples"] - stats["n_ok"]) / stats["samples"]
    out = stats.reset_index().rename(columns={"a": "src", "b": "dst"})
    return finish(out, window)


def link_stats_reference(
    logs: Path,
    inventory: pd.DataFrame,
    settings: IngestSettings,
    quarantine: pd.DataFrame | None = None,
    window_end: dt.datetime | None = None,
) -> pd.DataFrame:
    """Same contract and result as hulk.ingest.link_stats, computed with pandas one file at a
    time (streaming: only the successful probes of the window are held at once)."""
    job = _prepare(logs, inventory, settings, quarantine, window_end)
    columns = [c for c in LOG_COLUMNS if c != "ts" or len(job.keys) or len(job.once)]
    probe_bytes = settings.latency_probe_bytes
    n_window, n_fleet = 0, 0
    attempted_parts: list[pd.Series] = []  # latency probes sent per pair: counts add up
    ok_parts: list[pd.DataFrame] = []  # every successful probe: exact quantiles need them all
    for path in job.files:
        try:
            frame = _read_file(path, job.log_set.format, job.window, columns)
        except pa.ArrowInvalid as exc:
            raise InputError(path, "logs.readable", str(exc)) from None
        n_window += len(frame)
        probes = _compact(frame, job.keys, job.once, job.ids)
        del frame
        n_fleet += len(probes)
        latency = probes.loc[probes["msg_bytes"] == probe_bytes]
        attempted_parts.append(latency.groupby(_PAIR).size())
        ok_parts.append(probes.loc[probes["ok"], [*_PAIR, "msg_bytes", "elapsed_ms"]])
    _check_not_empty(job, n_window, n_fleet)
    attempted = pd.concat(attempted_parts).groupby(level=_PAIR).sum()
    ok = pd.concat(ok_parts, ignore_index=True)
    del ok_parts
    return _statistics(ok, attempted, probe_bytes, job.window)


def _utc(frame: pd.DataFrame) -> pd.DataFrame:
    """`ts` as UTC instants (a naive column is taken to be UTC)."""
    if frame["ts"].dt.tz is None:
        frame["ts"] = frame["ts"].dt.tz_localize("UTC")
    return frame


def _read_window(job: _Job) -> pd.DataFrame:
    """Every log column of every probe in the window, in one DataFrame."""
    columns = list(LOG_COLUMNS)
    if job.log_set.format == "csv":
        frame = pd.concat([_read_csv(path, columns) for path in job.files], ignore_index=True)
    else:
        paths = [str(path) for path in job.files]
        try:
            frame = pd.read_parquet(paths, columns=columns)
        except pa.ArrowException:
            # pyarrow reads a list of files with the first file's schema; files whose column
            # types differ (integer vs float elapsed times, say) are read one by one instead.
            try:
                frame = pd.concat(
                    [_utc(pd.read_parquet(path, columns=columns)) for path in paths],
                    ignore_index=True,
                )
            except pa.ArrowException as exc:
                raise InputError(job.log_set.root, "logs.readable", str(exc)) from None
        frame = _utc(frame)
    inside = frame["ts"].between(job.window.start, job.window.end, inclusive="both")
    return frame.loc[inside]


def link_stats_plain_pandas(
    logs: Path,
    inventory: pd.DataFrame,
    settings: IngestSettings,
    quarantine: pd.DataFrame | None = None,
    window_end: dt.datetime | None = None,
) -> pd.DataFrame:
    """Same contract and result as hulk.ingest.link_stats, computed the plain pandas way: the
    whole window read into one DataFrame (`pd.read_parquet` on the list of files), filtered and
    grouped."""
    job = _prepare(logs, inventory, settings, quarantine, window_end)
    frame = _read_window(job)
    n_window = len(frame)
    probes = _compact(frame, job.keys, job.once, job.ids)
    del frame
    _check_not_empty(job, n_window, len(probes))
    latency = probes.loc[probes["msg_bytes"] == settings.latency_probe_bytes]
    attempted = latency.groupby(_PAIR).size()
    ok = probes.loc[probes["ok"], [*_PAIR, "msg_bytes", "elapsed_ms"]]
    del probes, latency
    return _statistics(ok, attempted, settings.latency_probe_bytes, job.window)
