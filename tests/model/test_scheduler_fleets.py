"""The scheduler's promises on a family of fleets no other test names: machines of several kinds
in one to five sites, links of every speed, some sites unreachable from others, machines that
fail and come back. Jobs arrive over half a day and run to their end through the job store
(`hulk.stages.scheduling`: the store's state in, the schedule recorded), one assign run at
every event (an arrival, a failure, a return, a published start or finish, a job marked
finished or cancelled) on the 15-minute grid. Every run keeps the promises of
docs/design.md#assignment-and-re-planning; every job the fleet holds finishes."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from hulk.cost import Fleet, iteration_time
from hulk.job_store import FINISHED, QUEUED, RUNNING, SUBMITTED, JobStore
from hulk.jobs import PRESET_JOBS, Job
from hulk.planner import plan_job
from hulk.scheduler import KEEP, MOVE, NEVER, RESTART, START, Running, Schedule, Waiting, schedule
from hulk.settings import PlannerSettings, SchedulerSettings
from hulk.stages.scheduling import drain, record, scheduler_inputs

TICK_S = 900.0
T0 = dt.datetime(2026, 3, 2, tzinfo=dt.UTC)
COMPUTING = (KEEP, START, RESTART, MOVE)
# (TFLOP/s, GB): the kinds of machine in the default fleet's inventory, fastest first.
KINDS = [(998, 640), (998, 320), (600, 384), (227, 192), (114, 96), (36, 64)]
PRESETS = ["BERT-large", "GPT-2-1.5B", "RoBERTa-large", "XLNet-large", "T5-11B", "OPT-175B"]
PLANNER = PlannerSettings()
SCHEDULER = SchedulerSettings()


def random_fleet(rng: np.random.Generator, by_site: bool) -> Fleet:
    """1–5 sites of 1–5 machines; 0.2–2 ms inside a site, 5–180 ms between sites, and about
    one site pair in five without a link (reached through a third site, or not at all).
    `by_site`: the site model of large fleets (`hulk.site_links`) instead of dense matrices."""
    count = int(rng.integers(1, 6))
    sites = np.repeat(np.arange(count), rng.integers(1, 6, size=count))
    n = len(sites)
    kinds = rng.integers(0, len(KINDS), n)
    flops = np.array([KINDS[k][0] * 1e12 for k in kinds])
    memory = np.array([KINDS[k][1] * 1e9 for k in kinds])
    apart = {(a, b): rng.random() < 0.2 for a in range(count) for b in range(a + 1, count)}
    site_latency = rng.uniform(5e-3, 0.18, size=(count, count))
    site_bandwidth = rng.uniform(1.25e7, 2.5e8, size=(count, count))
    li, lj, lat, bw = [], [], [], []
    for i in range(n):
        for j in range(i + 1, n):
            a, b = sorted((int(sites[i]), int(sites[j])))
            if a == b:
                li.append(i), lj.append(j)
                lat.append(float(rng.uniform(2e-4, 2e-3)))
                bw.append(float(rng.uniform(1.25e9, 1.25e10)))
            elif not apart[(a, b)]:
                li.append(i), lj.append(j)
                lat.append(float(site_latency[a, b]))
                bw.append(float(site_bandwidth[a, b]))
    fleet = Fleet.from_arrays(
        np.arange(n) + 100,
        flops,
        memory,
        np.ones(n, bool),
        np.array(li, np.int64),
        np.array(lj, np.int64),
        np.array(lat),
        np.array(bw),
        sites=sites if by_site else None,
    )
    return fleet


def random_week(
    rng: np.random.Generator, fleet: Fleet, terms: np.random.Generator
) -> tuple[list[tuple[float, Job]], list[tuple[int, float, float]]]:
    """Jobs arriving over 12 h (0.5–6 h each on the fleet's best plan; the fleet cannot hold
    some presets), and two outages of 1–6 h. From `terms`: about one job in four has a higher
    priority, one in three a deadline 2.5–34 h after it arrives, one in five is submitted for
    0.5–4 h after it arrives."""
    every = fleet.active_indices()
    arrivals = []
    for k in range(int(rng.integers(8, 17))):
        preset = PRESET_JOBS[PRESETS[int(rng.integers(0, len(PRESETS)))]]
        seconds = plan_job(preset, fleet, every, PLANNER)[1].iteration_s
        hours = float(rng.uniform(0.5, 6.0))
        iterations = max(1, math.ceil(hours * 3600 / seconds)) if math.isfinite(seconds) else 100
        at = float(rng.uniform(0, 12 * 3600))
        later = T0 + dt.timedelta(seconds=round(at + terms.uniform(0.5, 4) * 3600))
        due = later + dt.timedelta(seconds=round(terms.uniform(2, 30) * 3600))
        job = Job(
            **{
                **preset.__dict__,
                "name": f"{preset.name}-{k}",
                "iterations": iterations,
                "priority": int(terms.random() < 0.25),
                "deadline": due if terms.random() < 1 / 3 else None,
                "submitted_at": later if terms.random() < 0.2 else None,
            }
        )
        arrivals.append((at, job))
    outages = []
    for _ in range(2):
        start = float(rng.uniform(0, 16 * 3600))
        outages.append((int(rng.integers(0, fleet.n)), start, start + rng.uniform(1, 6) * 3600))
    return sorted(arrivals, key=lambda a: a[0]), outages


def check_promises(
    fleet: Fleet, running: Sequence[Running], waiting: Sequence[Waiting], found: Schedule
) -> None:
    """What every assign run promises, whatever the fleet."""
    decided = {d.job.name: d for d in found.decisions}
    assert sorted(decided) == sorted(j.job.name for j in [*running, *waiting])
    remaining = {j.job.name: j.remaining for j in [*running, *waiting]}
    # Jobs computing now hold active machines, none of them held twice.
    held: dict[int, str] = {}
    for d in found.decisions:
        if d.action in COMPUTING:
            assert d.start_s == 0.0, d
            for n in d.nodes:
                assert fleet.active[n], f"{d.job.name} computes on inactive machine {n}"
                assert n not in held, f"{d.job.name} and {held[n]} both hold machine {n}"
                held[n] = d.job.name
    # A running job stays where it is unless it lost a machine or a move paid for itself.
    for run in running:
        d = decided[run.job.name]
        lost = run.lost_nodes or not fleet.active[list(run.nodes)].all()
        if not lost and run.job.name not in found.moves:
            assert d.action == KEEP, f"{run.job.name} was {d.action} with no move counted"
        if d.action == KEEP:
            assert d.nodes == run.nodes and d.plan == run.plan
    # Estimates are the cost model's: start, then the restart, then the remaining iterations.
    for d in found.decisions:
        if d.plan is None or d.finish_s is None:
            continue
        left = remaining[d.job.name]
        assert left is not None
        seconds = iteration_time(d.job, fleet, d.plan).iteration_s
        assert d.finish_s == pytest.approx(d.start_s + d.overhead_s + left * seconds, rel=1e-9)
    check_the_queue(fleet, found)


def check_the_queue(fleet: Fleet, found: Schedule) -> None:
    """The promises about the whole queue: commitments, the jobs never scheduled, times."""
    # The machines' commitments never overlap in time.
    spans = [(set(d.nodes), d.start_s, d.finish_s or math.inf, d.job.name) for d in found.decisions]
    spans = [s for s in spans if s[0] and s[1] is not None]
    for k, (nodes_a, start_a, end_a, a) in enumerate(spans):
        for nodes_b, start_b, end_b, b in spans[k + 1 :]:
            if nodes_a & nodes_b:
                assert end_a <= start_b + 1e-6 or end_b <= start_a + 1e-6, (a, b)
    # A job is never scheduled only when the whole fleet cannot hold it.
    every = np.arange(fleet.n)
    for d in found.decisions:
        if d.action == NEVER:
            assert not plan_job(d.job, fleet, every, PLANNER)[1].feasible
            assert d.reason
    # A job submitted for later starts no sooner; the deadlines missed are the late jobs.
    for d in found.decisions:
        if d.start_s is not None and d.action != KEEP:
            assert d.start_s >= d.submitted_s - 1e-6, f"{d.job.name} starts before it is due"
    assert found.missed_deadlines == sum(d.late for d in found.decisions)
    finishes = [d.finish_s - d.submitted_s for d in found.decisions if d.finish_s is not None]
    if finishes:
        assert found.mean_completion_s == pytest.approx(float(np.mean(finishes)))


@pytest.mark.parametrize("seed", range(20))
def test_every_run_keeps_its_promises_and_every_job_finishes(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    whole = random_fleet(rng, by_site=seed % 2 == 1)
    arrivals, outages = random_week(rng, whole, np.random.default_rng([seed, 1]))
    fleets: dict[str, Fleet] = {}

    def fleet_at(t: float) -> Fleet:
        down = sorted({int(whole.node_ids[n]) for n, start, end in outages if start <= t < end})
        if str(down) not in fleets:
            fleets[str(down)] = drain(whole, down)
        return fleets[str(down)]

    holds = {
        job.name
        for _, job in arrivals
        if plan_job(job, whole, np.arange(whole.n), PLANNER)[1].feasible
    }
    # A job without a length, which its users mark finished (or cancel, while it waits), and
    # a job cancelled: both give their machines back.
    endless_at = float(rng.uniform(0, 6 * 3600))
    endless = Job(**{**PRESET_JOBS["BERT-large"].__dict__, "name": "endless", "iterations": None})
    arrivals = sorted([*arrivals, (endless_at, endless)], key=lambda a: a[0])
    ends = {"endless": endless_at + float(rng.uniform(2, 8)) * 3600}
    cancelled = arrivals[int(rng.integers(0, len(arrivals)))][1].name
    if cancelled != "endless":
        ends[cancelled] = float(rng.uniform(0, 16 * 3600))
        holds.discard(cancelled)
    holds.discard("endless")
    edges = sorted(
        {a for a, _ in arrivals} | {t for _, s, e in outages for t in (s, e)} | set(ends.values())
    )
    t, runs = 0.0, 0
    with JobStore(tmp_path / "jobs.db") as store:
        while runs < 300:
            now = T0 + dt.timedelta(seconds=t)
            new = [job for at, job in arrivals if at <= t and store.get(job.name) is None]
            if new:
                store.submit(new, now)
            for name, end in ends.items():
                state = store.get(name)
                if end <= t and state is not None and state.state in (SUBMITTED, QUEUED, RUNNING):
                    if state.state == RUNNING and name == "endless":
                        store.finish(name, now)
                    else:
                        store.cancel(name, now)
            fleet = fleet_at(t)
            store.finish_done(now)
            states = store.jobs([SUBMITTED, QUEUED, RUNNING])
            left = {s.job.name for s in states}
            if all(at <= t for at, _ in arrivals) and not (holds | set(ends)) & left:
                break  # what is left the fleet cannot hold: it stays queued, saying why
            running, waiting = scheduler_inputs(states, fleet, now)
            deadlines = {
                s.job.name: (s.job.deadline - now).total_seconds()
                for s in states
                if s.job.deadline is not None
            }

            def plan_fn(job: Job, nodes: np.ndarray, fleet: Fleet = fleet) -> tuple:
                return plan_job(job, fleet, nodes, PLANNER, fleet_windows=True)

            found = schedule(fleet, running, waiting, SCHEDULER, plan_fn, deadlines)
            check_promises(fleet, running, waiting, found)
            record(store, found, fleet, now)
            runs += 1
            # The store never shows a machine held by two running jobs.
            holders = [n for s in store.jobs([RUNNING]) for n in s.nodes]
            assert len(holders) == len(set(holders))
            # The next run: the next event on the 15-minute grid.
            events = [e for e in edges if e > t]
            for d in found.decisions:
                for moment in (d.start_s, d.finish_s):
                    if moment is not None and moment > 0:
                        events.append(t + moment)
            if not events:
                events = [t + TICK_S]
            t = max(t + TICK_S, math.ceil(min(events) / TICK_S) * TICK_S)
        finished = {s.job.name for s in store.jobs([FINISHED])}
        left = {s.job.name for s in store.jobs([SUBMITTED, QUEUED, RUNNING])}
    assert holds <= finished, f"never finished: {sorted(holds - finished)} after {runs} runs"
    assert not set(ends) & left, "a job marked finished or cancelled is still in line"


def _transfer_pair_by_pair(
    job: Job, fleet: Fleet, old: Running, new_plan: object, new_nodes: Sequence[int]
) -> float:
    """`move_cost` read the plain way, one link at a time: each new stage of the first replica
    fetches every layer it lacks from the best old holder of that layer (any old machine
    without a plan), stages in parallel."""
    from hulk.cost import Plan

    alive = [n for n in old.nodes if fleet.active[n]]
    holders: dict[int, list[int]] = {}
    for replica in old.plan.replicas if old.plan is not None else ():
        for stage in replica:
            for layer in range(stage.layer_start, stage.layer_end):
                holders.setdefault(layer, []).append(stage.node)
    per_layer = SCHEDULER.checkpoint_bytes_per_param * job.params / job.layers
    if isinstance(new_plan, Plan) and new_plan.replicas:
        targets = [(s.node, s.layer_start, s.layer_end) for s in new_plan.replicas[0]]
    else:
        targets = [(int(n), 0, job.layers) for n in new_nodes]
        per_layer /= len(targets)
    slowest = 0.0
    for node, start, end in targets:
        seconds = 0.0
        for layer in range(start, end):
            sources = holders.get(layer, alive)
            if node in sources:
                continue
            bandwidth = max(float(fleet.bandwidth_Bps[s, node]) for s in sources)
            latency = min(float(fleet.latency_s[s, node]) for s in sources)
            seconds += per_layer / bandwidth + latency if bandwidth > 0 else math.inf
        slowest = max(slowest, seconds)
    total = SCHEDULER.restart_overhead_s + slowest
    return float(math.ceil(total)) if math.isfinite(total) else total


@pytest.mark.parametrize("seed", range(6))
def test_a_moves_checkpoint_transfer_is_the_links_of_each_layers_holders(seed: int) -> None:
    """`move_cost` reads a stage's links from all old machines at once (the site model's pairs
    are slow one by one); it must give what reading them one by one gives, on both models."""
    from hulk.scheduler import move_cost

    rng = np.random.default_rng([seed, 7])
    for by_site in (False, True):
        fleet = random_fleet(rng, by_site)
        if fleet.n < 2:
            continue
        every = fleet.active_indices()
        for name in PRESETS:
            job = PRESET_JOBS[name]
            old_nodes = rng.choice(every, size=int(rng.integers(1, fleet.n + 1)), replace=False)
            new_nodes = rng.choice(every, size=int(rng.integers(1, fleet.n + 1)), replace=False)
            old_plan, old_cost = plan_job(job, fleet, np.sort(old_nodes), PLANNER)
            new_plan, _ = plan_job(job, fleet, np.sort(new_nodes), PLANNER)
            old = Running(job, tuple(int(n) for n in old_nodes), old_plan, old_cost, None, 0.0)
            for plan in (old_plan, None):  # the old layout known, or only its machines
                ran = Running(job, old.nodes, plan, old_cost, None, 0.0)
                for target, nodes in ((new_plan, new_nodes), (None, new_nodes)):
                    got = move_cost(job, fleet, ran.nodes, plan, target, nodes, SCHEDULER)
                    want = _transfer_pair_by_pair(job, fleet, ran, target, nodes)
                    assert got == want, (name, by_site, plan is None, target is None)
