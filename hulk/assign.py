"""Assignment: which machines serve which job, and how it changes when the fleet changes.

`place_jobs(jobs, fleet, strategy, settings, seed)` returns one `JobPlacement` per job, in input
order. The strategies are a table (`STRATEGIES`: name → function), so a new one is one entry:

* ``teacher`` — the cost-model search of `hulk.teacher.teacher_search`: disjoint machine groups,
  one per job, running side by side (schedule ``concurrent``); a job that fits the fleet but
  not the machines left is ``queued``. A job that the whole fleet can never host stops the run
  with the teacher's `InputError`.
* ``gnn`` — the trained model: it needs the champion model, so it runs through
  `hulk.gnn.model_placements` (as `hulk assign --strategy gnn` does); here it is a clear error
  (``assign.needs_model``) naming that function.
* ``A``, ``B``, ``C`` — the paper's baselines (`hulk.baselines`, docs/design.md#baselines).
  Each uses the WHOLE fleet for every job, so the jobs run one after another (schedule
  ``sequential``). The
  file states exactly that, without breaking the contract's "a node serves at most one job":
  in run order (priority, highest first, then input order) the first job the system can run is
  ``placed`` with the system's own plan (System C, tensor parallel, has no pipeline stages: its
  ``layout`` is ``tensor``, ``nodes`` every active machine, ``replicas`` empty); every later job
  it can run is ``queued`` with ``run_order`` and a reason naming the job it waits for; a job
  the system cannot run at all is ``infeasible`` with the system's reason. A queued job's time
  under the system is its ``baselines`` entry. ``makespan_s`` is the sum over the jobs that run
  (docs/design.md#cost-model: a whole-fleet system → the sum over jobs); infeasible jobs
  are not in it.

For the concurrent strategies ``makespan_s`` is the slowest placed job's iteration time
(queued jobs have no estimate yet, so they are not in it).

Every job's entry also carries the A/B/C figures over the whole fleet and, when it has
machines, the lower bound work / Σ F over them.

**Re-planning** (`replan`) after machines fail or are added, given the placements, the fleet
they were made on and the fleet as it is now (failed machines removed, new ones added):

* concurrent schedules — a placed job that touches no failed machine keeps its machines and
  stages exactly (its ``status``, ``reason``, ``nodes`` and ``replicas`` are unchanged). Its
  ``estimate``, lower bound and ``baselines`` are recomputed on the new fleet: links and relay
  paths may have changed (a relay through a failed machine, a new link), and the file describes
  the fleet as it is. They come out identical when nothing the plan uses changed. Should the
  kept plan no longer run on the new fleet (two of its machines only reached each other through
  a failed one), the job counts as affected. Affected jobs, then queued and infeasible jobs
  (these get another chance: machines may have been added or freed), are re-planned over the
  free machines — the affected jobs' surviving machines plus the machines no kept job uses —
  with the teacher restricted to those jobs and machines (it plans each job with
  `hulk.planner.plan_job`): first the affected jobs, as they were running and a queued job must
  not take the machines they need to go on, then the waiting jobs on what is left. A job that
  the free machines can never host is ``queued`` when the whole new fleet could host it, else
  ``infeasible`` (`hulk.teacher.never_fits` says why).
* sequential schedules (A, B, C) — every job uses the whole fleet, so a change touches every
  job: the system is re-run on the new fleet.

`Move` reports, per job whose machines or status changed, the node ids removed and added.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.baselines import SYSTEMS, system_c
from hulk.cost import Cost, Fleet, Plan, iteration_time, lower_bound, makespan_concurrent
from hulk.errors import InputError
from hulk.jobs import Job
from hulk.placements import (
    CONCURRENT,
    INFEASIBLE,
    PIPELINE,
    PLACED,
    QUEUED,
    SEQUENTIAL,
    TENSOR,
    JobPlacement,
)
from hulk.settings import Settings

Strategy = Callable[[Sequence[Job], Fleet, Settings, int], list[JobPlacement]]

NEEDS_MODEL = (
    "the gnn strategy needs the champion model: hulk.gnn.model_placements runs it (as "
    "`hulk assign --strategy gnn` does), place_jobs does not"
)


# --- helpers ----------------------------------------------------------------------------------


def priority_order(jobs: Sequence[Job]) -> list[int]:
    """Indices of `jobs` by priority (highest first), then input order."""
    return sorted(range(len(jobs)), key=lambda i: (-jobs[i].priority, i))


def whole_fleet_baselines(job: Job, fleet: Fleet) -> tuple[dict[str, Cost], dict[str, Plan | None]]:
    """Systems A, B, C over the whole fleet: their costs and plans (None for C / infeasible)."""
    costs: dict[str, Cost] = {}
    plans: dict[str, Plan | None] = {}
    for name, system in SYSTEMS.items():
        costs[name], plans[name] = system(job, fleet)
    return costs, plans


def plan_cost(job: Job, fleet: Fleet, nodes: Sequence[int], plan: Plan | None, layout: str) -> Cost:
    """Cost of a placement's layout on `fleet`: the pipeline plan, or System C over `nodes`."""
    if layout == TENSOR:
        return system_c(job, fleet.subset(nodes))[0]
    if plan is None:
        return Cost.infeasible("no plan")
    return iteration_time(job, fleet, plan)


