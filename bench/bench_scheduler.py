"""Benchmark: a simulated week of the assign run as a scheduler, against the two ways Hulk could
run without one.

    .venv/bin/python bench/bench_scheduler.py [--seed S] [--seeds S1,S2,…] [--weeks N]
                                              [--only-weeks W1,W2,…] [--workers W]
                                              [--days D] [--skip-big]
                                              [--big-params FILE] [--big-only]
                                              [--set KEY=VALUE …] [--hulk-only]

The default fleet (params.yaml ``generate.preset``, its expected link table: no logs needed) in
a temporary data folder. Jobs arrive for `--days` days (Poisson arrivals plus bursts; the
presets' sizes, small models most often; each job's length drawn log-normal around 12 hours
of its best plan on the whole fleet; a job no plan on the whole fleet holds, as OPT-175B on a
fleet without the memory, is left out and named); machines fail and come back (their status in
machines.csv).
Every 15 simulated minutes, while jobs remain:

* **Hulk** runs the real assign step (`hulk.stages.assign.run`, strategy teacher, the job store
  and placements files of the data folder) at the simulated time; the jobs file lists the jobs
  arrived so far. Completion times come from the job store.
* **(a) today's behaviour**: whenever the jobs or the machines changed, every job not finished
  is placed again from scratch side by side by the teacher (`hulk.assign.place_jobs`); a job
  whose machines or stages changed pays the move (`hulk.scheduler.move_cost`).
* **(b) one job after another** in arrival order, each on the whole fleet under the best of
  Systems A, B, C (a failure restarts it on the fleet as it is).

Progress is the cost model's: a job computes at its plan's seconds per iteration on the fleet of the
moment. Printed: mean job completion time (finish − arrival) of each, the ratios, the same per model
of the mix (alone, Hulk and its wait before the first start, (a)), every job alone on the whole
fleet from its arrival (its length on its best plan: no schedule of those plans does better, so (a)
over it bounds what any scheduler gains against (a)), the offered load on the fleet's fastest kind
of machine and every job alone without that kind (on a fleet whose best plans need a few fastest
machines, those queue at any load: the price of missing them), the moves of running jobs (after a
failure / for a gain), and the assign runs' scheduling seconds (the scheduler's own decision time,
`queue.scheduling_s`, and the whole step), how far the finish a job's users first read (its first
run's ``finish_at``) lies from its finish, and how often the job store showed a machine held by two
running jobs (never, on correct code). A second scenario times assign runs at 1,000 machines
(``synthetic-1000``) with 20 jobs in the store; ``--big-params bench/params-sites-10000.yaml`` times
them at 10,000 machines instead (that file's fleet and settings; no target there); ``--big-only``
runs only them.

One week of arrivals is a noisy judge of a policy: a change of one decision cascades through the
days after it. ``--seeds`` adds other draws of the default preset's fleet and week (``--workers``
of them side by side) and prints each seed's ratios, their geometric mean and how many meet the
target; ``--weeks N`` adds N other weeks of arrivals and outages on the default fleet itself
(week 0 is the default week); with ``--hulk-only``, ``--only-weeks 1,5`` runs just those weeks.
The checks printed above that table are the default week's.

Trying a change to the scheduler: ``--set KEY=VALUE`` (repeatable) overrides a ``scheduler``
setting of params.yaml for Hulk's runs, and ``--hulk-only`` runs only Hulk's week on each seed
and prints its mean completion beside (a)'s from the last full run recorded in
bench/out/scheduler.json when that run had the seed (it is deterministic: (a) does not depend on
the scheduler's settings). Hulk's part alone takes about 3–6 minutes a seed.

Targets (issue: the assignment flow as a scheduler): mean completion ≥ 1.5× better than both
(a) and (b); no running job moved except after a failure or by a move that pays; scheduling
≤ 2 s per run at 47 machines and ≤ 10 s at 1,000. Checked beside them: no machine is held by
two running jobs in the job store after any run. Writes bench/out/scheduler.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hulk import fileio, schemas  # noqa: E402
from hulk.assign import place_jobs, whole_fleet_baselines  # noqa: E402
from hulk.cost import Fleet  # noqa: E402
from hulk.generate import expected_links  # noqa: E402
from hulk.job_store import FINISHED, RUNNING, JobStore  # noqa: E402
from hulk.jobs import PRESET_JOBS, Job, dump_jobs  # noqa: E402
from hulk.planner import plan_job  # noqa: E402
from hulk.presets import build_fleet  # noqa: E402
from hulk.scheduler import move_cost  # noqa: E402
from hulk.settings import Settings, load_settings  # noqa: E402
from hulk.stages import assign as assign_stage  # noqa: E402
from hulk.stages.scheduling import jobs_db  # noqa: E402

TICK_S = 900.0
START = dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.UTC)
MIX = {  # preset → share of arrivals
    "BERT-large": 0.28,
    "RoBERTa-large": 0.14,
    "XLNet-large": 0.14,
    "GPT-2-1.5B": 0.22,
    "T5-11B": 0.16,
    "OPT-175B": 0.06,
}


@dataclass(frozen=True)
class Arrival:
    job: Job
    at_s: float


@dataclass(frozen=True)
class Outage:
    node_id: int
    start_s: float
    end_s: float


@dataclass
class Workload:
    arrivals: list[Arrival]
    outages: list[Outage]
    # Jobs drawn but left out: no plan on the whole fleet holds them (a fleet without the
    # memory for OPT-175B), so no policy could ever finish them.
    cannot_hold: list[str] = field(default_factory=list)


def workload(fleet: Fleet, settings: Settings, seed: int, days: float, week: int = 0) -> Workload:
    """Seeded arrivals (Poisson, 1 job per 2.75 h, plus two bursts of 6) and one outage a day;
    `week` > 0 draws another week for the same seed."""
    entropy = [seed, 0x5343484544] + ([week] if week else [])
    rng = np.random.default_rng(np.random.SeedSequence(entropy))
    horizon = days * 86_400
    times: list[float] = []
    t = float(rng.exponential(2.75 * 3600))
    while t < horizon:
        times.append(t)
        t += float(rng.exponential(2.75 * 3600))
    for burst in rng.uniform(0.1, 0.8, 2) * horizon:
        times += [float(burst + 60 * k) for k in range(6)]
    times.sort()
    names = list(MIX)
    weights = np.array(list(MIX.values()))
    every = fleet.active_indices()
    reference: dict[str, float] = {}
    arrivals = []
    cannot_hold = []
    for k, at in enumerate(times):
        preset = PRESET_JOBS[names[int(rng.choice(len(names), p=weights / weights.sum()))]]
        if preset.name not in reference:
            reference[preset.name] = plan_job(preset, fleet, every, settings.planner)[1].iteration_s
        hours = float(np.clip(rng.lognormal(math.log(12.0), 1.0), 1.0, 96.0))
        name = f"{preset.name}-{k:03d}"
        if not math.isfinite(reference[preset.name]):
            cannot_hold.append(name)  # drawn all the same: the other jobs stay as they were
            continue
        iterations = max(1, math.ceil(hours * 3600 / reference[preset.name]))
        job = Job(**{**preset.__dict__, "name": name, "iterations": iterations})
        arrivals.append(Arrival(job, round(at)))
    outages = []
    ids = fleet.node_ids[every]
    for at in np.sort(rng.uniform(0, horizon, max(1, round(days)))):
        outages.append(
            Outage(int(rng.choice(ids)), float(at), float(at + rng.uniform(1, 12) * 3600))
        )
    if not arrivals:
        raise SystemExit(
            f"the fleet of seed {seed} holds none of the jobs drawn ({', '.join(cannot_hold)})"
        )
    return Workload(arrivals, outages, cannot_hold)


def whole_fleet_plans(fleet: Fleet, work: Workload, settings: Settings) -> dict[str, tuple]:
    """Each arriving job's plan on the whole fleet and its cost, by job name (one planning per
    preset: the jobs of a preset differ only in length)."""
    by_sizes: dict[tuple, tuple] = {}
    plans = {}
    for arrival in work.arrivals:
        job = arrival.job
        key = (job.params_b, job.layers, job.hidden, job.seq_len, job.global_batch)
        if key not in by_sizes:
            by_sizes[key] = plan_job(job, fleet, fleet.active_indices(), settings.planner)
        plans[job.name] = by_sizes[key]
    return plans


def offered_load(work: Workload, plans: dict[str, tuple], machines: int) -> float:
    """Machine-hours the jobs need on their best plans (`plans`: `whole_fleet_plans`) over the
    fleet's machine-hours while they arrive: above 1, jobs must queue whatever the schedule."""
    needed = 0.0
    for arrival in work.arrivals:
        plan, cost = plans[arrival.job.name]
        if plan is not None:
            needed += len(plan.nodes) * (arrival.job.iterations or 0) * cost.iteration_s
    span = max(a.at_s for a in work.arrivals) if work.arrivals else 1.0
    return needed / (machines * max(span, 1.0))


