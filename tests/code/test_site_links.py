"""The site model of a fleet's links (hulk.site_links): the same answers as the dense matrices
on a site-uniform fleet, exceptions, relays between sites, unreachable machines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hulk import site_links
from hulk.cost import (
    Fleet,
    allreduce_group_bound,
    allreduce_lower_bound,
    allreduce_time,
    ring_bottleneck,
)
from hulk.errors import ConfigError
from hulk.placements import direct_links, fleet_snapshot
from hulk.settings import CostSettings, Settings, settings_from_dict
from hulk.site_links import SiteMatrix, inventory_sites


def uniform_links(
    sizes: list[int], seed: int = 0, missing: tuple[tuple[int, int], ...] = ()
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(site per machine, link ends i, j, latency, bandwidth): every pair of machines measured
    at its site pair's figure (distinct latencies between sites), except site pairs `missing`."""
    rng = np.random.default_rng(seed)
    k = len(sizes)
    site = np.repeat(np.arange(k), sizes)
    between = rng.uniform(5e-3, 80e-3, (k, k))
    between = np.triu(between, 1) + np.triu(between, 1).T
    np.fill_diagonal(between, rng.uniform(0.2e-3, 1e-3, k))
    width = np.where(between < 2e-3, 10e9, np.where(between < 20e-3, 2e9, 1e9)) / 8
    i, j = np.triu_indices(len(site), 1)
    cut = np.zeros(len(i), bool)
    for s, t in missing:
        cut |= (site[i] == s) & (site[j] == t) | (site[i] == t) & (site[j] == s)
    i, j = i[~cut], j[~cut]
    return site, i, j, between[site[i], site[j]], width[site[i], site[j]]


def both(sizes: list[int], seed: int = 0, missing=(), lonely: int = 0) -> tuple[Fleet, Fleet]:
    """The same fleet on the dense model and on the site model (`lonely` machines without links)."""
    site, i, j, lat, bw = uniform_links(sizes, seed, missing)
    n = len(site) + lonely
    site = np.concatenate([site, np.full(lonely, site.max())])
    rng = np.random.default_rng(seed + 1)
    args = (
        np.arange(n) * 3,
        rng.choice([50e12, 120e12, 300e12], n),
        rng.choice([96e9, 320e9, 640e9], n),
        rng.random(n) > 0.1,
        i,
        j,
        lat,
        bw,
    )
    return Fleet.from_arrays(*args), Fleet.from_arrays(*args, sites=site)


def test_site_model_answers_as_the_dense_matrices_on_a_uniform_fleet() -> None:
    dense, sites = both([5, 1, 4, 6, 3], missing=((0, 2), (1, 3)))
    assert sites.sites is not None and sites.sites.k == 5
    for name in ("latency_s", "bandwidth_Bps", "relayed"):
        d, s = getattr(dense, name), getattr(sites, name)
        assert isinstance(s, SiteMatrix)
        np.testing.assert_array_equal(np.asarray(s), d)
        a, b = np.array([0, 4, 7, 18]), np.array([2, 5, 18, 11, 0])
        np.testing.assert_array_equal(s[np.ix_(a, b)], d[np.ix_(a, b)])
        np.testing.assert_array_equal(s[a][:, b], d[a][:, b])
        np.testing.assert_array_equal(s[:, b], d[:, b])
        np.testing.assert_array_equal(s[a, :], d[a, :])
        np.testing.assert_array_equal(s[7], d[7])
        grid = np.array([[0, 4, 9], [2, 11, 18]])
        np.testing.assert_array_equal(s[grid[:, :-1], grid[:, 1:]], d[grid[:, :-1], grid[:, 1:]])
        assert s[3, 12] == d[3, 12] and s[6, 6] == d[6, 6]
    assert dense.relayed[0, 6] and sites.relayed[0, 6]  # sites 0 and 2: relayed
    np.testing.assert_array_equal(sites.component, dense.component)
    assert sites.link_extremes == dense.link_extremes
    assert direct_links(sites) == direct_links(dense)
    assert fleet_snapshot(sites) != fleet_snapshot(dense)  # site tables hashed, not n² pairs


