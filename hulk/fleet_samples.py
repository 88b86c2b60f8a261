"""Training samples drawn from the data folder's own fleet, for the nightly fine-tune.

The prior (`hulk.corpus`) knows generated fleets; each night the model is fine-tuned on the
fleet it serves. This module decides *what* to label, as pure functions of the fleet, its link
tables, the job pool and a seed (the pipeline reads the files, `hulk.fleet_labels` labels):

**Link snapshots.** With logs, the ingest window is cut into calendar blocks of
``window_days`` days (block k holds the days d with ``(d − 1970-01-01) // window_days == k``),
so a block keeps its content from night to night and its samples stay labelled. The newest
block (possibly shorter) is **held out**: its samples only evaluate models, never train them.
Only whole blocks before it are used, the newest ``max_windows`` of them. Each block's link
table is computed from the logs of its days alone: congestion, outages and drifting links
become training variety. Without logs (a fleet imported as a link table), the held-out snapshot
is the link table itself and the training snapshots are ``drift_snapshots`` drifted copies: each
link's latencies scaled by a log-normal factor (sigma ``drift``) and a ``drift_outage`` share of
the links missing.

**Samples.** On every training snapshot: ``mixes`` job mixes on the whole fleet, ``subfleets``
on a sub-fleet (a share ``removed_cities`` of its cities left out, at least one machine kept)
and ``drained`` with a share ``drained_fraction`` of the active machines drained, as after
failures; as many times over as it takes to reach ``min_train_samples`` on all the training
snapshots together (a short log has few blocks: each gives more samples). The upcoming jobs
(the jobs file) are one more mix on the newest training snapshot.
On the held-out snapshot: the upcoming jobs and ``eval_mixes`` drawn mixes, whole fleet.

**Mixes** draw 1..``max_jobs`` jobs from the pool (the jobs file, the jobs of recently published
placements, the presets); with probability ``perturb_share`` a job is a perturbed variant
(`hulk.corpus.perturbed_job`, the corpus's scales). A job the sample's fleet could never host
is drawn again. Names are unique within a mix.

**Roles.** Held-out samples are ``eval``; a training sample is ``val`` (early stopping) when a
hash of (seed, its name) falls below ``val_fraction``, else ``train``. A sample's name, and
every random draw it makes, depend only on the seed and on its snapshot's name: the same block
gives the same samples every night.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.cost import Fleet
from hulk.jobs import PRESET_JOBS, Job, job_to_dict
from hulk.settings import FleetSamplesSettings, Settings
from hulk.teacher import never_fits

ROLES: tuple[str, ...] = ("train", "val", "eval")
EPOCH = dt.date(1970, 1, 1)
_MAX_REDRAWS = 50
_LATENCY_COLUMNS = ("latency_p50_ms", "latency_p95_ms", "latency_mean_ms", "alpha_ms")


@dataclass(frozen=True)
class Block:
    """Days ``first`` .. ``last`` (inclusive, UTC) of the logs: one link snapshot."""

    first: dt.date
    last: dt.date

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    @property
    def name(self) -> str:
        return f"{self.first.isoformat()}..{self.last.isoformat()}"

    @property
    def window_end(self) -> dt.datetime:
        """The midnight (UTC) after the block's last day: the end of its ingest window."""
        return dt.datetime.combine(self.last + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


def log_blocks(
    first_day: dt.date, last_day: dt.date, block_days: int, max_blocks: int
) -> tuple[list[Block], Block]:
    """(training blocks, oldest first; the held-out block) over the days first..last.

    Blocks are aligned on whole multiples of `block_days` days since 1970-01-01; the held-out
    block is the (possibly partial) one holding `last_day`; training blocks are the whole blocks
    before it that start on or after `first_day`, the newest `max_blocks` of them.
    """
    if last_day < first_day:
        raise ValueError(f"no days: {first_day} .. {last_day}")
    newest = (last_day - EPOCH).days // block_days

    def start(index: int) -> dt.date:
        return EPOCH + dt.timedelta(days=index * block_days)

    held_out = Block(max(first_day, start(newest)), last_day)
    blocks: list[Block] = []
    index = newest - 1
    while len(blocks) < max_blocks and start(index) >= first_day:
        blocks.append(Block(start(index), start(index + 1) - dt.timedelta(days=1)))
        index -= 1
    return blocks[::-1], held_out


@dataclass(frozen=True)
class LinkSnapshot:
    """A link table of the fleet (schemas.LINKS) under a stable name."""

    name: str
    links: pd.DataFrame
    held_out: bool = False


def drifted_links(links: pd.DataFrame, index: int, settings: FleetSamplesSettings, seed: int):
    """Copy `index` of a link table with drifted latencies and some links missing."""
    rng = named_rng(seed, "drift", str(index))
    keep = rng.random(len(links)) >= settings.drift_outage
    out = links.loc[keep].reset_index(drop=True).copy()
    factor = rng.lognormal(0.0, settings.drift, len(links))[keep]
    for column in _LATENCY_COLUMNS:
        out[column] = out[column] * factor
    return schemas.conform(out, schemas.LINKS)


def drift_snapshots(
    links: pd.DataFrame, settings: FleetSamplesSettings, seed: int
) -> list[LinkSnapshot]:
    """The training snapshots of a fleet without logs (module docstring)."""
    return [
        LinkSnapshot(f"drift-{index:02d}", drifted_links(links, index, settings, seed))
        for index in range(settings.drift_snapshots)
    ]


@dataclass(frozen=True)
class FleetSample:
    """One (snapshot, variant of the fleet, job mix) to be labelled by the teacher."""

    name: str  # "<snapshot>/<variant>-<k>": stable from night to night
    role: str  # train | val | eval
    snapshot: str  # the LinkSnapshot's name
    variant: str  # fleet | subfleet | drained | upcoming
    removed: tuple[int, ...]  # node ids left out of the fleet
    drained: tuple[int, ...]  # node ids marked drained
    jobs: tuple[Job, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "snapshot": self.snapshot,
            "variant": self.variant,
            "removed": list(self.removed),
            "drained": list(self.drained),
            "jobs": [job_to_dict(job) for job in self.jobs],
        }


def sample_frames(
    sample: FleetSample, inventory: pd.DataFrame, links: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(inventory, links) of a sample's fleet: machines removed, drained ones marked."""
    removed = np.asarray(sample.removed, dtype=np.int64)
    kept = inventory.loc[~inventory["node_id"].isin(removed)].copy()
    kept.loc[kept["node_id"].isin(np.asarray(sample.drained, dtype=np.int64)), "status"] = (
        schemas.STATUS_DRAINED
    )
    kept = kept.sort_values("node_id", kind="stable").reset_index(drop=True)
    inside = links["src"].isin(kept["node_id"]) & links["dst"].isin(kept["node_id"])
    return schemas.conform(kept, schemas.INVENTORY), links.loc[inside].reset_index(drop=True)


def job_pool(upcoming: Sequence[Job], recent: Sequence[Job]) -> list[Job]:
    """The jobs mixes are drawn from: upcoming, recently placed, presets (first name wins).

    Only a job's sizes matter to a placement: its length and times (the scheduler's) are
    dropped, so labels stay cached when they change."""
    pool: dict[str, Job] = {}
    for job in [*upcoming, *recent, *PRESET_JOBS.values()]:
        pool.setdefault(job.name, job.sizes_only())
    return list(pool.values())


def draw_samples(
    inventory: pd.DataFrame,
    snapshots: Sequence[LinkSnapshot],
    upcoming: Sequence[Job],
    pool: Sequence[Job],
    settings: Settings,
    seed: int,
) -> list[FleetSample]:
    """Every sample of tonight's fine-tune and evaluation (module docstring), in a fixed order."""
    fs = settings.fleet_samples
    samples: list[FleetSample] = []
    training = [s for s in snapshots if not s.held_out]
    newest_training = training[-1].name if training else None
    per_round = fs.mixes + fs.subfleets + fs.drained
    rounds = max(1, math.ceil(fs.min_train_samples / max(1, per_round * len(training))))
    for snapshot in snapshots:
        plan: list[tuple[str, int]] = []
        if snapshot.held_out:
            plan += [("fleet", k) for k in range(fs.eval_mixes)]
        else:
            plan += [("fleet", k) for k in range(fs.mixes * rounds)]
            plan += [("subfleet", k) for k in range(fs.subfleets * rounds)]
            plan += [("drained", k) for k in range(fs.drained * rounds)]
        with_upcoming = snapshot.held_out or snapshot.name == newest_training
        if with_upcoming and upcoming:
            plan.insert(0, ("upcoming", 0))
        for variant, k in plan:
            name = f"{snapshot.name}/{variant}-{k}"
            rng = named_rng(seed, "sample", name)
            removed, drained = _variant_machines(inventory, variant, rng, fs)
            frames = sample_frames(
                FleetSample(name, "", snapshot.name, variant, removed, drained, ()),
                inventory,
                snapshot.links,
            )
            if not (frames[0]["status"] == schemas.STATUS_ACTIVE).any():
                continue
            fleet = Fleet.from_frames(
                *frames, settings.hardware, settings.graph.bandwidth_tiers, settings.cost
            )
            if variant == "upcoming":
                jobs = tuple(job for job in upcoming if not never_fits([job], fleet))
            else:
                jobs = draw_mix(pool, fleet, rng, settings)
            if not jobs:
                continue
            role = "eval" if snapshot.held_out else _training_role(seed, name, fs.val_fraction)
            samples.append(FleetSample(name, role, snapshot.name, variant, removed, drained, jobs))
    return samples


def _variant_machines(
    inventory: pd.DataFrame, variant: str, rng: np.random.Generator, fs: FleetSamplesSettings
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(removed, drained) node ids of a variant of the fleet."""
    ids = inventory["node_id"].to_numpy(np.int64)
    if variant == "subfleet":
        cities = pd.unique(inventory["city"].astype(str))
        share = _uniform(rng, fs.removed_cities.low, fs.removed_cities.high)
        if len(cities) > 1:
            count = min(max(1, round(share * len(cities))), len(cities) - 1)
            gone = cities[rng.permutation(len(cities))[:count]]
            mask = inventory["city"].astype(str).isin(gone).to_numpy()
        else:  # one city: leave out a share of its machines instead
            mask = rng.random(len(ids)) < share
            mask[rng.integers(len(ids))] = False
        return tuple(sorted(ids[mask].tolist())), ()
    if variant == "drained":
        active = ids[(inventory["status"] == schemas.STATUS_ACTIVE).to_numpy(bool)]
        share = _uniform(rng, fs.drained_fraction.low, fs.drained_fraction.high)
        count = min(max(1, round(share * len(active))), max(len(active) - 1, 0))
        if not count:
            return (), ()
        chosen = rng.choice(active, size=count, replace=False)
        return (), tuple(sorted(int(i) for i in chosen))
    return (), ()


def draw_mix(
    pool: Sequence[Job], fleet: Fleet, rng: np.random.Generator, settings: Settings
) -> tuple[Job, ...]:
    """1..`fleet_samples.max_jobs` jobs from `pool` (module docstring, "Mixes"): each a job of
    the pool or, with probability `perturb_share` (always for a job drawn again), a perturbed
    variant; a job `fleet` could never host is drawn again."""
    from hulk.corpus import perturbed_job

    fs = settings.fleet_samples
    count = int(rng.integers(1, fs.max_jobs + 1))
    jobs: list[Job] = []
    used: dict[str, int] = {}
    for _ in range(count):
        for _ in range(_MAX_REDRAWS):
            base = pool[int(rng.integers(len(pool)))]
            copies = used.get(base.name, 0) + 1
            perturb = rng.random() < fs.perturb_share or copies > 1
            name = f"{base.name}_v{copies}" if perturb else base.name
            job = perturbed_job(base, name, rng, settings.corpus) if perturb else base
            if not never_fits([job], fleet):
                used[base.name] = copies
                jobs.append(job)
                break
    return tuple(jobs)


def _training_role(seed: int, name: str, val_fraction: float) -> str:
    digest = hashlib.sha256(f"hulk-fleet-sample:{seed}:{name}".encode()).digest()
    return "val" if int.from_bytes(digest[:8], "big") / 2.0**64 < val_fraction else "train"


def named_rng(seed: int, purpose: str, name: str) -> np.random.Generator:
    """A generator for one purpose and name: the same (seed, purpose, name), the same draws."""
    digest = hashlib.sha256(f"{purpose}:{name}".encode()).digest()
    keys = [int.from_bytes(digest[i : i + 4], "big") for i in range(0, 16, 4)]
    return np.random.default_rng(np.random.SeedSequence([seed & (2**63 - 1), *keys]))


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(low + (high - low) * rng.random())
