"""Great Expectations validation of the inventory, the raw logs and the link table.

Every test writes its own small data with pandas into tmp_path: a four-machine fleet (two in
Beijing, one in Tokyo, one in San Jose), hourly 64-byte probes between every ordered pair over a
three-day window, and a matching link table. Each rule is fed one broken file.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.geo import haversine_km
from hulk.settings import ValidateSettings
from hulk.validation import (
    QUARANTINE_COLUMNS,
    read_inventory,
    read_links,
    run_validation,
    validate_inventory,
    validate_links,
    validate_logs,
)

NOW = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
DAYS = [dt.date(2026, 11, 18), dt.date(2026, 11, 19), dt.date(2026, 11, 20)]
WINDOW_DAYS = 3
SETTINGS = ValidateSettings()
MACHINES = [
    (0, "Beijing", "China", 39.9042, 116.4074),
    (1, "Beijing", "China", 39.9042, 116.4074),
    (2, "Tokyo", "Japan", 35.6762, 139.6503),
    (3, "San Jose", "United States", 37.3394, -121.8950),
]


# --- data -----------------------------------------------------------------------------------


def make_inventory() -> pd.DataFrame:
    frame = pd.DataFrame(MACHINES, columns=["node_id", "city", "country", "lat", "lon"])
    frame = frame.assign(compute_capability=8.6, gpu_count=8, memory_gb=320.0, status="active")
    return schemas.conform(frame, schemas.INVENTORY)


def base_ms(inventory: pd.DataFrame, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A plausible one-way latency: 1.6 × the fiber floor plus half a millisecond."""
    where = inventory.set_index("node_id")
    km = haversine_km(
        where.loc[src, "lat"].to_numpy(),
        where.loc[src, "lon"].to_numpy(),
        where.loc[dst, "lat"].to_numpy(),
        where.loc[dst, "lon"].to_numpy(),
    )
    return km / SETTINGS.fiber_km_per_ms * 1.6 + 0.5


def make_day(day: dt.date, inventory: pd.DataFrame) -> pd.DataFrame:
    """Hourly 64-byte probes for every ordered pair, and one 1 MB probe per pair at 00:30."""
    ids = inventory["node_id"].to_numpy()
    src, dst = (a.ravel() for a in np.meshgrid(ids, ids, indexing="ij"))
    src, dst = src[src != dst], dst[src != dst]
    start = pd.Timestamp(day, tz="UTC")
    hours = np.arange(24)
    latency = pd.DataFrame(
        {
            "ts": [start + pd.Timedelta(hours=int(h)) for h in hours for _ in src],
            "src": np.tile(src, 24),
            "dst": np.tile(dst, 24),
            "msg_bytes": 64,
            "elapsed_ms": np.tile(base_ms(inventory, src, dst), 24),
            "status": "ok",
        }
    )
    throughput = pd.DataFrame(
        {
            "ts": start + pd.Timedelta(minutes=30),
            "src": src,
            "dst": dst,
            "msg_bytes": 1 << 20,
            "elapsed_ms": base_ms(inventory, src, dst) + 8.0,
            "status": "ok",
        }
    )
    return schemas.conform(pd.concat([latency, throughput], ignore_index=True), schemas.LOGS)


def make_days(inventory: pd.DataFrame | None = None) -> dict[dt.date, pd.DataFrame]:
    inventory = make_inventory() if inventory is None else inventory
    return {day: make_day(day, inventory) for day in DAYS}


def write_logs(root: Path, days: dict[dt.date, pd.DataFrame], fmt: str = "parquet") -> Path:
    logs = root / schemas.LOGS_DIR
    for day, frame in days.items():
        folder = logs / f"day={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        if fmt == "parquet":
            fileio.write_parquet(folder / "probes.parquet", schemas.conform(frame, schemas.LOGS))
        else:
            fileio.write_csv(folder / "probes.csv", frame)
    return logs