def test_whole_fleet_questions_agree_with_the_dense_model() -> None:
    dense, sites = both([40, 30, 50, 25, 35], seed=3)  # rings past the per-site threshold
    everything = np.arange(dense.n)
    groups = np.repeat([0, 1, 1, 2, 0], [40, 30, 50, 25, 35])
    for nbytes in (1e6, 1e9):
        assert allreduce_lower_bound(sites, everything, nbytes) == pytest.approx(
            allreduce_lower_bound(dense, everything, nbytes)
        )
        assert allreduce_group_bound(sites, everything, nbytes, groups) == pytest.approx(
            allreduce_group_bound(dense, everything, nbytes, groups)
        )
    # A ring through every machine ordered per site: every link inside a site or between
    # neighbouring sites, so no slower than the dense tour's bottleneck here.
    alpha_s, beta_s = ring_bottleneck(sites, everything)
    alpha_d, beta_d = ring_bottleneck(dense, everything)
    assert alpha_s <= alpha_d * (1 + 1e-12) and beta_s >= beta_d * (1 - 1e-12)
    assert allreduce_time(sites, everything, 1e9) <= allreduce_time(dense, everything, 1e9) * 1.0001


def test_subset_keeps_the_site_figures_and_the_exceptions() -> None:
    dense, sites = both([5, 4, 6], seed=5)
    keep = [0, 3, 6, 9, 12, 14]
    sub_d, sub_s = dense.subset(keep), sites.subset(keep)
    np.testing.assert_array_equal(np.asarray(sub_s.latency_s), sub_d.latency_s)
    np.testing.assert_array_equal(np.asarray(sub_s.bandwidth_Bps), sub_d.bandwidth_Bps)
    assert direct_links(sub_s) == direct_links(sub_d) == len(keep) * (len(keep) - 1) // 2
    assert sub_s.link_extremes == sub_d.link_extremes


def test_a_machine_pair_far_from_its_site_pair_is_kept_as_an_exception(monkeypatch) -> None:
    monkeypatch.setattr(site_links, "WHOLE_BLOCK_MAX", 0)  # the site tables, not the dense block
    site, i, j, lat, bw = uniform_links([4, 4], seed=2)
    odd = int(np.flatnonzero((i == 1) & (j == 6))[0])
    near = int(np.flatnonzero((i == 2) & (j == 5))[0])
    lat, bw = lat.copy(), bw.copy()
    figure = lat[near]
    lat[odd] *= 10  # a slow path: kept as it is
    lat[near] *= 1.2  # within the ratio: the site pair's median stands
    n = len(site)
    fleet = Fleet.from_arrays(
        np.arange(n),
        np.ones(n),
        np.ones(n),
        np.ones(n, bool),
        i,
        j,
        lat,
        bw,
        sites=site,
        exception_ratio=1.25,
    )
    assert fleet.sites is not None and fleet.sites.exceptions == 1
    assert fleet.latency_s[1, 6] == fleet.latency_s[6, 1] == pytest.approx(10 * figure)
    assert fleet.latency_s[2, 5] == pytest.approx(figure)
    assert not fleet.relayed[1, 6]
    rows = fleet.latency_s[np.ix_([1, 2], [5, 6])]
    np.testing.assert_allclose(rows, [[figure, 10 * figure], [figure, figure]])
    kept = fleet.subset([1, 6, 7])
    assert kept.latency_s[0, 1] == pytest.approx(10 * figure)
    assert fleet.subset([1, 5, 7]).sites.exceptions == 0  # type: ignore[union-attr]


