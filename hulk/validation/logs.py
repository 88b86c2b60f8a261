"""The raw latency logs: the ``hulk.logs`` suite, one GX batch per day partition.

`validate_logs` reads one partition (``logs/day=YYYY-MM-DD/*.parquet``, or CSV files) at a time,
only the log columns, and validates it as one batch. The window is [now − window_days, now];
partitions whose day ends before it are never opened (like ingest), later ones all are.

The batches fan out: `plan_days` makes one picklable `LogDay` per batch, `validate_log_day` (a
pure function, any process may run it) reads and validates one in a GX session of its own and
returns a `DayOutcome`, and `merge_days` folds the outcomes in day order into the window's
`LogValidation` and records each batch's GX result in the caller's session (its Data Docs).
`validate_logs(..., map_days=)` runs the three with `map` or any executor's map; the results do
not depend on which. Reading the files is `hulk.validation.log_files`; the rules over the whole
window are `hulk.validation.log_window`.

Per batch (rule → what happens to the offending rows):

- missing or mistyped column, or an empty value where only ``elapsed_ms`` may be empty: an
  immediate `InputError` naming the file and the column;
- `logs.unknown_machine` (error): src or dst is not in the inventory (the message names them);
- quarantined with a warning: `logs.status` (not ok/timeout/unreachable), `logs.msg_bytes`
  (not > 0), `logs.elapsed_negative`, `logs.elapsed_zero` (exactly 0 ms: no link answers
  instantly, not even within a city), `logs.elapsed_infinite` (±inf), `logs.elapsed_too_large`
  (above max_elapsed_ms: longer than any probe can wait), `logs.elapsed_missing` (status ok
  without a time), `logs.elapsed_on_failure` (a time on a lost probe), `logs.future_timestamp`
  (after now + future_skew_s), `logs.outside_window` (before the window),
  `logs.wrong_partition` (not in its own day folder), `logs.self_loop` (src == dst),
  `logs.duplicate` (an exact repeat of an earlier row with the same schemas.LOG_KEY: the first
  copy is kept), `logs.duplicate_conflict` (copies of one schemas.LOG_KEY whose elapsed_ms or
  status differ: no copy can be trusted over the others, so every copy is quarantined and none
  is kept), `logs.faster_than_light` (elapsed below the great-circle fiber floor between the
  two machines; machines without coordinates are skipped).

A row that breaks several rules is quarantined once, under the first rule of `QUARANTINE_ORDER`
(a finding counts every row that breaks its rule). Rows with an unknown machine are listed in
the quarantine too.

Over the whole window (`hulk.validation.log_window`; quarantined rows never count):

- `logs.empty_window` (error): no probe at all in the window, or none left after quarantine;
- `logs.missing_days` (warning): whole UTC days of the window without any probe, named;
- `logs.stale_machine` (warning): active machines without a successful probe from or to them in
  the last `stale_after_hours` of the window (a machine that is down still shows up as the
  destination of timed-out probes, so only successful probes count), named;
- `logs.asymmetric_pair` (warning): pairs whose per-direction median over the successful 64-byte
  probes differ by `asymmetry_ratio`× and by `asymmetry_min_ms` or more, named.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.findings import Finding
from hulk.settings import LATENCY_PROBE_BYTES, ValidateSettings
from hulk.validation._common import (
    Machines,
    Tally,
    finding,
    frame_records,
    name_list,
    plural,
    utc_timestamp,
)
from hulk.validation._gx import (
    BatchResult,
    Check,
    CheckResult,
    GxSession,
    make_check,
    worker_session,
)
from hulk.validation.day_cache import DayCache, day_key
from hulk.validation.log_files import LogBatch, log_batches, read_batch
from hulk.validation.log_window import LogWindow, micros, window_findings

SUITE = "hulk.logs"
Progress = Callable[[int, int], None] | None

QUARANTINE_COLUMNS = {**schemas.LOGS, "rule": "string", "file": "string", "row": "int64"}
# A row breaking several rules is quarantined under the first of these.
QUARANTINE_ORDER = (
    "logs.unknown_machine",
    "logs.status",
    "logs.msg_bytes",
    "logs.elapsed_negative",
    "logs.elapsed_zero",
    "logs.elapsed_infinite",
    "logs.elapsed_too_large",
    "logs.elapsed_missing",
    "logs.elapsed_on_failure",
    "logs.future_timestamp",
    "logs.outside_window",
    "logs.wrong_partition",
    "logs.self_loop",
    "logs.duplicate",
    "logs.duplicate_conflict",
    "logs.faster_than_light",
)
_REASONS = {
    "logs.unknown_machine": "name a machine that is not in the inventory",
    "logs.status": "have a status other than " + ", ".join(schemas.PROBE_STATUSES),
    "logs.msg_bytes": "have a message size that is not positive",
    "logs.elapsed_negative": "have a negative elapsed_ms",
    "logs.elapsed_zero": "have elapsed_ms 0 (no link answers instantly)",
    "logs.elapsed_infinite": "have an infinite elapsed_ms",
    "logs.elapsed_too_large": "have an elapsed_ms above max_elapsed_ms ({max_elapsed_ms:g} ms)",
    "logs.elapsed_missing": "have status ok but no elapsed_ms",
    "logs.elapsed_on_failure": "were lost (status not ok) but carry an elapsed_ms",
    "logs.future_timestamp": "are timestamped in the future (after now + future_skew_s)",
    "logs.outside_window": "are timestamped before the window",
    "logs.wrong_partition": "lie outside the day of their day=YYYY-MM-DD partition",
    "logs.self_loop": "are self-loops (src == dst)",
    "logs.duplicate": "repeat an earlier probe exactly (same ts, src, dst, msg_bytes, "
    "elapsed_ms and status; the first is kept)",
    "logs.duplicate_conflict": "are copies of one probe (same ts, src, dst, msg_bytes) logged "
    "with conflicting elapsed_ms or status; every copy is quarantined, none is kept",
    "logs.faster_than_light": "are faster than light in fiber between the two machines",
}


@dataclass
class LogValidation:
    """Findings over the window, and the raw rows set aside (QUARANTINE_COLUMNS)."""

    findings: list[Finding]
    quarantine: pd.DataFrame
    rows: int = 0  # log rows read in the window's partitions
    batches: int = 0  # GX batches (partitions, or unpartitioned files)
    window_start: pd.Timestamp | None = None
    window_end: pd.Timestamp | None = None
    quarantined_by_rule: dict[str, int] = field(default_factory=dict)
    cached_batches: int = 0  # batches whose outcome came from the day cache


# --------------------------------------------------------------------------------------------
# The suite
# --------------------------------------------------------------------------------------------


def checks() -> list[Check]:
    """The expectations of the logs suite (ts bounds are parameters: they depend on the day)."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    return [
        make_check(
            "logs.unknown_machine",
            "error",
            gxe.ExpectColumnValuesToBeBetween(
                column="src_row",
                min_value=0,
                description="src is an inventory node_id (src_row: its inventory row, or -1)",
            ),
        ),
        make_check(
            "logs.unknown_machine",
            "error",
            gxe.ExpectColumnValuesToBeBetween(
                column="dst_row",
                min_value=0,
                description="dst is an inventory node_id (dst_row: its inventory row, or -1)",
            ),
        ),
        make_check(
            "logs.timestamp",
            "warning",
            gxe.ExpectColumnValuesToBeBetween(
                column="ts",
                min_value={"$PARAMETER": "ts_min"},
                max_value={"$PARAMETER": "ts_max"},
            ),
        ),
        make_check(
            "logs.status",
            "warning",
            gxe.ExpectColumnValuesToBeInSet(
                column="status", value_set=list(schemas.PROBE_STATUSES)
            ),
        ),
        make_check(
            "logs.msg_bytes",
            "warning",
            gxe.ExpectColumnValuesToBeBetween(column="msg_bytes", min_value=1),
        ),
        make_check(
            "logs.elapsed_negative",
            "warning",
            gxe.ExpectColumnValuesToBeBetween(column="elapsed_ms", min_value=0),
        ),
        make_check(
            "logs.elapsed_zero",
            "warning",
            gxe.ExpectColumnValuesToNotBeInSet(
                column="elapsed_ms",
                value_set=[0.0],
                description="elapsed_ms is not 0: no link answers instantly",
            ),
        ),
        make_check(
            "logs.elapsed_infinite",
            "warning",
            gxe.ExpectColumnValuesToBeInSet(
                column="elapsed_is_infinite",
                value_set=[False],
                description="elapsed_ms is finite",
            ),
        ),
        make_check(
            "logs.elapsed_too_large",
            "warning",
            gxe.ExpectColumnValuesToBeBetween(
                column="elapsed_ms",
                max_value={"$PARAMETER": "elapsed_max"},
                description="elapsed_ms is at most max_elapsed_ms (no probe waits longer)",
            ),
        ),
        make_check(
            "logs.elapsed_missing",
            "warning",
            gxe.ExpectColumnValuesToNotBeNull(
                column="elapsed_ms", row_condition=Column("status") == schemas.PROBE_OK
            ),
        ),
        make_check(
            "logs.elapsed_on_failure",
            "warning",
            gxe.ExpectColumnValuesToBeNull(
                column="elapsed_ms", row_condition=Column("status") != schemas.PROBE_OK
            ),
        ),
        make_check(
            "logs.self_loop",
            "warning",
            gxe.ExpectColumnValuesToBeInSet(
                column="is_self_loop", value_set=[False], description="src differs from dst"
            ),
        ),
        make_check(
            "logs.duplicate",
            "warning",
            gxe.ExpectCompoundColumnsToBeUnique(column_list=list(schemas.LOG_KEY)),
        ),
        make_check(
            "logs.faster_than_light",
            "warning",
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="elapsed_ms",
                column_B="fiber_floor_ms",
                or_equal=True,
                ignore_row_if="either_value_is_missing",
                description="elapsed_ms is at least the great-circle distance over light in fiber",
            ),
        ),
    ]


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogDay:
    """One batch to validate and all it needs: picklable, so that any worker can run it."""

    index: int  # position in the plan: outcomes are merged in this order
    batch: LogBatch
    fmt: str  # "parquet" or "csv"
    machines: Machines
    window: LogWindow
    settings: ValidateSettings
    probe_bytes: int
    run_time: dt.datetime  # the run time of the GX results (the Data Docs group by it)


