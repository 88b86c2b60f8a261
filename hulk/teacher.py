"""The teacher search: the best machine-to-job assignment we can find, with the planner inside.

`teacher_search(jobs, fleet, settings, planner, seed)` assigns every active machine to one job
or leaves it idle (drained machines are never used) and plans each job on its machines with
`hulk.planner.plan_job`. It minimises, lexicographically, the fleet makespan (the slowest job's
iteration time among the jobs placed side by side) and then the sum of their iteration times.
Its labels (job index per machine, −1 idle) are what the GNN learns to predict.

**Admission (the constraints of the paper's Algorithm 1).** Jobs get disjoint groups, each
holding its job's memory need ``job.min_memory_bytes`` (in whole layers, within machines that
can reach each other). A job that could not run even on the whole fleet's active machines is an
input error (`never_fits` says why; `teacher_search` raises `InputError` naming the job and the
shortfall in GB). When not every job fits at once, jobs are admitted by higher ``priority``
first, then larger memory need, then input order, while the free memory covers the job's need;
the others are ``queued`` with a reason such as ``needs 2800 GB; 1200 GB free until OPT-175B
finishes``. If no starting assignment can give every admitted job a feasible group, the last
admitted job is queued as well and the search starts again.

**Starting points.** Machines are grouped into sites (`hulk.planner.site_labels`). The search
starts from the best of:

* ``greedy-plan`` — jobs in decreasing work (FLOPs per iteration); each is planned on every
  machine still free and keeps the machines its plan uses (the planner picks the best region);
* ``best-site`` — the same, each job keeping the best of that plan and its plans on each of the
  `site_starts` free sites of most compute that can hold it;
* ``share`` — each job grows a region from the free site of most compute, adding the nearest
  sites machine by machine (fastest first) until it holds its memory and its share of the
  fleet's compute (proportional to its work);
* ``need`` — the same grown only until the memory need is met; then the idle machines of the
  `neighbours` idle sites of most compute are offered, one site at a time, to the slowest job
  (kept when that helps);
* ``speed`` — machines dealt, fastest first, to the job furthest below its compute share
  (no locality: a contrast for the local search);
* `random_starts` random assignments (machines shuffled and dealt until each job holds its
  memory, the rest to random jobs or idle).

**Local search.** A numpy Generator seeded from `seed` proposes moves on the current
assignment, working on the slowest job with probability `bottleneck_bias` (else a random
placed job) b: give b one machine, drawn from the `neighbours` nearest machines (by latency)
of a random machine of b, taken from its owner or the idle pool; swap a machine of b with such
a machine (share `swap_share`); or move that machine's whole site to b (share `site_share`).
A move is kept when it lowers (makespan, sum) — or, with `temperature` > 0, by simulated
annealing on the makespan — and the machines the jobs' plans leave unused are then released to
the idle pool whenever that does not slow those jobs. After `restart_after` evaluations without
a new best the search restarts from the best with `kick_moves` random moves taken whatever they
cost (iterated local search). Planner results are cached by (job, machine set), so revisited
groups cost nothing but their evaluation.

**Refining a given assignment.** `refine` runs the same local search from an assignment
given to it (the GNN strategy's plans on a small fleet) with its own evaluation budget. It may
take guide weights (a model's probabilities of each machine serving each job): a share of the
moves on the slowest job then draw their machine by those weights and move it alone, move its
whole site (jobs left unable to hold theirs take idle machines and the slowest job's old ones
instead, so two large jobs can swap sites in one move), or take several machines its owner
can spare. With `grown_start` a second search, with half of the budget, starts from the
best of the ``need`` start grown where the weights put each job's compute and the ``share``
and ``speed`` starts (compute in proportion to each job's work), and the better result wins.
Without these the teacher's own search is unchanged, draw for draw.

**Stopping and determinism.** Every assignment whose jobs are (re)planned counts as one
evaluation, the starting points included. The search stops after `max_evaluations` evaluations
or, as a safety net, after `time_budget_s` seconds of wall-clock time. Everything else is a
function of (jobs, fleet, settings, seed), so when the evaluation cap binds first the result is
byte-identical run after run (`TeacherResult.stopped_by` says which limit stopped it); the
defaults of params.yaml stop on evaluations on the paper's 47-machine fleet.

**Result.** Per job, in input order: ``placed`` or ``queued``, a reason for queued jobs, the
machines of its plan (fleet indices; machines its group held but the plan leaves out are idle),
the `Plan` and its `Cost` (`hulk.cost.iteration_time`). Plus the label per machine, the
makespan, the sum, the evaluation count and the seconds spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hulk.cost import MEMORY_SLACK, Cost, Fleet, Plan
from hulk.errors import InputError
from hulk.jobs import GB, Job
from hulk.planner import layer_capacity, plan_job, site_labels
from hulk.settings import PlannerSettings, TeacherSettings

__all__ = ["Refined", "TeacherPlacement", "TeacherResult", "never_fits", "refine", "teacher_search"]

PLACED, QUEUED = "placed", "queued"
IDLE = -1
_TOLERANCE = 1e-9  # relative: changes smaller than this are no improvement
_GUIDE_FLOOR = 1e-6  # every machine stays drawable in guided moves, however unlikely


@dataclass(frozen=True)
class TeacherPlacement:
    """One job's outcome: its machines (fleet indices), plan and cost, or why it waits."""

    job: Job
    status: str  # "placed" | "queued"
    reason: str | None
    nodes: tuple[int, ...]  # fleet indices of the plan's machines, ascending
    plan: Plan | None
    cost: Cost


