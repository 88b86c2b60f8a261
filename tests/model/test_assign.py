"""Assignment strategies and re-planning on tiny fleets (hulk.assign)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hulk import schemas
from hulk.assign import (
    STRATEGIES,
    changed_fleet_frames,
    check_failed,
    makespan,
    place_jobs,
    priority_order,
    replan,
)
from hulk.baselines import system_a, system_b
from hulk.cost import Fleet, iteration_time
from hulk.errors import InputError
from hulk.jobs import Job
from hulk.placements import INFEASIBLE, PLACED, QUEUED, TENSOR, JobPlacement
from hulk.settings import Settings

SETTINGS = Settings()
# 1e8 params, 4 layers: 1.6 GB of state (0.4 GB per layer); 7.2e12 FLOPs per iteration.
SMALL = Job("small", 0.1, 4, 1000, 1000, 12, 2)
# 1e9 params: 16 GB, more than any machine of the tiny fleets below holds.
BIG = Job("big", 1.0, 8, 1000, 1000, 12, 2)


def fleet_of(ids: list[int], memory_gb: list[float], latency_s: float = 0.01) -> Fleet:
    """Machines of 1e14 FLOP/s, every pair linked (latency_s, 100 MB/s)."""
    n = len(ids)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return Fleet.from_arrays(
        np.array(ids),
        np.full(n, 1e14),
        np.array(memory_gb, float) * 1e9,
        np.ones(n, bool),
        np.array([p[0] for p in pairs], np.int64),
        np.array([p[1] for p in pairs], np.int64),
        np.full(len(pairs), latency_s),
        np.full(len(pairs), 1e8),
    )


def two_sites(ids: list[int]) -> Fleet:
    """Eight 2-GB machines: ids[:4] and ids[4:] are two sites, 1 ms inside, 100 ms between."""
    n = len(ids)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    latency = [0.001 if (i < 4) == (j < 4) else 0.1 for i, j in pairs]
    return Fleet.from_arrays(
        np.array(ids),
        np.full(n, 1e14),
        np.full(n, 2e9),
        np.ones(n, bool),
        np.array([p[0] for p in pairs], np.int64),
        np.array([p[1] for p in pairs], np.int64),
        np.array(latency),
        np.full(len(pairs), 1e9),
    )


# --- the whole-fleet baselines as strategies ----------------------------------------------------


def test_priority_then_input_order() -> None:
    jobs = [
        SMALL,
        Job("urgent", 0.1, 4, 1000, 1000, 12, 2, priority=5),
        Job("x", 0.1, 4, 1, 1, 1, 1),
    ]
    assert priority_order(jobs) == [1, 0, 2]


@pytest.mark.parametrize("system", ["A", "B", "C"])
def test_whole_fleet_system_runs_jobs_one_after_another(system: str) -> None:
    fleet = fleet_of([3, 5, 9], [2, 2, 2])
    other = Job("other", 0.05, 4, 1000, 1000, 12, 2, priority=1)
    result = place_jobs([SMALL, other], fleet, system, SETTINGS, seed=0)
    # `other` has the higher priority: it runs first and holds every machine it uses.
    first, second = result[1], result[0]
    assert first.status == PLACED and first.run_order == 1 and first.nodes
    assert first.estimate == first.baselines[system]
    assert first.lower_bound_s == pytest.approx(
        other.flops_per_iteration / (1e14 * len(first.nodes))
    )
    assert second.status == QUEUED and second.run_order == 2
    assert second.nodes == () and second.estimate is None
    assert "'other'" in second.reason and "turn 2 of 2" in second.reason
    assert makespan(result, system) == pytest.approx(
        first.baselines[system].iteration_s + second.baselines[system].iteration_s
    )


def test_system_plans_are_the_baselines_own() -> None:
    fleet = fleet_of([3, 5, 9], [2, 2, 1])
    a, b, c = (place_jobs([SMALL], fleet, s, SETTINGS, 0)[0] for s in "ABC")
    assert a.plan == system_a(SMALL, fleet)[1]  # machines 3 and 5 hold a full replica
    assert a.nodes == (0, 1) and a.shape == "2×1"
    assert b.plan == system_b(SMALL, fleet)[1] and b.shape == "1×3"
    assert c.layout == TENSOR and c.plan is None and c.nodes == (0, 1, 2) and c.shape == "TP×3"


def test_job_a_system_cannot_run_is_infeasible() -> None:
    fleet = fleet_of([3, 5], [1, 1])  # no machine holds the 1.6 GB of a full replica
    placed, *_ = place_jobs([SMALL], fleet, "A", SETTINGS, 0)
    assert placed.status == INFEASIBLE and placed.run_order is None
    assert "System A" in placed.reason
    assert makespan([placed], "A") is None
    # B can: two stages of 0.8 GB.
    assert place_jobs([SMALL], fleet, "B", SETTINGS, 0)[0].status == PLACED


def test_every_job_carries_whole_fleet_baselines() -> None:
    fleet = fleet_of([3, 5, 9], [2, 2, 2])
    for placement in place_jobs([SMALL, BIG], fleet, "B", SETTINGS, 0):
        assert set(placement.baselines) == {"A", "B", "C"}


def test_gnn_without_a_model_names_the_function_that_takes_one() -> None:
    with pytest.raises(InputError, match=r"\[assign\.needs_model\].*hulk\.gnn\.model_placements"):
        place_jobs([SMALL], fleet_of([1], [2]), "gnn", SETTINGS, 0)


def test_unknown_strategy_is_named() -> None:
    with pytest.raises(InputError, match="'D'"):
        place_jobs([SMALL], fleet_of([1], [2]), "D", SETTINGS, 0)
    assert set(STRATEGIES) == {"gnn", "teacher", "A", "B", "C"}


# --- the teacher ----------------------------------------------------------------------------------


def test_teacher_places_jobs_on_disjoint_machines() -> None:
    fleet = two_sites(list(range(8)))
    jobs = [Job("left", 0.1, 4, 1000, 1000, 12, 2), Job("right", 0.1, 4, 1000, 1000, 12, 2)]
    result = place_jobs(jobs, fleet, "teacher", SETTINGS, seed=0)
    assert [p.status for p in result] == [PLACED, PLACED]
    first, second = (set(p.nodes) for p in result)
    assert first and second and not first & second
    for placement in result:
        assert placement.estimate == iteration_time(placement.job, fleet, placement.plan)
        assert placement.lower_bound_s == pytest.approx(
            placement.job.flops_per_iteration / (1e14 * len(placement.nodes))
        )
        assert set(placement.baselines) == {"A", "B", "C"}
    assert makespan(result, "teacher") == max(p.estimate.iteration_s for p in result)
    # Deterministic for a seed.
    assert place_jobs(jobs, fleet, "teacher", SETTINGS, seed=0) == result


def test_teacher_queues_what_does_not_fit_now() -> None:
    fleet = fleet_of([0, 1], [2, 2])
    jobs = [Job(f"job{i}", 0.1, 4, 1000, 1000, 12, 2) for i in range(3)]
    result = place_jobs(jobs, fleet, "teacher", SETTINGS, seed=0)
    assert sorted(p.status for p in result) == [PLACED, PLACED, QUEUED]
    waiting = next(p for p in result if p.status == QUEUED)
    assert waiting.reason and waiting.nodes == () and waiting.estimate is None


def test_teacher_refuses_a_job_the_fleet_can_never_host() -> None:
    with pytest.raises(InputError, match="big"):
        place_jobs([SMALL, BIG], fleet_of([0, 1], [2, 2]), "teacher", SETTINGS, seed=0)


# --- re-planning ----------------------------------------------------------------------------------


def _planned(job: Job, fleet: Fleet, nodes: list[int]) -> JobPlacement:
    from hulk.assign import placed as placed_job
    from hulk.planner import plan_job

    plan, cost = plan_job(job, fleet, nodes, SETTINGS.planner)
    assert plan is not None
    return placed_job(job, fleet, plan, cost)


def _entry(placement: JobPlacement, fleet: Fleet) -> tuple:
    plan = placement.plan.to_records(fleet) if placement.plan else None
    return placement.status, placement.reason, placement.node_ids(fleet), plan


def test_replan_moves_only_the_jobs_on_failed_machines() -> None:
    ids = [100, 101, 102, 103, 104, 105, 106, 107]
    before_fleet = two_sites(ids)
    left = Job("left", 0.1, 4, 1000, 1000, 12, 2)
    right = Job("right", 0.1, 4, 1000, 1000, 12, 2)
    before = [
        _planned(left, before_fleet, [0, 1, 2, 3]),
        _planned(right, before_fleet, [4, 5, 6, 7]),
    ]
    lost = before[0].node_ids(before_fleet)[0]
    after_fleet = two_sites(ids)  # the fleet after: the failed machine is gone
    keep = [i for i, node in enumerate(ids) if node != lost]
    after_fleet = after_fleet.subset(keep)

    after, moves = replan(before, before_fleet, after_fleet, [lost], "teacher", SETTINGS, 0)
    assert _entry(after[1], after_fleet) == _entry(before[1], before_fleet)
    assert after[1].estimate.iteration_s == pytest.approx(before[1].estimate.iteration_s)
    assert after[0].status == PLACED and lost not in after[0].node_ids(after_fleet)
    assert not set(after[0].node_ids(after_fleet)) & set(after[1].node_ids(after_fleet))
    assert after[0].estimate == iteration_time(left, after_fleet, after[0].plan)
    assert [m.job for m in moves] == ["left"]
    assert lost in moves[0].nodes_removed and "lost machine" in moves[0].reason


def test_replan_gives_queued_jobs_the_added_machines() -> None:
    before_fleet = fleet_of([0, 1], [2, 2])
    jobs = [Job(f"job{i}", 0.1, 4, 1000, 1000, 12, 2) for i in range(3)]
    before = [
        _planned(jobs[0], before_fleet, [0]),
        _planned(jobs[1], before_fleet, [1]),
        JobPlacement(jobs[2], QUEUED, "no machine left"),
    ]
    after_fleet = fleet_of([0, 1, 7], [2, 2, 2])
    after, moves = replan(before, before_fleet, after_fleet, [], "teacher", SETTINGS, 0)
    assert [_entry(p, after_fleet)[:3] for p in after[:2]] == [
        _entry(p, before_fleet)[:3] for p in before[:2]
    ]
    assert after[2].status == PLACED and after[2].node_ids(after_fleet) == [7]
    assert [(m.job, m.status_before, m.status_after, m.nodes_added) for m in moves] == [
        ("job2", QUEUED, PLACED, (7,))
    ]


def test_replan_queues_a_job_that_no_longer_fits() -> None:
    before_fleet = fleet_of([0, 1], [2, 2])
    jobs = [Job(f"job{i}", 0.1, 4, 1000, 1000, 12, 2) for i in range(2)]
    before = [_planned(jobs[0], before_fleet, [0]), _planned(jobs[1], before_fleet, [1])]
    after_fleet = fleet_of([0], [2])
    after, moves = replan(before, before_fleet, after_fleet, [1], "teacher", SETTINGS, 0)
    assert after[0].status == PLACED
    assert after[1].status == QUEUED and after[1].nodes == () and after[1].reason
    assert [(m.job, m.nodes_removed) for m in moves] == [("job1", (1,))]


def test_replan_keeps_a_running_job_ahead_of_a_queued_one() -> None:
    before_fleet = fleet_of([0, 1, 2, 3], [2, 2, 2, 2])
    running = Job("running", 0.2, 4, 1000, 1000, 12, 2)  # 3.2 GB: two machines
    other = Job("other", 0.1, 4, 1000, 1000, 12, 2)
    urgent = Job("urgent", 0.2, 4, 1000, 1000, 12, 2, priority=5)  # waits: only 3 is free
    before = [
        _planned(running, before_fleet, [0, 1]),
        _planned(other, before_fleet, [2]),
        JobPlacement(urgent, QUEUED, "needs 3 GB; 2 GB free"),
    ]
    after_fleet = fleet_of([0, 2, 3], [2, 2, 2])
    after, moves = replan(before, before_fleet, after_fleet, [1], "teacher", SETTINGS, 0)
    # By priority alone the urgent job would take machines 0 and 3; the running job goes on.
    assert [p.status for p in after] == [PLACED, PLACED, QUEUED]
    assert after[0].node_ids(after_fleet) == [0, 3]
    assert [(m.job, m.nodes_removed, m.nodes_added) for m in moves] == [("running", (1,), (3,))]


def test_replan_marks_a_job_the_smaller_fleet_cannot_host_infeasible() -> None:
    before_fleet = fleet_of([0, 1], [2, 2])
    wide = Job("wide", 0.2, 4, 1000, 1000, 12, 2)  # 3.2 GB: needs both machines
    before = [_planned(wide, before_fleet, [0, 1])]
    after, moves = replan(before, before_fleet, fleet_of([0], [2]), [1], "teacher", SETTINGS, 0)
    assert after[0].status == INFEASIBLE and "wide" in after[0].reason
    assert [(m.status_before, m.status_after, m.nodes_removed) for m in moves] == [
        (PLACED, INFEASIBLE, (0, 1))
    ]


def test_replan_of_a_whole_fleet_system_reruns_it() -> None:
    before_fleet = fleet_of([0, 1, 2], [2, 2, 2])
    before = place_jobs([SMALL], before_fleet, "B", SETTINGS, 0)
    after_fleet = fleet_of([0, 2], [2, 2])
    after, moves = replan(before, before_fleet, after_fleet, [1], "B", SETTINGS, 0)
    assert after[0].plan == system_b(SMALL, after_fleet)[1]
    assert [(m.job, m.nodes_removed, m.nodes_added) for m in moves] == [("small", (1,), ())]


def test_unknown_failed_machine_is_named() -> None:
    with pytest.raises(InputError, match=r"--fail: node id\(s\) \[42\]"):
        check_failed(fleet_of([0, 1], [2, 2]), [1, 42])


# --- the changed fleet ----------------------------------------------------------------------------


def _inventory(ids: list[int]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "node_id": ids,
            "city": "Tokyo",
            "country": "Japan",
            "lat": 35.7,
            "lon": 139.7,
            "compute_capability": 8.0,
            "gpu_count": 8,
            "memory_gb": 640.0,
            "status": "active",
        }
    )
    return schemas.conform(frame, schemas.INVENTORY)


def _links(pairs: list[tuple[int, int, float]]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "src": [p[0] for p in pairs],
            "dst": [p[1] for p in pairs],
            "samples": 0,
            "loss_rate": 0.0,
            "latency_p50_ms": [p[2] for p in pairs],
            "latency_p95_ms": [p[2] for p in pairs],
            "latency_mean_ms": [p[2] for p in pairs],
            "alpha_ms": [p[2] for p in pairs],
            "beta_gbps": math.nan,
        }
    )
    for column in ("window_start", "window_end"):
        frame[column] = pd.Series(pd.NaT, index=frame.index, dtype=schemas.LINKS[column])
    return schemas.conform(frame, schemas.LINKS)


def test_changed_frames_drop_failed_and_add_new() -> None:
    inventory = _inventory([1, 2, 3])
    links = _links([(1, 2, 5.0), (1, 3, 5.0), (2, 3, 5.0)])
    added = _inventory([4])
    new_links = _links([(3, 4, 1.0), (1, 2, 9.0), (2, 4, 2.0)])
    inv, lk = changed_fleet_frames(inventory, links, [2], added, new_links)
    assert inv["node_id"].tolist() == [1, 3, 4]
    # Links of the failed machine 2 are gone, even the newly measured ones.
    assert list(zip(lk["src"], lk["dst"], lk["latency_p50_ms"], strict=True)) == [
        (1, 3, 5.0),
        (3, 4, 1.0),
    ]


def test_added_link_replaces_the_old_measurement() -> None:
    _, lk = changed_fleet_frames(
        _inventory([1, 2]), _links([(1, 2, 5.0)]), [], None, _links([(2, 1, 7.0)])
    )
    assert lk["latency_p50_ms"].tolist() == [7.0]


def test_added_machine_without_links_is_an_error() -> None:
    with pytest.raises(InputError, match=r"added machine\(s\) \[4\] have no link"):
        changed_fleet_frames(_inventory([1, 2]), _links([(1, 2, 5.0)]), [], _inventory([4]), None)
