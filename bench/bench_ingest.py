"""Benchmark: link statistics over the default window, DuckDB (hulk.ingest) vs pandas.

    .venv/bin/python bench/bench_ingest.py [--logs DIR] [--inventory FILE] [--days N] [--repeat K]

Without --logs, the default data (paper-47 fleet: 47 machines, all 2,162 directed pairs, one
64-byte probe per pair every 10 minutes and one throughput probe per pair per hour cycling through
the configured sizes, `generate.days` days, about 28M + 4.7M rows) is generated into a temporary
folder first, and the generation time is reported separately. It uses `hulk.generate` when that
module offers `build_fleet` and `write_dataset`; otherwise a self-contained numpy generator of the
same shape.

Three implementations of the same statistics (hulk.ingest_reference describes the pandas ones):

- duckdb: `hulk.ingest.link_stats`;
- plain pandas: `link_stats_plain_pandas`, the straightforward version (`pd.read_parquet` on the
  list of files, one DataFrame, filter, group-bys). The 10x target is measured against it;
- streaming pandas: `link_stats_reference`, one file at a time with the window filter pushed into
  the Parquet reads; faster and far lighter than plain pandas, reported as a second ratio.

Each run is a fresh subprocess, so its peak memory (the VmHWM high-water mark of that process,
interpreter and imports included) is its own; the import baseline is reported beside it. All read
the same files (after generation, so from the page cache) and their tables are compared. With
--repeat K there are K rounds, each running every implementation once in turn (side by side, so a
burst of load from other processes hits all of them alike): the fastest time and the largest
peak count. The load average is recorded at the start and end and with every run, since other
processes on a 2-core machine skew the figures (DuckDB's two threads more than pandas' one).
Results are printed and written to bench/out/ingest.json.

Targets: DuckDB under 30 s on 2 cores with peak memory under 2 GB, at least 10x the plain pandas
rate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OUT = REPO / "bench" / "out" / "ingest.json"
TARGET_SECONDS = 30.0
TARGET_PEAK_MB = 2048.0
TARGET_SPEEDUP = 10.0


def _rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB.

    Linux: VmHWM of /proc/self/status, the high-water mark of this program's own memory. (The
    ru_maxrss of getrusage is no good in a subprocess: it keeps the parent's RSS at fork time
    across the exec.)
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (
        1024 if sys.platform != "darwin" else 2**20
    )


# --------------------------------------------------------------------------------------------
# Worker: one implementation, in its own process
# --------------------------------------------------------------------------------------------


# name -> (module, function, label)
IMPLS = {
    "duckdb": ("hulk.ingest", "link_stats", "duckdb"),
    "pandas_plain": ("hulk.ingest_reference", "link_stats_plain_pandas", "plain pandas"),
    "pandas_streaming": ("hulk.ingest_reference", "link_stats_reference", "streaming pandas"),
}
PANDAS_IMPLS = ("pandas_plain", "pandas_streaming")


def worker(impl: str, logs: Path, inventory_file: Path, out: Path) -> dict:
    """Run one implementation once; report wall time and peak memory."""
    import importlib

    import pandas as pd

    from hulk import fileio
    from hulk.settings import load_settings

    module, function, _ = IMPLS[impl]
    run = getattr(importlib.import_module(module), function)
    settings = load_settings(REPO / "params.yaml").ingest
    inventory = pd.read_csv(inventory_file)
    baseline = _rss_mb()
    start = time.perf_counter()
    links = run(logs, inventory, settings)
    seconds = time.perf_counter() - start
    peak = _rss_mb()
    fileio.write_parquet(out, links)
    # Every value at full precision: equal digests mean byte-identical tables.
    digest = hashlib.sha256(links.to_csv(index=False).encode()).hexdigest()
    return {
        "seconds": seconds,
        "peak_rss_mb": peak,
        "import_rss_mb": baseline,
        "links": len(links),
        "table_sha256": digest[:16],
    }


def run_worker(impl: str, logs: Path, inventory_file: Path, out: Path) -> dict:
    """Run `worker` in a fresh interpreter and return what it measured."""
    cmd = [sys.executable, __file__, "--worker", impl, "--logs", str(logs)]
    cmd += ["--inventory", str(inventory_file), "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"{impl} worker failed with exit code {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = elapsed
    result["load_average_after"] = os.getloadavg()[0]
    return result


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def _hulk_generator():
    """hulk.generate's (build_fleet, write_dataset), when the module provides both."""
    try:
        from hulk import generate
    except ImportError:
        return None
    if hasattr(generate, "build_fleet") and hasattr(generate, "write_dataset"):
        return generate.build_fleet, generate.write_dataset
    return None