@dataclass
class DayOutcome:
    """What one batch leaves for the window: picklable, merged in day order by `merge_days`.

    Only rows that pass count, except `rows`. `gx` is None for a batch without rows (nothing is
    validated, as before the fan-out).
    """

    index: int
    label: str
    rows: int = 0
    kept: int = 0
    tallies: dict[str, tuple[int, list[dict]]] = field(default_factory=dict)  # count, examples
    unknown_ids: list[int] = field(default_factory=list)
    quarantine: pd.DataFrame | None = None
    days: list[dt.date] = field(default_factory=list)
    last_ok: np.ndarray | None = None  # int64 µs per machine row; None without a kept ok probe
    # Successful latency probes sorted by directed pair code (src_row * machines + dst_row):
    # pair_ms[pair_starts[k]:pair_starts[k + 1]] are those of pair_codes[k].
    pair_codes: np.ndarray = field(default_factory=lambda: np.empty(0, dtype="int64"))
    pair_starts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype="int64"))
    pair_ms: np.ndarray = field(default_factory=lambda: np.empty(0, dtype="float32"))
    # Timestamps of rows outside their partition's bounds (how they are told apart depends on
    # the window's start and now: `hulk.validation.day_cache` checks it before reusing this).
    timestamp_flagged_us: np.ndarray = field(default_factory=lambda: np.empty(0, dtype="int64"))
    gx: BatchResult | None = None


