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
* *gateways*: those site figures count each end's hop at its site's median, but a machine pair
  that relays counts its own. Per site pair the store keeps where its machines leave (the
  machine of each site on the link the relay starts or ends with) and the relay's figures
  between the gateways; a machine pair reads its two hops to the gateways as its own pairs
  (exceptions included) and adds them. Over one link between two sites each pair takes the
  fastest, with its hops, of the site pair's `_GATEWAYS` fastest measured pairs, as the dense
  model's shortest paths do; a longer relay over sites goes through its first and last links'
  fastest pairs. O(sites² × gateways), and every relayed pair reads machine-level hops;
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
measured at one figure, or none of them) every lookup equals the dense model's. With every
measured pair its own figure (an exception ratio of about 1) the site tables differ from the
dense model only where a dense relay detours through a third site (or through a peer inside a
site) for some machine pairs and not for their site pair as a whole: there they read a longer
relay than the dense model.

A store of at most `WHOLE_BLOCK_MAX` machines reads the dense model's values instead
(`SiteLinks.exact`): every measured pair its own figures, every other pair the shortest path
over them (summed latency; bandwidth the narrowest pair on it, `relayed`), detours through
third sites and peers included. It computes them over the *gateway graph* (`_exact_block`):
the machines with a measured pair in another site, linked by those pairs and by the shortest
paths inside each site between its gateways; a machine pair then joins its two ends' paths
inside their sites to the gateways (min over both ends' gateways, in two stages). On 10 sites
of 100 with three measured pairs per pair of sites that is 234 gateways, not the dense model's
all-pairs search over 1,000 machines and their 49,635 measured pairs. Where nearly every
machine is a gateway (sampled peers in other sites) that would cost more than the dense
model's own search, and the store keeps the gateway relays (`_EXACT_WORK_PER_PAIR`). The
block's whole-fleet answers (extremes, group links, spanning-tree bounds, the planner's sites,
nearest machines) are the dense model's computations on it, the fleet's groups of reachable
machines are the dense model's (`hulk.cost.Fleet.from_arrays`), and `Fleet.subset` slices it,
as the dense model slices its matrices.
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

__all__ = ["SiteLinks", "SiteMatrix", "build_site_links", "complete_linkage", "inventory_sites"]

