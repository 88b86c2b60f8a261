"""Plans on the site model (hulk.site_links): identical to the dense model's on a fleet that is
exactly site-uniform, and judged by the dense model on one that is not."""

from __future__ import annotations

import numpy as np

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
