"""Link statistics from raw logs (hulk.ingest) and its pandas twins (hulk.ingest_reference).

Every test writes a small log folder under tmp_path; the numbers are checkable by hand.
"""

from __future__ import annotations

import datetime as dt
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hulk import schemas
from hulk.errors import InputError
from hulk.ingest import DUPLICATE_RULE, link_stats
from hulk.ingest_reference import link_stats_plain_pandas, link_stats_reference
from hulk.settings import IngestSettings

DAY = pd.Timestamp("2026-11-20", tz="UTC")
MIB = 1 << 20
# A link with α = 5 ms and β = 1 Gbit/s: elapsed = 5 ms + bytes × 8 bits / 1e9 bit/s.
ALPHA_MS, BETA_GBPS = 5.0, 1.0


# The DuckDB implementation and both pandas ones (streaming and plain), for contract tests.
IMPLS = [link_stats, link_stats_reference, link_stats_plain_pandas]
PANDAS_IMPLS = [link_stats_reference, link_stats_plain_pandas]


def exact_ms(msg_bytes: int) -> float:
    return ALPHA_MS + msg_bytes * 8 / (BETA_GBPS * 1e9) * 1e3


def probe(
    minutes: float, src: int, dst: int, elapsed: float | None, size: int = 64, status: str = "ok"
) -> dict:
    """One log row, `minutes` after DAY (negative: earlier days)."""
    return {
        "ts": DAY + pd.Timedelta(minutes=minutes),
        "src": src,
        "dst": dst,
        "msg_bytes": size,
        "elapsed_ms": np.nan if elapsed is None else elapsed,
        "status": status,
    }


def frame_of(rows: list[dict]) -> pd.DataFrame:
    return schemas.conform(pd.DataFrame(rows), schemas.LOGS)


def write_logs(root: Path, rows: list[dict] | pd.DataFrame, fmt: str = "parquet") -> Path:
    """Write rows as `day=YYYY-MM-DD/part-0.parquet` partitions (or one flat CSV file)."""
    frame = rows if isinstance(rows, pd.DataFrame) else frame_of(rows)
    root.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        frame.to_csv(root / "probes.csv", index=False)
        return root
    for day, part in frame.groupby(frame["ts"].dt.strftime("%Y-%m-%d")):
        folder = root / f"day={day}"
        folder.mkdir(exist_ok=True)
        table = pa.Table.from_pandas(part, preserve_index=False)
        pq.write_table(table, folder / "part-0.parquet")
    return root


def inventory(*ids: int) -> pd.DataFrame:
    return pd.DataFrame({"node_id": pd.Series(ids, dtype="int64")})


def tiny_rows() -> list[dict]:
    """Three machines. Pair (1, 2): latency only; pair (1, 3): exact linear α/β data;
    pair (2, 3): only failures; machine 9 is not in the inventory."""
    rows = [
        probe(0, 1, 2, 10.0),
        probe(10, 1, 2, 20.0),
        probe(20, 1, 2, 30.0),
        probe(0, 2, 1, 40.0),
        probe(10, 2, 1, 50.0),
        probe(20, 2, 1, None, status="timeout"),
        probe(0, 2, 3, None, status="unreachable"),
        probe(10, 3, 2, None, status="timeout"),
        probe(0, 1, 9, 1.0),
        probe(0, 1, 1, 0.1),  # a self-probe is ignored
    ]
    for i, size in enumerate([64, MIB, 8 * MIB, 64 * MIB]):
        exact = exact_ms(size)
        # Per size: the exact value, one above, one below (and an outlier) -> median is exact.
        rows += [
            probe(30 + i, 1, 3, exact, size),
            probe(40 + i, 3, 1, exact + 1.0, size),
            probe(50 + i, 3, 1, exact - 1.0, size),
        ]
    rows.append(probe(60, 1, 3, 1_000.0, 8 * MIB))  # a congestion outlier...
    rows.append(probe(61, 1, 3, exact_ms(8 * MIB) - 0.5, 8 * MIB))  # ...does not move the median
    return rows


@pytest.fixture
def ingest() -> IngestSettings:
    return IngestSettings()


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_logs(tmp_path / "logs", tiny_rows())


