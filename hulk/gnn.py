"""The GNN strategy: the model classifies machines, Algorithm 1 forms groups, the planner lays out.

1. The model gives each machine a probability per job of the mix (size order) and for idle.
2. Jobs are placed one at a time, largest first. For each, `hulk.candidate_pools.candidate_pools`
   proposes a few pools of free machines (the machines the model gives the job, with some
   slack, and regions of the sites where its probability mass lies, each cut to the planner's
   search width); `hulk.planner.plan_job` lays the job out on each (replicas, pipeline order,
   layers per stage, with the narrower search of `assign.gnn_planner`, narrower still on a
   large fleet: `assign.gnn_planner_large`) and the fastest plan
   wins. A pool whose compute alone cannot beat the best plan so far is skipped, and a job
   stops at a plan no slower than the slowest job placed before it. The machines the winning
   plan leaves out go back to the free pool.
   The same jobs laid out on the model's own groups (with the full planner search) are the
   other candidate, on fleets of up to twice `planner.max_pool` active machines and wherever
   a job had to wait. Each job takes round(Σ_i p_ik) machines, the most likely first:
   machines with the same hardware in the same place get the same probabilities, and the
   teacher splits them between jobs in the proportion those probabilities give, where their
   most likely class would hand the whole region to one job. A group still too small for its
   job takes the machines it is next most likely to serve from idle machines or from groups
   that hold their job without them. When the groups hold every job and the makespan is
   shorter (or more jobs are placed), these plans are kept: a model that has learnt the
   teacher's groups gets the teacher's balance between jobs, which the greedy pools (each
   job as fast as it can be, largest first) do not look for.
3. The slowest job is then offered the machines no job took (`assign.gnn_idle_rounds` times)
   and keeps a faster plan if the planner finds one (a job still the slowest after its offer is
   not offered its own and the idle machines again). Jobs are placed largest first without
   knowing what the smaller ones will leave; on a small fleet this lets the job that sets the
   makespan use the rest. On a large one the idle machines are too many for one planner search
   (`planner.max_pool`), and the job is offered the fastest of them that fit: the model's
   pools often give a small job a machine half as fast as the fastest one left idle (on three
   1,000-machine fleets the plans went from 1.01–1.11× the teacher's makespan to 0.99–1.01×,
   for about 14 % more of the GNN's time: docs/experiments.md).
4. On a fleet of up to twice `planner.max_pool` active machines, a short local search starts
   from these plans (`hulk.teacher.refine`: the teacher's moves, at most
   `assign.gnn_refine_evaluations` assignments, a share `assign.gnn_refine_guided` of the
   slowest job's moves drawing machines by the model's probabilities) and its result is kept
   when it is faster. Greedy pools place each job as fast as it can be, largest first; where
   two large jobs compete for the same sites, moving machines between them is what balances
   the makespan, and on such a fleet a hundred evaluations cost a fraction of a second
   (measured: bench/README.md). Half of the budget goes to a second search from a grown
   start (each job, most work first, a compact region seeded where the model puts its compute,
   holding its memory and leaving the rest theirs): greedy pools give the first large job the
   strong sites and starve the next, and single moves do not undo that (measured: a mix of
   OPT-175B and a 110B job on paper-47 with a third drained stayed at 1.23x the teacher, 1.00x
   with the second start). On a large fleet it is not run: each evaluation re-plans
   whole groups, and the speed target there leaves no room for it.
5. A quick check guards the result: a mix whose makespan (jobs side by side) exceeds
   `assign.gnn_fallback_ratio` × the time of running the jobs one after another under the best
   of Systems A, B and C (`hulk.baselines.best_baseline_seconds`) is clearly wrong; then the
   caller uses the teacher's placements instead, and the reason goes into the placements file.

`gnn_decide` makes these decisions and times them; `gnn_placements` turns them into the
placements file's records, which also carry every job's A/B/C baselines (reporting, computed
for every strategy alike). Jobs the whole fleet can never host are rejected up front with the
teacher's `InputError`, as in every concurrent strategy. A job the free machines cannot hold
after the larger jobs took theirs waits (`queued`, with the memory it needs and the memory
left).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hulk.assign import QUEUED, placed, waiting
from hulk.baselines import best_baseline_floor, best_baseline_seconds
from hulk.candidate_pools import candidate_pools
from hulk.cost import Cost, Fleet, Plan, lower_bound
from hulk.errors import InputError
from hulk.jobs import GB, Job
from hulk.placements import JobPlacement
from hulk.planner import layer_capacity, plan_job, site_labels
from hulk.settings import PlannerSettings, Settings
from hulk.teacher import never_fits, refine

# Systems A, B, C of a job (`hulk.assign.whole_fleet_baselines`, or remembered ones)
Baselines = Callable[[Job], Mapping[str, Cost]]


@dataclass(frozen=True)
class GnnDecision:
    """The GNN strategy's decisions for a mix (jobs by input index) and what they took."""

    plans: dict[int, tuple[Plan, Cost]]  # placed jobs
    waiting: dict[int, str]  # queued jobs: why
    fallback_reason: str | None  # the quick check rejected the plans: why
    seconds: float  # wall time of `gnn_decide` (the model's forward pass is the caller's)
    grouping_s: float  # Algorithm 1's candidate pools
    planner_s: float  # the stage planner on them (idle offers included)
    check_s: float  # the quick check's reference (best baselines)
    refine_s: float = 0.0  # the search from the model's groups (small fleets)
    cpu_s: float = 0.0  # CPU time of `gnn_decide` (this process's, all threads)
    # The model's own plans (steps 1-3, before the refining search): what the nightly gate
    # judges. The refining search keeps its result only when faster, so never slower than these.
    model_plans: dict[int, tuple[Plan, Cost]] = field(default_factory=dict)