_UNREACHABLE_MS = 1e7  # stands in for an infinite latency when clustering (as hulk.planner)
# A site pair with at least this share of its machine pairs measured talks directly (medians);
# below it most of its machine pairs relay in the dense model, and so they do here.
_COVERED = 0.5
# `SiteLinks.gate` entries that name no machine: no hop at that end (the relay's first link is
# a covered one, which reaches any machine at its median), or the site's median hop (the
# gateway was left out of a subset).
_NO_HOP, _MEDIAN_HOP = -1, -2
# A relay over one link between two sites may cross at any of this many of their fastest
# measured pairs: each machine pair takes the one its own hops make fastest (as the dense
# model's shortest paths do).
_GATEWAYS = 4
# A store of at most this many machines reads every pair from one dense block of the whole
# fleet, built once (3 × 1024² entries, 17 MB): lookups cost what the dense model's do, and
# the block holds the dense model's values where the gateway graph is small (`_exact_block`).
WHOLE_BLOCK_MAX = 1024


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
    # Relays through gateways (module docstring): per site pair (A, B) and route c the machine
    # of A where A's machines leave for B (_NO_HOP: none, a covered first link; _MEDIAN_HOP:
    # the gateway is not among the store's machines, its site's median hop stands in), and the
    # route's latency and narrowest bandwidth without the two hops at its ends (inf latency:
    # no such route).
    gate: np.ndarray  # (k, k, routes) int64
    core_latency: np.ndarray  # (k, k, routes)
    core_bandwidth: np.ndarray  # (k, k, routes)
    hop_latency: np.ndarray  # (k,) a site's median hop to its gateway
    hop_bandwidth: np.ndarray  # (k,)
    # The whole block (`whole`) was built with the store from the measured pairs: the dense
    # model's shortest-path relays over them (`_exact_block`), not the gateway relays above.
    # Every lookup and whole-fleet question then reads it.
    exact: bool = False

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

    @cached_property
    def gated(self) -> np.ndarray:
        """(k, k) bool: site pairs whose machine pairs relay through a gateway at either end."""
        first = self.gate[:, :, 0]
        return (first != _NO_HOP) | (first.T != _NO_HOP)

    @cached_property
    def _any_gated(self) -> bool:
        return bool(self.gated.any())

    def _hops(
        self,
        machines: np.ndarray,
        sites: np.ndarray,
        others: np.ndarray,
        route: int,
        widths: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(latency, bandwidth) of the hop of each of `machines` (in `sites`) to its site's
        gateway of `route` towards `others`: the pair's own figures (exceptions included; none
        from the gateway itself), nothing without a gateway, the site's median hop when the
        gateway is not in the store. Without `widths` the bandwidths are left at inf."""
        gate = self.gate[sites, others, route]
        latency, bandwidth = np.zeros(len(machines)), np.full(len(machines), np.inf)
        known = gate >= 0
        if known.any():
            latency[known] = self.gather("latency", machines[known], gate[known])
            if widths:
                bandwidth[known] = self.gather("bandwidth", machines[known], gate[known])
        median = gate == _MEDIAN_HOP
        if median.any():
            latency[median] = self.hop_latency[sites[median]]
            bandwidth[median] = self.hop_bandwidth[sites[median]]
        return latency, bandwidth

    def _relay(
        self, table: str, a: np.ndarray, b: np.ndarray, sa: np.ndarray, sb: np.ndarray
    ) -> np.ndarray:
        """Latency or bandwidth of relayed machine pairs (a, b) of gated site pairs: over the
        route whose latency is lowest with the pair's own hops to its gateways (the first
        such route on ties; the same arithmetic as `block`, so both give the same bits)."""
        best_lat = np.full(len(a), np.inf)
        best_bw = np.zeros(len(a))
        for route in range(self.gate.shape[2]):
            core = self.core_latency[sa, sb, route]
            some = np.flatnonzero(np.isfinite(core))
            if not len(some):
                continue
            widths = table != "latency"
            lat_a, bw_a = self._hops(a[some], sa[some], sb[some], route, widths)
            lat_b, bw_b = self._hops(b[some], sb[some], sa[some], route, widths)
            lat = (core[some] + lat_a) + lat_b
            better = lat < best_lat[some]
            won = some[better]
            best_lat[won] = lat[better]
            width = np.minimum(
                np.minimum(self.core_bandwidth[sa[won], sb[won], route], bw_a[better]), bw_b[better]
            )
            best_bw[won] = width
        return best_lat if table == "latency" else best_bw

    def gather(self, table: str, a: Any, b: Any) -> Any:
        """`table` ('latency' | 'bandwidth' | 'relayed') for machine pairs (a, b): integer
        indices in 0..n−1 that broadcast against each other. The hot path of every consumer
        reading pairs: no copies or checks beyond numpy's own (an index ≥ n raises)."""
        whole = self._whole
        if whole is not None:
            return whole[table][a, b]
        values, diagonal, exceptional = self._tables[table]
        a, b = np.asarray(a), np.asarray(b)
        sa, sb = self.site[a], self.site[b]
        out = values[sa, sb]
        if out.ndim == 0:  # one pair
            i, j = int(a), int(b)
            if i == j:
                return values.dtype.type(diagonal)
            position = (
                self._exception_index.get(i * self.n + j) if self.exception_keys.size else None
            )
            if position is not None:
                return exceptional[position]
            if table != "relayed" and self.gated[sa, sb]:
                return self._relay(table, a.reshape(1), b.reshape(1), sa.reshape(1), sb.reshape(1))[
                    0
                ]
            return out
        if table != "relayed" and self._any_gated:
            through = self.gated[sa, sb]
            if through.any():
                a_all, b_all = np.broadcast_arrays(a, b)
                pa, pb = a_all[through], b_all[through]
                out[through] = self._relay(table, pa, pb, self.site[pa], self.site[pb])
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

    @property
    def _whole(self) -> dict[str, np.ndarray] | None:
        """The whole fleet's block (`WHOLE_BLOCK_MAX`), by table, once it is built."""
        return self.__dict__.get("_whole_block")

    @property
    def _exact_whole(self) -> dict[str, np.ndarray]:
        """The block of an `exact` store (built with it)."""
        whole = self._whole
        assert whole is not None
        return whole

    def whole(self) -> dict[str, np.ndarray] | None:
        """The whole fleet's (latency, bandwidth, relayed) block by table for a store of at
        most `WHOLE_BLOCK_MAX` machines (None above): every lookup then reads it, as the dense
        model reads its matrices. An `exact` store built it with itself (the dense model's
        values); any other builds it on first use, with the same values as the site tables
        give."""
        if self.n > WHOLE_BLOCK_MAX:
            return None
        built = self._whole
        if built is None:
            latency, bandwidth, relayed = self._block(np.arange(self.n))
            built = {"latency": latency, "bandwidth": bandwidth, "relayed": relayed}
            self.__dict__["_whole_block"] = built
        return built

    def block(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(latency, bandwidth, relayed) among the machines `nodes` (distinct, in the given
        order) as dense (m, m) matrices: ``gather`` of every pair, in O(m² + exceptions)
        rather than a search in the exceptions per pair. The keys are sorted by their first
        machine, so each machine's exceptions are one run of them: O(m² + m log e + the
        machines' own exceptions), whatever the fleet's size. A store that fits one block
        (`whole`) slices it."""
        nodes = np.asarray(nodes, np.int64)
        whole = self.whole()
        if whole is not None:
            grid = np.ix_(nodes, nodes)
            return whole["latency"][grid], whole["bandwidth"][grid], whole["relayed"][grid]
        return self._block(nodes)

    def _block(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sites = self.site[nodes]
        grid = np.ix_(sites, sites)
        latency, bandwidth = self.latency[grid], self.bandwidth[grid]
        relayed = self.relayed[grid]
        if self._any_gated:
            self._block_relays(nodes, sites, latency, bandwidth)
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

    def _block_relays(
        self, nodes: np.ndarray, sites: np.ndarray, latency: np.ndarray, bandwidth: np.ndarray
    ) -> None:
        """Lay the gateway relays of a block's machine pairs over its site figures, in place:
        each machine's hops towards each site of the block once per route (O(m × sites of the
        block × routes)), then every gated pair from those hops (`_relay`'s arithmetic)."""
        present, at = np.unique(sites, return_inverse=True)
        gated = self.gated[np.ix_(present, present)]
        if not gated.any():
            return
        rows = np.repeat(np.arange(len(nodes)), len(present))
        towards = np.tile(present, len(nodes))
        shape = (len(nodes), len(present))
        i, j = np.nonzero(gated[np.ix_(at, at)])
        si, sj, ai, aj = sites[i], sites[j], at[i], at[j]
        best_lat = np.full(len(i), np.inf)
        best_bw = np.zeros(len(i))
        for route in range(self.gate.shape[2]):
            core = self.core_latency[si, sj, route]
            if not np.isfinite(core).any():
                continue
            hop_lat, hop_bw = self._hops(nodes[rows], sites[rows], towards, route)
            hop_lat, hop_bw = hop_lat.reshape(shape), hop_bw.reshape(shape)
            lat = (core + hop_lat[i, aj]) + hop_lat[j, ai]
            better = lat < best_lat
            best_lat[better] = lat[better]
            width = np.minimum(
                np.minimum(self.core_bandwidth[si, sj, route], hop_bw[i, aj]), hop_bw[j, ai]
            )
            best_bw[better] = width[better]
        latency[i, j] = best_lat
        bandwidth[i, j] = best_bw

    # -- whole-fleet questions, answered per site --

    @cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lowest α, highest β) any machine pair of each site pair can have (exceptions
        aside): the site figures, and for relays through gateways their routes without the
        hops (a machine at its gateway hops nowhere). For bounds that must hold per pair."""
        gated = self.gated
        lowest = np.where(gated, self.core_latency.min(axis=2), self.latency)
        widest = np.where(gated, self.core_bandwidth.max(axis=2), self.bandwidth)
        return lowest, widest

    def extremes(self) -> tuple[float, float]:
        """(lowest α, highest β) over the pairs of distinct machines (`Fleet.link_extremes`);
        on an `exact` store, over its block as the dense model does."""
        if self.exact:
            off = ~np.eye(self.n, dtype=bool)
            whole = self._exact_whole
            return float(whole["latency"][off].min()), float(whole["bandwidth"][off].max())
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
        A store that fits one block (`whole`) clusters its machines as the dense model does:
        complete linkage is the largest latency between two clusters, which a site figure
        understates wherever some of its machine pairs are slower (on the 10-site fleet of
        1,000 machines it joined two sites the dense model keeps apart, and the planner's
        site windows went elsewhere)."""
        whole = self.whole()
        if whole is not None:
            return complete_linkage(whole["latency"], latency_ms)
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
        reduction over a matrix with its diagonal gives. O(u²) for u (site, group) pairs; on
        an `exact` store, the dense model's reduction over its block (`hulk.cost`)."""
        nodes = np.asarray(nodes, np.int64)
        labels = np.asarray(labels, np.int64)
        if self.exact:
            whole = self._exact_whole
            order = np.argsort(labels, kind="stable")
            starts = np.searchsorted(labels[order], np.arange(k))
            rows, cols = nodes[order][:, None], nodes[order][None, :]
            reduced = []
            for table, reduce in (("latency", np.minimum), ("bandwidth", np.maximum)):
                values = reduce.reduceat(whole[table][rows, cols], starts, axis=0)
                reduced.append(reduce.reduceat(values, starts, axis=1))
            return reduced[0], reduced[1]
        combo, counts = np.unique(self.site[nodes] * k + labels, return_counts=True)
        sites, groups = np.divmod(combo, k)
        lowest, widest = self._bounds
        lat = lowest[np.ix_(sites, sites)].copy()
        bw = widest[np.ix_(sites, sites)].copy()
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
        pair. An `exact` store bounds over its block's pairs, as the dense model does."""
        nodes = np.asarray(nodes, np.int64)
        if self.exact:
            grid = np.ix_(nodes, nodes)
            whole = self._exact_whole
            latency, bandwidth = whole["latency"][grid], whole["bandwidth"][grid]
            return bottleneck_tree(latency), -bottleneck_tree(-bandwidth)
        present, counts = np.unique(self.site[nodes], return_counts=True)
        lowest, widest = self._bounds
        lat = lowest[np.ix_(present, present)].copy()
        bw = widest[np.ix_(present, present)].copy()
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
        whole = self.whole()
        if whole is not None:  # the dense model's rows (ties by index; the machine itself first)
            rows = whole["latency"][np.ix_(pool, pool)]
            return np.argsort(rows, axis=1, kind="stable")[:, 1 : count + 1]
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
        whole = self.whole()
        if whole is not None:
            return whole["latency"][np.ix_(sources, targets)].min(axis=0)
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
        store = SiteLinks(
            site=self.site[idx],
            latency=self.latency,
            bandwidth=self.bandwidth,
            relayed=self.relayed,
            component=self.component,
            exception_keys=keys,
            exception_latency=lat,
            exception_bandwidth=bw,
            measured=measured,
            # Gateways left out of the subset: their site's median hop stands in.
            gate=np.where(
                self.gate >= 0,
                np.where(
                    new_index[np.maximum(self.gate, 0)] >= 0,
                    new_index[np.maximum(self.gate, 0)],
                    _MEDIAN_HOP,
                ),
                self.gate,
            ),
            core_latency=self.core_latency,
            core_bandwidth=self.core_bandwidth,
            hop_latency=self.hop_latency,
            hop_bandwidth=self.hop_bandwidth,
            exact=self.exact,
        )
        if self.exact:  # relays as in the full fleet: its block's pairs
            grid = np.ix_(idx, idx)
            whole = self._exact_whole
            store.__dict__["_whole_block"] = {table: whole[table][grid] for table in whole}
        return store

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
            self.gate,
            self.core_latency,
            self.core_bandwidth,
        ):
            h.update(np.ascontiguousarray(array).tobytes())
        if self.exact:  # its lookups read every measured pair's own figures: the block's
            whole = self._exact_whole
            for table in ("latency", "bandwidth"):
                h.update(np.ascontiguousarray(whole[table]).tobytes())
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