def row(links: pd.DataFrame, src: int, dst: int) -> pd.Series:
    match = links[(links["src"] == src) & (links["dst"] == dst)]
    assert len(match) == 1, f"expected one row for ({src}, {dst}), got {len(match)}"
    return match.iloc[0]


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def test_hand_checked_latency_stats_pool_both_directions(tiny: Path, ingest) -> None:
    links = link_stats(tiny, inventory(1, 2, 3), ingest)
    r = row(links, 1, 2)
    # Six latency probes over both directions, one lost; ok values 10, 20, 30, 40, 50.
    assert r["samples"] == 6
    assert r["loss_rate"] == pytest.approx(1 / 6)
    assert r["latency_p50_ms"] == pytest.approx(30.0)
    assert r["latency_p95_ms"] == pytest.approx(48.0)  # 40 + 0.8 × (50 − 40)
    assert r["latency_mean_ms"] == pytest.approx(30.0)
    # Latency probes only: no line to fit, α is the latency median and β unknown.
    assert r["alpha_ms"] == pytest.approx(30.0)
    assert pd.isna(r["beta_gbps"])


def test_alpha_beta_recovered_from_exact_linear_data(tiny: Path, ingest) -> None:
    r = row(link_stats(tiny, inventory(1, 2, 3), ingest), 1, 3)
    assert r["alpha_ms"] == pytest.approx(ALPHA_MS, abs=1e-9)
    assert r["beta_gbps"] == pytest.approx(BETA_GBPS, rel=1e-9)
    assert r["samples"] == 3
    assert r["loss_rate"] == 0.0
    assert r["latency_p50_ms"] == pytest.approx(exact_ms(64))


def test_table_shape_dtypes_and_order(tiny: Path, ingest) -> None:
    links = link_stats(tiny, inventory(1, 2, 3), ingest)
    assert list(links.columns) == list(schemas.LINKS)
    assert dict(links.dtypes.astype(str)) == schemas.LINKS
    # Only-failure pair (2, 3), the unknown machine 9 and the self-probe give no row.
    assert list(zip(links["src"], links["dst"], strict=True)) == [(1, 2), (1, 3)]
    assert (links["window_end"] == pd.Timestamp("2026-11-21", tz="UTC")).all()
    assert (
        links["window_start"] == pd.Timestamp("2026-11-21", tz="UTC") - pd.Timedelta(days=90)
    ).all()
    pd.testing.assert_frame_equal(links, link_stats(tiny, inventory(1, 2, 3), ingest))


def test_pair_with_only_failures_has_no_edge(tmp_path: Path, ingest) -> None:
    rows = [
        probe(0, 1, 2, 3.0),
        probe(0, 1, 3, None, status="timeout"),
        probe(10, 3, 1, None, status="unreachable"),
        probe(20, 1, 3, 7.0, MIB),  # a successful throughput probe is not a latency sample
    ]
    links = link_stats(write_logs(tmp_path / "logs", rows), inventory(1, 2, 3), ingest)
    assert list(zip(links["src"], links["dst"], strict=True)) == [(1, 2)]


def test_non_positive_slope_gives_no_bandwidth(tmp_path: Path, ingest) -> None:
    rows = [probe(0, 1, 2, 9.0), probe(10, 1, 2, 4.0, MIB)]  # bigger message arrived sooner
    r = row(link_stats(write_logs(tmp_path / "logs", rows), inventory(1, 2), ingest), 1, 2)
    assert pd.isna(r["beta_gbps"])
    assert r["alpha_ms"] == pytest.approx(9.0 + 5.0 * 64 / (MIB - 64))  # the fit's intercept


def test_window_filtering_and_boundaries(tmp_path: Path) -> None:
    settings = IngestSettings(window_days=2)
    end = DAY + pd.Timedelta(days=1)  # window [2026-11-19 00:00, 2026-11-21 00:00]
    rows = [
        probe(0, 1, 2, 10.0),
        probe(-24 * 60, 1, 2, 20.0),  # exactly at the window start: in
        probe(-24 * 60 - 0.001, 1, 2, 1_000.0),  # a moment earlier: out
        probe(-5 * 24 * 60, 1, 2, 2_000.0),  # days earlier: out
        probe(24 * 60, 2, 1, 30.0),  # exactly at the window end: in
    ]
    logs = write_logs(tmp_path / "logs", rows)
    r = row(link_stats(logs, inventory(1, 2), settings, window_end=end.to_pydatetime()), 1, 2)
    assert r["samples"] == 3
    assert r["latency_mean_ms"] == pytest.approx(20.0)
    assert r["window_start"] == DAY - pd.Timedelta(days=1)
    assert r["window_end"] == end
    # Default end: midnight after the latest partition (day=2026-11-21 holds the last probe).
    r = row(link_stats(logs, inventory(1, 2), settings), 1, 2)
    assert r["window_end"] == DAY + pd.Timedelta(days=2)
    assert r["samples"] == 2  # 2026-11-20 00:00 and 2026-11-21 00:00; the 19th starts too early


