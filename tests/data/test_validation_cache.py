"""The day cache of log validation: a run reuses the partitions an earlier run validated with the
same inputs, and its findings and quarantine equal those of a run without the cache."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from hulk.validation import validate_logs
from hulk.validation.day_cache import SUFFIX
from tests.data.test_validation import (
    DAYS,
    NOW,
    SETTINGS,
    WINDOW_DAYS,
    append,
    make_day,
    make_days,
    make_inventory,
    row,
    write_logs,
)

LATER = NOW + dt.timedelta(days=1)


def logs_with_problems(inventory: pd.DataFrame) -> dict[dt.date, pd.DataFrame]:
    days = make_days(inventory)
    # A bad status and, in a past partition, a probe stamped after "now" (12 h past NOW): in
    # the future tonight, merely in the wrong partition tomorrow night.
    days[DAYS[0]] = append(days[DAYS[0]], row(DAYS[0], status="lost"))
    stray = row(DAYS[2], src=1, dst=3)
    stray["ts"] = pd.Timestamp(NOW) + pd.Timedelta(hours=12)
    days[DAYS[2]] = append(days[DAYS[2]], stray)
    return days


def validate(logs: Path, now: dt.datetime, cache: Path | None):
    return validate_logs(logs, make_inventory(), SETTINGS, now, WINDOW_DAYS, cache_dir=cache)


def assert_same(cached, fresh) -> None:
    assert cached.findings == fresh.findings
    assert cached.rows == fresh.rows and cached.batches == fresh.batches
    pd.testing.assert_frame_equal(cached.quarantine, fresh.quarantine)


def test_a_second_run_takes_every_unchanged_day_from_the_cache(tmp_path: Path) -> None:
    logs = write_logs(tmp_path, logs_with_problems(make_inventory()))
    cache = tmp_path / "days"

    first = validate(logs, NOW, cache)
    second = validate(logs, NOW, cache)

    assert first.cached_batches == 0 and second.cached_batches == 3
    assert len(list(cache.glob(f"*{SUFFIX}"))) == 3
    fresh = validate(logs, NOW, None)
    assert {"logs.status", "logs.future_timestamp"} <= {f.rule for f in fresh.findings}
    assert_same(first, fresh)
    assert_same(second, fresh)


def test_a_new_night_validates_the_new_day_and_the_day_whose_strays_changed(
    tmp_path: Path,
) -> None:
    inventory = make_inventory()
    days = logs_with_problems(inventory)
    logs = write_logs(tmp_path, days)
    cache = tmp_path / "days"
    validate(logs, NOW, cache)

    new_day = DAYS[-1] + dt.timedelta(days=1)
    write_logs(tmp_path, {new_day: make_day(new_day, inventory)})
    tonight = validate(logs, LATER, cache)

    # The window is now the 19th–21st: the 18th left it (and the cache), the 21st is new, and
    # the 20th holds a probe that is no longer in the future: only the 19th is reused.
    assert tonight.cached_batches == 1
    assert len(list(cache.glob(f"*{SUFFIX}"))) == 3
    fresh = validate(logs, LATER, None)
    assert "logs.wrong_partition" in {f.rule for f in fresh.findings}
    assert "logs.future_timestamp" not in {f.rule for f in fresh.findings}
    assert_same(tonight, fresh)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "empty"])
def test_a_damaged_entry_is_validated_again_and_rewritten(tmp_path: Path, damage: str) -> None:
    logs = write_logs(tmp_path, logs_with_problems(make_inventory()))
    cache = tmp_path / "days"
    validate(logs, NOW, cache)
    entry = sorted(cache.glob(f"*{SUFFIX}"))[0]
    entry.write_bytes(b"not a cache entry" if damage == "garbage" else b"")

    again = validate(logs, NOW, cache)

    assert again.cached_batches == 2
    assert_same(again, validate(logs, NOW, None))
    assert validate(logs, NOW, cache).cached_batches == 3  # rewritten


@pytest.mark.slow
def test_a_changed_partition_or_inventory_is_validated_again(tmp_path: Path) -> None:
    inventory = make_inventory()
    days = logs_with_problems(inventory)
    logs = write_logs(tmp_path, days)
    cache = tmp_path / "days"
    validate(logs, NOW, cache)

    write_logs(tmp_path, {DAYS[1]: append(days[DAYS[1]], row(DAYS[1], msg_bytes=0))})
    changed = validate(logs, NOW, cache)
    assert changed.cached_batches == 2
    assert_same(changed, validate(logs, NOW, None))

    drained = inventory.assign(status=["active", "active", "active", "drained"])
    moved = validate_logs(logs, drained, SETTINGS, NOW, WINDOW_DAYS, cache_dir=cache)
    assert moved.cached_batches == 0