def test_a_block_of_machines_reads_as_their_gathered_pairs(monkeypatch) -> None:
    monkeypatch.setattr(site_links, "WHOLE_BLOCK_MAX", 0)  # the per-site lookups, not one block
    # Off their site figures by up to ±40 %: many pairs are exceptions, some relayed pairs.
    site, i, j, lat, bw = uniform_links([6, 5, 7, 4], seed=8, missing=((0, 3),))
    rng = np.random.default_rng(3)
    lat, bw = lat * rng.uniform(0.6, 1.4, len(lat)), bw * rng.uniform(0.6, 1.4, len(bw))
    n = len(site)
    fleet = Fleet.from_arrays(
        np.arange(n), np.ones(n), np.ones(n), np.ones(n, bool), i, j, lat, bw, sites=site
    )
    assert fleet.sites is not None and fleet.sites.exceptions > 10
    nodes = np.array([20, 3, 11, 0, 17, 8, 5, 14])  # any order, relayed pairs among them
    latency, bandwidth, relayed = fleet.sites.block(nodes)
    grid = np.ix_(nodes, nodes)
    np.testing.assert_array_equal(latency, fleet.latency_s[grid])
    np.testing.assert_array_equal(bandwidth, fleet.bandwidth_Bps[grid])
    np.testing.assert_array_equal(relayed, fleet.relayed[grid])
    assert relayed.any() and np.isinf(np.diag(bandwidth)).all()


def probed_links(sizes: list[int], pairs_between: int, seed: int) -> tuple[np.ndarray, ...]:
    """(site per machine, link ends i, j, latency, bandwidth): every pair inside a site measured
    (0.45–0.55 ms: no detour inside a site is faster), `pairs_between` measured pairs per pair
    of sites (20–80 ms): most machine pairs between sites relay, never through a third site."""
    rng = np.random.default_rng(seed)
    site = np.repeat(np.arange(len(sizes)), sizes)
    i, j = np.triu_indices(len(site), 1)
    inside = site[i] == site[j]
    ends = [(i[inside], j[inside])]
    for s in range(len(sizes)):
        for t in range(s + 1, len(sizes)):
            a = rng.choice(np.flatnonzero(site == s), pairs_between)
            b = rng.choice(np.flatnonzero(site == t), pairs_between)
            ends.append((a, b))
    i = np.concatenate([e[0] for e in ends])
    j = np.concatenate([e[1] for e in ends])
    near = site[i] == site[j]
    lat = np.where(near, rng.uniform(0.45e-3, 0.55e-3, len(i)), rng.uniform(20e-3, 80e-3, len(i)))
    bw = np.where(near, rng.uniform(5e9, 12e9, len(i)), rng.uniform(0.2e9, 1e9, len(i))) / 8
    return site, i, j, lat, bw


def test_relays_between_sites_count_each_machines_own_hop_to_its_gateway(monkeypatch) -> None:
    monkeypatch.setattr(site_links, "WHOLE_BLOCK_MAX", 0)  # the per-site lookups, not one block
    # Three measured pairs per pair of sites: each machine pair relays over the one its own
    # hops inside its two sites make fastest, as in the dense model (every measured pair is
    # kept as it is at this ratio, so the hops are the machines' own).
    site, i, j, lat, bw = probed_links([6, 5, 7, 4], pairs_between=3, seed=4)
    n = len(site)
    args = (np.arange(n), np.ones(n), np.ones(n), np.ones(n, bool), i, j, lat, bw)
    dense = Fleet.from_arrays(*args)
    sites = Fleet.from_arrays(*args, sites=site, exception_ratio=1.0001)
    assert sites.sites is not None and sites.sites.gated.sum() == 12
    np.testing.assert_allclose(np.asarray(sites.latency_s), dense.latency_s, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(sites.bandwidth_Bps), dense.bandwidth_Bps)
    np.testing.assert_array_equal(np.asarray(sites.relayed), dense.relayed)
    # A loose ratio reads most hops as their site's median: relays stay close, and a block of
    # machines still reads exactly as their gathered pairs.
    approx = Fleet.from_arrays(*args, sites=site, exception_ratio=1.25)
    assert approx.sites is not None
    relayed = dense.relayed
    ratio = np.asarray(approx.latency_s)[relayed] / dense.latency_s[relayed]
    assert ratio.min() > 1 - 0.05 and ratio.max() < 1 + 0.05
    nodes = np.array([20, 3, 11, 0, 17, 8, 5, 14, 21])
    latency, bandwidth, flags = approx.sites.block(nodes)
    grid = np.ix_(nodes, nodes)
    np.testing.assert_array_equal(latency, approx.latency_s[grid])
    np.testing.assert_array_equal(bandwidth, approx.bandwidth_Bps[grid])
    np.testing.assert_array_equal(flags, approx.relayed[grid])
    assert (
        approx.latency_s[3, 20] == latency[1, 0] and approx.bandwidth_Bps[20, 3] == bandwidth[0, 1]
    )
    # A subset without a gateway reads its site's median hop there instead.
    keep = np.flatnonzero(site != 0)[::2]
    sub = approx.subset(keep)
    assert sub.sites is not None and (sub.sites.gate == -2).any()
    kept = dense.subset(keep)
    ratio = np.asarray(sub.latency_s)[kept.relayed] / kept.latency_s[kept.relayed]
    assert ratio.min() > 1 - 0.05 and ratio.max() < 1 + 0.05


