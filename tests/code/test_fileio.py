"""Atomic writes: a failed write never replaces or corrupts the last good output."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest

from hulk import fileio


def test_failed_write_keeps_last_good_file(tmp_path: Path) -> None:
    target = tmp_path / "latest.json"
    fileio.write_text(target, "good\n")
    with pytest.raises(RuntimeError), fileio.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "good\n"
    assert [p.name for p in tmp_path.iterdir()] == ["latest.json"]


def test_failed_folder_swap_keeps_last_good_folder(tmp_path: Path) -> None:
    target = tmp_path / "docs"
    with fileio.atomic_dir(target) as tmp:
        (tmp / "index.html").write_text("v1")
    with pytest.raises(RuntimeError), fileio.atomic_dir(target) as tmp:
        (tmp / "index.html").write_text("v2-partial")
        raise RuntimeError("crash")
    assert (target / "index.html").read_text() == "v1"
    with fileio.atomic_dir(target) as tmp:
        (tmp / "index.html").write_text("v2")
    assert (target / "index.html").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


def test_parquet_is_byte_identical_for_identical_frames(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    fileio.write_parquet(tmp_path / "one.parquet", frame)
    fileio.write_parquet(tmp_path / "two.parquet", frame.copy())
    assert fileio.sha256_file(tmp_path / "one.parquet") == fileio.sha256_file(
        tmp_path / "two.parquet"
    )


def test_outputs_follow_the_umask_not_mkstemps_0600(tmp_path: Path) -> None:
    target = tmp_path / "latest.json"
    old = os.umask(0o022)
    try:
        fileio.write_text(target, "{}")
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644  # readable by the scheduler's own user


def test_a_write_sweeps_the_temporaries_killed_writers_left(tmp_path: Path) -> None:
    target = tmp_path / "latest.json"
    dead = tmp_path / ".latest.json.abc123.tmp"  # a writer killed an hour and more ago
    dead.write_text("")
    old = time.time() - fileio.STALE_TEMPORARY_S - 60
    os.utime(dead, (old, old))
    live = tmp_path / ".latest.json.def456.tmp"  # another writer's, still being filled
    live.write_text("{")
    other = tmp_path / ".other.json.abc123.tmp"  # another file's: not this write's
    other.write_text("")
    os.utime(other, (old, old))
    fileio.write_text(target, "{}")
    assert target.read_text() == "{}"
    assert not dead.exists() and live.exists() and other.exists()
