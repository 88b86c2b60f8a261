"""Synthetic latency logs for a fleet: a deterministic, vectorised network model.

The links (every property below that does not depend on the day) are built in
`hulk.generate_network`; this module draws each day's probes from them, the link statistics they
imply (`expected_links`), and writes and extends datasets on disk.

Every directed probe pair (src → dst) is one link of the model. The one-way time of a message of
`b` bytes sent at UTC time `t` is

    elapsed(b, t) = base × (1 + A·C(t) + s·J) + b × 8 / bandwidth

- base = great-circle distance / 204.2 km/ms (light in fiber, `ValidateSettings.fiber_km_per_ms`)
  × route inflation (per pair, uniform in `route_inflation`, ≥ 1) + last mile of each endpoint
  (per machine, uniform in `last_mile_ms`). Machines of one city share coordinates, so a
  same-city pair costs its two last miles (0.2–2 ms with the defaults), never zero;
- transfer = b × 8 / bandwidth, bandwidth per pair by tier — same city 10 Gbit/s, same country
  2, same continent 1, intercontinental 0.3 — times log-normal noise (σ = 0.25);
- congestion A·C(t) with A = `congestion_amplitude` and C(t) the mean over both endpoints of a
  daily cycle 0.5·(1 + cos(2π(local hour − 20)/24)), local hour = UTC hour + longitude / 15:
  each endpoint's evening (20:00) adds up to A of the base, its morning nothing;
- jitter s·J with s = `jitter_scale` and J ~ Pareto(`jitter_tail_index`) (numpy's Lomax form,
  J ≥ 0, heavy-tailed): a probe is never faster than base ≥ distance / 204.2 km/ms;
- elapsed times are rounded *up* to the microsecond, so rounding never beats the fiber floor.

A probe's status: `unreachable` on a pair blocked by network policy (every probe, both ways);
else `timeout` while either endpoint is in an outage window or when the probe is lost (per-pair
loss rate, uniform in `loss_rate`); else `ok`. Only `ok` probes carry an elapsed time.

Blocking: on a fleet that lies within the twelve locations of `paper-47` (every machine's city
is one of them: the preset, or an imported copy of the paper's fleet) pairs are blocked like in
the published fleet, whose edges were measured from the Chinese, Californian and Tokyo machines:
pairs among the European, Indian and Brazilian machines and between those and Tokyo have no
edge, China ↔ abroad and California ↔ abroad pairs are blocked 40% of the time, China ↔ China
20% (≈ 45% of the 1,081 pairs in all). Other fleets block a `blocked_pair_fraction` share of
the pairs at random. Same-city pairs are never blocked (so with sampled probing the share of
blocked probed pairs is below `blocked_pair_fraction`).

Outages: per machine and UTC day, Poisson(`outages_per_machine` / `days`) windows start at a
uniform time of the day and last `outage_hours` (a Poisson process: independent of the window).

Probes: a 64-byte latency probe per directed pair every `probe_interval_s` and a throughput probe
every `throughput_interval_s`, cycling through `throughput_sizes_bytes`; probe times are aligned
to the Unix epoch plus a per-pair phase (up to a minute), so any window holds the same probes.
Fleets of more than `max_probe_peers` + 1 machines do not probe a full mesh: each machine probes
its own city plus a random sample of other machines up to `max_probe_peers` peers; when the
reachable probed graph falls apart (or policy isolates a machine), one link per stray component
to the largest one is added, and unblocked if it has to be. With `probing: sites` (any fleet
size) each machine probes every machine of its own site (city) and one machine in each of
`probe_sites` other sites drawn at random: the shape of the `sites-10000` preset, whose link
count grows with machines × (site size + `probe_sites`), not machines² (same repair).

Determinism: link properties are hashes of (seed, node ids), so they do not depend on the
window; the probes of a day come from `SeedSequence((seed, day ordinal))` (spawned into probe
and outage streams), so appending a day later gives exactly what a longer window would contain.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import shutil
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.generate_network import (
    FIBER_KM_PER_MS,
    TAG_GLITCH,
    Network,
    build_network,
    prepare_inventory,
)
from hulk.presets import PRESETS, build_fleet
from hulk.settings import LATENCY_PROBE_BYTES, GenerateSettings

__all__ = [
    "FIBER_KM_PER_MS",
    "PRESETS",
    "append_day",
    "build_fleet",
    "expected_links",
    "generate_day",
    "read_generation",
    "require_generated",
    "write_dataset",
]

PROBES_FILE = "probes.parquet"
DAY_US = 86_400_000_000
EPOCH = dt.date(1970, 1, 1)
ROUNDING_MS = 0.0005  # mean effect of rounding elapsed times up to the microsecond
_DAY_DIR = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")


def _day_streams(seed: int, day: dt.date) -> tuple[np.random.Generator, np.random.Generator]:
    """(probe, outage) generators of one UTC day: SeedSequence((seed, day ordinal)) spawned."""
    probe, outage = np.random.SeedSequence([seed, day.toordinal()]).spawn(2)
    return np.random.default_rng(probe), np.random.default_rng(outage)


# --- probes of one day ----------------------------------------------------------------------


def _schedule(phase_us: np.ndarray, interval_us: int, start_us: int):
    """(pair index, probe number k, ts) of every probe phase + k·interval within the day."""
    first = -((phase_us - start_us) // interval_us)  # ceil((start - phase) / interval)
    stop = -((phase_us - start_us - DAY_US) // interval_us)
    counts = stop - first
    pair = np.repeat(np.arange(len(phase_us)), counts)
    k = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(len(pair))
    return pair, k, phase_us[pair] + k * interval_us


def _outages(
    seed: int, settings: GenerateSettings, n: int, day: dt.date
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(machine position, start µs, end µs) of the outage windows that start on `day`."""
    _, rng = _day_streams(seed, day)
    rate = settings.outages_per_machine / settings.days
    counts = rng.poisson(rate, size=n)
    machine = np.repeat(np.arange(n), counts)
    start = _day_start_us(day) + np.floor(rng.random(machine.size) * DAY_US).astype(np.int64)
    hours = rng.uniform(settings.outage_hours.low, settings.outage_hours.high, machine.size)
    return machine, start, start + np.round(hours * 3.6e9).astype(np.int64)