def fastest_kind_load(work: Workload, plans: dict[str, tuple], fleet: Fleet) -> tuple[int, float]:
    """(machines of the fleet's fastest kind, offered load on them): the machine-hours the
    jobs' best plans (`plans`) hold them over theirs while the jobs arrive. The fleet's offered
    load hides a fleet whose best plans all need a few fastest machines (one, on
    `synthetic-200`): those then queue, or the jobs run slower without them, at any load."""
    speed = fleet.compute_flops
    active = fleet.active_indices()
    fastest = speed == speed[active].max()
    count = int(fastest[active].sum())
    needed = 0.0
    for arrival in work.arrivals:
        plan, cost = plans[arrival.job.name]
        if plan is not None:
            on = int(fastest[list(plan.nodes)].sum())
            needed += on * (arrival.job.iterations or 0) * cost.iteration_s
    span = max(a.at_s for a in work.arrivals) if work.arrivals else 1.0
    return count, needed / (count * max(span, 1.0))


def alone_without_fastest_s(work: Workload, fleet: Fleet, settings: Settings) -> float | None:
    """Mean completion if every job started at its arrival alone on the fleet without its
    fastest kind of machine (inf when a job then fits nowhere; None on a fleet of one kind):
    what a job pays that finds those machines taken. One planning per preset, as
    `whole_fleet_plans`."""
    speed = fleet.compute_flops
    active = fleet.active_indices()
    others = active[speed[active] < speed[active].max()]
    if not len(others):
        return None
    by_sizes: dict[tuple, float] = {}
    lengths = []
    for arrival in work.arrivals:
        job = arrival.job
        key = (job.params_b, job.layers, job.hidden, job.seq_len, job.global_batch)
        if key not in by_sizes:
            cost = plan_job(job, fleet, others, settings.planner)[1]
            by_sizes[key] = cost.iteration_s if cost.feasible else math.inf
        lengths.append((job.iterations or 0) * by_sizes[key])
    return float(np.mean(lengths))