def placed(
    job: Job,
    fleet: Fleet,
    plan: Plan | None,
    cost: Cost,
    *,
    nodes: Sequence[int] | None = None,
    layout: str = PIPELINE,
    baselines: Mapping[str, Cost] | None = None,
    reason: str | None = None,
    run_order: int | None = None,
) -> JobPlacement:
    """A placed job with its lower bound and baselines filled in."""
    nodes = tuple(int(n) for n in (plan.nodes if nodes is None and plan else nodes or ()))
    if baselines is None:
        baselines = whole_fleet_baselines(job, fleet)[0]
    return JobPlacement(
        job=job,
        status=PLACED,
        reason=reason,
        nodes=nodes,
        plan=plan if layout == PIPELINE else None,
        estimate=cost,
        lower_bound_s=lower_bound(job, fleet, nodes),
        baselines=dict(baselines),
        layout=layout,
        run_order=run_order,
    )


def waiting(
    job: Job,
    fleet: Fleet,
    status: str,
    reason: str | None,
    *,
    baselines: Mapping[str, Cost] | None = None,
    run_order: int | None = None,
) -> JobPlacement:
    """A queued or infeasible job (no machines, no estimate) with its baselines."""
    if baselines is None:
        baselines = whole_fleet_baselines(job, fleet)[0]
    return JobPlacement(
        job=job, status=status, reason=reason, baselines=dict(baselines), run_order=run_order
    )


def schedule_of(strategy: str) -> str:
    """``sequential`` for the whole-fleet systems A, B, C; ``concurrent`` otherwise."""
    return SEQUENTIAL if strategy in SYSTEMS else CONCURRENT


def makespan(placements: Sequence[JobPlacement], strategy: str) -> float | None:
    """Seconds per iteration of the whole mix (module docstring); None when nothing runs."""
    if schedule_of(strategy) == SEQUENTIAL:
        times = [
            p.baselines[strategy].iteration_s
            for p in placements
            if p.run_order is not None and strategy in p.baselines
        ]
        return math.fsum(times) if times else None
    costs = [p.estimate for p in placements if p.status == PLACED and p.estimate is not None]
    return makespan_concurrent(costs) if costs else None


# --- strategies -------------------------------------------------------------------------------


def _whole_fleet_system(name: str) -> Strategy:
    """A strategy running System `name` on the whole fleet, one job after another."""

    def strategy(
        jobs: Sequence[Job], fleet: Fleet, settings: Settings, seed: int
    ) -> list[JobPlacement]:
        result: dict[int, JobPlacement] = {}
        previous: str | None = None
        turn = 0
        runnable = 0
        for i in priority_order(jobs):
            runnable += SYSTEMS[name](jobs[i], fleet)[0].feasible
        for i in priority_order(jobs):
            job = jobs[i]
            costs, plans = whole_fleet_baselines(job, fleet)
            cost, plan = costs[name], plans[name]
            if not cost.feasible:
                result[i] = waiting(job, fleet, INFEASIBLE, cost.reason, baselines=costs)
                continue
            turn += 1
            if previous is None:
                tensor = plan is None
                result[i] = placed(
                    job,
                    fleet,
                    plan,
                    cost,
                    nodes=tuple(fleet.active_indices()) if tensor else None,
                    layout=TENSOR if tensor else PIPELINE,
                    baselines=costs,
                    run_order=turn,
                )
            else:
                reason = (
                    f"System {name} runs one job at a time on the whole fleet: starts when "
                    f"{previous!r} finishes (turn {turn} of {runnable})"
                )
                result[i] = waiting(job, fleet, QUEUED, reason, baselines=costs, run_order=turn)
            previous = job.name
        return [result[i] for i in range(len(jobs))]

    strategy.__doc__ = f"System {name} on the whole fleet for every job, one job at a time."
    return strategy


