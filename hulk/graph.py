"""The fleet as a graph: networkx for inspection and planning, PyTorch Geometric for the model.

Nodes are machines (ordered by node_id), edges are measured links. Node features describe what a
machine can do and where it is; edge features describe the link. A snapshot is identified by the
sha256 of the link table it was built from (the inventory's hash is recorded beside it), so later
steps can say which fleet they planned for.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from hulk import fileio
from hulk.errors import InputError
from hulk.hardware import link_bandwidth_gbps, link_ends, node_compute_tflops
from hulk.pyg import Data
from hulk.schemas import STATUS_ACTIVE
from hulk.settings import BandwidthTier, HardwareSettings

if TYPE_CHECKING:
    import networkx as nx  # imported where used: assignment reads the tensors only

NODE_FEATURES = (
    "compute_capability",
    "log2_memory_gb",
    "log2_compute_tflops",
    "gpu_count",
    "loc_x",  # unit vector of (lat, lon): nearby machines have nearby features
    "loc_y",
    "loc_z",
    "has_location",
    "active",
)
EDGE_FEATURES = ("log2_latency_ms", "log2_bandwidth_gbps", "loss_rate")

GRAPH_TENSORS = "fleet.pt"
GRAPH_NODE_LINK = "fleet.json"
SNAPSHOT = "snapshot.json"


@dataclass(frozen=True)
class FleetGraph:
    graph: nx.Graph
    data: Data
    snapshot: str  # sha256 of the link table it was built from


def build_fleet_graph(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    hardware: HardwareSettings,
    tiers: list[BandwidthTier],
    snapshot: str,
) -> FleetGraph:
    """Build both graph forms from an inventory and a link table (pure: reads no files)."""
    import networkx as nx

    inventory, links, ends = _sorted_frames(inventory, links)
    compute = node_compute_tflops(inventory, hardware)
    bandwidth, measured = link_bandwidth_gbps(links, tiers)

    graph = nx.Graph(snapshot=snapshot)
    for row, tflops in zip(inventory.itertuples(index=False), compute, strict=True):
        graph.add_node(
            int(row.node_id),
            city=str(row.city),
            country=str(row.country),
            lat=None if pd.isna(row.lat) else float(row.lat),
            lon=None if pd.isna(row.lon) else float(row.lon),
            compute_capability=float(row.compute_capability),
            gpu_count=int(row.gpu_count),
            memory_gb=float(row.memory_gb),
            compute_tflops=float(tflops),
            status=str(row.status),
        )
    for row, gbps, was_measured in zip(
        links.itertuples(index=False), bandwidth, measured, strict=True
    ):
        graph.add_edge(
            int(row.src),
            int(row.dst),
            latency_ms=float(row.latency_p50_ms),
            latency_p95_ms=float(row.latency_p95_ms),
            bandwidth_gbps=float(gbps),
            bandwidth_measured=bool(was_measured),
            loss_rate=float(row.loss_rate),
        )
    data = _tensors(inventory, links, ends, compute, bandwidth)
    return FleetGraph(graph=graph, data=data, snapshot=snapshot)


def fleet_data(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    hardware: HardwareSettings,
    tiers: list[BandwidthTier],
) -> Data:
    """The PyG form alone, as `build_fleet_graph` makes it (pure).

    What the model reads at assignment time: building the networkx graph as well costs ten
    times more (a Python call per link) and the model never looks at it.
    """
    inventory, links, ends = _sorted_frames(inventory, links)
    compute = node_compute_tflops(inventory, hardware)
    bandwidth, _ = link_bandwidth_gbps(links, tiers)
    return _tensors(inventory, links, ends, compute, bandwidth)


def _sorted_frames(
    inventory: pd.DataFrame, links: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, tuple[np.ndarray, np.ndarray]]:
    """Machines by node_id, links by (src, dst), and the positions of the links' machines
    (`link_ends`: every link must join two known machines).

    Tables usually arrive sorted (the link statistics are written that way): they are checked
    in O(rows) and only re-ordered when they are not.
    """
    node_ids = inventory["node_id"].to_numpy(np.int64)
    if len(node_ids) > 1 and not (node_ids[1:] >= node_ids[:-1]).all():
        inventory = inventory.iloc[np.argsort(node_ids, kind="stable")]
        node_ids = inventory["node_id"].to_numpy(np.int64)
    inventory = inventory.reset_index(drop=True)
    src = links["src"].to_numpy(np.int64)
    dst = links["dst"].to_numpy(np.int64)
    ordered = (src[1:] > src[:-1]) | ((src[1:] == src[:-1]) & (dst[1:] >= dst[:-1]))
    if not ordered.all():
        by_pair = np.lexsort((dst, src))
        links = links.iloc[by_pair]
    return inventory, links, link_ends(node_ids, links)


def _tensors(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    ends: tuple[np.ndarray, np.ndarray],
    compute: np.ndarray,
    bandwidth: np.ndarray,
) -> Data:
    """Node and edge features of sorted frames (see NODE_FEATURES and EDGE_FEATURES)."""
    lat = np.radians(inventory["lat"].to_numpy(float))
    lon = np.radians(inventory["lon"].to_numpy(float))
    has_location = ~(np.isnan(lat) | np.isnan(lon))
    loc = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    loc[~has_location] = 0.0
    x = np.column_stack(
        [
            inventory["compute_capability"].to_numpy(float),
            np.log2(inventory["memory_gb"].to_numpy(float)),
            np.log2(compute),
            inventory["gpu_count"].to_numpy(float),
            loc,
            has_location.astype(float),
            (inventory["status"] == STATUS_ACTIVE).to_numpy(float),
        ]
    )
    node_ids = inventory["node_id"].to_numpy(np.int64)
    src, dst = ends
    edge = np.column_stack(
        [
            np.log2(np.maximum(links["latency_p50_ms"].to_numpy(float), 1e-3)),
            np.log2(bandwidth),
            links["loss_rate"].to_numpy(float),
        ]
    )
    # Undirected: each link appears once per direction, as PyG's message passing expects.
    edge = edge.astype(np.float32)
    return Data(
        x=torch.from_numpy(x.astype(np.float32)),
        edge_index=torch.from_numpy(
            np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
        ),
        edge_attr=torch.from_numpy(np.concatenate([edge, edge])),
        node_id=torch.from_numpy(node_ids.copy()),
    )


def snapshot_id(links_file: Path) -> str:
    """The contract's `fleet.snapshot`: sha256 of the link table file."""
    return fileio.sha256_file(links_file)


