"""Helpers shared by the three suites: JSON-safe example rows, machine lookups, finding tallies."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hulk.errors import InputError
from hulk.findings import Finding, Severity
from hulk.geo import fiber_floor_ms, haversine_km

# Machines, pairs or days named in one finding's message before "… and N more".
NAMED_IN_MESSAGE = 10


def encoding_error(path: Path, rule: str) -> InputError:
    """The InputError for a text file that is not UTF-8: the line and byte of the first bad
    byte, and that line as far as it reads (pandas only gives a position in its buffer)."""
    data = Path(path).read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line_end = data.find(b"\n", exc.start)
        line = data[line_start : None if line_end < 0 else line_end].rstrip(b"\r")
        shown = line.decode("utf-8", errors="backslashreplace")
        return InputError(
            path,
            rule,
            f"line {line_no} is not UTF-8: byte 0x{data[exc.start]:02x} at column "
            f"{exc.start - line_start + 1}; save the file as UTF-8",
            [f"line {line_no}: {shown}"],
        )
    return InputError(path, rule, "the file is not UTF-8 text; save it as UTF-8")


def json_value(value: object) -> object:
    """A JSON-serialisable copy of one cell: ISO strings for times, None for NaN/NaT/NA."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp | dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, np.datetime64):
        return None if np.isnat(value) else pd.Timestamp(value).isoformat()
    if isinstance(value, pd.Timedelta | dt.timedelta):
        return str(value)
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | np.ndarray):
        return [json_value(v) for v in value]
    return str(value)


def json_record(row: Mapping) -> dict:
    return {str(key): json_value(value) for key, value in row.items()}


def frame_records(frame: pd.DataFrame, limit: int | None = None) -> list[dict]:
    """The first `limit` rows of a frame as JSON-safe dicts."""
    head = frame if limit is None else frame.head(limit)
    return [json_record(row) for row in head.to_dict(orient="records")]


def utc_timestamp(value: dt.datetime | pd.Timestamp) -> pd.Timestamp:
    """A timestamp in UTC at microsecond resolution; a naive value is taken to be UTC."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.as_unit("us")


def name_list(values: Iterable[object], limit: int = NAMED_IN_MESSAGE) -> str:
    """'1, 2, 3' or '1, 2, 3 … and 7 more' for a message."""
    items = [str(v) for v in values]
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} … and {len(items) - limit} more"


def plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


@dataclass(frozen=True)
class Machines:
    """The inventory as lookup arrays: sorted unique ids with coordinates and status."""

    ids: np.ndarray  # int64, sorted, unique
    lat: np.ndarray  # float64, NaN when unknown
    lon: np.ndarray
    active: np.ndarray  # bool
    city: np.ndarray  # object (str or None)

    @classmethod
    def from_inventory(cls, inventory: pd.DataFrame) -> Machines:
        """Lookup arrays from an inventory frame; the first row of a duplicated id wins."""
        if "node_id" not in inventory.columns:
            raise InputError(None, "inventory.schema", "the inventory has no 'node_id' column")
        ids = pd.to_numeric(inventory["node_id"], errors="coerce")
        frame = inventory.assign(node_id=ids).dropna(subset=["node_id"])
        frame = frame.drop_duplicates("node_id", keep="first").sort_values("node_id")

        def numbers(column: str) -> np.ndarray:
            if column not in frame.columns:
                return np.full(len(frame), np.nan)
            return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)

        status = frame["status"] if "status" in frame.columns else pd.Series("active", frame.index)
        city = frame["city"] if "city" in frame.columns else pd.Series(None, frame.index)
        return cls(
            ids=frame["node_id"].to_numpy(dtype="int64"),
            lat=numbers("lat"),
            lon=numbers("lon"),
            active=(status.astype("string").str.strip().str.lower() == "active")
            .fillna(False)
            .to_numpy(dtype=bool),
            city=city.astype(object).where(city.notna(), None).to_numpy(dtype=object),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id in these arrays, -1 for an id that is not in the inventory."""
        ids = np.asarray(ids, dtype="int64")
        if len(self.ids) == 0:
            return np.full(len(ids), -1, dtype="int64")
        where = np.searchsorted(self.ids, ids)
        where = np.minimum(where, len(self.ids) - 1)
        return np.where(self.ids[where] == ids, where, -1).astype("int64")

    def floor_ms(self, src_row: np.ndarray, dst_row: np.ndarray, km_per_ms: float) -> np.ndarray:
        """Fiber-floor one-way time between the rows' machines; NaN when a location is unknown."""
        known = (src_row >= 0) & (dst_row >= 0)
        s, d = np.where(known, src_row, 0), np.where(known, dst_row, 0)
        if len(self.ids) == 0:
            return np.full(len(src_row), np.nan)
        floor = fiber_floor_ms(
            haversine_km(self.lat[s], self.lon[s], self.lat[d], self.lon[d]), km_per_ms
        )
        return np.where(known, floor, np.nan)


@dataclass
class Tally:
    """Offending rows of one rule, gathered over several batches."""

    count: int = 0
    examples: list[dict] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)

    def add(self, count: int, examples: list[dict], batch: str, limit: int) -> None:
        if count <= 0:
            return
        self.count += count
        self.batches.append(batch)
        room = limit - len(self.examples)
        if room > 0:
            self.examples.extend(examples[:room])


def finding(
    severity: Severity,
    rule: str,
    file: str | None,
    message: str,
    count: int = 0,
    examples: list[dict] | None = None,
) -> Finding:
    return Finding(
        severity=severity,
        rule=rule,
        file=file,
        message=message,
        count=int(count),
        examples=[json_record(e) for e in (examples or [])],
    )