# How the batches are run: `map(validate_log_day, days)` or an executor's map (same order).
MapDays = Callable[[Callable[[LogDay], DayOutcome], Iterable[LogDay]], Iterable[DayOutcome]]


@dataclass
class LogPlan:
    """The batches of one validation and the window they are checked against."""

    logs_dir: Path
    days: list[LogDay]
    window: LogWindow
    machines: Machines
    settings: ValidateSettings
    probe_bytes: int


@dataclass
class Totals:
    """What is gathered over the batches (only rows that pass count, except `rows`)."""

    machines: Machines
    probe_bytes: int
    rows: int = 0
    kept: int = 0
    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    unknown_ids: set[int] = field(default_factory=set)
    quarantine: list[pd.DataFrame] = field(default_factory=list)
    days: set[dt.date] = field(default_factory=set)
    last_ok: np.ndarray = field(init=False)
    # Successful latency probes per directed pair (src_row * len(machines) + dst_row): views
    # into one sorted float32 array per batch, so the medians are exact at 4 bytes a probe.
    pair_ms: dict[int, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        self.last_ok = np.full(len(self.machines), np.iinfo("int64").min, dtype="int64")

    def add(self, outcome: DayOutcome, examples: int) -> None:
        """Fold in one batch's outcome (called in day order: examples and lists keep it)."""
        self.rows += outcome.rows
        self.kept += outcome.kept
        for rule, (count, found) in outcome.tallies.items():
            self.tallies[rule].add(count, found, outcome.label, examples)
        self.unknown_ids.update(outcome.unknown_ids)
        if outcome.quarantine is not None:
            self.quarantine.append(outcome.quarantine)
        self.days.update(outcome.days)
        if outcome.last_ok is not None:
            np.maximum(self.last_ok, outcome.last_ok, out=self.last_ok)
        if len(outcome.pair_codes):
            parts = np.split(outcome.pair_ms, outcome.pair_starts[1:])
            for code, part in zip(outcome.pair_codes.tolist(), parts, strict=True):
                self.pair_ms[code].append(part)


def plan_days(
    logs_dir: Path,
    inventory: pd.DataFrame,
    settings: ValidateSettings,
    now: dt.datetime,
    window_days: int,
    *,
    probe_bytes: int = LATENCY_PROBE_BYTES,
    window_end: dt.datetime | None = None,
    run_time: dt.datetime | None = None,
) -> LogPlan:
    """The window and its batches, each a `LogDay` any worker can validate (see validate_logs).

    `run_time` is the run time of the GX results (the session's; `now` when None). Raises
    InputError for a log folder without log files.
    """
    logs_dir = Path(logs_dir)
    batches, fmt = log_batches(logs_dir)
    now_ts = utc_timestamp(now)
    end_ts = now_ts if window_end is None else utc_timestamp(window_end)
    window = LogWindow(
        start=end_ts - pd.Timedelta(days=window_days),
        end=end_ts,
        latest=now_ts + pd.Timedelta(seconds=settings.future_skew_s),
    )
    batches = [b for b in batches if b.day is None or b.day >= window.start.date()]
    machines = Machines.from_inventory(inventory)
    run_time = now_ts.to_pydatetime() if run_time is None else run_time
    days = [
        LogDay(i, batch, fmt, machines, window, settings, probe_bytes, run_time)
        for i, batch in enumerate(batches)
    ]
    return LogPlan(logs_dir, days, window, machines, settings, probe_bytes)


def validate_logs(
    logs_dir: Path,
    inventory: pd.DataFrame,
    settings: ValidateSettings,
    now: dt.datetime,
    window_days: int,
    progress: Progress = None,
    *,
    session: GxSession | None = None,
    probe_bytes: int = LATENCY_PROBE_BYTES,
    window_end: dt.datetime | None = None,
    map_days: MapDays = map,
    cache_dir: Path | None = None,
) -> LogValidation:
    """Validate the raw logs of the window [end − window_days, end], one partition at a time.

    `end` is `window_end` when given (the pipeline passes ingest's window end, so both steps
    look at the same probes), else `now`; anything after `now` + future_skew_s is in the future.

    Raises InputError for a log folder without log files, or a file that cannot be read (missing
    or mistyped column, naming the file and column); every other problem is a finding.
    `progress(done, total)` is called after each batch. `session` is the Great Expectations
    session whose project gets every batch's result (none kept when None); `probe_bytes` is the
    latency-probe size. `map_days(validate_log_day, days)` runs the batches: the built-in `map`
    (one after another, here), or an executor's `map` (``ProcessPoolExecutor().map``, a Dask
    client's); it must yield the outcomes in the order of `days`, and any order of work gives
    the same result. `cache_dir` (`hulk.validation.day_cache`): partitions validated by an
    earlier run with the same inputs are taken from it instead, and tonight's are added.
    """
    run_time = None if session is None else session.run_time
    plan = plan_days(
        logs_dir,
        inventory,
        settings,
        now,
        window_days,
        probe_bytes=probe_bytes,
        window_end=window_end,
        run_time=run_time,
    )
    outcomes: list[DayOutcome] = []
    todo = list(plan.days)
    keys: dict[int, str] = {}
    cache = None if cache_dir is None else DayCache(cache_dir)
    if cache is not None:
        todo = []
        for day in plan.days:
            keys[day.index] = day_key(day)
            found = cache.load(keys[day.index], day)
            if found is None:
                todo.append(day)
            else:
                outcomes.append(found)
        if outcomes and progress is not None:
            progress(len(outcomes), len(plan.days))
    cached = len(outcomes)
    for done, outcome in enumerate(map_days(validate_log_day, todo), start=cached + 1):
        outcomes.append(outcome)
        if cache is not None:
            cache.save(keys[outcome.index], outcome, plan.window)
        if progress is not None:
            progress(done, len(plan.days))
    if cache is not None:
        cache.keep_only(set(keys.values()))
    return replace(merge_days(plan, outcomes, session=session), cached_batches=cached)


def merge_days(
    plan: LogPlan, outcomes: Iterable[DayOutcome], *, session: GxSession | None = None
) -> LogValidation:
    """The window's findings and quarantine from every batch's outcome, merged in day order.

    The outcomes may come in any order (they are sorted by their plan index) but must be one
    per batch of the plan. Each batch's GX result goes into `session` (its Data Docs), in day
    order.
    """
    ordered = sorted(outcomes, key=lambda o: o.index)
    labels = [o.label for o in ordered]
    expected = [d.batch.label for d in plan.days]
    if labels != expected or [o.index for o in ordered] != list(range(len(plan.days))):
        raise ValueError(f"outcomes of batches {labels} do not match the plan's {expected}")
    totals = Totals(plan.machines, plan.probe_bytes)
    for outcome in ordered:
        totals.add(outcome, plan.settings.examples)
        if session is not None and outcome.gx is not None:
            session.record(outcome.gx, checks)

    settings, window, where = plan.settings, plan.window, str(plan.logs_dir)
    findings = _row_findings(totals, where, settings)
    findings += window_findings(totals, window, settings, where, len(plan.days), findings)
    quarantine = (
        pd.concat(totals.quarantine, ignore_index=True)
        if totals.quarantine
        else schemas.empty(QUARANTINE_COLUMNS)
    )
    quarantine = schemas.conform(quarantine, QUARANTINE_COLUMNS)
    return LogValidation(
        findings=findings,
        quarantine=quarantine,
        rows=totals.rows,
        batches=len(plan.days),
        window_start=window.start,
        window_end=window.end,
        quarantined_by_rule={
            str(k): int(v) for k, v in quarantine["rule"].value_counts(sort=False).items()
        },
    )


def validate_log_day(day: LogDay) -> DayOutcome:
    """Read and validate one batch in a GX session of this thread's own (a pure function).

    Raises InputError for a file that cannot be read, naming the file and column.
    """
    frame, offsets = read_batch(day.batch, day.fmt)
    session = worker_session(day.run_time, day.settings.examples)
    return _validate_batch(day, frame, offsets, session)


def _validate_batch(
    day: LogDay, frame: pd.DataFrame, offsets: np.ndarray, session: GxSession
) -> DayOutcome:
    batch, window, settings, machines = day.batch, day.window, day.settings, day.machines
    n = len(frame)
    outcome = DayOutcome(day.index, batch.label, rows=n)
    if n == 0:
        return outcome
    src = frame["src"].to_numpy()
    dst = frame["dst"].to_numpy()
    src_row, dst_row = machines.positions(src), machines.positions(dst)
    frame["src_row"] = src_row
    frame["dst_row"] = dst_row
    frame["is_self_loop"] = src == dst
    frame["elapsed_is_infinite"] = np.isinf(frame["elapsed_ms"].to_numpy(dtype="float64"))
    frame["fiber_floor_ms"] = machines.floor_ms(src_row, dst_row, settings.fiber_km_per_ms)
    ts_min, ts_max = window.bounds(batch.day)
    parameters = {"ts_min": ts_min, "ts_max": ts_max, "elapsed_max": settings.max_elapsed_ms}
    # GX copies the batch for each expectation's domain; `status` (a few distinct strings)
    # copies far faster as a category's codes, and every result is the same (a data test).
    checked = frame.assign(status=frame["status"].astype("category"))
    outcome.gx = session.run(SUITE, checks, checked, batch.label, parameters, keep=False)

    ts_us = frame["ts"].to_numpy(dtype="datetime64[us]").astype("int64")
    flagged = _flagged_rows(outcome.gx.checks, frame, ts_us, window)
    stray = [
        check.unexpected_index
        for check in outcome.gx.checks
        if check.rule == "logs.timestamp" and len(check.unexpected_index)
    ]
    if stray:
        outcome.timestamp_flagged_us = np.unique(ts_us[np.concatenate(stray)])
    rule_of = np.full(n, -1, dtype="int8")
    for code, rule in enumerate(QUARANTINE_ORDER):
        rows = flagged.get(rule)
        if rows is not None and len(rows):
            rows = rows[rule_of[rows] < 0]
            rule_of[rows] = code
    bad = np.flatnonzero(rule_of >= 0)

    def located(rows: np.ndarray) -> pd.DataFrame:
        """The rows with their file and row number in that file."""
        part = frame.iloc[rows]
        file_no = np.searchsorted(offsets, rows, side="right") - 1
        names = np.array(batch.file_names(), dtype=object)
        return part[list(schemas.LOGS)].assign(file=names[file_no], row=rows - offsets[file_no])

    unknown: set[int] = set()
    for rule, rows in flagged.items():
        if len(rows) == 0:
            continue
        examples = _examples(rule, rows, frame, located, settings.examples)
        outcome.tallies[rule] = (len(rows), frame_records(examples))
        if rule == "logs.unknown_machine":
            unknown.update(src[rows][src_row[rows] < 0].tolist())
            unknown.update(dst[rows][dst_row[rows] < 0].tolist())
    outcome.unknown_ids = sorted(unknown)
    if len(bad):
        rules = np.array(QUARANTINE_ORDER, dtype=object)[rule_of[bad]]
        outcome.quarantine = located(bad).assign(rule=rules)

    keep = rule_of < 0
    outcome.kept = int(keep.sum())
    if not keep.any():
        return outcome
    if batch.day is not None:
        outcome.days = [batch.day]
    else:
        days = np.unique(ts_us[keep] // 86_400_000_000)
        outcome.days = [dt.date(1970, 1, 1) + dt.timedelta(days=int(d)) for d in days]
    ok = keep & (frame["status"] == schemas.PROBE_OK).to_numpy(dtype=bool)
    if ok.any():
        outcome.last_ok = np.full(len(machines), np.iinfo("int64").min, dtype="int64")
        np.maximum.at(outcome.last_ok, src_row[ok], ts_us[ok])
        np.maximum.at(outcome.last_ok, dst_row[ok], ts_us[ok])
    elapsed = frame["elapsed_ms"].to_numpy()
    probe = ok & (frame["msg_bytes"].to_numpy() == day.probe_bytes) & np.isfinite(elapsed)
    if probe.any():
        codes = src_row[probe] * len(machines) + dst_row[probe]
        order = np.argsort(codes, kind="stable")
        codes = codes[order]
        starts = np.r_[0, np.flatnonzero(np.diff(codes)) + 1].astype("int64")
        outcome.pair_codes = codes[starts]
        outcome.pair_starts = starts
        outcome.pair_ms = elapsed[probe][order].astype("float32")
    return outcome


def _flagged_rows(
    results: list[CheckResult], frame: pd.DataFrame, ts_us: np.ndarray, window: LogWindow
) -> dict[str, np.ndarray]:
    """Offending row positions by rule (the ts check split into its three rules)."""
    flagged: dict[str, list[np.ndarray]] = defaultdict(list)
    for result in results:
        if result.success or len(result.unexpected_index) == 0:
            continue
        rows = result.unexpected_index
        if result.rule == "logs.timestamp":
            ts = ts_us[rows]
            future = ts > micros(window.latest)
            early = ts < micros(window.start)
            flagged["logs.future_timestamp"].append(rows[future])
            flagged["logs.outside_window"].append(rows[early & ~future])
            flagged["logs.wrong_partition"].append(rows[~early & ~future])
        elif result.rule == "logs.duplicate":
            # GX flags every copy of a repeated key, so the first copy of each is found among
            # these rows (in batch order) without hashing the whole batch again.
            rows = np.sort(rows)
            copies = frame.iloc[rows]
            conflict = _conflicting(copies)
            repeat = copies.duplicated(list(schemas.LOG_KEY), keep="first").to_numpy()
            flagged["logs.duplicate_conflict"].append(rows[conflict])
            flagged[result.rule].append(rows[~conflict & repeat])
        elif result.rule == "logs.elapsed_too_large":
            # ±inf is above any bound too, but it has a rule of its own.
            finite = np.isfinite(frame["elapsed_ms"].to_numpy(dtype="float64")[rows])
            flagged[result.rule].append(rows[finite])
        else:
            flagged[result.rule].append(rows)
    return {rule: np.unique(np.concatenate(parts)) for rule, parts in flagged.items()}


def _examples(
    rule: str,
    rows: np.ndarray,
    frame: pd.DataFrame,
    located: Callable[[np.ndarray], pd.DataFrame],
    limit: int,
) -> pd.DataFrame:
    """The first `limit` offending rows of a rule, located in their files, with what shows
    the problem."""
    if rule == "logs.duplicate_conflict":
        # The copies of one probe side by side, so the examples show the conflict.
        shown = frame.iloc[rows].sort_values(list(schemas.LOG_KEY), kind="stable")
        return located(shown.index.to_numpy()[:limit])
    examples = located(rows[:limit])
    if rule == "logs.faster_than_light":
        examples = examples.assign(fiber_floor_ms=frame["fiber_floor_ms"].to_numpy()[rows[:limit]])
    if rule == "logs.elapsed_infinite":  # JSON has no infinity: quote it as text
        examples = examples.assign(elapsed_ms=examples["elapsed_ms"].astype(str))
    return examples


def _conflicting(copies: pd.DataFrame) -> np.ndarray:
    """For rows that share their schemas.LOG_KEY with another row: whether the copies of that
    key differ in elapsed_ms or status (NaN equals NaN here: two lost probes agree)."""
    key = list(schemas.LOG_KEY)
    values = copies[key].assign(
        elapsed_ms=copies["elapsed_ms"].to_numpy(dtype="float64") + 0.0,  # -0.0 is 0.0
        status=copies["status"].astype(str).to_numpy(),
    )
    distinct = values.drop_duplicates()
    counts = distinct.groupby(key, sort=False).size()
    conflicted = counts.index[counts.to_numpy() > 1]
    return pd.MultiIndex.from_frame(values[key]).isin(conflicted)


# --------------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------------


def _row_findings(totals: Totals, where: str, settings: ValidateSettings) -> list[Finding]:
    found = []
    for rule in QUARANTINE_ORDER:
        tally = totals.tallies.get(rule)
        if tally is None or tally.count == 0:
            continue
        where_from = f"in {plural(len(tally.batches), 'partition')} ({name_list(tally.batches, 3)})"
        if rule == "logs.unknown_machine":
            ids = sorted(totals.unknown_ids)
            message = (
                f"{plural(tally.count, 'probe')} {where_from} name machine(s) that are not in "
                f"the inventory: {name_list(ids)}. A machine taken out of the fleet keeps its "
                "row, with status drained, until its probes have left the window"
            )
            found.append(finding("error", rule, where, message, tally.count, tally.examples))
            continue
        reason = _REASONS[rule].format(max_elapsed_ms=settings.max_elapsed_ms)
        message = f"{plural(tally.count, 'probe')} {where_from} {reason}: quarantined"
        if rule == "logs.duplicate_conflict":
            message += _conflict_example(tally.examples)
        found.append(finding("warning", rule, where, message, tally.count, tally.examples))
    return found


def _conflict_example(examples: list[dict]) -> str:
    """'; e.g. 0->2 at 2026-11-19T12:34:56+00:00 (64 B): ok 20 ms, ok 80 ms' from the
    examples (copies of one key are adjacent in them)."""
    if not examples:
        return ""
    key = list(schemas.LOG_KEY)
    first = examples[0]
    copies = [e for e in examples if all(e.get(k) == first.get(k) for k in key)]

    def value(example: dict) -> str:
        elapsed = example.get("elapsed_ms")
        return f"{example.get('status')} " + ("no time" if elapsed is None else f"{elapsed:g} ms")

    return (
        f"; e.g. {first.get('src')}->{first.get('dst')} at {first.get('ts')} "
        f"({first.get('msg_bytes')} B): " + ", ".join(value(e) for e in copies)
    )
