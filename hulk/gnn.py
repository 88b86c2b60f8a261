"""The GNN strategy: the model classifies machines, Algorithm 1 forms groups, the planner lays out.

1. The model gives each machine a probability per job of the mix (size order) and for idle.
2. Jobs are placed one at a time, largest first. For each, `hulk.algorithm1.candidate_pools`
   proposes a few pools of free machines (the machines the model gives the job, with some
   slack, and regions of the sites where its probability mass lies); `hulk.planner.plan_job`
   lays the job out on each (replicas, pipeline order, layers per stage) and the fastest plan
   wins. Pools are tried in order; a pool whose compute alone (work / Σ FLOP/s, the plan's
   lower bound) cannot beat the best plan so far is skipped, and the search stops as soon as a
   plan is no slower than the slowest job placed so far (a faster one could not shorten the
   makespan). The machines the
   winning plan leaves out go back to the free pool for the next job.
3. A quick check guards the result: a mix whose makespan (jobs side by side) exceeds
   `assign.gnn_fallback_ratio` × the time of running the jobs one after another under the best
   of Systems A, B and C is clearly wrong; then the caller uses the teacher's placements
   instead, and the reason returned goes into the placements file.

Jobs the whole fleet can never host are rejected up front with the teacher's `InputError`, as
in every concurrent strategy. A job the free machines cannot hold after the larger jobs took
theirs waits (`queued`, with the memory it needs and the memory left).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hulk.algorithm1 import GB, candidate_pools
from hulk.assign import QUEUED, placed, waiting, whole_fleet_baselines
from hulk.cost import Cost, Fleet, Plan, lower_bound
from hulk.errors import InputError
from hulk.jobs import Job
from hulk.placements import JobPlacement
from hulk.planner import layer_capacity, plan_job, site_labels
from hulk.settings import Settings
from hulk.teacher import never_fits


@dataclass(frozen=True)
class GnnOutcome:
    """The GNN's placements (input order), or None when the quick check rejected them."""

    placements: list[JobPlacement] | None
    fallback_reason: str | None
    grouping_s: float  # Algorithm 1: candidate pools (the model's forward pass is the caller's)
    planner_s: float  # the stage planner on the candidate pools


def gnn_placements(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
    settings: Settings,
    sites: np.ndarray | None = None,
) -> GnnOutcome:
    """Placements from class probabilities [n, J + 1] (class k = jobs[order[k]], J = idle).

    `sites` (`hulk.planner.site_labels` of the fleet) may be passed when it is already known.
    """
    started = time.perf_counter()
    impossible = never_fits(list(jobs), fleet)
    if impossible:
        index, reason = next(iter(impossible.items()))
        raise InputError(None, "jobs.never_fits", f"job {jobs[index].name}: {reason}")
    if sites is None:
        sites = site_labels(fleet, settings.planner.site_latency_ms)
    options = settings.assign
    favourite = np.asarray(proba).argmax(axis=1)
    free = fleet.active.copy()
    grouping_s = time.perf_counter() - started
    planner_s = 0.0
    placements: dict[int, JobPlacement] = {}
    slowest = 0.0
    sequential = 0.0  # the jobs one after another, each under its best baseline
    for rank, job_index in enumerate(order):
        job = jobs[job_index]
        baselines = whole_fleet_baselines(job, fleet)[0]
        sequential += min((b.iteration_s for b in baselines.values() if b.feasible), default=0.0)
        tick = time.perf_counter()
        pools = candidate_pools(
            proba[:, rank],
            favourite == rank,
            free,
            layer_capacity(job, fleet.memory_bytes),
            job.layers,
            sites,
            options.gnn_group_slack,
            options.gnn_site_slack,
            options.gnn_site_candidates,
        )
        grouping_s += time.perf_counter() - tick
        tick = time.perf_counter()
        best: tuple[Plan, Cost] | None = None
        for pool in pools:
            if best is not None and lower_bound(job, fleet, pool) >= best[1].iteration_s:
                continue  # even free communication would not beat the best plan so far
            plan, cost = plan_job(job, fleet, pool, settings.planner)
            if plan is not None and cost.feasible:
                if best is None or cost.iteration_s < best[1].iteration_s:
                    best = (plan, cost)
                if best[1].iteration_s <= slowest:
                    break
        planner_s += time.perf_counter() - tick
        if best is None:
            reason = (
                f"needs {job.min_memory_bytes / GB:,.0f} GB; "
                f"{fleet.memory_bytes[free].sum() / GB:,.0f} GB free until a running job finishes"
            )
            placements[job_index] = waiting(job, fleet, QUEUED, reason, baselines=baselines)
            continue
        plan, cost = best
        free[list(plan.nodes)] = False
        slowest = max(slowest, cost.iteration_s)
        placements[job_index] = placed(job, fleet, plan, cost, baselines=baselines)
    tick = time.perf_counter()
    slowest = _offer_idle(placements, free, fleet, settings, options.gnn_idle_rounds)
    planner_s += time.perf_counter() - tick
    ratio = options.gnn_fallback_ratio
    if sequential > 0 and slowest > ratio * sequential:
        return GnnOutcome(
            None,
            f"the GNN's makespan ({slowest:.4g} s per iteration) exceeds {ratio:g} × the jobs "
            f"one after another under the best of Systems A, B, C ({sequential:.4g} s)",
            grouping_s,
            planner_s,
        )
    return GnnOutcome([placements[i] for i in range(len(jobs))], None, grouping_s, planner_s)


def _offer_idle(
    placements: dict[int, JobPlacement],
    free: np.ndarray,
    fleet: Fleet,
    settings: Settings,
    rounds: int,
) -> float:
    """Offer the machines no job took to the slowest job, up to `rounds` times; the makespan.

    The slowest job is re-planned on its machines plus the free ones and keeps the new plan
    only if it is faster (its released machines go back to the free pool). Jobs are placed
    largest first without knowing what the smaller ones will get; this is the step that lets
    the job setting the makespan use what is left over.
    """
    for _ in range(rounds):
        running = {i: p for i, p in placements.items() if p.status == "placed" and p.estimate}
        if not running or not free.any():
            break
        worst = max(running, key=lambda i: running[i].estimate.iteration_s)
        current = running[worst]
        pool = np.union1d(np.asarray(current.nodes, np.int64), np.flatnonzero(free))
        plan, cost = plan_job(current.job, fleet, pool, settings.planner)
        if plan is None or not cost.feasible:
            break
        if cost.iteration_s >= current.estimate.iteration_s * (1 - 1e-9):
            break
        free[list(current.nodes)] = True
        free[list(plan.nodes)] = False
        placements[worst] = placed(current.job, fleet, plan, cost, baselines=current.baselines)
    return max(
        (p.estimate.iteration_s for p in placements.values() if p.estimate is not None),
        default=0.0,
    )