def complete_linkage(latency_s: np.ndarray, latency_ms: float) -> np.ndarray:
    """Complete-linkage clusters of the machines' latency matrix (seconds) with diameter
    `latency_ms`, numbered 0.. in order of their smallest machine index (`hulk.planner`'s
    sites of a dense fleet)."""
    dist = np.minimum(np.asarray(latency_s) * 1000.0, _UNREACHABLE_MS)
    dist = np.maximum(dist, dist.T)
    np.fill_diagonal(dist, 0.0)
    tree = linkage(squareform(dist, checks=False), method="complete")
    raw = fcluster(tree, t=float(latency_ms), criterion="distance")
    _, first = np.unique(raw, return_index=True)
    rank = np.empty(raw.max() + 1, np.int64)
    rank[raw[np.sort(first)]] = np.arange(len(first))
    return rank[raw]


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
    frame = pd.DataFrame(
        {"pair": lo * k + hi, "lat": latency_s, "bw": bandwidth_Bps, "a": a, "b": b}
    )
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

    # Each site pair's `_GATEWAYS` fastest measured pairs (route c: the c-th fastest): their
    # ends ([s, t, c] is the one in site s), latency and bandwidth.
    fastest = frame.sort_values(["pair", "lat"], kind="stable")
    rank = fastest.groupby("pair", sort=False).cumcount().to_numpy()
    fastest = fastest[rank < _GATEWAYS]
    rank = rank[rank < _GATEWAYS]
    route_lo, route_hi = np.divmod(fastest["pair"].to_numpy(np.int64), max(k, 1))
    end_a, end_b = fastest["a"].to_numpy(np.int64), fastest["b"].to_numpy(np.int64)
    lo_end = np.where(site[end_a] == route_lo, end_a, end_b)
    routes = _Routes(
        ends=np.full((k, k, _GATEWAYS), _NO_HOP, np.int64),
        latency=np.full((k, k, _GATEWAYS), np.inf),
        bandwidth=np.zeros((k, k, _GATEWAYS)),
    )
    routes.ends[route_lo, route_hi, rank] = lo_end
    routes.ends[route_hi, route_lo, rank] = np.where(lo_end == end_a, end_b, end_a)
    for figure, column in ((routes.latency, "lat"), (routes.bandwidth, "bw")):
        figure[route_lo, route_hi, rank] = figure[route_hi, route_lo, rank] = fastest[column]

    figures = _site_figures(
        table(medians["lat"].to_numpy(), np.inf),
        table(medians["bw"].to_numpy(), 0.0),
        table(best["lat"].to_numpy(), np.inf),
        table(best["bw"].to_numpy(), 0.0),
        table(counts / np.maximum(possible, 1), 0.0) >= _COVERED,
        size,
        routes,
    )
    latency, bandwidth = figures.latency, figures.bandwidth

    # Exceptions: measured pairs far from their site pair's figure keep their own, and so do
    # all measured pairs of gated site pairs (direct links among relays: a handful each).
    figure_lat, figure_bw = latency[sa, sb], bandwidth[sa, sb]
    with np.errstate(divide="ignore", invalid="ignore"):
        off_lat = np.maximum(latency_s / figure_lat, figure_lat / latency_s)
        off_bw = np.maximum(bandwidth_Bps / figure_bw, figure_bw / bandwidth_Bps)
    gated = (figures.gate[:, :, 0] != _NO_HOP) | (figures.gate[:, :, 0].T != _NO_HOP)
    odd = ~((off_lat <= exception_ratio) & (off_bw <= exception_ratio)) | gated[sa, sb]
    ea, eb = a[odd], b[odd]
    keys = np.concatenate([ea * n + eb, eb * n + ea])
    order = np.argsort(keys)
    # A fleet that fits one block reads the dense model's values: every measured pair its own
    # figures, relays over them (when that costs no more than the gateway relays).
    exact = _exact_block(site, a, b, latency_s, bandwidth_Bps) if n <= WHOLE_BLOCK_MAX else None
    store = SiteLinks(
        site=site,
        latency=latency,
        bandwidth=bandwidth,
        relayed=figures.relayed,
        component=figures.component,
        exception_keys=keys[order],
        exception_latency=np.concatenate([latency_s[odd]] * 2)[order],
        exception_bandwidth=np.concatenate([bandwidth_Bps[odd]] * 2)[order],
        measured=np.sort(a * n + b),
        gate=figures.gate,
        core_latency=figures.core_latency,
        core_bandwidth=figures.core_bandwidth,
        hop_latency=figures.hop_latency,
        hop_bandwidth=figures.hop_bandwidth,
        exact=exact is not None,
    )
    if exact is not None:
        store.__dict__["_whole_block"] = exact
    return store


