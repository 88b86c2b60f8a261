"""A partition dated in the future must not move the window (issue 15, item 3).

The window ends at midnight after the latest partition that is not in the future (never later
than now); the future partition's rows are quarantined as logs.future_timestamp, and the good
days are validated and summarised exactly as without it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from hulk import schemas
from hulk.ingest import link_stats, window_end_for
from hulk.settings import IngestSettings
from hulk.validation import validate_logs
from tests.data.test_validation import (
    DAYS,
    SETTINGS,
    WINDOW_DAYS,
    by_rule,
    make_days,
    make_inventory,
    rules,
    write_logs,
)
from tests.faults.conftest import invoke

# The wall clock two and a half days after the last logged day (the logs are not today's).
NOW = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)
FUTURE = dt.date(2026, 11, 25)
INGEST = IngestSettings(window_days=WINDOW_DAYS)


def _future_rows(count: int = 100) -> pd.DataFrame:
    """`count` probes of the future day: copies of the last day's, moved to FUTURE."""
    rows = make_days()[DAYS[-1]].head(count)
    return rows.assign(ts=rows["ts"] + pd.Timedelta(days=(FUTURE - DAYS[-1]).days))


@pytest.mark.slow
def test_future_partition_does_not_move_the_window(tmp_path: Path) -> None:
    inventory = make_inventory()
    clean = write_logs(tmp_path / "clean", make_days())
    logs = write_logs(tmp_path / "with-future", {**make_days(), FUTURE: _future_rows()})
    end = window_end_for(logs, NOW)
    assert end == pd.Timestamp("2026-11-21", tz="UTC") == window_end_for(clean, NOW)

    result = validate_logs(logs, inventory, SETTINGS, NOW, WINDOW_DAYS, window_end=end)

    assert rules(result.findings) == {"logs.future_timestamp"}  # no stale machines, no window
    hit = by_rule(result.findings, "logs.future_timestamp")
    assert (hit.severity, hit.file, hit.count) == ("warning", str(logs), 100)
    assert f"day={FUTURE.isoformat()}" in hit.message
    assert hit.examples[0]["file"].endswith(f"day={FUTURE.isoformat()}/probes.parquet")
    assert set(result.quarantine["rule"]) == {"logs.future_timestamp"}
    assert len(result.quarantine) == 100
    assert result.window_end == end

    links = link_stats(logs, inventory, INGEST, quarantine=result.quarantine, window_end=end)
    pd.testing.assert_frame_equal(links, link_stats(clean, inventory, INGEST, window_end=end))


def test_only_future_partitions_fall_back_to_now(tmp_path: Path) -> None:
    logs = write_logs(tmp_path, {FUTURE: _future_rows()})
    assert window_end_for(logs, NOW) == pd.Timestamp(NOW)


def test_todays_partition_ends_the_window_now(tmp_path: Path) -> None:
    today = NOW.date()
    rows = _future_rows().assign(ts=lambda f: f["ts"] - pd.Timedelta(days=2))
    logs = write_logs(tmp_path, {**make_days(), today: schemas.conform(rows, schemas.LOGS)})
    assert window_end_for(logs, NOW) == pd.Timestamp(NOW)


@pytest.mark.slow
def test_future_partition_on_the_command_line(generated: Path, params: Path) -> None:
    assert invoke("--params", params, "validate").exit_code == 0
    assert invoke("--params", params, "ingest").exit_code == 0
    good_links = (generated / schemas.LINKS_FILE).read_bytes()
    logs = generated / schemas.LOGS_DIR
    last = sorted(logs.iterdir())[-1]
    future = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=5)
    rows = pd.read_parquet(last / "probes.parquet").head(100)
    shift = pd.Timestamp(future, tz="UTC") - pd.Timestamp(rows["ts"].iloc[0]).floor("D")
    folder = logs / f"day={future.isoformat()}"
    folder.mkdir()
    rows.assign(ts=rows["ts"] + shift).to_parquet(folder / "probes.parquet", index=False)

    result = invoke("--params", params, "validate")

    assert result.exit_code == 0, result.output
    assert "[logs.future_timestamp] 100 probes" in result.output
    for rule in ("logs.stale_machine", "logs.outside_window", "logs.empty_window"):
        assert rule not in result.output
    result = invoke("--params", params, "ingest")
    assert result.exit_code == 0, result.output
    assert (generated / schemas.LINKS_FILE).read_bytes() == good_links


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_unpartitioned_files_end_the_window_at_their_latest_probe(tmp_path: Path, fmt: str) -> None:
    """A flat folder of the same probes as day partitions: the window ends at its latest probe
    (not at a wall clock days later, which would find every machine silent), a future probe
    does not move it, and validation finds what it finds in the partitions."""
    from hulk import fileio

    days = make_days()
    logs = tmp_path / "flat" / schemas.LOGS_DIR
    logs.mkdir(parents=True)
    for day, frame in {**days, FUTURE: _future_rows()}.items():
        if fmt == "csv":
            fileio.write_csv(logs / f"{day.isoformat()}.csv", frame)
        else:
            fileio.write_parquet(logs / f"{day}.parquet", schemas.conform(frame, schemas.LOGS))
    latest = max(frame["ts"].max() for frame in days.values())

    end = window_end_for(logs, NOW)

    assert end == pd.Timestamp(latest).tz_convert("UTC") < pd.Timestamp(NOW)
    result = validate_logs(logs, make_inventory(), SETTINGS, NOW, WINDOW_DAYS, window_end=end)
    assert "logs.stale_machine" not in rules(result.findings)
    assert rules(result.findings) <= {"logs.future_timestamp", "logs.outside_window"}