def features_sha256(hardware: HardwareSettings, tiers: list[BandwidthTier]) -> str:
    """sha256 of the settings the graph's features are computed with (compute, bandwidth)."""
    record = {
        "hardware": hardware.model_dump(mode="json"),
        "bandwidth_tiers": [tier.model_dump(mode="json") for tier in tiers],
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def load_model_graph(
    graph_dir: Path,
    links_file: Path,
    inventory_file: Path,
    hardware: HardwareSettings,
    tiers: list[BandwidthTier],
) -> Data:
    """The graph step's tensors, which the model reads at assignment time, after checking they
    were built from this link table and inventory with these settings: the snapshot the
    placements file names is the one the model saw.

    Raises `InputError` (rule ``graph.stale``) when the graph is missing or was built from
    other inputs.
    """
    record_file = graph_dir / SNAPSHOT
    if not record_file.exists():
        raise InputError(graph_dir, "graph.stale", "no fleet graph: run `hulk graph` first")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    wanted = {
        "snapshot": snapshot_id(links_file),
        "inventory_sha256": fileio.sha256_file(inventory_file),
        "features_sha256": features_sha256(hardware, tiers),
    }
    stale = [key for key, value in wanted.items() if record.get(key) != value]
    if stale:
        raise InputError(
            graph_dir,
            "graph.stale",
            f"the fleet graph was built from another {', '.join(stale)} than the data folder's "
            "now: run `hulk graph` (the nightly flow does)",
        )
    tensors = graph_dir / GRAPH_TENSORS
    recorded = record.get("tensors_sha256")  # absent in a graph an earlier Hulk wrote
    if recorded is not None and tensors.is_file() and fileio.sha256_file(tensors) != recorded:
        raise InputError(
            tensors,
            "graph.stale",
            f"the tensors do not match {SNAPSHOT}'s sha256 (changed since `hulk graph` wrote "
            "them): run `hulk graph` (the nightly flow does)",
        )
    return load_fleet_data(graph_dir)


def save_fleet_graph(
    fleet: FleetGraph, out_dir: Path, inventory_sha256: str, features: str | None = None
) -> dict:
    """Write tensors (loadable with weights_only=True), node-link JSON and the snapshot record."""
    import networkx as nx

    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {
        "x": fleet.data.x,
        "edge_index": fleet.data.edge_index,
        "edge_attr": fleet.data.edge_attr,
        "node_id": fleet.data.node_id,
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
        "snapshot": fleet.snapshot,
    }
    with fileio.atomic_path(out_dir / GRAPH_TENSORS) as tmp, open(tmp, "wb") as handle:
        torch.save(tensors, handle)  # a handle: the archive's folder is not named after tmp
    node_link = nx.node_link_data(fleet.graph, edges="edges")
    fileio.write_text(out_dir / GRAPH_NODE_LINK, json.dumps(node_link, sort_keys=True) + "\n")
    record = {
        "snapshot": fleet.snapshot,
        "inventory_sha256": inventory_sha256,
        "features_sha256": features,
        "tensors_sha256": fileio.sha256_file(out_dir / GRAPH_TENSORS),
        "nodes": fleet.graph.number_of_nodes(),
        "links": fleet.graph.number_of_edges(),
        "active_nodes": int(fleet.data.x[:, NODE_FEATURES.index("active")].sum().item()),
        "connected_components": nx.number_connected_components(fleet.graph),
        "files": {"tensors": GRAPH_TENSORS, "node_link": GRAPH_NODE_LINK},
    }
    # The snapshot record is written last: its presence says the graph files are complete.
    fileio.write_text(out_dir / SNAPSHOT, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def load_fleet_data(graph_dir: Path) -> Data:
    """Load the PyG graph without unpickling arbitrary code; `InputError` (``graph.stale``)
    naming the file when it cannot be read (cut short, damaged)."""
    path = graph_dir / GRAPH_TENSORS
    try:
        saved = torch.load(path, weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as exc:
        raise InputError(
            path, "graph.stale", f"not readable ({exc}): run `hulk graph` (the nightly flow does)"
        ) from None
    return Data(
        x=saved["x"],
        edge_index=saved["edge_index"],
        edge_attr=saved["edge_attr"],
        node_id=saved["node_id"],
    )
