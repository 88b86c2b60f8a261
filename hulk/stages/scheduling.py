"""One scheduling run of the assign step (called under the data folder's assign lock).

1. The jobs file is synced into the job store (``DATA/jobs/jobs.db``, `hulk.job_store`);
   running jobs whose estimated iterations are done are finished. A missing store is made
   anew, unless the placements file the run replaces shows jobs running; so is a store that
   holds no run, or only runs older than that file (`check_store_present`: the run is
   refused, nothing written).
2. Machines that stopped reporting (the validation report's ``logs.stale_machine``), and
   machines of the inventory the link table does not know yet (added since the last ingest),
   are drained for this run, with a warning naming them.
3. `hulk.scheduler.schedule` decides, with the stage planner, which job keeps, starts, waits,
   restarts or moves. When several jobs start now together, the placement strategy (the
   teacher's search, or the champion GNN) lays them out on the machines free after the run's
   moves; a job keeps the strategy's plan when it finishes no later with it than with the
   scheduler's own, and those plans (with the moves) are kept when the schedule is no worse
   (`with_strategy_plans`).
4. The placements file gets every job's ``start_at`` / ``finish_at`` (UTC), what a waiting job
   waits for, and a top-level ``queue`` block; the store records the new state, a waiting
   job's estimated start and finish with it (`record`; what ``hulk jobs list`` shows), and
   commits; then the run's file and ``latest.json`` are renamed into place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.data_folder import STALE_RULE, load_fleet
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.job_store import QUEUED, RUNNING, SUBMITTED, JobState, JobStore
from hulk.jobs import format_time, later, utc_time
from hulk.settings import Settings
from hulk.stages import ScheduledTimes, StepResult

if TYPE_CHECKING:
    from hulk.baseline_cache import BaselineMemory
    from hulk.cost import Cost, Fleet, Plan
    from hulk.placements import JobPlacement
    from hulk.scheduler import Decision, Running, Schedule, Waiting
    from hulk.stages.assign import AssignSummary, Champion

JOBS_DB = "jobs/jobs.db"


def jobs_db(data_dir: Path) -> Path:
    """The data folder's job store."""
    return Path(data_dir) / JOBS_DB


def running_jobs(data_dir: Path, out_dir: Path) -> int:
    """How many jobs run on the scheduler's placements: the data folder's job store's running
    jobs, or, without a store, those `out_dir`'s ``latest.json`` shows running (a lost store:
    `check_store_present` refuses the next scheduling run while that file shows them). While
    any run, ``latest.json`` stays the scheduler's: what-if plans (Systems A, B, C, `hulk
    replan`) write only their own run file."""
    from hulk.placements import LATEST

    store = jobs_db(data_dir)
    if not store.is_file():
        return len(_running_in(Path(out_dir) / LATEST)[0])
    with JobStore(store) as jobs:
        return len(jobs.jobs([RUNNING]))


def _running_in(latest: Path) -> tuple[list[str], str | None, dt.datetime | None]:
    """The jobs a scheduler's placements file (`latest`) left running, its run id and when the
    run scheduled (its ``queue.now``); none for a missing or unreadable file, or one of Systems
    A, B or C (no ``queue`` block)."""
    from hulk.scheduler import KEEP, MOVE, RESTART, START

    try:
        doc = json.loads(latest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], None, None
    if not isinstance(doc, dict) or not isinstance(doc.get("queue"), dict):
        return [], None, None
    jobs = doc.get("jobs")
    running = [
        str(job.get("job"))
        for job in (jobs if isinstance(jobs, list) else [])
        if isinstance(job, dict) and job.get("action") in (KEEP, START, RESTART, MOVE)
    ]
    run_id = doc.get("run_id")
    moment = utc_time(doc["queue"].get("now"))
    scheduled_at = moment if isinstance(moment, dt.datetime) else None
    return running, run_id if isinstance(run_id, str) else None, scheduled_at


