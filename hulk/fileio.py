"""Atomic writes and content hashes: a reader never sees a half-written output."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hulk.errors import storage_error


@contextmanager
def _named_storage_errors(path: Path) -> Iterator[None]:
    """A read-only folder or a full disk while writing `path`: an `InputError` naming `path`
    (`hulk.errors.storage_error`), not an OSError naming a temporary file."""
    try:
        yield
    except OSError as exc:
        name = exc.filename
        ours = name is None or Path(name).name.startswith(f".{path.name}.")  # our temporary
        error = storage_error(exc, path=path if ours else name)
        if error is None:
            raise
        raise error from exc


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    with _named_storage_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            yield tmp_path
            # mkstemp makes the file private (0600); published outputs get the usual permissions.
            tmp_path.chmod(0o666 & ~_umask())
            os.replace(tmp_path, path)
            _sweep_stale_temporaries(path, keep=tmp_path)
        finally:
            tmp_path.unlink(missing_ok=True)


STALE_TEMPORARY_S = 3600.0  # a writer holds its temporary for seconds; an hour-old one is dead


def _sweep_stale_temporaries(path: Path, keep: Path) -> None:
    """Remove the temporaries of `path` that writers killed mid-write left (``kill -9``):
    older than `STALE_TEMPORARY_S`, so never one a live writer still fills."""
    sweep_stale_temporaries(path.parent, f".{glob.escape(path.name)}.*.tmp", keep)


def sweep_stale_temporaries(folder: Path, pattern: str, keep: Path | None = None) -> None:
    """Remove the temporaries matching `pattern` in `folder` older than `STALE_TEMPORARY_S`
    (writers killed mid-write left them); for outputs whose names never repeat, such as a
    run's own file, which no later write of the same name would sweep."""
    cutoff = time.time() - STALE_TEMPORARY_S
    for stale in folder.glob(pattern):
        try:
            if stale != keep and stale.is_file() and stale.stat().st_mtime < cutoff:
                stale.unlink()
        except OSError:
            continue  # another writer swept it, or it cannot be removed: not this write's concern


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder; swap it in for `path` only if the block succeeds."""
    path = Path(path)
    with _named_storage_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            yield tmp
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            if path.exists():
                os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_parquet(path: str | Path, frame: pd.DataFrame) -> None:
    """Write a frame without the pandas index; byte-identical for identical frames."""
    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=_repeating(table))


def _repeating(table: pa.Table) -> list[str]:
    """The columns worth a dictionary: integers, strings, flags. Floats and timestamps (probe
    times, measured latencies) rarely repeat: encoding them tries a dictionary that overflows
    and is dropped, half of a day partition's write time for a larger file."""
    return [
        f.name
        for f in table.schema
        if not (pa.types.is_floating(f.type) or pa.types.is_temporal(f.type))
    ]


def write_csv(path: str | Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, lineterminator="\n")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