def make_links(inventory: pd.DataFrame) -> pd.DataFrame:
    ids = inventory["node_id"].to_numpy()
    src, dst = (a.ravel() for a in np.meshgrid(ids, ids, indexing="ij"))
    src, dst = src[src < dst], dst[src < dst]
    p50 = base_ms(inventory, src, dst)
    frame = pd.DataFrame(
        {
            "src": src,
            "dst": dst,
            "samples": 144,
            "loss_rate": 0.0,
            "latency_p50_ms": p50,
            "latency_p95_ms": p50 * 1.2,
            "latency_mean_ms": p50 * 1.05,
            "alpha_ms": p50,
            "beta_gbps": 1.0,
            "window_start": pd.Timestamp(DAYS[0], tz="UTC"),
            "window_end": pd.Timestamp(NOW),
        }
    )
    return schemas.conform(frame, schemas.LINKS)


def row(day: dt.date, time: str = "12:34:56", **values) -> dict:
    """One probe row on `day` (0 → 2, ok, 20 ms unless overridden)."""
    base = {
        "ts": pd.Timestamp(f"{day.isoformat()}T{time}", tz="UTC"),
        "src": 0,
        "dst": 2,
        "msg_bytes": 64,
        "elapsed_ms": 20.0,
        "status": "ok",
    }
    return {**base, **values}


def append(frame: pd.DataFrame, *rows: dict) -> pd.DataFrame:
    extra = schemas.conform(pd.DataFrame(list(rows)), schemas.LOGS)
    return pd.concat([frame, extra], ignore_index=True)


def by_rule(findings: list[Finding], rule: str) -> Finding:
    hits = [f for f in findings if f.rule == rule]
    assert hits, f"no {rule} finding in {[f.rule for f in findings]}"
    return hits[0]


