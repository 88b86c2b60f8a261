"""The cost model's dense fleet, kept in the data folder by content.

A dense fleet (`hulk.cost.Fleet.from_frames` below ``cost.dense_max_machines``) finds every
unlinked pair's relay path (Dijkstra from every machine, then each path's narrowest link):
0.7 s of CPU at 1,000 machines, the largest part of an assign run after its imports. It is a
pure function of the inventory and link table files, the ``hardware``, ``graph.bandwidth_tiers``
and ``cost`` settings, and the code of `hulk.cost`; assign runs every 15 minutes on files that
change about once a night. So `load_fleet` keeps its arrays in ``DATA/cache/fleet.npz``
(uncompressed NumPy arrays: ``key`` and the `Fleet` fields of `ARRAYS`), the key a sha256 of all
of the above (`fleet_key`). One fleet at a time: a file of another key, or one that cannot be
read or whose arrays are not of the fleet's shapes and types, is rebuilt and replaced. Written
atomically; a folder that refuses the write (read-only, full) only costs the next run the time.
Site-model fleets are not kept: their tables are built in under a second at 10,000 machines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from hulk import fileio, schemas
from hulk.code_deps import source_digest
from hulk.cost import Fleet
from hulk.errors import InputError
from hulk.settings import Settings

CACHE_FILE = Path("cache") / "fleet.npz"  # under the data folder
FORMAT = 1
# The package files `hulk.cost` runs (`hulk.code_deps.module_files`, checked by a test).
CODE_FILES = (
    "hulk/__init__.py",
    "hulk/cost.py",
    "hulk/errors.py",
    "hulk/hardware.py",
    "hulk/jobs.py",
    "hulk/schemas.py",
    "hulk/settings.py",
    "hulk/site_links.py",
    "hulk/tours.py",
)
# The dense fleet's fields: dtype kind and dimensions (1: per machine, 2: per pair).
ARRAYS = {
    "node_ids": ("i", 1),
    "compute_flops": ("f", 1),
    "memory_bytes": ("f", 1),
    "active": ("b", 1),
    "latency_s": ("f", 2),
    "bandwidth_Bps": ("f", 2),
    "relayed": ("b", 2),
    "component": ("i", 1),
}


def fleet_key(data_dir: Path, settings: Settings) -> str:
    """sha256 of what the data folder's fleet is made from (module docstring)."""
    made_of = {
        "format": FORMAT,
        "inventory": fileio.sha256_file(data_dir / schemas.INVENTORY_FILE),
        "links": fileio.sha256_file(data_dir / schemas.LINKS_FILE),
        "hardware": settings.hardware.model_dump(mode="json"),
        "tiers": [tier.model_dump(mode="json") for tier in settings.graph.bandwidth_tiers],
        "cost": settings.cost.model_dump(mode="json"),
        "code": source_digest(CODE_FILES),
    }
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()


def cached_fleet(
    data_dir: Path, settings: Settings, inventory: pd.DataFrame, build: Callable[[], Fleet]
) -> Fleet:
    """The data folder's fleet: from the cache when it holds this key, else `build()` (kept
    in the cache when dense). `inventory` is the folder's, read and checked."""
    if settings.cost.use_sites(len(inventory)):
        return build()
    key = fleet_key(data_dir, settings)
    path = data_dir / CACHE_FILE
    kept = _read(path, key)
    if kept is not None:
        return kept
    fleet = build()
    if fleet.sites is None:
        _write(path, key, fleet)
    return fleet


def _read(path: Path, key: str) -> Fleet | None:
    """The fleet kept under `key` at `path`, or None (missing, another key, not a fleet)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if set(archive.files) != {"key", *ARRAYS} or str(archive["key"]) != key:
                return None
            arrays = {name: archive[name] for name in ARRAYS}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None
    n = len(arrays["node_ids"])
    for name, (kind, dims) in ARRAYS.items():
        shape = (n,) * dims
        if arrays[name].dtype.kind != kind or arrays[name].shape != shape:
            return None
    return Fleet(**arrays)


def _write(path: Path, key: str, fleet: Fleet) -> None:
    arrays = {name: np.asarray(getattr(fleet, name)) for name in ARRAYS}
    # Read-only, full: the run goes on; a lost cache only costs the next run the time.
    with contextlib.suppress(InputError), fileio.atomic_path(path) as tmp, tmp.open("wb") as out:
        np.savez(out, allow_pickle=False, key=np.array(key), **arrays)