def alone_mean_s(work: Workload, plans: dict[str, tuple]) -> float:
    """Mean completion if every job started at its arrival, alone on the whole fleet, on its
    best plan there (`plans`): its length and nothing else. With the planner's plans no
    schedule does better, so ``(a)``'s mean over this is the most any scheduler could gain
    against (a) on this week — below 1.5, the target cannot be met there."""
    lengths = [
        (arrival.job.iterations or 0) * plans[arrival.job.name][1].iteration_s
        for arrival in work.arrivals
    ]
    return float(np.mean(lengths))


def by_model(
    work: Workload, plans: dict[str, tuple], hulk: dict, replaced: dict | None = None
) -> list[dict]:
    """Per model of the mix: its jobs' mean completion alone (their length on the best plan),
    under Hulk (and its mean wait from arrival to first start) and under (a): where a week's
    mean completion goes."""
    hulk_jobs = {j["job"]: j for j in hulk["per_job"]}
    rows = []
    for model in MIX:
        arrivals = [a for a in work.arrivals if a.job.name.rsplit("-", 1)[0] == model]
        done = [a for a in arrivals if hulk_jobs[a.job.name]["finish_s"] is not None]
        if not done:
            continue
        row = {
            "model": model,
            "jobs": len(done),
            "alone_s": float(
                np.mean([(a.job.iterations or 0) * plans[a.job.name][1].iteration_s for a in done])
            ),
            "hulk_s": float(np.mean([hulk_jobs[a.job.name]["finish_s"] - a.at_s for a in done])),
            "hulk_wait_s": float(
                np.mean([(hulk_jobs[a.job.name]["start_s"] or a.at_s) - a.at_s for a in done])
            ),
        }
        if replaced is not None:
            times = [replaced["completion_s"].get(a.job.name) for a in done]
            row["replaced_s"] = float(np.mean([t for t in times if t is not None]))
        rows.append(row)
    return rows


def down_at(outages: list[Outage], t: float) -> set[int]:
    return {o.node_id for o in outages if o.start_s <= t < o.end_s}


def with_down(inventory: pd.DataFrame, down: set[int]) -> pd.DataFrame:
    frame = inventory.copy()
    frame.loc[frame["node_id"].isin(sorted(down)), "status"] = schemas.STATUS_DRAINED
    return frame


# --- Hulk: the real assign step ----------------------------------------------------------------