def rules(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


def check_logs(tmp_path: Path, days: dict, inventory: pd.DataFrame | None = None, **kwargs):
    logs = write_logs(tmp_path, days)
    inventory = make_inventory() if inventory is None else inventory
    return logs, validate_logs(logs, inventory, SETTINGS, NOW, WINDOW_DAYS, **kwargs)


# --- inventory ------------------------------------------------------------------------------


def test_clean_inventory_has_no_findings():
    assert validate_inventory(make_inventory(), "machines.csv", SETTINGS) == []


def _set(column: str, value: object, row: int = 1) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.loc[row, column] = value
        return frame

    return change


@pytest.mark.parametrize(
    ("change", "rule", "severity", "node_id"),
    [
        (_set("node_id", 0), "inventory.unique_node_id", "error", 0),
        (_set("compute_capability", 2.0), "inventory.compute_capability", "error", 1),
        (_set("compute_capability", 15.0), "inventory.compute_capability", "error", 1),
        (_set("compute_capability", np.nan), "inventory.missing_value", "error", 1),
        (_set("gpu_count", 0), "inventory.gpu_count", "error", 1),
        (_set("memory_gb", 0.0), "inventory.memory_gb", "error", 1),
        (_set("status", "broken"), "inventory.status", "error", 1),
        (_set("lat", 95.0), "inventory.coordinates", "error", 1),
        (_set("lon", -200.0), "inventory.coordinates", "error", 1),
        (_set("lat", np.nan), "inventory.missing_coordinates", "warning", 1),
    ],
)
def test_inventory_rules(change, rule, severity, node_id):
    findings = validate_inventory(change(make_inventory()), "data/machines.csv", SETTINGS)
    hit = by_rule(findings, rule)
    assert (hit.severity, hit.file, hit.count) == (
        severity,
        "data/machines.csv",
        2 if rule == "inventory.unique_node_id" else 1,
    )
    assert hit.examples[0]["node_id"] == node_id
    assert str(node_id) in hit.message
    json.dumps(hit.to_dict(), allow_nan=False)
    assert rules(findings) == {rule}


def test_inventory_missing_or_mistyped_columns_are_errors():
    findings = validate_inventory(make_inventory().drop(columns="memory_gb"), "m.csv", SETTINGS)
    assert [(f.rule, f.severity) for f in findings] == [("inventory.schema", "error")]
    assert "memory_gb" in findings[0].message
    mistyped = make_inventory().assign(gpu_count=lambda f: f["gpu_count"].astype(str))
    findings = validate_inventory(mistyped, "m.csv", SETTINGS)
    assert findings[0].rule == "inventory.schema" and "gpu_count" in findings[0].message


def test_read_inventory_round_trip_and_errors(tmp_path):
    path = tmp_path / "machines.csv"
    inventory = make_inventory()
    inventory.loc[3, ["lat", "lon"]] = np.nan
    inventory.loc[3, "city"] = "Atlantis-7"  # not a known place: the coordinates stay empty
    fileio.write_csv(path, inventory)
    back = read_inventory(path)
    pd.testing.assert_frame_equal(back[list(schemas.INVENTORY)], inventory)

    with pytest.raises(InputError, match="not found"):
        read_inventory(tmp_path / "absent.csv")
    path.write_text("node_id,city\n1,Beijing\n")
    with pytest.raises(InputError, match="memory_gb") as caught:
        read_inventory(path)
    assert caught.value.path == str(path)
    fileio.write_csv(path, inventory.assign(gpu_count=["8", "8", "eight", "8"]))
    with pytest.raises(InputError, match="gpu_count") as caught:
        read_inventory(path)
    assert caught.value.examples == ["line 4: gpu_count='eight'"]
    # A 20-digit id is named, not wrapped into another machine's id by the int64 cast.
    fileio.write_csv(path, inventory.assign(node_id=["1", "2", "3", "99999999999999999999"]))
    with pytest.raises(InputError, match="node_id.*63 bits") as caught:
        read_inventory(path)
    assert caught.value.rule == "inventory.schema"
    assert caught.value.examples == ["line 5: node_id='99999999999999999999'"]
    path.write_bytes(b'node_id,city\n1,"Beijing\n')
    with pytest.raises(InputError, match="cannot parse"):
        read_inventory(path)


# --- logs: per partition --------------------------------------------------------------------


def test_clean_logs_have_no_findings(tmp_path, capfd):
    calls = []
    _, result = check_logs(tmp_path, make_days(), progress=lambda d, t: calls.append((d, t)))
    assert capfd.readouterr() == ("", "")  # no progress bars or other output from GX
    assert result.findings == []
    assert result.quarantine.empty
    assert list(result.quarantine.columns) == list(QUARANTINE_COLUMNS)
    assert result.rows == 3 * 300 and result.batches == 3
    assert calls == [(1, 3), (2, 3), (3, 3)]


LATE = DAYS[-1]
MID = DAYS[1]


@pytest.mark.parametrize(
    ("extra_day", "bad_row", "rule", "severity"),
    [
        (MID, row(MID, src=99, dst=0), "logs.unknown_machine", "error"),
        (
            dt.date(2026, 11, 21),
            row(dt.date(2026, 11, 21), "02:00:00"),
            "logs.future_timestamp",
            "warning",
        ),
        (LATE, row(dt.date(2026, 11, 17)), "logs.outside_window", "warning"),
        (MID, row(LATE), "logs.wrong_partition", "warning"),
        (MID, row(MID, status="lost", elapsed_ms=np.nan), "logs.status", "warning"),
        (MID, row(MID, msg_bytes=0), "logs.msg_bytes", "warning"),
        (MID, row(MID, elapsed_ms=-1.0), "logs.elapsed_negative", "warning"),
        (MID, row(MID, elapsed_ms=np.nan), "logs.elapsed_missing", "warning"),
        (MID, row(MID, status="timeout", elapsed_ms=12.0), "logs.elapsed_on_failure", "warning"),
        (MID, row(MID, src=1, dst=1, elapsed_ms=0.3), "logs.self_loop", "warning"),
        (MID, row(MID, elapsed_ms=1.0), "logs.faster_than_light", "warning"),
    ],
)
def test_log_row_rules(tmp_path, extra_day, bad_row, rule, severity):
    days = make_days()
    days[extra_day] = append(days.get(extra_day, schemas.empty(schemas.LOGS)), bad_row)
    logs, result = check_logs(tmp_path, days)
    hit = by_rule(result.findings, rule)
    assert (hit.severity, hit.file, hit.count) == (severity, str(logs), 1)
    example = hit.examples[0]
    assert (example["src"], example["dst"]) == (bad_row["src"], bad_row["dst"])
    assert example["ts"] == bad_row["ts"].isoformat()
    assert example["file"].endswith(f"day={extra_day.isoformat()}/probes.parquet")
    assert example["row"] == len(days[extra_day]) - 1
    json.dumps(hit.to_dict(), allow_nan=False)
    quarantined = result.quarantine
    assert len(quarantined) == 1 and quarantined["rule"].iloc[0] == rule
    assert quarantined["row"].iloc[0] == example["row"]
    assert not [f for f in result.findings if f.severity == "error" and f.rule != rule]
    if rule == "logs.unknown_machine":
        assert "99" in hit.message
    if rule == "logs.faster_than_light":
        assert example["fiber_floor_ms"] > 10


def test_log_suite_reads_status_as_a_category_with_the_same_results():
    """The log suite runs on `status` as a category (hulk.validation.logs: far cheaper copies);
    GX must find, count, index and report the same rows as on the strings."""
    from hulk.validation import logs
    from hulk.validation._gx import GxSession

    frame = append(
        make_days()[MID],
        row(MID, status="lost", elapsed_ms=np.nan),
        row(MID, status="timeout", elapsed_ms=12.0),
        row(MID, status=None),
        row(MID, elapsed_ms=np.nan),
    )
    frame = frame.assign(
        src_row=frame["src"], dst_row=frame["dst"], is_self_loop=frame["src"] == frame["dst"]
    )
    frame = frame.assign(elapsed_is_infinite=np.isinf(frame["elapsed_ms"]), fiber_floor_ms=0.1)
    parameters = {"ts_min": pd.Timestamp(MID, tz="UTC"), "ts_max": pd.Timestamp(LATE, tz="UTC")}
    parameters["elapsed_max"] = SETTINGS.max_elapsed_ms
    session = GxSession.ephemeral(NOW)
    runs = [
        session.run(logs.SUITE, logs.checks, batch, "b", parameters, keep=False)
        for batch in (frame, frame.assign(status=frame["status"].astype("category")))
    ]
    found = {c.rule: c.unexpected_index.tolist() for c in runs[0].checks if c.unexpected_count}
    assert found["logs.status"] == [300]
    assert found["logs.elapsed_on_failure"] == [301, 302]
    assert found["logs.elapsed_missing"] == [303]
    results = [json.dumps(run.gx_result["results"], sort_keys=True) for run in runs]
    assert results[0] == results[1]


def test_duplicates_keep_the_first_copy(tmp_path):
    days = make_days()
    days[MID] = append(days[MID], days[MID].iloc[5].to_dict(), days[MID].iloc[5].to_dict())
    _, result = check_logs(tmp_path, days)
    hit = by_rule(result.findings, "logs.duplicate")
    assert (hit.severity, hit.count) == ("warning", 2)
    assert result.quarantine["row"].tolist() == [300, 301]
    assert set(result.quarantine["rule"]) == {"logs.duplicate"}


def test_light_check_skips_machines_without_coordinates(tmp_path):
    inventory = make_inventory()
    inventory.loc[2, ["lat", "lon"]] = np.nan
    days = make_days()
    days[MID] = append(days[MID], row(MID, elapsed_ms=1.0))
    _, result = check_logs(tmp_path, days, inventory)
    assert "logs.faster_than_light" not in rules(result.findings)
    assert result.quarantine.empty


@pytest.mark.parametrize(
    ("table", "column"),
    [
        (lambda f: f.drop(columns="msg_bytes"), "msg_bytes"),
        (lambda f: f.assign(ts=f["ts"].astype(str)), "ts"),
        (lambda f: f.assign(src=f["src"].astype(float)), "src"),
        (lambda f: f.assign(dst=f["dst"].astype(object).where(f.index != 3, None)), "dst"),
    ],
)
def test_unreadable_log_files_raise_naming_file_and_column(tmp_path, table, column):
    days = make_days()
    logs = write_logs(tmp_path, days)
    broken = logs / f"day={MID.isoformat()}" / "probes.parquet"
    pq.write_table(pa.Table.from_pandas(table(days[MID]), preserve_index=False), broken)
    with pytest.raises(InputError, match=repr(column)) as caught:
        validate_logs(logs, make_inventory(), SETTINGS, NOW, WINDOW_DAYS)
    assert caught.value.path == str(broken)
    assert caught.value.rule == "logs.schema"


def test_csv_logs_are_accepted_and_checked(tmp_path):
    days = make_days()
    days[MID] = append(days[MID], row(MID, src=2, dst=2))
    logs = write_logs(tmp_path, days, fmt="csv")
    result = validate_logs(logs, make_inventory(), SETTINGS, NOW, WINDOW_DAYS)
    assert [(f.rule, f.count) for f in result.findings] == [("logs.self_loop", 1)]
    assert result.quarantine["file"].iloc[0].endswith("probes.csv")

    bad = days[LATE].astype({"src": object})
    bad.loc[7, "src"] = "seven"
    fileio.write_csv(logs / f"day={LATE.isoformat()}" / "probes.csv", bad)
    with pytest.raises(InputError, match="'src'") as caught:
        validate_logs(logs, make_inventory(), SETTINGS, NOW, WINDOW_DAYS)
    assert caught.value.examples == ["line 9: src='seven'"]


# --- logs: over the window ------------------------------------------------------------------


def test_empty_window_is_an_error(tmp_path):
    logs = write_logs(tmp_path, make_days())
    late = validate_logs(logs, make_inventory(), SETTINGS, NOW + dt.timedelta(days=30), 3)
    hit = by_rule(late.findings, "logs.empty_window")
    assert (hit.severity, hit.file) == ("error", str(logs))
    assert rules(late.findings) == {"logs.empty_window"}
    (tmp_path / "empty").mkdir()
    empty = validate_logs(tmp_path / "empty", make_inventory(), SETTINGS, NOW, WINDOW_DAYS)
    assert [(f.rule, f.severity) for f in empty.findings] == [("logs.empty_window", "error")]
    with pytest.raises(InputError, match="does not exist"):
        validate_logs(tmp_path / "absent", make_inventory(), SETTINGS, NOW, WINDOW_DAYS)


def test_window_with_every_row_quarantined_is_empty(tmp_path):
    frame = make_days()[LATE].assign(dst=lambda f: f["src"])
    _, result = check_logs(tmp_path, {LATE: frame.drop_duplicates(list(schemas.LOG_KEY))})
    empty = by_rule(result.findings, "logs.empty_window")
    assert empty.severity == "error"
    # The error says which rule quarantined them (a warning, which the error alone would hide).
    cause = by_rule(result.findings, "logs.self_loop")
    assert f"(rows by rule: logs.self_loop {cause.count:,}; the most: {cause.message})" in (
        empty.message
    )


def test_missing_days_are_named(tmp_path):
    days = make_days()
    del days[MID]
    _, result = check_logs(tmp_path, days)
    hit = by_rule(result.findings, "logs.missing_days")
    assert (hit.severity, hit.count, hit.examples) == ("warning", 1, [{"day": "2026-11-19"}])
    assert "2026-11-19" in hit.message


def test_machines_that_stopped_reporting_are_named(tmp_path):
    days = make_days()
    last = days[LATE]
    touches = (last["src"] == 3) | (last["dst"] == 3)
    last.loc[touches, "status"] = "timeout"
    last.loc[touches, "elapsed_ms"] = np.nan
    _, result = check_logs(tmp_path, days)
    hit = by_rule(result.findings, "logs.stale_machine")
    assert (hit.severity, hit.count) == ("warning", 1)
    assert hit.examples == [
        {"node_id": 3, "city": "San Jose", "last_ok_probe": "2026-11-19T23:00:00+00:00"}
    ]
    assert rules(result.findings) == {"logs.stale_machine"}


def test_asymmetric_pairs_are_named(tmp_path):
    days = make_days()
    for frame in days.values():
        forward = (frame["src"] == 0) & (frame["dst"] == 2) & (frame["msg_bytes"] == 64)
        frame.loc[forward, "elapsed_ms"] = 60.0
    _, result = check_logs(tmp_path, days)
    hit = by_rule(result.findings, "logs.asymmetric_pair")
    assert (hit.severity, hit.count) == ("warning", 1)
    example = hit.examples[0]
    assert (example["src"], example["dst"], example["median_ms"]) == (0, 2, 60.0)
    assert example["reverse_median_ms"] == pytest.approx(base_ms(make_inventory(), [2], [0])[0])
    assert example["probes"] == example["reverse_probes"] == 72
    assert "0<->2" in hit.message


# --- link table -----------------------------------------------------------------------------


def test_clean_links_have_no_findings():
    inventory = make_inventory()
    assert validate_links(make_links(inventory), inventory, "links.parquet", SETTINGS) == []


def _link(column: str, value: object, row: int = 1) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.loc[row, column] = value
        return frame

    return change


def _swap(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    src, dst = int(frame.at[1, "src"]), int(frame.at[1, "dst"])
    frame.at[1, "src"], frame.at[1, "dst"] = dst, src
    return frame


@pytest.mark.parametrize(
    ("change", "rule", "severity"),
    [
        (_link("dst", 0, row=0), "links.self_loop", "error"),
        (_swap, "links.unordered_pair", "error"),
        (lambda f: pd.concat([f, f.iloc[[1]]], ignore_index=True), "links.unique_pair", "error"),
        (_link("dst", 99), "links.unknown_machine", "error"),
        (_link("loss_rate", 1.5), "links.loss_rate", "error"),
        (_link("samples", -1), "links.samples", "error"),
        (_link("latency_mean_ms", 0.0), "links.latency", "error"),
        (_link("latency_p50_ms", np.nan), "links.latency", "error"),
        (_link("latency_p50_ms", 500.0), "links.latency_order", "error"),
        (_link("beta_gbps", -1.0), "links.beta", "error"),
        (_link("window_end", pd.Timestamp("2026-01-01", tz="UTC")), "links.window", "error"),
        (_link("latency_p50_ms", 1.0), "links.faster_than_light", "warning"),
    ],
)
def test_link_rules(change, rule, severity):
    inventory = make_inventory()
    links = change(make_links(inventory))
    findings = validate_links(links, inventory, "data/links.parquet", SETTINGS)
    hit = by_rule(findings, rule)
    assert (hit.severity, hit.file) == (severity, "data/links.parquet")
    assert hit.count >= 1 and hit.examples and "src" in hit.examples[0]
    json.dumps(hit.to_dict(), allow_nan=False)
    if rule == "links.unknown_machine":
        assert "99" in hit.message
    if rule != "links.unique_pair":
        assert rules(findings) <= {rule, "links.isolated_machine"}


def test_isolated_active_machine_is_a_warning():
    """A machine added to the inventory before its first probes: the night goes on, and assign
    runs drain it (`assign.drained_unmeasured`)."""
    inventory = make_inventory()
    links = make_links(inventory)
    alone = links[(links["src"] != 3) & (links["dst"] != 3)]
    hit = by_rule(
        validate_links(alone, inventory, "links.parquet", SETTINGS), "links.isolated_machine"
    )
    assert (hit.severity, hit.count, hit.examples) == (
        "warning",
        1,
        [{"node_id": 3, "city": "San Jose"}],
    )
    drained = inventory.assign(status=["active", "active", "active", "drained"])
    assert validate_links(alone, drained, "links.parquet", SETTINGS) == []


def test_link_light_check_skips_machines_without_coordinates():
    inventory = make_inventory()
    inventory.loc[2, ["lat", "lon"]] = np.nan
    links = make_links(make_inventory())
    links.loc[links["dst"] == 2, "latency_p50_ms"] = 1.0
    assert validate_links(links, inventory, "links.parquet", SETTINGS) == []


def test_link_schema_problems(tmp_path):
    inventory = make_inventory()
    links = make_links(inventory)
    findings = validate_links(links.drop(columns="loss_rate"), inventory, "l.parquet", SETTINGS)
    assert [f.rule for f in findings] == ["links.schema"] and "loss_rate" in findings[0].message

    path = tmp_path / "links.parquet"
    fileio.write_parquet(path, links)
    pd.testing.assert_frame_equal(read_links(path), links)
    fileio.write_parquet(path, links.drop(columns="latency_p95_ms"))
    with pytest.raises(InputError, match="'latency_p95_ms'") as caught:
        read_links(path)
    assert caught.value.path == str(path)
    fileio.write_parquet(path, links.assign(loss_rate=links["loss_rate"].astype(str)))
    with pytest.raises(InputError, match="'loss_rate'"):
        read_links(path)


# --- run_validation -------------------------------------------------------------------------


@pytest.mark.slow
def test_run_validation_writes_report_quarantine_and_docs(tmp_path):
    inventory = make_inventory()
    fileio.write_csv(tmp_path / schemas.INVENTORY_FILE, inventory)
    days = make_days(inventory)
    days[MID] = append(days[MID], row(MID, src=1, dst=1), days[MID].iloc[0].to_dict())
    write_logs(tmp_path, days)
    fileio.write_parquet(tmp_path / schemas.LINKS_FILE, make_links(inventory))
    progress = []

    report = run_validation(
        tmp_path, SETTINGS, NOW, WINDOW_DAYS, progress=lambda d, t: progress.append(d)
    )

    assert report.ok and progress == [1, 2, 3]
    assert rules(report.findings) == {"logs.self_loop", "logs.duplicate"}
    assert report.docs_index == tmp_path / "validation" / "docs" / "index.html"
    assert report.docs_index.is_file()
    assert "hulk.logs" in report.docs_index.read_text(encoding="utf-8")
    saved = json.loads(report.report_path.read_text(encoding="utf-8"))
    assert saved["ok"] is True
    assert saved["counts"]["quarantined_rows"] == 2
    assert saved["counts"]["quarantined_by_rule"] == {"logs.self_loop": 1, "logs.duplicate": 1}
    assert {k: v["success"] for k, v in saved["suites"].items()} == dict.fromkeys(
        ["inventory", "logs", "links"], True
    )
    assert saved["suites"]["logs"]["batches"] == 3
    # Two quarantined rows of ~300 are warnings: the day passes, in the report as in Data Docs.
    assert saved["suites"]["logs"]["failed_batches"] == []
    assert len(saved["findings"]) == 2
    quarantine = pd.read_parquet(tmp_path / schemas.QUARANTINE_FILE)
    assert sorted(quarantine["rule"]) == ["logs.duplicate", "logs.self_loop"]
    assert sorted(quarantine["row"]) == [300, 301]
    suites = sorted(
        p.name for p in (tmp_path / "validation" / "gx").rglob("expectations/**/*.json")
    )
    assert suites == ["inventory.json", "links.json", "logs.json"]  # suites are persisted


def _docs_runs(index: Path) -> set[str]:
    """The run times of the validation results the index page lists."""
    html = index.read_text(encoding="utf-8")
    links = re.findall(r"validations/hulk/[^\"]+?\.html", html)
    return {link.split("/")[-2] for link in links}


@pytest.mark.slow
def test_data_docs_show_warnings_as_passed_name_assets_and_keep_nights(tmp_path):
    inventory = make_inventory()
    fileio.write_csv(tmp_path / schemas.INVENTORY_FILE, inventory)
    days = make_days(inventory)
    # MID: one self-loop (a warning, quarantined); LATE: a third of its rows duplicated.
    days[MID] = append(days[MID], row(MID, src=1, dst=1))
    late = DAYS[-1]
    days[late] = pd.concat([days[late], days[late].iloc[:100]], ignore_index=True)
    write_logs(tmp_path, days)
    settings = ValidateSettings(docs_history_days=2)

    first = run_validation(tmp_path, settings, NOW, WINDOW_DAYS)
    saved = json.loads(first.report_path.read_text(encoding="utf-8"))
    assert first.ok  # warnings never stop the run
    assert saved["suites"]["logs"]["failed_batches"] == [f"day={late.isoformat()}"]
    quarantine = pd.read_parquet(tmp_path / schemas.QUARANTINE_FILE)
    assert (quarantine["rule"] == "logs.self_loop").sum() == 1  # every bad row still caught
    mid_page = next((tmp_path / "validation" / "docs").rglob(f"day={MID.isoformat()}/**/*.html"))
    text = mid_page.read_text(encoding="utf-8")
    assert "Succeeded" in text and "fa-times text-danger" not in text
    assert f"logs day={MID.isoformat()}" in text  # the data asset, named
    suite_page = tmp_path / "validation" / "docs" / "expectations" / "hulk" / "logs.html"
    assert "quarantined" in suite_page.read_text(encoding="utf-8")  # what a warning does
    (night1,) = _docs_runs(first.docs_index)

    # Two more nights: the second keeps the first, the third drops it (history of 2 days).
    later = [NOW + dt.timedelta(days=1), NOW + dt.timedelta(days=2)]
    run_validation(tmp_path, settings, later[0], WINDOW_DAYS)
    assert len(_docs_runs(first.docs_index)) == 2 and night1 in _docs_runs(first.docs_index)
    run_validation(tmp_path, settings, later[1], WINDOW_DAYS)
    assert len(_docs_runs(first.docs_index)) == 2 and night1 not in _docs_runs(first.docs_index)
    pages = (tmp_path / "validation" / "docs" / "validations").rglob("*.html")
    assert not [page for page in pages if night1 in page.parts]  # its pages are gone too


def test_run_validation_reports_errors_without_raising(tmp_path):
    inventory = make_inventory()
    fileio.write_csv(tmp_path / schemas.INVENTORY_FILE, inventory)
    links = make_links(inventory)
    links.loc[0, "dst"] = 99
    fileio.write_parquet(tmp_path / schemas.LINKS_FILE, links)

    report = run_validation(tmp_path, SETTINGS, NOW, WINDOW_DAYS)

    assert not report.ok
    assert report.quarantine_path is None and not (tmp_path / schemas.QUARANTINE_FILE).exists()
    saved = json.loads(report.report_path.read_text(encoding="utf-8"))
    assert saved["ok"] is False and saved["suites"]["links"]["success"] is False
    assert saved["suites"]["logs"]["validated"] is False
    assert "links.unknown_machine" in {f["rule"] for f in saved["findings"]}


def test_run_validation_needs_a_readable_inventory(tmp_path):
    with pytest.raises(InputError, match="not found") as caught:
        run_validation(tmp_path, SETTINGS, NOW, WINDOW_DAYS)
    assert caught.value.path == str(tmp_path / schemas.INVENTORY_FILE)
