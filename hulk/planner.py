"""The stage planner: the fastest plan (docs/design.md#cost-model) of one job on a machine set.

`plan_job(job, fleet, nodes, settings)` chooses the data-parallel degree D, which machines of
`nodes` form each of the D pipelines and in what order, and how many layers each stage holds,
to minimise `hulk.cost.iteration_time`. It may leave machines of the set unused when that is
faster (a slow machine that would be the pipeline's bottleneck, a far site whose link would be).
The returned cost is always `hulk.cost.iteration_time` of the returned plan: the planner's own
fast evaluator (`_PlanSearch.time`, the same formulas, no validation) only ranks candidates.

**Layer split** (`layer_split`). A machine of memory ``mem`` holds at most
``cap = floor(mem × layers / M)`` layers (M = ``job.min_memory_bytes``). Along a pipeline the
split minimises the slowest stage ``max_k layers_k / F_k`` subject to ``layers_k ≤ cap_k``: every
machine offers the "prices" ``j / F_k`` of its j-th layer (j = 1..cap_k) and the ``layers``
cheapest prices win (water-filling; exact for integers because prices rise along each
machine). A machine left with 0 layers is dropped from the pipeline.

**Candidate machine sets** (at most `max_pool` machines each, so that sets of hundreds of
machines cost no more than a few dozen). The machines are grouped into *sites*: complete-linkage
clusters of the fleet's latency with diameter `site_latency_ms` (cities or metro regions;
`site_labels`, computed once per fleet). Candidates are

* the whole set, when it has at most `max_pool` machines;
* site windows: from each of the `seed_sites` sites of most compute, the site grown by the
  nearest site (single-linkage latency) one at a time, up to `window_sites` sites;
* machine windows: from up to `seed_sites` seed machines (most compute among their
  `max_pool / 4` nearest machines; a seed's home — the machines before the first jump in
  latency from it — takes no further seed) the machines in order of latency from the seed,
  cut where that latency jumps (×1.5 and 0.5 ms: the edge of a city or region) and at sizes
  growing by `window_growth` from the fewest that hold the model;
* on part of the fleet, when the caller asks (``fleet_windows``: the scheduler, planning on the
  machines free now), the whole fleet's candidate sets restricted to the part: windows grown
  from the part's own strongest machines miss groups that stay fast without the machines the
  part lacks (the fastest kind, busy with other jobs), and the planner would find a slower
  plan on fewer machines than it finds on more;

windows larger than `max_pool` keep their fastest machines; only sets that can hold the model
count. **Layouts.** Every candidate set is ordered as one open path (nearest neighbour + 2-opt,
`hulk.tours.open_path`, minimising the sum of the job's boundary times
``c = 2 (α + activation / β)``) and laid out as

* ``single`` — one pipeline (D = 1) on the path's k fastest machines in path order, k doubling
  from the fewest that hold the model to all (also on a path that minimises Σ (c / c_max)^16,
  i.e. chiefly the slowest boundary, which a pipeline pays once per micro-batch);
* for up to `replica_candidates` data-parallel degrees D ≥ 2 (1..what memory allows, at most
  `max_replicas`, spread geometrically):
  ``chunks`` — the path cut into D contiguous pieces of equal compute (or, failing that, equal
  memory), each piece one pipeline with its own split (replicas may split layers differently);
  ``columns`` — the path cut into columns of D neighbouring machines, column j being stage j of
  every replica (machines dealt snake-wise by compute), one split shared by all replicas on the
  columns' slowest compute and smallest memory, so each gradient ring stays within a column;
  ``dp`` — plain data parallelism on the D fastest machines that hold the whole model.

Every candidate set is screened with its ``single`` layouts (sum path) and ``dp``; the
`full_sets` best by pipeline time and half as many by data-parallel time get the other
layouts. Layouts are built first and timed cheapest pipeline first: a layout whose pipeline
alone is no faster than the best so far is never synchronised, and gradient rings
(`hulk.cost.ring_order`, cached per fleet) are ordered only while cheap lower bounds say the
layout can still win. The best layout is then improved greedily for up to `prune_rounds`
rounds: drop one of the `prune_candidates` weakest machines, an endpoint of a pipeline's
slowest boundary, the unused machines or a whole site; re-order the machines in use (sum path,
bottleneck path, and the path whose entry and exit machines per site are chosen by a dynamic
programme for the best hops between sites); or change D by one.

On a site-model fleet (`hulk.site_links`) a group of up to `_GROUP_DENSE_MAX` machines is
planned on its own dense matrices, read once (`_group_fleet`; docs/design.md#site-model): the
same search as on a dense fleet, on the pairs the site model gives those machines. A fleet
that fits one block (`SiteLinks.whole`) is planned on the dense fleet of that block, built
once (`_whole_fleet`): no group is gathered per call.

Deterministic: no randomness; ties go to the lower machine index. Cost: about 5–20 ms for a
20-machine set of the paper's fleet, tens of milliseconds for sets of hundreds of machines.

**Across calls** (`_Memo`, per fleet and job): the teacher search plans a job thousands of times
on groups that differ by a machine or a site, so what depends only on the job and the fleet is
kept — paths by machine set, splits, each recipe's layout and pipeline time, what its gradient
sync is known to cost (`_Sync`), each candidate set's path and screening recipes (`_Screen`),
the variants of a best recipe, the search of each list of candidate sets, the cost of each best
layout. On a dense fleet the pool × pool latency block is not read either: site distances come
from each site's row minima, kept by its members, and the neighbourhoods that rank machine-window
seeds from every machine's nearest machines (`_nearest_table`). Each of these gives the plain
computation's result to the bit, so the plans are the same with or without them.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from hulk.cost import (
    GRADIENT_BYTES_PER_PARAM,
    MEMORY_SLACK,
    SITE_SCALE,
    Cost,
    Fleet,
    Plan,
    Stage,
    iteration_time,
    micro_batches,
    ring_bottleneck,
)
from hulk.jobs import FLOPS_PER_PARAM_TOKEN, GB, Job
from hulk.settings import PlannerSettings
from hulk.site_links import SiteMatrix, complete_linkage
from hulk.tours import open_path

__all__ = ["layer_capacity", "layer_split", "plan_job", "site_labels"]

# A window grown from a seed ends where the next machine is this much farther (ratio and at
# least this many seconds): the edge of a city or region.
_JUMP_RATIO, _JUMP_S = 1.5, 0.5e-3
_BOTTLENECK_POWER = 16  # path objective Σ (c / c_max)^16: mostly the slowest boundary
# On a site-model fleet, groups of up to this many machines are planned on their own dense
# matrices (`_group_fleet`): 3 × 1024² entries, 17 MB, gathered in tens of milliseconds.
_GROUP_DENSE_MAX = 1024
_SITES: weakref.WeakKeyDictionary[Fleet, dict[float, np.ndarray]] = weakref.WeakKeyDictionary()
_WHOLE: weakref.WeakKeyDictionary[Fleet, Fleet] = weakref.WeakKeyDictionary()
# Per fleet and job, what the planner's searches share across calls (`_Memo`), and how many
# entries a fleet's tables may hold together before they are emptied (pure results: any may
# be dropped; the 4-job mix on 1,000 machines makes about 75,000 in 2,000 evaluations).
_MEMO: weakref.WeakKeyDictionary[Fleet, dict[Job, _Memo]] = weakref.WeakKeyDictionary()
_MEMO_LIMIT = 100_000
_UNBUILT = object()  # not in the memo's table of built recipes
# Dense fleets: each site's row minima by its members (`_site_rows`), up to this many numbers;
# every machine's `_NEAR` nearest machines (`_nearest_table`), read in chunks of rows.
_ROWS: weakref.WeakKeyDictionary[Fleet, dict[bytes, np.ndarray]] = weakref.WeakKeyDictionary()
_ROWS_LIMIT = 4_000_000
_NEAR = 64
_POWER_CHUNK = 64
_NEAR_TABLES: weakref.WeakKeyDictionary[Fleet, tuple] = weakref.WeakKeyDictionary()


# --- reusable helpers -------------------------------------------------------------------------


def layer_capacity(job: Job, memory_bytes: Sequence[float] | np.ndarray) -> np.ndarray:
    """Most layers of `job` each machine can hold: floor(memory × layers / M), at most layers."""
    memory = np.asarray(memory_bytes, float)
    need_per_layer = job.min_memory_bytes / job.layers
    cap = np.floor(memory * MEMORY_SLACK / need_per_layer)
    # Guard the floor against rounding: the cost model's own test must accept cap layers.
    cap = np.where(need_per_layer * cap > memory * MEMORY_SLACK, cap - 1, cap)
    return np.clip(cap, 0, job.layers).astype(np.int64)


def layer_split(
    job: Job, compute: Sequence[float] | np.ndarray, memory: Sequence[float] | np.ndarray
) -> np.ndarray | None:
    """Layers per stage for stages of `compute` FLOP/s and `memory` bytes (pipeline order).

    Minimises the slowest stage (layers_k / compute_k) with every stage within its memory
    (``M × layers_k / layers ≤ memory_k``); the counts sum to ``job.layers`` and a stage may get
    0 (leave it out of the pipeline). None when the stages cannot hold the model together.
    """
    return _split(np.asarray(compute, float), layer_capacity(job, memory), job.layers)


def _split(compute: np.ndarray, cap: np.ndarray, layers: int) -> np.ndarray | None:
    """Water-filling on capacities `cap` (see the module docstring)."""
    positive = compute > 0
    if not positive.all():  # a machine without compute takes no layer
        cap = np.where(positive, cap, 0)
        compute = np.where(positive, compute, 1.0)
    if int(cap.sum()) < layers:
        return None
    s = len(compute)
    if s == 1:
        return np.array([layers], np.int64)
    top = int(min(layers, cap.max()))
    steps = np.arange(1, top + 1)
    prices = steps[None, :] / compute[:, None]
    prices[steps[None, :] > cap[:, None]] = np.inf  # the j-th layer needs j ≤ cap
    flat = prices.ravel()
    if flat.size > layers:
        chosen = np.argpartition(flat, layers - 1)[:layers]
    else:
        chosen = np.arange(flat.size)
    return np.bincount(chosen // top, minlength=s).astype(np.int64)


def site_labels(fleet: Fleet, latency_ms: float) -> np.ndarray:
    """Site of every machine: complete-linkage clusters of latency diameter `latency_ms`.

    Sites are numbered 0.. in order of their smallest machine index; computed once per fleet
    and threshold (cached). Drained machines get sites too: sites are places, not schedules.
    """
    per_fleet = _SITES.setdefault(fleet, {})
    key = float(latency_ms)
    if key not in per_fleet:
        n = fleet.n
        if n <= 1:
            labels = np.zeros(n, np.int64)
        elif fleet.sites is not None:  # site model: the sites' latency, sites² not machines²
            labels = fleet.sites.cluster(key)
        else:
            labels = complete_linkage(np.asarray(fleet.latency_s), key)
        per_fleet[key] = labels
    return per_fleet[key]


# --- the planner ------------------------------------------------------------------------------


# The planner's records are slotted classes and tuples: the memo keeps tens of thousands of
# them, and every full pass of Python's garbage collector visits each tracked object (tuples of
# numbers and arrays drop out of its lists; a record with a __dict__ is two objects).


@dataclass(slots=True)
class _Sync:
    """What `_PlanSearch.sync_time` knows of a layout's gradient sync, for later budgets:
    its rings (S, D) and their sizes in layers, the bound that discards it (shared split: the
    largest ring bound; else the busiest machine's), the slowest ring found by a search that
    stopped at its budget (T_dp is at least that) and T_dp once computed."""

    shared: bool
    holders: np.ndarray
    sizes: np.ndarray
    bound: float
    order: np.ndarray | None = None  # shared split: rings by decreasing bound
    floor: float = -math.inf
    exact: float | None = None


@dataclass(slots=True)
class _Layout:
    """D pipelines: fleet indices in stage order and layers per stage (no zero-layer stages)."""

    replicas: Sequence[np.ndarray]
    splits: Sequence[np.ndarray]
    # Layouts of one shared split (columns, dp) keep their arrays stacked, as the evaluator
    # reads them: (R, S) machines and layers per replica and (S, R) machines per stage.
    stacked: tuple[np.ndarray, np.ndarray] | None = None
    holders: np.ndarray | None = None
    sync: _Sync | None = field(default=None, repr=False, compare=False)
    pipeline: float = field(default=math.nan, repr=False, compare=False)  # `_PlanSearch.built`

    def plan(self) -> Plan:
        replicas = []
        for nodes, layers in zip(self.replicas, self.splits, strict=True):
            ends = np.cumsum(layers)
            replicas.append(
                tuple(
                    Stage(int(n), int(e - k), int(e))
                    for n, k, e in zip(nodes, layers, ends, strict=True)
                )
            )
        return Plan(tuple(replicas))

    @property
    def nodes(self) -> np.ndarray:
        return np.concatenate(self.replicas)


class _LayoutRecipe(NamedTuple):
    """How a layout was built: machine set (path order), layout kind and replica count."""

    order: tuple[int, ...]
    kind: str
    replicas: int


@dataclass
class _Memo:
    """One job's results on one fleet that every planner call may reuse: they depend only on
    the job, the fleet and their key, never on the call's machine set. The teacher search
    plans a job thousands of times on groups that differ by a machine or a site, whose
    candidate sets and layouts are mostly the previous calls' (`plan_job`)."""

    paths: dict[tuple[bytes, bool], np.ndarray] = field(default_factory=dict)
    splits: dict[bytes, np.ndarray | None] = field(default_factory=dict)
    # recipe → its layout (pipeline time set), None when the recipe builds no layout
    built: dict[_LayoutRecipe, _Layout | None] = field(default_factory=dict)
    # (settings, candidate sets) → `_search`'s best (seconds, layout, recipe): a call whose
    # pool changed where no candidate set reaches makes the same search
    searches: dict[tuple[str, bytes], tuple[float, _Layout | None, _LayoutRecipe | None]] = field(
        default_factory=dict
    )
    # recipe of a best layout → its plan and `hulk.cost.iteration_time`
    results: dict[_LayoutRecipe, tuple[Plan, Cost]] = field(default_factory=dict)
    # (settings, candidate set) → its path, screening recipes and bound (`_PlanSearch.screen`)
    screens: dict[tuple[str, bytes], _Screen] = field(default_factory=dict)
    # (settings, best recipe) → its variants (`_prune_moves`)
    moves: dict[tuple[str, _LayoutRecipe], list[_LayoutRecipe]] = field(default_factory=dict)
    # (settings, component) → the candidate sets of the fleet's machines there
    # (`_PlanSearch.fleet_sets`)
    fleet_sets: dict[tuple[str, int], list[np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        tables = (self.paths, self.splits, self.built, self.searches, self.results)
        return sum(len(table) for table in tables) + len(self.screens) + len(self.moves)


@dataclass(slots=True)
class _Screen:
    """A candidate set's path, the recipes that screen it (one pipeline on its fastest
    machines, plain data parallelism), the compute bound on its iteration time, and the
    recipes it gets when chosen (`full`, made on first use)."""

    path: np.ndarray
    singles: list[_LayoutRecipe]
    dps: list[_LayoutRecipe]
    bound: float
    full: list[_LayoutRecipe] | None = None


def _memo(fleet: Fleet, job: Job) -> _Memo:
    """The fleet's `_Memo` of `job`; every job's tables on the fleet are emptied once they
    hold more than `_MEMO_LIMIT` entries together (about 1–2 kB each)."""
    per_fleet = _MEMO.setdefault(fleet, {})
    if sum(len(m) for m in per_fleet.values()) > _MEMO_LIMIT:
        per_fleet.clear()
    memo = per_fleet.get(job)
    if memo is None:
        memo = per_fleet[job] = _Memo()
    return memo


@dataclass
class _PlanSearch:
    """Per-call constants and the fast evaluator."""

    job: Job
    fleet: Fleet
    settings: PlannerSettings
    per_layer: float = 0.0  # FLOPs of one layer for one micro-batch
    grad_per_layer: float = 0.0  # gradient bytes of one layer
    evaluations: int = 0
    seen: set[_LayoutRecipe] = field(default_factory=set)
    _cap: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _paths: dict[tuple[bytes, bool], np.ndarray] = field(default_factory=dict)
    # Water-filled splits by their inputs' bytes: most layouts share pipelines with earlier
    # ones (a prefix, a chunk, a pruned variant), so most splits repeat within one search.
    _splits: dict[bytes, np.ndarray | None] = field(default_factory=dict)
    _built: dict[_LayoutRecipe, _Layout | None] = field(default_factory=dict)
    _screens: dict[tuple[str, bytes], _Screen] = field(default_factory=dict)
    _moves: dict[tuple[str, _LayoutRecipe], list[_LayoutRecipe]] = field(default_factory=dict)
    _fleet_sets: dict[tuple[str, int], list[np.ndarray]] = field(default_factory=dict)
    settings_key: str = ""  # keys what depends on the settings in the shared tables
    fleet_windows: bool = False  # `plan_job`'s argument

    def __post_init__(self) -> None:
        job = self.job
        self.per_layer = (
            FLOPS_PER_PARAM_TOKEN * job.params / job.layers * job.micro_batch * job.seq_len
        )
        self.grad_per_layer = GRADIENT_BYTES_PER_PARAM * job.params / job.layers
        self._cap = layer_capacity(job, self.fleet.memory_bytes)

    # -- evaluation (the formulas of hulk.cost, without validation) --

    def pipeline_time(self, layout: _Layout) -> float:
        """max over replicas of T_pp (no gradient sync); replicas of one length at once."""
        fleet, job = self.fleet, self.job
        self.evaluations += 1
        m = micro_batches(job, len(layout.replicas))
        if len(layout.replicas) == 1:
            return self._one_pipeline_time(layout.replicas[0], layout.splits[0], m)
        if layout.stacked is not None:
            nodes, layers = layout.stacked
        elif len({len(nodes) for nodes in layout.replicas}) == 1:
            nodes, layers = np.stack(layout.replicas), np.stack(layout.splits)
        else:  # pipelines of different lengths: one at a time
            return max(
                self._one_pipeline_time(nodes, layers, m)
                for nodes, layers in zip(layout.replicas, layout.splits, strict=True)
            )
        # (R, S): every replica's row reduced as `_one_pipeline_time` reduces its one row
        t = layers * self.per_layer / fleet.compute_flops[nodes]
        t_max = t.max(axis=1)
        total = t.sum(axis=1)
        if nodes.shape[1] > 1:
            a, b = nodes[:, :-1], nodes[:, 1:]
            c = 2.0 * (fleet.latency_s[a, b] + job.activation_bytes / fleet.bandwidth_Bps[a, b])
            total = total + c.sum(axis=1)
            t_max = np.maximum(t_max, c.max(axis=1))
        return max(0.0, float((total + (m - 1) * t_max).max()))

    def _one_pipeline_time(self, nodes: np.ndarray, layers: np.ndarray, m: int) -> float:
        """T_pp of one pipeline: `pipeline_time`'s formula on 1-d arrays (same bits)."""
        fleet = self.fleet
        t = layers * self.per_layer / fleet.compute_flops[nodes]
        total, t_max = t.sum(), t.max()
        if len(nodes) > 1:
            a, b = nodes[:-1], nodes[1:]
            c = 2.0 * (
                fleet.latency_s[a, b] + self.job.activation_bytes / fleet.bandwidth_Bps[a, b]
            )
            total = total + c.sum()
            t_max = max(t_max, c.max())
        return max(0.0, float(total + (m - 1) * t_max))

    def sync_time(self, layout: _Layout, budget: float = math.inf) -> float:
        """T_dp of `layout`; inf as soon as it is known to reach `budget`.

        Shared split: the slowest stage position's ring all-reduce. Different splits: every piece
        between consecutive cut points is all-reduced over its D holders and a machine does its
        pieces one after another (hulk.cost's rule). Cheap lower bounds on each ring (every
        machine has two ring neighbours: α_max ≥ max_i min_j α_ij, β_min ≤ min_i max_j β_ij)
        discard hopeless layouts before any ring is ordered.

        What a call learns (the bounds, the slowest ring found, T_dp itself) stays on the
        layout (`_Sync`), so a later call with another budget, from this planner call or a
        later one through the memo, answers as the first computation would without redoing it:
        with a shared split the answer is T_dp when T_dp and every bound are below the budget
        and inf otherwise (the rings' running maximum only grows); with different splits, inf
        when the busiest machine's bound reaches the budget and T_dp otherwise.
        """
        d = len(layout.replicas)
        if d <= 1:
            return 0.0
        facts = layout.sync
        if facts is None:
            facts = layout.sync = self._sync_facts(layout, d)
        if facts.bound >= budget or facts.floor >= budget:
            return math.inf
        if facts.exact is None:
            scale_a, scale_b = 2.0 * (d - 1), 2.0 * (d - 1) / d * self.grad_per_layer
            holders, sizes = facts.holders, facts.sizes
            if facts.order is not None:  # a shared split
                worst = 0.0
                for k in facts.order:  # likeliest to exceed the budget first
                    alpha, beta = ring_bottleneck(self.fleet, holders[k].tolist())
                    worst = max(worst, scale_a * alpha + scale_b * sizes[k] / beta)
                    if worst >= budget:
                        facts.floor = worst
                        return math.inf
                facts.exact = worst
            else:
                busy: dict[int, float] = {}
                for row, size in zip(holders.tolist(), sizes.tolist(), strict=True):
                    alpha, beta = ring_bottleneck(self.fleet, row)
                    sec = scale_a * alpha + scale_b * size / beta
                    for node in row:
                        busy[node] = busy.get(node, 0.0) + sec
                facts.exact = max(busy.values())
        if facts.shared and facts.exact >= budget:
            return math.inf
        return facts.exact

    def _sync_facts(self, layout: _Layout, d: int) -> _Sync:
        """The rings of `layout` (D ≥ 2) and their lower bounds (`sync_time`)."""
        first = layout.splits[0]
        head = first.tobytes()  # int64 splits: equal bytes iff equal layers
        shared = layout.holders is not None or all(s.tobytes() == head for s in layout.splits)
        if shared:
            holders = (  # (S, D): stage position k's machines
                layout.holders if layout.holders is not None else np.stack(layout.replicas, axis=1)
            )
            sizes = first.astype(float)
        else:
            ends = [np.cumsum(s) for s in layout.splits]
            cuts = np.unique(np.concatenate([[0], *ends]))
            starts, sizes = cuts[:-1], np.diff(cuts).astype(float)
            holders = np.stack(
                [
                    r[np.searchsorted(e, starts, side="right")]
                    for r, e in zip(layout.replicas, ends, strict=True)
                ],
                axis=1,
            )
        scale_a, scale_b = 2.0 * (d - 1), 2.0 * (d - 1) / d * self.grad_per_layer
        lat = self.fleet.latency_s[holders[:, :, None], holders[:, None, :]]
        bw = self.fleet.bandwidth_Bps[holders[:, :, None], holders[:, None, :]]
        eye = np.eye(d, dtype=bool)[None]
        alpha_lb = np.where(eye, np.inf, lat).min(axis=2).max(axis=1)
        beta_ub = np.where(eye, 0.0, bw).max(axis=2).min(axis=1)
        lower = scale_a * alpha_lb + scale_b * sizes / beta_ub
        if shared:
            order = np.argsort(-lower, kind="stable")
            return _Sync(True, holders, sizes, float(lower.max()), order)
        busy_lb: dict[int, float] = {}
        for row, sec in zip(holders.tolist(), lower.tolist(), strict=True):
            for node in row:
                busy_lb[node] = busy_lb.get(node, 0.0) + sec
        return _Sync(False, holders, sizes, max(busy_lb.values()))

    def share(self, memo: _Memo, settings_key: str) -> None:
        """Keep paths, splits, built layouts, screens and prune moves in `memo`, shared with
        the job's other calls; `settings_key` names the settings (`plan_job`)."""
        self._paths, self._splits, self._built = memo.paths, memo.splits, memo.built
        self._screens, self._moves = memo.screens, memo.moves
        self._fleet_sets = memo.fleet_sets
        self.settings_key = settings_key

    def fleet_sets(self, component: int, pool: np.ndarray) -> list[np.ndarray]:
        """The candidate sets (`_candidate_sets`) of the fleet's machines in `component` that
        can hold a layer of the job, once per job (`plan_job`'s `fleet_windows`); none while
        `pool` is all of them."""
        key = (self.settings_key, component)
        found = self._fleet_sets.get(key)
        if found is None:
            fleet = self.fleet
            every = np.flatnonzero(
                fleet.active
                & (fleet.component == component)
                & (fleet.compute_flops > 0)
                & (self._cap > 0)
            )
            if len(every) <= len(pool):
                return []
            found = self._fleet_sets[key] = _candidate_sets(self, every)
        return found

    def screen(self, nodes: np.ndarray) -> _Screen:
        """The candidate set `nodes`' `_Screen`, remembered by its machines (in their order)."""
        key = (self.settings_key, nodes.tobytes())
        found = self._screens.get(key)
        if found is None:
            path = self.path(nodes)
            order = tuple(path.tolist())
            singles = [_LayoutRecipe(p, "single", 1) for p in _fastest_prefixes(self, path)]
            dps = [_LayoutRecipe(order, "dp", d) for d in self.replica_counts(nodes) if d > 1]
            bound = self.job.flops_per_iteration / float(self.fleet.compute_flops[nodes].sum())
            found = self._screens[key] = _Screen(path, singles, dps, bound)
        return found

    def full(self, nodes: np.ndarray, screen: _Screen) -> list[_LayoutRecipe]:
        """Every layout of a chosen candidate set: one pipeline on the fastest machines of its
        bottleneck path, D pipelines in chunks and in columns for each degree D ≥ 2."""
        if screen.full is None:
            recipes: list[_LayoutRecipe] = []
            if len(nodes) > 3:
                narrow = self.path(nodes, bottleneck=True)
                recipes += [_LayoutRecipe(p, "single", 1) for p in _fastest_prefixes(self, narrow)]
            order = tuple(screen.path.tolist())
            for d in self.replica_counts(nodes):
                if d > 1:
                    recipes += [_LayoutRecipe(order, kind, d) for kind in ("chunks", "columns")]
            screen.full = recipes
        return screen.full

    def built(self, recipe: _LayoutRecipe) -> _Layout | None:
        """`recipe`'s layout with its pipeline time set (`build`, `pipeline_time`),
        remembered."""
        found = self._built.get(recipe, _UNBUILT)
        if found is not _UNBUILT:
            if found is not None:
                self.evaluations += 1
            return found  # type: ignore[return-value]
        layout = self.build(recipe)
        if layout is not None:
            layout.pipeline = self.pipeline_time(layout)
        self._built[recipe] = layout
        return layout

    def time(self, layout: _Layout) -> float:
        """Iteration time of `layout` (for tests: equals hulk.cost.iteration_time)."""
        return self.pipeline_time(layout) + self.sync_time(layout)

    # -- machine sets --

    def cap(self, nodes: np.ndarray) -> np.ndarray:
        return self._cap[nodes]

    def split(self, compute: np.ndarray, cap: np.ndarray) -> np.ndarray | None:
        """`_split` of the job's layers, remembered per search (read-only results)."""
        key = compute.tobytes() + cap.tobytes()
        if key in self._splits:
            return self._splits[key]
        layers = _split(compute, cap, self.job.layers)
        if layers is not None:
            layers.flags.writeable = False
        self._splits[key] = layers
        return layers

    def path(self, nodes: np.ndarray, bottleneck: bool = False) -> np.ndarray:
        """`nodes` as a low-latency open path on the job's boundary time (cached per set).

        The plain path minimises the sum of the boundary times; with `bottleneck` it minimises
        the sum of their 16th powers (relative to the largest), i.e. chiefly the slowest boundary,
        which a long pipeline pays once per micro-batch.
        """
        nodes = np.sort(np.asarray(nodes, np.int64))
        key = (nodes.tobytes(), bottleneck)  # the set's machines (distinct), ascending
        cached = self._paths.get(key)
        if cached is None:
            pairs = np.ix_(nodes, nodes)
            lat, bw = self.fleet.latency_s[pairs], self.fleet.bandwidth_Bps[pairs]
            cost = 2.0 * (lat + self.job.activation_bytes / bw)
            np.fill_diagonal(cost, 0.0)
            if bottleneck and len(nodes) > 2:
                cost = (cost / cost.max()) ** _BOTTLENECK_POWER
            cached = nodes[open_path(cost)]
            self._paths[key] = cached
        return cached

    # -- layouts --

    def build(self, recipe: _LayoutRecipe) -> _Layout | None:
        order = np.asarray(recipe.order, np.int64)
        if recipe.kind == "single":
            return self._pipelines([order])
        if recipe.kind == "chunks":
            return self._chunks(order, recipe.replicas)
        if recipe.kind == "columns":
            return self._columns(order, recipe.replicas)
        return self._dp(order, recipe.replicas)

    def _pipelines(self, groups: list[np.ndarray]) -> _Layout | None:
        """Each group one pipeline with its own water-filled split (zero-layer stages dropped)."""
        replicas, splits = [], []
        f = self.fleet.compute_flops
        for nodes in groups:
            layers = self.split(f[nodes], self.cap(nodes))
            if layers is None:
                return None
            keep = layers > 0
            replicas.append(nodes[keep])
            splits.append(layers[keep])
        return _Layout(tuple(replicas), tuple(splits))

    def _chunks(self, order: np.ndarray, d: int) -> _Layout | None:
        n = len(order)
        if d > n:
            return None
        f = self.fleet.compute_flops[order]
        cap = self.cap(order)
        for weight in (f, cap.astype(float)):
            cuts = _balanced_cuts(weight, d)
            if cuts is None:
                continue
            bounds = [0, *cuts, n]
            pieces = [order[a:b] for a, b in itertools.pairwise(bounds)]
            if all(int(cap[a:b].sum()) >= self.job.layers for a, b in itertools.pairwise(bounds)):
                return self._pipelines(pieces)
        return None

    def _columns(self, order: np.ndarray, d: int) -> _Layout | None:
        n = len(order)
        s = n // d
        if s == 0:
            return None
        f = self.fleet.compute_flops
        if n > s * d:  # leave out the slowest machines, keep the path order of the rest
            slow = np.argsort(f[order], kind="stable")[: n - s * d]
            order = np.delete(order, slow)
        grid = order.reshape(s, d)  # grid[j]: the machines of stage j
        grid = np.take_along_axis(grid, np.argsort(-f[grid], axis=1, kind="stable"), axis=1)
        grid[1::2] = grid[1::2, ::-1]  # fastest first on even stages, last on odd ones
        layers = self.split(f[grid].min(axis=1), self.cap(grid.ravel()).reshape(s, d).min(axis=1))
        if layers is None:
            return None
        keep = layers > 0
        grid, layers = grid[keep], layers[keep]
        by_replica = np.ascontiguousarray(grid.T)
        return _Layout(
            tuple(by_replica),
            (layers,) * d,
            stacked=(by_replica, np.repeat(layers[None, :], d, axis=0)),
            holders=grid,
        )

    def _dp(self, order: np.ndarray, d: int) -> _Layout | None:
        full = order[self.cap(order) >= self.job.layers]
        if len(full) < d:
            return None
        fastest = full[np.argsort(-self.fleet.compute_flops[full], kind="stable")[:d]]
        whole = np.array([self.job.layers], np.int64)
        by_replica = fastest[:, None]
        return _Layout(
            tuple(by_replica),
            (whole,) * d,
            stacked=(by_replica, np.full((d, 1), self.job.layers, np.int64)),
            holders=fastest[None, :],
        )

    def replica_counts(self, nodes: np.ndarray) -> list[int]:
        """Data-parallel degrees worth trying on `nodes` (memory allows each replica L layers)."""
        most = min(
            self.settings.max_replicas, len(nodes), int(self.cap(nodes).sum()) // self.job.layers
        )
        return list(_replica_spread(most, self.settings.replica_candidates))


@functools.lru_cache(maxsize=1024)
def _replica_spread(most: int, candidates: int) -> tuple[int, ...]:
    """1..`most` when there are at most `candidates` of them, else `candidates` degrees spread
    geometrically (with 1 and `most`). Remembered: `np.geomspace` costs more than a search step."""
    if most <= candidates:
        return tuple(range(1, most + 1))
    spread = np.geomspace(1, most, candidates)
    return tuple(sorted({round(x) for x in spread} | {1, most}))


def _balanced_cuts(weight: np.ndarray, d: int) -> list[int] | None:
    """Cut positions (d − 1, strictly increasing, in 1..n−1) splitting `weight` into d equal
    shares as nearly as possible."""
    n = len(weight)
    cum = np.cumsum(weight)
    total = float(cum[-1])
    if total <= 0:
        return None
    targets = total * np.arange(1, d) / d
    after = np.searchsorted(cum, targets)  # first index whose prefix reaches the target
    before_gap = targets - np.where(after > 0, cum[np.maximum(after - 1, 0)], 0.0)
    after_gap = cum[np.minimum(after, n - 1)] - targets
    nearest = np.where(after_gap < before_gap, after + 1, np.maximum(after, 1))
    cuts = np.minimum(np.maximum(nearest, 1), n - 1)  # np.clip costs more on a few numbers
    # Strictly increasing: push duplicates forward (c_i = max(c_i, c_{i−1} + 1)), then back
    # from the end (c_i = min(c_i, n − (m − i), c_{i+1} − 1)); as running extremes of c_i − i,
    # integers throughout.
    m = len(cuts)
    if not m:
        return []
    step = np.arange(m)
    cuts = np.maximum.accumulate(cuts - step)
    cuts = np.minimum(np.minimum.accumulate(cuts[::-1])[::-1], n - m) + step
    if cuts[0] < 1 or (m > 1 and bool((cuts[1:] <= cuts[:-1]).any())):
        return None
    return cuts.tolist()


def _site_distances(
    fleet: Fleet, pool: np.ndarray, site: np.ndarray, members: Sequence[np.ndarray]
) -> np.ndarray:
    """Single-linkage latency between the k sites of `pool` (`site`: 0..k−1 per machine,
    `members`: each site's machines of the pool).

    Each site's row minima over the fleet's machines (its nearest member for every machine)
    are kept per fleet by the site's members (`_site_rows`), so a call whose pool changed in
    one or two sites reads k × n numbers and reduces them over the pool's columns, site by
    site: O(k n), where one reduction of the pool × pool block costs O(n²). Minima are exact,
    so the result is that block's to the bit. A site-model fleet answers per site.
    """
    k = len(members)
    if isinstance(fleet.latency_s, SiteMatrix):
        return fleet.latency_s.links.group_links(pool, site, k)[0]
    by_site = np.argsort(site, kind="stable")
    starts = np.searchsorted(site[by_site], np.arange(k))
    rows = np.stack([_site_rows(fleet, m) for m in members])  # (k, n)
    return np.minimum.reduceat(rows[:, pool[by_site]], starts, axis=1)  # (k, k)


def _site_rows(fleet: Fleet, members: np.ndarray) -> np.ndarray:
    """min over `members` of the fleet's latency rows, (n,): remembered per fleet (dense)."""
    table = _ROWS.setdefault(fleet, {})
    key = members.tobytes()
    row = table.get(key)
    if row is None:
        if len(table) * fleet.n >= _ROWS_LIMIT:
            table.clear()
        row = table[key] = np.asarray(fleet.latency_s)[members].min(axis=0)
    return row


def _candidate_sets(ctx: _PlanSearch, pool: np.ndarray) -> list[np.ndarray]:
    """Candidate machine sets (module docstring): the pool and windows grown from seed sites."""
    settings, fleet, job = ctx.settings, ctx.fleet, ctx.job
    limit = settings.max_pool
    f = fleet.compute_flops

    def trim(nodes: np.ndarray) -> np.ndarray:
        if len(nodes) <= limit:
            return np.sort(nodes)
        fastest = np.argsort(-f[nodes], kind="stable")[:limit]
        return np.sort(nodes[fastest])

    def holds(nodes: np.ndarray) -> bool:
        return int(ctx.cap(nodes).sum()) >= job.layers

    found: dict[frozenset[int], np.ndarray] = {}

    def add(nodes: np.ndarray) -> None:
        nodes = trim(nodes)
        key = frozenset(nodes.tolist())
        if key not in found and holds(nodes):
            found[key] = nodes

    if len(pool) <= limit:
        add(pool)
    _site_windows(ctx, pool, add)
    _machine_windows(ctx, pool, add)
    # Windows grow from the strongest sites and machines of the set searched, so on part of
    # the fleet (the machines free now) they grow elsewhere and can miss a group the fleet's
    # own windows hold: without its fastest machines such a group is often still the best.
    if ctx.fleet_windows:
        inside = np.zeros(fleet.n, bool)
        inside[pool] = True
        for nodes in ctx.fleet_sets(int(fleet.component[pool[0]]), pool):
            add(nodes[inside[nodes]])
    if not found:  # the memory only suffices on the pool as a whole: its fastest machines
        add(pool)
        if not found:
            found[frozenset(pool.tolist())] = np.sort(pool)
    return list(found.values())


def _site_windows(ctx: _PlanSearch, pool: np.ndarray, add: Callable[[np.ndarray], None]) -> None:
    """Candidate sets of whole sites: from each of the strongest sites, the nearest sites
    added one by one (up to ``window_sites`` sites or ``max_pool`` machines)."""
    settings, fleet = ctx.settings, ctx.fleet
    limit = settings.max_pool
    f = fleet.compute_flops
    labels = site_labels(fleet, settings.site_latency_ms)[pool]
    sites, inverse = np.unique(labels, return_inverse=True)
    k = len(sites)
    if k > 1 or len(pool) > limit:
        members = [pool[inverse == s] for s in range(k)]
        power = np.array([f[m].sum() for m in members])
        between = _site_distances(fleet, pool, inverse, members)
        seeds = np.argsort(-power, kind="stable")[: settings.seed_sites]
        for seed in seeds:
            chosen = [int(seed)]
            distance = between[seed].copy()
            distance[seed] = np.inf
            count = len(members[seed])
            while True:
                nodes = np.concatenate([members[s] for s in chosen])
                add(nodes)
                if count >= limit or len(chosen) >= min(k, settings.window_sites):
                    break
                nearest = int(np.argmin(distance))
                chosen.append(nearest)
                count += len(members[nearest])
                distance = np.minimum(distance, between[nearest])
                distance[chosen] = np.inf


def _machine_windows(ctx: _PlanSearch, pool: np.ndarray, add: Callable[[np.ndarray], None]) -> None:
    """Candidate sets grown machine by machine by latency from the strongest neighbourhoods
    (cities inside large sites): at the latency jumps, then by ``window_growth``."""
    settings, fleet, job = ctx.settings, ctx.fleet, ctx.job
    limit = settings.max_pool
    f = fleet.compute_flops
    size = min(len(pool), max(2, limit // 4))
    if fleet.sites is not None and len(pool) > limit:
        # Site model: neighbourhoods per site (no pool × pool matrix); seeds' rows on demand.
        power = fleet.sites.neighbourhood_power(pool, size, f)
        lat: np.ndarray | _PoolRows = _PoolRows(fleet, pool)
    else:
        power = _neighbourhood_power(fleet, pool, size)
        lat = _PoolRows(fleet, pool)
    homes = np.zeros(len(pool), bool)  # machines in the home city of a seed taken so far
    taken = 0
    for seed in np.argsort(-power, kind="stable").tolist():
        if taken >= settings.seed_sites:
            break
        if homes[seed]:
            continue
        taken += 1
        by_latency = np.argsort(lat[seed], kind="stable")
        grown = pool[by_latency]
        held = np.cumsum(ctx.cap(grown))
        count = int(np.searchsorted(held, job.layers)) + 1
        # Natural windows: where the latency from the seed jumps (the next city or region);
        # the first one is the seed's home, where no later seed may start.
        steps = lat[seed][by_latency]
        jump = (steps[1:] >= _JUMP_RATIO * steps[:-1]) & (steps[1:] - steps[:-1] >= _JUMP_S)
        cuts = np.flatnonzero(jump[1:]) + 2  # a window holds the seed and its nearest machine
        homes[by_latency[: cuts[0] if len(cuts) else len(pool)]] = True
        for cut in cuts[(cuts >= count) & (cuts <= limit)][: settings.window_sites].tolist():
            add(grown[:cut])
        while count <= len(grown):
            add(grown[: min(count, limit)])
            if count >= limit:
                break
            count = min(math.ceil(count * settings.window_growth), limit, len(grown))
            if count == len(grown) and count < limit:
                add(grown)
                break


def _neighbourhood_power(fleet: Fleet, pool: np.ndarray, size: int) -> np.ndarray:
    """Per machine of `pool` (dense fleet): the compute of the pool's machines within its
    `size`-th lowest latency in the pool (itself included, ties all in):
    ``where(L <= kth(L), F, 0).sum(axis=1)`` over the pool × pool latency block L.

    From its second call on a fleet, the `_NEAR` nearest machines of every machine
    (`_nearest_table`) give most rows' threshold and members without the block; a row whose
    threshold they cannot prove (too few of the pool among them) reads its block row. The
    sums are taken over the same rows of zeros and computes, a chunk of rows at a time, so
    they are the block's to the bit."""
    latency = np.asarray(fleet.latency_s)
    compute = fleet.compute_flops[pool]
    p = len(pool)
    table = _nearest_table(fleet) if p > 2 * _NEAR and size <= _NEAR // 2 else None
    if table is None:
        square = latency[np.ix_(pool, pool)]
        neighbourhood = np.partition(square, size - 1, axis=1)[:, size - 1 : size]
        return np.where(square <= neighbourhood, compute[None, :], 0.0).sum(axis=1)
    near, values, edge = table
    position = np.full(fleet.n, -1, np.int64)
    position[pool] = np.arange(p)
    cols = position[near[pool]]  # (p, _NEAR): pool position of each near machine, −1: not in
    vals = np.where(cols >= 0, values[pool], np.inf)
    threshold = np.partition(vals, size - 1, axis=1)[:, size - 1 : size]
    # Machines beyond the table are no nearer than its farthest: a threshold below that is
    # the pool row's, and the table holds every machine within it.
    proven = threshold[:, 0] < edge[pool]
    hit_row, hit = np.nonzero(proven[:, None] & (vals <= threshold))  # row-major: rows sorted
    hit_col = cols[hit_row, hit]
    hit_value = compute[hit_col]
    other = np.flatnonzero(~proven)
    if len(other):
        square = latency[np.ix_(pool[other], pool)]
        neighbourhood = np.partition(square, size - 1, axis=1)[:, size - 1 : size]
        other_rows = np.where(square <= neighbourhood, compute[None, :], 0.0)
    bounds = np.searchsorted(hit_row, np.arange(0, p + _POWER_CHUNK, _POWER_CHUNK))
    other_bounds = np.searchsorted(other, np.arange(0, p + _POWER_CHUNK, _POWER_CHUNK))
    power = np.empty(p)
    chunk = np.zeros((min(p, _POWER_CHUNK), p))
    for index, start in enumerate(range(0, p, _POWER_CHUNK)):
        block = chunk[: min(_POWER_CHUNK, p - start)]
        hits = slice(bounds[index], bounds[index + 1])
        rows, columns = hit_row[hits] - start, hit_col[hits]
        block[rows, columns] = hit_value[hits]
        unproven = slice(other_bounds[index], other_bounds[index + 1])
        if unproven.start < unproven.stop:
            block[other[unproven] - start] = other_rows[unproven]
        power[start : start + len(block)] = block.sum(axis=1)
        block[rows, columns] = 0.0
        if unproven.start < unproven.stop:
            block[other[unproven] - start] = 0.0
    return power


def _nearest_table(fleet: Fleet) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every machine's `_NEAR` lowest-latency machines (any order), their latencies and the
    largest of those (dense fleet); None on a fleet's first call (a group's fleet, planned
    once, would not repay the table's O(n²))."""
    if fleet.n <= _NEAR:
        return None
    found = _NEAR_TABLES.get(fleet)
    if found is None:
        _NEAR_TABLES[fleet] = ()
        return None
    if not found:
        latency = np.asarray(fleet.latency_s)
        near = np.empty((fleet.n, _NEAR), np.int64)
        for start in range(0, fleet.n, _POWER_CHUNK):  # bounded scratch memory
            part = latency[start : start + _POWER_CHUNK]
            near[start : start + len(part)] = np.argpartition(part, _NEAR - 1, axis=1)[:, :_NEAR]
        values = np.take_along_axis(latency, near, axis=1)
        found = _NEAR_TABLES[fleet] = (near, values, values.max(axis=1))
    return found


@dataclass
class _PoolRows:
    """Latency rows of a pool gathered one machine at a time (``rows[i]``: pool position i)."""

    fleet: Fleet
    pool: np.ndarray

    def __getitem__(self, position: int) -> np.ndarray:
        return np.asarray(self.fleet.latency_s[self.pool[position], self.pool])


@dataclass
class _BestLayout:
    seconds: float = math.inf
    layout: _Layout | None = None
    recipe: _LayoutRecipe | None = None


def _evaluate(ctx: _PlanSearch, recipes: list[_LayoutRecipe], best: _BestLayout) -> bool:
    """Build `recipes`, then time them cheapest pipeline first; True when `best` improved.

    A layout whose pipeline alone is no faster than the best so far is never synchronised, and
    the gradient rings of the others are only ordered while they can still win.
    """
    staged = []
    seen = ctx.seen
    for position, recipe in enumerate(recipes):
        before = len(seen)
        seen.add(recipe)
        if len(seen) == before:  # seen earlier in this call
            continue
        layout = ctx.built(recipe)
        if layout is not None:
            staged.append((layout.pipeline, position, recipe, layout))
    staged.sort(key=lambda entry: (entry[0], entry[1]))
    improved = False
    for pipeline, _, recipe, layout in staged:
        if pipeline >= best.seconds:
            break
        total = pipeline + ctx.sync_time(layout, best.seconds - pipeline)
        if total < best.seconds * (1 - 1e-12):
            best.seconds, best.layout, best.recipe = total, layout, recipe
            improved = True
    return improved


def _fastest_prefixes(ctx: _PlanSearch, order: np.ndarray) -> list[tuple[int, ...]]:
    """`order` restricted to its k fastest machines (path order kept), k doubling from the
    fewest that hold the model up to all of them."""
    f = ctx.fleet.compute_flops[order]
    by_speed = np.argsort(-f, kind="stable")
    held = np.cumsum(ctx.cap(order)[by_speed])
    k = int(np.searchsorted(held, ctx.job.layers)) + 1
    n = len(order)
    counts = []
    while k < n:
        counts.append(k)
        k *= 2
    counts.append(n)
    return [tuple(order[np.sort(by_speed[:k])].tolist()) for k in counts]


def _search(ctx: _PlanSearch, candidates: Sequence[np.ndarray]) -> _BestLayout:
    """Screen every candidate set with one pipeline on its fastest machines and with plain data
    parallelism, lay out the most promising sets every way (the `full_sets` best by pipeline,
    half as many by data parallelism), then improve the best layout (module docstring)."""
    best = _BestLayout()
    screened = []
    for position, nodes in enumerate(candidates):
        screen = ctx.screen(nodes)
        single, plain = _BestLayout(), _BestLayout()
        _evaluate(ctx, screen.singles, single)
        _evaluate(ctx, screen.dps, plain)
        for quick in (single, plain):
            if quick.seconds < best.seconds:
                best.seconds, best.layout, best.recipe = quick.seconds, quick.layout, quick.recipe
        screened.append((single.seconds, plain.seconds, screen.bound, position, nodes, screen))
    # The most promising sets by pipeline time, and half as many by data-parallel time.
    keep = ctx.settings.full_sets
    chosen = sorted(screened, key=lambda e: (e[0], e[2], e[3]))[:keep]
    chosen += sorted(screened, key=lambda e: (e[1], e[2], e[3]))[: keep // 2]
    recipes: list[_LayoutRecipe] = []
    done: set[int] = set()
    for _, _, bound, position, nodes, screen in chosen:
        if position in done or bound >= best.seconds:
            continue
        done.add(position)
        recipes += ctx.full(nodes, screen)
    _evaluate(ctx, recipes, best)
    if best.recipe is None or best.layout is None:  # set together: nothing was feasible
        return best
    sites = site_labels(ctx.fleet, ctx.settings.site_latency_ms)
    for _ in range(ctx.settings.prune_rounds):
        key = (ctx.settings_key, best.recipe)
        moves = ctx._moves.get(key)
        if moves is None:  # the variants depend on the recipe alone (its layout follows)
            moves = ctx._moves[key] = _prune_moves(ctx, best.recipe, best.layout, sites)
        if not _evaluate(ctx, moves, best):
            break
    return best


def _polish_path(ctx: _PlanSearch, path: np.ndarray, sites: np.ndarray) -> np.ndarray:
    """`path` with the machines where it enters and leaves each site chosen for the best hops.

    The path is cut into blocks of consecutive machines of one site; keeping the order of the
    blocks, a dynamic programme over blocks picks each block's entry and exit machines to
    minimise the slowest hop between blocks, then the sum of those hops (the hops inside a
    site are about equal, so they are left as they are).
    """
    fleet, job = ctx.fleet, ctx.job
    labels = sites[path]
    starts = np.flatnonzero(np.concatenate([[True], labels[1:] != labels[:-1]]))
    blocks = np.split(path, starts[1:])
    if len(blocks) < 2:
        return path

    def hop(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        lat = fleet.latency_s[np.ix_(a, b)]
        return 2.0 * (lat + job.activation_bytes / fleet.bandwidth_Bps[np.ix_(a, b)])

    # State per exit machine of the current block: (slowest hop, sum of hops, back-pointer).
    first = blocks[0]
    worst = np.zeros(len(first))
    total = np.zeros(len(first))
    choices: list[tuple[np.ndarray, np.ndarray]] = []  # per block: (entry per exit, prev exit)
    for block in blocks[1:]:
        c = hop(blocks[len(choices)], block)  # (previous exits, entries)
        new_worst = np.maximum(worst[:, None], c)
        key = new_worst * (1.0 + 1e-9) + (total[:, None] + c) * 1e-12
        prev = np.argmin(np.where(np.isfinite(key), key, np.inf), axis=0)  # per entry
        cols = np.arange(len(block))
        entry_worst, entry_total = new_worst[prev, cols], total[prev] + c[prev, cols]
        # Exit x from entry e ≠ x (e = x for a one-machine block).
        score = entry_worst + entry_total * 1e-12 / (1.0 + 1e-9)
        if len(block) == 1:
            entry = np.zeros(1, np.int64)
        else:
            order = np.argsort(score, kind="stable")
            entry = np.where(cols == order[0], order[1], order[0])
        worst, total = entry_worst[entry], entry_total[entry]
        choices.append((entry, prev[entry]))
    # Walk back from the best exit of the last block.
    exit_ = int(np.argmin(worst * (1.0 + 1e-9) + total * 1e-12))
    pieces = []
    for index in range(len(blocks) - 1, 0, -1):
        block = blocks[index]
        entry_of, prev_of = choices[index - 1]
        first_node = int(entry_of[exit_])
        middle = [int(v) for k, v in enumerate(block) if k not in (first_node, exit_)]
        pieces.append(
            [int(block[first_node]), *middle] + ([int(block[exit_])] if exit_ != first_node else [])
        )
        exit_ = int(prev_of[exit_])
    block = blocks[0]
    pieces.append([int(v) for k, v in enumerate(block) if k != exit_] + [int(block[exit_])])
    return np.array([v for piece in reversed(pieces) for v in piece], np.int64)


def _prune_moves(
    ctx: _PlanSearch, recipe: _LayoutRecipe, layout: _Layout, sites: np.ndarray
) -> list[_LayoutRecipe]:
    """Variants of the best recipe: one machine or site fewer, the machines in use re-ordered,
    one replica more or fewer."""
    order = np.asarray(recipe.order, np.int64)
    used = layout.nodes
    f = ctx.fleet.compute_flops
    drop: list[tuple[int, ...]] = []
    weakest = used[np.argsort(f[used], kind="stable")[: ctx.settings.prune_candidates]]
    drop += [(int(v),) for v in weakest]
    for nodes in layout.replicas:  # the endpoints of each pipeline's slowest boundary
        if len(nodes) > 1:
            a, b = nodes[:-1], nodes[1:]
            lat, bw = ctx.fleet.latency_s[a, b], ctx.fleet.bandwidth_Bps[a, b]
            k = int(np.argmax(lat + ctx.job.activation_bytes / bw))
            drop += [(int(a[k]),), (int(b[k]),)]
    unused = np.setdiff1d(order, used)
    if len(unused):
        drop.append(tuple(int(v) for v in unused))
    labels = sites[order]
    if len(np.unique(labels)) > 1:
        for s in np.unique(labels):
            drop.append(tuple(int(v) for v in order[labels == s]))
    variants: list[_LayoutRecipe] = []
    seen: set[tuple[int, ...]] = set()
    for gone in drop:
        if gone in seen:
            continue
        seen.add(gone)
        removed = set(gone)
        rest = tuple(v for v in recipe.order if v not in removed)
        if rest:
            kind = recipe.kind if recipe.replicas > 1 else "single"
            variants.append(_LayoutRecipe(rest, kind, recipe.replicas))
    if len(used) > 2:  # the machines in use, re-ordered on their own
        kind = recipe.kind if recipe.replicas > 1 else "single"
        for bottleneck in (False, True):
            path = tuple(ctx.path(np.sort(used), bottleneck).tolist())
            variants.append(_LayoutRecipe(path, kind, recipe.replicas))
        if recipe.replicas == 1:
            polished = _polish_path(ctx, layout.replicas[0], sites)
            variants.append(_LayoutRecipe(tuple(polished.tolist()), "single", 1))
    for d in (recipe.replicas - 1, recipe.replicas + 1):
        if 1 <= d <= min(len(order), ctx.settings.max_replicas):
            kind = "single" if d == 1 else ("chunks" if recipe.kind == "single" else recipe.kind)
            variants.append(_LayoutRecipe(recipe.order, kind, d))
    return variants


def plan_job(
    job: Job,
    fleet: Fleet,
    nodes: Sequence[int] | np.ndarray,
    settings: PlannerSettings,
    *,
    fleet_windows: bool = False,
) -> tuple[Plan | None, Cost]:
    """The fastest plan the planner finds for `job` on the machines `nodes` (fleet indices).

    `fleet_windows`: on part of the fleet, also search the whole fleet's candidate sets
    restricted to `nodes` (module docstring). The scheduler asks for them: it plans on the
    machines free now, where the part's own windows miss groups the fleet's hold. Callers that
    plan many parts of one fleet (the teacher) leave them out: they cost a search of the whole
    fleet's sets per call.

    Returns ``(plan, hulk.cost.iteration_time(job, fleet, plan))``, or ``(None, infeasible
    Cost)`` with a reason when the active machines of `nodes` cannot hold the job's memory
    (``job.min_memory_bytes``, in whole layers) within one group of mutually reachable
    machines. Inactive (drained) machines of `nodes` are never used. Deterministic.
    """
    twin = _whole_fleet(fleet)
    group = _group_fleet(fleet, nodes, settings) if twin is None else None
    if twin is not None or group is not None:  # plan on dense matrices, judge on the fleet
        if twin is not None:
            plan, cost = plan_job(job, twin, nodes, settings, fleet_windows=fleet_windows)
        else:
            assert group is not None
            local, idx = group
            plan, cost = plan_job(
                job, local, np.arange(local.n), settings, fleet_windows=fleet_windows
            )
            if plan is not None:
                plan = Plan(
                    tuple(
                        tuple(Stage(int(idx[s.node]), s.layer_start, s.layer_end) for s in replica)
                        for replica in plan.replicas
                    )
                )
        if plan is None:
            return None, cost
        # The group's matrices hold the fleet's values for its pairs, in the same order, so
        # the group's judgement is the fleet's to the bit — unless a gradient ring is long
        # enough for the fleet to order it per site.
        if plan.data_parallel > SITE_SCALE:
            cost = iteration_time(job, fleet, plan)
        return plan, cost
    ctx = _PlanSearch(job, fleet, settings, fleet_windows=fleet_windows)
    memo = _memo(fleet, job)
    settings_key = settings.model_dump_json() + (" fleet-windows" if fleet_windows else "")
    ctx.share(memo, settings_key)
    pools = _reachable_pools(ctx, nodes)
    if isinstance(pools, Cost):
        return None, pools
    best = _BestLayout()
    for pool in pools:
        candidates = _candidate_sets(ctx, pool)
        # Pools are disjoint (components), so no recipe of an earlier pool's search can be
        # one of this pool's: the search depends on its candidate sets alone.
        sizes = np.array([len(c) for c in candidates], np.int64)
        key = (settings_key, sizes.tobytes() + np.concatenate(candidates).tobytes())
        known = memo.searches.get(key)
        if known is None:
            searched = _search(ctx, candidates)
            known = memo.searches[key] = (searched.seconds, searched.layout, searched.recipe)
        found = _BestLayout(*known)
        if found.layout is not None and found.seconds < best.seconds:
            best = found
    return _result(ctx, best, memo)


def _whole_fleet(fleet: Fleet) -> Fleet | None:
    """On a site-model fleet that fits one block (`hulk.site_links.SiteLinks.whole`), the
    dense fleet of that block, built once: every job is planned on it exactly as on a dense
    fleet, with no group to gather per call. None otherwise."""
    if fleet.sites is None:
        return None
    twin = _WHOLE.get(fleet)
    if twin is None:
        whole = fleet.sites.whole()
        if whole is None:
            return None
        twin = _WHOLE[fleet] = Fleet(
            node_ids=fleet.node_ids,
            compute_flops=fleet.compute_flops,
            memory_bytes=fleet.memory_bytes,
            active=fleet.active,
            latency_s=whole["latency"],
            bandwidth_Bps=whole["bandwidth"],
            relayed=whole["relayed"],
            component=fleet.component,
        )
        # The store clusters a whole block as the dense model clusters the twin's matrix
        # (`SiteLinks.cluster`): one table of sites for both, computed once.
        _SITES[twin] = _SITES.setdefault(fleet, {})
    return twin


def _group_fleet(
    fleet: Fleet, nodes: Sequence[int] | np.ndarray, settings: PlannerSettings
) -> tuple[Fleet, np.ndarray] | None:
    """On a site-model fleet, the machines `nodes` as a dense fleet of their own (their pairs
    gathered once: exceptions and all) and their fleet indices; None on a dense fleet or for
    more than `_GROUP_DENSE_MAX` machines. The planner reads pairs thousands of times per
    call: from these matrices each read is one array read, not a gather and a search in the
    exceptions, and its machine windows and rings are built machine by machine, as on a dense
    fleet, rather than per site. The group keeps the fleet's sites (`site_labels`) and
    components."""
    if fleet.sites is None:
        return None
    idx = np.unique(np.asarray(nodes, np.int64).ravel())
    if not 0 < len(idx) <= _GROUP_DENSE_MAX:
        return None
    if idx[0] < 0 or idx[-1] >= fleet.n:
        raise ValueError(f"fleet index out of range 0..{fleet.n - 1}: {idx.tolist()}")
    latency, bandwidth, relayed = fleet.sites.block(idx)
    local = Fleet(
        node_ids=fleet.node_ids[idx],
        compute_flops=fleet.compute_flops[idx],
        memory_bytes=fleet.memory_bytes[idx],
        active=fleet.active[idx],
        latency_s=latency,
        bandwidth_Bps=bandwidth,
        relayed=relayed,
        component=fleet.component[idx],
    )
    _SITES[local] = {
        float(settings.site_latency_ms): site_labels(fleet, settings.site_latency_ms)[idx]
    }
    return local, idx


def _reachable_pools(
    ctx: _PlanSearch, nodes: Sequence[int] | np.ndarray
) -> list[np.ndarray] | Cost:
    """The usable machines of `nodes` in groups of mutually reachable machines that hold the
    job's layers, or an infeasible Cost saying why there is none."""
    job, fleet = ctx.job, ctx.fleet
    idx = np.unique(np.asarray(nodes, np.int64).ravel())
    if len(idx) and (idx[0] < 0 or idx[-1] >= fleet.n):
        raise ValueError(f"fleet index out of range 0..{fleet.n - 1}: {idx.tolist()}")
    need = job.min_memory_bytes
    active = idx[fleet.active[idx]]
    if not len(active):
        return Cost.infeasible(f"{job.name}: no active machine among the {len(idx)} given")
    have = float(fleet.memory_bytes[active].sum())
    if have < need / MEMORY_SLACK:
        return Cost.infeasible(
            f"{job.name} needs {need / GB:.0f} GB; the {len(active)} active machine(s) it may "
            f"use have {have / GB:.0f} GB"
        )
    usable = active[(ctx.cap(active) > 0) & (fleet.compute_flops[active] > 0)]
    held = int(ctx.cap(usable).sum())
    if held < job.layers:
        return Cost.infeasible(
            f"{job.name}: its machines hold only {held} of its {job.layers} layers "
            f"({need / job.layers / GB:.1f} GB per layer; memory is used in whole layers)"
        )
    pools = []
    for component in np.unique(fleet.component[usable]):
        pool = usable[fleet.component[usable] == component]
        if int(ctx.cap(pool).sum()) >= job.layers:
            pools.append(pool)
    if not pools:
        largest = max(
            float(fleet.memory_bytes[usable[fleet.component[usable] == c]].sum())
            for c in np.unique(fleet.component[usable])
        )
        return Cost.infeasible(
            f"{job.name} needs {need / GB:.0f} GB; its machines fall into groups that cannot "
            f"reach each other, the largest with {largest / GB:.0f} GB"
        )
    return pools


def _result(ctx: _PlanSearch, best: _BestLayout, memo: _Memo) -> tuple[Plan | None, Cost]:
    """The best layout as a plan, timed by `hulk.cost.iteration_time` (the reference);
    remembered by the layout's recipe, which makes the layout."""
    # pragma: no cover - a pool that holds the model always has a plan
    if best.layout is None or best.recipe is None:  # pragma: no cover
        return None, Cost.infeasible(f"{ctx.job.name}: no feasible layout found")
    known = memo.results.get(best.recipe)
    if known is None:
        plan = best.layout.plan()
        known = memo.results[best.recipe] = (plan, iteration_time(ctx.job, ctx.fleet, plan))
    return known
