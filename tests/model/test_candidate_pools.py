"""Algorithm 1: class probabilities → the candidate pools the planner tries for each job."""

from __future__ import annotations

import numpy as np

from hulk.candidate_pools import candidate_pools, probability_group, site_regions

# Six machines holding 4 layers each; sites: {0, 1}, {2, 3}, {4, 5}.
CAPACITY = np.full(6, 4)
SITES = np.array([0, 0, 1, 1, 2, 2])
FREE = np.ones(6, bool)


def test_core_that_holds_the_slack_is_kept_as_it_is() -> None:
    p = np.array([0.9, 0.8, 0.1, 0.1, 0.2, 0.1])
    group = probability_group(p, p > 0.5, FREE, CAPACITY, layers=6, slack=1.0)
    assert group.tolist() == [0, 1]


def test_short_core_is_topped_up_by_probability_until_the_slack_is_held() -> None:
    p = np.array([0.9, 0.1, 0.3, 0.1, 0.4, 0.2])
    # Core {0} holds 4 of the 1.5 × 8 = 12 layers wanted: add 4 (0.4), then 2 (0.3).
    group = probability_group(p, p > 0.5, FREE, CAPACITY, layers=8, slack=1.5)
    assert group.tolist() == [0, 2, 4]


def test_taken_machines_and_machines_holding_nothing_are_never_offered() -> None:
    p = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    free = np.array([False, True, True, True, True, True])
    capacity = np.array([4, 4, 0, 4, 4, 4])
    group = probability_group(p, np.zeros(6, bool), free, capacity, layers=8, slack=1.0)
    assert group.tolist() == [1, 3]


def test_site_regions_start_at_each_top_ranked_site_and_grow_by_rank() -> None:
    p = np.array([0.1, 0.1, 0.6, 0.5, 0.3, 0.3])  # mass: site 1 1.1, site 2 0.6, site 0 0.2
    regions = site_regions(p, FREE, CAPACITY, layers=8, sites=SITES, slack=1.0, count=3)
    assert [r.tolist() for r in regions] == [[2, 3], [4, 5], [0, 1]]
    wider = site_regions(p, FREE, CAPACITY, layers=8, sites=SITES, slack=2.0, count=3)
    # 16 layers wanted: two sites each; the last start has only site 0 after it, which holds
    # fewer than wanted but still the job's 8 layers, so it stays a candidate.
    assert [r.tolist() for r in wider] == [[2, 3, 4, 5], [0, 1, 4, 5], [0, 1]]


def test_regions_that_cannot_hold_the_job_are_left_out() -> None:
    p = np.array([0.1, 0.1, 0.6, 0.5, 0.3, 0.3])
    free = np.array([True, False, True, True, True, False])  # sites hold 4, 8, 4 layers
    regions = site_regions(p, free, CAPACITY, layers=12, sites=SITES, slack=1.0, count=3)
    # From site 1: 8 + site 2's 4 = 12. From site 2: 4 + site 0's 4 = 8 < 12, and so on.
    assert [r.tolist() for r in regions] == [[2, 3, 4]]


def test_candidate_pools_put_the_model_group_first_without_duplicates() -> None:
    p = np.array([0.1, 0.1, 0.6, 0.5, 0.3, 0.3])
    pools = candidate_pools(p, p > 0.45, FREE, CAPACITY, 8, SITES, 1.0, 1.0, 3, 48)
    # The probability group {2, 3} is also the first site region: listed once.
    assert [pool.tolist() for pool in pools] == [[2, 3], [4, 5], [0, 1]]


def test_no_pool_when_the_free_machines_cannot_hold_the_job() -> None:
    p = np.full(6, 0.5)
    free = np.array([True, False, False, False, False, True])
    assert candidate_pools(p, p > 0.4, free, CAPACITY, 12, SITES, 1.5, 2.0, 3, 48) == []


def test_pools_are_deterministic_and_use_only_free_machines() -> None:
    rng = np.random.default_rng(0)
    n = 60
    p = rng.random(n)
    free = rng.random(n) > 0.3
    capacity = rng.integers(0, 6, n)
    sites = rng.integers(0, 9, n)
    first = candidate_pools(p, p > 0.7, free, capacity, 20, sites, 1.5, 2.0, 3, 48)
    again = candidate_pools(p, p > 0.7, free, capacity, 20, sites, 1.5, 2.0, 3, 48)
    assert [a.tolist() for a in first] == [b.tolist() for b in again]
    for pool in first:
        assert free[pool].all() and capacity[pool].sum() >= 20


def test_pools_wider_than_the_planner_searches_keep_their_most_likely_machines() -> None:
    p = np.array([0.1, 0.1, 0.6, 0.5, 0.3, 0.3])
    # Site region from site 1 wants 2 × 8 = 16 layers: {2, 3, 4, 5}; a limit of 2 machines
    # keeps its two most likely, which still hold the 8 layers.
    pools = candidate_pools(p, p > 0.45, FREE, CAPACITY, 8, SITES, 1.0, 2.0, 1, 2)
    assert [pool.tolist() for pool in pools] == [[2, 3]]
    # 12 layers: the two most likely hold only 8, so the pools stay whole.
    pools = candidate_pools(p, p > 0.45, FREE, CAPACITY, 12, SITES, 1.0, 1.0, 1, 2)
    assert all(CAPACITY[pool].sum() >= 12 for pool in pools) and len(pools[0]) == 3
