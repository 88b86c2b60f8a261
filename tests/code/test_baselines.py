"""Systems A, B, C (docs/design.md#baselines): hand-computed tiny fleets and the paper's fleet."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hulk.baselines import (
    baselines,
    best_baseline_floor,
    best_baseline_seconds,
    system_a,
    system_b,
    system_c,
)
from hulk.cost import Fleet, Plan, iteration_time, lower_bound
from hulk.importer import import_hulk
from hulk.jobs import PAPER_MIX_4, PRESET_JOBS, Job
from hulk.planner import site_labels
from hulk.settings import Settings
from tests.fleets import fleet_of

# 1e8 params, 4 layers, hidden 1000, seq 1000, global batch 12, micro-batch 2:
#   state 16 × 1e8 = 1.6 GB; activation 2 × 1000 × 1000 × 2 = 4e6 bytes;
#   FLOPs per layer per micro-batch 6 × (1e8 / 4) × 2 × 1000 = 3e11; work 7.2e12 per iteration.
JOB = Job("tiny", 0.1, 4, 1000, 1000, 12, 2)
LINKS = {(0, 1): (0.01, 1e8), (1, 2): (0.02, 5e7), (0, 2): (0.03, 1e8)}


def tiny_fleet() -> Fleet:
    # Machine 2 has 1 GB: too small for a full replica (1.6 GB), big enough for a stage.
    return fleet_of([1e14, 2e14, 1e14], [2.0, 2.0, 1.0], LINKS)


def test_system_a_hand_computed() -> None:
    cost, plan = system_a(JOB, tiny_fleet())
    # Replicas on machines 0 and 1 (2 GB ≥ 1.6 GB); D = 2, m = ceil(12 / 2 / 2) = 3.
    # Replica time m × 4 × 3e11 / F: 3 × 0.012 = 0.036 (machine 0), 3 × 0.006 (machine 1).
    # Gradient 2 × 1e8 bytes over 0–1: 2 × 1 × 0.01 + 2 × 1/2 × 2e8 / 1e8 = 2.02.
    assert cost.feasible
    assert cost.compute_s == pytest.approx(0.036)
    assert cost.comm_s == pytest.approx(2.02)
    assert cost.iteration_s == pytest.approx(2.056)
    assert plan is not None and [r[0].node for r in plan.replicas] == [0, 1]
    assert iteration_time(JOB, tiny_fleet(), plan) == cost


def test_system_b_hand_computed() -> None:
    cost, plan = system_b(JOB, tiny_fleet())
    # Layers 2, 1, 1 on machines 0, 1, 2; D = 1, m = 6.
    # t = 2 × 3e11 / 1e14 = 0.006, 3e11 / 2e14 = 0.0015, 3e11 / 1e14 = 0.003 (Σ 0.0105)
    # c = 2 × (0.01 + 4e6 / 1e8) = 0.1, 2 × (0.02 + 4e6 / 5e7) = 0.2
    # T_pp = 0.0105 + 0.3 + 5 × max(0.006, 0.2) = 1.3105; compute 0.0105 + 5 × 0.006 = 0.0405
    assert cost.feasible
    assert cost.iteration_s == pytest.approx(1.3105)
    assert cost.compute_s == pytest.approx(0.0405)
    assert cost.comm_s == pytest.approx(1.27)
    assert plan == Plan.from_arrays(np.array([[0, 1, 2]]), [2, 1, 1])


def test_system_c_hand_computed() -> None:
    cost, plan = system_c(JOB, tiny_fleet())
    # compute = 7.2e12 / (3 × 1e14) = 0.024; m = 6; ring of three: α_max 0.03, β_min 5e7.
    # one all-reduce of 4e6 bytes: 2 × 2 × 0.03 + 2 × 2/3 × 4e6 / 5e7 = 0.12 + 0.10667
    # comm = 4 layers × 6 micro-batches × 4 all-reduces × 0.226667 = 21.76
    assert plan is None and cost.feasible
    assert cost.compute_s == pytest.approx(0.024)
    assert cost.comm_s == pytest.approx(96 * (0.12 + 0.4 / 3.75))
    assert cost.iteration_s == pytest.approx(0.024 + 21.76)


def test_b_uses_the_first_machines_in_id_order_and_skips_drained_ones() -> None:
    # Five machines, one drained, a 2-layer job: the first two active machines (0 and 2).
    fleet = fleet_of(
        [1e14] * 5,
        [2.0] * 5,
        {(i, j): (0.01, 1e8) for i in range(5) for j in range(i + 1, 5)},
        active=[True, False, True, True, True],
    )
    job = Job("two", 0.1, 2, 1000, 1000, 12, 2)
    cost, plan = system_b(job, fleet)
    assert cost.feasible and plan == Plan.from_arrays(np.array([[0, 2]]), [1, 1])
    # A: replicas on every active machine that holds 1.6 GB, not the drained one.
    _, plan_a = system_a(job, fleet)
    assert plan_a is not None and sorted(plan_a.nodes) == [0, 2, 3, 4]


def test_infeasible_systems_say_why() -> None:
    # Every machine has 0.5 GB: no full replica (1.6 GB); B's 2-layer stage needs 0.8 GB;
    # C needs 1.6 / 3 = 0.53 GB per machine.
    fleet = fleet_of([1e14] * 3, [0.5] * 3, LINKS)
    costs = baselines(JOB, fleet)
    assert not any(c.feasible for c in costs.values())
    assert "no active machine holds the whole model" in costs["A"].reason
    assert "0.8 GB" in costs["B"].reason
    assert "0.5 GB" in costs["C"].reason and "3 machines" in costs["C"].reason
    assert all(math.isinf(c.iteration_s) for c in costs.values())
    # With 0.6 GB per machine C fits (0.53 GB each) while A and B still do not.
    assert baselines(JOB, fleet_of([1e14] * 3, [0.6] * 3, LINKS))["C"].feasible


def test_unreachable_machines_make_every_system_infeasible() -> None:
    fleet = fleet_of([1e14] * 4, [2.0] * 4, {(0, 1): (0.01, 1e8), (2, 3): (0.01, 1e8)})
    for name, cost in baselines(JOB, fleet).items():
        assert not cost.feasible, name
        assert "cannot reach" in cost.reason, name


def test_no_active_machine() -> None:
    fleet = fleet_of([1e14], [2.0], {}, active=[False])
    for cost in baselines(JOB, fleet).values():
        assert not cost.feasible and "no active machine" in cost.reason


def test_paper_fleet_mix_of_four(hulk47: Path) -> None:
    settings = Settings()
    imported = import_hulk(hulk47 / "node_feature.csv", hulk47 / "edge.txt")
    fleet = Fleet.from_frames(
        imported.inventory, imported.links, settings.hardware, settings.graph.bandwidth_tiers
    )
    assert fleet.n == 47 and len(set(fleet.component)) == 1
    for name in PAPER_MIX_4:
        job = PRESET_JOBS[name]
        costs = baselines(job, fleet)
        best = lower_bound(job, fleet, range(fleet.n))
        for system, cost in costs.items():
            if cost.feasible:
                assert cost.iteration_s >= best, (name, system)
                assert cost.comm_s >= 0 and cost.compute_s > 0, (name, system)
        # Tensor parallelism over WAN links is far slower than either other system.
        fastest = min(costs["A"].iteration_s, costs["B"].iteration_s)
        assert costs["C"].feasible and costs["C"].iteration_s > 100 * fastest, name
    # No machine holds OPT-175B's 2.8 TB state; the largest has 640 GB.
    opt = baselines(PRESET_JOBS["OPT-175B"], fleet)
    assert not opt["A"].feasible and "2800 GB" in opt["A"].reason
    assert opt["B"].feasible


def _best_of(costs: dict) -> float | None:
    feasible = [c.iteration_s for c in costs.values() if c.feasible]
    return min(feasible) if feasible else None


def test_best_baseline_is_the_least_of_the_three() -> None:
    fleet = tiny_fleet()
    for job in (JOB, Job("wide", 0.1, 4, 1000, 1000, 96, 2), Job("big", 0.2, 4, 1000, 1000, 12, 2)):
        assert best_baseline_seconds(job, fleet) == pytest.approx(_best_of(baselines(job, fleet)))
    drained = fleet_of([1e14] * 3, [2.0] * 3, LINKS, active=[False] * 3)
    assert best_baseline_seconds(JOB, drained) is None
    assert best_baseline_floor(JOB, drained) == 0.0


def test_best_baseline_floor_is_a_lower_bound() -> None:
    fleet = tiny_fleet()
    jobs = (JOB, Job("wide", 0.1, 4, 1000, 1000, 96, 2), Job("big", 0.2, 4, 1000, 1000, 12, 2))
    for job in jobs:
        floor, best = best_baseline_floor(job, fleet), best_baseline_seconds(job, fleet)
        assert 0 < floor <= best, job.name
    # B wins for JOB (1.3105 s against A 2.056 s, C 21.78 s): the floor is B's exact time.
    assert best_baseline_floor(JOB, fleet) == system_b(JOB, fleet)[0].iteration_s == 1.3105


def test_best_baseline_on_the_paper_fleet_skips_hopeless_rings(hulk47: Path) -> None:
    settings = Settings()
    imported = import_hulk(hulk47 / "node_feature.csv", hulk47 / "edge.txt")
    fleet = Fleet.from_frames(
        imported.inventory, imported.links, settings.hardware, settings.graph.bandwidth_tiers
    )
    sites = site_labels(fleet, settings.planner.site_latency_ms)
    for name in PRESET_JOBS:
        job = PRESET_JOBS[name]
        best = _best_of(baselines(job, fleet))
        assert best_baseline_seconds(job, fleet) == best, name
        assert best_baseline_seconds(job, fleet, sites) == best, name
        assert best_baseline_floor(job, fleet) <= best, name
    fresh = Fleet.from_frames(
        imported.inventory, imported.links, settings.hardware, settings.graph.bandwidth_tiers
    )
    best_baseline_seconds(PRESET_JOBS["OPT-175B"], fresh)
    assert not fresh._rings  # C over 47 machines loses to B on its bound: no ring ordered
