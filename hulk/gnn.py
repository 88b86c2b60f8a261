"""The GNN strategy: the model classifies machines, Algorithm 1 forms groups, the planner lays out.

1. The model gives each machine a probability per job of the mix (size order) and for idle.
2. `hulk.algorithm1.groups_from_probabilities` peels off one memory-feasible group per job.
3. `hulk.planner.plan_job` lays each group out (replicas, pipeline order, layers per stage).
4. A quick check guards the result: a group the planner cannot lay out, or a mix whose
   makespan (jobs side by side) exceeds `assign.gnn_fallback_ratio` × the time of running the
   jobs one after another under the best of Systems A, B and C, is clearly wrong; then the
   caller uses the teacher's placements instead, and the reason returned goes into the
   placements file.

Jobs the whole fleet can never host are rejected up front with the teacher's `InputError`, as
in every concurrent strategy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hulk.algorithm1 import groups_from_probabilities
from hulk.assign import QUEUED, placed, waiting, whole_fleet_baselines
from hulk.cost import Fleet
from hulk.errors import InputError
from hulk.jobs import Job
from hulk.placements import JobPlacement
from hulk.planner import plan_job
from hulk.settings import Settings
from hulk.teacher import never_fits


@dataclass(frozen=True)
class GnnOutcome:
    """The GNN's placements (input order), or None when the quick check rejected them."""

    placements: list[JobPlacement] | None
    fallback_reason: str | None
    inference_s: float  # model forward pass and Algorithm 1, without the stage planner


def gnn_placements(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
    settings: Settings,
) -> GnnOutcome:
    """Placements from class probabilities [n, J + 1] (class k = jobs[order[k]], J = idle)."""
    started = time.perf_counter()
    impossible = never_fits(list(jobs), fleet)
    if impossible:
        index, reason = next(iter(impossible.items()))
        raise InputError(None, "jobs.never_fits", f"job {jobs[index].name}: {reason}")
    need = np.array([jobs[j].min_memory_bytes for j in order], dtype=float)
    groups = groups_from_probabilities(proba, need, fleet.memory_bytes, fleet.active)
    grouping_s = time.perf_counter() - started

    placements: dict[int, JobPlacement] = {}
    sequential = 0.0  # the jobs one after another, each under its best baseline
    for rank, job_index in enumerate(order):
        job = jobs[job_index]
        baselines = whole_fleet_baselines(job, fleet)[0]
        sequential += min((b.iteration_s for b in baselines.values() if b.feasible), default=0.0)
        members = groups.members[rank]
        if members is None:
            placements[job_index] = waiting(
                job, fleet, QUEUED, groups.reasons[rank], baselines=baselines
            )
            continue
        plan, cost = plan_job(job, fleet, members, settings.planner)
        if not cost.feasible:
            return GnnOutcome(
                None, f"the GNN's group for {job.name} cannot run it: {cost.reason}", grouping_s
            )
        placements[job_index] = placed(job, fleet, plan, cost, baselines=baselines)
    makespan = max(
        (p.estimate.iteration_s for p in placements.values() if p.estimate is not None),
        default=0.0,
    )
    ratio = settings.assign.gnn_fallback_ratio
    if sequential > 0 and makespan > ratio * sequential:
        return GnnOutcome(
            None,
            f"the GNN's makespan ({makespan:.4g} s per iteration) exceeds {ratio:g} × the jobs "
            f"one after another under the best of Systems A, B, C ({sequential:.4g} s)",
            grouping_s,
        )
    return GnnOutcome([placements[i] for i in range(len(jobs))], None, grouping_s)
