"""Rings and open paths of `hulk.tours` (the cost model's rings are tested in test_cost.py)."""

from __future__ import annotations

import numpy as np

from hulk.tours import open_path, ring_tour


def _line(points: np.ndarray) -> np.ndarray:
    return np.abs(points[:, None] - points[None, :])


def test_open_path_of_points_on_a_line_walks_the_line() -> None:
    rng = np.random.default_rng(3)
    points = rng.permutation(20).astype(float)
    path = open_path(_line(points))
    assert sorted(path.tolist()) == list(range(20))
    walked = points[path]
    assert (np.diff(walked) > 0).all() or (np.diff(walked) < 0).all()


def test_paths_and_rings_of_one_or_two_points() -> None:
    assert ring_tour(np.zeros((0, 0))).tolist() == []
    assert ring_tour(np.zeros((1, 1))).tolist() == [0]
    assert ring_tour(np.array([[0.0, 5.0], [5.0, 0.0]])).tolist() == [0, 1]
    assert open_path(np.zeros((0, 0))).tolist() == []
    assert open_path(np.zeros((1, 1))).tolist() == [0]
    assert open_path(np.array([[0.0, 5.0], [5.0, 0.0]])).tolist() == [0, 1]


def test_ring_tour_starts_at_zero_and_avoids_unreachable_pairs() -> None:
    # Points on a circle; the pairs two apart cannot reach each other.
    n = 8
    angle = 2 * np.pi * np.arange(n) / n
    xy = np.column_stack([np.cos(angle), np.sin(angle)])
    cost = np.sqrt(((xy[:, None] - xy[None, :]) ** 2).sum(-1))
    two_apart = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) % n == 2
    cost[two_apart] = np.inf
    tour = ring_tour(cost)
    assert tour[0] == 0 and sorted(tour.tolist()) == list(range(n))
    assert np.isfinite(cost[tour, np.roll(tour, -1)]).all()


def test_open_path_no_segment_reversal_improves() -> None:
    # Reversing any stretch of the path, its ends included, makes it no shorter: as a ring
    # through an extra point at zero cost from all others, no 2-opt move improves it.
    rng = np.random.default_rng(5)
    n = 60
    xy = rng.random((n, 2))
    cost = np.sqrt(((xy[:, None] - xy[None, :]) ** 2).sum(-1))
    path = open_path(cost)
    assert sorted(path.tolist()) == list(range(n))
    full = np.zeros((n + 1, n + 1))
    full[:n, :n] = cost
    ring = np.concatenate([[n], path])
    nxt = np.roll(ring, -1)
    edge = full[ring, nxt]
    gain = edge[:, None] + edge[None, :] - full[np.ix_(ring, ring)] - full[np.ix_(nxt, nxt)]
    i, j = np.triu_indices(n + 1, k=2)  # two edges that share no node: a 2-opt move
    move = ~((i == 0) & (j == n))
    assert gain[i[move], j[move]].max() <= 1e-9