def _day_start_us(day: dt.date) -> int:
    return (day - EPOCH).days * DAY_US


def _day_frame(net: Network, day: dt.date, seed: int, settings: GenerateSettings) -> pd.DataFrame:
    start = _day_start_us(day)
    pair, _, ts = _schedule(net.phase_latency_us, settings.probe_interval_s * 1_000_000, start)
    size = np.full(pair.size, LATENCY_PROBE_BYTES, dtype=np.int64)
    sizes = np.asarray(settings.throughput_sizes_bytes, dtype=np.int64)
    if sizes.size:
        interval = settings.throughput_interval_s * 1_000_000
        t_pair, t_k, t_ts = _schedule(net.phase_throughput_us, interval, start)
        pair = np.concatenate([pair, t_pair])
        ts = np.concatenate([ts, t_ts])
        size = np.concatenate([size, sizes[t_k % sizes.size]])
    src, dst = net.node_id[net.src[pair]], net.node_id[net.dst[pair]]
    order = np.lexsort((size, dst, src, ts))
    pair, ts, size, src, dst = pair[order], ts[order], size[order], src[order], dst[order]

    rng, _ = _day_streams(seed, day)
    jitter = rng.pareto(settings.jitter_tail_index, size=pair.size)
    lost = rng.random(pair.size) < net.loss[pair]
    angle = 2.0 * np.pi * ((ts - start) / DAY_US) + net.psi[pair]
    congestion = 0.5 + 0.5 * net.rho[pair] * np.cos(angle)
    elapsed = (
        net.base_ms[pair]
        * (1.0 + settings.congestion_amplitude * congestion + settings.jitter_scale * jitter)
        + size * 8e-6 / net.bandwidth_gbps[pair]
    )
    elapsed = np.ceil(elapsed * 1000.0) / 1000.0

    down = _down(net.src[pair], net.dst[pair], ts, seed, settings, len(net.node_id), day)

    code = np.where(net.blocked[pair], 2, np.where(down | lost, 1, 0)).astype(np.int8)
    elapsed[code != 0] = np.nan
    frame = pd.DataFrame(
        {
            "ts": pd.DatetimeIndex(ts.view("datetime64[us]")).tz_localize("UTC"),
            "src": src,
            "dst": dst,
            "msg_bytes": size,
            "elapsed_ms": elapsed,
            # Built as the schema's string column from its codes: casting a Categorical costs
            # a tenth of a second per day.
            "status": pd.array(
                pa.DictionaryArray.from_arrays(code, list(schemas.PROBE_STATUSES)).cast(
                    pa.large_string()
                ),
                dtype="string",
            ),
        }
    )
    return schemas.conform(_glitches(frame, day, seed, settings.glitches_per_day), schemas.LOGS)


