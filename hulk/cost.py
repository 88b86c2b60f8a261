"""The cost model: seconds per training iteration of a placement (docs/design.md#cost-model).

Every plan — the GNN's, the teacher search's, the baselines' — is judged by these formulas.

**Fleet.** Machines are indexed 0..n−1 in ``node_id`` order (`Fleet.node_ids` maps back). Per
machine: sustained compute ``F = gpu_count × peak_TFLOPS(capability) × MFU × 1e12`` FLOP/s
(`hulk.hardware.node_compute_tflops`) and memory ``memory_gb × 1e9`` bytes. Per ordered pair:

* linked pairs: α = the link's ``latency_p50_ms`` / 1000 s and β = its fitted ``beta_gbps``, or
  else the bandwidth tier of its latency (`hulk.hardware.link_bandwidth_gbps`), × 1e9 / 8 bytes/s.
  A direct link is always used, even when a relay would be faster;
* pairs without a link: the lowest-latency relay path over the links (any machine may relay,
  drained ones too: draining stops scheduling, not networking): α = the sum of its latencies,
  β = the smallest bandwidth on it; ``relayed`` is True;
* pairs with no path at all: α = inf, β = 0 (unreachable); the diagonal: α = 0, β = inf.

The matrices are dense (n × n float64), so memory grows as 8·n² bytes per matrix: fine for a few
thousand machines. Larger fleets (``cost.site_model``, `hulk.settings.CostSettings`) keep them
per site pair instead (`hulk.site_links`: site medians, relays between sites, machine-pair
exceptions); `Fleet.sites` is then set and the three matrices are `hulk.site_links.SiteMatrix`
views that gather the pairs asked for.

**Job** (`hulk.jobs.Job`): ``params``, ``layers``, ``micro_batch``, ``seq_len``; the activation
crossing a stage boundary ``A = micro_batch × seq_len × hidden × 2`` bytes; the memory need
``M = job.min_memory_bytes`` (default 16 × params).

**Plan.** D data-parallel replicas, each a pipeline of stages; a stage is one machine (a fleet
*index*) holding the contiguous layers ``[layer_start, layer_end)``. With
``m = ceil(global_batch / (micro_batch × D))`` micro-batches per replica:

* stage time per micro-batch ``t_k = layers_k × 6 × (params / layers) × micro_batch × seq_len
  / F_k``; a stage fits when ``M × layers_k / layers ≤ memory``;
* boundary time per micro-batch ``c_k = 2 × (α + A / β)`` between consecutive stages
  (activation forward, its gradient backward);
* pipeline time ``T_pp = Σ t_k + Σ c_k + (m − 1) × max(max t_k, max c_k)`` (max c_k = 0 for a
  one-stage pipeline);
* gradient sync: the gradient of ``params_k = params × layers_k / layers`` parameters,
  ``2 × params_k`` bytes, is ring all-reduced over the D machines holding those layers:
  ``2(D − 1) α_max + 2(D − 1)/D × bytes / β_min``, α_max / β_min over the consecutive pairs of
  the ring in `ring_order` (nearest neighbour + 2-opt on latency, `hulk.tours`); 0 when D = 1.
  ``T_dp`` = the slowest stage position;
* iteration ``T = max over replicas of T_pp + T_dp``.

Reported parts: ``compute_s = Σ t_k + (m − 1) × max t_k`` of the slowest replica (the one with
the largest T_pp) — the pipeline's time were communication free — and
``comm_s = iteration_s − compute_s`` (boundary transfers, the pipeline bubble they cause and the
gradient sync).

Replicas normally share one layer split (one stage per position). When they do not, the layer
range is cut at every replica's stage boundaries; each piece's gradient is all-reduced over the
D machines holding it (one per replica); a machine runs its all-reduces one after another and
``T_dp`` = the busiest machine's total. With a shared split
this is exactly the per-position rule above.

**Infeasible plans** — a stage that does not fit, an inactive machine, two machines of the plan
that cannot reach each other — give ``Cost(feasible=False, reason=...)`` with infinite times,
never an exception. A malformed plan (layers not covered exactly once in order, a machine used
twice, an index out of range) is a programming error: `ValueError`.

`plan_time` is the vectorised fast path (arrays in, no Python loop over stages); the readable
`iteration_time` checks a `Plan` and calls it, so there is one formula.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np
import pandas as pd
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, shortest_path

from hulk.errors import InputError
from hulk.hardware import link_bandwidth_gbps, link_ends, node_compute_tflops
from hulk.jobs import FLOPS_PER_PARAM_TOKEN, GB, Job
from hulk.schemas import STATUS_ACTIVE
from hulk.settings import BandwidthTier, CostSettings, HardwareSettings
from hulk.site_links import (
    SiteLinks,
    SiteMatrix,
    bottleneck_tree,
    build_site_links,
    inventory_sites,
)
from hulk.tours import ring_tour

GRADIENT_BYTES_PER_PARAM = 2  # fp16 gradients
# A stage fits when its memory need is at most the machine's memory × MEMORY_SLACK: one that
# fills a machine exactly still fits despite rounding. Every memory test of Hulk uses it.
MEMORY_SLACK = 1 + 1e-9
_RING_CACHE_LIMIT = 200_000  # cached ring orders per fleet before the cache is cleared
# On a site-model fleet, rings and spanning-tree bounds over more machines than this are
# ordered / bounded per site (hulk.site_links) rather than machine by machine.
SITE_SCALE = 128


# --- the fleet --------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Fleet:
    """Machines and effective pairwise links as arrays, index 0..n−1 in node_id order."""

    node_ids: np.ndarray  # (n,) int64, ascending
    compute_flops: np.ndarray  # (n,) sustained FLOP/s
    memory_bytes: np.ndarray  # (n,) bytes (memory_gb × 1e9)
    active: np.ndarray  # (n,) bool: status == active
    latency_s: np.ndarray | SiteMatrix  # (n, n) effective one-way latency α, s (inf: unreachable)
    bandwidth_Bps: np.ndarray | SiteMatrix  # (n, n) effective bandwidth β, bytes/s (0: unreachable)
    relayed: np.ndarray | SiteMatrix  # (n, n) bool: no direct link, a relay path is used
    component: np.ndarray  # (n,) int: i and j can reach each other iff equal
    sites: SiteLinks | None = None  # the site model's store (None: dense matrices)
    _rings: dict = field(default_factory=dict, repr=False)
    _ring_bounds: dict = field(default_factory=dict, repr=False)
    _group_links: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return len(self.node_ids)

    def __len__(self) -> int:
        return self.n

    # -- construction --

    @classmethod
    def from_frames(
        cls,
        inventory: pd.DataFrame,
        links: pd.DataFrame,
        hardware: HardwareSettings,
        tiers: Sequence[BandwidthTier],
        cost: CostSettings | None = None,
    ) -> Fleet:
        """Build a fleet from an inventory (schemas.INVENTORY) and a link table (schemas.LINKS).

        With `cost` settings that choose the site model for this many machines, the sites are
        the inventory's (city, country) places (`hulk.site_links`); else the matrices are dense.
        Raises `InputError` for duplicate node ids, links naming unknown machines and compute
        capabilities without a peak TFLOPS figure.
        """
        inventory = inventory.sort_values("node_id").reset_index(drop=True)
        node_ids = inventory["node_id"].to_numpy(np.int64)
        repeated = pd.unique(node_ids[1:][node_ids[1:] == node_ids[:-1]])
        if len(repeated):
            raise InputError(
                None,
                "inventory.duplicate_node_id",
                f"{len(repeated)} node id(s) appear more than once",
                repeated.tolist(),
            )
        compute = node_compute_tflops(inventory, hardware) * 1e12
        memory = inventory["memory_gb"].to_numpy(float) * GB
        active = (inventory["status"] == STATUS_ACTIVE).fillna(False).to_numpy(bool)

        links = links[links["latency_p50_ms"].notna()]
        i, j = link_ends(node_ids, links)
        gbps, _ = link_bandwidth_gbps(links, list(tiers))
        latency_ms = links["latency_p50_ms"].to_numpy(float)
        sites = None
        if cost is not None and cost.use_sites(len(node_ids)):
            sites = inventory_sites(inventory["city"], inventory["country"])
        return cls.from_arrays(
            node_ids,
            compute,
            memory,
            active,
            i,
            j,
            latency_ms / 1000.0,
            gbps * 1e9 / 8,
            sites=sites,
            exception_ratio=cost.exception_ratio if cost is not None else 1.01,
        )

    @classmethod
    def from_arrays(
        cls,
        node_ids: np.ndarray,
        compute_flops: np.ndarray,
        memory_bytes: np.ndarray,
        active: np.ndarray,
        link_i: np.ndarray,
        link_j: np.ndarray,
        link_latency_s: np.ndarray,
        link_bandwidth_Bps: np.ndarray,
        sites: np.ndarray | None = None,
        exception_ratio: float = 1.01,
    ) -> Fleet:
        """Build a fleet from per-machine arrays and links given as fleet-index pairs.

        `node_ids` must be ascending; links are undirected (a pair given twice keeps its
        lowest-latency row); self-links are ignored. Relay paths are computed here. With
        `sites` (a site label per machine) the links are kept per site pair
        (`hulk.site_links.build_site_links`, exceptions beyond `exception_ratio`).
        """
        node_ids = np.asarray(node_ids, np.int64)
        n = len(node_ids)
        if n > 1 and not (np.diff(node_ids) > 0).all():
            raise ValueError("node_ids must be strictly ascending")
        a = np.minimum(link_i, link_j).astype(np.int64)
        b = np.maximum(link_i, link_j).astype(np.int64)
        lat = np.asarray(link_latency_s, float)
        bw = np.asarray(link_bandwidth_Bps, float)
        keep = (a != b) & np.isfinite(lat)
        a, b, lat, bw = a[keep], b[keep], lat[keep], bw[keep]
        # Lowest latency first, then keep the first row of each pair.
        order = np.lexsort((lat, b, a))
        a, b, lat, bw = a[order], b[order], lat[order], bw[order]
        first = np.ones(len(a), bool)
        first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
        a, b, lat, bw = a[first], b[first], lat[first], bw[first]
        if sites is not None:
            if len(sites) != n:
                raise ValueError(f"{len(sites)} site labels for {n} machines")
            store = build_site_links(sites, a, b, lat, bw, exception_ratio)
            component = store.component[store.site]
            if store.exact:  # as its values: the dense model's groups of reachable machines
                graph = csr_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
                component = connected_components(graph, directed=False)[1].astype(np.int64)
            return cls(
                node_ids=node_ids,
                compute_flops=np.asarray(compute_flops, float),
                memory_bytes=np.asarray(memory_bytes, float),
                active=np.asarray(active, bool),
                latency_s=SiteMatrix(store, "latency"),
                bandwidth_Bps=SiteMatrix(store, "bandwidth"),
                relayed=SiteMatrix(store, "relayed"),
                component=component,
                sites=store,
            )

        latency = np.full((n, n), np.inf)
        bandwidth = np.zeros((n, n))
        latency[a, b] = latency[b, a] = lat
        bandwidth[a, b] = bandwidth[b, a] = bw
        linked = np.isfinite(latency)

        # Lowest-latency paths; csgraph ignores zero weights, so a zero latency becomes tiny.
        graph = csr_matrix((np.maximum(lat, 1e-15), (a, b)), shape=(n, n))
        _, component = connected_components(graph, directed=False)
        relayed = np.zeros((n, n), bool)
        if n and len(a):
            dist, pred = shortest_path(graph, method="D", directed=False, return_predecessors=True)
            src, dst = np.nonzero(np.triu(~linked & np.isfinite(dist), k=1))
            bottleneck = _path_bottleneck(pred, bandwidth, src, dst)
            latency[src, dst] = latency[dst, src] = dist[src, dst]
            bandwidth[src, dst] = bandwidth[dst, src] = bottleneck
            relayed[src, dst] = relayed[dst, src] = True
        np.fill_diagonal(latency, 0.0)
        np.fill_diagonal(bandwidth, np.inf)
        return cls(
            node_ids=node_ids,
            compute_flops=np.asarray(compute_flops, float),
            memory_bytes=np.asarray(memory_bytes, float),
            active=np.asarray(active, bool),
            latency_s=latency,
            bandwidth_Bps=bandwidth,
            relayed=relayed,
            component=component.astype(np.int64),
        )

    @cached_property
    def link_extremes(self) -> tuple[float, float]:
        """(lowest α, highest β) over the pairs of distinct machines: bounds for any ring."""
        if self.n < 2:
            return math.inf, 0.0
        if self.sites is not None:
            return self.sites.extremes()
        latency, bandwidth = np.asarray(self.latency_s), np.asarray(self.bandwidth_Bps)
        return float(_off_diagonal(latency).min()), float(_off_diagonal(bandwidth).max())

    # -- views and lookups --

    def subset(self, indices: Sequence[int] | np.ndarray) -> Fleet:
        """The fleet restricted to `indices` (ascending order kept; relays as in the full fleet)."""
        idx = np.unique(np.asarray(indices, np.int64))
        if self.sites is not None:
            store = self.sites.subset(idx)
            return Fleet(
                node_ids=self.node_ids[idx],
                compute_flops=self.compute_flops[idx],
                memory_bytes=self.memory_bytes[idx],
                active=self.active[idx],
                latency_s=SiteMatrix(store, "latency"),
                bandwidth_Bps=SiteMatrix(store, "bandwidth"),
                relayed=SiteMatrix(store, "relayed"),
                component=self.component[idx],
                sites=store,
            )
        return Fleet(
            node_ids=self.node_ids[idx],
            compute_flops=self.compute_flops[idx],
            memory_bytes=self.memory_bytes[idx],
            active=self.active[idx],
            latency_s=self.latency_s[np.ix_(idx, idx)],
            bandwidth_Bps=self.bandwidth_Bps[np.ix_(idx, idx)],
            relayed=self.relayed[np.ix_(idx, idx)],
            component=self.component[idx],
        )

    def index_of(self, node_ids: int | Iterable[int]) -> np.ndarray:
        """Fleet indices of node ids (KeyError naming the unknown ones)."""
        many = node_ids if np.isscalar(node_ids) else list(cast(Iterable[int], node_ids))
        ids = np.atleast_1d(np.asarray(many))
        ids = ids.astype(np.int64)
        if self.n == 0:
            pos, found = np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
        else:
            pos = np.searchsorted(self.node_ids, ids).clip(0, self.n - 1)
            found = self.node_ids[pos] == ids
        if not np.all(found):
            raise KeyError(f"node id(s) not in the fleet: {ids[~found].tolist()}")
        return pos

    def node_id(self, index: int) -> int:
        return int(self.node_ids[index])

    def reachable(self, i: int, j: int) -> bool:
        return bool(self.component[i] == self.component[j])

    def active_indices(self) -> np.ndarray:
        return np.flatnonzero(self.active)


def _off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """The off-diagonal entries of square `matrix` as an (n − 1, n) view, without a copy.

    In row-major order the diagonal entries are every (n + 1)-th of the flat array from the
    first: after dropping that first entry, rows of n + 1 entries end each on a diagonal one.
    """
    n = len(matrix)
    flat = np.ascontiguousarray(matrix).reshape(-1)
    return flat[1:].reshape(n - 1, n + 1)[:, :n]


def _path_bottleneck(
    pred: np.ndarray, bandwidth: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> np.ndarray:
    """Smallest link bandwidth on the predecessor-tree path src → dst, all pairs at once.

    Walks every path back from its destination one hop per round, so the rounds are the
    longest path's hop count and each round is one vectorised step over the unfinished pairs.
    """
    result = np.full(len(src), np.inf)
    pending = np.arange(len(src))
    cur = dst.copy()
    start = src.copy()
    while len(pending):
        prev = pred[start, cur]
        result[pending] = np.minimum(result[pending], bandwidth[prev, cur])
        cur = prev
        more = cur != start
        pending, cur, start = pending[more], cur[more], start[more]
    return result


# --- plans ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: fleet INDEX `node` (not the node_id) holds [layer_start, layer_end)."""

    node: int
    layer_start: int
    layer_end: int

    @property
    def layers(self) -> int:
        return self.layer_end - self.layer_start

    def node_id(self, fleet: Fleet) -> int:
        return fleet.node_id(self.node)