def _gnn(jobs: Sequence[Job], fleet: Fleet, settings: Settings, seed: int) -> list[JobPlacement]:
    """The trained GNN + Algorithm 1: it needs the model, which `hulk.gnn.model_placements`
    takes; without one this is the error saying so."""
    raise InputError(None, "assign.needs_model", NEEDS_MODEL)


def _teacher(
    jobs: Sequence[Job], fleet: Fleet, settings: Settings, seed: int
) -> list[JobPlacement]:
    """The cost-model search of `hulk.teacher` over the whole fleet."""
    return _teacher_on(jobs, fleet, list(fleet.active_indices()), settings, seed)


STRATEGIES: dict[str, Strategy] = {
    "gnn": _gnn,
    "teacher": _teacher,
    **{name: _whole_fleet_system(name) for name in SYSTEMS},
}


def check_strategy(strategy: str) -> None:
    """`InputError` for an unknown strategy (the registry answers whether a champion exists)."""
    if strategy not in STRATEGIES:
        raise InputError(
            None,
            "assign.unknown_strategy",
            f"--strategy {strategy!r} is not one of auto, {', '.join(STRATEGIES)}",
        )


def place_jobs(
    jobs: Sequence[Job], fleet: Fleet, strategy: str, settings: Settings, seed: int
) -> list[JobPlacement]:
    """Place `jobs` on `fleet` with `strategy` (one of `STRATEGIES`); input order kept."""
    check_strategy(strategy)
    if not jobs:
        return []
    return STRATEGIES[strategy](list(jobs), fleet, settings, seed)


# --- the teacher ---------------------------------------------------------------------------------


def _teacher_on(
    jobs: Sequence[Job], fleet: Fleet, nodes: Sequence[int], settings: Settings, seed: int
) -> list[JobPlacement]:
    """Teacher search for `jobs` restricted to fleet indices `nodes` (input order kept).

    Raises the teacher's `InputError` for a job that the machines `nodes` can never host.
    """
    from hulk.teacher import teacher_search

    nodes = sorted(int(n) for n in nodes)
    whole = nodes == list(range(fleet.n))
    sub = fleet if whole else fleet.subset(nodes)
    back = np.asarray(nodes, np.int64)
    result = teacher_search(list(jobs), sub, settings.teacher, settings.planner, seed)
    placements = []
    for job, outcome in zip(jobs, result.placements, strict=True):
        if outcome.status == PLACED and outcome.plan is not None:
            plan = outcome.plan if whole else _reindex(outcome.plan, back)
            placements.append(placed(job, fleet, plan, iteration_time(job, fleet, plan)))
        else:
            placements.append(waiting(job, fleet, QUEUED, outcome.reason))
    return placements


def _reindex(plan: Plan, back: np.ndarray) -> Plan:
    """A plan over a sub-fleet, in the full fleet's indices (`back[i]` = full index of i)."""
    return Plan(
        tuple(
            tuple(replace(stage, node=int(back[stage.node])) for stage in replica)
            for replica in plan.replicas
        )
    )


# --- re-planning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """What changed for one job in a re-plan (node ids, not fleet indices)."""

    job: str
    status_before: str
    status_after: str
    nodes_removed: tuple[int, ...]
    nodes_added: tuple[int, ...]
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status_before": self.status_before,
            "status_after": self.status_after,
            "nodes_removed": list(self.nodes_removed),
            "nodes_added": list(self.nodes_added),
            "reason": self.reason,
        }


def moved_onto(placement: JobPlacement, before: Fleet, after: Fleet) -> JobPlacement:
    """The same machines and stages on fleet `after`; estimate, bound, baselines recomputed."""
    ids = placement.node_ids(before)
    nodes = tuple(int(i) for i in after.index_of(ids)) if ids else ()
    plan = placement.plan
    if plan is not None:
        plan = Plan.from_records(after, plan.to_records(before))
    baselines = whole_fleet_baselines(placement.job, after)[0]
    if placement.status != PLACED:
        return replace(placement, nodes=(), plan=None, estimate=None, baselines=baselines)
    cost = plan_cost(placement.job, after, nodes, plan, placement.layout)
    return replace(
        placement,
        nodes=nodes,
        plan=plan,
        estimate=cost,
        lower_bound_s=lower_bound(placement.job, after, nodes),
        baselines=baselines,
    )


