"""The site model of a fleet's links: memory and time grow with machines + sites², not machines².

A dense fleet (`hulk.cost.Fleet.from_arrays`) keeps three machines × machines matrices and runs
all-pairs shortest paths over the machines for relays: 2.5 GB and minutes at 10,000 machines.
Machines of one site (a place of the inventory: city and country) share their site's links
instead (docs/design.md#site-model):

* per machine its site index (machines without any measured link get a site of their own, so
  they stay unreachable as in the dense model);
* per site pair the figures the dense model gives most of its machine pairs. A *covered* pair
  of sites (at least half of its machine pairs measured, e.g. a full mesh inside a site) talks
  directly: the medians of its measured pairs. Between sites probed sparsely (three pairs per
  pair of sites, or a sample of peers) the dense model relays most machine pairs over the
  fastest measured ones, so here too: each end hops inside its site to the site pair's fastest
  measured pair, and any path over the sites graph may be faster (lowest latency, summed;
  bandwidth the narrowest link or hop on it) — shortest paths over sites², not machines². A
  site whose machines measured no pair among themselves relays through its nearest site;
* a measured machine pair whose latency or bandwidth differs from its site pair's figure by
  more than `exception_ratio` (either way) is an *exception*: it keeps its own figures (a
  direct link, like every measured pair of the dense model). Pipelines are bound by their
  slowest link, so the ratio is tight (params.yaml ``cost.exception_ratio``); exceptions grow
  with the measured links, never with machines².

`SiteMatrix` answers the indexing forms the code base uses on `Fleet.latency_s`,
`Fleet.bandwidth_Bps` and `Fleet.relayed` — ``m[i, j]``, ``m[a, b]`` with broadcasting index
arrays (``m[np.ix_(a, b)]`` among them), ``m[a]`` rows, slices — by gathering from the site
tables, so a consumer reading a few pairs needs no change. Whole-matrix work (extremes,
clustering into sites, nearest machines, spanning-tree bounds, group-to-group links) has a
site-level method here, O(sites²) or O(machines × sites) instead of O(machines²).

On a fleet that is exactly site-uniform (for every pair of sites, all of its machine pairs
measured at one figure, or none of them) every lookup equals the dense model's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path
from scipy.spatial.distance import squareform

__all__ = ["SiteLinks", "SiteMatrix", "build_site_links", "inventory_sites"]

_UNREACHABLE_MS = 1e7  # stands in for an infinite latency when clustering (as hulk.planner)
# A site pair with at least this share of its machine pairs measured talks directly (medians);
# below it most of its machine pairs relay in the dense model, and so they do here.
_COVERED = 0.5


def inventory_sites(city: pd.Series, country: pd.Series) -> np.ndarray:
    """Site index per machine: one site per (city, country) of the inventory, in order of first
    appearance; a machine without a city is a site of its own."""
    key = country.fillna("").astype(str).str.strip().str.casefold() + "|"
    key = key + city.fillna("").astype(str).str.strip().str.casefold()
    missing = city.isna().to_numpy() | (city.fillna("").astype(str).str.strip() == "").to_numpy()
    key = key.where(~missing, "#" + pd.Series(np.arange(len(key)), index=key.index).astype(str))
    codes, _ = pd.factorize(key)
    return codes.astype(np.int64)


@dataclass(frozen=True, eq=False)
class SiteLinks:
    """Per machine its site, per site pair the effective links, and the machine-pair exceptions."""

    site: np.ndarray  # (n,) int64: site index 0..k−1 of every machine
    latency: np.ndarray  # (k, k) effective α (s), diagonal: two distinct machines of one site
    bandwidth: np.ndarray  # (k, k) effective β (bytes/s)
    relayed: np.ndarray  # (k, k) bool: no measured pair, a relay path over sites is used
    component: np.ndarray  # (k,) int64: sites that can reach each other share a label
    exception_keys: np.ndarray  # sorted int64 i·n + j, both orders of each exceptional pair
    exception_latency: np.ndarray  # (e,) α of each key
    exception_bandwidth: np.ndarray  # (e,) β of each key
    measured: np.ndarray  # sorted int64 i·n + j (i < j): the machine pairs with a measurement

    @property
    def n(self) -> int:
        return len(self.site)

    @property
    def k(self) -> int:
        return len(self.latency)

    @property
    def measured_pairs(self) -> int:
        """Distinct machine pairs with a measurement: what the fleet was built from."""
        return len(self.measured)

    @property
    def exceptions(self) -> int:
        """Exceptional machine pairs (unordered)."""
        return len(self.exception_keys) // 2

    # -- lookups --

    @cached_property
    def _tables(self) -> dict[str, tuple[np.ndarray, Any, np.ndarray]]:
        """Per table: (site values, the value of a machine with itself, exception values)."""
        return {
            "latency": (self.latency, 0.0, self.exception_latency),
            "bandwidth": (self.bandwidth, np.inf, self.exception_bandwidth),
            # exceptions are measured pairs: never relayed
            "relayed": (self.relayed, False, np.zeros(len(self.exception_keys), bool)),
        }

    @cached_property
    def _exception_index(self) -> dict[int, int]:
        """Exception key → position, for single-pair lookups."""
        return {int(key): position for position, key in enumerate(self.exception_keys.tolist())}

    def gather(self, table: str, a: Any, b: Any) -> Any:
        """`table` ('latency' | 'bandwidth' | 'relayed') for machine pairs (a, b): integer
        indices in 0..n−1 that broadcast against each other. The hot path of every consumer
        reading pairs: no copies or checks beyond numpy's own (an index ≥ n raises)."""
        values, diagonal, exceptional = self._tables[table]
        a, b = np.asarray(a), np.asarray(b)
        out = values[self.site[a], self.site[b]]
        if out.ndim == 0:  # one pair
            i, j = int(a), int(b)
            if i == j:
                return values.dtype.type(diagonal)
            position = (
                self._exception_index.get(i * self.n + j) if self.exception_keys.size else None
            )
            return out if position is None else exceptional[position]
        same = a == b
        if same.any():
            out[same] = diagonal
        keys = self.exception_keys
        if keys.size:
            wanted = a * self.n + b
            pos = np.searchsorted(keys, wanted)
            np.minimum(pos, keys.size - 1, out=pos)
            hit = keys[pos] == wanted
            if hit.any():
                out[hit] = exceptional[pos[hit]]
        return out

    def _exception_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        return self._exception_ends

    @cached_property
    def _exception_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """(i, j) of every exception key, both orders (split once: every whole-fleet question
        and every group block filters them)."""
        return np.divmod(self.exception_keys, self.n) if self.n else (self.exception_keys,) * 2

    def block(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(latency, bandwidth, relayed) among the machines `nodes` (distinct, in the given
        order) as dense (m, m) matrices: ``gather`` of every pair, in O(m² + exceptions)
        rather than a search in the exceptions per pair. The keys are sorted by their first
        machine, so each machine's exceptions are one run of them: O(m² + m log e + the
        machines' own exceptions), whatever the fleet's size."""
        nodes = np.asarray(nodes, np.int64)
        sites = self.site[nodes]
        grid = np.ix_(sites, sites)
        latency, bandwidth = self.latency[grid], self.bandwidth[grid]
        relayed = self.relayed[grid]
        diagonal = np.diag_indices(len(nodes))
        latency[diagonal], bandwidth[diagonal], relayed[diagonal] = 0.0, np.inf, False
        keys = self.exception_keys
        if len(keys):
            first = np.searchsorted(keys, nodes * self.n)
            runs = np.searchsorted(keys, (nodes + 1) * self.n) - first
            # Positions of every run, concatenated: each run counts up from its first key.
            rows = np.repeat(np.arange(len(nodes)), runs)
            at = np.arange(int(runs.sum())) - np.repeat(np.cumsum(runs) - runs, runs)
            at += first[rows]
            position = np.full(self.n, -1, np.int64)
            position[nodes] = np.arange(len(nodes))
            cols = position[keys[at] - nodes[rows] * self.n]
            inside = cols >= 0
            a, b, at = rows[inside], cols[inside], at[inside]
            latency[a, b] = self.exception_latency[at]
            bandwidth[a, b] = self.exception_bandwidth[at]
            relayed[a, b] = False
        return latency, bandwidth, relayed

    # -- whole-fleet questions, answered per site --

    def extremes(self) -> tuple[float, float]:
        """(lowest α, highest β) over the pairs of distinct machines (`Fleet.link_extremes`)."""
        counts = np.bincount(self.site, minlength=self.k)
        present = counts > 0
        pairs = present[:, None] & present[None, :]
        np.fill_diagonal(pairs, counts >= 2)
        alpha = float(self.latency[pairs].min()) if pairs.any() else np.inf
        beta = float(self.bandwidth[pairs].max()) if pairs.any() else 0.0
        if len(self.exception_keys):
            alpha = min(alpha, float(self.exception_latency.min()))
            beta = max(beta, float(self.exception_bandwidth.max()))
        return alpha, beta

    def cluster(self, latency_ms: float) -> np.ndarray:
        """Complete-linkage clusters of the sites' latency with diameter `latency_ms`, per
        machine, numbered in order of their smallest machine index (`hulk.planner.site_labels`
        on the site tables: machines of one site stay together; exceptions are not consulted).
        """
        present = np.unique(self.site)
        if len(present) <= 1:
            return np.zeros(self.n, np.int64)
        dist = np.minimum(self.latency[np.ix_(present, present)] * 1000.0, _UNREACHABLE_MS)
        dist = np.maximum(dist, dist.T)
        np.fill_diagonal(dist, 0.0)
        tree = linkage(squareform(dist, checks=False), method="complete")
        per_site = np.zeros(self.k, np.int64)
        per_site[present] = fcluster(tree, t=float(latency_ms), criterion="distance")
        raw = per_site[self.site]
        _, first = np.unique(raw, return_index=True)
        rank = np.empty(raw.max() + 1, np.int64)
        rank[raw[np.sort(first)]] = np.arange(len(first))
        return rank[raw]

    def group_links(
        self, nodes: np.ndarray, labels: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lowest α, highest β) between the machines `nodes` of every two groups 0..k−1
        (`labels[i]`: the group of `nodes[i]`); a group with itself: 0 and inf, as the dense
        reduction over a matrix with its diagonal gives. O(u²) for u (site, group) pairs."""
        nodes = np.asarray(nodes, np.int64)
        labels = np.asarray(labels, np.int64)
        combo, counts = np.unique(self.site[nodes] * k + labels, return_counts=True)
        sites, groups = np.divmod(combo, k)
        lat = self.latency[np.ix_(sites, sites)].copy()
        bw = self.bandwidth[np.ix_(sites, sites)].copy()
        single = counts < 2  # one machine of a site in a group: no distinct pair inside it
        lat[np.diag_indices_from(lat)] = np.where(single, np.inf, np.diag(lat))
        bw[np.diag_indices_from(bw)] = np.where(single, 0.0, np.diag(bw))
        cells = (groups[:, None] * k + groups[None, :]).ravel()
        lowest = np.full(k * k, np.inf)
        highest = np.zeros(k * k)
        np.minimum.at(lowest, cells, lat.ravel())
        np.maximum.at(highest, cells, bw.ravel())
        if len(self.exception_keys):
            group_of = np.full(self.n, -1, np.int64)
            group_of[nodes] = labels
            i, j = self._exception_pairs()
            inside = (group_of[i] >= 0) & (group_of[j] >= 0)
            cell = group_of[i[inside]] * k + group_of[j[inside]]
            np.minimum.at(lowest, cell, self.exception_latency[inside])
            np.maximum.at(highest, cell, self.exception_bandwidth[inside])
        latency, bandwidth = lowest.reshape(k, k), highest.reshape(k, k)
        have = np.bincount(labels, minlength=k) > 0
        latency[np.flatnonzero(have), np.flatnonzero(have)] = 0.0
        bandwidth[np.flatnonzero(have), np.flatnonzero(have)] = np.inf
        return latency, bandwidth

    def spanning_bounds(self, nodes: np.ndarray) -> tuple[float, float]:
        """Bounds (α no lower, β no higher) on a spanning tree of `nodes`' pairs: the
        bottleneck spanning tree over their sites, with every machine of a site of several
        reaching at least its nearest machine (`hulk.cost.allreduce_lower_bound` per site).
        Exceptions among the machines only lower α (raise β), so they are taken in per site
        pair."""
        nodes = np.asarray(nodes, np.int64)
        present, counts = np.unique(self.site[nodes], return_counts=True)
        lat = self.latency[np.ix_(present, present)].copy()
        bw = self.bandwidth[np.ix_(present, present)].copy()
        lat[np.diag_indices_from(lat)] = np.where(counts >= 2, np.diag(lat), np.inf)
        bw[np.diag_indices_from(bw)] = np.where(counts >= 2, np.diag(bw), 0.0)
        if len(self.exception_keys):
            member = np.zeros(self.n, bool)
            member[nodes] = True
            i, j = self._exception_pairs()
            inside = member[i] & member[j]
            position = np.searchsorted(present, self.site)
            a, b = position[i[inside]], position[j[inside]]
            np.minimum.at(lat, (a, b), self.exception_latency[inside])
            np.maximum.at(bw, (a, b), self.exception_bandwidth[inside])
        alpha = bottleneck_tree(lat) if len(present) > 1 else -np.inf
        beta = -bottleneck_tree(-bw) if len(present) > 1 else np.inf
        crowded = counts >= 2
        if crowded.any():  # each machine of a crowded site has some neighbour in the tree
            alpha = max(alpha, float(lat[crowded].min(axis=1).max()))
            beta = min(beta, float(bw[crowded].max(axis=1).min()))
        return float(alpha), float(beta)

    def nearest(self, pool: np.ndarray, count: int) -> np.ndarray:
        """(len(pool), count) positions into `pool`: each machine's `count` nearest other
        machines of the pool by latency. Exact inside its site (its own pairs, exceptions
        included), other sites at their site figures (their machines in index order): per
        site, O(Σ site² + sites × count), not pool²."""
        pool = np.asarray(pool, np.int64)
        sites = self.site[pool]
        present, members_of = np.unique(sites, return_inverse=True)
        counts = np.bincount(members_of, minlength=len(present))
        by_site = np.argsort(members_of, kind="stable")  # pool positions, site by site
        starts = np.concatenate([[0], np.cumsum(counts)])
        between = self.latency[np.ix_(present, present)]
        out = np.empty((len(pool), count), np.int64)
        for q in range(len(present)):
            mine = by_site[starts[q] : starts[q + 1]]
            block = np.asarray(self.gather("latency", pool[mine][:, None], pool[mine][None, :]))
            other = between[q]
            order = np.argsort(other, kind="stable")
            order = order[order != q]
            reach = np.cumsum(counts[order])
            covered = min(int(np.searchsorted(reach, count)) + 1, len(order))
            nearby = np.concatenate(
                [np.zeros(0, np.int64)]
                + [by_site[starts[t] : starts[t + 1]] for t in order[:covered].tolist()]
            )[:count]
            values = np.repeat(other[order[:covered]], counts[order[:covered]])[:count]
            np.fill_diagonal(block, -np.inf)  # the machine itself first, then dropped
            rows = np.concatenate([block, np.broadcast_to(values, (len(mine), len(values)))], 1)
            candidates = np.concatenate([mine, nearby])
            ranked = np.argsort(rows, axis=1, kind="stable")[:, 1 : count + 1]
            out[mine] = candidates[ranked]
        return out

    def neighbourhood_power(self, pool: np.ndarray, size: int, compute: np.ndarray) -> np.ndarray:
        """Per machine of `pool`: the compute (`compute` per fleet index) of the machines of the
        pool within its `size`-th lowest latency, itself included (`hulk.planner`'s seed
        strength). Exact inside each site (its machines' own pairs, exceptions included);
        other sites at their site figures: O(Σ site² + sites²), not pool²."""
        pool = np.asarray(pool, np.int64)
        sites = self.site[pool]
        present, members_of = np.unique(sites, return_inverse=True)
        counts = np.bincount(members_of, minlength=len(present))
        site_compute = np.bincount(members_of, weights=compute[pool], minlength=len(present))
        between = self.latency[np.ix_(present, present)]
        power = np.empty(len(pool))
        for q in range(len(present)):
            mine = np.flatnonzero(members_of == q)
            block = np.asarray(self.gather("latency", pool[mine][:, None], pool[mine][None, :]))
            other = between[q]
            by = np.argsort(other, kind="stable")
            by = by[by != q]
            values, reach = other[by], np.cumsum(counts[by])
            covered = min(int(np.searchsorted(reach, size)) + 1, len(by))
            nearby = np.repeat(values[:covered], counts[by][:covered])[:size]
            rows = np.concatenate([block, np.broadcast_to(nearby, (len(mine), len(nearby)))], 1)
            kth = min(size, rows.shape[1]) - 1
            threshold = np.partition(rows, kth, axis=1)[:, kth]
            own = (block <= threshold[:, None]) @ compute[pool[mine]]
            gained = np.concatenate([[0.0], np.cumsum(site_compute[by])])
            power[mine] = own + gained[np.searchsorted(values, threshold, side="right")]
        return power

    def nearest_latency(self, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Per machine of `targets`, the lowest latency from a machine of `sources` (none of
        the targets is a source): per source site, not per source machine."""
        sources, targets = np.asarray(sources, np.int64), np.asarray(targets, np.int64)
        rows = self.latency[np.ix_(np.unique(self.site[sources]), self.site[targets])]
        best = rows.min(axis=0)
        if len(self.exception_keys):
            member = np.zeros(self.n, bool)
            member[sources] = True
            position = np.full(self.n, -1, np.int64)
            position[targets] = np.arange(len(targets))
            i, j = self._exception_pairs()
            inside = member[i] & (position[j] >= 0)
            np.minimum.at(best, position[j[inside]], self.exception_latency[inside])
        return best

    def ring_tour(self, nodes: np.ndarray, order_sites: Any) -> np.ndarray:
        """`nodes` as a ring visiting each site's machines together (in index order), the sites
        in the order `order_sites` (a tour function on a latency matrix) gives: a ring through
        thousands of machines ordered per site, not per machine."""
        nodes = np.sort(np.asarray(nodes, np.int64))
        present = np.unique(self.site[nodes])
        if len(present) > 3:
            present = present[order_sites(self.latency[np.ix_(present, present)])]
        position = np.empty(self.k, np.int64)
        position[present] = np.arange(len(present))
        return nodes[np.argsort(position[self.site[nodes]], kind="stable")]

    def subset(self, idx: np.ndarray) -> SiteLinks:
        """The store restricted to machines `idx` (ascending), site tables shared."""
        idx = np.asarray(idx, np.int64)
        new_index = np.full(self.n, -1, np.int64)
        new_index[idx] = np.arange(len(idx))
        i, j = np.divmod(self.measured, max(self.n, 1))
        keep = (new_index[i] >= 0) & (new_index[j] >= 0)
        measured = np.sort(new_index[i[keep]] * len(idx) + new_index[j[keep]])
        keys, lat, bw = self.exception_keys, self.exception_latency, self.exception_bandwidth
        if len(keys):
            i, j = self._exception_pairs()
            keep = (new_index[i] >= 0) & (new_index[j] >= 0)
            keys = new_index[i[keep]] * len(idx) + new_index[j[keep]]
            order = np.argsort(keys)
            keys, lat, bw = keys[order], lat[keep][order], bw[keep][order]
        return SiteLinks(
            site=self.site[idx],
            latency=self.latency,
            bandwidth=self.bandwidth,
            relayed=self.relayed,
            component=self.component,
            exception_keys=keys,
            exception_latency=lat,
            exception_bandwidth=bw,
            measured=measured,
        )

    def digest(self) -> bytes:
        """sha256 of the store's arrays (a fleet snapshot without n² bytes)."""
        h = hashlib.sha256()
        for array in (
            self.site,
            self.latency,
            self.bandwidth,
            self.exception_keys,
            self.exception_latency,
            self.exception_bandwidth,
        ):
            h.update(np.ascontiguousarray(array).tobytes())
        return h.digest()


class SiteMatrix:
    """An n × n pair matrix (latency, bandwidth or relayed) read from a `SiteLinks` store.

    Indexing gathers: ``m[i, j]`` (a numpy scalar), ``m[a, b]`` with broadcasting integer
    arrays (``m[np.ix_(a, b)]``), ``m[a]`` / ``m[a, :]`` / ``m[:, b]`` (rows and columns).
    Boolean masks are not supported. ``np.asarray(m)`` builds the dense matrix (n² memory: for
    tests and small fleets).
    """

    ndim = 2

    def __init__(self, links: SiteLinks, table: str) -> None:
        self.links = links
        self.table = table
        self.dtype = np.dtype(bool) if table == "relayed" else np.dtype(float)

    @property
    def shape(self) -> tuple[int, int]:
        return self.links.n, self.links.n

    def __len__(self) -> int:
        return self.links.n

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2:
            raise IndexError(f"a pair matrix takes two indices, got {len(key)}")
        rows, cols = (self._index(part) for part in key)
        if isinstance(key[0], slice) and isinstance(key[1], slice):
            return self.links.gather(self.table, rows[:, None], cols[None, :])
        if isinstance(key[1], slice):  # rows: the index's shape, then the columns
            return self.links.gather(self.table, rows[..., None], cols)
        if isinstance(key[0], slice):  # columns: the rows, then the index's shape
            return self.links.gather(
                self.table, rows.reshape(-1, *([1] * cols.ndim)), cols[None, ...]
            )
        return self.links.gather(self.table, rows, cols)

    def _index(self, part: Any) -> np.ndarray:
        if isinstance(part, slice):
            return np.arange(self.links.n)[part]
        index = np.asarray(part)
        if index.dtype.kind not in "iu":
            raise TypeError(f"a site matrix takes integer indices, not {index.dtype} ones")
        if index.size and index.min() < 0:  # numpy's wrap-around, so that pair keys stay right
            if index.min() < -self.links.n:
                raise IndexError(f"index out of range for {self.links.n} machines")
            index = np.where(index < 0, index + self.links.n, index)
        return index

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        everything = np.arange(self.links.n)
        dense = self.links.gather(self.table, everything[:, None], everything[None, :])
        return dense if dtype is None else dense.astype(dtype)

    def __repr__(self) -> str:
        return f"SiteMatrix({self.table}, {self.links.n} machines, {self.links.k} sites)"


def bottleneck_tree(weight: np.ndarray) -> float:
    """The longest edge of a minimum spanning tree of symmetric `weight` (Prim, O(d²))."""
    d = len(weight)
    inside = np.zeros(d, bool)
    inside[0] = True
    reach = weight[0].astype(float)
    longest = -np.inf
    for _ in range(d - 1):
        candidates = np.where(inside, np.inf, reach)
        k = int(np.argmin(candidates))
        longest = max(longest, float(candidates[k]))
        inside[k] = True
        reach = np.minimum(reach, weight[k])
    return longest


# --- building the store -----------------------------------------------------------------------


def build_site_links(
    site: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    latency_s: np.ndarray,
    bandwidth_Bps: np.ndarray,
    exception_ratio: float,
) -> SiteLinks:
    """The store for machines in sites `site` (n,) and measured links (a < b, one row per
    pair, finite latency): site figures, relays over sites, exceptions (module docstring)."""
    site = np.asarray(site, np.int64).copy()
    n = len(site)
    # Machines without a measured link form sites of their own: unreachable, as in the dense model.
    linked = np.zeros(n, bool)
    linked[a] = linked[b] = True
    lonely = np.flatnonzero(~linked)
    _, site = np.unique(site, return_inverse=True)
    if len(lonely):
        site[lonely] = site.max() + 1 + np.arange(len(lonely))
        _, site = np.unique(site, return_inverse=True)
    site = site.astype(np.int64)
    k = int(site.max()) + 1 if n else 0
    size = np.bincount(site, minlength=k).astype(float)

    sa, sb = site[a], site[b]
    lo, hi = np.minimum(sa, sb), np.maximum(sa, sb)
    frame = pd.DataFrame({"pair": lo * k + hi, "lat": latency_s, "bw": bandwidth_Bps})
    groups = frame.groupby("pair", sort=True)
    medians = groups[["lat", "bw"]].median()
    best = frame.loc[groups["lat"].idxmin().to_numpy()]  # each site pair's fastest measured pair
    pair = medians.index.to_numpy(np.int64)
    p_lo, p_hi = np.divmod(pair, k) if k else (pair, pair)
    counts = groups.size().to_numpy(float)
    possible = np.where(p_lo == p_hi, size[p_lo] * (size[p_lo] - 1) / 2, size[p_lo] * size[p_hi])

    def table(values: np.ndarray, missing: float) -> np.ndarray:
        out = np.full((k, k), missing)
        out[p_lo, p_hi] = out[p_hi, p_lo] = values
        return out

    latency, bandwidth, relayed, component = _site_figures(
        table(medians["lat"].to_numpy(), np.inf),
        table(medians["bw"].to_numpy(), 0.0),
        table(best["lat"].to_numpy(), np.inf),
        table(best["bw"].to_numpy(), 0.0),
        table(counts / np.maximum(possible, 1), 0.0) >= _COVERED,
        size,
    )

    # Exceptions: measured pairs far from their site pair's figure keep their own.
    figure_lat, figure_bw = latency[sa, sb], bandwidth[sa, sb]
    with np.errstate(divide="ignore", invalid="ignore"):
        off_lat = np.maximum(latency_s / figure_lat, figure_lat / latency_s)
        off_bw = np.maximum(bandwidth_Bps / figure_bw, figure_bw / bandwidth_Bps)
    odd = ~((off_lat <= exception_ratio) & (off_bw <= exception_ratio))
    ea, eb = a[odd], b[odd]
    keys = np.concatenate([ea * n + eb, eb * n + ea])
    order = np.argsort(keys)
    return SiteLinks(
        site=site,
        latency=latency,
        bandwidth=bandwidth,
        relayed=relayed,
        component=component,
        exception_keys=keys[order],
        exception_latency=np.concatenate([latency_s[odd]] * 2)[order],
        exception_bandwidth=np.concatenate([bandwidth_Bps[odd]] * 2)[order],
        measured=np.sort(a * n + b),
    )


def _site_figures(
    median_lat: np.ndarray,
    median_bw: np.ndarray,
    best_lat: np.ndarray,
    best_bw: np.ndarray,
    covered: np.ndarray,
    size: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Effective site tables, as the dense model would see most machine pairs of each site pair.

    A *covered* site pair (at least half of its machine pairs measured) talks directly: its
    medians. On the diagonal an uncovered site's machines hop through a peer (twice the median),
    or through the nearest site when none of their pairs is measured. Between uncovered sites
    most machine pairs relay: to reach the site pair's fastest measured pair each end hops
    inside its site, and any path over the sites graph may be faster (lowest latency; its
    bandwidth the narrowest link or hop on it), computed over sites² only.
    """
    k = len(size)
    diag = np.arange(k)
    inner_lat, inner_bw = np.diag(median_lat).copy(), np.diag(median_bw).copy()
    sparse_inside = np.isfinite(inner_lat) & ~np.diag(covered)
    inner_lat[sparse_inside] *= 2
    # The hop from a machine to the one holding its site's fastest link (none: one machine).
    hop_lat = np.where(size > 1, inner_lat, 0.0)
    hop_bw = np.where(size > 1, inner_bw, np.inf)
    direct_lat = np.where(covered, median_lat, best_lat + hop_lat[:, None] + hop_lat[None, :])
    direct_bw = np.where(
        covered, median_bw, np.minimum(best_bw, np.minimum(hop_bw[:, None], hop_bw[None, :]))
    )
    direct_lat[diag, diag] = np.inf
    src, dst = np.nonzero(np.isfinite(direct_lat))
    # csgraph ignores zero weights, so a zero latency becomes tiny (as the dense model).
    graph = csr_matrix((np.maximum(direct_lat[src, dst], 1e-15), (src, dst)), shape=(k, k))
    dist, pred = shortest_path(graph, method="D", directed=False, return_predecessors=True)
    reach = np.isfinite(dist)
    _, component = np.unique(np.argmax(reach, axis=1), return_inverse=True)

    latency = np.where(covered, direct_lat, dist)
    bandwidth = np.where(covered, direct_bw, 0.0)
    relayed = ~covered
    todo_src, todo_dst = np.nonzero(np.triu(~covered & reach, k=1))
    narrowest = _path_narrowest(pred, direct_bw, todo_src, todo_dst)
    bandwidth[todo_src, todo_dst] = bandwidth[todo_dst, todo_src] = narrowest
    latency[~reach] = np.inf
    bandwidth[~reach] = 0.0

    latency[diag, diag] = inner_lat
    bandwidth[diag, diag] = inner_bw
    relayed[diag, diag] = ~np.diag(covered)
    for s in np.flatnonzero(~np.isfinite(inner_lat) & (size > 1)).tolist():
        away = latency[s].copy()
        away[s] = np.inf
        if np.isfinite(away).any():  # no pair inside measured: out to the nearest site and back
            t = int(np.argmin(away))
            latency[s, s], bandwidth[s, s] = 2 * away[t], bandwidth[s, t]
    return latency, bandwidth, relayed, component.astype(np.int64)


def _path_narrowest(
    pred: np.ndarray, width: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> np.ndarray:
    """Smallest `width` on the predecessor-tree path src → dst, all pairs at once (one
    vectorised step per hop of the longest path)."""
    result = np.full(len(src), np.inf)
    pending = np.arange(len(src))
    cur, start = dst.copy(), src.copy()
    while len(pending):
        prev = pred[start, cur]
        result[pending] = np.minimum(result[pending], width[prev, cur])
        cur = prev
        more = cur != start
        pending, cur, start = pending[more], cur[more], start[more]
    return result