@dataclass(frozen=True)
class GnnOutcome:
    """The GNN's placements (input order), or None when the quick check rejected them."""

    placements: list[JobPlacement] | None
    fallback_reason: str | None
    decision: GnnDecision


def gnn_decide(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
    settings: Settings,
    sites: np.ndarray | None = None,
    seed: int | None = None,
) -> GnnDecision:
    """Plans from class probabilities [n, J + 1] (class k = jobs[order[k]], J = idle).

    `sites` (`hulk.planner.site_labels` of the fleet) may be passed when it is already known.
    `seed` (default `settings.seed`) seeds the refining search's moves.
    """
    seed = settings.seed if seed is None else seed
    started, started_cpu = time.perf_counter(), time.process_time()
    impossible = never_fits(list(jobs), fleet)
    if impossible:
        index, why = next(iter(impossible.items()))
        raise InputError(None, "jobs.never_fits", f"job {jobs[index].name}: {why}")
    if sites is None:
        sites = site_labels(fleet, settings.planner.site_latency_ms)
    favourite = np.asarray(proba).argmax(axis=1)
    spent: dict[str, float] = {}
    options = settings.assign
    regions = options.gnn_site_candidates
    pool_planner = settings.gnn_planner
    if int(fleet.active.sum()) > options.gnn_large_fleet:
        regions = options.gnn_site_candidates_large
        pool_planner = settings.gnn_planner_large

    def pools_for(rank: int, job: Job, free: np.ndarray) -> list[np.ndarray]:
        with _timed(spent, "grouping"):
            return candidate_pools(
                proba[:, rank],
                favourite == rank,
                free,
                layer_capacity(job, fleet.memory_bytes),
                job.layers,
                sites,
                options.gnn_group_slack,
                options.gnn_site_slack,
                regions,
                settings.planner.max_pool,
            )

    planner = _PoolPlanner(fleet, settings, pool_planner)
    free = fleet.active.copy()
    plans: dict[int, tuple[Plan, Cost]] = {}
    queued: dict[int, str] = {}
    slowest = 0.0  # the slowest job placed so far
    for rank, job_index in enumerate(order):
        job = jobs[job_index]
        pools = pools_for(rank, job, free)
        with _timed(spent, "planner"):
            found = planner.best(job_index, job, pools, slowest)
        if found is None:
            queued[job_index] = (
                f"needs {job.min_memory_bytes / GB:,.0f} GB; "
                f"{fleet.memory_bytes[free].sum() / GB:,.0f} GB free until a running job finishes"
            )
            continue
        free[list(found[0].nodes)] = False
        plans[job_index] = found
        slowest = max(slowest, found[1].iteration_s)

    # The model's own groups: on a small fleet, where the jobs compete for the same machines
    # and each layout is cheap, and wherever a job had to wait. On a large fleet the greedy
    # pools rarely starve a job, and a full search per group costs more than the whole
    # decision (measured: 55x -> 28x the teacher's speed at 1,000 machines).
    grouped = None
    small = int(fleet.active.sum()) <= 2 * settings.planner.max_pool
    if queued or small:
        with _timed(spent, "planner"):
            grouped = _group_plans(jobs, fleet, proba, order, planner)
    if grouped is not None and _better(grouped, plans):
        plans, queued = grouped, {}
        free = fleet.active.copy()
        for plan, _ in plans.values():
            free[list(plan.nodes)] = False

    with _timed(spent, "planner"):
        _offer_idle(jobs, fleet, plans, free, planner, settings)

    model_plans = dict(plans)
    if plans and settings.assign.gnn_refine_evaluations > 0 and small:
        with _timed(spent, "refine"):
            plans = _refined(jobs, fleet, proba, order, plans, settings, seed)

    with _timed(spent, "check"):
        reason = _quick_check(jobs, fleet, plans, settings.assign.gnn_fallback_ratio, sites)
    return GnnDecision(
        plans,
        queued,
        reason,
        time.perf_counter() - started,
        spent.get("grouping", 0.0),
        spent.get("planner", 0.0),
        spent.get("check", 0.0),
        spent.get("refine", 0.0),
        time.process_time() - started_cpu,
        model_plans,
    )


