"""Impossible latencies and conflicting copies of a probe (issue 15, items 4 and 5).

Like the other bad rows of usable logs (negative times, self-loops, …) they are quarantined with
a warning naming the rule, the file and the rows, and the link table is built without them:
0 ms (no link answers instantly, within a city or not), ±inf, and times above max_elapsed_ms;
and copies of one probe (same ts, src, dst, msg_bytes) whose values differ: every copy is
quarantined and none is kept, by validation and by ingest alike. Exact repeats keep one copy.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hulk import schemas
from hulk.ingest import link_stats
from hulk.settings import IngestSettings, ValidateSettings
from hulk.validation import validate_logs
from tests.data.test_validation import (
    MID,
    NOW,
    WINDOW_DAYS,
    append,
    by_rule,
    check_logs,
    make_days,
    make_inventory,
    row,
    rules,
    write_logs,
)
from tests.faults.conftest import invoke

INGEST = IngestSettings(window_days=WINDOW_DAYS)
END = pd.Timestamp(NOW)


def _links(logs: Path, quarantine: pd.DataFrame | None = None) -> pd.DataFrame:
    return link_stats(logs, make_inventory(), INGEST, quarantine=quarantine, window_end=END)


@pytest.mark.parametrize(
    ("bad_row", "rule", "reason"),
    [
        # One case per rule runs in the fast suite; the variants of a rule are marked slow.
        pytest.param(
            row(MID, src=0, dst=1, elapsed_ms=0.0),  # one city
            "logs.elapsed_zero",
            "elapsed_ms 0",
            marks=pytest.mark.slow,
        ),
        (row(MID, elapsed_ms=0.0), "logs.elapsed_zero", "elapsed_ms 0"),  # Beijing → Tokyo
        pytest.param(
            row(MID, elapsed_ms=-0.0), "logs.elapsed_zero", "elapsed_ms 0", marks=pytest.mark.slow
        ),
        (row(MID, elapsed_ms=math.inf), "logs.elapsed_infinite", "infinite"),
        pytest.param(
            row(MID, status="timeout", elapsed_ms=math.inf),
            "logs.elapsed_infinite",
            "infinite",
            marks=pytest.mark.slow,
        ),
        (row(MID, elapsed_ms=1e9), "logs.elapsed_too_large", "above max_elapsed_ms (60000 ms)"),
    ],
)
def test_impossible_latency_is_quarantined(tmp_path: Path, bad_row, rule, reason) -> None:
    days = make_days()
    clean = write_logs(tmp_path / "clean", days)
    days[MID] = append(days[MID], bad_row)
    logs, result = check_logs(tmp_path, days)

    hit = by_rule(result.findings, rule)
    assert (hit.severity, hit.file, hit.count) == ("warning", str(logs), 1)
    assert reason in hit.message and f"day={MID.isoformat()}" in hit.message
    example = hit.examples[0]
    assert example["file"].endswith(f"day={MID.isoformat()}/probes.parquet")
    assert example["row"] == len(days[MID]) - 1
    json.dumps(hit.to_dict(), allow_nan=False)
    assert result.quarantine["rule"].tolist() == [rule]
    assert not [f for f in result.findings if f.severity == "error"]
    # The link table is the one without the impossible probe.
    pd.testing.assert_frame_equal(_links(logs, result.quarantine), _links(clean))


def test_infinite_time_is_quoted_in_the_examples(tmp_path: Path) -> None:
    days = make_days()
    days[MID] = append(days[MID], row(MID, elapsed_ms=math.inf))
    _, result = check_logs(tmp_path, days)
    assert by_rule(result.findings, "logs.elapsed_infinite").examples[0]["elapsed_ms"] == "inf"
    assert "logs.elapsed_too_large" not in rules(result.findings)  # inf has its own rule


def test_max_elapsed_ms_is_a_setting(tmp_path: Path) -> None:
    days = make_days()
    days[MID] = append(days[MID], row(MID, elapsed_ms=150.0), row(MID, "12:00:01", elapsed_ms=99))
    logs = write_logs(tmp_path, days)
    strict = ValidateSettings(max_elapsed_ms=100.0)
    result = validate_logs(logs, make_inventory(), strict, NOW, WINDOW_DAYS)
    hit = by_rule(result.findings, "logs.elapsed_too_large")
    # Every 1 MB probe from or to San Jose takes longer than 100 ms too.
    assert hit.examples[0]["elapsed_ms"] > 100.0 and "(100 ms)" in hit.message
    assert 150.0 in set(result.quarantine["elapsed_ms"])
    assert 99.0 not in set(result.quarantine["elapsed_ms"])


# --- duplicates -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        ({"elapsed_ms": 80.0}, "ok 80 ms"),
        ({"status": "timeout", "elapsed_ms": np.nan}, "timeout no time"),
    ],
)
def test_conflicting_copies_are_all_quarantined(tmp_path: Path, change, shown) -> None:
    days = make_days()
    original = days[MID].iloc[5].to_dict()  # one probe at 00:00 of the day
    without = write_logs(tmp_path / "without", {**days, MID: days[MID].drop(index=5)})
    days[MID] = append(days[MID], {**original, **change})
    logs, result = check_logs(tmp_path, days)

    hit = by_rule(result.findings, "logs.duplicate_conflict")
    assert (hit.severity, hit.file, hit.count) == ("warning", str(logs), 2)
    assert "none is kept" in hit.message
    assert f"{original['src']}->{original['dst']}" in hit.message
    assert f"ok {original['elapsed_ms']:g} ms" in hit.message and shown in hit.message
    assert [e["row"] for e in hit.examples] == [5, len(days[MID]) - 1]  # side by side
    assert "logs.duplicate" not in rules(result.findings)
    assert result.quarantine["rule"].tolist() == ["logs.duplicate_conflict"] * 2
    # Ingest keeps what validation kept: neither copy.
    pd.testing.assert_frame_equal(_links(logs, result.quarantine), _links(without))


def test_exact_repeat_keeps_the_first_copy(tmp_path: Path) -> None:
    days = make_days()
    clean = write_logs(tmp_path / "clean", days)
    days[MID] = append(days[MID], days[MID].iloc[5].to_dict())
    logs, result = check_logs(tmp_path, days)
    hit = by_rule(result.findings, "logs.duplicate")
    assert hit.count == 1 and "the first is kept" in hit.message
    assert result.quarantine["row"].tolist() == [len(days[MID]) - 1]
    pd.testing.assert_frame_equal(_links(logs, result.quarantine), _links(clean))


@pytest.mark.slow
def test_bad_latencies_on_the_command_line(generated: Path, params: Path) -> None:
    assert invoke("--params", params, "validate").exit_code == 0
    assert invoke("--params", params, "ingest").exit_code == 0
    good = pd.read_parquet(generated / schemas.LINKS_FILE).set_index(["src", "dst"])
    day = sorted((generated / schemas.LOGS_DIR).iterdir())[-1] / "probes.parquet"
    frame = pd.read_parquet(day)
    ok = frame.index[(frame["status"] == "ok") & (frame["msg_bytes"] == 64)]
    extra = frame.loc[ok[:3]].assign(ts=lambda f: f["ts"] + pd.Timedelta(seconds=1))
    extra["elapsed_ms"] = [0.0, math.inf, 1e9]
    conflict = frame.loc[ok[[10]]].assign(elapsed_ms=lambda f: f["elapsed_ms"] + 100)
    pd.concat([frame, extra, conflict], ignore_index=True).to_parquet(day, index=False)

    result = invoke("--params", params, "validate")
    assert result.exit_code == 0, result.output
    for rule in ("elapsed_zero", "elapsed_infinite", "elapsed_too_large", "duplicate_conflict"):
        assert f"{generated / schemas.LOGS_DIR}: [logs.{rule}]" in result.output
    assert invoke("--params", params, "ingest").exit_code == 0
    links = pd.read_parquet(generated / schemas.LINKS_FILE).set_index(["src", "dst"])
    changed = links.compare(good)
    # Only the conflicting probe's pair changed: one probe fewer, none of its values.
    a, b = sorted(frame.loc[ok[10], ["src", "dst"]].astype(int))
    assert set(changed.index) <= {(a, b)}
    assert links.loc[(a, b), "samples"] == good.loc[(a, b), "samples"] - 1
    assert links["latency_mean_ms"].max() < 1e4
