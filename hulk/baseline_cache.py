"""Systems A, B, C over the whole fleet, kept in the data folder by content.

Every entry of a placements file reports the three baselines (`hulk.assign.whole_fleet_baselines`),
which depend on the whole fleet (machines, effective links, which ones are active) and the job's
sizes only. System A's gradient ring over the fleet is a 2-opt tour of every machine that holds
the model (0.6–0.8 s at 1,000 machines, per distinct machine set), and assign runs every
15 minutes on a fleet that changes about once a night; so the costs are remembered in
``DATA/cache/baselines.json``::

    {"format": 1,
     "fleet": "<sha256 of the fleet's arrays: hulk.placements.fleet_snapshot>",
     "code": "<sha256 of the source that computes them: CODE_FILES>",
     "jobs": {"<the job's sizes: hulk.jobs.job_sizes>": {"A": cost, "B": cost, "C": cost}}}

each cost as the placements file writes it (`hulk.cost.Cost.to_dict`: an infinite time is null).
One fleet at a time: a file of another fleet or other code starts afresh, and so does a file
that cannot be read or is not of this form (it is recomputed and replaced, never trusted).
Written atomically (temporary file and rename, `hulk.fileio.write_text`) and only when the run
computed something new, the newest `KEEP_JOBS` job sizes kept; a folder that refuses the write
(read-only, full) only costs the next run the time.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hulk import fileio
from hulk.code_deps import source_digest
from hulk.cost import Cost, Fleet
from hulk.errors import InputError
from hulk.jobs import Job, job_sizes

CACHE_FILE = Path("cache") / "baselines.json"  # under the data folder
FORMAT = 1
KEEP_JOBS = 1_000  # job sizes remembered per fleet (the newest)
SYSTEMS = ("A", "B", "C")
# The package files `hulk.baselines` runs (`hulk.code_deps.module_files`, checked by a test):
# a change to any of them may change the costs, so it starts the cache afresh.
CODE_FILES = (
    "hulk/__init__.py",
    "hulk/baselines.py",
    "hulk/cost.py",
    "hulk/errors.py",
    "hulk/hardware.py",
    "hulk/jobs.py",
    "hulk/schemas.py",
    "hulk/settings.py",
    "hulk/site_links.py",
    "hulk/tours.py",
)


def code_key() -> str:
    """sha256 over the source of `CODE_FILES`."""
    return source_digest(CODE_FILES)


class BaselineMemory:
    """The baselines of one fleet, read from and written to the data folder's cache file."""

    def __init__(self, data_dir: Path, fleet: Fleet, fleet_key: str) -> None:
        """`fleet_key` identifies `fleet`'s content (`hulk.placements.fleet_snapshot`)."""
        self.path = data_dir / CACHE_FILE
        self.fleet = fleet
        self.head = {"format": FORMAT, "fleet": fleet_key, "code": code_key()}
        self.known = _read(self.path, self.head)
        self.computed = 0  # job sizes computed in this run (not found in the file)

    def __call__(self, job: Job) -> dict[str, Cost]:
        """Systems A, B, C for `job` on the whole fleet (remembered, or computed now)."""
        from hulk.assign import whole_fleet_baselines

        key = job_sizes(job)
        if key in self.known:  # to the end: the newest are kept
            self.known[key] = self.known.pop(key)
        else:
            self.known[key] = whole_fleet_baselines(job, self.fleet)[0]
            self.computed += 1
        return dict(self.known[key])

    def save(self) -> None:
        """Write the file if this run computed anything (atomically; the newest sizes kept)."""
        if not self.computed:
            return
        newest = list(self.known.items())[-KEEP_JOBS:]
        doc = {
            **self.head,
            "jobs": {
                key: {name: cost.to_dict() for name, cost in costs.items()} for key, costs in newest
            },
        }
        # Read-only, full: the run's outputs are written already; a lost cache only costs time.
        with contextlib.suppress(InputError):
            fileio.write_text(self.path, json.dumps(doc, sort_keys=True, indent=1) + "\n")


def _read(path: Path, head: Mapping[str, Any]) -> dict[str, dict[str, Cost]]:
    """The remembered baselines of `head`'s fleet and code; empty when the file is missing, of
    another fleet or code, or not of the module's form."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(doc, dict) or any(doc.get(k) != v for k, v in head.items()):
        return {}
    jobs = doc.get("jobs")
    if not isinstance(jobs, dict):
        return {}
    known: dict[str, dict[str, Cost]] = {}
    for key, systems in jobs.items():
        if not isinstance(systems, dict) or sorted(systems) != list(SYSTEMS):
            return {}
        costs = {name: _cost(record) for name, record in systems.items()}
        if any(cost is None for cost in costs.values()):
            return {}
        known[key] = {name: cost for name, cost in costs.items() if cost is not None}
    return known


def _cost(record: Any) -> Cost | None:
    """A `Cost.to_dict` record back as a Cost (None when it is not one)."""
    if not isinstance(record, dict) or not set(record) <= {
        "iteration_s",
        "compute_s",
        "comm_s",
        "feasible",
        "reason",
    }:
        return None
    times = [record.get(k, "missing") for k in ("iteration_s", "compute_s", "comm_s")]
    if not all(t is None or (type(t) in (int, float)) for t in times):  # bool is no time
        return None
    feasible, reason = record.get("feasible"), record.get("reason")
    if not isinstance(feasible, bool) or not (reason is None or isinstance(reason, str)):
        return None
    iteration_s, compute_s, comm_s = (math.inf if t is None else float(t) for t in times)
    return Cost(iteration_s, compute_s, comm_s, feasible=feasible, reason=reason)
