"""The GNN strategy's assembly: probabilities → Algorithm 1 → planner → quick check."""

from __future__ import annotations

import numpy as np
import pytest

from hulk.baselines import best_baseline_seconds
from hulk.errors import InputError
from hulk.gnn import gnn_decide, gnn_placements
from hulk.jobs import Job
from hulk.settings import Settings
from tests.fleets import fleet_of

# Four 100 GB machines: 0-1 close together, 2-3 close together; 200 ms, 100 Mbit/s between pairs.
NEAR, FAR = (0.001, 1.25e9), (0.2, 1.25e7)
LINKS = {(0, 1): NEAR, (2, 3): NEAR, (0, 2): FAR, (0, 3): FAR, (1, 2): FAR, (1, 3): FAR}
BIG = Job("big", 10, 8, 1024, 512, 64, 4)  # 160 GB of state: needs two machines
SMALL = Job("small", 5, 8, 1024, 512, 64, 4)  # 80 GB: one machine


def fleet():
    return fleet_of([1e14] * 4, [100.0] * 4, LINKS)


def test_good_probabilities_give_the_predicted_groups(settings: Settings) -> None:
    # Size order: big (class 0), small (class 1); idle is class 2.
    proba = np.array([[0.8, 0.1, 0.1], [0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.2, 0.7]])
    outcome = gnn_placements([SMALL, BIG], fleet(), proba, [1, 0], settings)
    assert outcome.fallback_reason is None
    small, big = outcome.placements
    assert big.status == "placed" and set(big.nodes) == {0, 1}
    assert small.status == "placed" and set(small.nodes) <= {2, 3}
    assert big.estimate.feasible and small.estimate.feasible


def test_clearly_worse_plan_falls_back(settings: Settings) -> None:
    # The model splits the big job across the slow 200 ms link: feasible, but slower than
    # running both jobs in turn under the best baseline allows with a strict ratio.
    proba = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], [0.1, 0.1, 0.8]])
    strict = settings.model_copy(
        update={"assign": settings.assign.model_copy(update={"gnn_fallback_ratio": 1e-6})}
    )
    outcome = gnn_placements([BIG, SMALL], fleet(), proba, [0, 1], strict)
    assert outcome.placements is None
    assert "exceeds" in outcome.fallback_reason


def test_quick_check_draws_the_line_at_the_exact_ratio(settings: Settings) -> None:
    # The check settles most mixes on lower bounds; its verdict must still be the exact rule:
    # fall back iff makespan > ratio × Σ best baselines.
    proba = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], [0.1, 0.1, 0.8]])
    jobs = [BIG, SMALL]
    plans = gnn_placements(jobs, fleet(), proba, [0, 1], settings).decision.plans
    makespan = max(cost.iteration_s for _, cost in plans.values())
    sequential = sum(best_baseline_seconds(job, fleet()) for job in jobs)
    exact = makespan / sequential
    for ratio, falls_back in ((exact * 0.999, True), (exact * 1.001, False)):
        strict = settings.model_copy(
            update={"assign": settings.assign.model_copy(update={"gnn_fallback_ratio": ratio})}
        )
        outcome = gnn_placements(jobs, fleet(), proba, [0, 1], strict)
        assert (outcome.placements is None) is falls_back, ratio
        if falls_back:
            assert f"({sequential:.4g} s)" in outcome.fallback_reason


def test_job_left_without_memory_is_queued(settings: Settings) -> None:
    huge = Job("huge", 20, 8, 1024, 512, 64, 4)  # 320 GB: all four machines
    proba = np.array([[0.9, 0.05, 0.05]] * 4)
    outcome = gnn_placements([huge, SMALL], fleet(), proba, [0, 1], settings)
    first, second = outcome.placements
    assert first.status == "placed" and second.status == "queued"
    assert "GB free" in second.reason


