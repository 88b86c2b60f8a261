"""Validated day partitions kept between runs, so that a night validates only what changed.

A day partition's outcome (`hulk.validation.logs.DayOutcome`: its tallies, quarantined rows,
the successful probes the window rules need and its GX result for the Data Docs) depends only
on the partition's files, the inventory, the validation settings, the latency-probe size and
the partition's timestamp bounds in the window. `day_key` hashes exactly those (with the code
that validates and the GX version), so a partition that is still inside the window and
unchanged gives the same key the next night, and the cached outcome stands in for reading and
validating it. The newest partition's bounds move with the clock, so it is always validated
again; so is any partition whose file, inventory or settings changed.

One more input is checked when an entry is read rather than hashed: rows that break the
timestamp bounds are told apart as in the future, before the window or in the wrong partition
by the window's start and "now", which move every night. An entry stores those rows'
timestamps and how they were told apart; it is used only when tonight's window tells them
apart the same way (nearly always: such rows are rare, and a past partition's stray rows stay
what they were).

Entries are ``DAYS_DIR/<key>.npz`` under the validation folder: numpy arrays and one JSON
document (read with ``allow_pickle=False``: a cache file can never run code), written to a
temporary file and renamed. An entry that cannot be read is validated again and rewritten.
After a run, entries of partitions no longer in the window are removed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import zipfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hulk import fileio, schemas
from hulk.validation._gx import BatchResult, CheckResult
from hulk.validation.log_window import LogWindow, micros

if TYPE_CHECKING:
    from hulk.validation.logs import DayOutcome, LogDay

DAYS_DIR = schemas.VALIDATED_DAYS  # under the data folder's validation folder
FORMAT = 2  # layout of an entry; a new layout is a new key (2: files named from the data folder)
SUFFIX = ".npz"
# The modules whose code decides a day's outcome: a change to them is a change of key.
# What reading a damaged entry raises (a truncated zip, a member missing, bad JSON, …).
_UNREADABLE = (
    OSError,
    EOFError,
    ValueError,
    KeyError,
    TypeError,
    zipfile.BadZipFile,
    pa.ArrowException,
)
_CODE = (
    "logs.py",
    "_gx.py",
    "gx_memo.py",
    "_common.py",
    "log_files.py",
    "log_window.py",
    "day_cache.py",
)


@cache
def _code_fingerprint() -> str:
    import great_expectations

    digest = hashlib.sha256(f"format {FORMAT} gx {great_expectations.__version__}".encode())
    here = Path(__file__).parent
    for name in _CODE:
        digest.update((here / name).read_bytes())
    schemas_file = Path(__file__).parent.parent / "schemas.py"
    digest.update(schemas_file.read_bytes())
    return digest.hexdigest()


def day_key(day: LogDay) -> str:
    """sha256 of everything a day partition's outcome depends on (module docstring)."""
    machines = day.machines
    low, high = day.window.bounds(day.batch.day)
    record = {
        "code": _code_fingerprint(),
        "label": day.batch.label,
        "day": None if day.batch.day is None else day.batch.day.isoformat(),
        "format": day.fmt,
        "files": [
            [name, fileio.sha256_file(path)]
            for name, path in zip(day.batch.file_names(), day.batch.files, strict=True)
        ],
        "settings": day.settings.model_dump(mode="json"),
        "probe_bytes": day.probe_bytes,
        "bounds": [low.isoformat(), high.isoformat()],
    }
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode())
    for values in (machines.ids, machines.lat, machines.lon, machines.active):
        digest.update(np.ascontiguousarray(values).tobytes())
    digest.update(json.dumps([None if c is None else str(c) for c in machines.city]).encode())
    return digest.hexdigest()


def stamp_classes(stamps_us: np.ndarray, window: LogWindow) -> np.ndarray:
    """How rows outside their timestamp bounds are told apart: 2 in the future, 1 before the
    window, 0 in the wrong partition (the order `hulk.validation.logs` applies)."""
    future = stamps_us > micros(window.latest)
    early = stamps_us < micros(window.start)
    return np.where(future, 2, np.where(early, 1, 0)).astype(np.int8)