@dataclass(frozen=True)
class TeacherResult:
    """The search's best assignment (see the module docstring)."""

    placements: list[TeacherPlacement]  # input order
    labels: np.ndarray  # (fleet.n,) int64: index of the job a machine serves, −1 idle
    makespan_s: float  # slowest placed job (0 when none is placed)
    sum_s: float  # sum over placed jobs
    evaluations: int
    seconds: float
    stopped_by: str  # "evaluations" | "time" | "exhausted" (nothing left to try)
    planner_calls: int = 0
    start: str = ""  # the starting point the local search improved

    @property
    def placed(self) -> list[TeacherPlacement]:
        return [p for p in self.placements if p.status == PLACED]

    @property
    def queued(self) -> list[TeacherPlacement]:
        return [p for p in self.placements if p.status == QUEUED]


# --- can a job ever run? ----------------------------------------------------------------------


def never_fits(jobs: Sequence[Job], fleet: Fleet) -> dict[int, str]:
    """Jobs (by index) that cannot run even alone on every active machine, with the reason.

    A job never fits when its memory need exceeds the active machines' memory, when memory
    used in whole layers does not hold all its layers, or when no group of machines that can
    reach each other holds it.
    """
    active = fleet.active_indices()
    total = float(fleet.memory_bytes[active].sum())
    reasons: dict[int, str] = {}
    for index, job in enumerate(jobs):
        need = job.min_memory_bytes
        if need > total * MEMORY_SLACK:
            reasons[index] = (
                f"job {job.name} needs {need / GB:.0f} GB but the fleet's {len(active)} active "
                f"machines have {total / GB:.0f} GB in all ({(need - total) / GB:.0f} GB short)"
            )
            continue
        cap = layer_capacity(job, fleet.memory_bytes[active])
        best_layers, best_memory = 0, 0.0
        for component in np.unique(fleet.component[active]):
            inside = fleet.component[active] == component
            best_layers = max(best_layers, int(cap[inside].sum()))
            best_memory = max(best_memory, float(fleet.memory_bytes[active[inside]].sum()))
        if best_layers >= job.layers:
            continue
        if best_memory * MEMORY_SLACK < need:
            reasons[index] = (
                f"job {job.name} needs {need / GB:.0f} GB but the largest group of active "
                f"machines that can reach each other has {best_memory / GB:.0f} GB "
                f"({(need - best_memory) / GB:.0f} GB short)"
            )
        else:
            per_layer = need / job.layers
            reasons[index] = (
                f"job {job.name} needs {need / GB:.0f} GB in whole layers of "
                f"{per_layer / GB:.1f} GB; the machines hold only {best_layers} of its "
                f"{job.layers} layers ({(job.layers - best_layers) * per_layer / GB:.0f} GB short)"
            )
    return reasons


# --- the search -------------------------------------------------------------------------------


class _Stop(Exception):
    """The evaluation or time budget is spent."""


@dataclass
class _State:
    labels: np.ndarray  # (n,) job index or −1
    costs: dict[int, Cost]  # per admitted job
    plans: dict[int, Plan | None]

    def key(self, admitted: Sequence[int]) -> tuple[int, float, float]:
        times = [self.costs[j].iteration_s for j in admitted]
        broken = sum(not math.isfinite(t) for t in times)
        finite = [t for t in times if math.isfinite(t)]
        return broken, max(finite, default=0.0), math.fsum(finite)

    def copy(self) -> _State:
        return _State(self.labels.copy(), dict(self.costs), dict(self.plans))