def run_hulk(
    data: Path, inventory: pd.DataFrame, work: Workload, settings: Settings, seed: int
) -> dict:
    jobs_file = data / "jobs" / "upcoming.yaml"
    arrived: list[Job] = []
    pending = list(work.arrivals)
    down: set[int] | None = None
    t = 0.0
    schedule_s: list[float] = []
    step_s: list[float] = []
    first_estimate: dict[str, float] = {}  # the finish published at a job's first run, from START
    shared = 0
    total = len(work.arrivals)
    while True:
        came = bool(pending and pending[0].at_s <= t)
        while pending and pending[0].at_s <= t:
            arrived.append(pending.pop(0).job)
        now_down = down_at(work.outages, t)
        if now_down != down:
            down = now_down
            fileio.write_csv(data / schemas.INVENTORY_FILE, with_down(inventory, down))
        if arrived:
            if came:  # the jobs file changes only when jobs arrive (dumping it costs ~40 ms)
                fileio.write_text(jobs_file, dump_jobs(arrived))
            clock = time.perf_counter()
            result = assign_stage.run(
                data,
                settings,
                jobs_file=jobs_file,
                strategy="teacher",
                out_dir=data / "placements",
                seed=seed,
                now=START + dt.timedelta(seconds=t),
            )
            step_s.append(time.perf_counter() - clock)
            assert result.summary.queue is not None
            schedule_s.append(result.summary.queue.scheduling_s)
            for row in result.summary.jobs:
                finish_at = row.scheduled.finish_at if row.scheduled else None
                if row.job not in first_estimate and finish_at:
                    at = dt.datetime.fromisoformat(finish_at.replace("Z", "+00:00"))
                    first_estimate[row.job] = (at - START).total_seconds()
        with JobStore(jobs_db(data)) as store:
            done = len(store.jobs([FINISHED]))
            held = [n for state in store.jobs([RUNNING]) for n in state.nodes]
        shared += len(held) - len(set(held))  # a machine given to two running jobs
        if done == total and not pending:
            break
        t += TICK_S
        if t % 86_400 == 0:
            print(f"  Hulk: day {t / 86_400:.0f}, {done} of {total} jobs done", flush=True)
    with JobStore(jobs_db(data)) as store:
        states = store.jobs()
        events = store.events()
    arrival = {a.job.name: a.at_s for a in work.arrivals}
    completion = [
        (s.finished_at - START).total_seconds() - arrival[s.job.name]
        for s in states
        if s.finished_at
    ]
    per_job: list[dict[str, Any]] = [
        {
            "job": s.job.name,
            "arrival_s": arrival[s.job.name],
            "start_s": (s.started_at - START).total_seconds() if s.started_at else None,
            "finish_s": (s.finished_at - START).total_seconds() if s.finished_at else None,
            "iterations": s.job.iterations,
            "moves": s.moves,
        }
        for s in states
    ]
    # Moves for a gain: moved, or stopped for shorter work (its resume is part of that move).
    # After a failure: a restart right away, or a stop until machines free up.
    # How far the finish a user first reads lies from the finish: later arrivals of shorter
    # work push waiting jobs back, so the estimate is a forecast, not a promise.
    error_h = [
        (j["finish_s"] - first_estimate[j["job"]]) / 3600
        for j in per_job
        if j["finish_s"] is not None and j["job"] in first_estimate
    ]
    moved = sum(e["event"] in ("moved", "preempted") for e in events)
    stopped: set[str] = set()  # jobs whose next restart belongs to a counted stop
    restarted = 0
    for e in events:
        if e["event"] in ("preempted", "stopped"):
            stopped.add(e["job"])
            restarted += e["event"] == "stopped"
        elif e["event"] == "restarted":
            restarted += e["job"] not in stopped
            stopped.discard(e["job"])
    return {
        "mean_completion_s": float(np.mean(completion)),
        "jobs": len(completion),
        "moves_for_gain": moved,
        "shared_machine_runs": shared,
        "restarts_after_failure": restarted,
        "runs": len(step_s),
        "scheduling_s_max": max(schedule_s),
        "scheduling_s_mean": float(np.mean(schedule_s)),
        "step_s_max": max(step_s),
        "step_s_mean": float(np.mean(step_s)),
        "per_job": per_job,
        "first_estimate_error_h": {
            "jobs": len(error_h),
            "mean_abs": float(np.mean(np.abs(error_h))) if error_h else None,
            "mean": float(np.mean(error_h)) if error_h else None,
            "within_1h": float(np.mean(np.abs(error_h) <= 1.0)) if error_h else None,
        },
    }


# --- (a) today's behaviour: re-placed from scratch -----------------------------------------------


@dataclass
class _Live:
    job: Job
    arrival_s: float
    done: float = 0.0
    nodes: tuple[int, ...] = ()  # node ids
    records: list | None = None
    iteration_s: float = math.inf
    paused_until: float = 0.0
    finished_s: float | None = None
    moves: int = 0
    history: list = field(default_factory=list)


def run_replace(
    inventory: pd.DataFrame, links: pd.DataFrame, work: Workload, settings: Settings, seed: int
) -> dict:
    from hulk.cost import Plan

    pending = list(work.arrivals)
    live: list[_Live] = []
    finished: list[_Live] = []
    key = None
    t = 0.0
    fleet = None
    moves = 0
    while pending or live:
        # Progress over the last tick.
        for job in live:
            start = max(t - TICK_S, job.paused_until)
            if job.nodes and t > start:
                job.done += (t - start) / job.iteration_s
        for job in list(live):
            if job.nodes and job.done >= (job.job.iterations or 0):
                over = (job.done - (job.job.iterations or 0)) * job.iteration_s
                job.finished_s = t - over
                live.remove(job)
                finished.append(job)
        while pending and pending[0].at_s <= t:
            arrival = pending.pop(0)
            live.append(_Live(arrival.job, arrival.at_s))
        down = down_at(work.outages, t)
        now_key = (tuple(j.job.name for j in live), tuple(sorted(down)))
        if live and now_key != key:
            key = now_key
            fleet = Fleet.from_frames(
                with_down(inventory, down), links, settings.hardware, settings.graph.bandwidth_tiers
            )
            placed = place_jobs([j.job for j in live], fleet, "teacher", settings, seed)
            for job, p in zip(live, placed, strict=True):
                records = p.plan.to_records(fleet) if p.plan is not None else None
                if records == job.records:
                    continue
                if job.nodes and p.plan is not None:  # a running job moved: it pays the move
                    old = [int(i) for i in fleet.index_of(list(job.nodes))]
                    old_plan = Plan.from_records(fleet, job.records or [])
                    job.paused_until = t + move_cost(
                        job.job, fleet, old, old_plan, p.plan, p.plan.nodes, settings.scheduler
                    )
                    moves += 1
                else:
                    job.paused_until = t
                job.records = records
                job.nodes = tuple(p.plan.node_ids(fleet)) if p.plan is not None else ()
                job.iteration_s = p.estimate.iteration_s if p.estimate else math.inf
        t += TICK_S
    completion = {
        j.job.name: j.finished_s - j.arrival_s for j in finished if j.finished_s is not None
    }
    return {
        "mean_completion_s": float(np.mean(list(completion.values()))),
        "jobs": len(completion),
        "moves": moves,
        "completion_s": completion,
    }