def test_group_across_an_unreachable_pair_is_rescued_by_a_site_region(settings: Settings) -> None:
    # The model gives the big job machines 0 and 2, which cannot reach each other.
    cut = {(0, 1): NEAR, (2, 3): NEAR}
    split = fleet_of([1e14] * 4, [100.0] * 4, cut)
    proba = np.array([[0.8, 0.2], [0.1, 0.9], [0.8, 0.2], [0.1, 0.9]])
    only_group = settings.model_copy(
        update={
            "assign": settings.assign.model_copy(
                update={"gnn_site_candidates": 0, "gnn_group_slack": 1.0}
            )
        }
    )
    outcome = gnn_placements([BIG], split, proba, [0], only_group)
    assert outcome.placements[0].status == "queued"  # {0, 2} alone cannot run it
    outcome = gnn_placements([BIG], split, proba, [0], settings)
    (big,) = outcome.placements
    assert big.status == "placed" and set(big.nodes) in ({0, 1}, {2, 3})
    # On a fleet counted as large, `gnn_site_candidates_large` regions are tried instead.
    for machines, status in ((3, "queued"), (4, "placed")):
        large = {
            "gnn_group_slack": 1.0,
            "gnn_large_fleet": machines,
            "gnn_site_candidates_large": 0,
        }
        changed = settings.model_copy(update={"assign": settings.assign.model_copy(update=large)})
        outcome = gnn_placements([BIG], split, proba, [0], changed)
        assert outcome.placements[0].status == status, machines


def test_the_fastest_candidate_pool_wins(settings: Settings) -> None:
    # Machines 2 and 3 are ten times faster; the model prefers 0 and 1.
    fast = fleet_of([1e14, 1e14, 1e15, 1e15], [100.0] * 4, LINKS)
    proba = np.array([[0.7, 0.3], [0.7, 0.3], [0.4, 0.6], [0.4, 0.6]])
    (big,) = gnn_placements([BIG], fast, proba, [0], settings).placements
    assert set(big.nodes) == {2, 3}


def test_job_the_fleet_can_never_host_is_an_error(settings: Settings) -> None:
    giant = Job("giant", 30, 8, 1024, 512, 64, 4)  # 480 GB > 400 GB
    with pytest.raises(InputError, match="giant"):
        gnn_placements([giant], fleet(), np.full((4, 2), 0.5), [0], settings)


def test_idle_machines_are_offered_to_the_slowest_job(settings: Settings) -> None:
    near = {(i, j): NEAR for i in range(4) for j in range(i + 1, 4)}
    close = fleet_of([1e14] * 4, [100.0] * 4, near)
    proba = np.array([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.1, 0.9]])  # 2, 3: idle

    def placed_with(rounds: int, width: int = 48):
        options = {
            "gnn_group_slack": 1.0,
            "gnn_site_candidates": 0,
            "gnn_idle_rounds": rounds,
            "gnn_refine_evaluations": 0,  # the offers alone
            "gnn_fallback_ratio": 100.0,  # B over all four would beat two machines
        }
        changed = settings.model_copy(
            update={
                "assign": settings.assign.model_copy(update=options),
                "planner": settings.planner.model_copy(update={"max_pool": width}),
            }
        )
        (big,) = gnn_placements([BIG], close, proba, [0], changed).placements
        return big

    alone, offered = placed_with(0), placed_with(2)
    assert set(alone.nodes) == {0, 1}
    assert len(offered.nodes) > 2
    assert offered.estimate.iteration_s < alone.estimate.iteration_s
    # Its two machines and the two idle ones are more than one planner search takes (2): no
    # room for an idle one, no offer.
    assert set(placed_with(2, width=2).nodes) == {0, 1}


@pytest.mark.slow
def test_the_teachers_own_groups_give_the_teachers_makespan(settings: Settings) -> None:
    # Perfect probabilities (the teacher's labels) on a small fleet where jobs compete: the
    # greedy pools alone starve later jobs (measured 1.5-2.8x the teacher on such mixes); the
    # model's own groups, laid out with the full planner, bring the teacher's balance back.
    from hulk.cost import Fleet
    from hulk.features import order_jobs
    from hulk.generate import expected_links
    from hulk.gnn import gnn_decide
    from hulk.jobs import PRESET_JOBS
    from hulk.presets import build_fleet
    from hulk.teacher import IDLE, teacher_search

    inventory = build_fleet("two-region-24gb", 3, settings.generate)
    links = expected_links(inventory, 3, settings.generate)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    base = [PRESET_JOBS[name] for name in ("GPT-2-1.5B", "BERT-large", "XLNet-large")]
    jobs = [*base, *(Job(**{**job.__dict__, "name": job.name + "_2"}) for job in base)]
    result = teacher_search(jobs, fleet, settings.teacher, settings.planner, 3)
    order = order_jobs(jobs)
    rank = {job: k for k, job in enumerate(order)}
    proba = np.zeros((fleet.n, len(jobs) + 1))
    for machine, label in enumerate(result.labels):
        proba[machine, len(jobs) if label == IDLE else rank[int(label)]] = 1.0
    decision = gnn_decide(jobs, fleet, proba, order, settings)
    assert len(decision.plans) == len(jobs)
    makespan = max(cost.iteration_s for _, cost in decision.plans.values())
    assert makespan <= result.makespan_s * 1.05