def check_store_present(data_dir: Path, placements_dirs: Sequence[Path]) -> None:
    """Refuse to schedule with a job store that does not hold the run a scheduler's
    ``latest.json`` in `placements_dirs` shows with jobs running: the store is missing, holds no
    scheduling run (new and empty), or its newest run is older than that file's (restored from
    an older backup). Scheduling from it would start those jobs again from zero, or from older
    progress, and could give their machines to other jobs. A first run (no store, and no such
    file) passes."""
    from hulk.placements import LATEST

    store = jobs_db(data_dir)
    last_run: dt.datetime | None = None
    if store.is_file():
        with JobStore(store, create=False) as opened:
            last_run = opened.last_run()
    seen: set[Path] = set()
    for folder in placements_dirs:
        latest = Path(folder) / LATEST
        if latest.absolute() in seen:
            continue
        seen.add(latest.absolute())
        running, run_id, scheduled_at = _running_in(latest)
        if not running or (
            last_run is not None and (scheduled_at is None or scheduled_at <= last_run)
        ):
            continue
        shown = ", ".join(running[:5]) + (
            f" and {len(running) - 5} more" if len(running) > 5 else ""
        )
        if last_run is None:
            rule = "jobs_db.missing"
            state = "missing" if not store.is_file() else "empty (it holds no scheduling run)"
        else:
            rule = "jobs_db.stale"
            state = f"older than the placements: its newest run is of {format_time(last_run)}"
        raise InputError(
            store,
            rule,
            f"the job store is {state}, but {latest} (run {run_id}) has {len(running)} job(s) "
            f"running: {shown}. Scheduling from this store would start them again from an "
            "earlier state and could give their machines to other jobs, so nothing was "
            f"scheduled or written. Restore the {store.name} that made that run from a backup "
            f"into {store.parent}; or, to start afresh (every job then starts anew), move "
            f"{latest} aside",
        )


def not_reporting(data_dir: Path, fleet: Fleet) -> tuple[list[int], list[Finding]]:
    """Active machines the last validation found silent in the newest day of logs (node ids of
    this fleet), and a warning naming them; nothing without a validation. The last successful
    validation's record (``validated.json``: `hulk validate`, or `hulk ingest` validating the
    logs itself) says which; a record written before Hulk kept them there, the validation
    report's ``logs.stale_machine`` findings."""
    from hulk.data_folder import VALIDATED

    folder = Path(data_dir) / schemas.VALIDATION_DIR
    ids: set[int] = set()
    source = folder / VALIDATED
    record = _json_object(source)
    if isinstance(record.get("stale_machines"), list):
        ids = {n for n in record["stale_machines"] if isinstance(n, int)}
    else:
        source = folder / "report.json"
        for finding in _json_object(source).get("findings", []):
            if not isinstance(finding, dict) or finding.get("rule") != STALE_RULE:
                continue
            machines = finding.get("machines") or [
                row.get("node_id") for row in finding.get("examples", []) if isinstance(row, dict)
            ]
            ids |= {int(n) for n in machines if isinstance(n, int)}
    known = set(fleet.node_ids[fleet.active].tolist())
    drained = sorted(ids & known)
    if not drained:
        return [], []
    message = (
        f"{len(drained)} machine(s) stopped reporting in the newest day of logs and are drained "
        f"for this assignment: {drained}"
    )
    warning = Finding("warning", "assign.drained_not_reporting", str(source), message, len(drained))
    return drained, [warning]