def test_partitions_outside_the_window_are_not_read(tmp_path: Path, ingest) -> None:
    logs = write_logs(tmp_path / "logs", [probe(0, 1, 2, 10.0)])
    old = logs / "day=2025-01-01"
    old.mkdir()
    (old / "part-0.parquet").write_bytes(b"not parquet at all")
    r = row(link_stats(logs, inventory(1, 2), ingest), 1, 2)
    assert r["samples"] == 1


def test_naive_window_end_means_utc(tiny: Path, ingest) -> None:
    naive = link_stats(tiny, inventory(1, 2, 3), ingest, window_end=dt.datetime(2026, 11, 21))
    aware = link_stats(tiny, inventory(1, 2, 3), ingest)
    pd.testing.assert_frame_equal(naive, aware)


def test_quarantine_anti_join(tiny: Path, ingest) -> None:
    rows = frame_of(tiny_rows())
    # Quarantine the 40 ms and 50 ms probes of pair (1, 2) (plus an unrelated extra column).
    bad = rows[(rows["src"] == 2) & (rows["dst"] == 1) & rows["elapsed_ms"].notna()]
    quarantine = bad[schemas.LOG_KEY].assign(reason="duplicate")
    r = row(link_stats(tiny, inventory(1, 2, 3), ingest, quarantine=quarantine), 1, 2)
    assert r["samples"] == 4
    assert r["loss_rate"] == pytest.approx(1 / 4)
    assert r["latency_p50_ms"] == pytest.approx(20.0)
    assert r["latency_mean_ms"] == pytest.approx(20.0)
    # A key that matches nothing changes nothing.
    miss = quarantine.assign(msg_bytes=65)
    assert row(link_stats(tiny, inventory(1, 2, 3), ingest, quarantine=miss), 1, 2)["samples"] == 6


@pytest.mark.parametrize("impl", IMPLS)
def test_repeated_probe_counts_once(tmp_path: Path, ingest, impl) -> None:
    rows = tiny_rows()
    # The 10 ms probe of (1, 2) logged twice; validation quarantines the repeat only.
    logs = write_logs(tmp_path / "logs", [*rows, rows[0]])
    repeat = frame_of([rows[0]]).assign(rule="logs.duplicate")
    r = row(impl(logs, inventory(1, 2, 3), ingest, quarantine=repeat), 1, 2)
    assert r["samples"] == 6  # not 7 (both copies) and not 5 (neither)
    assert r["latency_mean_ms"] == pytest.approx(30.0)  # (10 + 20 + 30 + 40 + 50) / 5
    # Quarantined under another rule too: every copy goes.
    both = pd.concat([repeat, repeat.assign(rule="logs.faster_than_light")])
    assert row(impl(logs, inventory(1, 2, 3), ingest, quarantine=both), 1, 2)["samples"] == 5


def test_csv_input_matches_parquet(tmp_path: Path, ingest) -> None:
    parquet = write_logs(tmp_path / "parquet", tiny_rows())
    csv = write_logs(tmp_path / "csv", tiny_rows(), fmt="csv")
    end = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    from_csv = link_stats(csv, inventory(1, 2, 3), ingest, window_end=end)
    pd.testing.assert_frame_equal(from_csv, link_stats(parquet, inventory(1, 2, 3), ingest))
    # Default end for CSV: the latest timestamp.
    latest = frame_of(tiny_rows())["ts"].max()
    assert (link_stats(csv, inventory(1, 2, 3), ingest)["window_end"] == latest).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("impl", IMPLS)