def gnn_placements(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
    settings: Settings,
    sites: np.ndarray | None = None,
    seed: int | None = None,
    baselines: Baselines | None = None,
) -> GnnOutcome:
    """`gnn_decide`, then the placements file's records (None when the quick check failed);
    each record's Systems A, B, C from `baselines` (default: computed on `fleet`)."""
    decision = gnn_decide(jobs, fleet, proba, order, settings, sites, seed)
    if decision.fallback_reason is not None:
        return GnnOutcome(None, decision.fallback_reason, decision)
    placements = []
    for index, job in enumerate(jobs):
        systems = None if baselines is None else baselines(job)
        if index in decision.plans:
            plan, cost = decision.plans[index]
            placements.append(placed(job, fleet, plan, cost, baselines=systems))
        else:
            reason = decision.waiting[index]
            placements.append(waiting(job, fleet, QUEUED, reason, baselines=systems))
    return GnnOutcome(placements, None, decision)


def _group_plans(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
    planner: _PoolPlanner,
) -> dict[int, tuple[Plan, Cost]] | None:
    """Every job laid out on the machines the model gives it (`_held_groups`: by the jobs'
    expected shares of the machines, a group too small for its job topped up), with the full
    planner search (one search per job), or None when the groups cannot hold the jobs. A
    model that has learnt the teacher's groups gets the teacher's balance between the jobs
    here, which the greedy pools (each job's fastest plan, largest job first) do not look
    for."""
    owner = _held_groups(jobs, fleet, proba, order)
    if owner is None:
        return None
    plans: dict[int, tuple[Plan, Cost]] = {}
    for rank, job_index in enumerate(order):
        job = jobs[job_index]
        group = np.flatnonzero(owner == rank)
        plan, cost = plan_job(job, fleet, group, planner.settings.planner)
        if plan is None or not cost.feasible:
            return None
        plans[job_index] = (plan, cost)
    return plans


def _refined(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
    plans: dict[int, tuple[Plan, Cost]],
    settings: Settings,
    seed: int,
) -> dict[int, tuple[Plan, Cost]]:
    """The plans after a short local search from them and from the best grown start
    (`hulk.teacher.refine`, at most `assign.gnn_refine_evaluations` assignments in all),
    whose moves on the slowest job draw a share `assign.gnn_refine_guided` of their machines
    by the model's probabilities; the input plans when the search finds nothing better."""
    labels = np.full(fleet.n, -1, np.int64)
    for job_index, (plan, _) in plans.items():
        labels[list(plan.nodes)] = job_index
    guide = np.zeros((fleet.n, len(jobs)))
    for rank, job_index in enumerate(order):
        guide[:, job_index] = proba[:, rank]
    options = settings.assign
    refined = refine(
        jobs,
        fleet,
        labels,
        settings.teacher,
        settings.planner,
        seed,
        options.gnn_refine_evaluations,
        guide,
        options.gnn_refine_guided,
        grown_start=True,
    )
    return refined.plans if _better(refined.plans, plans) else plans


