"""Small fleets for tests, built straight from arrays (no files)."""

from __future__ import annotations

import numpy as np

from hulk.cost import Fleet


def fleet_of(
    flops: list[float],
    memory_gb: list[float],
    links: dict[tuple[int, int], tuple[float, float]],
    active: list[bool] | None = None,
) -> Fleet:
    """A fleet with node ids 0..n−1; links {(i, j): (latency_s, bandwidth_Bps)}."""
    n = len(flops)
    pairs = list(links)
    return Fleet.from_arrays(
        np.arange(n),
        np.array(flops, float),
        np.array(memory_gb, float) * 1e9,
        np.ones(n, bool) if active is None else np.array(active, bool),
        np.array([p[0] for p in pairs], np.int64),
        np.array([p[1] for p in pairs], np.int64),
        np.array([links[p][0] for p in pairs], float),
        np.array([links[p][1] for p in pairs], float),
    )