# --- (b) one job after another, best of A, B, C ---------------------------------------------------


def run_sequential(
    inventory: pd.DataFrame, links: pd.DataFrame, work: Workload, settings: Settings
) -> dict:
    fleets: dict[tuple[int, ...], Fleet] = {}

    def fleet_at(t: float) -> Fleet:
        down = tuple(sorted(down_at(work.outages, t)))
        if down not in fleets:
            fleets[down] = Fleet.from_frames(
                with_down(inventory, set(down)),
                links,
                settings.hardware,
                settings.graph.bandwidth_tiers,
            )
        return fleets[down]

    boundaries = sorted({o.start_s for o in work.outages} | {o.end_s for o in work.outages})
    t = 0.0
    completion = []
    for arrival in work.arrivals:
        t = max(t, arrival.at_s)
        left = float(arrival.job.iterations or 0)
        while left > 0:
            costs = whole_fleet_baselines(arrival.job, fleet_at(t))[0]
            best = min((c.iteration_s for c in costs.values() if c.feasible), default=math.inf)
            nxt = next((b for b in boundaries if b > t), math.inf)
            need = left * best
            if t + need <= nxt:
                t += need
                left = 0
            else:  # the fleet changes: a restart on the fleet as it is then
                left -= (nxt - t) / best
                t = nxt + settings.scheduler.restart_overhead_s
        completion.append(t - arrival.at_s)
    return {"mean_completion_s": float(np.mean(completion)), "jobs": len(completion)}


# --- 1,000 machines: scheduling time ------------------------------------------------------------


def run_big(settings: Settings, seed: int, fleet_preset: str = "synthetic-1000") -> dict:
    """Four assign runs on a large fleet (`fleet_preset`, drawn with `settings.generate`) with 20
    jobs in the store: half the jobs (they start together), all of them, then two quiet runs."""
    inventory = build_fleet(fleet_preset, seed, settings.generate)
    links = expected_links(inventory, seed, settings.generate)
    rng = np.random.default_rng(seed)
    names = list(MIX)
    jobs = []
    for k in range(20):
        preset = PRESET_JOBS[names[int(rng.integers(len(names)))]]
        jobs.append(
            Job(
                **{
                    **preset.__dict__,
                    "name": f"{preset.name}-{k:02d}",
                    "iterations": int(rng.integers(100, 100_000)),
                }
            )
        )
    with tempfile.TemporaryDirectory(prefix="hulk-bench-sched-big-") as tmp:
        data = Path(tmp) / "data"
        fileio.write_csv(
            data / schemas.INVENTORY_FILE, schemas.conform(inventory, schemas.INVENTORY)
        )
        fileio.write_parquet(data / schemas.LINKS_FILE, schemas.conform(links, schemas.LINKS))
        jobs_file = data / "jobs" / "upcoming.yaml"
        scheduling, steps = [], []
        for tick in range(4):  # half the jobs, then all, then two quiet runs
            fileio.write_text(jobs_file, dump_jobs(jobs[: 10 if tick == 0 else 20]))
            clock = time.perf_counter()
            result = assign_stage.run(
                data,
                settings,
                jobs_file=jobs_file,
                strategy="teacher",
                out_dir=data / "placements",
                seed=seed,
                now=START + dt.timedelta(seconds=tick * TICK_S),
            )
            steps.append(time.perf_counter() - clock)
            assert result.summary.queue is not None
            scheduling.append(result.summary.queue.scheduling_s)
    return {"machines": len(inventory), "scheduling_s": scheduling, "step_s": steps}


def _big_runs(settings: Settings, seed: int, big_params: Path | None) -> dict:
    """`run_big` on synthetic-1000, or on the fleet and settings of `big_params`."""
    if big_params is None:
        return run_big(settings, seed)
    big_settings = load_settings(big_params)
    return run_big(big_settings, seed, big_settings.generate.preset)


def _report_big(big: dict) -> dict[str, bool]:
    """Print the large-fleet runs; the 10 s target is checked up to 1,000 machines."""
    scheduling = ", ".join(f"{s:.2f}" for s in big["scheduling_s"])
    whole = ", ".join(f"{s:.1f}" for s in big["step_s"])
    target = " (target ≤ 10 s)" if big["machines"] <= 1000 else ""
    print(f"{big['machines']:,} machines: scheduling {scheduling} s{target}; whole step {whole} s")
    if big["machines"] > 1000:
        return {}
    return {"scheduling ≤ 10 s per run at 1,000 machines": max(big["scheduling_s"]) <= 10.0}


def with_overrides(settings: Settings, overrides: dict[str, object]) -> Settings:
    """`settings` with some of its ``scheduler`` settings replaced, validated as params.yaml's."""
    if not overrides:
        return settings
    from hulk.settings import SchedulerSettings

    scheduler = SchedulerSettings.model_validate({**settings.scheduler.model_dump(), **overrides})
    return settings.model_copy(update={"scheduler": scheduler})