def _offer_idle(
    jobs: Sequence[Job],
    fleet: Fleet,
    plans: dict[int, tuple[Plan, Cost]],
    free: np.ndarray,
    planner: _PoolPlanner,
    settings: Settings,
) -> None:
    """Offer the slowest job the idle machines (`_idle_offer`), up to `assign.gnn_idle_rounds`
    times, keeping each faster plan found (`plans` and `free` are updated)."""
    offered = None  # the job the last round offered machines to
    for _ in range(settings.assign.gnn_idle_rounds):
        if not plans or not free.any():
            return
        worst = max(plans, key=lambda i: plans[i][1].iteration_s)
        if worst == offered:
            # Still the slowest after its better plan: its machines and the idle ones are
            # (nearly: the same fastest ones, on a large fleet) what it was just offered.
            return
        offered = worst
        pool = _idle_offer(plans[worst][0], free, fleet, settings.planner.max_pool)
        if pool is None:
            return
        found = planner.best(worst, jobs[worst], [pool], 0.0, incumbent=plans[worst])
        if found is None:
            return
        free[list(plans[worst][0].nodes)] = True
        free[list(found[0].nodes)] = False
        plans[worst] = found


def _idle_offer(plan: Plan, free: np.ndarray, fleet: Fleet, width: int) -> np.ndarray | None:
    """The machines offered to a job on `plan`: its own and the idle ones (`free`), or, when
    those are more than one planner search takes (`width`: a large fleet), its own and the
    fastest idle ones up to that width (most compute first, index breaks ties). None: its own
    fill the width."""
    own = np.asarray(plan.nodes, np.int64)
    idle = np.flatnonzero(free)
    if len(own) + len(idle) <= width:
        return np.union1d(own, idle)
    room = width - len(own)
    if room <= 0:
        return None
    fastest = idle[np.lexsort((idle, -fleet.compute_flops[idle]))][:room]
    return np.union1d(own, fastest)


def _quota_owner(proba: np.ndarray, active: np.ndarray, idle: int) -> np.ndarray:
    """Each machine's class (−1: not active) when job k takes round(Σ_i p_ik) machines, the
    most likely first.

    Machines with the same hardware in the same place get the same probabilities, so their
    most likely class is the same: a whole region would go to one job. The teacher splits such
    machines between jobs, and the probabilities say in what proportion; quotas keep it.
    """
    owner = np.full(len(proba), -1, dtype=np.int64)
    machines = np.flatnonzero(active)
    owner[machines] = idle
    quota = np.rint(proba[machines, :idle].sum(axis=0)).astype(np.int64)
    flat = proba[machines, :idle].ravel()
    for position in np.argsort(-flat, kind="stable"):
        row, rank = divmod(int(position), idle)
        machine = machines[row]
        if owner[machine] == idle and quota[rank] > 0:
            owner[machine] = rank
            quota[rank] -= 1
    return owner


def _held_groups(
    jobs: Sequence[Job],
    fleet: Fleet,
    proba: np.ndarray,
    order: Sequence[int],
) -> np.ndarray | None:
    """Each active machine's job class (len(jobs): idle): as the jobs' quotas give it
    (`_quota_owner`), then, for a group too small to hold its job's layers, the machines it
    is most likely to serve after its own, taken from the idle ones or from groups that hold
    their job without them. None when some job cannot be held that way."""
    idle = len(order)
    owner = _quota_owner(proba, fleet.active, idle)
    capacity = [layer_capacity(jobs[j], fleet.memory_bytes) for j in order]

    def held(rank: int, without: int | None = None) -> bool:
        members = owner == rank
        if without is not None:
            members[without] = False
        return int(capacity[rank][members].sum()) >= jobs[order[rank]].layers

    for rank in range(len(order)):
        for machine in np.argsort(-proba[:, rank], kind="stable"):
            if held(rank):
                break
            current = int(owner[machine])
            if current in (-1, rank) or capacity[rank][machine] == 0:
                continue
            if current == idle or held(current, without=int(machine)):
                owner[machine] = rank
        if not held(rank):
            return None
    return owner


def _better(candidate: dict[int, tuple[Plan, Cost]], current: dict[int, tuple[Plan, Cost]]) -> bool:
    """Whether `candidate` places more jobs, or as many with a shorter makespan."""
    if len(candidate) != len(current):
        return len(candidate) > len(current)
    if not current:
        return False
    return max(c.iteration_s for _, c in candidate.values()) < max(
        c.iteration_s for _, c in current.values()
    ) * (1 - 1e-9)