def test_a_fleet_that_fits_one_block_reads_it_with_the_same_values(monkeypatch) -> None:
    # The block of gateway relays, built on first use (the exact block, when it costs more).
    monkeypatch.setattr(site_links, "_EXACT_WORK_PER_PAIR", -1)
    site, i, j, lat, bw = probed_links([6, 5, 7, 4], pairs_between=3, seed=6)
    n = len(site)
    args = (np.arange(n), np.ones(n), np.ones(n), np.ones(n, bool), i, j, lat, bw)
    fleet = Fleet.from_arrays(*args, sites=site)
    store = fleet.sites
    assert store is not None and not store.exact and store.whole() is not None
    sliced = [np.asarray(m) for m in (fleet.latency_s, fleet.bandwidth_Bps, fleet.relayed)]
    fresh = Fleet.from_arrays(*args, sites=site).sites  # nothing built: per-site lookups
    assert fresh is not None
    everything = np.arange(n)
    for table, values in zip(("latency", "bandwidth", "relayed"), sliced, strict=True):
        np.testing.assert_array_equal(fresh.gather(table, everything[:, None], everything), values)
        assert fresh.gather(table, 3, 20) == values[3, 20]
    # The teacher's nearest machines: the dense model's ranking of the same rows.
    pool = np.flatnonzero(np.arange(n) % 3 != 1)
    expected = np.argsort(sliced[0][np.ix_(pool, pool)], axis=1, kind="stable")[:, 1:6]
    np.testing.assert_array_equal(store.nearest(pool, 5), expected)
    np.testing.assert_array_equal(
        store.nearest_latency(pool[:4], pool[4:]), sliced[0][np.ix_(pool[:4], pool[4:])].min(0)
    )


def test_sites_without_a_measured_pair_relay_over_the_sites_graph() -> None:
    # Sites 0 - 1 - 2 in a chain: 0 and 2 relay through 1 (summed latency, narrowest width).
    site = np.array([0, 0, 1, 1, 2])
    i = np.array([0, 0, 2, 1, 2])
    j = np.array([1, 2, 4, 3, 3])
    lat = np.array([1e-3, 10e-3, 30e-3, 10e-3, 1e-3])
    bw = np.array([1e9, 2e8, 5e7, 2e8, 1e9])
    fleet = Fleet.from_arrays(
        np.arange(5), np.ones(5), np.ones(5), np.ones(5, bool), i, j, lat, bw, sites=site
    )
    assert fleet.latency_s[0, 4] == pytest.approx(40e-3)
    assert fleet.bandwidth_Bps[1, 4] == pytest.approx(5e7)
    assert fleet.relayed[0, 4] and not fleet.relayed[0, 2]
    assert fleet.reachable(0, 4)


