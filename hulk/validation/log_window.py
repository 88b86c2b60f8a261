"""The rules over the whole validation window of the raw logs, computed with pandas and numpy on
what the day batches left (quarantined rows never count): `logs.empty_window` (error),
`logs.missing_days`, `logs.stale_machine` and `logs.asymmetric_pair` (warnings); and the window
itself (`LogWindow`: its bounds per day partition and its whole days)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hulk.findings import Finding
from hulk.settings import ValidateSettings
from hulk.validation._common import finding, name_list, plural

if TYPE_CHECKING:
    from hulk.validation.logs import Totals

MICROSECOND = pd.Timedelta(microseconds=1)


@dataclass
class LogWindow:
    start: pd.Timestamp  # end − window_days
    end: pd.Timestamp  # the window's end (now, unless the caller aligns it with ingest's)
    latest: pd.Timestamp  # now + future_skew_s: later is "in the future"

    def bounds(self, day: dt.date | None) -> tuple[pd.Timestamp, pd.Timestamp]:
        """Inclusive [min, max] of a valid ts in a batch of this day (None: any day)."""
        low, high = self.start, self.latest
        if day is not None:
            day_start = pd.Timestamp(day, tz="UTC")
            low = max(low, day_start)
            high = min(high, day_start + pd.Timedelta(days=1) - MICROSECOND)
        if low > high:  # a partition after now: nothing in it can be valid
            low = high = self.latest
        return low, high

    def days(self) -> list[dt.date]:
        """The UTC days that lie wholly inside the window (partial days at its ends may be
        partly logged, so they are never reported missing)."""
        first, end = self.start.ceil("D"), self.end.floor("D")
        return [d.date() for d in pd.date_range(first, end, freq="D", inclusive="left")]


def micros(stamp: pd.Timestamp) -> int:
    """Microseconds since the epoch (Timestamp.value is always in nanoseconds)."""
    return int(stamp.value // 1000)


def window_findings(
    totals: Totals,
    window: LogWindow,
    settings: ValidateSettings,
    where: str,
    batches: int,
    row_findings: Sequence[Finding] = (),
) -> list[Finding]:
    """The window's rules; `row_findings` (the row rules' findings) say why, when every probe
    was quarantined."""
    span = f"[{window.start.isoformat()}, {window.end.isoformat()}]"
    if totals.rows == 0:
        message = f"no probes in the window {span}: " + (
            f"the {plural(batches, 'partition')} in it hold no rows"
            if batches
            else "no partition lies in it"
        )
        return [finding("error", "logs.empty_window", where, message)]
    if totals.kept == 0:
        message = f"all {plural(totals.rows, 'probe')} in the window {span} were quarantined"
        causes = sorted((f for f in row_findings if f.count), key=lambda f: (-f.count, f.rule))
        if causes:
            # The row rules are warnings, which the error alone would not show.
            counts = ", ".join(f"{f.rule} {f.count:,}" for f in causes[:4])
            message += f" (rows by rule: {counts}; the most: {causes[0].message})"
        return [finding("error", "logs.empty_window", where, message, totals.rows)]
    found = []
    missing = [d for d in window.days() if d not in totals.days]
    if missing:
        names = [d.isoformat() for d in missing]
        found.append(
            finding(
                "warning",
                "logs.missing_days",
                where,
                f"{len(missing)} of the window's {len(window.days())} whole days have no probes: "
                f"{name_list(names)}",
                len(missing),
                [{"day": d} for d in names[: settings.examples]],
            )
        )
    found += _stale_machines(totals, window, settings, where)
    found += _asymmetric_pairs(totals, settings, where)
    return found


def _stale_machines(
    totals: Totals, window: LogWindow, settings: ValidateSettings, where: str
) -> list[Finding]:
    machines = totals.machines
    since = window.end - pd.Timedelta(hours=settings.stale_after_hours)
    since_us = micros(since)
    stale = np.flatnonzero(machines.active & (totals.last_ok < since_us))
    if len(stale) == 0:
        return []
    order = stale[np.argsort(totals.last_ok[stale], kind="stable")]
    examples = [
        {
            "node_id": int(machines.ids[i]),
            "city": machines.city[i],
            "last_ok_probe": None
            if totals.last_ok[i] == np.iinfo("int64").min
            else pd.Timestamp(totals.last_ok[i], unit="us", tz="UTC").isoformat(),
        }
        for i in order[: settings.examples]
    ]
    message = (
        f"{plural(len(stale), 'active machine')} had no successful probe from or to them in the "
        f"last {settings.stale_after_hours:g} h of the window (since {since.isoformat()}): "
        f"{name_list(machines.ids[stale].tolist())}"
    )
    found = finding("warning", "logs.stale_machine", where, message, len(stale), examples)
    return [replace(found, machines=sorted(int(n) for n in machines.ids[stale]))]


def _asymmetric_pairs(totals: Totals, settings: ValidateSettings, where: str) -> list[Finding]:
    """Pairs whose two directions' median latencies differ strongly (exact medians)."""
    if not totals.pair_ms:
        return []
    codes = np.fromiter(totals.pair_ms, dtype="int64", count=len(totals.pair_ms))
    medians, probes = np.empty(len(codes)), np.empty(len(codes), dtype="int64")
    for k, code in enumerate(codes.tolist()):
        values = np.concatenate(totals.pair_ms[code])
        medians[k], probes[k] = np.median(values.astype("float64")), len(values)
    totals.pair_ms.clear()
    stats = pd.DataFrame({"median": medians, "probes": probes}, index=codes)
    count = len(totals.machines)
    src_row, dst_row = np.divmod(stats.index.to_numpy(dtype="int64"), count)
    stats["a"], stats["b"] = np.minimum(src_row, dst_row), np.maximum(src_row, dst_row)
    stats["forward"] = src_row < dst_row
    forward = stats[stats["forward"]].set_index(["a", "b"])
    reverse = stats[~stats["forward"]].set_index(["a", "b"])
    both = forward.join(reverse, lsuffix="_ab", rsuffix="_ba", how="inner")
    slow = both[["median_ab", "median_ba"]].max(axis=1)
    fast = both[["median_ab", "median_ba"]].min(axis=1)
    strong = (slow >= settings.asymmetry_ratio * fast) & (slow - fast >= settings.asymmetry_min_ms)
    hits = both[strong].assign(ratio=(slow / fast.where(fast > 0))[strong])
    if hits.empty:
        return []
    hits = hits.sort_values("ratio", ascending=False, na_position="first")
    ids = totals.machines.ids
    pairs = [(int(ids[a]), int(ids[b])) for a, b in hits.index]
    examples = [
        {
            "src": int(ids[a]),
            "dst": int(ids[b]),
            "median_ms": float(row.median_ab),
            "reverse_median_ms": float(row.median_ba),
            "probes": int(row.probes_ab),
            "reverse_probes": int(row.probes_ba),
        }
        for (a, b), row in hits.head(settings.examples).iterrows()
    ]
    message = (
        f"{plural(len(pairs), 'pair')} differ strongly by direction (median of the successful "
        f"{totals.probe_bytes}-byte probes {settings.asymmetry_ratio:g}x and "
        f"{settings.asymmetry_min_ms:g} ms or more apart): "
        + name_list(f"{a}<->{b}" for a, b in pairs)
    )
    return [finding("warning", "logs.asymmetric_pair", where, message, len(pairs), examples)]