def generate_with_hulk(folder: Path, days: int) -> tuple[Path, Path, str]:
    """The default data through hulk.generate: the configured preset, seed and end date."""
    from hulk.settings import load_settings

    settings = load_settings(REPO / "params.yaml")
    gen = settings.generate
    build_fleet, write_dataset = _hulk_generator()
    fleet = build_fleet(gen.preset, settings.seed, gen)
    write_dataset(folder, fleet, settings.seed, gen, days, gen.end_date)
    source = f"hulk.generate.write_dataset (preset {gen.preset}, seed {settings.seed})"
    return folder / "logs", folder / "machines.csv", source


def generate_synthetic(folder: Path, days: int) -> tuple[Path, Path, str]:
    """Default-shaped logs with numpy: every directed pair of the paper-47 fleet, probes every
    `probe_interval_s`, throughput probes every `throughput_interval_s` cycling the sizes."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hulk import fileio, schemas
    from hulk.settings import load_settings

    gen = load_settings(REPO / "params.yaml").generate
    seed = 7
    try:
        from hulk.presets import build_fleet

        fleet = build_fleet("paper-47", seed, gen)
        source = "numpy synthetic logs over hulk.presets.build_fleet('paper-47')"
    except ImportError:
        fleet = pd.DataFrame({"node_id": np.arange(47, dtype="int64")})
        source = "numpy synthetic logs over 47 machine ids"
    fileio.write_csv(folder / "machines.csv", fleet)
    ids = fleet["node_id"].to_numpy(dtype="int64")
    n = len(ids)
    rng = np.random.default_rng(seed)
    src, dst = np.meshgrid(ids, ids, indexing="ij")
    off = src != dst
    src, dst = src[off], dst[off]
    pairs = len(src)
    # Per directed pair: base latency, bandwidth, loss rate (asymmetric but related directions).
    if {"lat", "lon"} <= set(fleet.columns) and fleet[["lat", "lon"]].notna().all().all():
        lat = np.radians(fleet["lat"].to_numpy())
        lon = np.radians(fleet["lon"].to_numpy())
        pos = {node: i for i, node in enumerate(ids)}
        i = np.array([pos[s] for s in src])
        j = np.array([pos[d] for d in dst])
        h = (
            np.sin((lat[j] - lat[i]) / 2) ** 2
            + np.cos(lat[i]) * np.cos(lat[j]) * np.sin((lon[j] - lon[i]) / 2) ** 2
        )
        km = 2 * 6371.0 * np.arcsin(np.sqrt(h))
    else:
        km = rng.uniform(0, 12_000, pairs)
    inflation = rng.uniform(gen.route_inflation.low, gen.route_inflation.high, pairs)
    last_mile = rng.uniform(gen.last_mile_ms.low, gen.last_mile_ms.high, pairs) * 2
    base_ms = km / 204.2 * inflation + last_mile
    gbps = np.where(km < 200, 10.0, np.where(km < 2000, 2.0, 1.0)) * rng.uniform(0.5, 1.0, pairs)
    loss = rng.uniform(gen.loss_rate.low, gen.loss_rate.high, pairs)

    per_day_lat = 86_400 // gen.probe_interval_s
    per_day_tp = 86_400 // gen.throughput_interval_s
    sizes = np.asarray(gen.throughput_sizes_bytes, dtype="int64")
    end_day = gen.end_date
    logs = folder / "logs"
    total = 0
    for d in range(days):
        day = end_day - dt.timedelta(days=days - 1 - d)
        day_us = int(pd.Timestamp(day, tz="UTC").value // 1_000)
        k_lat = np.repeat(np.arange(per_day_lat), pairs)
        k_tp = np.repeat(np.arange(per_day_tp), pairs)
        p_lat = np.tile(np.arange(pairs), per_day_lat)
        p_tp = np.tile(np.arange(pairs), per_day_tp)
        t_lat = k_lat * gen.probe_interval_s * 1_000_000 + p_lat * 100_000
        t_tp = k_tp * gen.throughput_interval_s * 1_000_000 + 300_000_000 + p_tp * 100_000
        size_tp = sizes[(k_tp + d * per_day_tp) % len(sizes)]
        pair = np.concatenate([p_lat, p_tp])
        size = np.concatenate([np.full(len(p_lat), 64, dtype="int64"), size_tp])
        ts = day_us + np.concatenate([t_lat, t_tp])
        hour = (ts // 3_600_000_000) % 24
        congestion = 1 + gen.congestion_amplitude * np.clip(
            np.sin((hour - 12) / 24 * 2 * np.pi), 0, 1
        )
        jitter = rng.pareto(gen.jitter_tail_index, len(pair)) * gen.jitter_scale * base_ms[pair]
        elapsed = base_ms[pair] * congestion + jitter + size * 8e-6 / gbps[pair]
        lost = rng.random(len(pair)) < loss[pair]
        status = np.where(
            lost, np.where(rng.random(len(pair)) < 0.8, "timeout", "unreachable"), "ok"
        )
        order = np.argsort(ts, kind="stable")
        table = pa.table(
            {
                "ts": pa.array(ts[order], type=pa.timestamp("us", tz="UTC")),
                "src": pa.array(src[pair][order], type=pa.int64()),
                "dst": pa.array(dst[pair][order], type=pa.int64()),
                "msg_bytes": pa.array(size[order], type=pa.int64()),
                "elapsed_ms": pa.array(np.where(lost, np.nan, elapsed)[order], from_pandas=True),
                "status": pa.array(status[order], type=pa.string()),
            }
        )
        assert table.schema.names == list(schemas.LOGS)
        part = logs / f"day={day.isoformat()}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, part / "part-0.parquet", compression="zstd")
        total += table.num_rows
    assert n == len(ids)
    return logs, folder / "machines.csv", f"{source} ({total:,} rows)"


def inventory_for(logs: Path, folder: Path) -> Path:
    """machines.csv beside the logs, else every machine id seen in the logs."""
    beside = logs.parent / "machines.csv"
    if beside.exists():
        return beside
    import duckdb
    import pandas as pd

    glob = str(logs / "**" / "*.parquet")
    relation = duckdb.sql(
        f"SELECT DISTINCT unnest([src, dst]) AS node_id FROM read_parquet('{glob}') ORDER BY 1"
    )
    assert relation is not None  # a SELECT always gives a relation
    ids = relation.df()
    path = folder / "machines.csv"
    pd.DataFrame({"node_id": ids["node_id"].astype("int64")}).to_csv(path, index=False)
    return path


def count_window_rows(logs: Path) -> dict:
    """Probe rows of the default window (not timed), split by probe kind."""
    import duckdb

    from hulk.ingest import discover_logs, files_in_window, make_window, partition_window_end
    from hulk.settings import load_settings

    settings = load_settings(REPO / "params.yaml").ingest
    log_set = discover_logs(logs)
    end = partition_window_end(log_set)
    if end is None:
        raise SystemExit("the benchmark expects day= partitioned Parquet logs")
    window = make_window(end, settings)
    files = [str(p) for p in files_in_window(log_set, window)]
    row = duckdb.execute(
        "SELECT count(*), count(*) FILTER (WHERE msg_bytes = $probe) FROM read_parquet($files) "
        "WHERE ts BETWEEN $lo::TIMESTAMPTZ AND $hi::TIMESTAMPTZ",
        {
            "files": files,
            "probe": settings.latency_probe_bytes,
            "lo": window.start.isoformat(),
            "hi": window.end.isoformat(),
        },
    ).fetchone()
    assert row is not None  # an aggregate gives one row
    size = sum(os.path.getsize(p) for p in files)
    return {
        "rows": int(row[0]),
        "latency_rows": int(row[1]),
        "throughput_rows": int(row[0] - row[1]),
        "files": len(files),
        "bytes_on_disk": size,
        "window_start": window.start.isoformat(),
        "window_end": window.end.isoformat(),
    }


def compare(a: Path, b: Path) -> dict:
    """How far apart the two link tables are."""
    import numpy as np
    import pandas as pd

    x, y = pd.read_parquet(a), pd.read_parquet(b)
    out: dict = {"same_pairs": bool(x[["src", "dst"]].equals(y[["src", "dst"]]))}
    if not out["same_pairs"]:
        return out
    out["same_samples"] = bool(x["samples"].equals(y["samples"]))
    worst = 0.0
    for column in x.columns:
        if x[column].dtype.kind == "f":
            u, v = x[column].to_numpy(), y[column].to_numpy()
            if not np.array_equal(np.isnan(u), np.isnan(v)):
                out[f"{column}_null_mismatch"] = True
            both = ~np.isnan(u) & ~np.isnan(v)
            rel = np.abs(u[both] - v[both]) / np.maximum(np.abs(v[both]), 1e-12)
            worst = max(worst, float(rel.max(initial=0.0)))
    out["max_rel_diff"] = worst
    return out


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def _summary(name: str, result: dict) -> str:
    return (
        f"{IMPLS[name][2]} {result['seconds']:.2f} s, "
        f"{result['rows_per_second'] / 1e6:.2f} M rows/s, peak {result['peak_rss_mb']:,.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=Path, help="an existing day-partitioned log folder")
    parser.add_argument("--inventory", type=Path, help="machines.csv (default: beside --logs)")
    parser.add_argument("--days", type=int, help="days to generate (default: generate.days)")
    parser.add_argument(
        "--generator",
        choices=["auto", "hulk", "synthetic"],
        default="auto",
        help="hulk.generate when available (auto), or the bench's own numpy generator",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds (every implementation once); fastest counts"
    )
    parser.add_argument("--skip-pandas", action="store_true", help="time DuckDB only")
    parser.add_argument(
        "--skip-streaming", action="store_true", help="skip the streaming pandas reference"
    )
    parser.add_argument("--worker", choices=list(IMPLS), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, args.logs, args.inventory, args.out)))
        return

    from hulk.settings import load_settings

    settings = load_settings(REPO / "params.yaml")
    with tempfile.TemporaryDirectory(prefix="hulk-bench-ingest-") as tmp:
        tmp_dir = Path(tmp)
        report: dict = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "settings": settings.ingest.model_dump(),
            "load_average_at_start": os.getloadavg(),
        }
        if args.logs:
            logs = args.logs.resolve()
            inventory = args.inventory or inventory_for(logs, tmp_dir)
            report["data"] = {"source": f"given: {logs}"}
        else:
            days = args.days or settings.generate.days
            use_hulk = args.generator == "hulk" or (
                args.generator == "auto" and _hulk_generator() is not None
            )
            generate = generate_with_hulk if use_hulk else generate_synthetic
            print(f"generating {days} days of default data into {tmp_dir} …", flush=True)
            start = time.perf_counter()
            logs, inventory, source = generate(tmp_dir, days)
            seconds = time.perf_counter() - start
            report["data"] = {"source": source, "days": days, "generation_seconds": seconds}
            print(f"  generated with {source} in {seconds:.1f} s")
        report["data"].update(count_window_rows(logs))
        rows = report["data"]["rows"]
        print(
            f"probe rows in the window: {rows:,} ({report['data']['latency_rows']:,} latency, "
            f"{report['data']['throughput_rows']:,} throughput) in {report['data']['files']} "
            f"files, {report['data']['bytes_on_disk'] / 2**20:.0f} MiB"
        )

        impls = ["duckdb"]
        if not args.skip_pandas:
            impls += ["pandas_plain"] if args.skip_streaming else list(PANDAS_IMPLS)
        runs: dict[str, list[dict]] = {impl: [] for impl in impls}
        print(
            f"{args.repeat} round(s) of {', '.join(IMPLS[i][2] for i in impls)}, "
            "each run in a fresh process …",
            flush=True,
        )
        for round_number in range(1, args.repeat + 1):
            for impl in impls:
                run = run_worker(impl, logs, inventory, tmp_dir / f"links-{impl}.parquet")
                runs[impl].append(run)
                print(
                    f"  [{round_number}] {IMPLS[impl][2]:>16}: {run['seconds']:7.2f} s wall "
                    f"({run['process_seconds']:.1f} s with interpreter start), "
                    f"{rows / run['seconds'] / 1e6:6.2f} M rows/s, "
                    f"peak RSS {run['peak_rss_mb']:,.0f} MiB (after imports "
                    f"{run['import_rss_mb']:.0f} MiB), {run['links']} links, "
                    f"table {run['table_sha256']}, 1-min load {run['load_average_after']:.2f}",
                    flush=True,
                )
        for impl in impls:
            # The fastest run's time; the largest peak memory of any run.
            result = dict(min(runs[impl], key=lambda r: r["seconds"]))
            result["implementation"] = ".".join(IMPLS[impl][:2])
            result["label"] = IMPLS[impl][2]
            result["identical_tables_across_runs"] = (
                len({r["table_sha256"] for r in runs[impl]}) == 1
            )
            result["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs[impl])
            result["runs_seconds"] = [r["seconds"] for r in runs[impl]]
            result["runs_load_average"] = [r["load_average_after"] for r in runs[impl]]
            result["rows_per_second"] = rows / result["seconds"]
            del result["load_average_after"]
            report[impl] = result
        duck = report["duckdb"]
        checks = {
            "duckdb_under_30s": duck["seconds"] < TARGET_SECONDS,
            "duckdb_under_2GB": duck["peak_rss_mb"] < TARGET_PEAK_MB,
        }
        print(f"best of {args.repeat}: " + " | ".join(_summary(i, report[i]) for i in impls))
        print(
            "duckdb tables byte-identical across runs: "
            f"{duck['identical_tables_across_runs']} ({duck['table_sha256']})"
        )
        pandas_impls = [i for i in impls if i != "duckdb"]
        if pandas_impls:
            report["ratios"] = {}
            report["agreement"] = {}
            for impl in pandas_impls:
                ratio = duck["rows_per_second"] / report[impl]["rows_per_second"]
                report["ratios"][f"duckdb_over_{impl}"] = ratio
                report["agreement"][impl] = compare(
                    tmp_dir / "links-duckdb.parquet", tmp_dir / f"links-{impl}.parquet"
                )
                note = " (the 10x target)" if impl == "pandas_plain" else " (information)"
                print(f"ratio duckdb / {IMPLS[impl][2]} (rows/s): {ratio:.1f}x{note}")
            for impl in pandas_impls:
                print(f"agreement duckdb vs {IMPLS[impl][2]}: {report['agreement'][impl]}")
            if "pandas_plain" in report:
                plain = report["ratios"]["duckdb_over_pandas_plain"]
                checks["duckdb_10x_plain_pandas"] = plain >= TARGET_SPEEDUP
        report["load_average_at_end"] = os.getloadavg()
        print(
            "load average (1, 5, 15 min) at start "
            + ", ".join(f"{x:.2f}" for x in report["load_average_at_start"])
            + ", at end "
            + ", ".join(f"{x:.2f}" for x in report["load_average_at_end"])
        )
        report["targets"] = checks
        print("targets: " + ", ".join(f"{k}={'PASS' if v else 'FAIL'}" for k, v in checks.items()))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