def _json_object(path: Path) -> dict:
    """The JSON object in `path`; empty for a missing or unreadable file, or another value."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def unmeasured(
    data_dir: Path, fleet: Fleet, links: pd.DataFrame
) -> tuple[list[int], list[Finding]]:
    """Active machines of the inventory that no link of the link table touches (added to
    ``machines.csv`` since the last ingest: nothing is known of their network yet), and a
    warning naming them; none when the link table is empty (a fleet of one machine)."""
    if links.empty:
        return [], []
    linked = set(links["src"].tolist()) | set(links["dst"].tolist())
    lonely = sorted(int(n) for n in fleet.node_ids[fleet.active] if int(n) not in linked)
    if not lonely:
        return [], []
    message = (
        f"{len(lonely)} active machine(s) of {schemas.INVENTORY_FILE} have no measured link in "
        f"{schemas.LINKS_FILE} and are drained for this assignment until a link table measures "
        f"them (the nightly run's, or `hulk ingest` of logs that probe them; for an imported "
        f"fleet, `hulk import-hulk` of edges that name them): {lonely}"
    )
    where = str(Path(data_dir) / schemas.LINKS_FILE)
    return lonely, [Finding("warning", "assign.drained_unmeasured", where, message, len(lonely))]


def drain(fleet: Fleet, node_ids: Sequence[int]) -> Fleet:
    """The fleet with `node_ids` inactive (they neither compute nor hold stages)."""
    if not len(node_ids):
        return fleet
    active = fleet.active.copy()
    active[fleet.index_of(list(node_ids))] = False
    return dataclasses.replace(fleet, active=active, _rings={}, _ring_bounds={}, _group_links={})


def _seconds(moment: dt.datetime, now: dt.datetime) -> float:
    return (moment - now).total_seconds()


def scheduler_inputs(
    states: Sequence[JobState], fleet: Fleet, now: dt.datetime
) -> tuple[list[Running], list[Waiting]]:
    """The store's running and waiting jobs as `hulk.scheduler` inputs on `fleet` at `now`."""
    from hulk.assign import plan_cost
    from hulk.cost import Cost, Plan
    from hulk.scheduler import Running, Waiting

    running: list[Running] = []
    waiting: list[Waiting] = []
    known = set(fleet.node_ids.tolist())
    for state in states:
        submitted = _seconds(state.submitted_at, now)
        if state.state != RUNNING:
            left = None
            if state.job.iterations is not None:
                left = max(0.0, state.job.iterations - state.done_iterations)
            checkpoint = _checkpoint(state, fleet, known)
            waiting.append(Waiting(state.job, left, submitted, checkpoint=checkpoint))
            continue
        present = [n for n in state.nodes if n in known]
        lost = tuple(n for n in state.nodes if n not in known)
        nodes = tuple(int(i) for i in fleet.index_of(present)) if present else ()
        plan: Plan | None = None
        if not lost and state.replicas:
            plan = Plan.from_records(fleet, state.replicas)
        cost = (
            plan_cost(state.job, fleet, nodes, plan, state.layout or "pipeline")
            if not lost
            else Cost.infeasible(f"lost machine(s) {list(lost)}")
        )
        ready = 0.0
        if state.computing_since is not None and state.computing_since > now:
            ready = _seconds(state.computing_since, now)
        inactive = tuple(fleet.node_id(i) for i in nodes if not fleet.active[i])
        running.append(
            Running(
                state.job,
                nodes,
                plan,
                cost,
                state.remaining(now),
                submitted,
                ready_s=ready,
                lost_nodes=lost + inactive,
            )
        )
    return running, waiting


def _checkpoint(state: JobState, fleet: Fleet, known: set[int]) -> Running | None:
    """Where a stopped job's checkpoint lies (the machines it last ran on), or None: it never
    ran, or none of those machines is in the fleet any more."""
    from hulk.cost import Cost, Plan
    from hulk.scheduler import Running

    if not state.replicas or state.done_iterations <= 0:
        return None
    ids = sorted({int(r["node"]) for r in _stage_records(state.replicas)})
    present = [n for n in ids if n in known]
    if not present:
        return None
    nodes = tuple(int(i) for i in fleet.index_of(present))
    plan = Plan.from_records(fleet, state.replicas) if len(present) == len(ids) else None
    return Running(state.job, nodes, plan, Cost.infeasible("stopped"), None, 0.0)


