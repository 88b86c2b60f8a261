"""The paper's three baselines (docs/design.md#baselines), timed with the cost model of `hulk.cost`.

Each uses the fleet's *active* machines only and returns ``(Cost, Plan | None)``; the plan is
None when the system cannot run the job (and always for C, which is no pipeline plan). Machines
that cannot reach each other, even through relays, make a system infeasible with a reason.

**System A — data parallel.** Every active machine whose memory holds the whole model
(``job.min_memory_bytes``, default 16 × params) gets a full replica: D replicas of one stage
each, so per §4 ``m = ceil(global_batch / (micro_batch × D))`` micro-batches per replica,
``T_pp = m × 6 × params × micro_batch × seq_len / F`` (compute = the slowest replica) and the
gradient, ``2 × params`` bytes, ring all-reduced over all D machines in `ring_order`:
``2(D − 1) α_max + 2(D − 1)/D × 2 params / β_min``. Infeasible when no machine can hold a
replica.

**System B — GPipe over all machines.** The active machines in node_id order, the first
``layers`` of them when there are more machines than layers; layers split evenly
(`hulk.cost.even_split`: the first ``layers mod S`` stages get one more); one pipeline
(D = 1, ``m = ceil(global_batch / micro_batch)``), timed with §4's T_pp. Infeasible when a
stage does not fit its machine.

**System C — Megatron tensor parallel over all n active machines.** Every layer split evenly
across all machines, so the slowest machine sets the pace::

    compute = 6 × params × global_batch × seq_len / (n × min F)
    comm    = layers × m × 4 × (2(n − 1) α_max + 2(n − 1)/n × A / β_min)
    iteration = compute + comm

with ``m = ceil(global_batch / micro_batch)`` micro-batches, ``A = micro_batch × seq_len ×
hidden × 2`` the activation bytes, and α_max / β_min over the consecutive pairs of the
`ring_order` ring through all n machines: four ring all-reduces of the activation per layer
and micro-batch (two in the forward pass, two in the backward pass), none overlapped with
compute. Infeasible when ``16 × params / n`` (``min_memory_bytes / n``) exceeds the smallest
machine's memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hulk.cost import (
    GRADIENT_BYTES_PER_PARAM,
    Cost,
    Fleet,
    Plan,
    allreduce_floor,
    allreduce_group_bound,
    allreduce_lower_bound,
    allreduce_time,
    even_split,
    micro_batches,
    pipeline_time,
    plan_time,
)
from hulk.jobs import GB, Job

TP_ALLREDUCES_PER_LAYER = 4  # Megatron: two in the forward pass, two in the backward pass

Baseline = Callable[[Job, Fleet], tuple[Cost, Plan | None]]
RingBound = Callable[[Fleet, np.ndarray, float], float]  # a lower bound on allreduce_time


def _unreachable(fleet: Fleet, nodes: np.ndarray, system: str) -> Cost | None:
    components = fleet.component[nodes]
    if len(nodes) and (components != components[0]).any():
        parts = len(np.unique(components))
        other = int(nodes[np.argmax(components != components[0])])
        return Cost.infeasible(
            f"System {system}: its {len(nodes)} machines fall into {parts} groups that cannot "
            f"reach each other (e.g. {fleet.node_id(int(nodes[0]))} and {fleet.node_id(other)})"
        )
    return None


def _no_machines(system: str) -> Cost:
    return Cost.infeasible(f"System {system}: the fleet has no active machine")


def _a_nodes(job: Job, fleet: Fleet) -> np.ndarray | Cost:
    """System A's machines (every active one holding the whole model), or why there are none."""
    active = fleet.active_indices()
    if not len(active):
        return _no_machines("A")
    nodes = active[fleet.memory_bytes[active] >= job.min_memory_bytes]
    if not len(nodes):
        largest = fleet.memory_bytes[active].max() / GB
        return Cost.infeasible(
            f"System A: no active machine holds the whole model ({job.min_memory_bytes / GB:.0f}"
            f" GB needed, the largest has {largest:.0f} GB)"
        )
    return _unreachable(fleet, nodes, "A") or nodes


def system_a(job: Job, fleet: Fleet) -> tuple[Cost, Plan | None]:
    """Data parallel: a full replica on every active machine that can hold the model."""
    nodes = _a_nodes(job, fleet)
    if isinstance(nodes, Cost):
        return nodes, None
    layers = np.array([job.layers])
    cost = plan_time(job, fleet, nodes[:, None], layers)
    return cost, Plan.from_arrays(nodes[:, None], layers) if cost.feasible else None


def _a_lower_bound(job: Job, fleet: Fleet, ring: RingBound) -> float:
    """System A's time with its gradient ring bounded, not ordered (inf when infeasible)."""
    nodes = _a_nodes(job, fleet)
    if isinstance(nodes, Cost):
        return math.inf
    slowest = int(nodes[np.argmin(fleet.compute_flops[nodes])])
    pipeline, _ = pipeline_time(job, fleet, [slowest], [job.layers], replicas=len(nodes))
    return pipeline + ring(fleet, nodes, GRADIENT_BYTES_PER_PARAM * job.params)