def parse_override(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` (the value read as YAML: ``0.003``, ``6``)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set wants KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def run_seed(
    seed: int,
    params: Path,
    days: float,
    overrides: dict[str, object] | None = None,
    hulk_only: bool = False,
    week: int = 0,
) -> dict:
    """Hulk, (a) and (b) on one draw of the default fleet and its `week` of arrivals (Hulk
    alone with `hulk_only`; Hulk's scheduler settings with `overrides`)."""
    settings = load_settings(params)
    inventory = schemas.conform(
        build_fleet(settings.generate.preset, seed, settings.generate), schemas.INVENTORY
    )
    links = schemas.conform(expected_links(inventory, seed, settings.generate), schemas.LINKS)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    work = workload(fleet, settings, seed, days, week)
    clock = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hulk-bench-sched-") as tmp:
        data = Path(tmp) / "data"
        fileio.write_parquet(data / schemas.LINKS_FILE, links)
        hulk = run_hulk(data, inventory, work, with_overrides(settings, overrides or {}), seed)
    hulk["wall_s"] = time.perf_counter() - clock
    plans = whole_fleet_plans(fleet, work, settings)
    alone = alone_mean_s(work, plans)
    fastest, fastest_load = fastest_kind_load(work, plans, fleet)
    kinds = {
        "fastest_machines": fastest,
        "fastest_offered_load": fastest_load,
        "alone_without_fastest_s": alone_without_fastest_s(work, fleet, settings),
    }
    if hulk_only:
        return {
            "seed": seed,
            "week": week,
            "arrivals": len(work.arrivals),
            "cannot_hold": work.cannot_hold,
            "alone_mean_completion_s": alone,
            **kinds,
            "hulk": hulk,
            "by_model": by_model(work, plans, hulk),
        }
    clock = time.perf_counter()
    today = run_replace(inventory, links, work, settings, seed)
    today["wall_s"] = time.perf_counter() - clock
    sequential = run_sequential(inventory, links, work, settings)
    vs_a = today["mean_completion_s"] / hulk["mean_completion_s"]
    vs_b = sequential["mean_completion_s"] / hulk["mean_completion_s"]
    return {
        "seed": seed,
        "week": week,
        "arrivals": len(work.arrivals),
        "cannot_hold": work.cannot_hold,
        "outages": len(work.outages),
        "machines": fleet.n,
        "offered_load": offered_load(work, plans, len(fleet.active_indices())),
        "alone_mean_completion_s": alone,
        **kinds,
        "ceiling_vs_replaced": today["mean_completion_s"] / alone,
        "hulk": hulk,
        "replaced": today,
        "sequential": sequential,
        "vs_replaced": vs_a,
        "vs_sequential": vs_b,
        "by_model": by_model(work, plans, hulk, today),
    }


def _hours(s: float) -> str:
    return f"{s / 3600:,.1f} h"


def _without(s: float | None) -> str:
    """`alone_without_fastest_s` as hours ("one kind": the fleet has no other kind)."""
    if s is None:
        return "one kind"
    return _hours(s) if math.isfinite(s) else "some never fit"


def _draw(run: dict) -> str:
    """A run's seed, and its week when not the seed's default one."""
    week = run.get("week", 0)
    return f"{run['seed']}" if not week else f"{run['seed']} w{week}"


def _report(run: dict, days: float) -> dict[str, bool]:
    """Print one seed's comparison; its checks."""
    hulk, today, sequential = run["hulk"], run["replaced"], run["sequential"]
    vs_a, vs_b = run["vs_replaced"], run["vs_sequential"]
    print(
        f"{run['arrivals']} jobs over {days:g} days, {run['outages']} outages, "
        f"{run['machines']} machines, offered load {run['offered_load']:.2f} "
        f"({run['fastest_offered_load']:.2f} on the {run['fastest_machines']} of the fastest kind)"
    )
    if run["cannot_hold"]:
        print(
            f"left out: {len(run['cannot_hold'])} jobs no plan on the whole fleet holds "
            f"({', '.join(run['cannot_hold'])})"
        )
    print(f"{'policy':<34}{'mean completion':>18}{'jobs':>6}")
    for name, result in (
        ("Hulk scheduler", hulk),
        ("(a) re-placed from scratch", today),
        ("(b) one after another, best ABC", sequential),
    ):
        print(f"{name:<34}{_hours(result['mean_completion_s']):>18}{result['jobs']:>6}")
    print(f"Hulk vs (a): {vs_a:.2f}x   Hulk vs (b): {vs_b:.2f}x   (target ≥ 1.5x both)")
    _report_models(run["by_model"])
    print(
        f"every job alone on the whole fleet from its arrival: "
        f"{_hours(run['alone_mean_completion_s'])}, so no schedule of the planner's plans beats "
        f"(a) by more than {run['ceiling_vs_replaced']:.2f}x on these arrivals"
    )
    print(f"every job alone without the fastest kind: {_without(run['alone_without_fastest_s'])}")
    gain, failure = hulk["moves_for_gain"], hulk["restarts_after_failure"]
    print(f"running jobs moved: Hulk {gain} for a gain, {failure} after a failure; ", end="")
    print(f"(a) {today['moves']} moves")
    print(f"assign runs: {hulk['runs']}; scheduling max {hulk['scheduling_s_max']:.2f} s, ", end="")
    print(f"mean {hulk['scheduling_s_mean']:.2f} s (target ≤ 2 s); ", end="")
    print(f"whole step max {hulk['step_s_max']:.2f} s, mean {hulk['step_s_mean']:.2f} s")
    error = hulk["first_estimate_error_h"]
    if error["jobs"]:
        print(
            f"first published finish vs finish: mean {error['mean']:+.1f} h, mean absolute "
            f"{error['mean_abs']:.1f} h, {error['within_1h']:.0%} of jobs within 1 h"
        )
    print(
        f"machines held by two running jobs at once: {hulk['shared_machine_runs']} (run × machine)"
    )
    return {
        "mean completion ≥ 1.5× better than (a) and (b)": vs_a >= 1.5 and vs_b >= 1.5,
        "no machine held by two running jobs": hulk["shared_machine_runs"] == 0,
        f"scheduling ≤ 2 s per run at {run['machines']} machines": hulk["scheduling_s_max"] <= 2.0,
    }


def _report_models(rows: list[dict]) -> None:
    """The mean completion per model of the mix: alone, Hulk (its wait), (a)."""
    print(f"{'by model':<16}{'jobs':>5}{'alone':>9}{'Hulk':>9}{'(waited)':>10}{'(a)':>9}")
    for row in rows:
        replaced = _hours(row["replaced_s"]) if "replaced_s" in row else ""
        print(
            f"{row['model']:<16}{row['jobs']:>5}{_hours(row['alone_s']):>9}"
            f"{_hours(row['hulk_s']):>9}{'(' + _hours(row['hulk_wait_s']) + ')':>10}"
            f"{replaced:>9}"
        )


def _summary(label: str, runs: list[dict]) -> None:
    """The ratios against (a) over `runs`: geometric mean, lowest, how many meet the target."""
    ratios = np.array([run["vs_replaced"] for run in runs])
    passed = sum(run["vs_replaced"] >= 1.5 and run["vs_sequential"] >= 1.5 for run in runs)
    print(
        f"vs (a), {label} ({len(runs)}): geometric mean {np.exp(np.log(ratios).mean()):.2f}x, "
        f"lowest {ratios.min():.2f}x; the 1.5x target met on {passed} of {len(runs)}"
    )
    out_of_reach = [_draw(run) for run in runs if run["ceiling_vs_replaced"] < 1.5]
    if out_of_reach:
        print(
            f"  out of reach of any schedule (every job alone from its arrival is less than 1.5x "
            f"better than (a)): {', '.join(out_of_reach)}"
        )


def _report_hulk_only(
    runs: list[dict], days: float, overrides: dict[str, object], preset: str
) -> None:
    """Hulk's mean completion per seed, beside (a)'s from the last full run that had the seed
    (its days and fleet preset must match); nothing is written."""
    recorded: dict[str, float] = {}
    last = ROOT / "bench" / "out" / "scheduler.json"
    if last.exists():
        record = json.loads(last.read_text())
        if record.get("days") == days and record.get("preset") == preset:
            recorded = {
                _draw(row): float(row["replaced_mean_completion_s"])
                for row in record.get("seeds", [])
            }
    changed = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "params.yaml as it is"
    print(f"Hulk alone, {days:g} days, scheduler: {changed}")
    # "fast": the offered load on the fleet's fastest kind of machine; "no fastest": every job
    # alone without it.
    header = (
        f"{'seed':>7}{'jobs':>6}{'fast':>6}{'Hulk':>10}{'alone':>9}{'no fastest':>11}{'(a)':>10}"
    )
    print(f"{header}{'vs (a)':>8}{'moves':>7}{'shared':>8}{'sched max':>11}")
    for run in runs:
        hulk = run["hulk"]
        mean = hulk["mean_completion_s"]
        replaced = recorded.get(_draw(run))
        cells = ("", "") if replaced is None else (_hours(replaced), f"{replaced / mean:.2f}x")
        print(
            f"{_draw(run):>7}{run['arrivals']:>6}{run['fastest_offered_load']:>6.2f}"
            f"{_hours(mean):>10}{_hours(run['alone_mean_completion_s']):>9}"
            f"{_without(run['alone_without_fastest_s']):>11}{cells[0]:>10}{cells[1]:>8}"
            f"{hulk['moves_for_gain']:>7}{hulk['shared_machine_runs']:>8}"
            f"{hulk['scheduling_s_max']:>9.2f} s"
        )
    for run in runs:
        if run.get("cannot_hold"):
            print(f"{_draw(run)}: left out, no plan holds them: {', '.join(run['cannot_hold'])}")
    print(f"seed {_draw(runs[0])}:")
    _report_models(runs[0]["by_model"])


def _draws(
    parser: argparse.ArgumentParser, args: argparse.Namespace, seed: int
) -> list[tuple[int, int]]:
    """The (seed, week) draws the arguments name: the seed's default week first."""
    if args.only_weeks is None:
        seeds = [seed, *(s for s in args.seeds or [] if s != seed)]
        return [(s, 0) for s in seeds] + [(seed, week) for week in range(1, args.weeks + 1)]
    if not args.hulk_only:
        parser.error("--only-weeks needs --hulk-only (a full run records the default week)")
    if args.seeds or args.weeks:
        parser.error("--only-weeks replaces --seeds and --weeks: give one or the other")
    if any(week < 0 for week in args.only_weeks):
        parser.error("--only-weeks: weeks are counted from 0 (the default week)")
    return [(seed, week) for week in dict.fromkeys(args.only_weeks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--seeds",
        type=lambda text: [int(v) for v in text.split(",")],
        default=None,
        help="more draws of the default fleet and its week (comma-separated), after --seed",
    )
    parser.add_argument(
        "--weeks",
        type=int,
        default=0,
        help="more weeks of arrivals and outages on the default fleet itself, after the seeds",
    )
    parser.add_argument(
        "--only-weeks",
        type=lambda text: [int(v) for v in text.split(",")],
        default=None,
        help="with --hulk-only: only these weeks of the default fleet (comma-separated; 0 is "
        "the default week), instead of the seeds and --weeks",
    )
    parser.add_argument("--workers", type=int, default=1, help="weeks run side by side")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument(
        "--big-params",
        type=Path,
        default=None,
        help="the large-fleet runs on this params file's generate.preset and settings instead "
        "of synthetic-1000 (bench/params-sites-10000.yaml: 10,000 machines)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        type=parse_override,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scheduler setting (params.yaml scheduler.KEY) for Hulk's runs; repeatable",
    )
    parser.add_argument(
        "--hulk-only",
        action="store_true",
        help="only Hulk's week per seed, beside (a) from bench/out/scheduler.json",
    )
    parser.add_argument(
        "--big-only",
        action="store_true",
        help="only the large-fleet runs (no week; nothing is written)",
    )
    args = parser.parse_args()
    settings = load_settings(args.params)
    overrides = dict(args.overrides)
    try:
        with_overrides(settings, overrides)
    except ValueError as error:
        parser.error(f"--set: {error}")
    seed = settings.seed if args.seed is None else args.seed
    if args.weeks < 0:
        parser.error("--weeks: a count of weeks, 0 or more")
    if args.big_only:
        if args.skip_big:
            parser.error("--big-only and --skip-big: nothing to run")
        checks = _report_big(_big_runs(settings, seed, args.big_params))
        for name, ok in checks.items():
            print(f"{'PASS' if ok else 'FAIL'}  {name}")
        return
    draws = _draws(parser, args, seed)
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        runs = list(
            pool.map(
                run_seed,
                [s for s, _ in draws],
                [args.params] * len(draws),
                [args.days] * len(draws),
                [overrides] * len(draws),
                [args.hulk_only] * len(draws),
                [week for _, week in draws],
            )
        )
    if args.hulk_only:
        _report_hulk_only(runs, args.days, overrides, settings.generate.preset)
        return
    big = None if args.skip_big else _big_runs(settings, seed, args.big_params)

    checks = _report(runs[0], args.days)
    if len(runs) > 1:
        checks["no machine held by two running jobs"] = all(
            run["hulk"]["shared_machine_runs"] == 0 for run in runs
        )
    if big is not None:
        checks.update(_report_big(big))
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    if len(runs) > 1:
        # One week of arrivals is a noisy judge of a policy: the same code on other draws.
        # "alone": every job alone on the whole fleet from its arrival; "at most": (a) over it;
        # "fast": the offered load on the fleet's fastest kind of machine.
        header = f"{'seed':>7}{'jobs':>6}{'load':>6}{'fast':>6}{'Hulk':>10}{'(a)':>10}{'alone':>9}"
        print(f"\n{header}{'vs (a)':>8}{'at most':>9}{'vs (b)':>8}{'moves':>7}{'shared':>8}")
        for run in runs:
            print(
                f"{_draw(run):>7}{run['arrivals']:>6}{run['offered_load']:>6.2f}"
                f"{run['fastest_offered_load']:>6.2f}"
                f"{_hours(run['hulk']['mean_completion_s']):>10}"
                f"{_hours(run['replaced']['mean_completion_s']):>10}"
                f"{_hours(run['alone_mean_completion_s']):>9}"
                f"{run['vs_replaced']:>7.2f}x{run['ceiling_vs_replaced']:>8.2f}x"
                f"{run['vs_sequential']:>7.0f}x"
                f"{run['hulk']['moves_for_gain']:>7}{run['hulk']['shared_machine_runs']:>8}"
            )
        _summary("every week", runs)
        if args.weeks:
            _summary("the default fleet's weeks", [r for r in runs if r["seed"] == seed])
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "seed": seed,
        "days": args.days,
        "preset": settings.generate.preset,
        **{key: runs[0][key] for key in ("hulk", "replaced", "sequential")},
        "big": big,
        "checks": checks,
        "seeds": [
            {key: run[key] for key in run if key not in ("hulk", "replaced", "sequential")}
            | {"hulk_mean_completion_s": run["hulk"]["mean_completion_s"]}
            | {"replaced_mean_completion_s": run["replaced"]["mean_completion_s"]}
            for run in runs
        ],
    }
    (out / "scheduler.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
