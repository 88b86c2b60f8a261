"""Short tours through points given a cost matrix: rings and open paths.

Nearest neighbour, then best-improvement 2-opt until no move improves the tour. The cost model
orders its gradient rings with `ring_tour` (`hulk.cost.ring_order`); the stage planner orders a
pipeline's machines with `open_path` (`hulk.planner`). Both share the nearest-neighbour start
and the 2-opt search; only a ring of more than `FULL_TWO_OPT` points goes through neighbour
lists first. Deterministic: ties go to the lower position.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["FULL_TWO_OPT", "TWO_OPT_NEIGHBOURS", "open_path", "ring_tour"]

FULL_TWO_OPT = 200  # larger rings start 2-opt with neighbour lists (`ring_tour`)
TWO_OPT_NEIGHBOURS = 16  # nearest points per point in those lists


def ring_tour(cost: np.ndarray) -> np.ndarray:
    """A short closed tour through all points of `cost` (n, n), as positions starting at 0.

    Infinite costs count as a huge finite cost, so the tour avoids those pairs where it can.
    Each 2-opt move of the full search weighs every pair of edges, O(n²). Beyond
    `FULL_TWO_OPT` points the tour first goes through the moves that join each point to one of
    its `TWO_OPT_NEIGHBOURS` nearest (neighbour lists, O(n k) a move), which are most of the
    improving ones; the full search then finishes from there, so the result is still a tour no
    2-opt move improves. A ring over 1,000 machines: 0.6 s (7.9 s with the full search alone).
    """
    n = len(cost)
    if n <= 1:
        return np.arange(n)
    cost, big = _finite(cost, n)
    tour = _nearest_neighbour(cost, 0)
    if n > FULL_TWO_OPT:  # most improving moves first, cheaply; the full search finishes
        tour = _two_opt_neighbours(cost, tour, big)
    return _two_opt(cost, tour, big)


def open_path(cost: np.ndarray) -> np.ndarray:
    """A short open path through all points of `cost` (n, n), as positions.

    The path is a ring through an extra point at zero cost from all others, cut open there, so
    that ring 2-opt moves (reverse a segment) also move the path's two ends. The ring starts
    at the extra point, whose nearest neighbour is point 0 (ties go to the lowest position).
    """
    n = len(cost)
    if n <= 2:
        return np.arange(n)
    size = n + 1
    full = np.zeros((size, size))
    full[:n, :n], big = _finite(cost, size)
    tour = _two_opt(full, _nearest_neighbour(full, n), big)
    start = int(np.flatnonzero(tour == n)[0])
    return np.concatenate((tour[start + 1 :], tour[:start]))  # cut open at the extra point


def _finite(cost: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    """`cost` with infinite entries replaced by a finite stand-in, and that stand-in: more than
    any tour of `size` finite edges. `cost` itself (not a copy) when it is finite throughout,
    as the planner's paths and the cost model's rings within one component are."""
    finite = np.isfinite(cost)
    if finite.all():
        return cost, float(cost.max()) * size * 10 + 1.0
    kept = cost[finite]
    big = float(kept.max() if kept.size else 1.0) * size * 10 + 1.0
    return np.where(finite, cost, big), big


def _nearest_neighbour(cost: np.ndarray, start: int) -> np.ndarray:
    """Tour from `start`, each step to the cheapest point not yet visited (lowest on ties)."""
    n = len(cost)
    tour = np.empty(n, np.int64)
    tour[0] = current = start
    # A copy whose visited columns are infinite: each step is one argmin of a row, where
    # masking the row afresh would allocate a new one per step.
    remaining = cost.copy()
    remaining[:, start] = np.inf
    for step in range(1, n):
        current = int(remaining[current].argmin())
        tour[step] = current
        remaining[:, current] = np.inf
    return tour


@functools.lru_cache(maxsize=256)
def _blocked_moves(n: int) -> np.ndarray:
    """(n, n) read-only mask of the position pairs (i, j) that are no 2-opt move of an n-ring:
    j ≤ i + 1, and (0, n − 1), whose two edges share a node."""
    positions = np.arange(n)
    blocked = positions[None, :] <= positions[:, None] + 1
    blocked[0, n - 1] = True
    blocked.flags.writeable = False
    return blocked


def _two_opt(cost: np.ndarray, tour: np.ndarray, big: float) -> np.ndarray:
    """Best-improvement 2-opt of the ring `tour` (2+ points) on finite `cost`, in place.

    Replacing edges (a_i, a_i+1) and (a_j, a_j+1) by (a_i, a_j), (a_i+1, a_j+1) reverses
    tour[i+1 .. j]; the best improving move is applied until none is left (at most 10 n + 100).
    """
    n = len(tour)
    blocked = _blocked_moves(n)
    tolerance = 1e-12 * big
    # The cost matrix in tour order with the first point again at the end, kept up to date by
    # reversing the moved block's rows and columns (O(n × block) a move instead of an O(n²)
    # gather; a move never moves the first point): ordered[i, j] is cost[tour[i], tour[j]] and
    # ordered[i + 1, j + 1] the next points', cyclically, both as views.
    ring = np.append(tour, tour[:1])
    ordered = cost[np.ix_(ring, ring)]
    gain = np.empty((n, n))  # reused: one n × n buffer for every move
    for _ in range(10 * n + 100):
        edge = np.diagonal(ordered, 1)  # cost[tour[i], tour[i + 1]]
        np.add(edge[:, None], edge[None, :], out=gain)
        gain -= ordered[:-1, :-1]
        gain -= ordered[1:, 1:]
        np.copyto(gain, 0.0, where=blocked)
        best = int(gain.argmax())
        if gain.flat[best] <= tolerance:
            break
        i, j = divmod(best, n)
        tour[i + 1 : j + 1] = tour[i + 1 : j + 1][::-1]
        ordered[i + 1 : j + 1] = ordered[i + 1 : j + 1][::-1]
        ordered[:, i + 1 : j + 1] = ordered[:, i + 1 : j + 1][:, ::-1]
    return tour


def _two_opt_neighbours(cost: np.ndarray, tour: np.ndarray, big: float) -> np.ndarray:
    """Best-improvement 2-opt over neighbour lists (see `ring_tour`); `tour` is changed in place."""
    n = len(tour)
    k = min(TWO_OPT_NEIGHBOURS, n - 1)
    masked = cost.copy()
    np.fill_diagonal(masked, np.inf)
    # k nearest of every point, ties by position (stable sort): deterministic.
    near = np.argsort(masked, axis=1, kind="stable")[:, :k]
    rows = np.arange(n)
    tolerance = 1e-12 * big
    for _ in range(10 * n + 100):
        position = np.empty(n, np.int64)
        position[tour] = rows
        nxt = np.roll(tour, -1)
        edge = cost[tour, nxt]
        # New edge (a_i, a_j) with a_j near a_i, or (a_i+1, a_j+1) with a_j+1 near a_i+1.
        i = np.tile(np.repeat(rows, k), 2)
        j = np.concatenate([position[near[tour].ravel()], (position[near[nxt].ravel()] - 1) % n])
        first, second = np.minimum(i, j), np.maximum(i, j)
        ok = (second > first + 1) & ~((first == 0) & (second == n - 1))
        first, second = first[ok], second[ok]
        gain = (
            edge[first]
            + edge[second]
            - cost[tour[first], tour[second]]
            - cost[nxt[first], nxt[second]]
        )
        if not len(gain):
            break
        best = int(np.argmax(gain))
        if gain[best] <= tolerance:
            break
        a, b = int(first[best]), int(second[best])
        tour[a + 1 : b + 1] = tour[a + 1 : b + 1][::-1]
    return tour