@dataclass(frozen=True)
class _Routes:
    """Per site pair (s, t) its fastest measured pairs, fastest first (inf latency: none)."""

    ends: np.ndarray  # (k, k, routes) the pair's machine in site s
    latency: np.ndarray  # (k, k, routes)
    bandwidth: np.ndarray  # (k, k, routes)


@dataclass(frozen=True)
class _Figures:
    """`_site_figures`' tables (the `SiteLinks` fields of the same names)."""

    latency: np.ndarray
    bandwidth: np.ndarray
    relayed: np.ndarray
    component: np.ndarray
    gate: np.ndarray
    core_latency: np.ndarray
    core_bandwidth: np.ndarray
    hop_latency: np.ndarray
    hop_bandwidth: np.ndarray


def _site_figures(
    median_lat: np.ndarray,
    median_bw: np.ndarray,
    best_lat: np.ndarray,
    best_bw: np.ndarray,
    covered: np.ndarray,
    size: np.ndarray,
    routes: _Routes,
) -> _Figures:
    """Effective site tables, as the dense model would see most machine pairs of each site pair.

    A *covered* site pair (at least half of its machine pairs measured) talks directly: its
    medians. On the diagonal an uncovered site's machines hop through a peer (twice the median),
    or through the nearest site when none of their pairs is measured. Between uncovered sites
    most machine pairs relay: to reach the site pair's fastest measured pair each end hops
    inside its site, and any path over the sites graph may be faster (lowest latency; its
    bandwidth the narrowest link or hop on it), computed over sites² only. The site figures
    count each end's hop at its site's median; the gateway tables let a machine pair count its
    own hops instead (`SiteLinks.gate`): on a relay over one link between two sites, to any of
    the site pair's fastest measured pairs (`routes`); on a longer one, to its first and last
    links' fastest pairs.
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
    first, last, narrowest, inner = _path_narrowest(
        pred, direct_bw, todo_src, todo_dst, covered, best_bw, hop_bw
    )
    bandwidth[todo_src, todo_dst] = bandwidth[todo_dst, todo_src] = narrowest
    latency[~reach] = np.inf
    bandwidth[~reach] = 0.0

    # Gateways: where a relay's first (last) link is a relayed one, its end site's machines hop
    # to that link's fastest measured pair; the relay between the gateways is the rest.
    count = routes.ends.shape[2]
    gate = np.full((k, k, count), _NO_HOP, np.int64)
    core_lat = np.full((k, k, count), np.inf)
    core_bw = np.zeros((k, k, count))
    core_lat[:, :, 0], core_bw[:, :, 0] = latency, bandwidth
    out_of_src = ~covered[todo_src, first] & np.isfinite(hop_lat[todo_src])
    into_dst = ~covered[last, todo_dst] & np.isfinite(hop_lat[todo_dst])
    gate[todo_src, todo_dst, 0] = np.where(out_of_src, routes.ends[todo_src, first, 0], _NO_HOP)
    gate[todo_dst, todo_src, 0] = np.where(into_dst, routes.ends[todo_dst, last, 0], _NO_HOP)
    core = dist[todo_src, todo_dst] - np.where(out_of_src, hop_lat[todo_src], 0.0)
    core -= np.where(into_dst, hop_lat[todo_dst], 0.0)
    core_lat[todo_src, todo_dst, 0] = core_lat[todo_dst, todo_src, 0] = np.maximum(core, 0.0)
    core_bw[todo_src, todo_dst, 0] = core_bw[todo_dst, todo_src, 0] = inner
    # One link between the two sites: every one of their fastest measured pairs is a route.
    one = (first == todo_dst) & out_of_src & into_dst
    s1, d1 = todo_src[one], todo_dst[one]
    gate[s1, d1], gate[d1, s1] = routes.ends[s1, d1], routes.ends[d1, s1]
    core_lat[s1, d1] = core_lat[d1, s1] = routes.latency[s1, d1]
    core_bw[s1, d1] = core_bw[d1, s1] = routes.bandwidth[s1, d1]

    latency[diag, diag] = inner_lat
    bandwidth[diag, diag] = inner_bw
    relayed[diag, diag] = ~np.diag(covered)
    for s in np.flatnonzero(~np.isfinite(inner_lat) & (size > 1)).tolist():
        away = latency[s].copy()
        away[s] = np.inf
        if np.isfinite(away).any():  # no pair inside measured: out to the nearest site and back
            t = int(np.argmin(away))
            latency[s, s], bandwidth[s, s] = 2 * away[t], bandwidth[s, t]
    core_lat[diag, diag, 0], core_bw[diag, diag, 0] = latency[diag, diag], bandwidth[diag, diag]
    return _Figures(
        latency=latency,
        bandwidth=bandwidth,
        relayed=relayed,
        component=component.astype(np.int64),
        gate=gate,
        core_latency=core_lat,
        core_bandwidth=core_bw,
        hop_latency=hop_lat,
        hop_bandwidth=hop_bw,
    )


def _path_narrowest(
    pred: np.ndarray,
    width: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    covered: np.ndarray,
    best_bw: np.ndarray,
    hop_bw: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per predecessor-tree path src → dst, all pairs at once (one vectorised step per hop of
    the longest path): the site after src, the site before dst, the smallest `width` on the
    path, and the smallest width without the hops at its two ends (a relayed link's width
    less its end sites' hops: `best_bw` and the hops of the sites inside the path)."""
    result = np.full(len(src), np.inf)
    inner = np.full(len(src), np.inf)
    first = dst.copy()
    last = pred[src, dst] if len(src) else dst.copy()
    pending = np.arange(len(src))
    cur, start, end = dst.copy(), src.copy(), dst.copy()
    while len(pending):
        prev = pred[start, cur]
        result[pending] = np.minimum(result[pending], width[prev, cur])
        core = np.where(covered[prev, cur], width[prev, cur], best_bw[prev, cur])
        relayed_link = ~covered[prev, cur]
        core = np.where(relayed_link & (prev != start), np.minimum(core, hop_bw[prev]), core)
        core = np.where(relayed_link & (cur != end), np.minimum(core, hop_bw[cur]), core)
        inner[pending] = np.minimum(inner[pending], core)
        first[pending] = cur
        cur = prev
        more = cur != start
        pending, cur, start, end = pending[more], cur[more], start[more], end[more]
    return first, last, result, inner


