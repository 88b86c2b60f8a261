"""Plans on the site model (hulk.site_links): identical to the dense model's on a fleet that is
exactly site-uniform, and judged by the dense model on one that is not."""

from __future__ import annotations

import numpy as np
import pytest

from hulk import site_links
from hulk.cost import Fleet, iteration_time
from hulk.jobs import PAPER_MIX_4, preset_jobs
from hulk.planner import plan_job, site_labels
from hulk.settings import Settings
from hulk.teacher import teacher_search
from tests.code.test_site_links import both, uniform_links

SETTINGS = Settings()


def test_planner_and_teacher_make_the_same_plans_on_both_models_of_a_uniform_fleet() -> None:
    dense, sites = both([8, 6, 10, 5, 7, 4], seed=11)
    planner = SETTINGS.planner
    np.testing.assert_array_equal(
        site_labels(sites, planner.site_latency_ms), site_labels(dense, planner.site_latency_ms)
    )
    jobs = preset_jobs(PAPER_MIX_4)
    everything = dense.active_indices()
    for job in jobs[1:]:
        plan_d, cost_d = plan_job(job, dense, everything, planner)
        plan_s, cost_s = plan_job(job, sites, everything, planner)
        assert plan_s == plan_d and cost_s == cost_d
    teacher = SETTINGS.teacher.model_copy(update={"max_evaluations": 40})
    result_d = teacher_search(jobs[1:], dense, teacher, planner, seed=3)
    result_s = teacher_search(jobs[1:], sites, teacher, planner, seed=3)
    assert [p.plan for p in result_s.placements] == [p.plan for p in result_d.placements]
    assert result_s.makespan_s == result_d.makespan_s
    np.testing.assert_array_equal(result_s.labels, result_d.labels)


def test_site_model_plans_of_a_large_pool_are_valid_plans_of_the_dense_model() -> None:
    # 400 machines in 8 sites, each measured pair off its site figure by up to ±30 %: the
    # planner searches the pool in windows, per site; the plan it returns is judged densely.
    site, i, j, lat, bw = uniform_links([70, 60, 50, 40, 60, 50, 40, 30], seed=4)
    rng = np.random.default_rng(9)
    lat = lat * rng.uniform(0.7, 1.3, len(lat))
    n = len(site)
    args = (
        np.arange(n),
        rng.choice([50e12, 120e12, 300e12], n),
        rng.choice([96e9, 320e9, 640e9], n),
        np.ones(n, bool),
        i,
        j,
        lat,
        bw,
    )
    dense, sites = Fleet.from_arrays(*args), Fleet.from_arrays(*args, sites=site)
    job = preset_jobs(["T5-11B"])[0]
    plan_s, cost_s = plan_job(job, sites, np.arange(n), SETTINGS.planner)
    plan_d, cost_d = plan_job(job, dense, np.arange(n), SETTINGS.planner)
    assert plan_s is not None and plan_d is not None
    judged = iteration_time(job, dense, plan_s)
    assert judged.feasible
    assert judged.iteration_s <= 1.5 * cost_d.iteration_s
    assert abs(cost_s.iteration_s / judged.iteration_s - 1) < 0.3  # the site figures are medians


@pytest.mark.parametrize("one_block", [False, True])
def test_site_model_plans_a_group_on_its_own_machine_pairs(monkeypatch, one_block: bool) -> None:
    # Three sites at least 30 ms apart (so that every clustering keeps them whole), each
    # measured pair off its site figure by up to ±30 %: many exceptions. The planner plans
    # the group on the group's own pairs, read once (or on the block of the whole fleet, which
    # fits one), exactly as a dense fleet of just those pairs would, and judges the plan on
    # the site model.
    if not one_block:
        monkeypatch.setattr(site_links, "WHOLE_BLOCK_MAX", 0)
    site, i, j, lat, bw = uniform_links([40, 50, 45, 35, 30], seed=6)
    rng = np.random.default_rng(2)
    lat, bw = lat * rng.uniform(0.7, 1.3, len(lat)), bw * rng.uniform(0.7, 1.3, len(bw))
    n = len(site)
    compute = rng.choice([50e12, 120e12, 300e12], n)
    memory = rng.choice([96e9, 320e9, 640e9], n)
    sites = Fleet.from_arrays(
        np.arange(n) * 2, compute, memory, np.ones(n, bool), i, j, lat, bw, sites=site
    )
    assert sites.sites is not None
    figures = sites.sites.latency
    far = [0] + [s for s in range(1, 5) if all(figures[s, t] > 30e-3 for t in range(s))]
    far = far[:3]
    assert len(far) == 3
    group = np.flatnonzero(np.isin(site, far))
    assert len(group) > SETTINGS.planner.max_pool  # searched in windows
    latency, bandwidth, _ = sites.sites.block(group)
    a, b = np.triu_indices(len(group), 1)
    own = Fleet.from_arrays(
        sites.node_ids[group],
        compute[group],
        memory[group],
        np.ones(len(group), bool),
        a,
        b,
        latency[a, b],
        bandwidth[a, b],
    )
    job = preset_jobs(["T5-11B"])[0]
    reads = {"count": 0}
    gather = type(sites.sites).gather

    def counted(self, table, x, y):  # type: ignore[no-untyped-def]
        reads["count"] += 1
        return gather(self, table, x, y)

    with monkeypatch.context() as patch:
        patch.setattr(type(sites.sites), "gather", counted)
        plan_s, cost_s = plan_job(job, sites, group, SETTINGS.planner)
    planning_reads = reads["count"]
    plan_o, _ = plan_job(job, own, np.arange(len(group)), SETTINGS.planner)
    assert plan_s is not None and plan_o is not None
    assert plan_s.nodes == tuple(int(group[v]) for v in plan_o.nodes)
    assert cost_s == iteration_time(job, sites, plan_s)
    assert planning_reads < 50  # the final judgement's; none per candidate layout
