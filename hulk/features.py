"""The model's inputs: a fleet and its job mix encoded as tensors, for training and inference alike.

The corpus (`hulk.corpus`), the fleet's own samples (`hulk.fleet_labels`) and the GNN strategy
(`hulk.gnn`) encode with this one module, so a sample and an inference input cannot drift apart.

* ``x``, ``edge_index``, ``edge_attr`` — `hulk.graph.fleet_data` (or the graph step's saved
  tensors), machines in node_id order;
* ``jobs`` float32 [J, len(JOB_FEATURES)] — `job_features` of the jobs in *size order*
  (`order_jobs`: descending ``min_memory_bytes``, then descending ``params``, then name), so
  class k of the model is the k-th job in that order and class J is idle;
* ``active`` bool [n] — the machine may be used (status ``active``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from hulk import schemas
from hulk.graph import fleet_data
from hulk.jobs import GB, Job
from hulk.settings import Settings

JOB_FEATURES: tuple[str, ...] = (
    "log10_params",
    "log2_layers",
    "log2_hidden",
    "log2_seq_len",
    "log2_global_batch",
    "log2_micro_batch",
    "log10_min_memory_gb",
    "memory_share",  # min_memory_bytes / the fleet's active memory
    "log10_flops",  # work per iteration, FLOPs
    "priority",
)


def order_jobs(jobs: Sequence[Job]) -> list[int]:
    """Input positions of `jobs` in size order: the class order of a sample.

    Descending ``min_memory_bytes``, ties by descending ``params``, then by name (then by input
    position, for lists with repeated names).
    """
    return sorted(
        range(len(jobs)),
        key=lambda j: (-jobs[j].min_memory_bytes, -jobs[j].params, jobs[j].name, j),
    )


def job_features(jobs: Sequence[Job], active_memory_bytes: float) -> np.ndarray:
    """float32 [len(jobs), len(JOB_FEATURES)]: one row per job, in the order given.

    `active_memory_bytes` is the fleet's active (not drained) GPU memory, the denominator of
    ``memory_share``. Callers pass the jobs in `order_jobs` order to get a sample's ``jobs``.
    """
    if active_memory_bytes <= 0:
        raise ValueError(f"active_memory_bytes must be positive (got {active_memory_bytes})")
    rows = [
        (
            math.log10(job.params),
            math.log2(job.layers),
            math.log2(job.hidden),
            math.log2(job.seq_len),
            math.log2(job.global_batch),
            math.log2(job.micro_batch),
            math.log10(job.min_memory_bytes / GB),
            job.min_memory_bytes / active_memory_bytes,
            math.log10(job.flops_per_iteration),
            float(job.priority),
        )
        for job in jobs
    ]
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(JOB_FEATURES))


def encode_inputs(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    jobs: Sequence[Job],
    settings: Settings,
    graph: Any = None,
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """The model's inputs for a fleet and its jobs, and the size order of the jobs.

    Returns (``{"x", "edge_index", "edge_attr", "jobs", "active"}``, order): the tensors of a
    sample (machines in node_id order) without the labels, and `order_jobs(jobs)`, so that
    class k of the model is ``jobs[order[k]]`` and class ``len(jobs)`` is idle. `graph`: the
    fleet's tensors as the graph step saved them (else they are built from the frames).
    """
    inventory = inventory.sort_values("node_id", kind="stable").reset_index(drop=True)
    if graph is None:
        data = fleet_data(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    else:  # the graph step's tensors of this very fleet (`hulk.graph.load_model_graph`)
        data = graph
        if not np.array_equal(data.node_id.numpy(), inventory["node_id"].to_numpy(np.int64)):
            raise ValueError("the fleet graph's machines differ from the inventory's")
    active = (inventory["status"] == schemas.STATUS_ACTIVE).fillna(False).to_numpy(bool)
    active_memory = float(inventory["memory_gb"].to_numpy(float)[active].sum()) * GB
    order = order_jobs(jobs)
    features = job_features([jobs[j] for j in order], active_memory)
    tensors = {
        "x": data.x,
        "edge_index": data.edge_index,
        "edge_attr": data.edge_attr,
        "jobs": torch.from_numpy(features),
        "active": torch.from_numpy(active.copy()),
    }
    return tensors, order
