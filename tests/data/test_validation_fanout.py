"""The log validation fanned out over day partitions: any executor gives the same findings,
quarantine, counts and Data Docs as validating the days one after another in this process.

The data are those of test_validation (four machines, three days of hourly probes), with bad
rows on every day so that the examples and quarantine of several partitions are merged, a pair
slower one way (latencies from every day) and a machine that stops answering (last probes).
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.validation import run_validation
from hulk.validation.logs import merge_days, plan_days, validate_log_day
from tests.data.test_validation import (
    DAYS,
    LATE,
    MID,
    NOW,
    SETTINGS,
    WINDOW_DAYS,
    append,
    make_days,
    make_inventory,
    row,
    write_logs,
)


def write_data(root: Path) -> None:
    inventory = make_inventory()
    fileio.write_csv(root / schemas.INVENTORY_FILE, inventory)
    days = make_days(inventory)
    for n, (day, frame) in enumerate(days.items()):
        loops = [row(day, f"0{k}:10:00", src=1, dst=1, elapsed_ms=0.3) for k in range(4)]
        bad = [row(day, "05:00:00", src=90 + n, dst=0), row(day, "06:00:00", elapsed_ms=1.0)]
        frame = append(frame, *loops, *bad, frame.iloc[7].to_dict())
        forward = (frame["src"] == 0) & (frame["dst"] == 2) & (frame["msg_bytes"] == 64)
        frame.loc[forward & (frame["elapsed_ms"] > 10), "elapsed_ms"] = 60.0 + n
        days[day] = frame
    last = days[LATE]
    touches = (last["src"] == 3) | (last["dst"] == 3)
    last.loc[touches, "status"] = "timeout"
    last.loc[touches, "elapsed_ms"] = np.nan
    write_logs(root, days)


def outputs(root: Path) -> dict:
    """What a validation wrote, without what differs between any two runs (ids, load times)."""

    def stable(value: object) -> object:
        if isinstance(value, dict):
            skip = {"id", "ge_load_time", "validation_id", "checkpoint_id"}
            return {k: stable(v) for k, v in value.items() if k not in skip}
        if isinstance(value, list):
            return [stable(v) for v in value]
        return value

    results = root / "validation" / "gx" / "uncommitted" / "validations"
    docs = root / "validation" / "docs" / "validations"
    return {
        "report": json.loads((root / "validation" / "report.json").read_text()),
        "quarantine_written": (root / schemas.QUARANTINE_FILE).exists(),
        "results": {
            p.relative_to(results).as_posix(): stable(json.loads(p.read_text()))
            for p in sorted(results.rglob("*.json"))
        },
        "docs": sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.html")),
    }


@pytest.mark.slow
def test_a_process_pool_validates_like_one_process(tmp_path):
    write_data(tmp_path)
    sequential = run_validation(tmp_path, SETTINGS, NOW, WINDOW_DAYS)
    before = outputs(tmp_path)
    # The same days again from the day cache: the same findings, files and Data Docs pages.
    again = run_validation(tmp_path, SETTINGS, NOW, WINDOW_DAYS)
    reused = outputs(tmp_path)
    assert again.findings == sequential.findings and again.log_batches_cached == 3
    assert reused["report"]["counts"].pop("log_batches_cached") == 3
    assert before["report"]["counts"].pop("log_batches_cached") == 0
    assert reused == before
    shutil.rmtree(tmp_path / schemas.VALIDATION_DIR / schemas.VALIDATED_DAYS)  # validate anew
    progress = []
    spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
    with ProcessPoolExecutor(2, mp_context=spawn) as pool:
        parallel = run_validation(
            tmp_path,
            SETTINGS,
            NOW,
            WINDOW_DAYS,
            progress=lambda d, t: progress.append((d, t)),
            map_days=pool.map,
        )
        after = outputs(tmp_path)
        # A file that cannot be read fails the run from a worker process too, naming it.
        broken = tmp_path / schemas.LOGS_DIR / f"day={MID.isoformat()}" / "probes.parquet"
        pq.write_table(pq.read_table(broken).drop_columns(["elapsed_ms"]), broken)
        with pytest.raises(InputError, match="'elapsed_ms'") as caught:
            run_validation(tmp_path, SETTINGS, NOW, WINDOW_DAYS, map_days=pool.map)
    assert (caught.value.path, caught.value.rule) == (str(broken), "logs.schema")

    assert progress == [(1, 3), (2, 3), (3, 3)]
    assert parallel.findings == sequential.findings
    expected = {
        "logs.unknown_machine",
        "logs.self_loop",
        "logs.duplicate",
        "logs.duplicate_conflict",  # the 1 ms probe at 06:00 shares its key with the hourly one
        "logs.faster_than_light",
        "logs.stale_machine",
        "logs.asymmetric_pair",
    }
    assert {f.rule for f in sequential.findings} == expected
    loops = next(f for f in sequential.findings if f.rule == "logs.self_loop")
    assert loops.count == 12 and len(loops.examples) == SETTINGS.examples  # from two days
    pd.testing.assert_frame_equal(parallel.quarantine, sequential.quarantine)
    # An unknown machine is an error: the quarantine is in the report, not published.
    assert not parallel.ok and not after["quarantine_written"]
    assert after["report"]["counts"].pop("log_batches_cached") == 0
    assert after == before
    # Data Docs: a page per day partition, whichever process validated it.
    assert [p for p in after["docs"] if "/logs/" in p] == [
        f"hulk/logs/day={day.isoformat()}/20261121T000000.000000Z/hulk-logs.html" for day in DAYS
    ]
    assert after["report"]["counts"]["log_batches"] == 3
    assert after["report"]["suites"]["logs"]["batches"] == 3


def test_outcomes_merge_in_day_order_whatever_order_they_come_in(tmp_path):
    write_data(tmp_path)
    inventory = make_inventory()
    plan = plan_days(tmp_path / schemas.LOGS_DIR, inventory, SETTINGS, NOW, WINDOW_DAYS)
    outcomes = [validate_log_day(day) for day in reversed(plan.days)]  # any order of work
    merged = merge_days(plan, outcomes)
    random.Random(3).shuffle(outcomes)
    shuffled = merge_days(plan, outcomes)
    assert shuffled.findings == merged.findings
    pd.testing.assert_frame_equal(shuffled.quarantine, merged.quarantine)
    assert merged.quarantine["file"].map(lambda f: Path(f).parent.name).is_monotonic_increasing
    with pytest.raises(ValueError, match="do not match"):
        merge_days(plan, outcomes[:2])