class DayCache:
    """The cached day outcomes in `folder` (``data/validation/days``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def load(self, key: str, day: LogDay) -> DayOutcome | None:
        """The cached outcome of `day` (its index set to the day's), or None when there is none,
        it cannot be read, or tonight's window tells its stray timestamps apart otherwise."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as stored:
                arrays = {name: stored[name] for name in stored.files}
            outcome = _outcome(arrays, day.index)
        except _UNREADABLE:  # a damaged or foreign entry: validate the day again
            return None
        stamps = outcome.timestamp_flagged_us
        if len(stamps) and not np.array_equal(
            stamp_classes(stamps, day.window), arrays["stamp_classes"]
        ):
            return None
        return outcome

    def save(self, key: str, outcome: DayOutcome, window: LogWindow) -> None:
        """Write `outcome` under `key` (temporary file, then rename)."""
        arrays = _arrays(outcome)
        arrays["stamp_classes"] = stamp_classes(outcome.timestamp_flagged_us, window)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
        fileio.write_bytes(self.path(key), buffer.getvalue())

    def keep_only(self, keys: set[str]) -> int:
        """Remove the entries whose key is not in `keys`; how many were removed."""
        if not self.folder.is_dir():
            return 0
        removed = 0
        for path in self.folder.glob(f"*{SUFFIX}"):
            if path.name[: -len(SUFFIX)] not in keys:
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def _arrays(outcome: DayOutcome) -> dict[str, np.ndarray]:
    gx = outcome.gx
    meta: dict[str, Any] = {
        "format": FORMAT,
        "label": outcome.label,
        "rows": outcome.rows,
        "kept": outcome.kept,
        "tallies": {rule: [count, examples] for rule, (count, examples) in outcome.tallies.items()},
        "unknown_ids": list(outcome.unknown_ids),
        "days": [d.isoformat() for d in outcome.days],
        "has_last_ok": outcome.last_ok is not None,
        "has_quarantine": outcome.quarantine is not None,
        "gx": None
        if gx is None
        else {
            "suite": gx.suite,
            "batch": gx.batch,
            "batch_id": gx.batch_id,
            "success": gx.success,
            "checks": [[c.rule, c.severity, c.success, c.unexpected_count] for c in gx.checks],
            "gx_result": gx.gx_result,
            "expectation_ids": gx.expectation_ids,
        },
    }
    arrays: dict[str, np.ndarray] = {
        "meta": np.array(json.dumps(meta)),
        "pair_codes": outcome.pair_codes,
        "pair_starts": outcome.pair_starts,
        "pair_ms": outcome.pair_ms,
        "timestamp_flagged_us": outcome.timestamp_flagged_us,
    }
    if outcome.last_ok is not None:
        arrays["last_ok"] = outcome.last_ok
    if outcome.quarantine is not None:
        sink = io.BytesIO()
        table = pa.Table.from_pandas(outcome.quarantine, preserve_index=True)
        pq.write_table(table, sink)
        arrays["quarantine"] = np.frombuffer(sink.getvalue(), dtype=np.uint8)
    if gx is not None:
        for position, check in enumerate(gx.checks):
            arrays[f"check_{position}"] = check.unexpected_index
    return arrays


def _outcome(arrays: dict[str, np.ndarray], index: int) -> DayOutcome:
    from hulk.validation.logs import DayOutcome

    meta = json.loads(str(arrays["meta"]))
    if meta.get("format") != FORMAT:
        raise ValueError(f"cache entry format {meta.get('format')}, not {FORMAT}")
    gx = None
    if meta["gx"] is not None:
        stored = meta["gx"]
        gx = BatchResult(
            suite=stored["suite"],
            batch=stored["batch"],
            batch_id=stored["batch_id"],
            success=stored["success"],
            checks=[
                CheckResult(rule, severity, success, count, arrays[f"check_{position}"])
                for position, (rule, severity, success, count) in enumerate(stored["checks"])
            ],
            gx_result=stored["gx_result"],
            expectation_ids=stored["expectation_ids"],
        )
    quarantine = None
    if meta["has_quarantine"]:
        quarantine = pq.read_table(pa.BufferReader(arrays["quarantine"].tobytes())).to_pandas()
        quarantine = pd.DataFrame(quarantine)
    return DayOutcome(
        index=index,
        label=meta["label"],
        rows=meta["rows"],
        kept=meta["kept"],
        tallies={rule: (count, examples) for rule, (count, examples) in meta["tallies"].items()},
        unknown_ids=meta["unknown_ids"],
        quarantine=quarantine,
        days=[dt.date.fromisoformat(d) for d in meta["days"]],
        last_ok=arrays["last_ok"] if meta["has_last_ok"] else None,
        pair_codes=arrays["pair_codes"],
        pair_starts=arrays["pair_starts"],
        pair_ms=arrays["pair_ms"],
        timestamp_flagged_us=arrays["timestamp_flagged_us"],
        gx=gx,
    )