def check_failed(fleet: Fleet, failed_node_ids: Sequence[int]) -> list[int]:
    """The failed node ids, checked: each must be a machine of `fleet` (`InputError` naming
    the option otherwise)."""
    ids = [int(n) for n in failed_node_ids]
    known = set(fleet.node_ids.tolist())
    unknown = [n for n in ids if n not in known]
    if unknown:
        raise InputError(
            None, "replan.unknown_node", f"--fail: node id(s) {unknown} are not in the fleet"
        )
    return sorted(set(ids))


def earlier_failures(doc: Mapping[str, Any], fleet: Fleet) -> list[int]:
    """Machines a re-planned file's chain already lost (its ``replan.failed``) that `fleet`
    still lists: they stay out of later re-plans and evaluations of that chain."""
    record = doc.get("replan")
    failed = record.get("failed") if isinstance(record, dict) else None
    if not isinstance(failed, list):
        return []
    known = set(fleet.node_ids.tolist())
    return sorted({n for n in failed if isinstance(n, int) and n in known})


def replan(
    placements: Sequence[JobPlacement],
    fleet_before: Fleet,
    fleet_after: Fleet,
    failed_node_ids: Sequence[int],
    strategy: str,
    settings: Settings,
    seed: int,
) -> tuple[list[JobPlacement], list[Move]]:
    """Re-plan after machines failed or were added (module docstring).

    `placements` are on `fleet_before`; the result is on `fleet_after` (which should no longer
    hold the failed machines; any it still holds are not used). Returns the new placements in
    the same job order and the moves.
    """
    failed = set(check_failed(fleet_before, failed_node_ids))
    jobs = [p.job for p in placements]
    if schedule_of(strategy) == SEQUENTIAL:
        new = place_jobs(jobs, fleet_after, strategy, settings, seed)
        return new, moves(placements, fleet_before, new, fleet_after)

    kept: dict[int, JobPlacement] = {}
    redo: list[int] = []
    why: dict[int, str | None] = {}
    for i, placement in enumerate(placements):
        ids = set(placement.node_ids(fleet_before))
        if placement.status != PLACED:
            redo.append(i)
            continue
        if ids & failed:
            redo.append(i)
            why[i] = f"lost machine(s) {sorted(ids & failed)}"
            continue
        moved = moved_onto(placement, fleet_before, fleet_after)
        if moved.estimate is not None and moved.estimate.feasible:
            kept[i] = moved
        else:
            redo.append(i)
            why[i] = moved.estimate.reason if moved.estimate else "no estimate"

    used = {n for p in kept.values() for n in p.nodes}
    failed_here = set()
    if len(failed):
        present = [n for n in failed if n in set(fleet_after.node_ids.tolist())]
        failed_here = set(fleet_after.index_of(present).tolist()) if present else set()
    free = [int(i) for i in fleet_after.active_indices() if i not in used | failed_here]
    # The jobs that were running are re-planned first, so that a queued job never takes the
    # machines a running job needs to go on; the waiting jobs then get what is left.
    result = dict(kept)
    affected = [i for i in redo if placements[i].status == PLACED]
    waiting_jobs = [i for i in redo if placements[i].status != PLACED]
    for group in (affected, waiting_jobs):
        fresh = place_on_free(
            [jobs[i] for i in group], fleet_after, free, failed_here, settings, seed
        )
        result.update(zip(group, fresh, strict=True))
        taken = {n for p in fresh for n in p.nodes}
        free = [n for n in free if n not in taken]
    new = [result[i] for i in range(len(placements))]
    return new, moves(placements, fleet_before, new, fleet_after, why)