@dataclass(frozen=True)
class Plan:
    """D data-parallel replicas, each a tuple of stages in pipeline order."""

    replicas: tuple[tuple[Stage, ...], ...]

    @property
    def data_parallel(self) -> int:
        return len(self.replicas)

    @cached_property
    def nodes(self) -> tuple[int, ...]:
        """Fleet indices of every stage, replica by replica (asked millions of times in a
        scheduler run: computed once per plan)."""
        return tuple(stage.node for replica in self.replicas for stage in replica)

    def node_ids(self, fleet: Fleet) -> list[int]:
        return [fleet.node_id(node) for node in self.nodes]

    @classmethod
    def from_arrays(cls, stage_nodes: np.ndarray, stage_layers: Sequence[int] | np.ndarray) -> Plan:
        """Replicas sharing one layer split: `stage_nodes` (D, S) fleet indices, layers (S,)."""
        nodes = np.atleast_2d(np.asarray(stage_nodes, np.int64))
        ends = np.cumsum(np.asarray(stage_layers, np.int64))
        starts = ends - np.asarray(stage_layers, np.int64)
        return cls(
            tuple(
                tuple(
                    Stage(int(node), int(s), int(e))
                    for node, s, e in zip(row, starts, ends, strict=True)
                )
                for row in nodes
            )
        )

    def shared_split(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(stage_nodes (D, S), stage_layers (S,)) when all replicas split layers alike."""
        if not self.replicas or not self.replicas[0]:
            return None
        bounds = [(s.layer_start, s.layer_end) for s in self.replicas[0]]
        for replica in self.replicas[1:]:
            if [(s.layer_start, s.layer_end) for s in replica] != bounds:
                return None
        nodes = np.array([[s.node for s in replica] for replica in self.replicas], np.int64)
        return nodes, np.array([e - s for s, e in bounds], np.int64)

    def to_records(self, fleet: Fleet) -> list[dict[str, Any]]:
        """The placements-file shape (docs/contracts.md#placements-file): node ids, layer ranges."""
        return [
            {
                "stages": [
                    {
                        "node": s.node_id(fleet),
                        "layer_start": s.layer_start,
                        "layer_end": s.layer_end,
                    }
                    for s in replica
                ]
            }
            for replica in self.replicas
        ]

    @classmethod
    def from_records(cls, fleet: Fleet, records: Iterable[dict[str, Any]]) -> Plan:
        """Inverse of `to_records` (KeyError for a node id the fleet does not have)."""
        replicas = []
        for record in records:
            stages = record["stages"]
            index: np.ndarray | list[int] = (
                fleet.index_of([s["node"] for s in stages]) if stages else []
            )
            replicas.append(
                tuple(
                    Stage(int(i), int(s["layer_start"]), int(s["layer_end"]))
                    for i, s in zip(index, stages, strict=True)
                )
            )
        return cls(tuple(replicas))


def even_split(layers: int, stages: int) -> np.ndarray:
    """Layers per stage as equal as possible; the first ``layers % stages`` stages get one more."""
    if not 0 < stages <= layers:
        raise ValueError(f"cannot split {layers} layers into {stages} non-empty stages")
    counts = np.full(stages, layers // stages, np.int64)
    counts[: layers % stages] += 1
    return counts


# --- cost -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """Seconds per iteration and its parts; infeasible costs are infinite and give a reason."""

    iteration_s: float
    compute_s: float
    comm_s: float
    feasible: bool = True
    reason: str | None = None

    @classmethod
    def infeasible(cls, reason: str) -> Cost:
        return cls(math.inf, math.inf, math.inf, False, reason)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe ``estimate``/``baselines`` (docs/contracts.md#placements-file): inf → None."""

        def seconds(value: float) -> float | None:
            return float(value) if math.isfinite(value) else None

        record: dict[str, Any] = {
            "iteration_s": seconds(self.iteration_s),
            "compute_s": seconds(self.compute_s),
            "comm_s": seconds(self.comm_s),
            "feasible": self.feasible,
        }
        if self.reason is not None:
            record["reason"] = self.reason
        return record


def micro_batches(job: Job, replicas: int) -> int:
    """m = ceil(global_batch / micro_batch / D), micro-batches per replica."""
    return -(-job.global_batch // (job.micro_batch * replicas))


def lower_bound(job: Job, fleet: Fleet, nodes: Iterable[int]) -> float:
    """work / Σ F over `nodes` (fleet indices): the iteration time with free communication."""
    total = float(fleet.compute_flops[np.asarray(list(nodes), np.int64)].sum())
    return job.flops_per_iteration / total if total > 0 else math.inf


def makespan_concurrent(costs: Iterable[Cost | float]) -> float:
    """Jobs running side by side on disjoint groups: the slowest job's iteration time."""
    return max((_seconds(c) for c in costs), default=0.0)


def makespan_sequential(costs: Iterable[Cost | float]) -> float:
    """Jobs that each use the whole fleet run one after another: the sum of their times."""
    return math.fsum(_seconds(c) for c in costs)


def _seconds(cost: Cost | float) -> float:
    return cost.iteration_s if isinstance(cost, Cost) else float(cost)


# -- rings --


def ring_order(fleet: Fleet, nodes: Iterable[int]) -> list[int]:
    """A low-latency ring through `nodes` (fleet indices): nearest neighbour, then 2-opt.

    Deterministic for a node *set*: the tour starts at the smallest index. Up to three nodes
    every order is the same ring. Minimises the ring's total latency; unreachable pairs count as
    a huge latency so that the tour avoids them where it can.
    """
    return list(_ring(fleet, nodes)[0])


def ring_bottleneck(fleet: Fleet, nodes: Iterable[int]) -> tuple[float, float]:
    """(α_max, β_min) over the consecutive pairs of `ring_order` (0, inf for one node)."""
    _, alpha, beta = _ring(fleet, nodes)
    return alpha, beta


def allreduce_time(fleet: Fleet, nodes: Iterable[int], nbytes: float) -> float:
    """Ring all-reduce of `nbytes` over `nodes`: 2(D−1)·α_max + 2(D−1)/D · bytes/β_min."""
    nodes = tuple(int(n) for n in nodes)
    d = len(nodes)
    if d <= 1:
        return 0.0
    alpha, beta = ring_bottleneck(fleet, nodes)
    return float(2 * (d - 1) * alpha + 2 * (d - 1) / d * nbytes / beta)


def allreduce_lower_bound(fleet: Fleet, nodes: Iterable[int], nbytes: float) -> float:
    """A lower bound on `allreduce_time` that orders no ring: O(d²) for d machines.

    Leaving out one link of a ring gives a path through all d machines, a spanning tree, so the
    ring's slowest link is no faster than the bottleneck spanning tree's (the minimum spanning
    tree's longest edge) and its narrowest link no wider than the widest tree's narrowest.
    Exact for two machines. Links are symmetric (`Fleet.from_arrays`).
    """
    key = tuple(sorted(int(n) for n in nodes))
    d = len(key)
    if d <= 1:
        return 0.0
    bounds = fleet._ring_bounds.get(key)  # per machine set, as the rings themselves
    if bounds is None and fleet.sites is not None and d > SITE_SCALE:
        bounds = fleet._ring_bounds[key] = fleet.sites.spanning_bounds(np.asarray(key, np.int64))
    if bounds is None:
        idx = np.asarray(key, np.int64)
        whole = d == fleet.n and fleet.sites is None  # no copy of the n × n matrices
        grid = np.ix_(idx, idx)
        latency = np.asarray(fleet.latency_s if whole else fleet.latency_s[grid])
        bandwidth = np.asarray(fleet.bandwidth_Bps if whole else fleet.bandwidth_Bps[grid])
        alpha = bottleneck_tree(latency)
        beta = -bottleneck_tree(-bandwidth)
        if len(fleet._ring_bounds) >= _RING_CACHE_LIMIT:
            fleet._ring_bounds.clear()
        bounds = fleet._ring_bounds[key] = (alpha, beta)
    alpha, beta = bounds
    return float(2 * (d - 1) * alpha + 2 * (d - 1) / d * nbytes / beta)


def allreduce_floor(fleet: Fleet, nodes: Sequence[int] | np.ndarray, nbytes: float) -> float:
    """A cruder lower bound on `allreduce_time`, in O(1): every link of the ring at the fleet's
    lowest latency and highest bandwidth (`Fleet.link_extremes`)."""
    d = len(nodes)
    if d <= 1:
        return 0.0
    alpha, beta = fleet.link_extremes
    return float(2 * (d - 1) * alpha + 2 * (d - 1) / d * nbytes / beta)


def allreduce_group_bound(
    fleet: Fleet, nodes: Sequence[int] | np.ndarray, nbytes: float, groups: np.ndarray
) -> float:
    """A lower bound on `allreduce_time` from the groups (sites, say) the machines fall into.

    A ring through machines of several groups connects those groups, so its slowest link is no
    faster than the bottleneck spanning tree over them, each pair of groups weighted by the
    lowest latency between their machines (bandwidth likewise, highest). O(k²) for k groups
    once the fleet's group-to-group links are known (O(n²), once per fleet and grouping).
    """
    idx = np.asarray(nodes, np.int64)
    d = len(idx)
    if d <= 1:
        return 0.0
    alpha, beta = fleet.link_extremes
    present = np.unique(groups[idx])
    if len(present) > 1:
        latency, bandwidth = _group_links(fleet, groups)
        grid = np.ix_(present, present)
        alpha = max(alpha, bottleneck_tree(latency[grid]))
        beta = min(beta, -bottleneck_tree(-bandwidth[grid]))
    return float(2 * (d - 1) * alpha + 2 * (d - 1) / d * nbytes / beta)


def _group_links(fleet: Fleet, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lowest latency, highest bandwidth) between the machines of every two groups 0..k−1."""
    key = groups.tobytes()
    cached = fleet._group_links.get(key)
    if cached is None and fleet.sites is not None:
        k = int(groups.max()) + 1
        cached = fleet._group_links[key] = fleet.sites.group_links(np.arange(fleet.n), groups, k)
    if cached is None:
        k = int(groups.max()) + 1
        order = np.argsort(groups, kind="stable")
        starts = np.searchsorted(groups[order], np.arange(k))
        # Rows in group order, reduced to k rows; only then the (k, n) columns are reordered.
        latency = np.minimum.reduceat(fleet.latency_s[order], starts, axis=0)
        latency = np.minimum.reduceat(latency[:, order], starts, axis=1)
        bandwidth = np.maximum.reduceat(fleet.bandwidth_Bps[order], starts, axis=0)
        bandwidth = np.maximum.reduceat(bandwidth[:, order], starts, axis=1)
        cached = fleet._group_links[key] = (latency, bandwidth)
    return cached


def _ring(fleet: Fleet, nodes: Iterable[int]) -> tuple[tuple[int, ...], float, float]:
    key = tuple(sorted(int(n) for n in nodes))
    cached = fleet._rings.get(key)
    if cached is not None:
        return cached
    if len(key) <= 1:
        result: tuple[tuple[int, ...], float, float] = (key, 0.0, math.inf)
    elif len(key) == 2:
        a, b = key
        result = (key, float(fleet.latency_s[a, b]), float(fleet.bandwidth_Bps[a, b]))
    else:
        tour = np.array(key, np.int64)
        if fleet.sites is not None and len(key) > SITE_SCALE:  # each site's machines together
            tour = fleet.sites.ring_tour(tour, ring_tour)
        elif len(key) > 3:  # up to three nodes every order is the same ring
            tour = tour[ring_tour(fleet.latency_s[np.ix_(tour, tour)])]
        nxt = np.roll(tour, -1)
        alpha = float(fleet.latency_s[tour, nxt].max())
        beta = float(fleet.bandwidth_Bps[tour, nxt].min())
        result = (tuple(int(n) for n in tour), alpha, beta)
    if len(fleet._rings) >= _RING_CACHE_LIMIT:
        fleet._rings.clear()
    fleet._rings[key] = result
    return result


# -- pipelines --


def stage_compute_times(
    job: Job, fleet: Fleet, stage_nodes: np.ndarray, stage_layers: np.ndarray
) -> np.ndarray:
    """t_k = layers_k × 6 × (params/layers) × micro_batch × seq_len / F_k (broadcasting)."""
    per_layer = FLOPS_PER_PARAM_TOKEN * job.params / job.layers * job.micro_batch * job.seq_len
    return stage_layers * per_layer / fleet.compute_flops[stage_nodes]


def _pipelines(
    job: Job, fleet: Fleet, stage_nodes: np.ndarray, stage_layers: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """(T_pp, compute) per replica for `stage_nodes` (R, S) and `stage_layers` (S,) or (R, S)."""
    t = stage_compute_times(job, fleet, stage_nodes, stage_layers)
    t_sum, t_max = t.sum(axis=1), t.max(axis=1)
    if stage_nodes.shape[1] > 1:
        a, b = stage_nodes[:, :-1], stage_nodes[:, 1:]
        c = 2 * (fleet.latency_s[a, b] + job.activation_bytes / fleet.bandwidth_Bps[a, b])
        c_sum, c_max = c.sum(axis=1), c.max(axis=1)
    else:
        c_sum = c_max = np.zeros(len(stage_nodes))
    pipeline = t_sum + c_sum + (m - 1) * np.maximum(t_max, c_max)
    compute = t_sum + (m - 1) * t_max
    return pipeline, compute


def pipeline_time(
    job: Job,
    fleet: Fleet,
    stage_nodes: Sequence[int] | np.ndarray,
    stage_layers: Sequence[int] | np.ndarray,
    replicas: int = 1,
) -> tuple[float, float]:
    """(T_pp, compute part) of one pipeline whose replica gets 1/`replicas` of the batch.

    No feasibility check: an unreachable boundary gives inf. For planners trying pipelines.
    """
    nodes = np.asarray(stage_nodes, np.int64)[None, :]
    layers = np.asarray(stage_layers, np.int64)
    pipeline, compute = _pipelines(job, fleet, nodes, layers, micro_batches(job, replicas))
    return float(pipeline[0]), float(compute[0])


def plan_time(
    job: Job,
    fleet: Fleet,
    stage_nodes: np.ndarray,
    stage_layers: Sequence[int] | np.ndarray,
) -> Cost:
    """Iteration time of replicas sharing one layer split — the vectorised fast path.

    `stage_nodes` is (D, S) fleet indices (replica r's stage k on stage_nodes[r, k]),
    `stage_layers` (S,) the layers per stage position (positive, summing to job.layers).
    Malformed input raises `ValueError`; resource problems give an infeasible `Cost`.
    """
    nodes = np.atleast_2d(np.asarray(stage_nodes, np.int64))
    layers = np.asarray(stage_layers, np.int64)
    d, s = nodes.shape
    if d == 0 or s == 0 or layers.shape != (s,):
        raise ValueError(f"stage_nodes {nodes.shape} and stage_layers {layers.shape} disagree")
    if (layers <= 0).any() or int(layers.sum()) != job.layers:
        raise ValueError(f"stage layers {layers.tolist()} must be positive and sum to {job.layers}")
    flat = nodes.ravel()
    if flat.min() < 0 or flat.max() >= fleet.n:
        raise ValueError(f"fleet index out of range 0..{fleet.n - 1}: {flat.tolist()}")
    if len(np.unique(flat)) != len(flat):
        raise ValueError(f"a machine appears in more than one stage: {flat.tolist()}")

    problem = _resource_problem(job, fleet, nodes, layers)
    if problem:
        return Cost.infeasible(problem)

    pipeline, compute = _pipelines(job, fleet, nodes, layers, micro_batches(job, d))
    slowest = int(np.argmax(pipeline))
    sync = 0.0
    if d > 1:
        grad = GRADIENT_BYTES_PER_PARAM * job.params / job.layers * layers
        sync = max(allreduce_time(fleet, nodes[:, k], grad[k]) for k in range(s))
    total = float(pipeline[slowest]) + sync
    part = float(compute[slowest])
    return Cost(total, part, total - part)


def _resource_problem(job: Job, fleet: Fleet, nodes: np.ndarray, layers: np.ndarray) -> str | None:
    """The first reason the machines cannot run the plan (vectorised; None when they can)."""
    flat = nodes.ravel()
    inactive = flat[~fleet.active[flat]]
    if len(inactive):
        ids = [fleet.node_id(i) for i in inactive]
        return f"machine(s) {ids} are not active"
    need = job.min_memory_bytes * np.broadcast_to(layers, nodes.shape) / job.layers
    short = need > fleet.memory_bytes[nodes] * MEMORY_SLACK
    if short.any():
        r, k = (int(x) for x in np.argwhere(short)[0])
        node = int(nodes[r, k])
        return (
            f"stage {k} of replica {r} needs {need[r, k] / GB:.1f} GB on machine "
            f"{fleet.node_id(node)}, which has {fleet.memory_bytes[node] / GB:.1f} GB "
            f"({int(short.sum())} stage(s) do not fit)"
        )
    components = fleet.component[flat]
    if (components != components[0]).any():
        first = int(flat[0])
        other = int(flat[np.argmax(components != components[0])])
        return (
            f"machines {fleet.node_id(first)} and {fleet.node_id(other)} cannot reach each "
            "other (no link and no relay path)"
        )
    return None


# -- the readable entry point --


def _structure_problems(job: Job, fleet: Fleet, plan: Plan) -> list[str]:
    problems = []
    if not plan.replicas:
        return ["the plan has no replicas"]
    seen: dict[int, tuple[int, int]] = {}
    for r, replica in enumerate(plan.replicas):
        if not replica:
            problems.append(f"replica {r} has no stages")
            continue
        expected = 0
        for k, stage in enumerate(replica):
            where = f"replica {r} stage {k}"
            if stage.layer_start != expected:
                problems.append(f"{where} starts at layer {stage.layer_start}, expected {expected}")
            if stage.layer_end <= stage.layer_start:
                problems.append(f"{where} holds no layers [{stage.layer_start}, {stage.layer_end})")
            expected = max(stage.layer_end, expected)
            if not 0 <= stage.node < fleet.n:
                problems.append(f"{where}: fleet index {stage.node} out of range 0..{fleet.n - 1}")
            elif stage.node in seen:
                problems.append(
                    f"{where}: machine {fleet.node_id(stage.node)} is already used by "
                    f"replica {seen[stage.node][0]} stage {seen[stage.node][1]}"
                )
            else:
                seen[stage.node] = (r, k)
        if expected != job.layers:
            problems.append(f"replica {r} ends at layer {expected}, expected {job.layers}")
    return problems


def _resource_problems(job: Job, fleet: Fleet, plan: Plan) -> list[str]:
    problems = []
    stages = [(r, k, s) for r, rep in enumerate(plan.replicas) for k, s in enumerate(rep)]
    for r, k, stage in stages:
        node_id = fleet.node_id(stage.node)
        if not fleet.active[stage.node]:
            problems.append(f"replica {r} stage {k}: machine {node_id} is not active")
        need = job.min_memory_bytes * stage.layers / job.layers
        have = fleet.memory_bytes[stage.node]
        if need > have * MEMORY_SLACK:
            problems.append(
                f"replica {r} stage {k}: layers [{stage.layer_start}, {stage.layer_end}) need "
                f"{need / GB:.1f} GB, machine {node_id} has {have / GB:.1f} GB"
            )
    for r, replica in enumerate(plan.replicas):
        for k in range(len(replica) - 1):
            a, b = replica[k].node, replica[k + 1].node
            if not fleet.reachable(a, b):
                problems.append(
                    f"replica {r}: machines {fleet.node_id(a)} and {fleet.node_id(b)} (stages "
                    f"{k}, {k + 1}) cannot reach each other (no link and no relay path)"
                )
    nodes = [s.node for _, _, s in stages]
    if len({int(fleet.component[n]) for n in nodes}) > 1 and not any(
        "cannot reach" in p for p in problems
    ):
        problems.append(
            "the replicas' machines cannot all reach each other: gradient sync is impossible"
        )
    return problems


def check_plan(job: Job, fleet: Fleet, plan: Plan) -> list[str]:
    """Everything wrong with `plan` for `job` on `fleet` (empty when it can run).

    Structure: each replica covers [0, layers) exactly once, contiguously and in order, with
    non-empty stages; fleet indices in range; a machine used at most once in the plan.
    Resources: machines active; stage memory M × layers_k / layers within the machine's memory;
    consecutive stages (and the replicas' gradient rings) reachable.
    """
    problems = _structure_problems(job, fleet, plan)
    if problems:
        return problems
    return _resource_problems(job, fleet, plan)


def iteration_time(job: Job, fleet: Fleet, plan: Plan) -> Cost:
    """Seconds per iteration of `plan` (module docstring); infeasible plans give a reason.

    Raises `ValueError` for a malformed plan (see `check_plan`'s structure rules).
    """
    problems = _structure_problems(job, fleet, plan)
    if problems:
        raise ValueError("malformed plan: " + "; ".join(problems))
    split = plan.shared_split()
    if split is not None:
        return plan_time(job, fleet, *split)

    problems = _resource_problems(job, fleet, plan)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Cost.infeasible(problems[0] + more)
    d = plan.data_parallel
    m = micro_batches(job, d)
    pipelines, computes = [], []
    for replica in plan.replicas:
        nodes = np.array([[s.node for s in replica]], np.int64)
        layers = np.array([s.layers for s in replica], np.int64)
        pipeline, compute = _pipelines(job, fleet, nodes, layers, m)
        pipelines.append(float(pipeline[0]))
        computes.append(float(compute[0]))
    sync = _segment_sync(job, fleet, plan)
    slowest = int(np.argmax(pipelines))
    total = pipelines[slowest] + sync
    return Cost(total, computes[slowest], total - computes[slowest])


def _segment_sync(job: Job, fleet: Fleet, plan: Plan) -> float:
    """T_dp for replicas with different layer splits (module docstring)."""
    if plan.data_parallel <= 1:
        return 0.0
    cuts = sorted({s.layer_end for rep in plan.replicas for s in rep} | {0})
    groups: dict[tuple[int, ...], int] = {}
    for start, end in itertools.pairwise(cuts):
        holders = tuple(
            next(s.node for s in replica if s.layer_start <= start < s.layer_end)
            for replica in plan.replicas
        )
        groups[holders] = groups.get(holders, 0) + (end - start)
    busy: dict[int, float] = {}
    for holders, layer_count in groups.items():
        grad = GRADIENT_BYTES_PER_PARAM * job.params * layer_count / job.layers
        seconds = allreduce_time(fleet, holders, grad)
        for node in holders:
            busy[node] = busy.get(node, 0.0) + seconds
    return max(busy.values())