def model_placements(
    model: Any,
    jobs: Sequence[Job],
    fleet: Fleet,
    inventory: Any,
    links: Any,
    settings: Settings,
    seed: int,
    graph: Any = None,
    baselines: Baselines | None = None,
) -> tuple[list[JobPlacement], str | None]:
    """The GNN strategy with a trained model, as assignment runs it: (placements, None), or
    the teacher's placements and the quick check's reason when it rejected the model's.

    The model reads `graph` (the graph step's tensors of this fleet) or, without it, tensors
    built from the frames; its forward pass runs seeded with `settings.train.threads` threads,
    as the model was evaluated. One code path for `hulk assign` and the training run's
    pictures of the current fleet. `baselines` as for `gnn_placements`.
    """
    from hulk.assign import place_jobs as assign_jobs
    from hulk.features import encode_inputs
    from hulk.model import predict_proba
    from hulk.train import deterministic_torch

    inputs, order = encode_inputs(inventory, links, jobs, settings, graph=graph)
    with deterministic_torch(seed, settings.train.threads):
        proba = predict_proba(model, inputs).numpy()
    outcome = gnn_placements(jobs, fleet, proba, order, settings, seed=seed, baselines=baselines)
    if outcome.placements is None:
        return assign_jobs(list(jobs), fleet, "teacher", settings, seed), outcome.fallback_reason
    return outcome.placements, None


@dataclass
class _PoolPlanner:
    """The planner on candidate pools (with `planner`: `Settings.gnn_planner` or, on a large
    fleet, `Settings.gnn_planner_large`), remembering each (job, pool) it has laid out."""

    fleet: Fleet
    settings: Settings
    planner: PlannerSettings
    known: dict[tuple[int, frozenset[int]], tuple[Plan | None, Cost]] = field(default_factory=dict)

    def best(
        self,
        index: int,
        job: Job,
        pools: list[np.ndarray],
        good_enough: float,
        incumbent: tuple[Plan, Cost] | None = None,
    ) -> tuple[Plan, Cost] | None:
        """The fastest plan on the pools in turn, if faster than `incumbent` (None: none).

        A pool whose compute alone (work / Σ FLOP/s, the plan's lower bound) cannot beat the
        best plan so far is skipped, and the search stops at a plan no slower than
        `good_enough` (the slowest job placed so far: a faster plan could not shorten the
        makespan).
        """
        best = incumbent
        for pool in pools:
            if best is not None and lower_bound(job, self.fleet, pool) >= best[1].iteration_s:
                continue
            key = (index, frozenset(pool.tolist()))
            if key not in self.known:
                self.known[key] = plan_job(job, self.fleet, pool, self.planner)
            plan, cost = self.known[key]
            if plan is not None and cost.feasible:
                if best is None or cost.iteration_s < best[1].iteration_s * (1 - 1e-9):
                    best = (plan, cost)
                if best[1].iteration_s <= good_enough:
                    break
        return None if best is incumbent else best


def _quick_check(
    jobs: Sequence[Job],
    fleet: Fleet,
    plans: dict[int, tuple[Plan, Cost]],
    ratio: float,
    sites: np.ndarray,
) -> str | None:
    """Why the plans are clearly wrong (module docstring), or None when they pass."""
    if not plans:
        return None
    makespan = max(cost.iteration_s for _, cost in plans.values())
    # Passing needs only Σ best baselines ≥ makespan / ratio: lower bounds, largest job first,
    # settle most mixes (a concurrent plan is usually far faster than the jobs one after
    # another, and the largest job alone outweighs it), else exact values until the sum is
    # reached.
    needed = makespan / ratio
    largest_first = sorted(jobs, key=lambda job: -job.flops_per_iteration)
    floor = 0.0
    for job in largest_first:
        floor += best_baseline_floor(job, fleet)
        if floor >= needed:
            return None
    sequential = 0.0
    for job in largest_first:
        sequential += best_baseline_seconds(job, fleet, sites) or 0.0
        if sequential >= needed:
            return None
    if sequential > 0:
        return (
            f"the GNN's makespan ({makespan:.4g} s per iteration) exceeds {ratio:g} × the jobs "
            f"one after another under the best of Systems A, B, C ({sequential:.4g} s)"
        )
    return None


@contextmanager
def _timed(seconds: dict[str, float], part: str) -> Iterator[None]:
    """Add the wall time of the block to `seconds[part]`."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - started
