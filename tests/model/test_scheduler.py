"""`hulk.scheduler`: running jobs stay put, waiting jobs start by earliest finish, moves pay."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hulk.cost import Fleet, iteration_time
from hulk.jobs import PRESET_JOBS, Job
from hulk.planner import plan_job
from hulk.scheduler import (
    KEEP,
    MOVE,
    NEVER,
    RESTART,
    START,
    WAIT,
    Running,
    Waiting,
    _Planner,
    move_cost,
    schedule,
    with_start_plans,
)
from hulk.settings import PlannerSettings, SchedulerSettings
from tests.fleets import fleet_of

PAIRS_OF_3 = [(0, 1), (0, 2), (1, 2)]
GPT2 = PRESET_JOBS["GPT-2-1.5B"]
BERT = PRESET_JOBS["BERT-large"]
T5 = PRESET_JOBS["T5-11B"]
SETTINGS = SchedulerSettings()


def two_sites(n: int = 8, active: list[bool] | None = None) -> Fleet:
    """n machines: the first half in one site (1 ms, 10 GB/s), the rest in another; 40 ms and
    0.1 GB/s between the sites."""
    half = n // 2
    links = {
        (i, j): ((1e-3, 1.25e9) if (i < half) == (j < half) else (40e-3, 1.25e7))
        for i in range(n)
        for j in range(i + 1, n)
    }
    return fleet_of([1e14] * n, [320.0] * n, links, active)


def planner(fleet: Fleet):
    settings = PlannerSettings()
    return lambda job, nodes: plan_job(job, fleet, nodes, settings)


def running_on(fleet: Fleet, job: Job, nodes: list[int], remaining: float | None) -> Running:
    plan, cost = plan_job(job, fleet, nodes, PlannerSettings())
    assert plan is not None
    return Running(job, tuple(plan.nodes), plan, cost, remaining, submitted_s=-600.0)


def named(found, name: str):
    return next(d for d in found.decisions if d.job.name == name)


def test_a_new_job_never_moves_a_running_one() -> None:
    fleet = two_sites()
    busy = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=50_000)
    new = Waiting(BERT, 1_000, submitted_s=0.0)
    found = schedule(fleet, [busy], [new], SETTINGS, planner(fleet))
    kept = named(found, GPT2.name)
    assert kept.action == KEEP
    assert kept.nodes == busy.nodes and kept.plan == busy.plan
    assert named(found, BERT.name).action == START
    assert not set(named(found, BERT.name).nodes) & set(busy.nodes)
    assert found.moves == []


def test_a_lost_machine_restarts_only_its_job() -> None:
    fleet = two_sites()
    first = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=10_000)
    second = running_on(fleet, BERT, [4, 5, 6, 7], remaining=10_000)
    lost = first.nodes[0]
    after = two_sites(active=[i != lost for i in range(8)])
    found = schedule(after, [first, second], [], SETTINGS, planner(after))
    assert named(found, BERT.name).action == KEEP
    assert named(found, BERT.name).nodes == second.nodes
    restarted = named(found, GPT2.name)
    assert restarted.action in (RESTART, WAIT)
    assert lost not in restarted.nodes
    # The restart pays its overhead before computing again.
    if restarted.action == RESTART:
        assert restarted.overhead_s >= SETTINGS.restart_overhead_s


def test_estimates_follow_the_cost_model_and_the_queue() -> None:
    fleet = two_sites(4)
    jobs = [Waiting(T5, 2_000, 0.0), Waiting(GPT2, 3_000, 0.0), Waiting(BERT, 5_000, 0.0)]
    found = schedule(fleet, [], jobs, SETTINGS, planner(fleet))
    finishes = {}
    for d in found.decisions:
        assert d.plan is not None and d.start_s is not None and d.finish_s is not None
        seconds = iteration_time(d.job, fleet, d.plan).iteration_s
        remaining = {T5.name: 2_000, GPT2.name: 3_000, BERT.name: 5_000}[d.job.name]
        assert d.finish_s == pytest.approx(d.start_s + d.overhead_s + remaining * seconds)
        finishes[d.job.name] = d.finish_s
    for d in found.decisions:
        if d.action == WAIT:
            # It starts when the last job it waits for finishes.
            assert d.start_s == pytest.approx(max(finishes[j] for j in d.waits_for))
        else:
            assert d.start_s == 0.0
    # No machine serves two jobs at once.
    spans = [(set(d.nodes), d.start_s, d.finish_s) for d in found.decisions]
    for i, (nodes_a, start_a, end_a) in enumerate(spans):
        for nodes_b, start_b, end_b in spans[i + 1 :]:
            if nodes_a & nodes_b:
                assert end_a <= start_b + 1e-6 or end_b <= start_a + 1e-6
    ends = [d.finish_s for d in found.decisions]
    assert found.makespan_s == pytest.approx(max(ends))
    assert found.mean_completion_s == pytest.approx(float(np.mean(ends)))


def test_a_job_waits_for_a_better_group_when_it_finishes_sooner() -> None:
    # Two machines are free now; all four are free in 145 s, and T5 runs far faster on four.
    fleet = two_sites(4)
    busy = running_on(fleet, BERT, [0, 1, 2, 3], remaining=100)
    assert len(busy.nodes) < 4  # the planner leaves machines free
    new = Waiting(T5, 5_000, 0.0)
    found = schedule(fleet, [busy], [new], SETTINGS, planner(fleet))
    decision = named(found, T5.name)
    free = [i for i in range(4) if i not in busy.nodes]
    _, now_cost = plan_job(T5, fleet, free, PlannerSettings())
    assert now_cost.feasible  # starting now was possible
    assert decision.action == WAIT and decision.waits_for == (BERT.name,)
    assert decision.start_s == pytest.approx(named(found, BERT.name).finish_s)
    assert decision.finish_s < 5_000 * now_cost.iteration_s
    # With a long-running job on those machines, it starts now on what is free.
    long = Running(busy.job, busy.nodes, busy.plan, busy.cost, 1e9, -600.0)
    now = named(schedule(fleet, [long], [new], SETTINGS, planner(fleet)), T5.name)
    assert now.action == START and set(now.nodes) <= set(free)


def test_a_job_no_fleet_can_hold_is_never_and_the_others_run() -> None:
    fleet = two_sites(4)
    huge = PRESET_JOBS["OPT-175B"]  # 2.8 TB of state; the fleet has 1.28 TB
    found = schedule(
        fleet, [], [Waiting(huge, 10, 0.0), Waiting(BERT, 10, 0.0)], SETTINGS, planner(fleet)
    )
    assert named(found, huge.name).action == NEVER
    assert "GB" in (named(found, huge.name).reason or "")
    assert named(found, BERT.name).action == START


def test_a_job_submitted_for_later_starts_no_sooner_and_moves_nothing() -> None:
    fleet = two_sites()
    busy = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=5_000)
    later = Waiting(BERT, 1_000, submitted_s=86_400.0)  # its submitted_at is a day ahead
    found = schedule(fleet, [busy], [later], SETTINGS, planner(fleet))
    held = named(found, BERT.name)
    assert held.action == WAIT and held.start_s == 86_400.0
    assert "submitted for later" in (held.reason or "")
    assert held.finish_s is not None and held.finish_s > held.start_s
    # Completion counts from submission: never negative, so no move is taken for a "gain".
    assert found.mean_completion_s is not None and found.mean_completion_s > 0
    assert named(found, GPT2.name).action == KEEP and found.moves == []


def test_a_job_the_machines_free_now_cannot_hold_waits_and_says_so() -> None:
    from dataclasses import replace

    fleet = two_sites()  # 8 machines of 320 GB
    busy = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=5_000)
    wide = replace(BERT, name="wide", min_memory_gb=2_000)  # more than the free machines hold
    found = schedule(
        fleet,
        [busy],
        [Waiting(wide, 10, 0.0), Waiting(replace(wide, name="endless"), None, 0.0)],
        SchedulerSettings(max_moves_per_run=0),
        planner(fleet),
    )
    for name in ("wide", "endless"):
        waiting = named(found, name)
        assert waiting.action == WAIT and GPT2.name in waiting.waits_for
        assert (waiting.reason or "").endswith(": the machines free now cannot hold it"), name


def test_a_waiting_reason_says_why_nothing_starts_now() -> None:
    """Free machines that could hold a job are no option when (a) a job without a length would
    hold them into a later start, or (b) the run's planning budget is spent: its reason says
    which, not that the free machines cannot hold it."""
    from dataclasses import replace

    fleet = two_sites()  # 8 machines of 320 GB; GPT-2 holds the first site
    busy = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=5_000)
    wide = replace(BERT, name="wide", min_memory_gb=2_000)  # all 8 once GPT-2 is done
    found = schedule(
        fleet,
        [busy],
        [Waiting(wide, 10, 0.0), Waiting(replace(BERT, name="endless"), None, 0.0)],
        SchedulerSettings(max_moves_per_run=0),
        planner(fleet),
    )
    endless = named(found, "endless")
    assert endless.action == WAIT
    assert "a job without a length takes only machines no later start needs" in (
        endless.reason or ""
    )
    budget = SchedulerSettings(max_moves_per_run=0, max_plans_per_run=1, share_slack=0.0)
    found = schedule(
        fleet,
        [busy],
        [Waiting(replace(T5, name=f"t5-{k}"), 10, 0.0) for k in range(3)],
        budget,
        planner(fleet),
    )
    reasons = [d.reason or "" for d in found.decisions if d.action == WAIT]
    assert any("its planning budget was spent" in r for r in reasons), reasons
    assert not any("cannot hold it" in r for r in reasons), reasons
    # (c) the free machines hold it, but the job before it in line needs them before it would
    # finish.
    long = replace(BERT, name="long")
    found = schedule(
        fleet,
        [busy],
        [Waiting(wide, 10, 0.0), Waiting(long, 10_000_000, 0.0)],
        SchedulerSettings(max_moves_per_run=0),
        planner(fleet),
    )
    waiting = named(found, "long")
    assert waiting.action == WAIT and "wide" in waiting.waits_for
    assert (waiting.reason or "").endswith(
        ": the machines free now are needed by jobs starting before it would finish, or no plan "
        "on them holds it"
    ), waiting.reason


def test_a_job_waits_for_drained_machines_it_needs_and_never_only_beyond_the_fleet() -> None:
    drained = two_sites(4, active=[False] * 4)
    huge = PRESET_JOBS["OPT-175B"]  # more memory than the whole fleet, drained or not
    found = schedule(
        drained, [], [Waiting(BERT, 10, 0.0), Waiting(huge, 10, 0.0)], SETTINGS, planner(drained)
    )
    waiting = named(found, BERT.name)
    assert waiting.action == WAIT and waiting.nodes == () and waiting.start_s is None
    assert "drained or failed machines to return" in (waiting.reason or "")
    assert not (waiting.reason or "").startswith(BERT.name)
    assert named(found, huge.name).action == NEVER


def test_a_move_happens_only_when_it_pays_for_itself() -> None:
    fleet = two_sites()
    slow = running_on(fleet, GPT2, [0], remaining=200_000)  # one machine, seven idle
    found = schedule(fleet, [slow], [], SETTINGS, planner(fleet))
    assert found.moves == [GPT2.name]
    moved = named(found, GPT2.name)
    assert moved.action == MOVE and len(moved.nodes) > 1
    assert moved.finish_s < 200_000 * slow.cost.iteration_s
    # The same move when a restart costs more than it saves: the job stays.
    costly = SchedulerSettings(restart_overhead_s=1e9)
    stay = schedule(fleet, [slow], [], costly, planner(fleet))
    assert stay.moves == [] and named(stay, GPT2.name).action == KEEP
    # And never more moves than allowed.
    none = schedule(fleet, [slow], [], SchedulerSettings(max_moves_per_run=0), planner(fleet))
    assert none.moves == []


def test_jobs_without_a_length_start_now_and_have_no_finish() -> None:
    fleet = two_sites()
    found = schedule(fleet, [], [Waiting(BERT, None, 0.0)], SETTINGS, planner(fleet))
    decision = named(found, BERT.name)
    assert decision.action == START and decision.finish_s is None
    assert found.mean_completion_s is None


def test_move_cost_counts_the_checkpoint_over_the_links() -> None:
    fleet = two_sites()
    here = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=1)
    same = move_cost(GPT2, fleet, here.nodes, here.plan, here.plan, here.nodes, SETTINGS)
    assert same == SETTINGS.restart_overhead_s
    there, _ = plan_job(GPT2, fleet, [4, 5, 6, 7], PlannerSettings())
    assert there is not None
    far = move_cost(GPT2, fleet, here.nodes, here.plan, there, there.nodes, SETTINGS)
    # 16 bytes × 1.5e9 parameters over 0.1 GB/s links, stages fetching in parallel.
    replica = there.replicas[0]
    slowest_share = max(s.layer_end - s.layer_start for s in replica) / GPT2.layers
    expected = SETTINGS.restart_overhead_s + slowest_share * 16 * GPT2.params / 1.25e7
    assert far == pytest.approx(expected, rel=0.05)
    # With every old machine gone, only the restart counts.
    assert move_cost(GPT2, fleet, [], None, there, there.nodes, SETTINGS) == (
        SETTINGS.restart_overhead_s
    )
    assert math.isfinite(far)


def test_the_schedule_is_deterministic() -> None:
    fleet = two_sites()
    jobs = [Waiting(T5, 2_000, -5.0), Waiting(GPT2, 3_000, -3.0), Waiting(BERT, 5_000, 0.0)]
    first = schedule(fleet, [], jobs, SETTINGS, planner(fleet))
    second = schedule(fleet, [], jobs, SETTINGS, planner(fleet))
    assert [(d.job.name, d.action, d.nodes, d.start_s) for d in first.decisions] == [
        (d.job.name, d.action, d.nodes, d.start_s) for d in second.decisions
    ]


def test_a_planning_budget_bounds_the_work_and_keeps_every_job_scheduled() -> None:
    fleet = two_sites()
    jobs = [Waiting(j, 1_000, 0.0) for j in PRESET_JOBS.values()]
    calls: list[int] = []

    def counted(job: Job, nodes: np.ndarray):
        calls.append(len(nodes))
        return plan_job(job, fleet, nodes, PlannerSettings())

    unbounded = schedule(fleet, [], jobs, SETTINGS, counted)
    many = len(calls)
    calls.clear()
    tight = schedule(fleet, [], jobs, SchedulerSettings(max_plans_per_run=0), counted)
    # Only each job's plan on the whole fleet is made: one per distinct job (and order).
    assert len(calls) <= len({w.job.name for w in jobs}) < many
    for d in tight.decisions:
        assert d.action == NEVER or (d.action in (START, WAIT) and d.start_s is not None)
    assert tight.mean_completion_s >= unbounded.mean_completion_s - 1e-6


def test_a_job_left_without_a_start_by_the_budget_says_so() -> None:
    """More jobs than a run's planning budget covers on a small fleet: those left with no start
    say why, rather than naming no job as holding their machines."""
    from dataclasses import replace

    links = {(i, j): (1e-3, 1.25e9) for i in range(3) for j in range(i + 1, 3)}
    fleet = fleet_of([1e14] * 3, [640.0] * 3, links)
    jobs = [
        Waiting(replace(job, name=f"{job.name}-{k}"), 1_000 + 100 * k, 3_600.0 * (k % 3))
        for k in range(6)
        for job in PRESET_JOBS.values()
    ]
    found = schedule(fleet, [], jobs, SchedulerSettings(max_plans_per_run=2), planner(fleet))
    unplanned = [d for d in found.decisions if d.action == WAIT and d.start_s is None]
    assert unplanned
    for decision in unplanned:
        assert decision.waits_for == ()
        assert "planning budget" in (decision.reason or ""), decision.reason


def test_a_short_job_fills_the_gap_before_a_reservation() -> None:
    links = {(i, j): (1e-3, 1.25e9) for i in range(8) for j in range(i + 1, 8)}
    fleet = fleet_of([1e14] * 8, [320.0] * 8, links)
    busy = running_on(fleet, GPT2, [0, 1], remaining=500)
    big = Job("big", 100.0, 96, 12288, 2048, 1024, 1, priority=1)  # its best plan: all eight
    short = Waiting(BERT, 50, 0.0)
    found = schedule(fleet, [busy], [Waiting(big, 2_000, 0.0), short], SETTINGS, planner(fleet))
    waits, fills = named(found, "big"), named(found, BERT.name)
    assert waits.action == WAIT and waits.start_s == pytest.approx(named(found, GPT2.name).finish_s)
    # The short job runs now on machines reserved for the big one and is done before it starts.
    assert fills.action == START and fills.start_s == 0.0
    assert set(fills.nodes) & set(waits.nodes)
    assert fills.finish_s <= waits.start_s


def fast_and_slow() -> Fleet:
    """Machine 0 computes 100× faster than machine 1; fast links between them."""
    return fleet_of([1e15, 1e13], [320.0, 320.0], {(0, 1): (1e-3, 1.25e9)})


def test_a_long_job_stops_for_shorter_work_when_that_pays() -> None:
    fleet = fast_and_slow()
    long = running_on(fleet, BERT, [0], remaining=100_000)
    assert long.nodes == (0,)
    short = Job(**{**BERT.__dict__, "name": "BERT-short"})
    found = schedule(fleet, [long], [Waiting(short, 1_000, 0.0)], SETTINGS, planner(fleet))
    # The short job runs now on the fast machine; the long one waits and resumes there after it,
    # paying only the restart (its checkpoint is on that machine).
    assert found.moves == [BERT.name]
    first, stopped = named(found, "BERT-short"), named(found, BERT.name)
    assert first.action == START and first.nodes == (0,) and first.start_s == 0.0
    assert stopped.action == WAIT and stopped.waits_for == ("BERT-short",)
    assert stopped.start_s == pytest.approx(first.finish_s)
    assert stopped.overhead_s == SETTINGS.restart_overhead_s
    assert "stopped so that shorter work runs first" in (stopped.reason or "")
    # Without stops, or when a stop cannot pay for itself, the long job keeps its machine.
    for settings in (
        SchedulerSettings(preempt_candidates=0),
        SchedulerSettings(restart_overhead_s=1e12),
    ):
        kept = schedule(fleet, [long], [Waiting(short, 1_000, 0.0)], settings, planner(fleet))
        assert kept.moves == [] and named(kept, BERT.name).action == KEEP


def test_a_running_job_stops_only_for_work_of_its_priority_or_higher() -> None:
    fleet = fast_and_slow()
    urgent = Job(**{**BERT.__dict__, "name": "BERT-urgent", "priority": 1})
    long = running_on(fleet, urgent, [0], remaining=100_000)
    for priority, stops in ((0, False), (1, True), (2, True)):
        short = Job(**{**BERT.__dict__, "name": "BERT-short", "priority": priority})
        found = schedule(fleet, [long], [Waiting(short, 1_000, 0.0)], SETTINGS, planner(fleet))
        assert (found.moves == ["BERT-urgent"]) is stops, priority
        if not stops:  # the shorter job runs on the slow machine instead
            assert named(found, "BERT-urgent").action == KEEP
            assert named(found, "BERT-short").nodes == (1,)


def test_a_stopped_job_resumes_from_its_checkpoint() -> None:
    fleet = fast_and_slow()
    was = running_on(fleet, BERT, [0], remaining=1)
    line = [Waiting(BERT, 1_000, -60.0, checkpoint=was)]
    found = schedule(fleet, [], line, SETTINGS, planner(fleet))
    back = named(found, BERT.name)
    # It is not first in line like a job displaced this run, but it pays its restart.
    assert back.action == RESTART and back.nodes == (0,)
    assert back.overhead_s == SETTINGS.restart_overhead_s
    fresh = named(
        schedule(fleet, [], [Waiting(BERT, 1_000, -60.0)], SETTINGS, planner(fleet)), BERT.name
    )
    assert fresh.action == START and fresh.overhead_s == 0.0
    assert back.finish_s == pytest.approx(fresh.finish_s + SETTINGS.restart_overhead_s)


def test_a_stopped_job_resumes_only_where_its_checkpoint_can_reach() -> None:
    # Machines 0–3 and 4–7 (twice as fast): two groups with no path between them. BERT-large's
    # checkpoint lies on machine 0, in the group a job without a length holds; the other group
    # is free but cannot fetch the checkpoint. The job waits, saying why, rather than "restart"
    # there with an endless transfer (which also dropped it from the mean a move is weighed by).
    links = {
        (i, j): (1e-3, 1.25e9) for i in range(8) for j in range(i + 1, 8) if (i < 4) == (j < 4)
    }
    fleet = fleet_of([1e14] * 4 + [2e14] * 4, [320.0] * 8, links)
    endless = running_on(fleet, GPT2, [0, 1, 2, 3], remaining=None)
    was = running_on(fleet, BERT, [0], remaining=1)
    line = [Waiting(BERT, 50_000, -60.0, checkpoint=was)]
    found = schedule(fleet, [endless], line, SETTINGS, planner(fleet))
    back = named(found, BERT.name)
    assert back.action == WAIT and back.start_s is None and back.nodes == ()
    assert back.reason == (
        "waits for machines its checkpoint on [0] can reach, held by jobs without a length: "
        "GPT-2-1.5B"
    )
    assert back.waits_for == (GPT2.name,)
    assert named(found, GPT2.name).action == KEEP and found.moves == []
    # Once its group frees, it resumes there, though the other group is faster.
    found = schedule(fleet, [], line, SETTINGS, planner(fleet))
    back = named(found, BERT.name)
    assert back.action == RESTART and set(back.nodes) <= {0, 1, 2, 3}
    assert math.isfinite(back.overhead_s) and back.finish_s is not None


def fastest_and_nearly() -> Fleet:
    """Machine 0 is the fastest; machine 1 computes `1 / 1.05` as fast; fast links."""
    return fleet_of([1.05e15, 1e15], [320.0, 320.0], {(0, 1): (1e-3, 1.25e9)})


def test_a_job_leaves_the_fastest_machine_when_it_gains_little_from_it() -> None:
    fleet = fastest_and_nearly()
    job = [Waiting(BERT, 10_000, 0.0)]
    greedy = SchedulerSettings(leave_fastest_slack=0.0)
    fastest = named(schedule(fleet, [], job, greedy, planner(fleet)), BERT.name)
    assert fastest.nodes == (0,)
    # Within the slack, it takes the machine one step slower and leaves the fastest free.
    frugal = SchedulerSettings(leave_fastest_slack=0.1)
    lesser = named(schedule(fleet, [], job, frugal, planner(fleet)), BERT.name)
    assert lesser.action == START and lesser.nodes == (1,)
    assert fastest.finish_s < lesser.finish_s <= 1.1 * fastest.finish_s
    # A plan without the fastest machine that is too much slower is not taken.
    tight = SchedulerSettings(leave_fastest_slack=0.01)
    assert named(schedule(fleet, [], job, tight, planner(fleet)), BERT.name).nodes == (0,)
    # Far slower machines (100×) are not an option either.
    far = named(schedule(fast_and_slow(), [], job, frugal, planner(fast_and_slow())), BERT.name)
    assert far.nodes == (0,)


def fast_and_a_quarter_slower() -> Fleet:
    """Machine 0 computes 1.25× as fast as machine 1; a slow link between them."""
    return fleet_of([1.25e15, 1e15], [320.0, 320.0], {(0, 1): (100e-3, 1.25e7)})


def test_a_job_starts_now_when_waiting_gains_little() -> None:
    fleet = fast_and_a_quarter_slower()
    nxt = Job(**{**BERT.__dict__, "name": "BERT-next"})
    line = [Waiting(nxt, 10_000, 0.0)]
    no_moves = {"max_moves_per_run": 0}

    def decide(busy_for: float, wait_gain: float):
        busy = running_on(fleet, BERT, [0], remaining=busy_for)
        settings = SchedulerSettings(wait_gain=wait_gain, **no_moves)
        return named(schedule(fleet, [busy], line, settings, planner(fleet)), nxt.name)

    # The fast machine frees after a fifth of the job's work: waiting for it finishes sooner.
    patient = decide(2_000, 0.0)
    assert patient.action == WAIT and patient.nodes == (0,) and patient.start_s > 0
    assert (patient.reason or "").endswith("finishes sooner on them than by starting now")
    # Within `wait_gain` of that, the job starts now on the slower machine instead.
    eager = decide(2_000, 0.15)
    assert eager.action == START and eager.nodes == (1,) and eager.start_s == 0.0
    assert patient.finish_s < eager.finish_s <= 1.15 * patient.finish_s
    # Waiting that gains more than the share is still taken.
    soon = decide(200, 0.15)
    assert soon.action == WAIT and soon.nodes == (0,)
    assert soon.finish_s * 1.15 < eager.finish_s


def one_site(n: int) -> Fleet:
    """n alike machines, every pair at 1 ms and 10 GB/s."""
    links = {(i, j): (1e-3, 1.25e9) for i in range(n) for j in range(i + 1, n)}
    return fleet_of([1e14] * n, [320.0] * n, links)


def test_a_job_leaves_replicas_it_gains_little_from_to_a_waiting_one() -> None:
    # BERT-large's plan on 8 alike machines is two replicas of 4 stages; one replica on 4 of
    # them is about 29 % slower, on half the machines.
    fleet = one_site(8)
    first = Job(**{**BERT.__dict__, "name": "BERT-first"})
    second = Job(**{**BERT.__dict__, "name": "BERT-second"})
    line = [Waiting(first, 10_000, -10.0), Waiting(second, 10_000, 0.0)]

    def decide(share_slack: float, jobs: list[Waiting]):
        settings = SchedulerSettings(share_slack=share_slack, max_moves_per_run=0)
        return schedule(fleet, [], jobs, settings, planner(fleet))

    whole = decide(0.0, line)
    assert {len(d.nodes) for d in whole.decisions} == {8}
    assert sorted(d.action for d in whole.decisions) == [START, WAIT]
    fastest = min(d.finish_s for d in whole.decisions)
    shared = decide(0.3, line)
    assert [d.action for d in shared.decisions] == [START, START]
    a, b = (set(d.nodes) for d in shared.decisions)
    assert len(a) == len(b) == 4 and not a & b
    assert all(fastest < d.finish_s <= 1.3 * fastest for d in shared.decisions)
    assert shared.mean_completion_s < whole.mean_completion_s
    # Slower than the share allows: the whole plan; and no job waiting: the whole plan.
    assert [len(d.nodes) for d in decide(0.25, line).decisions] == [8, 8]
    assert len(decide(0.3, line[:1]).decisions[0].nodes) == 8


def test_a_job_keeps_its_replicas_when_the_next_job_cannot_use_the_machines_left() -> None:
    # The same two-replica BERT-large plan, but the next job in line needs 1,600 GB: more than
    # the 4 machines one replica would leave (1,280 GB). It waits for all 8 either way, so
    # fewer replicas would only finish both later.
    fleet = one_site(8)
    big = Job(**{**PRESET_JOBS["OPT-175B"].__dict__, "name": "big", "params_b": 100.0})
    first = Job(**{**BERT.__dict__, "name": "BERT-first"})
    line = [Waiting(first, 10_000, -10.0), Waiting(big, 10, 0.0)]
    settings = SchedulerSettings(share_slack=0.3, max_moves_per_run=0)
    found = schedule(fleet, [], line, settings, planner(fleet))
    assert found.order == "shortest-first"
    bert, waiting = named(found, "BERT-first"), named(found, "big")
    assert bert.action == START and len(bert.nodes) == 8
    assert waiting.action == WAIT and waiting.start_s == pytest.approx(bert.finish_s)


def test_a_running_job_moves_onto_a_fast_machine_a_waiting_job_would_take() -> None:
    fleet = fast_and_slow()
    stuck = running_on(fleet, BERT, [1], remaining=100_000)  # on the machine 100× slower
    short = Job(**{**BERT.__dict__, "name": "BERT-short"})
    line = [Waiting(short, 1_000, 0.0)]
    no_stops = SchedulerSettings(preempt_candidates=0)
    found = schedule(fleet, [stuck], line, no_stops, planner(fleet))
    # The fast machine was free for the waiting job; the running one gains far more from it.
    assert found.moves == [BERT.name]
    moved = named(found, BERT.name)
    assert moved.action == MOVE and moved.nodes == (0,)
    assert named(found, "BERT-short").start_s is not None
    assert 0 not in named(found, "BERT-short").nodes or named(found, "BERT-short").start_s > 0


def counting(fleet: Fleet, calls: list[frozenset[int]]):
    settings = PlannerSettings()

    def plan(job: Job, nodes: np.ndarray):
        calls.append(frozenset(int(n) for n in nodes))
        return plan_job(job, fleet, nodes, settings)

    return plan


def two_fast_two_slow() -> Fleet:
    """Machines 0 and 1 compute 100× faster than machines 2 and 3; fast links."""
    links = {(i, j): (1e-3, 1.25e9) for i in range(4) for j in range(i + 1, 4)}
    return fleet_of([1e15, 1e15, 1e13, 1e13], [320.0] * 4, links)


def test_a_plan_of_a_job_of_the_same_sizes_is_reused_on_the_machines_it_leaves() -> None:
    fleet = two_fast_two_slow()
    long = running_on(fleet, BERT, [0], remaining=100_000)
    soon = running_on(fleet, Job(**{**BERT.__dict__, "name": "BERT-soon"}), [1], remaining=10)
    assert long.nodes == (0,) and soon.nodes == (1,)
    after = Job(**{**BERT.__dict__, "name": "BERT-after"})
    calls: list[frozenset[int]] = []
    settings = SchedulerSettings(max_moves_per_run=0)
    found = schedule(
        fleet, [long, soon], [Waiting(after, 1_000, 0.0)], settings, counting(fleet, calls)
    )
    waits = named(found, "BERT-after")
    # It waits for the fast machine BERT-soon leaves and runs there as BERT-soon did: the plan
    # of the same sizes on that machine is known, and no plan on the machines free then can be
    # faster (the plan on every machine is as fast), so none is made.
    assert waits.action == WAIT and waits.nodes == (1,)
    assert waits.start_s == pytest.approx(named(found, "BERT-soon").finish_s)
    assert frozenset({1, 2, 3}) not in calls
    assert waits.cost is not None and waits.cost.iteration_s == pytest.approx(soon.cost.iteration_s)


def test_no_plan_on_slower_machines_is_made_when_their_kind_is_far_too_slow() -> None:
    fleet = two_fast_two_slow()
    busy = running_on(fleet, BERT, [2], remaining=100_000)
    job = Job(**{**BERT.__dict__, "name": "BERT-new"})
    calls: list[frozenset[int]] = []
    found = schedule(fleet, [busy], [Waiting(job, 1_000, 0.0)], SETTINGS, counting(fleet, calls))
    started = named(found, "BERT-new")
    assert started.action == START and set(started.nodes) <= {0, 1}
    # Leaving the fast machines is weighed on every slow machine (a set the next runs ask
    # again): 100× slower, so the slow machines free now ({3}) are never planned on.
    assert frozenset({2, 3}) in calls and frozenset({3}) not in calls


def test_a_plan_seen_on_some_machines_bounds_them_when_the_planner_misses_it() -> None:
    """The planner's search is a heuristic: on more machines it may return a slower plan than
    one it found on fewer. A bound on a set of machines is then the faster, known plan."""
    fleet = two_sites()
    job = BERT
    good_plan, good = plan_job(job, fleet, [0, 1, 2, 3], PlannerSettings())
    assert good_plan is not None

    def misses_on_large_pools(job: Job, nodes: np.ndarray):
        chosen = nodes if len(nodes) <= 4 else nodes[:1]
        return plan_job(job, fleet, chosen, PlannerSettings())

    poor = misses_on_large_pools(job, np.arange(fleet.n))[1]
    assert poor.iteration_s > good.iteration_s  # the miss this test is about
    every = np.ones(fleet.n, bool)
    found = _Planner(misses_on_large_pools, budget=8, speed=fleet.compute_flops)
    assert found.kind_bound(job, every) == pytest.approx(poor.iteration_s)
    found = _Planner(misses_on_large_pools, budget=8, speed=fleet.compute_flops)
    found.learn(job, good_plan, good)
    assert found.kind_bound(job, every) == pytest.approx(good.iteration_s)
    outside = every.copy()
    outside[good_plan.nodes[0]] = False  # the known plan does not fit: no help
    assert found.kind_bound(job, outside) > good.iteration_s


def test_a_short_job_that_needs_several_machines_stops_the_long_jobs_on_them() -> None:
    fleet = fleet_of([1e15, 1e15], [320.0, 320.0], {(0, 1): (1e-3, 1.25e9)})
    wide = Job("wide", 30.0, 48, 7168, 2048, 512, 1)  # its memory needs both machines
    first = running_on(fleet, BERT, [0], remaining=10_000_000)
    second = running_on(fleet, Job(**{**BERT.__dict__, "name": "BERT-b"}), [1], 10_000_000)
    line = [Waiting(wide, 100, 0.0)]
    found = schedule(fleet, [first, second], line, SETTINGS, planner(fleet))
    # Stopping one long job alone frees nothing the wide job can use; stopping both lets it run
    # now, and the long ones resume after it from their checkpoints.
    assert sorted(found.moves) == sorted([BERT.name, "BERT-b"])
    runs = named(found, "wide")
    assert runs.action == START and set(runs.nodes) == {0, 1} and runs.start_s == 0.0
    for name in (BERT.name, "BERT-b"):
        assert named(found, name).action == WAIT
        assert named(found, name).start_s == pytest.approx(runs.finish_s)
    # A stop counts each job it stops against max_moves_per_run.
    one = schedule(
        fleet, [first, second], line, SchedulerSettings(max_moves_per_run=1), planner(fleet)
    )
    assert one.moves == [] and named(one, "wide").action == WAIT


def test_plans_given_for_the_jobs_starting_now_keep_the_runs_moves() -> None:
    fleet = fleet_of([1e15] * 3, [320.0] * 3, {(i, j): (1e-3, 1.25e9) for i, j in PAIRS_OF_3})
    wide = Job("wide", 30.0, 48, 7168, 2048, 512, 1)  # its memory needs two machines
    running = [
        running_on(fleet, BERT, [0], remaining=10_000_000),
        running_on(fleet, Job(**{**BERT.__dict__, "name": "BERT-b"}), [1], 10_000_000),
    ]
    shorts = [Job(**{**BERT.__dict__, "name": f"BERT-short{k}"}) for k in range(2)]
    line = [
        Waiting(wide, 100, 0.0),
        *(Waiting(j, 1_000 * (k + 1), 0.0) for k, j in enumerate(shorts)),
    ]
    found = schedule(fleet, running, line, SETTINGS, planner(fleet))
    # The long jobs stop so that the two short ones start now on their machines.
    starting = {d.job.name: (d.plan, d.cost) for d in found.decisions if d.action == START}
    assert set(starting) == {"BERT-short0", "BERT-short1"} and found.moves
    # The strategy's plans for those two, swapped between their machines: the stops stand, and
    # no machine holds two jobs.
    plan0, plan1 = starting["BERT-short0"], starting["BERT-short1"]
    swapped = {
        "BERT-short0": planner(fleet)(shorts[0], np.asarray(plan1[0].nodes)),
        "BERT-short1": planner(fleet)(shorts[1], np.asarray(plan0[0].nodes)),
    }
    alt = with_start_plans(fleet, found, running, line, SETTINGS, planner(fleet), swapped)
    assert alt is not None and alt.moves == found.moves
    now = [d for d in alt.decisions if d.start_s == 0.0 and d.action != WAIT]
    held = [n for d in now for n in d.nodes]
    assert len(held) == len(set(held))
    for name in found.moves:
        assert named(alt, name).action in (WAIT, MOVE)
        if named(alt, name).action == WAIT:
            assert "stopped so that shorter work runs first" in (named(alt, name).reason or "")
    # A plan on a machine a job still holds is refused, here and by `schedule` itself.
    unmoved = schedule(fleet, running, line, SchedulerSettings(max_moves_per_run=0), planner(fleet))
    assert named(unmoved, BERT.name).action == KEEP
    clash = {"BERT-short0": planner(fleet)(shorts[0], np.asarray(running[0].nodes))}
    assert with_start_plans(fleet, unmoved, running, line, SETTINGS, planner(fleet), clash) is None
    with pytest.raises(ValueError, match="BERT-short0"):
        schedule(fleet, running, line, SETTINGS, planner(fleet), start_now=clash)
