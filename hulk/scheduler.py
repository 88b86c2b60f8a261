"""The scheduler: which waiting job starts now, which waits for a better group, and when each
finishes — with running jobs left where they are.

Each assign run sees the fleet as it is now, the running jobs (their machines, plan and
remaining iterations) and the waiting ones. Times are seconds from now. `schedule`:

1. **Running jobs stay put.** A running job keeps its machines and stages unless one of them
   failed or was drained, or its plan no longer runs on the fleet (then it is *displaced*: it
   waits again, first in line, and pays a restart: `move_cost`). A job resuming from a
   checkpoint weighs only machines the checkpoint can reach (a path leads there from where it
   lies).
2. **List scheduling of the waiting jobs.** In turn (see below), each job weighs starting now on the
   machines free now, starting when the machines of its plan on the whole fleet are all free (that
   plan, no planning needed), and starting at up to `start_candidates` times machines free up in
   between (a running or already scheduled job finishes), planned by `plan_fn` on the machines free
   then and until it would finish, and takes the option that finishes first (ties: the earlier
   start) — but it starts now when waiting would finish it at most `wait_gain` sooner (seconds from
   now): a later start is a forecast that shorter work arriving in the meantime pushes back, a start
   now is not. A job may use machines committed to a later start when it is done before that start
   (backfilling). Past `max_plans_per_run` new plans in a run, only options already planned are
   weighed. A plan seen in the run for a job of the same sizes (running, or asked for) whose
   machines are free for as long as the job needs is taken without planning when it is as fast as
   the job's plan on every usable machine no faster than the fastest one free then, or as a faster
   plan seen on some of those machines (a bound the planner does not beat on fewer machines, like
   the whole fleet's plan; its search may miss on many machines a plan it found on fewer); starts
   and slower kinds that bound rules out are not planned at all.
   Its machines are then committed from its start until it finishes. A job without a length
   (``iterations`` unknown) starts as soon as it fits. The job's finish is ``start + overhead +
   remaining × iteration_s``. The job then leaves the fastest kind of machine of that option
   when a plan without it, at the same start, takes at most `leave_fastest_slack` longer: jobs
   that gain little from the fastest machines leave them to the jobs that gain most
   (heterogeneity-aware allocation). When a job comes after it in the order, it then takes its
   plan or the plan with its data-parallel replicas halved (as often as its run stays within
   `share_slack` of the plan's), whichever gives its finish plus the next job's (placed after
   it) the lower sum: the machines a job gains little from start the next job sooner, where
   that job can use them.
3. **Orders tried**: shortest remaining work first (work = iterations × the job's seconds per
   iteration on every usable machine, busy or not), arrival order and, when a job has a
   deadline, earliest deadline first, each within priority (higher first; displaced jobs
   before all). The schedule kept has the fewest missed
   deadlines, then the lowest mean completion time (finish − submitted, over the jobs with a
   length), then the earliest end of the whole queue.
4. **Moves that pay for themselves** (up to `max_moves_per_run` per run), each kept only when
   it misses no more deadlines, leaves no job's finish unknown that was known, and the whole
   schedule's mean completion time, the move's cost included, drops by more than `move_gain`
   (of the moves accepted, the best schedule as in step 3): a running job moves onto its
   machines plus the ones no running job holds
   (idle, or about to start a waiting job, which is then scheduled again); or a running job
   with more work left (on its own plan) than some waiting job of its priority or higher needs
   (on its plan on the whole fleet; the most work left first, up to `preempt_candidates`
   tried) stops and waits in line like any other job,
   so that shorter work runs on its machines first (shortest remaining work first, as far as
   it pays). A job needing several machines is rarely helped by one stop, so for each of the
   `preempt_candidates` waiting jobs with the least work, the running jobs on the machines of
   its whole-fleet plan, all with more work left and none of a higher priority, are also
   tried stopped together (a group
   stop counts each job it stops against `max_moves_per_run`). A
   stopped job keeps its checkpoint where it ran: when it starts again it pays `move_cost`
   from there (the restart only, on the same machines). A move is weighed in the waiting-job
   order the schedule without it kept.

Whole-fleet systems (A, B, C) are not scheduled here: they run one job at a time by definition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from hulk.cost import Cost, Fleet, Plan, iteration_time, lower_bound
from hulk.jobs import Job, job_sizes
from hulk.settings import SchedulerSettings

PlanFn = Callable[[Job, np.ndarray], tuple[Plan | None, Cost]]

KEEP, START, WAIT, MOVE, RESTART, NEVER = "keep", "start", "wait", "move", "restart", "never"


@dataclass(frozen=True)
class Running:
    """A job computing now on `nodes` (fleet indices) with `plan`."""

    job: Job
    nodes: tuple[int, ...]
    plan: Plan | None
    cost: Cost  # the plan on the current fleet
    remaining: float | None  # iterations left; None: runs until marked finished
    submitted_s: float  # ≤ 0: seconds from now
    ready_s: float = 0.0  # > 0 while it is still restarting after a move
    lost_nodes: tuple[int, ...] = ()  # its machines gone from the fleet (failed or drained)
    action: str = "keep"  # how it came to run here: keep, or start/restart/move in this run


@dataclass(frozen=True)
class Waiting:
    """A job without machines: new, queued, or displaced from `previous` (then it restarts,
    first in line). A job stopped earlier resumes from its checkpoint on the machines of
    `checkpoint` (where it last ran), in line like the others."""

    job: Job
    remaining: float | None
    submitted_s: float
    previous: Running | None = None  # set for a running job displaced in this run
    checkpoint: Running | None = None  # set for a job stopped in an earlier run

    @property
    def resumes_from(self) -> Running | None:
        """Where its checkpoint lies, when it has one."""
        return self.previous or self.checkpoint


@dataclass(frozen=True)
class Decision:
    """What one job does: keep / start / wait / move / restart, or never (the fleet cannot hold
    it). `nodes` are the machines it runs on (planned ones when it waits)."""

    job: Job
    action: str
    nodes: tuple[int, ...] = ()
    plan: Plan | None = None
    cost: Cost | None = None
    start_s: float | None = None  # None: not known (waits on jobs without a length)
    finish_s: float | None = None  # None: no length, or start unknown
    overhead_s: float = 0.0  # restart + checkpoint transfer before it computes
    submitted_s: float = 0.0
    waits_for: tuple[str, ...] = ()  # the jobs whose machines it waits for
    reason: str | None = None
    deadline_s: float | None = None

    @property
    def late(self) -> bool:
        """Whether it misses its deadline: its finish is past it, or, its finish unknown, the
        deadline is already past now."""
        if self.deadline_s is None:
            return False
        if self.finish_s is None:
            return self.deadline_s < 0
        return self.finish_s > self.deadline_s

    @property
    def deadline_met(self) -> bool | None:
        """Whether it meets its deadline; None without a deadline, or when its finish is
        unknown and the deadline still to come."""
        if self.deadline_s is None or (self.finish_s is None and not self.late):
            return None
        return not self.late


@dataclass(frozen=True)
class Schedule:
    decisions: list[Decision]  # running jobs first (input order), then the waiting ones
    order: str  # the waiting-job order kept
    mean_completion_s: float | None  # mean of finish − submitted over jobs with a finish
    makespan_s: float | None  # the last finish, from now
    missed_deadlines: int = 0
    moves: list[str] = field(default_factory=list)
    # Per running job stopped in this run: why, as its users read it (its decision's reason).
    stop_notes: dict[str, str] = field(default_factory=dict)

    def score(self) -> tuple[float, float, float]:
        return (
            self.missed_deadlines,
            self.mean_completion_s if self.mean_completion_s is not None else math.inf,
            self.makespan_s if self.makespan_s is not None else math.inf,
        )


# --- costs ------------------------------------------------------------------------------------


def move_cost(
    job: Job,
    fleet: Fleet,
    old_nodes: Sequence[int],
    old_plan: Plan | None,
    new_plan: Plan | None,
    new_nodes: Sequence[int],
    settings: SchedulerSettings,
) -> float:
    """Seconds a job loses when it (re)starts on `new_plan` after running on `old_nodes`.

    ``restart_overhead_s`` plus the checkpoint's transfer: each new stage (of the first replica;
    the others copy inside the group) fetches its layers' share of ``checkpoint_bytes_per_param
    × params`` bytes from the old machines that held those layers (any surviving old machine when
    the old plan is unknown), over the fleet's links; stages fetch in parallel. A stage kept on
    the same machine fetches nothing. Old machines gone from the fleet or drained cannot send:
    with none left the checkpoint is reloaded where it is and only the restart counts. Infinite
    when a new stage cannot reach any old machine holding its layers (no path between them):
    the scheduler then gives the job no option there.

    Rounded up to whole seconds, as the job store keeps times: the instant the job computes
    again (now + this) is stored exactly, so the next run at the same clock reads back the
    same estimates.
    """
    overhead = settings.restart_overhead_s
    alive = [int(n) for n in old_nodes if 0 <= int(n) < fleet.n and fleet.active[int(n)]]
    if not alive:
        return _whole_seconds(overhead)
    total = settings.checkpoint_bytes_per_param * job.params
    per_layer = total / job.layers
    holders = _layer_holders(job, old_plan, alive)
    targets: list[tuple[int, int, int]] = []  # (node, layer_start, layer_end)
    if new_plan is not None and new_plan.replicas:
        targets = [(s.node, s.layer_start, s.layer_end) for s in new_plan.replicas[0]]
    else:  # tensor layout: every machine holds an even share of every layer
        nodes = [int(n) for n in new_nodes]
        targets = [(n, 0, job.layers) for n in nodes]
        per_layer /= max(1, len(nodes))
    # Each stage's links from every surviving old machine in one gather (a site model's pairs
    # are slow to read one by one), then the best of each layer's holders.
    senders = np.asarray(alive, np.int64)
    row = {n: k for k, n in enumerate(alive)}
    slowest = 0.0
    for node, start, end in targets:
        bandwidths = np.asarray(fleet.bandwidth_Bps[senders, node], float)
        latencies = np.asarray(fleet.latency_s[senders, node], float)
        best: dict[tuple[int, ...], tuple[float, float]] = {}  # per holder set
        seconds = 0.0
        for layer in range(start, end):
            sources = holders.get(layer, alive)
            if node in sources:
                continue
            key = tuple(sources)
            if key not in best:
                rows = [row[s] for s in sources]
                best[key] = float(bandwidths[rows].max()), float(latencies[rows].min())
            bandwidth, latency = best[key]
            seconds += per_layer / bandwidth + latency if bandwidth > 0 else math.inf
        slowest = max(slowest, seconds)
    return _whole_seconds(overhead + slowest)


def _whole_seconds(seconds: float) -> float:
    """`seconds` rounded up to a whole second (infinite ones as they are)."""
    return float(math.ceil(seconds)) if math.isfinite(seconds) else seconds


def _layer_holders(job: Job, plan: Plan | None, alive: Sequence[int]) -> dict[int, list[int]]:
    """Per layer, the surviving old machines that held it (empty map: unknown)."""
    if plan is None:
        return {}
    living = set(alive)
    holders: dict[int, list[int]] = {}
    for replica in plan.replicas:
        for stage in replica:
            if stage.node in living:
                for layer in range(stage.layer_start, stage.layer_end):
                    holders.setdefault(layer, []).append(stage.node)
    return holders


# --- the schedule -----------------------------------------------------------------------------


def _work_s(remaining: float | None, cost: Cost | None) -> float:
    if remaining is None or cost is None or not cost.feasible:
        return math.inf
    return remaining * cost.iteration_s


class _Planner:
    """`plan_fn` with a cache by (job, machine set): orders and move trials share plans.

    Optional questions (every option but a job's plan on the whole fleet) stop being asked once
    `budget` plans were made anew in this run; plans `plan_fn` remembers (its ``remembers``
    method, when it has one) are always answered. Deterministic: the questions come in a fixed
    order."""

    def __init__(self, plan_fn: PlanFn, budget: int, speed: np.ndarray) -> None:
        self.plan_fn = plan_fn
        self.speed = speed  # the fleet's FLOP/s per machine
        self.budget = budget
        self.cache: dict[tuple[str, bytes], tuple[Plan | None, Cost]] = {}
        self.made = 0
        # Per job size, the feasible plans seen in this run (asked for, or running): a plan
        # depends on the job's sizes and its machines only, so any of them serves a job of
        # that size whose machines are free (`fitting`).
        self.seen: dict[str, dict[bytes, tuple[Plan, Cost]]] = {}

    def learn(self, job: Job, plan: Plan | None, cost: Cost) -> None:
        """Remember a feasible plan for the jobs of `job`'s sizes."""
        if plan is None or not cost.feasible:
            return
        nodes = np.sort(np.asarray(plan.nodes, np.int64)).tobytes()
        plans = self.seen.setdefault(job_sizes(job), {})
        if nodes not in plans or cost.iteration_s < plans[nodes][1].iteration_s:
            plans[nodes] = (plan, cost)

    def fitting(self, job: Job, fits: Callable[[Plan, Cost], bool]) -> tuple[Plan, Cost] | None:
        """The fastest plan seen for `job`'s sizes that `fits` (ties: the first seen)."""
        best: tuple[Plan, Cost] | None = None
        for plan, cost in self.seen.get(job_sizes(job), {}).values():
            if (best is None or cost.iteration_s < best[1].iteration_s) and fits(plan, cost):
                best = (plan, cost)
        return best

    def __call__(
        self, job: Job, nodes: np.ndarray, optional: bool = False
    ) -> tuple[Plan | None, Cost] | None:
        nodes = np.sort(np.asarray(nodes, np.int64))
        key = (job.name, nodes.tobytes())
        if key not in self.cache:
            remembers = getattr(self.plan_fn, "remembers", None)
            known = remembers is not None and remembers(job, nodes)
            if optional and not known and self.made >= self.budget:
                return None
            self.made += not known
            self.cache[key] = self.plan_fn(job, nodes)
            self.learn(job, *self.cache[key])
        return self.cache[key]

    def whole(self, job: Job, usable: np.ndarray) -> tuple[Plan | None, Cost]:
        """The job's plan on every usable machine (always answered)."""
        found = self(job, np.flatnonzero(usable))
        assert found is not None
        return found

    def kind_bound(self, job: Job, machines: np.ndarray) -> float | None:
        """Seconds per iteration of the job's plan on every usable machine up to some speed
        (`machines`, a mask), or of a faster plan seen in the run for its sizes on some of them:
        a bound on its plans on some of them. A handful of sets per job size, remembered from
        run to run; None past the planning budget."""
        if not machines.any():
            return math.inf
        found = self(job, np.flatnonzero(machines), optional=True)
        if found is None:
            return None
        # The planner's search is a heuristic: on more machines it may miss a plan it found on
        # fewer. A plan seen for the job's sizes on some of these machines bounds them too.
        bound = found[1].iteration_s
        for plan, cost in self.seen.get(job_sizes(job), {}).values():
            if cost.iteration_s < bound and machines[list(plan.nodes)].all():
                bound = cost.iteration_s
        return bound


def schedule(
    fleet: Fleet,
    running: Sequence[Running],
    waiting: Sequence[Waiting],
    settings: SchedulerSettings,
    plan_fn: PlanFn,
    deadlines_s: dict[str, float] | None = None,
    start_now: Mapping[str, tuple[Plan, Cost]] | None = None,
) -> Schedule:
    """The schedule of this run (module docstring). Deterministic for deterministic `plan_fn`.

    `start_now` fixes the plans of some waiting jobs, which then start now (the placement
    strategy's plans for the jobs the scheduler starts together: `hulk.stages.scheduling`).
    """
    planner = _Planner(plan_fn, settings.max_plans_per_run, fleet.compute_flops)
    usable = np.zeros(fleet.n, bool)
    usable[fleet.active_indices()] = True
    kept: list[Running] = []
    displaced: list[Waiting] = []
    for job in running:
        planner.learn(job.job, job.plan, job.cost)
        if _displaced(job, usable):
            displaced.append(Waiting(job.job, job.remaining, job.submitted_s, previous=job))
        else:
            kept.append(job)
    fixed = start_now or {}
    if fixed:
        held = {n for run in kept for n in run.nodes}
        for name, (plan, _) in fixed.items():
            if held & set(plan.nodes) or not usable[list(plan.nodes)].all():
                raise ValueError(
                    f"the plan given for {name} needs machines a running job holds or the fleet "
                    "lacks"
                )
        starting = []
        for w in [*displaced, *waiting]:
            if w.job.name not in fixed:
                continue
            plan, cost = fixed[w.job.name]
            overhead = 0.0
            prev = w.resumes_from
            if prev is not None:
                overhead = move_cost(
                    w.job, fleet, prev.nodes, prev.plan, plan, plan.nodes, settings
                )
            starting.append(
                Running(
                    w.job,
                    tuple(int(n) for n in plan.nodes),
                    plan,
                    cost,
                    w.remaining,
                    w.submitted_s,
                    ready_s=overhead,
                    action=RESTART if prev is not None else START,
                )
            )
        kept = [*kept, *starting]
        displaced = [w for w in displaced if w.job.name not in fixed]
        waiting = [w for w in waiting if w.job.name not in fixed]
    deadlines = deadlines_s or {}

    pending = list(waiting)
    best = _best_order(fleet, usable, kept, displaced, pending, settings, planner, deadlines)
    moves = 0
    while moves < settings.max_moves_per_run:
        room = settings.max_moves_per_run - moves
        moved = _best_move(
            fleet, usable, best, kept, displaced, pending, settings, planner, deadlines, room
        )
        if moved is None:
            break
        moves += len(moved[0].moves) - len(best.moves)  # a group stop moves several jobs
        best, kept, pending = moved
    return best


def _displaced(run: Running, usable: np.ndarray) -> bool:
    """Whether a running job must leave its machines: one of them failed or was drained, or its
    plan no longer runs on the fleet."""
    return bool(run.lost_nodes or any(not usable[n] for n in run.nodes) or not run.cost.feasible)


def settled(
    found: Schedule, running: Sequence[Running], waiting: Sequence[Waiting]
) -> tuple[list[Running], list[Waiting]]:
    """The running and waiting jobs as `found`'s moves leave them: a moved job runs on its new
    machines (restarting), a stopped one waits with its checkpoint where it ran; the others as
    given (a displaced job stays in `running`: `schedule` displaces it again)."""
    decided = {d.job.name: d for d in found.decisions}
    moved = set(found.moves)
    after: list[Running] = []
    line = list(waiting)
    for run in running:
        decision = decided.get(run.job.name)
        if decision is None or run.job.name not in moved:
            after.append(run)
        elif decision.action == MOVE and decision.plan is not None and decision.cost is not None:
            after.append(
                Running(
                    run.job,
                    decision.nodes,
                    decision.plan,
                    decision.cost,
                    run.remaining,
                    run.submitted_s,
                    ready_s=decision.overhead_s,
                    action=MOVE,
                )
            )
        else:
            line.append(Waiting(run.job, run.remaining, run.submitted_s, checkpoint=run))
    return after, line


def with_start_plans(
    fleet: Fleet,
    found: Schedule,
    running: Sequence[Running],
    waiting: Sequence[Waiting],
    settings: SchedulerSettings,
    plan_fn: PlanFn,
    plans: Mapping[str, tuple[Plan, Cost]],
    deadlines_s: dict[str, float] | None = None,
) -> Schedule | None:
    """`found` (the schedule of `running` and `waiting`) with the jobs it starts now laid out by
    `plans` instead (the placement strategy's, on the machines `found` leaves free now): the
    moves `found` made stand, and no other is made. None when a plan needs a machine that a job
    still holds after those moves."""
    kept, line = settled(found, running, waiting)
    usable = np.zeros(fleet.n, bool)
    usable[fleet.active_indices()] = True
    held = {n for run in kept if not _displaced(run, usable) for n in run.nodes}
    if any(held & set(plan.nodes) for plan, _ in plans.values()):
        return None
    alt = schedule(
        fleet,
        kept,
        line,
        settings.model_copy(update={"max_moves_per_run": 0}),
        plan_fn,
        deadlines_s,
        start_now=plans,
    )
    decisions = [_stopped(d, found.stop_notes) for d in alt.decisions]
    return replace(alt, decisions=decisions, moves=list(found.moves), stop_notes=found.stop_notes)


def _best_order(
    fleet: Fleet,
    usable: np.ndarray,
    kept: Sequence[Running],
    displaced: Sequence[Waiting],
    waiting: Sequence[Waiting],
    settings: SchedulerSettings,
    planner: _Planner,
    deadlines: dict[str, float],
    only: str | None = None,
) -> Schedule:
    """The best of the list schedules over the orders of the module docstring (or the order
    `only`: a move is weighed in the order the schedule without it kept, which costs one list
    schedule instead of three)."""
    pending = [*displaced, *waiting]
    whole = {w.job.name: _work_s(w.remaining, planner.whole(w.job, usable)[1]) for w in pending}

    def by(name: str) -> Callable[[Waiting], tuple]:
        def key(w: Waiting) -> tuple:
            first = (w.previous is None, -w.job.priority)
            if name == "shortest-first":
                return (*first, whole[w.job.name], w.submitted_s, w.job.name)
            if name == "deadline":
                deadline = deadlines.get(w.job.name, math.inf)
                return (*first, deadline, whole[w.job.name], w.job.name)
            return (*first, w.submitted_s, w.job.name)

        return key

    best: Schedule | None = None
    orders = ["shortest-first", "arrival"] + (["deadline"] if deadlines else [])
    for name in [only] if only in orders else orders:
        order = sorted(pending, key=by(name))
        found = _list_schedule(fleet, usable, kept, order, settings, planner, deadlines)
        found = replace(found, order=name)
        if best is None or found.score() < best.score():
            best = found
    assert best is not None
    return best


class _Timeline:
    """Each machine's commitments as intervals [start, end) with their job: running jobs from
    now, scheduled ones from their start. A waiting job may use a machine in a gap before a
    later commitment when it finishes before that commitment starts (backfilling).

    Kept as flat arrays of spans (machine, start, end, job): a run asks the timeline hundreds
    of thousands of questions and reserves a few dozen times, so each question is a few array
    operations over the spans rather than a loop over machines."""

    def __init__(self, usable: np.ndarray) -> None:
        self.usable = usable
        self._nodes: list[int] = []
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._jobs: list[str] = []
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def copy(self) -> _Timeline:
        other = _Timeline(self.usable)
        other._nodes = list(self._nodes)
        other._starts = list(self._starts)
        other._ends = list(self._ends)
        other._jobs = list(self._jobs)
        other._arrays = self._arrays  # never changed in place: rebuilt after a reserve
        return other

    def reserve(self, nodes: Sequence[int], start: float, end: float, job: str) -> None:
        for n in nodes:
            self._nodes.append(int(n))
            self._starts.append(float(start))
            self._ends.append(float(end))
            self._jobs.append(job)
        self._arrays = None

    def _spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(machines, starts, ends) of every commitment."""
        if self._arrays is None:
            self._arrays = (
                np.asarray(self._nodes, np.int64),
                np.asarray(self._starts, float),
                np.asarray(self._ends, float),
            )
        return self._arrays

    def busy_during(self, start: float, end: float) -> np.ndarray:
        """A mask of the machines committed somewhere in [start, end)."""
        nodes, starts, ends = self._spans()
        busy = np.zeros(len(self.usable), bool)
        busy[nodes[(starts < end) & (start < ends)]] = True
        return busy

    def free_at(self, moment: float) -> np.ndarray:
        """Usable machines no commitment holds at `moment`."""
        nodes, starts, ends = self._spans()
        free = self.usable.copy()
        free[nodes[(starts <= moment) & (moment < ends)]] = False
        return free

    def clashes(self, nodes: Sequence[int], start: float, end: float) -> list[int]:
        """The machines of `nodes` committed somewhere in [start, end)."""
        if not self._nodes:
            return []
        asked = np.asarray(nodes, np.int64)
        return asked[self.busy_during(start, end)[asked]].tolist()

    def ends(self) -> np.ndarray:
        """The times commitments end, after now (finite only), ascending."""
        ends = self._spans()[2]
        return np.unique(ends[(ends > 0) & (ends < math.inf)])

    def earliest(self, nodes: Sequence[int], length: float) -> float:
        """The earliest start at which `nodes` are free for `length` seconds."""
        spans, starts, ends = self._spans()
        on = np.isin(spans, np.asarray(nodes, np.int64))
        starts, ends = starts[on], ends[on]
        for start in [0.0, *np.unique(ends).tolist()]:
            if math.isfinite(start) and not ((starts < start + length) & (start < ends)).any():
                return start
        return math.inf

    def holders(self, nodes: Sequence[int], before: float) -> tuple[str, ...]:
        """The jobs whose commitments on `nodes` end after now and by `before`."""
        asked = set(int(n) for n in nodes)
        return tuple(
            sorted(
                {
                    job
                    for n, b, job in zip(self._nodes, self._ends, self._jobs, strict=True)
                    if n in asked and 0 < b <= before
                }
            )
        )

    def endless(self) -> list[str]:
        """Jobs holding machines for good (no length)."""
        return sorted({job for b, job in zip(self._ends, self._jobs, strict=True) if b == math.inf})


def _list_schedule(
    fleet: Fleet,
    usable: np.ndarray,
    kept: Sequence[Running],
    order: Sequence[Waiting],
    settings: SchedulerSettings,
    planner: _Planner,
    deadlines: dict[str, float],
) -> Schedule:
    timeline = _Timeline(usable)
    decisions: list[Decision] = []
    for run in kept:
        finish = (
            None if run.remaining is None else run.ready_s + run.remaining * run.cost.iteration_s
        )
        decision = Decision(
            run.job,
            run.action,
            run.nodes,
            run.plan,
            run.cost,
            start_s=0.0,
            finish_s=finish,
            overhead_s=run.ready_s,
            submitted_s=run.submitted_s,
            deadline_s=deadlines.get(run.job.name),
        )
        ends = math.inf if decision.finish_s is None else decision.finish_s
        timeline.reserve(decision.nodes, 0.0, ends, run.job.name)
        decisions.append(decision)
    for i, job in enumerate(order):
        after = order[i + 1] if i + 1 < len(order) else None
        decision = _place_one(fleet, usable, timeline, job, settings, planner, after=after)
        decision = replace(decision, deadline_s=deadlines.get(job.job.name))
        if decision.nodes and decision.start_s is not None:
            ends = math.inf if decision.finish_s is None else decision.finish_s
            timeline.reserve(decision.nodes, decision.start_s, ends, job.job.name)
        decisions.append(decision)
    finished = [d for d in decisions if d.finish_s is not None]
    completions = [d.finish_s - d.submitted_s for d in finished if d.finish_s is not None]
    return Schedule(
        decisions=decisions,
        order="",
        mean_completion_s=float(np.mean(completions)) if completions else None,
        makespan_s=max((d.finish_s for d in finished if d.finish_s is not None), default=None),
        missed_deadlines=sum(d.late for d in decisions),
    )


def _place_one(
    fleet: Fleet,
    usable: np.ndarray,
    timeline: _Timeline,
    job: Waiting,
    settings: SchedulerSettings,
    planner: _Planner,
    after: Waiting | None = None,
) -> Decision:
    """The earliest-finishing option of one waiting job (module docstring, step 2): starting
    now, when the machines of its plan on the whole fleet are free for as long as it needs (no
    planning needed), and at the times machines free up in between, in the gaps other jobs'
    commitments leave. `after`: the next job in line, which the job may leave machines to
    (`_fewer_replicas`)."""

    moving: dict[tuple[int, tuple[int, ...]], tuple[Plan | None, float]] = {}

    def length(plan: Plan | None, cost: Cost, nodes: Sequence[int]) -> tuple[float, float]:
        """(overhead, seconds from start to finish) of the job on a plan."""
        overhead = 0.0
        prev = job.resumes_from
        if prev is not None:
            # The same plans are weighed at several starts: their move cost once each (the
            # plan is kept beside it, so its id is not reused while this job is placed).
            key = (id(plan), tuple(int(n) for n in nodes))
            if key not in moving:
                moving[key] = (
                    plan,
                    move_cost(job.job, fleet, prev.nodes, prev.plan, plan, nodes, settings),
                )
            overhead = moving[key][1]
        if job.remaining is None:
            return overhead, math.inf
        return overhead, overhead + job.remaining * cost.iteration_s

    ideal_plan, ideal = planner.whole(job.job, usable)
    ideal_at = math.inf
    if ideal_plan is not None and ideal.feasible:
        ideal_at = timeline.earliest(
            list(ideal_plan.nodes), length(ideal_plan, ideal, list(ideal_plan.nodes))[1]
        )
    times = timeline.ends()
    times = times[times < ideal_at][: settings.start_candidates]
    # A job submitted for later (its ``submitted_at`` ahead of now) starts no sooner.
    release = max(0.0, job.submitted_s)
    candidates = sorted(
        {
            max(release, t)
            for t in (0.0, *times.tolist(), *([ideal_at] if math.isfinite(ideal_at) else []))
        }
    )
    best, not_now = _weigh_starts(
        fleet, job, candidates, timeline, planner, ideal_plan, ideal, length, settings.wait_gain
    )
    action = RESTART if job.resumes_from is not None else START
    if best is None:
        if not ideal.feasible:
            why = (ideal.reason or "never fits").removeprefix(f"{job.job.name}: ")
            if not usable.all() and fleet.memory_bytes.sum() >= job.job.min_memory_bytes:
                # Machines drained or failed now may come back: the job waits for them.
                return Decision(
                    job.job,
                    WAIT,
                    submitted_s=job.submitted_s,
                    reason=f"waits for drained or failed machines to return ({why})",
                )
            return Decision(job.job, NEVER, submitted_s=job.submitted_s, reason=why)
        holders = timeline.endless()
        if holders:
            wait_reason = "waits for machines held by jobs without a length: " + ", ".join(holders)
        elif planner.made >= planner.budget:  # no start planned: the run's budget went first
            wait_reason = (
                "waits: no start for it was planned this round (the run's planning budget, "
                "scheduler.max_plans_per_run, was spent); a later run plans it"
            )
        else:
            wait_reason = f"waits: {not_now or 'no start was found this round'}"
        if job.resumes_from is not None:
            # Free machines its checkpoint cannot reach (no path from where it lies) are none
            # of its options.
            where = [fleet.node_id(n) for n in job.resumes_from.nodes]
            wait_reason = f"waits for machines its checkpoint on {where} can reach" + (
                ", held by jobs without a length: " + ", ".join(holders) if holders else ""
            )
        return Decision(
            job.job, WAIT, submitted_s=job.submitted_s, waits_for=tuple(holders), reason=wait_reason
        )
    (finish, _, _), start, nodes, plan, cost, overhead = best
    plan, cost, nodes, overhead, finish = _leave_fastest(
        fleet,
        job,
        start,
        (plan, cost, nodes, overhead, finish),
        timeline,
        planner,
        length,
        settings,
    )
    if after is not None:
        plan, cost, nodes, overhead, finish = _fewer_replicas(
            fleet,
            usable,
            timeline,
            job,
            after,
            start,
            (plan, cost, nodes, overhead, finish),
            length,
            settings,
            planner,
        )
    waits_for: tuple[str, ...] = ()
    reason = None
    if start > 0:
        waits_for = timeline.holders(nodes.tolist(), start)
        action = WAIT
        why = not_now or "it finishes sooner on them than by starting now"
        reason = f"waits for the machines of {', '.join(waits_for)}: {why}"
        if start <= release:
            reason = "submitted for later: it starts no sooner than its submitted_at"
    return Decision(
        job.job,
        action,
        tuple(int(n) for n in nodes),
        plan,
        cost,
        start_s=start,
        finish_s=None if math.isinf(finish) else finish,
        overhead_s=overhead,
        submitted_s=job.submitted_s,
        waits_for=waits_for,
        reason=reason,
    )


_Choice = tuple[tuple[float, float, float], float, np.ndarray, Plan | None, Cost, float]
# ((finish, start, seconds per iteration), start, machines, plan, cost, overhead)


def _weigh_starts(
    fleet: Fleet,
    job: Waiting,
    candidates: Sequence[float],
    timeline: _Timeline,
    planner: _Planner,
    ideal_plan: Plan | None,
    ideal: Cost,
    length: Callable[[Plan | None, Cost, Sequence[int]], tuple[float, float]],
    wait_gain: float = 0.0,
) -> tuple[_Choice | None, str | None]:
    """The earliest-finishing option over the candidate starts (None: nothing fits); the option
    at the first candidate (starting now) when the earliest-finishing one starts later and
    finishes at most `wait_gain` sooner, in seconds from now. A later start is a forecast that
    shorter work arriving in the meantime pushes back; a start now is not. Also, when the job
    has no option at the first candidate, why (None when it has one)."""
    best: _Choice | None = None
    first: _Choice | None = None
    seen: set[bytes] = set()
    not_now = "no machine it can use is free now"
    for start in candidates:
        if best is not None and start >= best[0][0]:
            break  # starting later cannot finish earlier
        avail = _reached(fleet, job.resumes_from, np.flatnonzero(timeline.free_at(start)))
        if not len(avail) or avail.tobytes() in seen:
            continue
        if start == candidates[0]:
            holds = fleet.memory_bytes[avail].sum() >= job.job.min_memory_bytes
            not_now = (
                "no plan on the machines free now was made this round (its planning budget "
                "was spent)"
                if planner.made >= planner.budget
                else "the machines free now cannot hold it"
                if not holds
                else "a job without a length takes only machines no later start needs, and "
                "those free now cannot hold it"
                if job.remaining is None
                # They hold its memory: either they are committed to jobs that start before
                # it would finish, or no layout of its stages fits them.
                else "the machines free now are needed by jobs starting before it would "
                "finish, or no plan on them holds it"
            )
        seen.add(avail.tobytes())
        if best is not None and job.remaining is not None:
            # The plan on every usable machine bounds a plan on some of them (the planner's
            # search is a heuristic, so this is the bound it would reach), and so do the plan
            # on every usable machine no faster than the fastest free then, and work / Σ FLOP/s
            # of the machines free then.
            kinds = timeline.usable & (fleet.compute_flops <= fleet.compute_flops[avail].max())
            floor = start + job.remaining * max(
                ideal.iteration_s,
                planner.kind_bound(job.job, kinds) or 0.0,
                lower_bound(job.job, fleet, avail),
            )
            if floor >= best[0][0]:
                continue
        option = _option_at(job, start, avail, timeline, planner, ideal_plan, ideal, length)
        if option is None:
            continue
        plan, cost, nodes, overhead, finish = option
        key = (finish, start, cost.iteration_s)
        if start == candidates[0]:
            first = (key, start, nodes, plan, cost, overhead)
        if best is None or key < best[0]:
            best = (key, start, nodes, plan, cost, overhead)
    if (
        first is not None
        and best is not None
        and best[1] > first[1]
        and math.isfinite(best[0][0])
        and first[0][0] <= (1 + wait_gain) * best[0][0]
    ):
        return first, None
    return best, None if first is not None else not_now


def _reached(fleet: Fleet, checkpoint: Running | None, nodes: np.ndarray) -> np.ndarray:
    """The machines of `nodes` a job's checkpoint can reach: those mutually reachable with a
    surviving machine it lies on (all of `nodes` without a checkpoint, or when none of its
    machines survives: it is then reloaded where it is kept)."""
    if checkpoint is None:
        return nodes
    alive = [n for n in checkpoint.nodes if 0 <= n < fleet.n and fleet.active[n]]
    if not alive:
        return nodes
    return nodes[np.isin(fleet.component[nodes], fleet.component[alive])]


_Option = tuple[
    Plan | None, Cost, np.ndarray, float, float
]  # plan, cost, machines, overhead, finish


def _fewer_replicas(
    fleet: Fleet,
    usable: np.ndarray,
    timeline: _Timeline,
    job: Waiting,
    after: Waiting,
    start: float,
    chosen: _Option,
    length: Callable[[Plan | None, Cost, Sequence[int]], tuple[float, float]],
    settings: SchedulerSettings,
    planner: _Planner,
) -> _Option:
    """The `chosen` plan, or the same plan with its data-parallel replicas halved (rounding up)
    as often as the run stays within `share_slack` of the chosen one's, whichever gives this
    job's finish plus that of `after` (the next job in line, placed after it) the lower sum
    (ties: the more replicas). Past a few replicas a job gains little from more machines, and
    the machines it leaves start the next job sooner — the fleet's throughput under contention
    (Pollux, Sia) — where that job can use them: on a fleet of alike machines they are what it
    waits for; on a mixed one they are often machines it would not run on."""
    plan, _, _, _, finish = chosen
    if settings.share_slack <= 0 or plan is None or job.remaining is None:
        return chosen
    if plan.data_parallel <= 1 or not math.isfinite(finish):
        return chosen
    limit = (1 + settings.share_slack) * (finish - start)
    options = [chosen]
    replicas = plan.data_parallel
    while replicas > 1:
        replicas = (replicas + 1) // 2
        fewer = Plan(plan.replicas[:replicas])
        cost = iteration_time(job.job, fleet, fewer)
        if not cost.feasible:
            break
        overhead, run = length(fewer, cost, fewer.nodes)
        if run > limit:
            break
        options.append((fewer, cost, np.asarray(fewer.nodes, np.int64), overhead, start + run))
    if len(options) == 1:
        return chosen
    best, best_sum = chosen, math.inf
    for option in options:
        trial = timeline.copy()
        trial.reserve(option[2].tolist(), start, option[4], job.job.name)
        following = _place_one(fleet, usable, trial, after, settings, planner)
        if following.finish_s is None:
            continue
        if option[4] + following.finish_s < best_sum:
            best, best_sum = option, option[4] + following.finish_s
    return best


def _leave_fastest(
    fleet: Fleet,
    job: Waiting,
    start: float,
    chosen: _Option,
    timeline: _Timeline,
    planner: _Planner,
    length: Callable[[Plan | None, Cost, Sequence[int]], tuple[float, float]],
    settings: SchedulerSettings,
) -> _Option:
    """The job's plan at `start` without the fastest kind of machine of the `chosen` one, when
    it is at most `leave_fastest_slack` longer; else `chosen`. Jobs that gain little from the
    fastest machines (communication-bound ones) leave them to the jobs that gain most, now and
    arriving later (heterogeneity-aware allocation)."""
    finish, nodes = chosen[4], chosen[2]
    if settings.leave_fastest_slack <= 0 or job.remaining is None or not math.isfinite(finish):
        return chosen
    speed = fleet.compute_flops
    avail = np.flatnonzero(timeline.free_at(start))
    slower = speed < float(speed[nodes].max())
    lesser = avail[slower[avail]]
    if not len(lesser):
        return chosen
    # The job's plan on every usable machine of the slower kinds (the same set run after run:
    # remembered) bounds a plan on the slower machines free at `start`, as the whole fleet's
    # plan bounds the others: when even it is too slow, no new plan is needed.
    bound = planner.kind_bound(job.job, timeline.usable & slower)
    if bound is None or job.remaining * bound > (1 + settings.leave_fastest_slack) * (
        finish - start
    ):
        return chosen
    option = _option_at(job, start, lesser, timeline, planner, None, Cost.infeasible(""), length)
    if option is None or option[4] - start > (1 + settings.leave_fastest_slack) * (finish - start):
        return chosen
    return option


def _option_at(
    job: Waiting,
    start: float,
    avail: np.ndarray,
    timeline: _Timeline,
    planner: _Planner,
    ideal_plan: Plan | None,
    ideal: Cost,
    length: Callable[[Plan | None, Cost, Sequence[int]], tuple[float, float]],
) -> _Option | None:
    """The job's plan starting at `start` on machines free then and until it finishes: (plan,
    cost, machines, overhead, finish), or None (nothing fits, or over the planning budget)."""
    # A job resuming from a checkpoint no path reaches these machines from (sites that cannot
    # talk) has no option on them: its move cost is infinite.
    if ideal_plan is not None and ideal.feasible:
        nodes = list(ideal_plan.nodes)
        overhead, seconds = length(ideal_plan, ideal, nodes)
        if math.isfinite(overhead) and not timeline.clashes(nodes, start, start + seconds):
            return ideal_plan, ideal, np.asarray(nodes, np.int64), overhead, start + seconds
    free = np.zeros(len(timeline.usable), bool)
    free[avail] = True

    def fits(plan: Plan, cost: Cost) -> bool:
        nodes = list(plan.nodes)
        if not free[nodes].all():  # first: a resuming job's length weighs its checkpoint's move
            return False
        overhead, seconds = length(plan, cost, nodes)
        return math.isfinite(overhead) and not timeline.clashes(nodes, start, start + seconds)

    # A plan seen in this run for a job of the same sizes, on machines free for as long as it
    # needs (another job's plan on the machines it leaves, say): when it is as fast as the plan
    # on every machine no faster than the fastest free one, planning anew cannot beat it.
    seen = planner.fitting(job.job, fits)
    seen_option: _Option | None = None
    if seen is not None:
        plan, cost = seen
        nodes = list(plan.nodes)
        overhead, seconds = length(plan, cost, nodes)
        seen_option = plan, cost, np.asarray(nodes, np.int64), overhead, start + seconds
        kinds = timeline.usable & (planner.speed <= planner.speed[avail].max())
        bound = planner.kind_bound(job.job, kinds)
        if bound is not None and cost.iteration_s <= max(ideal.iteration_s, bound):
            return seen_option
    planned = _planned_at(job, start, avail, timeline, planner, length)
    if planned is not None and not math.isfinite(planned[3]):
        planned = None
    if seen_option is None or (planned is not None and planned[4] < seen_option[4]):
        return planned
    return seen_option


def _planned_at(
    job: Waiting,
    start: float,
    avail: np.ndarray,
    timeline: _Timeline,
    planner: _Planner,
    length: Callable[[Plan | None, Cost, Sequence[int]], tuple[float, float]],
) -> _Option | None:
    """The planner's plan for the job on the machines `avail` free at `start` (planned again
    without the machines it would hold into a later commitment), or None."""
    pool = avail
    for _ in range(2):  # a plan that runs into a later commitment is planned again without it
        found = planner(job.job, pool, optional=True)
        if found is None or not found[1].feasible:
            return None
        plan, cost = found
        nodes = list(plan.nodes) if plan is not None else pool.tolist()
        overhead, seconds = length(plan, cost, nodes)
        clash = timeline.clashes(nodes, start, start + seconds)
        if not clash:
            return plan, cost, np.asarray(nodes, np.int64), overhead, start + seconds
        pool = pool[~timeline.busy_during(start, start + seconds)[pool]]
        if not len(pool):
            return None
    return None


def _best_move(
    fleet: Fleet,
    usable: np.ndarray,
    current: Schedule,
    kept: list[Running],
    displaced: Sequence[Waiting],
    waiting: Sequence[Waiting],
    settings: SchedulerSettings,
    planner: _Planner,
    deadlines: dict[str, float],
    room: int,
) -> tuple[Schedule, list[Running], list[Waiting]] | None:
    """The move of one running job (or the stop of up to `room` of them) that improves the
    schedule most, when that beats `move_gain` (module docstring, step 4): (schedule, running
    jobs, waiting jobs) after it, or None."""
    if current.mean_completion_s is None:
        return None
    limit = current.mean_completion_s - abs(current.mean_completion_s) * settings.move_gain
    best = _best_growth(
        fleet, usable, current, kept, displaced, waiting, settings, planner, deadlines, limit
    )
    stop = _best_stop(
        fleet, usable, current, kept, displaced, waiting, settings, planner, deadlines, limit, room
    )
    if stop is not None and (best is None or stop[0].score() < best[0].score()):
        return stop
    return best


def _accepts(trial: Schedule, current: Schedule, limit: float) -> bool:
    # The mean counts the jobs whose finish is known: a move that leaves one unknown would
    # lower it by dropping that job.
    return (
        trial.mean_completion_s is not None
        and trial.missed_deadlines <= current.missed_deadlines
        and _finishes_known(trial) >= _finishes_known(current)
        and trial.mean_completion_s < limit
    )


def _finishes_known(found: Schedule) -> int:
    return sum(d.finish_s is not None for d in found.decisions)


def _best_growth(
    fleet: Fleet,
    usable: np.ndarray,
    current: Schedule,
    kept: list[Running],
    displaced: Sequence[Waiting],
    waiting: Sequence[Waiting],
    settings: SchedulerSettings,
    planner: _Planner,
    deadlines: dict[str, float],
    limit: float,
) -> tuple[Schedule, list[Running], list[Waiting]] | None:
    """The running job whose move onto its machines plus the machines no running job holds
    improves the schedule most, past `limit`."""
    # Machines no running job holds: idle now, or about to start a waiting job (which the trial
    # schedules again: a job running on slow machines may take the fast ones that free up when
    # that lowers the mean, and the waiting job goes elsewhere or later).
    held = np.zeros(fleet.n, bool)
    for run in kept:
        held[list(run.nodes)] = True
    free_now = usable & ~held
    if not free_now.any():
        return None
    best: tuple[Schedule, list[Running], list[Waiting]] | None = None
    for run in kept:
        if run.remaining is None or run.ready_s > 0 or run.action != KEEP:
            continue
        pool = _reached(
            fleet, run, np.flatnonzero(free_now | np.isin(np.arange(fleet.n), run.nodes))
        )
        found = planner(run.job, pool, optional=True)
        if found is None:
            break
        plan, cost = found
        if not cost.feasible or plan is None or cost.iteration_s >= run.cost.iteration_s:
            continue
        overhead = move_cost(run.job, fleet, run.nodes, run.plan, plan, plan.nodes, settings)
        if not math.isfinite(overhead):
            continue  # its checkpoint cannot reach those machines
        moved = Running(
            run.job,
            tuple(int(n) for n in plan.nodes),
            plan,
            cost,
            run.remaining,
            run.submitted_s,
            ready_s=overhead,
            action=MOVE,
        )
        others = [moved if r is run else r for r in kept]
        trial = _best_order(
            fleet, usable, others, displaced, waiting, settings, planner, deadlines, current.order
        )
        trial = replace(
            trial,
            decisions=[_stopped(d, current.stop_notes) for d in trial.decisions],
            moves=[*current.moves, run.job.name],
            stop_notes=current.stop_notes,
        )
        if _accepts(trial, current, limit) and (best is None or trial.score() < best[0].score()):
            best = (trial, others, list(waiting))
    return best


def _best_stop(
    fleet: Fleet,
    usable: np.ndarray,
    current: Schedule,
    kept: list[Running],
    displaced: Sequence[Waiting],
    waiting: Sequence[Waiting],
    settings: SchedulerSettings,
    planner: _Planner,
    deadlines: dict[str, float],
    limit: float,
    room: int,
) -> tuple[Schedule, list[Running], list[Waiting]] | None:
    """The stop of running jobs (they wait in line again and resume from their checkpoint)
    that improves the schedule most, past `limit`. Tried: the running jobs with more work left
    than some waiting job needs on the whole fleet, the most work left first, up to
    `preempt_candidates` of them, one at a time; and, for each of the `preempt_candidates`
    waiting jobs with the least work, all the running jobs on the machines of its plan on the
    whole fleet together (at most `room` of them, each with more work left than it needs): a
    short job that needs several machines gets them first (shortest work first). A running
    job is stopped only for waiting work of its priority or higher."""
    line = [*displaced, *waiting]
    if not line or not settings.preempt_candidates:
        return None
    work = {w.job.name: _work_s(w.remaining, planner.whole(w.job, usable)[1]) for w in line}

    def shortest(priority: int) -> float:
        """The least work of a waiting job of `priority` or higher: a job is stopped only for
        work of its own priority or higher."""
        return min((work[w.job.name] for w in line if w.job.priority >= priority), default=math.inf)

    def stoppable(run: Running, than: float) -> bool:
        return (
            run.remaining is not None
            and run.ready_s == 0
            and run.action == KEEP
            and _work_s(run.remaining, run.cost) > than
        )

    singles = sorted(
        (run for run in kept if stoppable(run, shortest(run.job.priority))),
        key=lambda run: (-_work_s(run.remaining, run.cost), run.job.name),
    )[: settings.preempt_candidates]
    candidates: list[tuple[Running, ...]] = [(run,) for run in singles]
    for w in sorted(line, key=lambda w: (work[w.job.name], w.job.name))[
        : settings.preempt_candidates
    ]:
        plan = planner.whole(w.job, usable)[0]
        if plan is None or not math.isfinite(work[w.job.name]):
            continue
        wanted = set(plan.nodes)
        holders = tuple(run for run in kept if wanted & set(run.nodes))
        if (
            1 < len(holders) <= room
            and all(
                stoppable(run, work[w.job.name]) and run.job.priority <= w.job.priority
                for run in holders
            )
            and holders not in candidates
        ):
            candidates.append(holders)
    best: tuple[Schedule, list[Running], list[Waiting]] | None = None
    for group in candidates:
        others = [r for r in kept if all(r is not run for run in group)]
        stopped = [
            *waiting,
            *(Waiting(run.job, run.remaining, run.submitted_s, checkpoint=run) for run in group),
        ]
        trial = _best_order(
            fleet, usable, others, displaced, stopped, settings, planner, deadlines, current.order
        )
        before, after = current.mean_completion_s or 0.0, trial.mean_completion_s or 0.0
        note = (
            "stopped so that shorter work runs first (the queue's mean completion "
            f"{before / 3600:.1f} h → {after / 3600:.1f} h); it resumes from its checkpoint"
        )
        notes = {**current.stop_notes, **{run.job.name: note for run in group}}
        trial = replace(
            trial,
            decisions=[_stopped(d, notes) for d in trial.decisions],
            moves=[*current.moves, *(run.job.name for run in group)],
            stop_notes=notes,
        )
        if _accepts(trial, current, limit) and (best is None or trial.score() < best[0].score()):
            best = (trial, others, stopped)
    return best


def _stopped(decision: Decision, notes: Mapping[str, str]) -> Decision:
    """A stopped job's decision as its users read it: moved (it starts again now elsewhere), or
    waiting with why (`notes`); other decisions unchanged."""
    note = notes.get(decision.job.name)
    if note is None:
        return decision
    if decision.action == RESTART and decision.start_s == 0.0:
        return replace(decision, action=MOVE)
    if decision.action == WAIT:
        return replace(decision, reason=f"{note}; {decision.reason or 'it waits'}")
    return decision