@dataclass
class _Search:
    jobs: list[Job]
    fleet: Fleet
    settings: TeacherSettings
    planner: PlannerSettings
    rng: np.random.Generator
    started: float
    evaluations: int = 0
    planner_calls: int = 0
    stopped_by: str = "exhausted"
    # Model-guided proposals (`refine`): weights [n, jobs] of each machine serving each job,
    # and the share of the slowest job's moves that draw their machine from them.
    guide: np.ndarray | None = None
    guide_share: float = 0.0
    _cache: dict[tuple[int, frozenset[int]], tuple[Plan | None, Cost]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fleet = self.fleet
        self.active = fleet.active_indices()
        self.sites = site_labels(fleet, self.planner.site_latency_ms)
        self.site_ids = np.unique(self.sites[self.active])
        self.site_members = {
            int(s): self.active[self.sites[self.active] == s] for s in self.site_ids
        }
        self.compute = fleet.compute_flops
        self.memory = fleet.memory_bytes
        # Nearest active machines of every active machine (by latency, ties by index).
        k = min(len(self.active) - 1, max(4 * self.settings.neighbours, 1))
        if fleet.sites is not None:  # exact inside each site, other sites at their figures
            order = fleet.sites.nearest(self.active, max(k, 0))
        else:
            sub = fleet.latency_s[np.ix_(self.active, self.active)]
            order = np.argsort(sub, axis=1, kind="stable")[:, 1 : k + 1]
        self.nearest = {int(a): self.active[row] for a, row in zip(self.active, order, strict=True)}
        self.caps = [layer_capacity(job, self.memory) for job in self.jobs]
        self.work = np.array([job.flops_per_iteration for job in self.jobs])

    # -- budget --

    def tick(self, force: bool = False) -> None:
        """Count one evaluation; `_Stop` when the budget is spent (unless `force`)."""
        if force:
            self.evaluations += 1
            return
        if self.evaluations >= self.settings.max_evaluations:
            self.stopped_by = "evaluations"
            raise _Stop
        if time.perf_counter() - self.started >= self.settings.time_budget_s:
            self.stopped_by = "time"
            raise _Stop
        self.evaluations += 1

    # -- planning --

    def plan(self, j: int, nodes: np.ndarray) -> tuple[Plan | None, Cost]:
        key = (j, frozenset(nodes.tolist()))
        cached = self._cache.get(key)
        if cached is None:
            self.planner_calls += 1
            cached = plan_job(self.jobs[j], self.fleet, np.sort(nodes), self.planner)
            self._cache[key] = cached
        return cached

    def holds(self, j: int, nodes: np.ndarray) -> bool:
        return int(self.caps[j][nodes].sum()) >= self.jobs[j].layers

    def evaluate(
        self,
        labels: np.ndarray,
        admitted: Sequence[int],
        base: _State | None = None,
        changed: Sequence[int] | None = None,
        force: bool = False,
    ) -> _State:
        """One evaluation: (re)plan the `changed` jobs (all when `base` is None)."""
        self.tick(force)
        state = (
            _State(labels, {}, {})
            if base is None
            else _State(labels, dict(base.costs), dict(base.plans))
        )
        for j in admitted if base is None or changed is None else changed:
            if j == IDLE:
                continue
            group = np.flatnonzero(labels == j)
            if len(group) and self.holds(j, group):
                plan, cost = self.plan(j, group)
            else:
                plan, cost = None, Cost.infeasible("its group cannot hold it")
            state.plans[j], state.costs[j] = plan, cost
        return state

    def release_unused(self, state: _State, jobs: Sequence[int]) -> _State:
        """Machines a job's plan leaves out go idle when replanning on the rest is no slower."""
        for j in jobs:
            plan = state.plans.get(j)
            if j == IDLE or plan is None:
                continue
            group = np.flatnonzero(state.labels == j)
            used = np.array(sorted(plan.nodes), np.int64)
            if len(used) == len(group):
                continue
            new_plan, new_cost = self.plan(j, used)
            if new_cost.iteration_s <= state.costs[j].iteration_s * (1 + _TOLERANCE):
                state.labels[np.setdiff1d(group, used)] = IDLE
                state.plans[j], state.costs[j] = new_plan, new_cost
        return state


def _less(a: tuple[int, float, float], b: tuple[int, float, float]) -> bool:
    """Lexicographic (broken jobs, makespan, sum) with a relative tolerance on the times."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] < b[1] * (1 - _TOLERANCE):
        return True
    if a[1] > b[1] * (1 + _TOLERANCE):
        return False
    return a[2] < b[2] * (1 - _TOLERANCE)


# --- admission --------------------------------------------------------------------------------


def _admission_order(jobs: Sequence[Job]) -> list[int]:
    return sorted(range(len(jobs)), key=lambda j: (-jobs[j].priority, -jobs[j].min_memory_bytes, j))


def _admit(jobs: Sequence[Job], total_memory: float) -> list[int]:
    admitted, free = [], total_memory
    for j in _admission_order(jobs):
        if jobs[j].min_memory_bytes <= free * MEMORY_SLACK:
            admitted.append(j)
            free -= jobs[j].min_memory_bytes
    return admitted


# --- starting points --------------------------------------------------------------------------


def _by_work(search: _Search, admitted: Sequence[int]) -> list[int]:
    return sorted(admitted, key=lambda j: (-search.work[j], j))


def _grow(
    search: _Search,
    labels: np.ndarray,
    j: int,
    target_flops: float,
    reserve: float,
    preference: np.ndarray | None = None,
) -> bool:
    """Give job j free machines: the free site of most compute, then the nearest machines
    site by site (fastest first), until it holds its memory and `target_flops`, keeping
    `reserve` bytes free for the jobs still to come. False when it cannot hold its memory."""
    memory, compute = search.memory, search.compute
    free_memory = float(memory[search.active[labels[search.active] == IDLE]].sum())
    taken: list[int] = []
    flops = 0.0
    while True:
        rest = search.active[labels[search.active] == IDLE]
        if not len(rest):
            return search.holds(j, np.array(taken, np.int64))
        if taken:
            fleet = search.fleet
            if fleet.sites is not None:  # per site of the taken machines
                distance = fleet.sites.nearest_latency(np.array(taken, np.int64), rest)
            else:
                distance = fleet.latency_s[np.ix_(taken, rest)].min(axis=0)
            site = search.sites[rest[int(np.argmin(distance))]]
        else:
            power: dict[int, float] = {}
            weight = compute if preference is None else preference
            for node in rest.tolist():
                key = int(search.sites[node])
                power[key] = power.get(key, 0.0) + float(weight[node])
            site = max(power, key=lambda k: (power[k], -k))
        candidates = rest[search.sites[rest] == site]
        for node in candidates[np.argsort(-compute[candidates], kind="stable")].tolist():
            holds = search.holds(j, np.array(taken, np.int64))
            if holds and free_memory - memory[node] < reserve:
                return True
            taken.append(node)
            labels[node] = j
            flops += float(compute[node])
            free_memory -= float(memory[node])
            if flops >= target_flops and search.holds(j, np.array(taken, np.int64)):
                return True


def _start_greedy_plan(
    search: _Search, admitted: Sequence[int], per_site: bool = False
) -> np.ndarray | None:
    """Jobs in decreasing work each keep the machines of their plan on the free machines (or,
    `per_site`, of the best of that plan and the plans on each of the `site_starts` free sites
    of most compute that can hold the job)."""
    labels = np.full(search.fleet.n, IDLE, np.int64)
    order = _by_work(search, admitted)
    for position, j in enumerate(order):
        free = search.active[labels[search.active] == IDLE]
        if not len(free):
            return None
        candidates = [free]
        if per_site:
            sites = search.sites[free]
            groups = [free[sites == site] for site in np.unique(sites)]
            groups = [g for g in groups if search.holds(j, g)]
            groups.sort(key=lambda g: (-float(search.compute[g].sum()), int(g[0])))
            candidates += groups[: search.settings.site_starts]
        best_plan, best_time = None, math.inf
        for group in candidates:
            plan, cost = search.plan(j, group)
            if plan is not None and cost.iteration_s < best_time * (1 - _TOLERANCE):
                best_plan, best_time = plan, cost.iteration_s
        if best_plan is None:
            return None
        used = np.array(best_plan.nodes, np.int64)
        later = sum(search.jobs[k].min_memory_bytes for k in order[position + 1 :])
        if float(search.memory[free].sum() - search.memory[used].sum()) < later:
            return None
        labels[used] = j
    return labels


def _start_grown(
    search: _Search, admitted: Sequence[int], share: bool, guided: bool = False
) -> np.ndarray | None:
    labels = np.full(search.fleet.n, IDLE, np.int64)
    order = _by_work(search, admitted)
    total_flops = float(search.compute[search.active].sum())
    total_work = float(search.work[order].sum())
    for position, j in enumerate(order):
        target = total_flops * search.work[j] / total_work if share else 0.0
        reserve = sum(search.jobs[k].min_memory_bytes for k in order[position + 1 :])
        preference = None
        if guided and search.guide is not None:
            preference = search.guide[:, j] * search.compute
        if not _grow(search, labels, j, target, reserve, preference):
            return None
    return labels


def _start_speed(search: _Search, admitted: Sequence[int]) -> np.ndarray | None:
    labels = np.full(search.fleet.n, IDLE, np.int64)
    total_flops = float(search.compute[search.active].sum())
    total_work = float(search.work[list(admitted)].sum())
    target = {j: total_flops * search.work[j] / total_work for j in admitted}
    have = dict.fromkeys(admitted, 0.0)
    fastest = search.active[np.argsort(-search.compute[search.active], kind="stable")]
    for node in fastest.tolist():
        short = [j for j in admitted if not search.holds(j, np.flatnonzero(labels == j))]
        pool = short or list(admitted)
        j = min(pool, key=lambda k: (have[k] / target[k], k))
        labels[node] = j
        have[j] += search.compute[node]
    return labels


def _start_random(search: _Search, admitted: Sequence[int]) -> np.ndarray | None:
    labels = np.full(search.fleet.n, IDLE, np.int64)
    shuffled = search.rng.permutation(search.active)
    pending = list(admitted)
    for node in shuffled.tolist():
        if pending:
            j = pending[int(search.rng.integers(len(pending)))]
            labels[node] = j
            if search.holds(j, np.flatnonzero(labels == j)):
                pending.remove(j)
        else:
            choice = int(search.rng.integers(len(admitted) + 1))
            labels[node] = admitted[choice] if choice < len(admitted) else IDLE
    return None if pending else labels


def _fill_leftovers(search: _Search, state: _State, admitted: Sequence[int]) -> _State:
    """Offer the idle machines of the `neighbours` idle sites of most compute, one site at a
    time, to the slowest job; keep each gift that improves the assignment."""
    idle = search.active[state.labels[search.active] == IDLE]
    power: dict[int, float] = {}
    for node in idle.tolist():
        site = int(search.sites[node])
        power[site] = power.get(site, 0.0) + float(search.compute[node])
    ranked = sorted(power, key=lambda site: (-power[site], site))[: search.settings.neighbours]
    for site in ranked:
        members = search.site_members[site]
        nodes = members[state.labels[members] == IDLE]
        times = [state.costs[j].iteration_s for j in admitted]
        slowest = admitted[int(np.argmax(times))]
        labels = state.labels.copy()
        labels[nodes] = slowest
        try:
            candidate = search.evaluate(labels, admitted, state, [slowest])
        except _Stop:
            return state
        if _less(candidate.key(admitted), state.key(admitted)):
            state = candidate
    return state


# --- local search -----------------------------------------------------------------------------


def _propose(
    search: _Search, state: _State, admitted: Sequence[int], bias: bool = True
) -> tuple[np.ndarray, list[int]] | None:
    """A neighbouring assignment and the jobs whose groups it changes (None: no move).

    With `bias`, the move works on the slowest job with probability `bottleneck_bias`."""
    rng, settings = search.rng, search.settings
    labels = state.labels
    if search.guide is not None and bias and rng.random() < search.guide_share:
        guided = _propose_guided(search, state, admitted)
        if guided is not None:
            return guided
    if bias and rng.random() < settings.bottleneck_bias:
        times = [state.costs[j].iteration_s for j in admitted]
        b = admitted[int(np.argmax(times))]
    else:
        b = admitted[int(rng.integers(len(admitted)))]
    members = np.flatnonzero(labels == b)
    if len(members):
        anchor = int(members[int(rng.integers(len(members)))])
        near = search.nearest[anchor][: settings.neighbours]
        outside = near[labels[near] != b]
    else:
        outside = np.zeros(0, np.int64)
    if not len(outside):
        outside = search.active[labels[search.active] != b]
        if not len(outside):
            return None
    v = int(outside[int(rng.integers(len(outside)))])
    owner = int(labels[v])
    new = labels.copy()
    kind = rng.random()
    if kind < settings.swap_share and len(members):
        u = int(members[int(rng.integers(len(members)))])
        new[v], new[u] = b, owner
        return new, [b, owner]
    if kind < settings.swap_share + settings.site_share:
        site = search.site_members[int(search.sites[v])]
        moved = site[new[site] != b]
        owners = sorted({int(x) for x in new[moved]})
        new[moved] = b
        return new, [b, *owners]
    new[v] = b
    return new, [b, owner]


def _propose_guided(
    search: _Search, state: _State, admitted: Sequence[int]
) -> tuple[np.ndarray, list[int]] | None:
    """A move for the slowest job b whose machine v is drawn by the guide's weight of v
    serving b. In equal shares: v alone moves to b; v's whole site moves to b (its jobs left
    unable to hold theirs re-homed, `_rehome`); or v's owner
    hands b several of its machines (1 to all it can spare while still holding its job, the
    ones the guide likes best for b first) — the compound step single moves cannot make when
    a fast job holds more machines than it needs and each one alone is worth little to b."""
    assert search.guide is not None
    rng, labels = search.rng, state.labels
    times = [state.costs[j].iteration_s for j in admitted]
    b = admitted[int(np.argmax(times))]
    outside = search.active[labels[search.active] != b]
    if not len(outside):
        return None
    weights = search.guide[outside, b] + _GUIDE_FLOOR
    v = int(outside[int(rng.choice(len(outside), p=weights / weights.sum()))])
    owner = int(labels[v])
    new = labels.copy()
    kind = rng.random()
    if kind < 1 / 3:
        new[v] = b
        return new, [b, owner]
    if kind < 2 / 3 or owner == IDLE:
        site = search.site_members[int(search.sites[v])]
        moved = site[new[site] != b]
        owners = sorted({int(x) for x in new[moved]} - {IDLE})
        new[moved] = b
        _rehome(search, new, b, site, owners)
        return new, [b, *owners]
    held = np.flatnonzero(labels == owner)
    ranked = held[np.argsort(-search.guide[held, b], kind="stable")]
    spare = 0
    while spare < len(ranked) - 1 and search.holds(owner, ranked[spare + 1 :]):
        spare += 1
    if spare == 0:
        return None
    given = ranked[: int(rng.integers(1, spare + 1))]
    new[given] = b
    return new, [b, owner]


def _rehome(
    search: _Search, labels: np.ndarray, b: int, site: np.ndarray, evicted: Sequence[int]
) -> None:
    """Jobs that lost their site to b and no longer hold their job take, in place, idle
    machines and b's machines outside that site (b moved), the ones the guide likes best for
    them first, until they hold it: one move swaps the sites of two large jobs."""
    assert search.guide is not None
    for j in evicted:
        kept = np.flatnonzero(labels == j)
        if search.holds(j, kept):
            continue
        free = search.active[(labels[search.active] == IDLE) | (labels[search.active] == b)]
        free = np.setdiff1d(free, site)
        ranked = free[np.argsort(-search.guide[free, j], kind="stable")]
        for count in range(1, len(ranked) + 1):
            if search.holds(j, np.concatenate([kept, ranked[:count]])):
                labels[ranked[:count]] = j
                break


def _local_search(search: _Search, state: _State, admitted: Sequence[int]) -> _State:
    """Descent (or annealing) from `state`; after `restart_after` evaluations without a new
    best, restart from the best with `kick_moves` random moves taken unconditionally."""
    best = current = state
    settings = search.settings
    last_best = search.evaluations
    while True:
        kick = search.evaluations - last_best >= settings.restart_after
        if kick:
            current, last_best = best.copy(), search.evaluations
        for _ in range(settings.kick_moves if kick else 1):
            proposal = _propose(search, current, admitted, bias=not kick)
            if proposal is None:
                return best
            labels, changed = proposal
            changed = [j for j in dict.fromkeys(changed) if j != IDLE]
            try:
                candidate = search.evaluate(labels, admitted, current, changed)
            except _Stop:
                return best
            new_key, old_key = candidate.key(admitted), current.key(admitted)
            if kick:
                accept = new_key[0] == 0
            else:
                accept = _less(new_key, old_key)
                if not accept and settings.temperature > 0 and new_key[0] == old_key[0]:
                    progress = search.evaluations / settings.max_evaluations
                    scale = settings.temperature * max(old_key[1], 1e-12)
                    scale *= max(1.0 - progress, 1e-3)
                    accept = search.rng.random() < math.exp(-(new_key[1] - old_key[1]) / scale)
            if accept:
                current = search.release_unused(candidate, changed)
                if _less(current.key(admitted), best.key(admitted)):
                    best, last_best = current.copy(), search.evaluations


# --- the entry point --------------------------------------------------------------------------


def teacher_search(
    jobs: list[Job],
    fleet: Fleet,
    settings: TeacherSettings,
    planner: PlannerSettings,
    seed: int,
) -> TeacherResult:
    """Search machine-to-job assignments for `jobs` on `fleet` (module docstring).

    Raises `InputError` (rule ``jobs.never_fits``) naming every job that could not run even
    alone on the whole fleet, with the shortfall in GB.
    """
    started = time.perf_counter()
    impossible = never_fits(jobs, fleet)
    if impossible:
        details = list(impossible.values())
        raise InputError(
            None,
            "jobs.never_fits",
            details[0] if len(details) == 1 else f"{details[0]} (and {len(details) - 1} more)",
            details,
        )
    search = _Search(list(jobs), fleet, settings, planner, np.random.default_rng(seed), started)
    admitted = _admit(jobs, float(fleet.memory_bytes[search.active].sum()))
    best: _State | None = None
    start_name = ""
    while admitted:
        best, start_name = _best_start(search, admitted)
        if best is not None:
            break
        admitted = admitted[:-1]  # no start gives every admitted job a group: the last waits
    if best is not None and search.stopped_by == "exhausted":
        best = _local_search(search, best, admitted)
    return _result(search, jobs, admitted, best, start_name)


@dataclass(frozen=True)
class Refined:
    """`refine`'s result: each placed job's (plan, cost), by job index, and what it took."""

    plans: dict[int, tuple[Plan, Cost]]
    evaluations: int
    seconds: float


def refine(
    jobs: Sequence[Job],
    fleet: Fleet,
    labels: np.ndarray,
    settings: TeacherSettings,
    planner: PlannerSettings,
    seed: int,
    max_evaluations: int,
    guide: np.ndarray | None = None,
    guide_share: float = 0.0,
    grown_start: bool = False,
) -> Refined:
    """The local search (module docstring) from a given assignment instead of the starts.

    `labels` (job index per machine, −1 idle) must give every job it names a group that
    holds it; those jobs stay placed, the others stay out. At most `max_evaluations`
    assignments are evaluated (the given one included). With `guide` ([n, len(jobs)]
    weights of each machine serving each job, e.g. a model's probabilities), a share
    `guide_share` of the moves on the slowest job draw their machine by those weights instead
    of among the nearest ones: a search that starts from a model's answer looks where the
    model looks. With `grown_start`, a second search starts from the best of the teacher's
    grown starts (`_grown_start`: ``need``, each job's region seeded where the guide puts its
    compute, ``share`` and ``speed``); each search gets half of the budget left and the
    better result wins
    (the given start's on a tie). Deterministic for the same inputs and seed.
    """
    started = time.perf_counter()
    budget = settings.model_copy(update={"max_evaluations": max(int(max_evaluations), 1)})
    search = _Search(list(jobs), fleet, budget, planner, np.random.default_rng(seed), started)
    search.guide, search.guide_share = guide, guide_share
    admitted = sorted({int(j) for j in labels[search.active] if j != IDLE})
    state = search.evaluate(np.asarray(labels, np.int64).copy(), admitted, force=True)
    state = search.release_unused(state, admitted)
    starts = [state]
    if grown_start and max_evaluations > 1:
        grown = _grown_start(search, admitted)
        if grown is not None:
            starts.append(grown)
    starts = [start for start in starts if start.key(admitted)[0] == 0]
    if starts and max_evaluations > 1:
        # Each start gets an equal share of what is left of the budget; the first best wins.
        left = budget.max_evaluations - search.evaluations
        ends = [search.evaluations + left * (k + 1) // len(starts) for k in range(len(starts))]
        found = []
        for start, end in zip(starts, ends, strict=True):
            search.settings = budget.model_copy(update={"max_evaluations": end})
            found.append(_local_search(search, start, admitted))
        search.settings = budget
        state = found[0]
        for other in found[1:]:
            if _less(other.key(admitted), state.key(admitted)):
                state = other
    plans = {
        j: (plan, state.costs[j])
        for j in admitted
        if (plan := state.plans.get(j)) is not None and state.costs[j].feasible
    }
    return Refined(plans, search.evaluations, time.perf_counter() - started)


def _grown_start(search: _Search, admitted: Sequence[int]) -> _State | None:
    """The best of the teacher's grown starts for `refine`, evaluated; None when none gives
    every job a group that holds it or the budget is spent.

    ``need``: each job, most work first, grows a region from the free site where its guide
    weight times the machines' compute is largest (without a guide: the site of most
    compute), adding the nearest machines until it holds its memory while leaving the memory
    the jobs still to come need; then the idle sites are offered to the slowest job. Greedy
    plans give the first large job the best sites and starve the next; this start gives each
    job a compact, memory-tight region instead, which is where the teacher's plans for several
    large jobs come from and which single moves do not reach from the greedy plans.
    ``share`` grows the same regions to compute in proportion to each job's work, and
    ``speed`` deals the machines, fastest first, in that proportion: where one job needs most
    of the fleet's compute (not just its memory), a model's memory-sized groups leave it a
    fraction of what it needs, and single moves do not add a whole pipeline replica."""
    guided = search.guide is not None
    builders: list[tuple[str, Callable[[], np.ndarray | None]]] = [
        ("need", lambda: _start_grown(search, admitted, share=False, guided=guided)),
        ("share", lambda: _start_grown(search, admitted, share=True, guided=guided)),
        ("speed", lambda: _start_speed(search, admitted)),
    ]
    return _best_of(search, admitted, builders, always_first=False)[0]


def _best_start(search: _Search, admitted: list[int]) -> tuple[_State | None, str]:
    """The best starting point (module docstring); the first one that works is evaluated even
    when the budget is spent, so that there is always a result."""
    builders: list[tuple[str, Callable[[], np.ndarray | None]]] = [
        ("greedy-plan", lambda: _start_greedy_plan(search, admitted)),
        ("best-site", lambda: _start_greedy_plan(search, admitted, per_site=True)),
        ("share", lambda: _start_grown(search, admitted, share=True)),
        ("need", lambda: _start_grown(search, admitted, share=False)),
        ("speed", lambda: _start_speed(search, admitted)),
    ]
    builders += [
        (f"random-{i + 1}", lambda: _start_random(search, admitted))
        for i in range(search.settings.random_starts)
    ]
    return _best_of(search, admitted, builders, always_first=True)


def _best_of(
    search: _Search,
    admitted: Sequence[int],
    builders: Sequence[tuple[str, Callable[[], np.ndarray | None]]],
    always_first: bool,
) -> tuple[_State | None, str]:
    """The best of the starts `builders` make (evaluated in turn until the budget is spent;
    with `always_first`, the first that works even when it is) and its name; (None, "") when
    none gives every job a group that holds it."""
    best, best_name = None, ""
    for name, build in builders:
        labels = build()
        if labels is None:
            continue
        try:
            state = search.evaluate(labels, admitted, force=always_first and best is None)
        except _Stop:
            break
        if name == "need":
            state = _fill_leftovers(search, state, admitted)
        state = search.release_unused(state, admitted)
        key = state.key(admitted)
        if key[0] == 0 and (best is None or _less(key, best.key(admitted))):
            best, best_name = state, name
    return best, best_name


def _result(
    search: _Search,
    jobs: Sequence[Job],
    admitted: Sequence[int],
    state: _State | None,
    start: str,
) -> TeacherResult:
    fleet = search.fleet
    labels = np.full(fleet.n, IDLE, np.int64)
    placed: dict[int, tuple[Plan, Cost]] = {}
    if state is not None:
        for j in admitted:
            plan = state.plans.get(j)
            if plan is not None and state.costs[j].feasible:
                placed[j] = (plan, state.costs[j])
                labels[list(plan.nodes)] = j
    free = float(fleet.memory_bytes[search.active[labels[search.active] == IDLE]].sum())
    placements = []
    for j, job in enumerate(jobs):
        if j in placed:
            plan, cost = placed[j]
            placements.append(
                TeacherPlacement(job, PLACED, None, tuple(sorted(plan.nodes)), plan, cost)
            )
            continue
        reason = _queue_reason(job, free, placed, jobs, fleet)
        placements.append(TeacherPlacement(job, QUEUED, reason, (), None, Cost.infeasible(reason)))
    times = [cost.iteration_s for _, cost in placed.values()]
    return TeacherResult(
        placements=placements,
        labels=labels,
        makespan_s=max(times, default=0.0),
        sum_s=math.fsum(times),
        evaluations=search.evaluations,
        seconds=time.perf_counter() - search.started,
        stopped_by=search.stopped_by,
        planner_calls=search.planner_calls,
        start=start,
    )


def _queue_reason(
    job: Job,
    free: float,
    placed: dict[int, tuple[Plan, Cost]],
    jobs: Sequence[Job],
    fleet: Fleet,
) -> str:
    need = job.min_memory_bytes
    text = f"needs {need / GB:.0f} GB; {free / GB:.0f} GB free"
    held = sorted(
        ((float(fleet.memory_bytes[list(plan.nodes)].sum()), j) for j, (plan, _) in placed.items()),
        key=lambda item: (-item[0], item[1]),
    )
    waiting, memory = [], free
    for amount, j in held:
        if memory >= need:
            break
        waiting.append(jobs[j].name)
        memory += amount
    if not waiting:
        return f"{text}, but no group of them can hold it next to the placed jobs"
    verb = "finishes" if len(waiting) == 1 else "finish"
    return f"{text} until {' and '.join(waiting)} {verb}"