def _stage_records(replicas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [stage for replica in replicas for stage in replica.get("stages", [])]


# A plan is remembered by the job's sizes, not its name: the planner's reasons begin with the
# name of the job they were planned for, so they are stored with this in its place and read
# back with the name of the job asking (a second OPT-175B job is not told the first one does
# not fit).
JOB_IN_REASON = "<job>"


def _reason_named(reason: str | None, name: str, as_name: str) -> str | None:
    """`reason` with its leading `name` (when it begins with it) written as `as_name`."""
    if reason is None or not reason.startswith(name):
        return reason
    return as_name + reason[len(name) :]


@dataclasses.dataclass(frozen=True)
class RememberedPlan:
    """A stage plan as the job store remembers it (JSON): the plan's records, or None when the
    machines cannot hold the job, and its cost with infinite seconds stored as None."""

    plan: list[dict[str, Any]] | None  # `hulk.cost.Plan.to_records`
    iteration_s: float | None
    compute_s: float | None
    comm_s: float | None
    feasible: bool
    reason: str | None

    @classmethod
    def of(cls, plan: Plan | None, cost: Cost, fleet: Fleet, job_name: str) -> RememberedPlan:
        """`plan` and `cost` as planned for the job named `job_name`."""

        def stored(seconds: float) -> float | None:
            return seconds if math.isfinite(seconds) else None

        return cls(
            plan=plan.to_records(fleet) if plan is not None else None,
            iteration_s=stored(cost.iteration_s),
            compute_s=stored(cost.compute_s),
            comm_s=stored(cost.comm_s),
            feasible=cost.feasible,
            reason=_reason_named(cost.reason, job_name, JOB_IN_REASON),
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RememberedPlan:
        cost = record["cost"]
        return cls(
            plan=record["plan"],
            iteration_s=cost["iteration_s"],
            compute_s=cost["compute_s"],
            comm_s=cost["comm_s"],
            feasible=bool(cost["feasible"]),
            reason=cost["reason"],
        )

    def to_record(self) -> dict[str, Any]:
        """The store's JSON record (`hulk.job_store.JobStore.remember_plans`)."""
        return {
            "plan": self.plan,
            "cost": {
                "iteration_s": self.iteration_s,
                "compute_s": self.compute_s,
                "comm_s": self.comm_s,
                "feasible": self.feasible,
                "reason": self.reason,
            },
        }

    def restore(self, fleet: Fleet, job_name: str) -> tuple[Plan | None, Cost]:
        """The plan and cost for the job named `job_name` (its reason names that job)."""
        from hulk.cost import Cost, Plan

        def seconds(value: float | None) -> float:
            return math.inf if value is None else float(value)

        cost = Cost(
            seconds(self.iteration_s),
            seconds(self.compute_s),
            seconds(self.comm_s),
            feasible=self.feasible,
            reason=_reason_named(self.reason, JOB_IN_REASON, job_name),
        )
        return (Plan.from_records(fleet, self.plan) if self.plan else None), cost


class PlanMemory:
    """The stage planner (`hulk.planner.plan_job`) remembering its plans in the job store: a
    plan is a pure function of the fleet, the planner settings, the job and the machines, so
    runs every 15 minutes on an unchanged fleet re-use what the last ones laid out."""

    def __init__(self, fleet: Fleet, settings: Settings, store: JobStore) -> None:
        from hulk.placements import fleet_snapshot

        self.fleet, self.settings, self.store = fleet, settings, store
        self.fleet_key = fleet_snapshot(fleet)
        planner = settings.planner.model_dump(mode="json")
        windows = settings.scheduler.fleet_windows
        # "reasons: <job>": plans remembered before reasons were stored without the job's name
        # are not read (their reasons name whichever job was planned first).
        head = json.dumps([self.fleet_key, planner, windows, "reasons: <job>"], sort_keys=True)
        self.head = hashlib.sha256(head.encode()).hexdigest()
        self.new: dict[str, RememberedPlan] = {}
        self.used: dict[str, RememberedPlan] = {}

    def key(self, job: Any, nodes: np.ndarray) -> str:
        from hulk.jobs import job_sizes

        digest = hashlib.sha256(self.head.encode())
        digest.update(job_sizes(job).encode())
        digest.update(np.asarray(nodes, np.int64).tobytes())
        return digest.hexdigest()

    def remembers(self, job: Any, nodes: np.ndarray) -> bool:
        """Whether the plan is known without planning (this run's or the store's)."""
        key = self.key(job, nodes)
        return key in self.new or bool(self.store.cached_plans([key]))

    def _known(self, key: str) -> RememberedPlan | None:
        if key in self.new:
            return self.new[key]
        record = self.store.cached_plans([key]).get(key)
        return None if record is None else RememberedPlan.from_record(record)

    def __call__(self, job: Any, nodes: np.ndarray) -> tuple[Plan | None, Cost]:
        from hulk.planner import plan_job

        key = self.key(job, nodes)
        known = self._known(key)
        if known is not None:
            self.used[key] = known
            return known.restore(self.fleet, job.name)
        plan, cost = plan_job(
            job,
            self.fleet,
            nodes,
            self.settings.planner,
            fleet_windows=self.settings.scheduler.fleet_windows,
        )
        self.new[key] = RememberedPlan.of(plan, cost, self.fleet, job.name)
        return plan, cost

    def save(self, now: dt.datetime) -> None:
        plans = {**self.used, **self.new}
        self.store.remember_plans({key: plan.to_record() for key, plan in plans.items()}, now)


def _strategy_group(
    strategy: str,
    found: Schedule,
    fleet: Fleet,
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    settings: Settings,
    seed: int,
    champion: Champion | None,
    baselines: BaselineMemory,
) -> tuple[dict[str, tuple[Plan, Cost]] | None, str | None]:
    """The strategy's plans for the jobs the schedule starts now together (None: fewer than
    two, or the strategy could not place them all on the machines free now), and why the GNN's
    were refused for the teacher's when they were (its quick check's reason; None otherwise).
    Only the plans and estimates are used: the records' baselines are the whole fleet's
    (`baselines`). The champion's model is built only here, when the GNN has a group to lay
    out."""
    from hulk.assign import _teacher_on
    from hulk.placements import PLACED
    from hulk.scheduler import RESTART, START

    group = [d for d in found.decisions if d.action in (START, RESTART)]
    if len(group) < 2:
        return None, None
    busy = {n for d in found.decisions if d.action in ("keep", "move") for n in d.nodes}
    free = [int(i) for i in fleet.active_indices() if i not in busy]
    jobs = [d.job for d in group]
    if strategy == "gnn" and champion is not None:
        from hulk.gnn import model_placements

        model = champion.model()
        busy_ids = [fleet.node_id(i) for i in sorted(busy)]
        inv = inventory.copy()
        inv.loc[inv["node_id"].isin(busy_ids), "status"] = "drained"
        free_fleet = drain(fleet, busy_ids)
        placed, fallback = model_placements(
            model, jobs, free_fleet, inv, links, settings, seed, baselines=baselines
        )
    else:
        placed, fallback = _teacher_on(jobs, fleet, free, settings, seed), None
    if any(p.status != PLACED or p.plan is None or p.estimate is None for p in placed):
        return None, fallback
    plans = {p.job.name: (p.plan, p.estimate) for p in placed if p.plan and p.estimate}
    return plans, fallback


def _no_later(alt: Decision, own: Decision) -> bool:
    """Whether a job finishes no later under `alt` than under `own` (without a length: runs no
    slower once computing)."""
    if alt.finish_s is not None and own.finish_s is not None:
        return alt.finish_s <= own.finish_s + 1e-9 * max(1.0, abs(own.finish_s))
    if alt.cost is None or own.cost is None:
        return alt.cost is None and own.cost is None
    return alt.overhead_s <= own.overhead_s and alt.cost.iteration_s <= own.cost.iteration_s


def with_strategy_plans(
    fleet: Fleet,
    found: Schedule,
    running: Sequence[Running],
    waiting: Sequence[Waiting],
    settings: Settings,
    plan_fn: PlanMemory,
    plans: Mapping[str, tuple[Plan, Cost]],
    deadlines: dict[str, float],
) -> tuple[Schedule, dict[str, tuple[Plan, Cost]] | None]:
    """`found` with the strategy's `plans` for the jobs it starts now together, job by job:
    a job keeps the strategy's plan only when it finishes no later with it than with the
    scheduler's own (the others are scheduled again on what the kept plans leave), and the
    result is kept when the schedule is no worse (`hulk.scheduler.with_start_plans`: the
    run's moves stand). So no job starts on machines slower than the scheduler would give it
    when faster ones stay free: the next run, with nothing changed, finds no move to make.
    Returns the schedule and the plans kept (None: the scheduler's own schedule)."""
    from hulk.scheduler import with_start_plans

    own = {d.job.name: d for d in found.decisions}
    kept = dict(plans)
    while kept:
        # The strategy laid the group out on the machines free after this run's moves: the
        # alternative keeps those moves (a stopped job's machines are the group's now).
        alt = with_start_plans(
            fleet, found, running, waiting, settings.scheduler, plan_fn, kept, deadlines
        )
        if alt is None:
            return found, None
        decided = {d.job.name: d for d in alt.decisions}
        worse = [name for name in kept if not _no_later(decided[name], own[name])]
        if not worse:
            return (alt, kept) if alt.score() <= found.score() else (found, None)
        for name in worse:
            del kept[name]
    return found, None


def _placement(decision: Decision, fleet: Fleet, baselines: BaselineMemory) -> JobPlacement:
    """The placements-file entry of a decision. `baselines` remembers Systems A, B, C per job
    size: they depend on the job's sizes and the whole fleet only (`hulk.baseline_cache`)."""
    from hulk.assign import placed, waiting
    from hulk.placements import INFEASIBLE
    from hulk.placements import QUEUED as QUEUED_STATUS
    from hulk.scheduler import NEVER, WAIT

    systems = baselines(decision.job)
    if decision.action == NEVER:
        return waiting(decision.job, fleet, INFEASIBLE, decision.reason, baselines=systems)
    if decision.action == WAIT or decision.plan is None or decision.cost is None:
        return waiting(decision.job, fleet, QUEUED_STATUS, decision.reason, baselines=systems)
    return placed(
        decision.job, fleet, decision.plan, decision.cost, reason=decision.reason, baselines=systems
    )


def _moment(now: dt.datetime, seconds: float | None) -> dt.datetime | None:
    """`now` + `seconds` in whole seconds, as the store and the placements file keep times
    (None: unknown, or past what a calendar holds)."""
    moment = None if seconds is None else later(now, seconds)
    return None if moment is None else moment.replace(microsecond=0)


def _at(now: dt.datetime, seconds: float | None) -> str | None:
    moment = _moment(now, seconds)
    return None if moment is None else format_time(moment)


@dataclasses.dataclass(frozen=True)
class JobSchedule:
    """The scheduler's keys of one job's placements entry (docs/contracts.md)."""

    action: str
    start_at: str | None  # UTC ISO; None: unknown (a job without a length)
    finish_at: str | None
    overhead_s: float  # checkpoint transfer and restart before it computes
    waits_for: list[str]  # the jobs whose machines it waits for
    planned_nodes: list[int]  # a waiting job: the machines it will get
    iterations: int | None
    done_iterations: float
    deadline_met: bool | None  # None: no deadline, or no finish and the deadline to come

    def times(self) -> ScheduledTimes:
        return ScheduledTimes(self.action, self.start_at, self.finish_at)

    def to_dict(self) -> dict[str, Any]:
        """The keys as the placements file has them, in its order."""
        return dataclasses.asdict(self)


def job_schedule(
    decision: Decision, fleet: Fleet, now: dt.datetime, state: JobState | None
) -> JobSchedule:
    """A decision's start, finish and progress as its placements entry states them: a job
    that runs from this run on (kept, started, restarted or moved) started when it first
    started, as the job store keeps it."""
    from hulk.scheduler import KEEP, MOVE, RESTART, START, WAIT

    runs = decision.action in (KEEP, START, RESTART, MOVE)
    started = state.started_at if state is not None and runs else None
    return JobSchedule(
        action=decision.action,
        start_at=format_time(started) if started else _at(now, decision.start_s),
        finish_at=_at(now, decision.finish_s),
        overhead_s=decision.overhead_s,
        waits_for=list(decision.waits_for),
        planned_nodes=(
            [fleet.node_id(i) for i in decision.nodes] if decision.action == WAIT else []
        ),
        iterations=decision.job.iterations,
        done_iterations=round(state.progress(now), 1) if state is not None else 0.0,
        deadline_met=decision.deadline_met,
    )


@dataclasses.dataclass(frozen=True)
class QueueBlock:
    """The placements file's top-level ``queue`` block: the schedule's figures and what
    this run changed (docs/contracts.md)."""

    now: str  # UTC ISO: the run's clock
    order: str  # the waiting-job order the schedule kept (`hulk.scheduler.Schedule.order`)
    mean_completion_s: float | None
    makespan_s: float | None
    ends_at: str | None
    missed_deadlines: int
    actions: dict[str, int]  # per action, how many jobs (sorted by action)
    moved: list[str]
    finished: list[str]
    submitted: list[str]
    withdrawn: list[str]
    resubmitted: list[str]
    drained: list[int]  # node ids drained for not reporting
    strategy_plans: bool  # the strategy's plans were kept for the jobs starting together
    scheduling_s: float
    plans_made: int
    plans_remembered: int

    def to_dict(self) -> dict[str, Any]:
        """The block as the placements file has it, in its order."""
        return dataclasses.asdict(self)


def queue_block(
    found: Schedule,
    now: dt.datetime,
    finished: Sequence[str],
    drained: Sequence[int],
    changes: Mapping[str, list[str]],
    seconds: float,
    strategy_plans: bool,
    plans: tuple[int, int] = (0, 0),
) -> QueueBlock:
    """The placements file's top-level ``queue`` block."""
    counts: dict[str, int] = {}
    for d in found.decisions:
        counts[d.action] = counts.get(d.action, 0) + 1
    return QueueBlock(
        now=format_time(now),
        order=found.order,
        mean_completion_s=found.mean_completion_s,
        makespan_s=found.makespan_s,
        ends_at=_at(now, found.makespan_s),
        missed_deadlines=found.missed_deadlines,
        actions=dict(sorted(counts.items())),
        moved=list(found.moves),
        finished=list(finished),
        submitted=list(changes.get("submitted", [])),
        withdrawn=list(changes.get("withdrawn", [])),
        resubmitted=list(changes.get("resubmitted", [])),
        drained=list(drained),
        strategy_plans=strategy_plans,
        scheduling_s=round(seconds, 3),
        plans_made=plans[0],
        plans_remembered=plans[1],
    )


def record(store: JobStore, found: Schedule, fleet: Fleet, now: dt.datetime) -> None:
    """The schedule's decisions as the store's new state, in one transaction: every waiting
    job gets this run's estimated start and finish (the placements file's ``start_at`` and
    ``finish_at``), None when the run does not know them (a job that never fits, or waits on
    jobs without a length or for drained machines), never an earlier run's."""
    from hulk.scheduler import KEEP, MOVE, NEVER, RESTART, START, WAIT

    states = {s.job.name: s for s in store.jobs([SUBMITTED, QUEUED, RUNNING])}
    decided = {d.job.name for d in found.decisions}
    pool = {int(n) for n in fleet.node_ids[fleet.active]}  # the machines this run may use
    with store.transaction():
        # The scheduler decides for every job; one it left out keeps no earlier run's estimate.
        for name, left_out in states.items():
            if name not in decided and (left_out.scheduled_start or left_out.scheduled_finish):
                unknown = dataclasses.replace(left_out, scheduled_start=None, scheduled_finish=None)
                store.put(unknown, None)
        for d in found.decisions:
            have = states.get(d.job.name)
            if have is None:
                continue
            if d.action == KEEP:
                if d.cost is not None and have.iteration_s is not None:
                    changed = abs(d.cost.iteration_s - have.iteration_s) > 1e-9 * have.iteration_s
                    if changed and d.cost.feasible:
                        new = dataclasses.replace(
                            have,
                            updated_at=now,
                            done_iterations=have.progress(now),
                            computing_since=max(now, have.computing_since or now),
                            iteration_s=d.cost.iteration_s,
                        )
                        store.put(new, "re-estimated", f"{d.cost.iteration_s:.4g} s/iteration")
                continue
            if d.action in (START, RESTART, MOVE) and d.plan is not None and d.cost is not None:
                new = dataclasses.replace(
                    have,
                    state=RUNNING,
                    updated_at=now,
                    reason=d.reason,
                    nodes=tuple(fleet.node_id(i) for i in d.nodes),
                    layout="pipeline",
                    replicas=d.plan.to_records(fleet),
                    iteration_s=d.cost.iteration_s,
                    started_at=have.started_at or now,
                    computing_since=now + dt.timedelta(seconds=d.overhead_s),
                    done_iterations=have.progress(now),
                    moves=have.moves + (d.action != START),
                )
                nodes = [fleet.node_id(i) for i in d.nodes]
                detail = f"on {nodes}"
                if d.action == RESTART:
                    gone = sorted(set(have.nodes) - pool) if have.state == RUNNING else []
                    why = (
                        f"machine(s) {gone} of its run left the pool (failed, drained or silent)"
                        if gone
                        else "stopped earlier"
                    )
                    detail += f": {why}; resumes from its checkpoint at iteration "
                    detail += f"{new.done_iterations:,.0f}"
                store.put(
                    new, {START: "started", RESTART: "restarted", MOVE: "moved"}[d.action], detail
                )
                continue
            reason = d.reason if d.action != NEVER else f"infeasible: {d.reason}"
            waits = d.action == WAIT
            start = _moment(now, d.start_s) if waits else None
            finish = _moment(now, d.finish_s) if waits else None
            # A job that ran keeps the record of where it ran: its checkpoint is there.
            new = dataclasses.replace(
                have,
                state=QUEUED,
                updated_at=now,
                reason=reason,
                nodes=(),
                layout=None,
                computing_since=None,
                done_iterations=have.progress(now),
                iteration_s=None,
                scheduled_start=start,
                scheduled_finish=finish,
            )
            if have.state != QUEUED:  # a new wait is an event; a changed reason is not
                event = "queued"
                if have.state == RUNNING:
                    event = "preempted" if d.job.name in found.moves else "stopped"
                store.put(new, event, reason if d.action in (WAIT, NEVER) else None)
            elif have.reason != reason:
                store.put(new, None)
            elif (have.scheduled_start, have.scheduled_finish) != (start, finish):
                # New estimates alone: the job's state has not changed since `updated_at`.
                store.put(
                    dataclasses.replace(have, scheduled_start=start, scheduled_finish=finish), None
                )


def schedule_run(
    data_dir: Path,
    settings: Settings,
    jobs_file: Path,
    strategy: str,
    out_dir: Path,
    seed: int,
    started: dt.datetime,
    now: dt.datetime | None,
) -> StepResult[AssignSummary]:
    """The assign step for the concurrent strategies (module docstring)."""
    from hulk import placements as pl
    from hulk.assign import makespan
    from hulk.baseline_cache import BaselineMemory
    from hulk.jobs import load_jobs
    from hulk.scheduler import schedule
    from hulk.stages.assign import AssignSummary, load_champion, placement_rows

    jobs = load_jobs(jobs_file, allow_empty=True)
    fleet, inventory, links = load_fleet(data_dir, settings)
    check_store_present(data_dir, [out_dir, Path(data_dir) / "placements"])
    drained, findings = not_reporting(data_dir, fleet)
    lonely, unmeasured_findings = unmeasured(data_dir, fleet, links)
    drained, findings = sorted({*drained, *lonely}), findings + unmeasured_findings
    fleet = drain(fleet, drained)
    if drained:
        inventory = inventory.copy()
        inventory.loc[inventory["node_id"].isin(drained), "status"] = "drained"
    champion = load_champion(settings) if strategy == "gnn" else None
    # One transaction for the whole run: a run that fails (a bad --out, a job the store cannot
    # take) leaves the store and the placements as they were. The placements are written as
    # temporaries inside it and renamed into place once the store has committed: a run killed
    # between the two leaves the store ahead of latest.json (the next run publishes it), never
    # latest.json announcing starts the store does not hold.
    with ExitStack() as publication, JobStore(jobs_db(data_dir)) as store, store.transaction():
        marked = store.finished_since_last_run()  # `hulk jobs finish` between two runs
        changes = store.sync_file(jobs, started, jobs_file)
        finished = [*marked, *store.finish_done(started)]
        states = store.jobs([SUBMITTED, QUEUED, RUNNING])
        running, waiting = scheduler_inputs(states, fleet, started)
        deadlines = {
            s.job.name: _seconds(s.job.deadline, started) for s in states if s.job.deadline
        }

        plan_fn = PlanMemory(fleet, settings, store)
        clock = time.perf_counter()
        found = schedule(fleet, running, waiting, settings.scheduler, plan_fn, deadlines)
        seconds = time.perf_counter() - clock
        known = BaselineMemory(data_dir, fleet, plan_fn.fleet_key)
        fixed, fallback = _strategy_group(
            strategy, found, fleet, inventory, links, settings, seed, champion, known
        )
        if fixed:
            found, fixed = with_strategy_plans(
                fleet, found, running, waiting, settings, plan_fn, fixed, deadlines
            )
        by_name = {s.job.name: s for s in states}
        placed = [_placement(d, fleet, known) for d in found.decisions]
        scheduled = {
            d.job.name: job_schedule(d, fleet, started, by_name.get(d.job.name))
            for d in found.decisions
        }
        queue = queue_block(
            found,
            started,
            finished,
            drained,
            changes,
            seconds,
            bool(fixed),
            (len(plan_fn.new), len(set(plan_fn.used) - set(plan_fn.new))),
        )
        info = pl.fleet_info(
            fleet, data_dir / schemas.LINKS_FILE, data_dir / schemas.INVENTORY_FILE
        )
        doc = pl.build_document(
            placed,
            fleet,
            info,
            strategy=strategy,
            schedule=pl.CONCURRENT,
            makespan_s=makespan(placed, strategy),
            seed=seed,
            started=started,
            generated_at=now,
            # The quick check refused the model's plans for this run's group: the teacher's
            # were weighed instead, and the file says why.
            model=None if champion is None else {**champion.record, "fallback": fallback},
            extra={"queue": queue.to_dict()},
            job_extra={name: entry.to_dict() for name, entry in scheduled.items()},
        )
        path = publication.enter_context(pl.staged_placements(doc, out_dir))
        record(store, found, fleet, started)
        store.record_run(started)
        plan_fn.save(started)
        known.save()
    rows = [
        dataclasses.replace(row, scheduled=scheduled[row.job].times())
        for row in placement_rows(placed, fleet)
    ]
    if fallback is not None:
        findings.append(
            Finding(
                "warning",
                "assign.gnn_fallback",
                str(path),
                f"the GNN's plans for the jobs starting together were refused, the teacher's "
                f"weighed instead: {fallback}",
            )
        )
    return StepResult(
        outputs={"placements": path, "latest": out_dir / pl.LATEST},
        summary=AssignSummary(
            strategy=strategy,
            run_id=path.stem,
            jobs=rows,
            makespan_s=doc["makespan_s"],
            queue=queue,
        ),
        findings=findings,
    )