def place_on_free(
    jobs: Sequence[Job],
    fleet: Fleet,
    free: Sequence[int],
    excluded: set[int],
    settings: Settings,
    seed: int,
) -> list[JobPlacement]:
    """Place `jobs` on the free fleet indices `free` with the teacher restricted to them.

    A job that the whole fleet (its active machines minus `excluded`) can never host is
    ``infeasible``; one that only the free machines cannot host is ``queued`` (it waits for
    machines to be freed); the teacher places the others or queues them itself.
    """
    from hulk.teacher import never_fits

    if not jobs:
        return []
    everything = [int(i) for i in fleet.active_indices() if i not in excluded]
    never = never_fits(jobs, fleet.subset(everything))
    free = sorted(int(i) for i in free)
    not_now = never_fits(jobs, fleet.subset(free)) if free else {}
    result: dict[int, JobPlacement] = {}
    for i, job in enumerate(jobs):
        if i in never:
            result[i] = waiting(job, fleet, INFEASIBLE, never[i])
        elif i in not_now or not free:
            why = not_now.get(i, f"job {job.name} has no free machine")
            result[i] = waiting(job, fleet, QUEUED, f"{why}; waits for machines to be freed")
    rest = [i for i in range(len(jobs)) if i not in result]
    if rest:
        found = _teacher_on([jobs[i] for i in rest], fleet, free, settings, seed)
        result.update(zip(rest, found, strict=True))
    return [result[i] for i in range(len(jobs))]


def moves(
    before: Sequence[JobPlacement],
    fleet_before: Fleet,
    after: Sequence[JobPlacement],
    fleet_after: Fleet,
    why: Mapping[int, str | None] | None = None,
) -> list[Move]:
    """Per job whose machines or status changed: node ids removed and added (job order)."""
    result = []
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        old_ids = old.node_ids(fleet_before)
        new_ids = new.node_ids(fleet_after)
        if (
            old.status == new.status
            and old_ids == new_ids
            and _same_plan(old, fleet_before, new, fleet_after)
        ):
            continue
        removed = tuple(sorted(set(old_ids) - set(new_ids)))
        added = tuple(sorted(set(new_ids) - set(old_ids)))
        reason = (why or {}).get(i) or new.reason
        result.append(Move(old.job.name, old.status, new.status, removed, added, reason))
    return result


def _same_plan(old: JobPlacement, fleet_old: Fleet, new: JobPlacement, fleet_new: Fleet) -> bool:
    records_old = old.plan.to_records(fleet_old) if old.plan else None
    records_new = new.plan.to_records(fleet_new) if new.plan else None
    return records_old == records_new


def changed_fleet_frames(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    failed_node_ids: Sequence[int],
    added_inventory: pd.DataFrame | None = None,
    added_links: pd.DataFrame | None = None,
    source: str | Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Inventory and link table after a change: failed machines and their links removed, added
    machines and links appended (an added link replaces the row of the same pair).

    A failed machine is gone: it neither computes nor relays. An added machine without any link
    is an `InputError` (naming `source`): it could never be reached.
    """
    failed = list(failed_node_ids)
    inv = inventory[~inventory["node_id"].isin(failed)]
    touching = links["src"].isin(failed) | links["dst"].isin(failed)
    kept = links[~touching]
    if added_inventory is not None and len(added_inventory):
        inv = pd.concat([inv, schemas.conform(added_inventory, schemas.INVENTORY)])
    if added_links is not None and len(added_links):
        new = added_links[~(added_links["src"].isin(failed) | added_links["dst"].isin(failed))]
        new = schemas.conform(new, schemas.LINKS)
        new_pairs = set(_pairs(new))
        kept = kept[[pair not in new_pairs for pair in _pairs(kept)]]
        kept = pd.concat([schemas.conform(kept, schemas.LINKS), new]) if len(kept) else new
    if added_inventory is not None and len(added_inventory):
        linked = set(kept["src"].tolist()) | set(kept["dst"].tolist())
        isolated = sorted(set(added_inventory["node_id"].tolist()) - linked)
        if isolated:
            raise InputError(
                source,
                "replan.isolated_node",
                f"added machine(s) {isolated} have no link to any machine (give their "
                "measured links with --add-edges)",
            )
    inv = inv.sort_values("node_id").reset_index(drop=True)
    kept = kept.sort_values(["src", "dst"]).reset_index(drop=True)
    return inv, kept


def _pairs(links: pd.DataFrame) -> list[tuple[int, int]]:
    """Unordered (low, high) node-id pairs of a link table's rows."""
    src, dst = links["src"].to_numpy(np.int64), links["dst"].to_numpy(np.int64)
    return list(zip(np.minimum(src, dst).tolist(), np.maximum(src, dst).tolist(), strict=True))