def _down(
    src_pos: np.ndarray,
    dst_pos: np.ndarray,
    ts: np.ndarray,
    seed: int,
    settings: GenerateSettings,
    n: int,
    day: dt.date,
) -> np.ndarray:
    """Per probe: is either endpoint inside an outage window (of this day or one reaching in)?"""
    down = np.zeros(ts.size, dtype=bool)
    start = _day_start_us(day)
    lookback = math.ceil(settings.outage_hours.high / 24.0)
    windows = [
        _outages(seed, settings, n, day - dt.timedelta(back)) for back in range(lookback, -1, -1)
    ]
    machine = np.concatenate([w[0] for w in windows])
    begin = np.concatenate([w[1] for w in windows])
    end = np.concatenate([w[2] for w in windows])
    today = (end > start) & (begin < start + DAY_US)
    if not today.any():
        return down
    # Each window touches only its machine's probes: find them by a sort of each endpoint once
    # (a whole-day mask per window costs probes × windows at 10,000 machines).
    for positions in (src_pos, dst_pos):
        order = np.argsort(positions, kind="stable")
        bounds = np.searchsorted(positions[order], np.arange(n + 1))
        for who, begins, ends in zip(machine[today], begin[today], end[today], strict=True):
            rows = order[bounds[who] : bounds[who + 1]]
            down[rows[(ts[rows] >= begins) & (ts[rows] < ends)]] = True
    return down