def test_a_machine_without_links_stays_unreachable() -> None:
    dense, sites = both([3, 3], lonely=1)
    assert sites.latency_s[0, 6] == np.inf and sites.bandwidth_Bps[6, 2] == 0.0
    assert not sites.reachable(0, 6) and sites.reachable(0, 5)
    np.testing.assert_array_equal(np.asarray(sites.latency_s), dense.latency_s)


def test_site_matrix_refuses_masks_and_out_of_range_indices() -> None:
    _, sites = both([2, 2])
    with pytest.raises(TypeError, match="integer indices"):
        sites.latency_s[np.ones(4, bool)]
    with pytest.raises(IndexError, match="out of bounds"):
        sites.latency_s[0, 9]


def test_inventory_sites_are_places_and_cityless_machines_stand_alone() -> None:
    city = pd.Series(["Paris", "paris ", "Rome", None, "Paris", ""])
    country = pd.Series(["France", "France", "Italy", "Italy", "Texas", "France"])
    assert inventory_sites(city, country).tolist() == [0, 0, 1, 2, 3, 4]


def test_cost_settings_choose_the_model_by_machine_count() -> None:
    auto = CostSettings(dense_max_machines=10)
    assert not auto.use_sites(10) and auto.use_sites(11)
    assert CostSettings(site_model="sites").use_sites(2)
    assert not CostSettings(site_model="dense").use_sites(10**6)
    with pytest.raises(ConfigError, match="site_model"):
        settings_from_dict({"cost": {"site_model": "sparse"}})
    with pytest.raises(ConfigError, match="exception_ratio"):
        settings_from_dict({"cost": {"exception_ratio": 1.0}})
    assert Settings().cost.site_model == "auto"


