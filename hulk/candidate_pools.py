"""Algorithm 1 of the Hulk paper: turn per-machine class probabilities into machine groups.

The graph neural network gives every machine a probability for each job of the mix (jobs in
size order, largest first, as `hulk.features.order_jobs` sorts them) and for "idle". Groups are
formed greedily, one job at a time, largest job first, from the machines still free
(`hulk.gnn.gnn_placements` drives the loop). For each job this module proposes a few
*candidate pools*; the stage planner lays the job out on each, the fastest plan wins, and the
machines that plan leaves unused go back to the free pool for the next job:

1. the **probability group** — the free machines whose most likely class is the job (its
   *core*), topped up with further free machines in order of their probability for the job
   until the pool holds ``group_slack`` × the job's layers (memory counts in whole layers, as
   in the planner: `hulk.planner.layer_capacity`); slack above 1 lets the planner drop the
   machines the model got wrong instead of having to use them;
2. up to ``site_candidates`` **site regions** — sites (machines within a few milliseconds of
   each other, `hulk.planner.site_labels`) ranked by the job's probability mass (the sum of its
   probabilities over the site's free machines); region t starts at the t-th ranked site and
   adds the next ranked sites until it holds ``site_slack`` × the job's layers. The teacher's
   plans almost always keep a job inside one site or a few neighbouring ones; the regions
   make the grouping robust to a model that spreads a job's probability over the right site
   but ranks single machines poorly.

A pool larger than the planner's search width is cut to its most likely machines (when they
still hold the job). A job whose pools cannot hold its layers waits (`queued`). Drained
machines are never used.
Ties are broken by machine and site index, so the pools are deterministic.
"""

from __future__ import annotations

import numpy as np


def probability_group(
    proba_job: np.ndarray,
    favourite: np.ndarray,
    free: np.ndarray,
    capacity: np.ndarray,
    layers: int,
    slack: float,
) -> np.ndarray:
    """The job's core plus its most likely other free machines, up to `slack` × `layers`.

    Args:
        proba_job: [n] each machine's probability for this job.
        favourite: [n] True where this job is the machine's most likely class.
        free: [n] True for active machines no earlier job has taken.
        capacity: [n] layers of this job each machine holds (`hulk.planner.layer_capacity`).
        layers: the job's layer count.
        slack: pool size as a multiple of `layers` (≥ 1).
    """
    core = np.flatnonzero(free & favourite)
    held = int(capacity[core].sum())
    wanted = slack * layers
    if held >= wanted:
        return core
    others = np.flatnonzero(free & ~favourite & (capacity > 0))
    ranked = others[np.lexsort((others, -proba_job[others]))]  # highest first, index breaks ties
    reach = np.cumsum(capacity[ranked]) + held
    enough = np.searchsorted(reach, wanted)  # first prefix reaching the wanted layers
    return np.sort(np.concatenate([core, ranked[: enough + 1]]))


def site_regions(
    proba_job: np.ndarray,
    free: np.ndarray,
    capacity: np.ndarray,
    layers: int,
    sites: np.ndarray,
    slack: float,
    count: int,
) -> list[np.ndarray]:
    """Up to `count` regions of whole sites, each grown from a different top-ranked site.

    Sites are ranked by the job's probability mass over their free machines; region t takes
    the free machines of ranked sites t, t + 1, … until it holds `slack` × `layers` layers.
    Regions that cannot hold the job's layers are left out.
    """
    usable = free & (capacity > 0)
    if not usable.any() or count < 1:
        return []
    site_count = int(sites.max()) + 1
    mass = np.bincount(sites[usable], weights=proba_job[usable], minlength=site_count)
    held = np.bincount(sites[usable], weights=capacity[usable], minlength=site_count)
    ranked = [int(s) for s in np.lexsort((np.arange(site_count), -mass)) if held[s] > 0]
    regions: list[np.ndarray] = []
    for start in range(min(count, len(ranked))):
        chosen = np.cumsum(held[ranked[start:]])
        enough = int(np.searchsorted(chosen, slack * layers))
        picked = ranked[start : start + enough + 1]
        if held[picked].sum() < layers:
            break  # later starts see fewer sites: they cannot hold the job either
        regions.append(np.flatnonzero(usable & np.isin(sites, picked)))
    return regions


def candidate_pools(
    proba_job: np.ndarray,
    favourite: np.ndarray,
    free: np.ndarray,
    capacity: np.ndarray,
    layers: int,
    sites: np.ndarray,
    group_slack: float,
    site_slack: float,
    site_candidates: int,
    limit: int,
) -> list[np.ndarray]:
    """The pools the planner tries for one job, most trusted first (module docstring).

    A pool of more than `limit` machines (the planner's search width, `planner.max_pool`) is
    cut to its `limit` most likely machines when they hold the job's layers: the planner would
    otherwise search it in windows of its fastest machines, more slowly and without the model's
    view. Only pools holding the job's layers are returned, without duplicates; empty when the
    free machines cannot hold the job.
    """
    pools: list[np.ndarray] = []
    group = probability_group(proba_job, favourite, free, capacity, layers, group_slack)
    regions = site_regions(proba_job, free, capacity, layers, sites, site_slack, site_candidates)
    for pool in [group, *regions]:
        pool = most_likely(pool, proba_job, capacity, layers, limit)
        if int(capacity[pool].sum()) < layers:
            continue
        if not any(np.array_equal(pool, kept) for kept in pools):
            pools.append(pool)
    return pools


def most_likely(
    pool: np.ndarray, proba_job: np.ndarray, capacity: np.ndarray, layers: int, limit: int
) -> np.ndarray:
    """`pool` cut to its `limit` machines most likely for the job, if they hold its layers."""
    if len(pool) <= limit:
        return pool
    top = pool[np.lexsort((pool, -proba_job[pool]))[:limit]]  # index breaks ties
    return np.sort(top) if int(capacity[top].sum()) >= layers else pool