# --- exact relays for a fleet that fits one block ---------------------------------------------

# The exact block is built when its estimated work (`_exact_block`) is at most this many
# elementary steps per machine pair. Measured at 1,000 machines: 32 on 10 sites of 100 (0.09 s
# of CPU, less than the gateway relays' block), 81 on 20 sites of 50 (670 gateways: 0.24 s,
# about the dense model's build), 188 on `synthetic-1000` (every machine a gateway: 0.75 s,
# more than the dense model's build) — that one keeps the gateway relays.
_EXACT_WORK_PER_PAIR = 100
# Candidates (rows × gateways × machines) evaluated at once when relaying into a site.
_EXACT_CHUNK = 1 << 22


def _exact_block(
    site: np.ndarray, a: np.ndarray, b: np.ndarray, latency_s: np.ndarray, bandwidth_Bps: np.ndarray
) -> dict[str, np.ndarray] | None:
    """The dense model's (latency, bandwidth, relayed) of every machine pair over the measured
    pairs (a < b, one row each) — `hulk.cost.Fleet.from_arrays` without its all-pairs search
    over the machines — or None when that would cost more than the gateway relays
    (`_EXACT_WORK_PER_PAIR`).

    A *gateway* is a machine with a measured pair in another site. A shortest path from a in
    site S to b leaves S (if at all) at a first gateway g ∈ S and enters b's site T for the
    last time at a gateway h ∈ T; before g and after h it stays inside its site. So, with
    ``d_S`` the shortest paths over a site's own pairs and ``D`` those over the *gateway
    graph* (gateways; the measured pairs between sites and, per site, ``d_S`` between its
    gateways), ``dist(a, b) = min(d_S(a, b) if S = T, min_{g, h} d_S(a, g) + D(g, h) + d_T(h, b))``,
    computed in two stages: ``X(a, h) = min_g d_S(a, g) + D(g, h)``, then
    ``min_h X(a, h) + d_T(h, b)``. The width is the narrowest measured pair on the chosen path
    (the first minimum of each stage, as the dense model's one path), the relayed flag every
    unmeasured pair with a path. O(Σ_S sources_S · pairs_S + gateways · gateway-graph edges +
    Σ_S size_S · gateways_S · (gateways + machines)) rather than machines × measured pairs: on
    10 sites of 100 with three pairs per pair of sites, 234 gateways. Pairs a < b read the
    stages from a's side (the dense model sums from the lower index too); latencies equal the
    dense model's to rounding (sums grouped otherwise), flags exactly, and widths exactly where
    the shortest path is unique (on paths of equal latency each search keeps the one its own
    order meets first, so their widths may differ).
    """
    n = len(site)
    k = int(site.max()) + 1 if n else 0
    weight = np.maximum(latency_s, 1e-15)  # as the dense model: csgraph ignores zero weights
    inside = site[a] == site[b]
    gates = np.unique(np.concatenate([a[~inside], b[~inside]]))
    gate_of = np.full(n, -1, np.int64)
    gate_of[gates] = np.arange(len(gates))
    size = np.bincount(site, minlength=k)
    by_site = np.argsort(site, kind="stable")
    starts = np.concatenate([[0], np.cumsum(size)])
    local = np.empty(n, np.int64)
    local[by_site] = np.arange(n) - np.repeat(starts[:-1], size)
    degree = np.bincount(a[inside], minlength=n) + np.bincount(b[inside], minlength=n)
    # Paths inside a site are needed from its gateways and from machines with an unmeasured
    # pair in it (a full mesh: from its gateways only).
    sources = (gate_of >= 0) | (degree < size[site] - 1)
    per_site_gates = np.bincount(site[gates], minlength=k)
    pairs_inside = np.bincount(site[a[inside]], minlength=k)
    gateway_edges = int((~inside).sum()) + int((per_site_gates**2).sum()) // 2
    work = (
        3 * len(gates) * gateway_edges
        + int(np.bincount(site[sources], minlength=k) @ pairs_inside)
        + int(size @ per_site_gates) * (len(gates) + n)
    )
    if work > _EXACT_WORK_PER_PAIR * n * n:
        return None

    ia, ib, iw, ibw = a[inside], b[inside], weight[inside], bandwidth_Bps[inside]
    order = np.argsort(site[ia], kind="stable")
    ia, ib, iw, ibw = ia[order], ib[order], iw[order], ibw[order]
    edge_start = np.searchsorted(site[ia], np.arange(k + 1))
    inner: dict[int, tuple[np.ndarray, ...]] = {}  # per site: members, sources, d_S, widths
    g_a, g_b, g_lat, g_bw = [gate_of[a[~inside]]], [gate_of[b[~inside]]], [weight[~inside]], []
    g_bw.append(bandwidth_Bps[~inside])
    for s in range(k):
        members = by_site[starts[s] : starts[s + 1]]
        src = members[sources[members]]
        if not len(src):
            continue
        edges = slice(edge_start[s], edge_start[s + 1])
        la, lb = local[ia[edges]], local[ib[edges]]
        m = len(members)
        graph = csr_matrix((iw[edges], (la, lb)), shape=(m, m))
        dist, pred = shortest_path(
            graph, method="D", directed=False, indices=local[src], return_predecessors=True
        )
        width = np.zeros((m, m))
        width[la, lb] = width[lb, la] = ibw[edges]
        rows, cols = np.divmod(np.arange(dist.size), m)
        narrow = _narrowest(pred, width, rows, cols).reshape(dist.shape)
        narrow[np.arange(len(src)), local[src]] = np.inf
        at_gate = np.flatnonzero(gate_of[src] >= 0)
        inner[s] = (members, src, dist, narrow, at_gate)
        if len(at_gate) > 1:  # the gateway graph's edges inside the site
            i, j = np.triu_indices(len(at_gate), 1)
            far = local[src[at_gate[j]]]
            lat = dist[at_gate[i], far]
            some = np.isfinite(lat)
            g_a.append(gate_of[src[at_gate[i]]][some])
            g_b.append(gate_of[src[at_gate[j]]][some])
            g_lat.append(lat[some])
            g_bw.append(narrow[at_gate[i], far][some])
    count = len(gates)
    between, between_bw = np.zeros((0, 0)), np.zeros((0, 0))
    if count:
        ga, gb = np.concatenate(g_a), np.concatenate(g_b)
        glat, gbw = np.concatenate(g_lat), np.concatenate(g_bw)
        graph = csr_matrix((np.maximum(glat, 1e-15), (ga, gb)), shape=(count, count))
        between, pred = shortest_path(graph, method="D", directed=False, return_predecessors=True)
        width = np.zeros((count, count))
        width[ga, gb] = width[gb, ga] = gbw
        rows, cols = np.divmod(np.arange(count * count), count)
        between_bw = _narrowest(pred, width, rows, cols).reshape(count, count)
        np.fill_diagonal(between_bw, np.inf)

    # Stage 1: from every machine to every gateway, leaving its site at its best gateway.
    out_lat, out_bw = np.full((n, count), np.inf), np.zeros((n, count))
    for members, src, dist, narrow, at_gate in inner.values():
        if len(at_gate):
            via = gate_of[src[at_gate]]
            step = max(1, _EXACT_CHUNK // (len(at_gate) * count))
            for lo in range(0, len(members), step):
                part = slice(lo, lo + step)
                out_lat[members[part]], out_bw[members[part]] = _through(
                    dist[at_gate, part].T, narrow[at_gate, part].T, between[via], between_bw[via]
                )
    # Stage 2: into each site at its best gateway, rows a < b only (a's side, as the dense
    # model), then the site's own paths for its unmeasured pairs.
    latency, bandwidth = np.full((n, n), np.inf), np.zeros((n, n))
    for members, src, dist, narrow, at_gate in inner.values():
        rows_needed = int(members.max())
        if len(at_gate) and rows_needed:
            via = gate_of[src[at_gate]]
            step = max(1, _EXACT_CHUNK // (len(at_gate) * len(members)))
            for lo in range(0, rows_needed, step):
                hi = min(lo + step, rows_needed)
                latency[lo:hi, members], bandwidth[lo:hi, members] = _through(
                    out_lat[lo:hi, via], out_bw[lo:hi, via], dist[at_gate], narrow[at_gate]
                )
        own = np.flatnonzero(degree[src] < len(members) - 1)
        if len(own):
            cell = np.ix_(src[own], members)
            stay = dist[own] <= latency[cell]
            latency[cell] = np.where(stay, dist[own], latency[cell])
            bandwidth[cell] = np.where(stay, narrow[own], bandwidth[cell])
    lower = np.tri(n, k=-1, dtype=bool)  # a mask: index arrays of n²/2 pairs cost 4× more
    np.copyto(latency, latency.T, where=lower)
    np.copyto(bandwidth, bandwidth.T, where=lower)
    measured = np.zeros((n, n), bool)
    measured[a, b] = measured[b, a] = True
    latency[a, b] = latency[b, a] = latency_s
    bandwidth[a, b] = bandwidth[b, a] = bandwidth_Bps
    reach = np.isfinite(latency)
    bandwidth[~reach] = 0.0
    relayed = reach & ~measured
    np.fill_diagonal(latency, 0.0)
    np.fill_diagonal(bandwidth, np.inf)
    np.fill_diagonal(relayed, False)
    return {"latency": latency, "bandwidth": bandwidth, "relayed": relayed}


def _narrowest(
    pred: np.ndarray, width: np.ndarray, rows: np.ndarray, cols: np.ndarray
) -> np.ndarray:
    """The narrowest `width` on each predecessor-tree path to ``cols`` from the source of
    ``pred[rows]`` (inf at the source itself, and where there is no path)."""
    out = np.full(len(rows), np.inf)
    pending = np.flatnonzero(pred[rows, cols] >= 0)
    cur, row = cols[pending], rows[pending]
    while len(pending):
        prev = pred[row, cur]
        out[pending] = np.minimum(out[pending], width[prev, cur])
        more = pred[row, prev] >= 0
        pending, cur, row = pending[more], prev[more], row[more]
    return out


def _through(
    first: np.ndarray, first_bw: np.ndarray, second: np.ndarray, second_bw: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(r, c) ``min_j first[r, j] + second[j, c]`` and the narrower of the two widths at the
    first j reaching it: one stage of `_exact_block`."""
    candidates = first.T[:, :, None] + second[:, None, :]
    lowest = candidates.min(axis=0)
    best = (candidates == lowest).argmax(axis=0)  # the first minimum (argmin's choice)
    rows, cols = np.arange(len(first))[:, None], np.arange(second.shape[1])[None, :]
    return lowest, np.minimum(first_bw[rows, best], second_bw[best, cols])
