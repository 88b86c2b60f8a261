"""The stage planner's fast paths against straightforward reference versions kept here.

The planner's hot functions are written for speed (cached splits, stacked layouts, reused
buffers); each must give exactly what the plain version gives — the same arrays and the same
float bits, ties included — so that speeding them up never changes a plan.
"""

from __future__ import annotations

import math

import numpy as np

from hulk import planner as planner_module
from hulk import tours
from hulk.cost import Fleet, micro_batches
from hulk.jobs import Job
from hulk.planner import _balanced_cuts, _PlanSearch, _split, layer_capacity, plan_job
from hulk.settings import PlannerSettings
from tests.model.test_planner import random_fleet

SETTINGS = PlannerSettings()


# --- reference versions -----------------------------------------------------------------------


def reference_split(compute: np.ndarray, cap: np.ndarray, layers: int) -> np.ndarray | None:
    cap = np.where(compute > 0, cap, 0)
    if int(cap.sum()) < layers:
        return None
    s = len(compute)
    if s == 1:
        return np.array([layers], np.int64)
    top = int(min(layers, cap.max()))
    prices = np.arange(1, top + 1)[None, :] / np.where(compute > 0, compute, 1.0)[:, None]
    prices[np.arange(top)[None, :] >= cap[:, None]] = np.inf
    flat = prices.ravel()
    chosen = (
        np.argpartition(flat, layers - 1)[:layers] if flat.size > layers else np.arange(flat.size)
    )
    return np.bincount(chosen // top, minlength=s).astype(np.int64)


def reference_nearest_neighbour(cost: np.ndarray, start: int) -> np.ndarray:
    n = len(cost)
    tour = np.empty(n, np.int64)
    visited = np.zeros(n, bool)
    tour[0], visited[start] = start, True
    for step in range(1, n):
        row = np.where(visited, np.inf, cost[tour[step - 1]])
        tour[step] = int(np.argmin(row))
        visited[tour[step]] = True
    return tour


def reference_two_opt(cost: np.ndarray, tour: np.ndarray, big: float) -> np.ndarray:
    n = len(tour)
    allowed = np.arange(n)[None, :] > np.arange(n)[:, None] + 1
    allowed[0, n - 1] = False
    for _ in range(10 * n + 100):
        ring = np.append(tour, tour[:1])
        edge = cost[ring[:-1], ring[1:]]
        gain = (
            edge[:, None]
            + edge[None, :]
            - cost[np.ix_(ring[:-1], ring[:-1])]
            - cost[np.ix_(ring[1:], ring[1:])]
        )
        gain[~allowed] = 0.0
        best = int(np.argmax(gain))
        if gain.flat[best] <= 1e-12 * big:
            break
        i, j = divmod(best, n)
        tour[i + 1 : j + 1] = tour[i + 1 : j + 1][::-1]
    return tour


def reference_balanced_cuts(weight: np.ndarray, d: int) -> list[int] | None:
    n = len(weight)
    cum = np.cumsum(weight)
    total = float(cum[-1])
    if total <= 0:
        return None
    targets = total * np.arange(1, d) / d
    after = np.searchsorted(cum, targets)
    before_gap = targets - np.where(after > 0, cum[np.maximum(after - 1, 0)], 0.0)
    after_gap = cum[np.minimum(after, n - 1)] - targets
    cuts = np.clip(np.where(after_gap < before_gap, after + 1, np.maximum(after, 1)), 1, n - 1)
    for i in range(1, len(cuts)):
        cuts[i] = max(cuts[i], cuts[i - 1] + 1)
    for i in range(len(cuts) - 1, -1, -1):
        cuts[i] = min(cuts[i], n - (len(cuts) - i))
        if i + 1 < len(cuts):
            cuts[i] = min(cuts[i], cuts[i + 1] - 1)
    if len(cuts) and (cuts[0] < 1 or (np.diff(cuts) <= 0).any()):
        return None
    return cuts.tolist()


def reference_pipeline_time(ctx: _PlanSearch, replicas: list, splits: list) -> float:
    """Every replica as its own (1, S) row, as the cost model's formula reads."""
    fleet, job = ctx.fleet, ctx.job
    m = micro_batches(job, len(replicas))
    worst = 0.0
    for nodes, layers in zip(replicas, splits, strict=True):
        t = layers[None, :] * ctx.per_layer / fleet.compute_flops[nodes[None, :]]
        total, t_max = t.sum(axis=1), t.max(axis=1)
        if len(nodes) > 1:
            a, b = nodes[None, :-1], nodes[None, 1:]
            c = 2.0 * (fleet.latency_s[a, b] + job.activation_bytes / fleet.bandwidth_Bps[a, b])
            total = total + c.sum(axis=1)
            t_max = np.maximum(t_max, c.max(axis=1))
        worst = max(worst, float((total + (m - 1) * t_max).max()))
    return worst


def reference_columns(ctx: _PlanSearch, order: np.ndarray, d: int):
    n, f = len(order), ctx.fleet.compute_flops
    s = n // d
    if s == 0:
        return None
    if n > s * d:
        order = np.delete(order, np.argsort(f[order], kind="stable")[: n - s * d])
    grid = order.reshape(s, d).copy()
    for j in range(s):
        by_speed = grid[j][np.argsort(-f[grid[j]], kind="stable")]
        grid[j] = by_speed if j % 2 == 0 else by_speed[::-1]
    cap = layer_capacity(ctx.job, ctx.fleet.memory_bytes)
    layers = reference_split(f[grid].min(axis=1), cap[grid].min(axis=1), ctx.job.layers)
    if layers is None:
        return None
    keep = layers > 0
    grid, layers = grid[keep], layers[keep]
    return [grid[:, r].copy() for r in range(d)], [layers] * d


# --- the comparisons --------------------------------------------------------------------------


def test_split_matches_the_reference_with_ties() -> None:
    rng = np.random.default_rng(21)
    for _ in range(400):
        s = int(rng.integers(1, 30))
        # Few distinct speeds and capacities: many equal prices, where argpartition decides.
        compute = rng.choice([0.0, 1e14, 2e14, 4e14], s, p=[0.05, 0.45, 0.3, 0.2])
        cap = rng.integers(0, 12, s)
        layers = int(rng.integers(1, 80))
        expected = reference_split(compute, cap, layers)
        got = _split(compute, cap, layers)
        assert (got is None) == (expected is None)
        if got is not None:
            assert got.tolist() == expected.tolist()


def test_nearest_neighbour_and_two_opt_match_the_reference_with_ties() -> None:
    rng = np.random.default_rng(22)
    for trial in range(150):
        n = int(rng.integers(3, 40))
        cost = rng.integers(1, 6, (n, n)).astype(float)  # small integers: many ties
        cost = np.minimum(cost, cost.T)
        np.fill_diagonal(cost, 0.0)
        if trial % 3 == 0:
            cost[rng.random((n, n)) < 0.1] = 1e6
        start = int(rng.integers(n))
        expected = reference_nearest_neighbour(cost, start)
        assert tours._nearest_neighbour(cost, start).tolist() == expected.tolist()
        big = float(cost.max()) * n * 10 + 1.0
        want = reference_two_opt(cost, expected.copy(), big)
        assert tours._two_opt(cost, expected.copy(), big).tolist() == want.tolist()


def test_balanced_cuts_match_the_reference() -> None:
    rng = np.random.default_rng(23)
    for _ in range(400):
        n = int(rng.integers(2, 40))
        weight = rng.choice([0.0, 1.0, 2.0, 5.0], n)
        d = int(rng.integers(2, n + 1))
        assert _balanced_cuts(weight, d) == reference_balanced_cuts(weight, d)


def _search(rng: np.random.Generator) -> tuple[_PlanSearch, Fleet]:
    fleet = random_fleet(rng, int(rng.integers(6, 16)))
    job = Job("twelve", 0.12, 12, 1000, 1000, 48, 2)
    return _PlanSearch(job, fleet, SETTINGS), fleet


def _usable(ctx: _PlanSearch, fleet: Fleet) -> np.ndarray:
    """Active machines that hold a layer, reachable from the first of them."""
    usable = np.flatnonzero(fleet.active & (ctx.cap(np.arange(fleet.n)) > 0))
    return usable[fleet.component[usable] == fleet.component[usable[:1]]]


def test_layouts_and_their_times_match_the_reference_bit_for_bit() -> None:
    rng = np.random.default_rng(24)
    checked = 0
    for _ in range(60):
        ctx, fleet = _search(rng)
        usable = _usable(ctx, fleet)
        if len(usable) < 2:
            continue
        for _ in range(6):
            order = rng.permutation(usable)[: int(rng.integers(2, len(usable) + 1))]
            for kind in ("single", "chunks", "columns", "dp"):
                d = 1 if kind == "single" else int(rng.integers(2, 5))
                recipe = planner_module._LayoutRecipe(tuple(order.tolist()), kind, d)
                layout = ctx.build(recipe)
                if kind == "columns":
                    expected = reference_columns(ctx, order, d)
                    assert (layout is None) == (expected is None)
                    if layout is not None:
                        assert [r.tolist() for r in layout.replicas] == [
                            r.tolist() for r in expected[0]
                        ]
                        assert [s.tolist() for s in layout.splits] == [
                            s.tolist() for s in expected[1]
                        ]
                if layout is None:
                    continue
                want = reference_pipeline_time(ctx, layout.replicas, layout.splits)
                assert ctx.pipeline_time(layout) == want  # the same bits
                # A layout built afresh (no stacked arrays) gives the same sync time.
                plain = planner_module._Layout(list(layout.replicas), list(layout.splits))
                assert ctx.sync_time(layout) == ctx.sync_time(plain)
                assert ctx.pipeline_time(plain) == want
                checked += 1
    assert checked > 500


def test_cached_splits_are_the_fresh_ones_and_read_only() -> None:
    rng = np.random.default_rng(25)
    ctx, fleet = _search(rng)
    f = fleet.compute_flops
    for _ in range(100):
        nodes = rng.permutation(fleet.n)[: int(rng.integers(1, fleet.n + 1))]
        first = ctx.split(f[nodes], ctx.cap(nodes))
        again = ctx.split(f[nodes], ctx.cap(nodes))
        expected = reference_split(f[nodes], ctx.cap(nodes), ctx.job.layers)
        assert first is again
        if expected is None:
            assert first is None
        else:
            assert first.tolist() == expected.tolist() and not first.flags.writeable


def reference_open_path(cost: np.ndarray) -> np.ndarray:
    n = len(cost)
    size = n + 1
    finite = cost[np.isfinite(cost)]
    big = (finite.max() if finite.size else 1.0) * size * 10 + 1.0
    full = np.zeros((size, size))
    full[:n, :n] = np.where(np.isfinite(cost), cost, big)
    tour = reference_two_opt(full, reference_nearest_neighbour(full, n), big)
    return np.roll(tour, -int(np.flatnonzero(tour == n)[0]))[1:]


def reference_ring_tour(cost: np.ndarray) -> np.ndarray:
    n = len(cost)
    finite = cost[np.isfinite(cost)]
    big = (finite.max() if finite.size else 1.0) * n * 10 + 1.0
    cost = np.where(np.isfinite(cost), cost, big)
    return reference_two_opt(cost, reference_nearest_neighbour(cost, 0), big)


def test_open_paths_and_rings_match_the_reference() -> None:
    rng = np.random.default_rng(26)
    for trial in range(120):
        n = int(rng.integers(3, 30))
        cost = rng.integers(1, 8, (n, n)).astype(float)
        cost = np.minimum(cost, cost.T)
        np.fill_diagonal(cost, 0.0)
        if trial % 2:  # some pairs unreachable
            cost[rng.random((n, n)) < 0.15] = np.inf
        before = cost.copy()
        assert tours.open_path(cost).tolist() == reference_open_path(cost).tolist()
        assert tours.ring_tour(cost).tolist() == reference_ring_tour(cost).tolist()
        assert np.array_equal(cost, before)  # the input is left as it was


# --- what the planner keeps per fleet and job -------------------------------------------------


def _tied_fleet(rng: np.random.Generator, n: int) -> Fleet:
    """A full mesh of `n` machines in three cities with latencies on a coarse grid (many ties)."""
    city = rng.integers(0, 3, n)
    i, j = np.triu_indices(n, 1)
    near = city[i] == city[j]
    latency = np.where(near, rng.integers(1, 4, len(i)), rng.integers(20, 24, len(i))) * 1e-3
    return Fleet.from_arrays(
        np.arange(n),
        rng.choice([3.6e13, 2.3e14, 4e14, 1e15], n),
        rng.choice([0.5, 0.8, 1.2, 2.0], n) * 1e9,
        np.ones(n, bool),
        i,
        j,
        latency,
        np.where(near, 1.25e9, 1.25e8),
    )


def test_neighbourhood_power_and_site_distances_match_the_pool_block() -> None:
    rng = np.random.default_rng(27)
    fleet = _tied_fleet(rng, 300)
    sites = planner_module.site_labels(fleet, SETTINGS.site_latency_ms)
    latency = np.asarray(fleet.latency_s)
    for trial in range(40):  # the first call has no nearest table, the later ones use it
        p = int(rng.integers(2, fleet.n + 1))
        pool = np.sort(rng.choice(fleet.n, p, replace=False))
        size = int(rng.integers(1, min(p, 40) + 1))
        block = latency[np.ix_(pool, pool)]
        kth = np.partition(block, size - 1, axis=1)[:, size - 1 : size]
        want = np.where(block <= kth, fleet.compute_flops[pool][None, :], 0.0).sum(axis=1)
        got = planner_module._neighbourhood_power(fleet, pool, size)
        assert got.tobytes() == want.tobytes(), trial  # the same bits
        labels, inverse = np.unique(sites[pool], return_inverse=True)
        members = [pool[inverse == s] for s in range(len(labels))]
        order = np.argsort(inverse, kind="stable")
        starts = np.searchsorted(inverse[order], np.arange(len(labels)))
        rows = np.minimum.reduceat(latency[np.ix_(pool[order], pool[order])], starts, axis=0)
        expected = np.minimum.reduceat(rows, starts, axis=1)
        assert np.array_equal(
            planner_module._site_distances(fleet, pool, inverse, members), expected
        )
    assert planner_module._nearest_table(fleet) is not None


def test_sync_time_answers_later_budgets_as_a_fresh_computation() -> None:
    rng = np.random.default_rng(28)
    checked = 0
    for _ in range(40):
        ctx, fleet = _search(rng)
        usable = _usable(ctx, fleet)
        if len(usable) < 4:
            continue
        for kind in ("chunks", "columns", "dp"):
            order = tuple(rng.permutation(usable).tolist())
            d = int(rng.integers(3, 6))  # rings of three or more: their bounds are not exact
            layout = ctx.build(planner_module._LayoutRecipe(order, kind, d))
            if layout is None:
                continue
            exact = ctx.sync_time(planner_module._Layout(layout.replicas, layout.splits))
            budgets = [exact * f for f in rng.uniform(0.5, 1.5, 8)] + [exact, math.inf]
            for budget in rng.permutation(budgets):  # one layout keeps what it learns
                fresh = planner_module._Layout(list(layout.replicas), list(layout.splits))
                assert ctx.sync_time(layout, budget) == ctx.sync_time(fresh, budget)
                checked += 1
    assert checked > 100


def test_plans_with_the_memo_are_the_plans_without_it() -> None:
    rng = np.random.default_rng(29)
    fleet = random_fleet(rng, 40)
    jobs = [Job("twelve", 0.12, 12, 1000, 1000, 48, 2), Job("wide", 0.3, 12, 2000, 512, 64, 4)]
    calls = []
    for _ in range(30):  # groups that differ by a few machines, as the teacher's moves make
        nodes = np.flatnonzero(rng.random(fleet.n) < 0.8)
        calls.append((jobs[int(rng.integers(0, 2))], nodes))
    warm = [plan_job(job, fleet, nodes, SETTINGS) for job, nodes in calls]
    assert planner_module._MEMO[fleet]  # the calls shared their work
    for (job, nodes), result in zip(calls, warm, strict=True):
        planner_module._MEMO.pop(fleet, None)
        assert plan_job(job, fleet, nodes, SETTINGS) == result