def _glitches(frame: pd.DataFrame, day: dt.date, seed: int, count: int) -> pd.DataFrame:
    """Add the collector's glitches: half repeat a row (logged twice), the others divide a long
    successful latency probe's time by 100 (a clock glitch: faster than light).

    Repeats sit right after their original, so the (ts, src, dst, msg_bytes) order holds.
    """
    if count == 0 or frame.empty:
        return frame
    rng = np.random.default_rng(np.random.SeedSequence([seed, day.toordinal(), TAG_GLITCH]))
    # Latency probes over 20 ms cross at least ~1,600 km: a hundredth of that beats light.
    latency = frame["msg_bytes"].to_numpy() == LATENCY_PROBE_BYTES
    far = np.flatnonzero(latency & (frame["elapsed_ms"].to_numpy() > 20.0))
    corrupt = rng.choice(far, size=min(count // 2, far.size), replace=False)
    elapsed = frame["elapsed_ms"].to_numpy().copy()
    elapsed[corrupt] = np.round(elapsed[corrupt] / 100.0, 3)
    frame = frame.assign(elapsed_ms=elapsed)
    repeat = rng.choice(len(frame), size=min(count - corrupt.size, len(frame)), replace=False)
    order = np.sort(np.concatenate([np.arange(len(frame)), repeat]), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def generate_day(
    inventory: pd.DataFrame, day: dt.date, seed: int, settings: GenerateSettings
) -> pd.DataFrame:
    """The probes of one UTC day (schemas.LOGS), sorted by (ts, src, dst, msg_bytes).

    Depends only on (inventory, day, seed, settings): a day generated alone equals the same day
    of any longer window.
    """
    net = build_network(prepare_inventory(inventory), seed, settings)
    return _day_frame(net, day, seed, settings)


# --- expected link statistics ---------------------------------------------------------------


@lru_cache(maxsize=16)
def _quantile_table(
    amplitude: float, scale: float, tail: float, points: int = 65, angles: int = 512
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantiles (p50, p95) of Y = c·cos θ + s·J over a grid of c in [0, A/2].

    θ is uniform (time of day), J ~ Lomax(tail): the relative excess latency of a probe over
    base·(1 + A/2) on a pair whose congestion swing is c.
    """
    grid = np.linspace(0.0, max(amplitude / 2.0, 1e-12), points)
    cos = np.cos((np.arange(angles) + 0.5) / angles * 2.0 * np.pi)
    result = []
    for p in (0.5, 0.95):
        if scale == 0.0:
            result.append(-grid * np.cos(np.pi * p))
            continue
        lo = -grid.copy()
        hi = grid + scale * ((1.0 - p) ** (-1.0 / tail) - 1.0) + 1e-12
        for _ in range(60):
            mid = (lo + hi) / 2.0
            z = np.maximum((mid[:, None] - grid[:, None] * cos[None, :]) / scale, 0.0)
            cdf = np.mean(1.0 - (1.0 + z) ** -tail, axis=1)
            below = cdf < p
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        result.append((lo + hi) / 2.0)
    return grid, result[0], result[1]


def expected_links(inventory: pd.DataFrame, seed: int, settings: GenerateSettings) -> pd.DataFrame:
    """The link table (schemas.LINKS) the model implies, without generating any probe.

    One row per unordered reachable probed pair (src < dst); what link statistics of an endless
    window of generated logs converge to: latency p50/p95/mean of 64-byte probes over the daily
    congestion cycle and the jitter distribution; loss_rate = the pair's loss rate combined with
    the chance that either endpoint is in an outage; alpha_ms = the median elapsed time of a
    zero-byte message (the intercept of a line through the per-size medians, what a fit on the
    logs recovers; base × (1 + A/2) + median jitter/congestion excess); beta_gbps = the pair's
    bandwidth. samples = 0 and the window is NaT: nothing was measured.
    """
    net = build_network(prepare_inventory(inventory), seed, settings)
    n = len(net.node_id)
    reachable = ~net.blocked
    lo, hi = np.minimum(net.src, net.dst), np.maximum(net.src, net.dst)
    _, first = np.unique((lo * n + hi)[reachable], return_index=True)
    index = np.flatnonzero(reachable)[first]

    amplitude, scale = settings.congestion_amplitude, settings.jitter_scale
    tail = settings.jitter_tail_index
    grid, q50, q95 = _quantile_table(amplitude, scale, tail)
    swing = amplitude * np.abs(net.rho[index]) / 2.0
    base = net.base_ms[index]
    bandwidth = net.bandwidth_gbps[index]
    probe_ms = LATENCY_PROBE_BYTES * 8e-6 / bandwidth
    centre = 1.0 + amplitude / 2.0
    alpha = base * (centre + np.interp(swing, grid, q50)) + ROUNDING_MS

    rate = settings.outages_per_machine / settings.days
    mean_hours = (settings.outage_hours.low + settings.outage_hours.high) / 2.0
    down = 1.0 - math.exp(-rate * mean_hours / 24.0)
    loss = 1.0 - (1.0 - net.loss[index]) * (1.0 - down) ** 2

    frame = pd.DataFrame(
        {
            "src": net.node_id[lo[index]],
            "dst": net.node_id[hi[index]],
            "samples": 0,
            "loss_rate": loss,
            "latency_p50_ms": alpha + probe_ms,
            "latency_p95_ms": base * (centre + np.interp(swing, grid, q95))
            + probe_ms
            + ROUNDING_MS,
            "latency_mean_ms": base * (centre + scale / (tail - 1.0)) + probe_ms + ROUNDING_MS,
            "alpha_ms": alpha,
            "beta_gbps": bandwidth,
        }
    )
    never = pd.Series(pd.NaT, index=frame.index, dtype=schemas.LINKS["window_start"])
    frame["window_start"] = never
    frame["window_end"] = never
    frame = frame.sort_values(["src", "dst"], kind="stable").reset_index(drop=True)
    return schemas.conform(frame, schemas.LINKS)


# --- datasets on disk -----------------------------------------------------------------------


def _partition(out_dir: Path, day: dt.date) -> Path:
    return out_dir / schemas.LOGS_DIR / f"day={day.isoformat()}" / PROBES_FILE


def _partitions(out_dir: Path) -> dict[dt.date, Path]:
    """The `day=YYYY-MM-DD` folders under out_dir/logs, by date."""
    found: dict[dt.date, Path] = {}
    logs = out_dir / schemas.LOGS_DIR
    if not logs.is_dir():
        return found
    for folder in logs.iterdir():
        match = _DAY_DIR.match(folder.name)
        if folder.is_dir() and match:
            try:
                found[dt.date.fromisoformat(match.group(1))] = folder
            except ValueError:
                continue
    return found


def write_dataset(
    out_dir: Path,
    inventory: pd.DataFrame,
    seed: int,
    settings: GenerateSettings,
    days: int,
    end_date: dt.date,
    progress: Callable[[int, int], None] | None = None,
) -> list[Path]:
    """Write out_dir/machines.csv and one logs/day=YYYY-MM-DD/probes.parquet per day.

    The window is end_date − days + 1 … end_date; day partitions of an earlier run outside it
    are removed, so the folder holds exactly the window. Returns the Parquet files in day order
    and calls progress(done, total) after each day.
    """
    out_dir = Path(out_dir)
    if days < 1:
        raise InputError(out_dir, "generate.days", f"days must be at least 1 (got {days})")
    frame = prepare_inventory(inventory)
    require_generated(out_dir, frame)
    net = build_network(frame, seed, settings)
    record = {"format": 1, "seed": seed, "generate": settings.model_dump(mode="json")}
    record_path = out_dir / schemas.GENERATION_FILE
    # Each file is written atomically, the folder is not: until the last day is written the
    # record says the folder is being made, so a killed run's mix of two generations is never
    # taken for either (`read_generation`).
    fileio.write_text(
        record_path, json.dumps({**record, "incomplete": True}, indent=1, sort_keys=True) + "\n"
    )
    fileio.write_csv(out_dir / schemas.INVENTORY_FILE, frame)
    written = []
    for done, back in enumerate(range(days - 1, -1, -1), start=1):
        day = end_date - dt.timedelta(days=back)
        path = _partition(out_dir, day)
        fileio.write_parquet(path, _day_frame(net, day, seed, settings))
        written.append(path)
        if progress is not None:
            progress(done, days)
    keep = {path.parent for path in written}
    for folder in _partitions(out_dir).values():
        if folder not in keep:
            shutil.rmtree(folder)
    fileio.write_text(record_path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return written


def require_generated(out_dir: Path, writing: pd.DataFrame | None = None) -> None:
    """`generate.not_generated` naming out_dir's inventory or logs when it holds either without
    the record `write_dataset` leaves: a user's own fleet (or an imported one), which generating
    or appending a day would overwrite or mix made-up probes into. An inventory that is byte for
    byte the one about to be written (`writing`) is a generated one all the same: a folder
    generated before the record was kept."""
    out_dir = Path(out_dir)
    if (out_dir / schemas.GENERATION_FILE).is_file():
        return
    inventory, logs = out_dir / schemas.INVENTORY_FILE, out_dir / schemas.LOGS_DIR
    if writing is not None and inventory.is_file():
        same = writing.to_csv(index=False, lineterminator="\n").encode() == inventory.read_bytes()
        if same:
            return
    found = [inventory] if inventory.exists() else []
    if logs.is_dir() and any(logs.iterdir()):
        found.append(logs)
    if found:
        raise InputError(
            found[0],
            "generate.not_generated",
            f"{out_dir} holds {' and '.join(path.name for path in found)} that hulk generate did "
            f"not write (no {schemas.GENERATION_FILE}): generating here would replace them. "
            f"Generate into another folder, or move them away first (`hulk nightly --data "
            f"{out_dir}` runs the night on them as they are)",
        )


def read_generation(out_dir: Path) -> tuple[int, GenerateSettings] | None:
    """The seed and generate settings `write_dataset` made out_dir's logs with (None: logs
    from elsewhere, or generated before the record was kept). `InputError`
    ``generate.incomplete`` when the last generation here did not finish."""
    path = Path(out_dir) / schemas.GENERATION_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        recorded = (
            int(record["seed"]),
            GenerateSettings.model_validate_json(json.dumps(record["generate"])),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(path, "generate.record", f"not a generation record: {exc}") from exc
    if record.get("incomplete"):
        raise InputError(
            path,
            "generate.incomplete",
            "the last `hulk generate` here did not finish: the inventory and days may mix two "
            "generations; run `hulk generate` again",
        )
    return recorded


def read_generated_inventory(path: Path) -> pd.DataFrame:
    """machines.csv as written by write_dataset (floats read back exactly)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "generate.inventory", "inventory file not found")
    text = {"city": "string", "country": "string", "status": "string"}
    frame = pd.read_csv(
        path,
        dtype=text,
        keep_default_na=False,
        na_values={"lat": [""], "lon": [""]},
        float_precision="round_trip",
    )
    missing = [column for column in schemas.INVENTORY if column not in frame.columns]
    if missing:
        raise InputError(path, "generate.inventory", f"missing columns {missing}")
    return schemas.conform(frame, schemas.INVENTORY)


def append_day(out_dir: Path, seed: int, settings: GenerateSettings) -> Path:
    """Generate the day after the latest partition of out_dir (what a nightly run adds)."""
    out_dir = Path(out_dir)
    present = _partitions(out_dir)
    if not present:
        raise InputError(
            out_dir,
            "generate.no-partitions",
            f"no {schemas.LOGS_DIR}/day=YYYY-MM-DD partitions to append to; "
            "generate a window first",
        )
    inventory = read_generated_inventory(out_dir / schemas.INVENTORY_FILE)
    day = max(present) + dt.timedelta(days=1)
    path = _partition(out_dir, day)
    fileio.write_parquet(path, generate_day(inventory, day, seed, settings))
    return path