def system_b(job: Job, fleet: Fleet) -> tuple[Cost, Plan | None]:
    """GPipe: one pipeline over the active machines in node_id order, layers spread evenly."""
    nodes = fleet.active_indices()[: job.layers]
    if not len(nodes):
        return _no_machines("B"), None
    blocked = _unreachable(fleet, nodes, "B")
    if blocked:
        return blocked, None
    layers = even_split(job.layers, len(nodes))
    cost = plan_time(job, fleet, nodes[None, :], layers)
    if not cost.feasible:
        return Cost.infeasible(f"System B: {cost.reason}"), None
    return cost, Plan.from_arrays(nodes[None, :], layers)


def _c_nodes(job: Job, fleet: Fleet) -> np.ndarray | Cost:
    """System C's machines (every active one), or why it cannot run the job."""
    nodes = fleet.active_indices()
    n = len(nodes)
    if not n:
        return _no_machines("C")
    blocked = _unreachable(fleet, nodes, "C")
    if blocked:
        return blocked
    smallest = float(fleet.memory_bytes[nodes].min())
    if job.min_memory_bytes / n > smallest:
        return Cost.infeasible(
            f"System C: each of the {n} machines needs {job.min_memory_bytes / n / GB:.1f} GB, "
            f"the smallest has {smallest / GB:.0f} GB"
        )
    return nodes


def _c_time(job: Job, fleet: Fleet, nodes: np.ndarray, per_allreduce: float) -> Cost:
    n = len(nodes)
    compute = job.flops_per_iteration / (n * float(fleet.compute_flops[nodes].min()))
    comm = job.layers * micro_batches(job, 1) * TP_ALLREDUCES_PER_LAYER * per_allreduce
    return Cost(compute + comm, compute, comm)


def system_c(job: Job, fleet: Fleet) -> tuple[Cost, Plan | None]:
    """Megatron tensor parallel over every active machine (formula in the module docstring)."""
    nodes = _c_nodes(job, fleet)
    if isinstance(nodes, Cost):
        return nodes, None
    return _c_time(job, fleet, nodes, allreduce_time(fleet, nodes, job.activation_bytes)), None


def _c_lower_bound(job: Job, fleet: Fleet, ring: RingBound) -> float:
    """System C's time with its activation ring bounded, not ordered (inf when infeasible)."""
    nodes = _c_nodes(job, fleet)
    if isinstance(nodes, Cost):
        return math.inf
    return _c_time(job, fleet, nodes, ring(fleet, nodes, job.activation_bytes)).iteration_s


SYSTEMS: dict[str, Baseline] = {"A": system_a, "B": system_b, "C": system_c}


def baselines(job: Job, fleet: Fleet) -> dict[str, Cost]:
    """Costs of Systems A, B and C for `job` on `fleet` (infeasible ones carry a reason)."""
    return {name: system(job, fleet)[0] for name, system in SYSTEMS.items()}


def best_baseline_floor(job: Job, fleet: Fleet) -> float:
    """A lower bound on `best_baseline_seconds` in O(machines): System B timed, A and C with
    their rings at the fleet's best link (`hulk.cost.allreduce_floor`); 0 when none can run."""
    cost_b = system_b(job, fleet)[0]
    floor = cost_b.iteration_s if cost_b.feasible else math.inf
    floor = min(floor, _a_lower_bound(job, fleet, allreduce_floor))
    floor = min(floor, _c_lower_bound(job, fleet, allreduce_floor))
    return floor if math.isfinite(floor) else 0.0


def best_baseline_seconds(job: Job, fleet: Fleet, sites: np.ndarray | None = None) -> float | None:
    """The least iteration time of Systems A, B and C for `job` (None when none can run it).

    The same value as the least feasible one of `baselines`, found cheaply: System B is timed
    (no ring), and A or C only when every lower bound on it beats the best so far, tried
    cheapest first — its ring at the fleet's best link everywhere (`hulk.cost.allreduce_floor`,
    O(1)), bounded by a spanning tree over the `sites` it spans when they are given
    (`hulk.cost.allreduce_group_bound`), then over its machines
    (`hulk.cost.allreduce_lower_bound`, O(d²)). Ordering a ring through hundreds of machines is
    what A and C cost; on a fleet spread over cities their bounds lose to B.
    """
    rings: list[RingBound] = [allreduce_floor]
    if sites is not None:
        rings.append(
            lambda fleet, nodes, nbytes: allreduce_group_bound(fleet, nodes, nbytes, sites)
        )
    rings.append(allreduce_lower_bound)
    cost_b = system_b(job, fleet)[0]
    best = cost_b.iteration_s if cost_b.feasible else math.inf
    for bound, system in ((_a_lower_bound, system_a), (_c_lower_bound, system_c)):
        if all(bound(job, fleet, ring) < best for ring in rings):
            cost = system(job, fleet)[0]
            if cost.feasible:
                best = min(best, cost.iteration_s)
    return best if math.isfinite(best) else None