def test_nan_and_infinite_elapsed_times_are_lost(tmp_path: Path, ingest, impl, bad) -> None:
    # Stored as IEEE NaN or ±inf (not null) with status ok. Parquet min/max statistics leave NaN
    # out, so a filter that a query engine simplifies from them (DuckDB turns elapsed_ms < 'inf'
    # into "always true" for a single file whose other values span [1, 9]) would keep the NaN.
    values = [1.0, bad, 5.0, 9.0]
    rows = frame_of([probe(minute, 1, 2, 0.0) for minute in range(len(values))])
    table = pa.Table.from_pandas(rows, preserve_index=False).set_column(
        4, "elapsed_ms", pa.array(values, type=pa.float64(), from_pandas=False)
    )
    folder = tmp_path / "logs" / "day=2026-11-20"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-0.parquet")
    assert pq.read_table(folder / "part-0.parquet")["elapsed_ms"].null_count == 0
    r = row(impl(tmp_path / "logs", inventory(1, 2), ingest), 1, 2)
    assert r["samples"] == 4
    assert r["loss_rate"] == pytest.approx(1 / 4)
    assert r["latency_mean_ms"] == pytest.approx(5.0)
    assert r["latency_p50_ms"] == pytest.approx(5.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_files_with_integer_elapsed_times(tmp_path: Path, ingest, impl) -> None:
    # The first day's file stores whole milliseconds as integers, the next one floats.
    integers = frame_of([probe(-24 * 60, 1, 2, 10.0), probe(-24 * 60 + 10, 2, 1, 12.0)])
    floats = frame_of([probe(0, 1, 2, 30.5), probe(10, 2, 1, 40.5)])
    logs = write_logs(tmp_path / "logs", integers.astype({"elapsed_ms": "int64"}))
    write_logs(logs, floats)
    r = row(impl(logs, inventory(1, 2), ingest), 1, 2)
    assert r["samples"] == 4
    assert r["latency_mean_ms"] == pytest.approx(23.25)
    assert r["latency_p50_ms"] == pytest.approx(21.25)


@pytest.mark.parametrize("impl", IMPLS)
def test_day_with_every_probe_lost_stores_no_elapsed_type(tmp_path: Path, ingest, impl) -> None:
    # A writer may store an all-empty elapsed_ms column with Arrow's null type: validation and
    # ingest accept it (one rule set, hulk.parquet_columns) and count the lost probes.
    lost = frame_of([probe(-24 * 60, 1, 2, None, status="timeout")] * 2)
    folder = tmp_path / "logs" / "day=2026-11-19"
    folder.mkdir(parents=True)
    table = pa.Table.from_pandas(lost, preserve_index=False)
    table = table.set_column(table.schema.get_field_index("elapsed_ms"), "elapsed_ms", pa.nulls(2))
    pq.write_table(table, folder / "part-0.parquet")
    logs = write_logs(tmp_path / "logs", [probe(0, 1, 2, 10.0), probe(10, 2, 1, 20.0)])
    r = row(impl(logs, inventory(1, 2), ingest), 1, 2)
    assert r["samples"] == 4 and r["loss_rate"] == pytest.approx(0.5)
    assert r["latency_p50_ms"] == pytest.approx(15.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_naive_parquet_timestamps_are_utc(tmp_path: Path, ingest, impl) -> None:
    rows = frame_of(tiny_rows())
    naive = write_logs(tmp_path / "naive", rows.assign(ts=rows["ts"].dt.tz_localize(None)))
    utc = write_logs(tmp_path / "utc", rows)
    quarantine = rows.iloc[[3, 4]]  # the 40 ms and 50 ms probes of pair (1, 2)
    for kwargs in ({}, {"quarantine": quarantine}):
        pd.testing.assert_frame_equal(
            impl(naive, inventory(1, 2, 3), ingest, **kwargs),
            link_stats(utc, inventory(1, 2, 3), ingest, **kwargs),
        )
    assert row(impl(naive, inventory(1, 2, 3), ingest, quarantine=quarantine), 1, 2)["samples"] == 4


@pytest.mark.parametrize("impl", IMPLS)
def test_partitions_with_and_without_a_time_zone_read_as_one_window(
    tmp_path: Path, ingest, impl
) -> None:
    # A collector upgraded mid-window: its older days naive (UTC), its newer ones zoned.
    rows = random_logs(5)
    utc = write_logs(tmp_path / "utc", rows)
    mixed = write_logs(tmp_path / "mixed", rows)
    days = sorted(mixed.glob("day=*"))
    assert len(days) == 4
    for day in days[:2]:
        part = pq.read_table(day / "part-0.parquet").to_pandas()
        naive = part.assign(ts=part["ts"].dt.tz_localize(None))
        pq.write_table(pa.Table.from_pandas(naive, preserve_index=False), day / "part-0.parquet")
    ids = inventory(0, 1, 2, 3, 4)
    quarantine = rows.iloc[[0, 1, 2]]
    for kwargs in ({}, {"quarantine": quarantine}):
        pd.testing.assert_frame_equal(
            impl(mixed, ids, ingest, **kwargs), link_stats(utc, ids, ingest, **kwargs)
        )


def random_logs(seed: int, days: int = 4) -> pd.DataFrame:
    """A few machines (one unknown), random latencies, losses, sizes and statuses."""
    rng = np.random.default_rng(seed)
    n = 6_000
    src = rng.integers(0, 6, n)
    dst = rng.integers(0, 6, n)
    size = rng.choice([64, 64, 64, MIB, 8 * MIB], n)
    base = 2.0 + 3.0 * np.minimum(src, dst) + 7.0 * np.maximum(src, dst)
    elapsed = base + size * 8e-6 / rng.choice([0.5, 1.0, 2.5], n) + rng.pareto(2.5, n)
    status = rng.choice(["ok"] * 12 + ["timeout", "unreachable"], n)
    lost = status != "ok"
    start = DAY - pd.Timedelta(days=days - 1)
    seconds = np.sort(rng.integers(0, days * 86_400, n))
    frame = pd.DataFrame(
        {
            "ts": start + pd.to_timedelta(seconds, unit="s"),
            "src": src,
            "dst": dst,
            "msg_bytes": size,
            "elapsed_ms": np.where(lost, np.nan, elapsed),
            "status": status,
        }
    )
    frame.loc[frame.index[::97], "status"] = "ok"  # some "ok" rows without an elapsed time
    return schemas.conform(frame, schemas.LOGS)


@pytest.mark.parametrize("pandas_impl", PANDAS_IMPLS)
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_duckdb_matches_pandas_reference(tmp_path: Path, fmt: str, pandas_impl) -> None:
    settings = IngestSettings(window_days=3)
    frame = random_logs(seed=11)
    logs = write_logs(tmp_path / "logs", frame, fmt=fmt)
    quarantine = frame.sample(300, random_state=1)[schemas.LOG_KEY]
    fleet = inventory(0, 1, 2, 3, 4)  # machine 5 is unknown
    end = DAY + pd.Timedelta(hours=12)
    for kwargs in ({}, {"quarantine": quarantine, "window_end": end.to_pydatetime()}):
        fast = link_stats(logs, fleet, settings, **kwargs)
        slow = pandas_impl(logs, fleet, settings, **kwargs)
        assert len(fast) == 10
        pd.testing.assert_frame_equal(fast, slow, check_exact=False, rtol=1e-9, atol=1e-9)


def test_passes_over_the_pairs_give_the_same_table(tmp_path: Path, monkeypatch) -> None:
    """A fleet with more pairs than `max_pairs_per_pass` is summarised in several passes (a
    share of the pairs each): the same bytes as one pass, duplicates and quarantine included."""
    import hulk.ingest as ingest_module

    frame = random_logs(seed=5)
    frame = pd.concat([frame, frame.iloc[[10, 20]]]).sort_values("ts", kind="stable")
    logs = write_logs(tmp_path / "logs", frame)
    quarantine = pd.concat([frame.iloc[[10, 20]], frame.sample(200, random_state=2)])
    fleet = inventory(0, 1, 2, 3, 4, 5)
    one = link_stats(logs, fleet, IngestSettings(window_days=3), quarantine=quarantine)
    seen: list[int] = []
    passes = ingest_module._passes
    monkeypatch.setattr(
        ingest_module, "_passes", lambda *args: seen.append(passes(*args)) or seen[-1]
    )
    split = link_stats(
        logs, fleet, IngestSettings(window_days=3, max_pairs_per_pass=4), quarantine=quarantine
    )
    assert seen == [math.ceil(21 / 4)]  # 15 pairs and 6 self-probes in the newest partition
    assert len(one) == 15
    pd.testing.assert_frame_equal(split, one, check_exact=True)


@pytest.mark.parametrize("pandas_impl", PANDAS_IMPLS)
def test_reference_agrees_on_the_tiny_log(tiny: Path, ingest, pandas_impl) -> None:
    fast = link_stats(tiny, inventory(1, 2, 3), ingest)
    slow = pandas_impl(tiny, inventory(1, 2, 3), ingest)
    pd.testing.assert_frame_equal(fast, slow, check_exact=False, rtol=1e-9, atol=1e-9)


def test_plain_and_streaming_pandas_agree(tmp_path: Path) -> None:
    # Same statistics code, different readers (one file at a time, or the whole window at once):
    # the same table, with a quarantine and repeated probes too. (Not bit for bit: pandas sums
    # the mean in row order, which differs once repeated probes are sorted out.)
    settings = IngestSettings(window_days=3)
    frame = random_logs(seed=23)
    repeat = frame.iloc[[5, 50, 500]][schemas.LOG_KEY].assign(rule="logs.duplicate")
    logs = write_logs(tmp_path / "logs", pd.concat([frame, frame.iloc[[5, 50, 500]]]))
    quarantine = pd.concat([frame.sample(200, random_state=2)[schemas.LOG_KEY], repeat])
    fleet = inventory(0, 1, 2, 3, 4)
    for kwargs in ({}, {"quarantine": quarantine}):
        plain = link_stats_plain_pandas(logs, fleet, settings, **kwargs)
        streaming = link_stats_reference(logs, fleet, settings, **kwargs)
        assert len(plain) == 10
        pd.testing.assert_frame_equal(plain, streaming, check_exact=False, rtol=1e-12, atol=0)
        fast = link_stats(logs, fleet, settings, **kwargs)
        pd.testing.assert_frame_equal(fast, plain, check_exact=False, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_no_log_files(tmp_path: Path, ingest, impl) -> None:
    (tmp_path / "logs" / "day=2026-11-20").mkdir(parents=True)
    (tmp_path / "logs" / "README.txt").write_text("nothing here")
    with pytest.raises(InputError, match=r"logs: \[logs\.no_files\]") as err:
        impl(tmp_path / "logs", inventory(1, 2), ingest)
    assert err.value.path == str(tmp_path / "logs")
    with pytest.raises(InputError, match=r"\[logs\.no_files\]"):
        impl(tmp_path / "missing", inventory(1, 2), ingest)


@pytest.mark.parametrize("impl", IMPLS)
def test_missing_column_names_column_and_file(tmp_path: Path, ingest, impl) -> None:
    logs = write_logs(tmp_path / "logs", frame_of(tiny_rows()).drop(columns="elapsed_ms"))
    with pytest.raises(InputError, match=r"\[logs.schema\] column 'elapsed_ms'") as err:
        impl(logs, inventory(1, 2, 3), ingest)
    assert err.value.path is not None and err.value.path.endswith(".parquet")


@pytest.mark.parametrize("impl", IMPLS)
def test_mistyped_parquet_column(tmp_path: Path, ingest, impl) -> None:
    rows = frame_of(tiny_rows())
    logs = write_logs(tmp_path / "logs", rows.assign(src=rows["src"].astype(str)))
    with pytest.raises(InputError, match=r"\[logs.schema\] column 'src' must be an integer") as err:
        impl(logs, inventory(1, 2, 3), ingest)
    assert "day=2026-11-20" in str(err.value.path)


@pytest.mark.parametrize("impl", IMPLS)
def test_csv_missing_and_mistyped_columns(tmp_path: Path, ingest, impl) -> None:
    rows = frame_of(tiny_rows())
    logs = write_logs(tmp_path / "a", rows.drop(columns="status"), fmt="csv")
    with pytest.raises(InputError, match=r"probes.csv: \[logs.schema\] column 'status'"):
        impl(logs, inventory(1, 2, 3), ingest)
    bad = rows.astype({"msg_bytes": "object"})
    bad.loc[3, "msg_bytes"] = "lots"
    logs = write_logs(tmp_path / "b", bad, fmt="csv")
    with pytest.raises(InputError, match=r"probes.csv: \[logs.schema\] column 'msg_bytes'"):
        impl(logs, inventory(1, 2, 3), ingest)


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_window(tiny: Path, ingest, impl) -> None:
    with pytest.raises(InputError, match=r"logs: \[empty-window\] window \[2020-"):
        impl(tiny, inventory(1, 2, 3), ingest, window_end=dt.datetime(2020, 6, 1))
    # A partition in the window, but its only probe comes after the window's end.
    late = write_logs(tiny.parent / "late", [probe(12 * 60, 1, 2, 10.0)])
    with pytest.raises(InputError, match=r"\[empty-window\].*no probe falls in the window"):
        impl(late, inventory(1, 2), ingest, window_end=DAY + pd.Timedelta(hours=6))
    # ...and probes exist, but none between inventory machines.
    with pytest.raises(InputError, match=r"\[empty-window\].*outside the inventory are removed"):
        impl(tiny, inventory(7, 8), ingest)


def test_mixed_formats_and_bad_partition_names(tmp_path: Path, ingest) -> None:
    logs = write_logs(tmp_path / "logs", tiny_rows())
    frame_of(tiny_rows()).to_csv(logs / "extra.csv", index=False)
    with pytest.raises(InputError, match=r"\[mixed-formats\]"):
        link_stats(logs, inventory(1, 2, 3), ingest)
    # A stray copy of a partition's file in a folder that is no partition, beside the others.
    logs = write_logs(tmp_path / "stray", tiny_rows())
    (logs / "2026-11-21").mkdir()
    shutil.copy(logs / "day=2026-11-20" / "part-0.parquet", logs / "2026-11-21")
    with pytest.raises(InputError, match=r"\[mixed-layout\] 1 log file\(s\) lie outside"):
        link_stats(logs, inventory(1, 2, 3), ingest)
    for i, name in enumerate(["day=20261120", "day=2026-13-01"]):
        logs = write_logs(tmp_path / f"bad{i}", tiny_rows())
        (logs / "day=2026-11-20").rename(logs / name)
        with pytest.raises(InputError, match=rf"\[partition-name\] partition folder '{name}'"):
            link_stats(logs, inventory(1, 2, 3), ingest)


def test_unreadable_file_in_the_window(tiny: Path, ingest) -> None:
    (tiny / "day=2026-11-20" / "part-1.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match=r"part-1.parquet: \[logs.readable\]"):
        link_stats(tiny, inventory(1, 2, 3), ingest)


def test_result_does_not_depend_on_thread_count(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs", random_logs(seed=5))
    one = link_stats(logs, inventory(0, 1, 2, 3, 4, 5), IngestSettings(threads=1))
    four = link_stats(logs, inventory(0, 1, 2, 3, 4, 5), IngestSettings(threads=4))
    pd.testing.assert_frame_equal(one, four, check_exact=True)


@pytest.mark.parametrize("impl", IMPLS)
def test_no_successful_latency_probe_gives_an_empty_table(tmp_path: Path, ingest, impl) -> None:
    rows = [probe(0, 1, 2, 9.0, MIB), probe(10, 1, 2, None, status="timeout")]
    links = impl(write_logs(tmp_path / "logs", rows), inventory(1, 2), ingest)
    assert len(links) == 0
    assert dict(links.dtypes.astype(str)) == schemas.LINKS


@pytest.mark.parametrize("impl", IMPLS)
def test_everything_quarantined_is_an_empty_window(tmp_path: Path, ingest, impl) -> None:
    rows = frame_of([probe(0, 1, 2, 3.0), probe(10, 2, 1, 4.0)])
    logs = write_logs(tmp_path / "logs", rows)
    with pytest.raises(
        InputError, match=r"none of the 2 probes in the window is left once quarantined"
    ):
        impl(logs, inventory(1, 2), ingest, quarantine=rows)


HOURS_6 = pd.Timedelta(hours=6)


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_window_with_repeated_probes_elsewhere(tmp_path: Path, ingest, impl) -> None:
    # A repeated probe (quarantined once as a duplicate) outside the window: the count that
    # explains the empty window reads the same columns as the statistics.
    rows = frame_of([probe(12 * 60, 1, 2, 3.0), probe(12 * 60, 1, 2, 3.0)])
    logs = write_logs(tmp_path / "logs", rows)
    quarantine = rows.iloc[[1]].assign(rule=DUPLICATE_RULE)
    with pytest.raises(InputError, match=r"\[empty-window\].*no probe falls in the window"):
        impl(logs, inventory(1, 2), ingest, quarantine=quarantine, window_end=DAY + HOURS_6)