def test_identical_machines_are_shared_as_the_probabilities_say() -> None:
    # Six identical machines: the model can only say "two thirds to job 0, a third to job 1",
    # the same for each. Their most likely class is job 0 for all; the quotas split them 4 / 2.
    from hulk.gnn import _quota_owner

    proba = np.tile([0.6, 0.3, 0.1], (6, 1))
    active = np.array([True] * 5 + [False])
    owner = _quota_owner(proba, active, idle=2)
    assert owner[5] == -1  # drained: nobody's
    assert sorted(owner[:5].tolist()) == [0, 0, 0, 1, 1]  # round(3.0) = 3, round(1.5) = 2
    # Confident probabilities: the quotas are the most likely classes.
    sure = np.eye(3)[[0, 0, 1, 2, 2]]
    assert _quota_owner(sure, np.ones(5, bool), idle=2).tolist() == [0, 0, 1, 2, 2]


def test_the_refining_search_rebalances_jobs_the_greedy_pools_starve(settings: Settings) -> None:
    # Four machines of 100 GB: 0, 1 fast, 2, 3 slow, all close. The model gives "big" the
    # fast pair and "mid" the slow one: "mid" then sets a makespan 90x big's time. The search
    # from there finds the faster makespan that gives each job one fast machine.
    near = {(i, j): NEAR for i in range(4) for j in range(i + 1, 4)}
    mixed = fleet_of([1e15, 1e15, 1e13, 1e13], [100.0] * 4, near)
    mid = Job("mid", 9, 8, 1024, 512, 64, 4)  # 144 GB: two machines
    proba = np.array([[0.9, 0.1, 0.0]] * 2 + [[0.1, 0.9, 0.0]] * 2)

    def decide(evaluations: int):
        options = {"gnn_refine_evaluations": evaluations, "gnn_fallback_ratio": 100.0}
        changed = settings.model_copy(update={"assign": settings.assign.model_copy(update=options)})
        from hulk.gnn import gnn_decide

        return gnn_decide([BIG, mid], mixed, proba, [0, 1], changed)

    greedy, refined = decide(0), decide(100)
    makespan = {
        name: max(cost.iteration_s for _, cost in d.plans.values())
        for name, d in (("greedy", greedy), ("refined", refined))
    }
    assert len(refined.plans) == 2
    assert makespan["refined"] < makespan["greedy"] * 0.9
    assert {len(set(plan.nodes) & {0, 1}) for plan, _ in refined.plans.values()} == {1}
    assert refined.refine_s > 0 and greedy.refine_s == 0
    # The search runs on small fleets only: with a planner search narrower than the fleet's
    # half, the greedy plans stand.
    narrow = settings.model_copy(
        update={"planner": settings.planner.model_copy(update={"max_pool": 1})}
    )
    from hulk.gnn import gnn_decide

    untouched = gnn_decide([BIG, mid], mixed, proba, [0, 1], narrow)
    assert untouched.refine_s == 0


def test_on_a_large_fleet_the_slowest_job_is_offered_the_fastest_idle_machines(
    settings: Settings,
) -> None:
    # Six machines in one site, machine 4 four times as fast; the model puts the small job on
    # machine 0. With a planner search of 3 machines the idle ones (5) do not fit one search,
    # so the job is offered its own and the 2 fastest idle ones, and its plan takes machine 4.
    links = {(i, j): NEAR for i in range(6) for j in range(i + 1, 6)}
    fleet6 = fleet_of([1e14, 1e14, 1e14, 1e14, 4e14, 1e14], [100.0] * 6, links)
    proba = np.array([[0.9, 0.1]] + [[0.1, 0.9]] * 5)
    narrow = settings.model_copy(
        update={
            "planner": settings.planner.model_copy(update={"max_pool": 3}),
            "assign": settings.assign.model_copy(
                update={"gnn_refine_evaluations": 0, "gnn_site_candidates": 0}
            ),
        }
    )
    unoffered = narrow.model_copy(
        update={"assign": narrow.assign.model_copy(update={"gnn_idle_rounds": 0})}
    )
    before, before_cost = gnn_decide([SMALL], fleet6, proba, [0], unoffered).plans[0]
    plan, cost = gnn_decide([SMALL], fleet6, proba, [0], narrow).plans[0]
    assert 4 not in before.nodes
    assert 4 in plan.nodes
    assert cost.iteration_s < before_cost.iteration_s
