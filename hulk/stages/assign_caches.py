"""The caches an assign run reads, filled by the step that rebuilds the fleet.

An assign run on a fleet it has not seen builds two caches of the data folder before it can
schedule: the cost model's dense fleet (`hulk.fleet_cache`, about 0.9 s of CPU at 1,000
machines with the frames read and checked) and Systems A, B, C for every job it reports
(`hulk.baseline_cache`: System A's rings, about 1.5 s for the paper's 4 jobs there). The
graph step runs once per new link table, the assign runs every 15 minutes after it; so the
graph step fills both (`warm_assign_caches`) and the first assign run on the new fleet finds
them warm.

One code path with the assign run: the fleet is `hulk.data_folder.load_fleet`'s, drained of the
machines the last validation found silent as the scheduler drains them
(`hulk.stages.scheduling.not_reporting`, `drain`), and the baselines are `BaselineMemory`'s under
the same fleet key (`hulk.placements.fleet_snapshot`). The jobs are those the next run will
report: the jobs file (``assign.jobs_file``) and the job store's unfinished jobs. Both caches
are keyed by content, so a changed fleet, setting or code is never served stale, whoever wrote
them. Site-model fleets (above ``cost.dense_max_machines``) are not kept by the fleet cache and
are left to the assign run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hulk import schemas
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.settings import Settings

if TYPE_CHECKING:
    from hulk.jobs import Job

RULE = "graph.assign_caches"  # the warning's rule when the caches could not be filled


@dataclass(frozen=True)
class WarmedCaches:
    """What `warm_assign_caches` did: the cache files it left, and the work it did."""

    # The files as they are now (None: not kept — a site-model fleet, no jobs to report, or a
    # folder that refused the write, which only costs the assign run the time).
    fleet_cache: Path | None  # DATA/cache/fleet.npz
    baseline_cache: Path | None  # DATA/cache/baselines.json
    jobs: int  # distinct job sizes reported
    computed: int  # of them, computed now (the others were in the cache already)


def warm_assign_caches(
    data_dir: Path, settings: Settings
) -> tuple[WarmedCaches | None, list[Finding]]:
    """Fill the data folder's fleet and baseline caches for the next assign run (module
    docstring). Input the assign run would refuse (an inventory breaking its rules, an
    unreadable jobs file or job store) is reported as a warning, not raised: the graph step's
    own outputs do not depend on it, and the assign run reports the error itself."""
    try:
        return _warm(data_dir, settings), []
    except InputError as error:
        message = f"the assign run's caches were not filled: {error}"
        return None, [Finding("warning", RULE, error.path, message)]


def _warm(data_dir: Path, settings: Settings) -> WarmedCaches:
    from hulk.baseline_cache import CACHE_FILE as BASELINES_FILE
    from hulk.baseline_cache import BaselineMemory
    from hulk.data_folder import load_fleet
    from hulk.fleet_cache import CACHE_FILE as FLEET_FILE
    from hulk.placements import fleet_snapshot
    from hulk.stages.scheduling import drain, not_reporting
    from hulk.validation import read_inventory

    machines = len(read_inventory(data_dir / schemas.INVENTORY_FILE))
    if settings.cost.use_sites(machines):
        return WarmedCaches(None, None, 0, 0)
    fleet, _, _ = load_fleet(data_dir, settings)  # keeps the dense fleet
    drained, _ = not_reporting(data_dir, fleet)
    fleet = drain(fleet, drained)
    jobs = _upcoming_jobs(data_dir, settings)
    if not jobs:
        return WarmedCaches(_kept(data_dir / FLEET_FILE), None, 0, 0)
    baselines = BaselineMemory(data_dir, fleet, fleet_snapshot(fleet))
    for job in jobs:
        baselines(job)
    baselines.save()
    return WarmedCaches(
        _kept(data_dir / FLEET_FILE),
        _kept(data_dir / BASELINES_FILE),
        len(jobs),
        baselines.computed,
    )


def _kept(path: Path) -> Path | None:
    return path if path.is_file() else None


def _upcoming_jobs(data_dir: Path, settings: Settings) -> list[Job]:
    """The jobs the next assign run reports, one per job size: the jobs file's (when there is
    one) and the job store's submitted, queued and running jobs (when there is a store; none
    is created here)."""
    from hulk.job_store import QUEUED, RUNNING, SUBMITTED, JobStore
    from hulk.jobs import job_sizes, load_jobs
    from hulk.stages.scheduling import jobs_db

    jobs: list[Job] = []
    if settings.assign.jobs_file.is_file():
        jobs += load_jobs(settings.assign.jobs_file, allow_empty=True)
    store = jobs_db(data_dir)
    if store.is_file():
        with JobStore(store) as opened:
            jobs += [state.job for state in opened.jobs([SUBMITTED, QUEUED, RUNNING])]
    return list({job_sizes(job): job for job in jobs}.values())