def test_from_frames_builds_the_site_model_from_the_inventory_places(monkeypatch) -> None:
    inventory = pd.DataFrame(
        {
            "node_id": [0, 1, 2, 3],
            "city": ["A", "A", "B", "B"],
            "country": ["X"] * 4,
            "lat": [0.0] * 4,
            "lon": [0.0] * 4,
            "compute_capability": [8.0] * 4,
            "gpu_count": [8] * 4,
            "memory_gb": [320.0] * 4,
            "status": ["active"] * 4,
        }
    )
    links = pd.DataFrame(
        {
            "src": [0, 2, 0, 1],
            "dst": [1, 3, 2, 3],
            "latency_p50_ms": [1.0, 1.0, 30.0, 34.0],
            "beta_gbps": [10.0, 10.0, 1.0, 1.0],
        }
    )
    settings = Settings()
    args = (inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    assert Fleet.from_frames(*args, settings.cost).sites is None  # 4 machines: dense
    fleet = Fleet.from_frames(*args, CostSettings(site_model="sites"))
    assert fleet.sites is not None and fleet.sites.k == 2 and fleet.sites.exact
    assert fleet.latency_s[1, 2] == pytest.approx(31e-3)  # one block: the dense relay 1-0-2
    monkeypatch.setattr(site_links, "WHOLE_BLOCK_MAX", 0)
    fleet = Fleet.from_frames(*args, CostSettings(site_model="sites"))
    assert fleet.sites is not None and not fleet.sites.exact
    assert fleet.latency_s[1, 2] == pytest.approx(32e-3)  # the median of the two measurements


def test_per_site_neighbourhoods_match_the_dense_rows() -> None:
    # Pairs inside a site far from its median (exceptions) and exact figures between sites:
    # the planner's seed strength and the teacher's nearest machines come out as the dense
    # model's, without a pool × pool matrix.
    site, i, j, lat, bw = uniform_links([12, 30, 7, 25], seed=8)
    rng = np.random.default_rng(8)
    inside = site[i] == site[j]
    lat = np.where(inside, lat * rng.choice([1.0, 0.3, 3.0], len(lat)), lat)
    n = len(site)
    compute = rng.choice([50e12, 120e12, 300e12], n)
    args = (np.arange(n), compute, np.ones(n), np.ones(n, bool), i, j, lat, bw)
    dense, sites = Fleet.from_arrays(*args), Fleet.from_arrays(*args, sites=site)
    assert sites.sites is not None and sites.sites.exceptions > 0
    pool = np.flatnonzero(rng.random(n) < 0.8)
    square = dense.latency_s[np.ix_(pool, pool)]
    for size in (5, 12, 40, len(pool)):
        threshold = np.partition(square, size - 1, axis=1)[:, size - 1 : size]
        expected = np.where(square <= threshold, compute[pool][None, :], 0.0).sum(axis=1)
        np.testing.assert_allclose(sites.sites.neighbourhood_power(pool, size, compute), expected)
    for count in (3, 20, len(pool) - 1):  # the last: every other machine of the pool
        expected_order = np.argsort(square, axis=1, kind="stable")[:, 1 : count + 1]
        np.testing.assert_array_equal(sites.sites.nearest(pool, count), expected_order)


def detour_links(seed: int) -> tuple[np.ndarray, ...]:
    """(site per machine, link ends i, j, latency, bandwidth) as `bench/bench_scale.py`'s
    `scale_frames` lays out a fleet: sites on a plane (latency from distance × a random route
    inflation of 1.3–2.2, plus each machine's last mile), every pair inside a site measured
    but in site 0 (a third of its pairs: its machines relay through peers), three measured
    pairs per pair of sites — many machine pairs are fastest through a third site. The pairs
    inside site 3 are measured alike."""
    rng = np.random.default_rng(seed)
    sizes = [9, 12, 7, 12, 10, 8, 11]
    site = np.repeat(np.arange(len(sizes)), sizes)
    where = rng.uniform(0.0, 4000.0, (len(sizes), 2))  # km
    last_mile = rng.uniform(0.1e-3, 1.0e-3, len(site))
    ends = []
    for s in range(len(sizes)):
        members = np.flatnonzero(site == s)
        i, j = np.triu_indices(len(members), 1)
        keep = rng.random(len(i)) < (0.35 if s == 0 else 1.0)
        ends.append((members[i[keep]], members[j[keep]]))
    for s in range(len(sizes)):
        for t in range(s + 1, len(sizes)):
            ends.append(
                (
                    rng.choice(np.flatnonzero(site == s), 3),
                    rng.choice(np.flatnonzero(site == t), 3),
                )
            )
    i = np.concatenate([e[0] for e in ends])
    j = np.concatenate([e[1] for e in ends])
    km = np.linalg.norm(where[site[i]] - where[site[j]], axis=1)
    lat = km / 200.0 * rng.uniform(1.3, 2.2, len(i)) / 1000.0 + last_mile[i] + last_mile[j]
    tier = np.where(site[i] == site[j], 100e9, 10e9)
    bw = tier * np.exp(0.3 * rng.standard_normal(len(i))) / 8
    # Site 3 measured alike (its pairs within any exception ratio of its medians).
    alike = (site[i] == 3) & (site[j] == 3)
    lat[alike], bw[alike] = 0.5e-3 * rng.uniform(0.999, 1.001, alike.sum()), 100e9 / 8
    return site, i, j, lat, bw


def test_a_fleet_that_fits_one_block_reads_the_dense_models_relays_through_third_sites(
    monkeypatch,
) -> None:
    site, i, j, lat, bw = detour_links(seed=5)
    n = len(site)
    rng = np.random.default_rng(5)
    args = (
        np.arange(n),
        rng.choice([50e12, 120e12, 300e12], n),
        np.ones(n),
        np.ones(n, bool),
        i,
        j,
        lat,
        bw,
    )
    dense = Fleet.from_arrays(*args)
    latency, bandwidth, relayed = (
        np.asarray(m) for m in (dense.latency_s, dense.bandwidth_Bps, dense.relayed)
    )
    # params.yaml's exception ratio: some measured pairs read their site's median in the
    # site tables, but the block reads every pair as the dense model does.
    sites = Fleet.from_arrays(*args, sites=site, exception_ratio=1.01)
    store = sites.sites
    assert store is not None and store.exact
    assert store.exceptions < store.measured_pairs
    np.testing.assert_allclose(np.asarray(sites.latency_s), latency, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(sites.bandwidth_Bps), bandwidth)
    np.testing.assert_array_equal(np.asarray(sites.relayed), relayed)
    assert sites.latency_s[3, 40] == pytest.approx(latency[3, 40], rel=1e-12)
    assert sites.bandwidth_Bps[60, 2] == bandwidth[60, 2]
    # Whole-fleet questions are the dense model's, and a subset keeps the fleet's relays.
    assert sites.link_extremes == dense.link_extremes
    everything = np.arange(n)
    groups = site % 3
    for nbytes in (1e6, 1e9):
        assert allreduce_lower_bound(sites, everything, nbytes) == pytest.approx(
            allreduce_lower_bound(dense, everything, nbytes), rel=1e-12
        )
        assert allreduce_group_bound(sites, everything, nbytes, groups) == pytest.approx(
            allreduce_group_bound(dense, everything, nbytes, groups), rel=1e-12
        )
    keep = np.flatnonzero(np.arange(n) % 3 != 2)
    sub_d, sub_s = dense.subset(keep), sites.subset(keep)
    np.testing.assert_allclose(np.asarray(sub_s.latency_s), sub_d.latency_s, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(sub_s.bandwidth_Bps), sub_d.bandwidth_Bps)
    assert sub_s.link_extremes == sub_d.link_extremes
    # The snapshot follows every measured pair, not only the exceptions.
    moved = lat.copy()
    moved[0] *= 1.001
    other = Fleet.from_arrays(*args[:6], moved, bw, sites=site, exception_ratio=1.01)
    assert fleet_snapshot(other) != fleet_snapshot(sites)
    # Without the exact block (relays through the site pair's own gateways, site 0's pairs at
    # its figures) many relayed pairs read otherwise; between the full-mesh sites, slower (but
    # for site 3's hops at its medians).
    monkeypatch.setattr(site_links, "_EXACT_WORK_PER_PAIR", -1)
    gated = Fleet.from_arrays(*args, sites=site, exception_ratio=1.0001)
    assert gated.sites is not None and not gated.sites.exact
    meshed = relayed & (site != 0)[:, None] & (site != 0)[None, :]
    ratio = np.asarray(gated.latency_s)[meshed] / latency[meshed]
    assert ratio.min() > 1 - 2e-3 and (ratio > 1 + 2e-3).mean() > 0.03


@pytest.mark.parametrize("seed", range(12))
def test_the_exact_block_equals_the_dense_model_on_random_fleets(seed: int) -> None:
    # Sites of 1–8 machines, any share of their pairs measured inside and between them,
    # zero latencies now and then; latencies continuous, so every shortest path is unique.
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, int(rng.integers(1, 7)))
    site = np.repeat(np.arange(len(sizes)), sizes)
    n = len(site)
    i, j = np.triu_indices(n, 1)
    inside = site[i] == site[j]
    keep = rng.random(len(i)) < np.where(inside, rng.uniform(0, 1), rng.uniform(0, 0.3))
    i, j = i[keep], j[keep]
    lat = np.where(rng.random(len(i)) < 0.05, 0.0, rng.uniform(0.1e-3, 50e-3, len(i)))
    bw = rng.uniform(1e8, 1e10, len(i))
    args = (np.arange(n), np.ones(n), np.ones(n), np.ones(n, bool), i, j, lat, bw)
    dense, sites = Fleet.from_arrays(*args), Fleet.from_arrays(*args, sites=site)
    assert sites.sites is not None and sites.sites.exact
    np.testing.assert_allclose(np.asarray(sites.latency_s), dense.latency_s, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(sites.bandwidth_Bps), dense.bandwidth_Bps)
    np.testing.assert_array_equal(np.asarray(sites.relayed), dense.relayed)
    # The same groups of mutually reachable machines (a site may split into several).
    pairs = dense.component[:, None] == dense.component[None, :]
    np.testing.assert_array_equal(sites.component[:, None] == sites.component[None, :], pairs)
