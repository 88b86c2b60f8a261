"""Cost model (docs/design.md#cost-model), jobs: hand-computed figures, relays, feasibility."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hulk.cost import (
    Cost,
    Fleet,
    Plan,
    Stage,
    allreduce_floor,
    allreduce_group_bound,
    allreduce_lower_bound,
    allreduce_time,
    check_plan,
    even_split,
    iteration_time,
    lower_bound,
    makespan_concurrent,
    makespan_sequential,
    pipeline_time,
    plan_time,
    ring_bottleneck,
    ring_order,
)
from hulk.errors import InputError
from hulk.jobs import PAPER_MIX_4, PAPER_MIX_6, PRESET_JOBS, Job, dump_jobs, load_jobs
from hulk.settings import Settings
from tests.fleets import fleet_of

# --- fleet ------------------------------------------------------------------------------------


def _inventory(statuses: list[str]) -> pd.DataFrame:
    n = len(statuses)
    return pd.DataFrame(
        {
            "node_id": [30, 10, 20, 40][:n],
            "city": ["c"] * n,
            "country": ["x"] * n,
            "lat": [0.0] * n,
            "lon": [0.0] * n,
            "compute_capability": [8.0, 8.6, 7.0, 6.1][:n],
            "gpu_count": [8, 4, 8, 8][:n],
            "memory_gb": [640.0, 96.0, 384.0, 64.0][:n],
            "status": statuses,
        }
    ).astype({"city": "string", "country": "string", "status": "string"})


def _links(rows: list[tuple[int, int, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "src": [r[0] for r in rows],
            "dst": [r[1] for r in rows],
            "samples": 10,
            "loss_rate": 0.0,
            "latency_p50_ms": [r[2] for r in rows],
            "latency_p95_ms": [r[2] for r in rows],
            "latency_mean_ms": [r[2] for r in rows],
            "alpha_ms": [r[2] for r in rows],
            "beta_gbps": [r[3] for r in rows],
            "window_start": pd.NaT,
            "window_end": pd.NaT,
        }
    )


def test_fleet_from_frames_orders_by_node_id_and_converts_units() -> None:
    settings = Settings()
    # 10–20: 5 ms with a fitted 8 Gbit/s; 20–30: 30 ms, no fit → tier "≤ 100 ms" = 1 Gbit/s.
    links = _links([(10, 20, 5.0, 8.0), (20, 30, 30.0, np.nan)])
    inventory = _inventory(["active", "active", "drained", "active"])
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)

    assert fleet.node_ids.tolist() == [10, 20, 30, 40]
    # F = gpus × peak × 0.4 × 1e12: 4 × 71, 8 × 125, 8 × 312, 8 × 11.3.
    expected = np.array([4 * 71, 8 * 125, 8 * 312, 8 * 11.3]) * 0.4 * 1e12
    np.testing.assert_allclose(fleet.compute_flops, expected)
    np.testing.assert_allclose(fleet.memory_bytes, np.array([96, 384, 640, 64]) * 1e9)
    assert fleet.active.tolist() == [True, False, True, True]
    assert fleet.latency_s[0, 1] == pytest.approx(0.005)
    assert fleet.bandwidth_Bps[0, 1] == pytest.approx(1e9)  # 8 Gbit/s = 1e9 bytes/s
    assert fleet.bandwidth_Bps[1, 2] == pytest.approx(0.125e9)  # tier: 1 Gbit/s
    # 10 → 30 has no link: relay through 20, latency 5 + 30 ms, bottleneck 1 Gbit/s.
    assert fleet.relayed[0, 2] and fleet.relayed[2, 0] and not fleet.relayed[0, 1]
    assert fleet.latency_s[0, 2] == pytest.approx(0.035)
    assert fleet.bandwidth_Bps[0, 2] == pytest.approx(0.125e9)
    # 40 has no link at all: unreachable.
    assert math.isinf(fleet.latency_s[0, 3]) and fleet.bandwidth_Bps[0, 3] == 0
    assert not fleet.reachable(0, 3) and fleet.reachable(0, 2)
    assert fleet.latency_s[1, 1] == 0 and math.isinf(fleet.bandwidth_Bps[1, 1])
    assert fleet.index_of([40, 10]).tolist() == [3, 0]
    with pytest.raises(KeyError, match="99"):
        fleet.index_of([99])


def test_fleet_rejects_links_to_unknown_machines() -> None:
    settings = Settings()
    with pytest.raises(InputError, match=r"links\.unknown_machine"):
        Fleet.from_frames(
            _inventory(["active", "active"]),
            _links([(10, 99, 5.0, np.nan)]),
            settings.hardware,
            settings.graph.bandwidth_tiers,
        )


def test_relay_takes_lowest_latency_path_and_its_bottleneck() -> None:
    # A=0, B=1, C=2, D=3. No A–C link. A–B–C: 10 + 25 = 35 ms, bottleneck 2e8.
    # A–D–C: 20 + 20 = 40 ms with 1e10 everywhere: wider but slower, so not chosen.
    fleet = fleet_of(
        [1.0] * 4,
        [1.0] * 4,
        {
            (0, 1): (0.010, 1e9),
            (1, 2): (0.025, 2e8),
            (0, 3): (0.020, 1e10),
            (3, 2): (0.020, 1e10),
        },
    )
    assert fleet.relayed[0, 2]
    assert fleet.latency_s[0, 2] == pytest.approx(0.035)
    assert fleet.bandwidth_Bps[0, 2] == pytest.approx(2e8)
    assert fleet.bandwidth_Bps[2, 0] == pytest.approx(2e8)


def test_direct_link_is_used_even_when_a_relay_is_faster() -> None:
    fleet = fleet_of(
        [1.0] * 3,
        [1.0] * 3,
        {(0, 1): (0.01, 1e9), (1, 2): (0.01, 1e9), (0, 2): (0.5, 1e7)},
    )
    assert not fleet.relayed[0, 2]
    assert fleet.latency_s[0, 2] == pytest.approx(0.5)
    assert fleet.bandwidth_Bps[0, 2] == pytest.approx(1e7)


def test_subset_keeps_full_fleet_relays() -> None:
    fleet = fleet_of([1.0, 2.0, 3.0], [1.0] * 3, {(0, 1): (0.01, 1e9), (1, 2): (0.02, 5e8)})
    sub = fleet.subset([2, 0])
    assert sub.node_ids.tolist() == [0, 2]
    assert sub.latency_s[0, 1] == pytest.approx(0.03)
    assert sub.bandwidth_Bps[0, 1] == pytest.approx(5e8)
    assert sub.compute_flops.tolist() == [1.0, 3.0]


def test_link_extremes_are_over_distinct_machines() -> None:
    # The diagonal (latency 0, bandwidth inf) must not count; unreachable pairs are inf / 0.
    rng = np.random.default_rng(4)
    for n in (2, 3, 7, 30):
        links = {
            (i, j): (float(rng.uniform(0.001, 0.1)), float(rng.uniform(1e8, 1e10)))
            for i in range(n)
            for j in range(i + 1, n)
            if rng.random() < 0.6 or j == i + 1
        }
        fleet = fleet_of([1.0] * n, [1.0] * n, links)
        off = ~np.eye(n, dtype=bool)
        assert fleet.link_extremes == (
            float(fleet.latency_s[off].min()),
            float(fleet.bandwidth_Bps[off].max()),
        )
        assert fleet.link_extremes[0] > 0 and math.isfinite(fleet.link_extremes[1])
    assert fleet_of([1.0], [1.0], {}).link_extremes == (math.inf, 0.0)


# --- pipelines --------------------------------------------------------------------------------

# 1e9 params, 4 layers, hidden 1000, seq 1000, global batch 8, micro-batch 2:
#   FLOPs per layer per micro-batch = 6 × (1e9 / 4) × 2 × 1000 = 3e12
#   activation = 2 × 1000 × 1000 × 2 = 4e6 bytes; memory need 16e9 bytes.
PIPE_JOB = Job("pipe", 1.0, 4, 1000, 1000, 8, 2)


def test_two_stage_pipeline_hand_computed() -> None:
    fleet = fleet_of([1e14, 1e13], [16.0, 16.0], {(0, 1): (0.01, 1e8)})
    plan = Plan(((Stage(0, 0, 3), Stage(1, 3, 4)),))
    cost = iteration_time(PIPE_JOB, fleet, plan)
    # t0 = 3 × 3e12 / 1e14 = 0.09; t1 = 1 × 3e12 / 1e13 = 0.3
    # c  = 2 × (0.01 + 4e6 / 1e8) = 0.1; m = ceil(8 / 2 / 1) = 4
    # T_pp = 0.09 + 0.3 + 0.1 + (4 − 1) × max(0.3, 0.1) = 1.39; no data parallelism.
    assert cost.feasible and cost.reason is None
    assert cost.iteration_s == pytest.approx(1.39)
    assert cost.compute_s == pytest.approx(0.39 + 3 * 0.3)  # Σ t + (m − 1) max t = 1.29
    assert cost.comm_s == pytest.approx(0.1)
    assert pipeline_time(PIPE_JOB, fleet, [0, 1], [3, 1]) == pytest.approx((1.39, 1.29))


def test_boundary_dominates_the_pipeline_when_the_link_is_slow() -> None:
    fleet = fleet_of([1e14, 1e13], [16.0, 16.0], {(0, 1): (0.01, 1e7)})
    cost = iteration_time(PIPE_JOB, fleet, Plan(((Stage(0, 0, 3), Stage(1, 3, 4)),)))
    # c = 2 × (0.01 + 4e6 / 1e7) = 0.82 > max t = 0.3: T = 0.39 + 0.82 + 3 × 0.82 = 3.67.
    assert cost.iteration_s == pytest.approx(3.67)
    assert cost.compute_s == pytest.approx(1.29)


def test_pipeline_over_a_relayed_pair_uses_relay_latency_and_bottleneck() -> None:
    fleet = fleet_of([1e14, 1e14, 1e13], [16.0] * 3, {(0, 1): (0.004, 1e9), (1, 2): (0.006, 1e8)})
    cost = iteration_time(PIPE_JOB, fleet, Plan(((Stage(0, 0, 3), Stage(2, 3, 4)),)))
    # 0 → 2 via 1: α = 0.01, β = 1e8: the same figures as the two-stage test.
    assert cost.iteration_s == pytest.approx(1.39)


def test_three_node_ring_allreduce_hand_computed() -> None:
    fleet = fleet_of(
        [1e13] * 3,
        [16.0] * 3,
        {(0, 1): (0.01, 1e9), (1, 2): (0.02, 5e8), (0, 2): (0.05, 2e8)},
    )
    # A ring of three uses every pair: α_max = 0.05, β_min = 2e8.
    assert ring_bottleneck(fleet, [2, 0, 1]) == (pytest.approx(0.05), pytest.approx(2e8))
    # 2(D−1) α + 2(D−1)/D × bytes / β = 4 × 0.05 + 4/3 × 6e8 / 2e8 = 0.2 + 4 = 4.2
    assert allreduce_time(fleet, [0, 1, 2], 6e8) == pytest.approx(4.2)

    # 0.3e9 params: gradient 2 × 0.3e9 = 6e8 bytes; 2 layers; m = ceil(6 / 1 / 3) = 2.
    job = Job("ring", 0.3, 2, 100, 1000, 6, 1)
    # t = 2 × 6 × 0.15e9 × 1 × 1000 / 1e13 = 0.18; T_pp = 0.18 + (2 − 1) × 0.18 = 0.36.
    plan = Plan.from_arrays(np.array([[0], [1], [2]]), [2])
    cost = iteration_time(job, fleet, plan)
    assert cost.iteration_s == pytest.approx(0.36 + 4.2)
    assert cost.compute_s == pytest.approx(0.36)
    assert cost.comm_s == pytest.approx(4.2)


def test_two_node_allreduce_and_single_node() -> None:
    fleet = fleet_of([1.0, 1.0], [1.0, 1.0], {(0, 1): (0.01, 1e8)})
    # 2 × 1 × 0.01 + 2 × 1/2 × 1e8 / 1e8 = 1.02
    assert allreduce_time(fleet, [0, 1], 1e8) == pytest.approx(1.02)
    assert allreduce_time(fleet, [1], 1e8) == 0.0


def test_ring_order_improves_nearest_neighbour_with_two_opt() -> None:
    # Points on a line at 0, −4, 7, 1, 9; latency = distance. Nearest neighbour from the first
    # visits 0, 1, −4, 7, 9 and returns: 1 + 5 + 11 + 2 + 9 = 28. The best ring sweeps out
    # and back: 2 × (9 − (−4)) = 26, which 2-opt finds.
    x = np.array([0.0, -4.0, 7.0, 1.0, 9.0])
    links = {(i, j): (abs(x[i] - x[j]), 1.0) for i in range(5) for j in range(i + 1, 5)}
    fleet = fleet_of([1.0] * 5, [1.0] * 5, links)
    ring = ring_order(fleet, [4, 3, 2, 1, 0])
    assert sorted(ring) == [0, 1, 2, 3, 4] and ring[0] == 0
    total = sum(fleet.latency_s[a, b] for a, b in zip(ring, ring[1:] + ring[:1], strict=True))
    assert total == pytest.approx(26.0)


def test_large_ring_is_a_two_opt_local_optimum() -> None:
    # 230 machines in 12 far-apart cities (beyond the full search's 200 nodes). Neighbour lists
    # alone leave improving moves between cities here; the full search that follows does not.
    rng = np.random.default_rng(0)
    cities = rng.random((12, 2)) * 100
    points = cities[rng.integers(0, 12, 230)] + rng.random((230, 2))
    distance = np.hypot(*(points[:, None, :] - points[None, :, :]).transpose(2, 0, 1))
    n = len(points)
    links = {(i, j): (distance[i, j], 1e9) for i in range(n) for j in range(i + 1, n)}
    fleet = fleet_of([1.0] * n, [1.0] * n, links)
    ring = np.array(ring_order(fleet, range(n)))
    assert sorted(ring.tolist()) == list(range(n)) and ring[0] == 0
    nxt = np.roll(ring, -1)
    edge = distance[ring, nxt]
    gain = edge[:, None] + edge[None, :] - distance[np.ix_(ring, ring)] - distance[np.ix_(nxt, nxt)]
    i, j = np.triu_indices(n, k=2)  # two edges that share no node: a 2-opt move
    move = ~((i == 0) & (j == n - 1))
    assert gain[i[move], j[move]].max() <= 1e-9
    assert ring.tolist() == ring_order(fleet_of([1.0] * n, [1.0] * n, links), range(n))


def test_ring_order_avoids_slow_pairs() -> None:
    # A square: sides 1 ms, diagonals 100 ms. The ring walks the sides.
    side, diagonal = 0.001, 0.1
    links = {(0, 1): side, (1, 2): side, (2, 3): side, (3, 0): side, (0, 2): diagonal}
    links[(1, 3)] = diagonal
    fleet = fleet_of([1.0] * 4, [1.0] * 4, {k: (v, 1e9) for k, v in links.items()})
    assert ring_bottleneck(fleet, [0, 2, 1, 3])[0] == pytest.approx(side)


def test_allreduce_lower_bound_never_exceeds_the_ring_and_binds_across_cities() -> None:
    # Four cities of five machines, 1 ms inside a city, 40–100 ms between; bandwidth varies.
    rng = np.random.default_rng(3)
    city = np.repeat(np.arange(4), 5)
    between = np.array([[0, 40, 70, 100], [40, 0, 50, 80], [70, 50, 0, 60], [100, 80, 60, 0]])
    links = {}
    for i in range(20):
        for j in range(i + 1, 20):
            latency = 0.001 if city[i] == city[j] else between[city[i], city[j]] / 1000
            links[(i, j)] = (latency, float(rng.uniform(1e8, 1e9)))
    fleet = fleet_of([1.0] * 20, [1.0] * 20, links)
    for nodes in ([0, 1], [0, 1, 2], list(range(10)), list(range(20)), [0, 5, 10, 15]):
        exact = allreduce_time(fleet, nodes, 1e9) * (1 + 1e-12)
        floor = allreduce_floor(fleet, nodes, 1e9)
        by_city = allreduce_group_bound(fleet, nodes, 1e9, city)
        assert floor <= by_city <= exact and allreduce_lower_bound(fleet, nodes, 1e9) <= exact
    assert allreduce_lower_bound(fleet, [3, 7], 1e9) == pytest.approx(
        allreduce_time(fleet, [3, 7], 1e9)
    )  # two machines: exact
    # Every ring through all four cities crosses at least one 60 ms gap: the spanning-tree
    # bound sees it, where each machine's nearest neighbour (1 ms) would not.
    d = 20
    assert allreduce_lower_bound(fleet, range(d), 0.0) >= 2 * (d - 1) * 0.060 - 1e-12
    assert allreduce_group_bound(fleet, range(d), 0.0, city) >= 2 * (d - 1) * 0.060 - 1e-12
    assert allreduce_floor(fleet, range(d), 0.0) < 2 * (d - 1) * 0.002  # the 1 ms links
    assert allreduce_lower_bound(fleet, [0], 1e9) == 0.0


def test_data_parallel_pipelines_with_shared_split() -> None:
    # Two replicas of the two-stage pipeline; m = ceil(8 / 2 / 2) = 2.
    fleet = fleet_of(
        [1e14, 1e13, 1e14, 1e13],
        [16.0] * 4,
        {(0, 1): (0.01, 1e8), (2, 3): (0.01, 1e8), (0, 2): (0.02, 1e9), (1, 3): (0.03, 5e8)},
    )
    plan = Plan.from_arrays(np.array([[0, 1], [2, 3]]), [3, 1])
    cost = iteration_time(PIPE_JOB, fleet, plan)
    # T_pp = 0.09 + 0.3 + 0.1 + 1 × 0.3 = 0.79 (both replicas).
    # Position 0 (3 layers): 2 × 0.75e9 = 1.5e9 bytes over 0–2: 2 × 0.02 + 1.5e9 / 1e9 = 1.54
    # Position 1 (1 layer): 0.5e9 bytes over 1–3: 2 × 0.03 + 0.5e9 / 5e8 = 1.06
    assert cost.iteration_s == pytest.approx(0.79 + 1.54)
    assert cost.compute_s == pytest.approx(0.39 + 0.3)
    assert plan_time(PIPE_JOB, fleet, np.array([[0, 1], [2, 3]]), [3, 1]) == cost


def test_replicas_with_different_splits_sync_per_layer_range() -> None:
    # Replica 0: node 0 holds all 4 layers. Replica 1: node 1 [0, 2), node 2 [2, 4).
    fleet = fleet_of(
        [1e14, 1e14, 1e14],
        [16.0] * 3,
        {(0, 1): (0.01, 1e9), (0, 2): (0.02, 5e8), (1, 2): (0.001, 1e10)},
    )
    plan = Plan(((Stage(0, 0, 4),), (Stage(1, 0, 2), Stage(2, 2, 4))))
    cost = iteration_time(PIPE_JOB, fleet, plan)
    # m = 2. Replica 0: t = 4 × 3e12 / 1e14 = 0.12, T_pp = 0.24.
    # Replica 1: t = 0.06, 0.06; c = 2 × (0.001 + 4e6 / 1e10) = 0.0028;
    #   T_pp = 0.12 + 0.0028 + 0.06 = 0.1828.
    # Layers [0, 2) sync over {0, 1}: 2 × 0.01 + 1e9 / 1e9 = 1.02;
    # layers [2, 4) over {0, 2}: 2 × 0.02 + 1e9 / 5e8 = 2.04. Node 0 runs both: T_dp = 3.06.
    assert cost.iteration_s == pytest.approx(0.24 + 3.06)
    assert cost.compute_s == pytest.approx(0.24)


# --- feasibility ------------------------------------------------------------------------------


def test_stage_that_does_not_fit_is_infeasible_not_an_error() -> None:
    # Stage 0 holds 3 of 4 layers: 16e9 × 3/4 = 12 GB > 10 GB.
    fleet = fleet_of([1e14, 1e13], [10.0, 16.0], {(0, 1): (0.01, 1e8)})
    plan = Plan(((Stage(0, 0, 3), Stage(1, 3, 4)),))
    cost = iteration_time(PIPE_JOB, fleet, plan)
    assert not cost.feasible and math.isinf(cost.iteration_s)
    assert "12.0 GB" in cost.reason and "machine 0" in cost.reason
    assert any("12.0 GB" in p for p in check_plan(PIPE_JOB, fleet, plan))
    # The same split the other way round fits: 4 GB on the small machine.
    assert iteration_time(PIPE_JOB, fleet, Plan(((Stage(1, 0, 3), Stage(0, 3, 4)),))).feasible


def test_min_memory_gb_is_the_memory_need() -> None:
    fleet = fleet_of([1e14, 1e13], [16.0, 16.0], {(0, 1): (0.01, 1e8)})
    plan = Plan(((Stage(0, 0, 3), Stage(1, 3, 4)),))
    big = Job("pipe", 1.0, 4, 1000, 1000, 8, 2, min_memory_gb=24)  # 18 GB for 3 layers
    assert not iteration_time(big, fleet, plan).feasible


def test_unreachable_and_inactive_machines_are_infeasible() -> None:
    fleet = fleet_of([1e14] * 4, [16.0] * 4, {(0, 1): (0.01, 1e8)}, active=[1, 1, 1, 0])
    apart = iteration_time(PIPE_JOB, fleet, Plan(((Stage(0, 0, 2), Stage(2, 2, 4)),)))
    assert not apart.feasible and "cannot reach" in apart.reason
    drained = iteration_time(PIPE_JOB, fleet, Plan(((Stage(0, 0, 2), Stage(3, 2, 4)),)))
    assert not drained.feasible and "not active" in drained.reason
    assert iteration_time(PIPE_JOB, fleet, Plan(((Stage(0, 0, 2), Stage(1, 2, 4)),))).feasible


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        (((Stage(0, 0, 2), Stage(1, 3, 4)),), "starts at layer 3, expected 2"),
        (((Stage(0, 0, 3), Stage(1, 2, 4)),), "starts at layer 2, expected 3"),
        (((Stage(0, 0, 3),),), "ends at layer 3, expected 4"),
        (((Stage(0, 0, 4),), (Stage(0, 0, 4),)), "already used"),
        (((Stage(5, 0, 4),),), "out of range"),
        (((Stage(0, 0, 0), Stage(1, 0, 4)),), "holds no layers"),
        ((), "no replicas"),
    ],
)
def test_malformed_plans_raise(stages: tuple, message: str) -> None:
    fleet = fleet_of([1e14, 1e13], [16.0, 16.0], {(0, 1): (0.01, 1e8)})
    plan = Plan(stages)
    assert any(message in p for p in check_plan(PIPE_JOB, fleet, plan))
    with pytest.raises(ValueError, match=message):
        iteration_time(PIPE_JOB, fleet, plan)


def test_plan_time_rejects_bad_arrays() -> None:
    fleet = fleet_of([1e14, 1e13], [16.0, 16.0], {(0, 1): (0.01, 1e8)})
    with pytest.raises(ValueError, match="sum to 4"):
        plan_time(PIPE_JOB, fleet, np.array([[0, 1]]), [2, 1])
    with pytest.raises(ValueError, match="more than one stage"):
        plan_time(PIPE_JOB, fleet, np.array([[0, 0]]), [2, 2])


def test_plan_records_round_trip_with_node_ids() -> None:
    settings = Settings()
    fleet = Fleet.from_frames(
        _inventory(["active"] * 3),
        _links([(10, 20, 5.0, 8.0), (20, 30, 30.0, np.nan)]),
        settings.hardware,
        settings.graph.bandwidth_tiers,
    )
    plan = Plan(((Stage(0, 0, 2), Stage(2, 2, 4)),))
    records = plan.to_records(fleet)
    assert records == [
        {
            "stages": [
                {"node": 10, "layer_start": 0, "layer_end": 2},
                {"node": 30, "layer_start": 2, "layer_end": 4},
            ]
        }
    ]
    assert Plan.from_records(fleet, records) == plan


# --- bounds and makespans ---------------------------------------------------------------------


def test_lower_bound_and_makespans() -> None:
    fleet = fleet_of([1e14, 3e14], [16.0, 16.0], {(0, 1): (0.01, 1e8)})
    # work = 6 × 1e9 × 8 × 1000 = 4.8e13 FLOPs over 4e14 FLOP/s.
    assert lower_bound(PIPE_JOB, fleet, [0, 1]) == pytest.approx(0.12)
    costs = [Cost(2.0, 1.0, 1.0), Cost(5.0, 4.0, 1.0)]
    assert makespan_concurrent(costs) == 5.0
    assert makespan_sequential(costs) == 7.0
    assert math.isinf(makespan_concurrent([*costs, Cost.infeasible("no room")]))
    assert Cost.infeasible("no room").to_dict() == {
        "iteration_s": None,
        "compute_s": None,
        "comm_s": None,
        "feasible": False,
        "reason": "no room",
    }


def test_even_split() -> None:
    assert even_split(10, 4).tolist() == [3, 3, 2, 2]
    assert even_split(4, 4).tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        even_split(3, 4)


# --- jobs -------------------------------------------------------------------------------------


def test_paper_presets_and_derived_sizes() -> None:
    assert PAPER_MIX_4 == ("OPT-175B", "T5-11B", "GPT-2-1.5B", "BERT-large")
    assert set(PAPER_MIX_6) == set(PRESET_JOBS) and len(PAPER_MIX_6) == 6
    opt = PRESET_JOBS["OPT-175B"]
    assert (opt.layers, opt.hidden, opt.seq_len, opt.global_batch, opt.micro_batch) == (
        96,
        12288,
        2048,
        1024,
        1,
    )
    gpt2 = PRESET_JOBS["GPT-2-1.5B"]
    assert gpt2.params == 1_500_000_000
    assert gpt2.flops_per_iteration == pytest.approx(6 * 1.5e9 * 512 * 1024)
    assert gpt2.activation_bytes == 8 * 1024 * 1600 * 2
    assert gpt2.state_bytes == pytest.approx(24e9)
    assert gpt2.min_memory_bytes == pytest.approx(24e9)
    assert PRESET_JOBS["RoBERTa-large"].params == 355_000_000
    assert PRESET_JOBS["XLNet-large"].global_batch == 8192


def test_jobs_file_round_trip(tmp_path: Path) -> None:
    jobs = [*PRESET_JOBS.values(), Job("mine_1", 2.5, 8, 64, 128, 32, 4, 3, 50.0)]
    path = tmp_path / "jobs.yaml"
    path.write_text(dump_jobs(jobs))
    assert load_jobs(path) == jobs
    assert load_jobs(path)[-1].min_memory_bytes == 50e9


GOOD = {
    "name": "GPT-2-1.5B",
    "params_b": 1.5,
    "layers": 48,
    "hidden": 1600,
    "seq_len": 1024,
    "global_batch": 512,
    "micro_batch": 8,
}


@pytest.mark.parametrize(
    ("change", "rule", "field"),
    [
        ({"layerz": 3}, "jobs.unknown_key", "layerz"),
        ({"hidden": None}, "jobs.wrong_type", "hidden"),
        ({"layers": 48.0}, "jobs.wrong_type", "layers"),
        ({"layers": "48"}, "jobs.wrong_type", "layers"),
        ({"seq_len": True}, "jobs.wrong_type", "seq_len"),
        ({"layers": 0}, "jobs.not_positive", "layers"),
        ({"params_b": -1.5}, "jobs.not_positive", "params_b"),
        ({"params_b": float("nan")}, "jobs.not_positive", "params_b"),
        ({"min_memory_gb": 0}, "jobs.not_positive", "min_memory_gb"),
        ({"micro_batch": 1024}, "jobs.micro_batch_too_large", "micro_batch"),
        ({"name": "GPT 2"}, "jobs.bad_name", "name"),
    ],
)
def test_job_file_errors_name_file_job_and_field(
    tmp_path: Path, change: dict, rule: str, field: str
) -> None:
    job = {**GOOD, "name": "second", **change}
    path = tmp_path / "jobs.yaml"
    path.write_text(dump_jobs([PRESET_JOBS["BERT-large"]]).rstrip() + "\n" + _yaml_item(job))
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    message = str(caught.value)
    assert caught.value.rule == rule
    assert str(path) in message
    assert "job 2" in message and repr(job["name"]) in message
    assert f"field {field!r}" in message


def _yaml_item(job: dict) -> str:
    lines = []
    for i, (key, value) in enumerate(job.items()):
        text = (
            {None: "null", True: "true"}.get(value, value) if not isinstance(value, str) else value
        )
        if isinstance(value, float) and math.isnan(value):
            text = ".nan"
        if key == "layers" and value == "48":
            text = '"48"'
        lines.append(f"{'- ' if i == 0 else '  '}{key}: {text}")
    return "\n".join(lines) + "\n"


def test_missing_key_and_duplicate_name(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    missing = {k: v for k, v in GOOD.items() if k != "seq_len"}
    path.write_text("jobs:\n" + _yaml_item(missing))
    with pytest.raises(InputError, match=r"job 1 \('GPT-2-1.5B'\), field 'seq_len': missing"):
        load_jobs(path)

    path.write_text("jobs:\n" + _yaml_item(GOOD) + _yaml_item(GOOD))
    with pytest.raises(InputError, match=r"jobs.duplicate_name.*job 2 \('GPT-2-1.5B'\), field"):
        load_jobs(path)


def test_job_file_structure_errors(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    with pytest.raises(InputError, match=r"jobs\.missing_file"):
        load_jobs(path)
    for text, rule in [
        ("- name: x\n", "jobs.structure"),
        ("jobs: []\n", "jobs.empty"),
        ("jobs: [\n", "jobs.yaml_syntax"),
        ("jobs:\n  - 3\n", "jobs.structure"),
        ("jobz: []\njobs: []\n", "jobs.unknown_key"),
    ]:
        path.write_text(text)
        with pytest.raises(InputError, match=rule):
            load_jobs(path)


def test_field_rules_cross_field_rules_and_duplicate_names_are_listed_together(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.yaml"
    bad_fields = {**GOOD, "name": "X1", "layers": 48.0, "colour": "red"}
    across = {
        **GOOD,
        "name": "X2",
        "global_batch": 8,
        "micro_batch": 16,
        "submitted_at": "2026-12-02",
        "deadline": "2026-12-01",
    }
    path.write_text(
        "jobs:\n" + "".join(_yaml_item(j) for j in (bad_fields, across, {**GOOD, "name": "X1"}))
    )
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    shown = "\n".join(caught.value.examples)
    assert len(caught.value.examples) == 5, shown
    for expected in (
        "job 1 ('X1'), field 'layers'",
        "job 1 ('X1'), field 'colour': unknown key",
        "job 2 ('X2'), field 'micro_batch': 16 exceeds global_batch 8",
        "job 2 ('X2'), field 'deadline'",
        "job 3 ('X1'), field 'name': 'X1' is already the name of job 1",
    ):
        assert expected in shown


def test_every_problem_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n" + _yaml_item({**GOOD, "layers": 0, "hidden": -1}))
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    assert len(caught.value.examples) == 2
    assert "and 1 more" in str(caught.value)


def test_job_constructor_validates() -> None:
    with pytest.raises(ValueError, match="micro_batch"):
        Job("x", 1.0, 4, 8, 8, 2, 4)
    with pytest.raises(ValueError, match="name"):
        Job("a b", 1.0, 4, 8, 8, 4, 2)
