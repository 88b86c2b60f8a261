"""Fleet graph: node/edge features, bandwidth fallback by latency tier, snapshot files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from hulk.errors import InputError
from hulk.graph import (
    EDGE_FEATURES,
    NODE_FEATURES,
    build_fleet_graph,
    fleet_data,
    load_fleet_data,
    save_fleet_graph,
)
from hulk.hardware import link_bandwidth_gbps, node_compute_tflops
from hulk.importer import import_hulk
from hulk.settings import Settings


def _inventory() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "node_id": [10, 11, 12],
            "city": ["Beijing", "Tokyo", "Atlantis"],
            "country": ["China", "Japan", pd.NA],
            "lat": [39.9, 35.7, np.nan],
            "lon": [116.4, 139.7, np.nan],
            "compute_capability": [8.0, 8.6, 6.1],
            "gpu_count": [8, 4, 8],
            "memory_gb": [640.0, 96.0, 128.0],
            "status": ["active", "active", "drained"],
        }
    ).astype({"city": "string", "country": "string", "status": "string"})


def _links() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "src": [10, 10],
            "dst": [11, 12],
            "samples": [100, 100],
            "loss_rate": [0.01, 0.0],
            "latency_p50_ms": [40.0, 1.5],
            "latency_p95_ms": [55.0, 2.0],
            "latency_mean_ms": [42.0, 1.6],
            "alpha_ms": [39.0, 1.4],
            "beta_gbps": [np.nan, 8.0],
            "window_start": pd.NaT,
            "window_end": pd.NaT,
        }
    )


def test_compute_follows_the_cost_model(settings: Settings) -> None:
    tflops = node_compute_tflops(_inventory(), settings.hardware)
    # gpu_count × peak TFLOPS(capability) × MFU (docs/design.md#cost-model)
    assert tflops == pytest.approx([8 * 312 * 0.4, 4 * 71 * 0.4, 8 * 11.3 * 0.4])


def test_unknown_capability_names_the_machine(settings: Settings) -> None:
    inventory = _inventory().assign(compute_capability=[8.0, 5.2, 6.1])
    with pytest.raises(InputError, match=r"hardware\.peak_tflops") as caught:
        node_compute_tflops(inventory, settings.hardware)
    assert "'node_id': 11" in str(caught.value)


def test_bandwidth_measured_or_by_latency_tier(settings: Settings) -> None:
    links = _links().assign(latency_p50_ms=[40.0, 1.5], beta_gbps=[np.nan, 8.0])
    gbps, measured = link_bandwidth_gbps(links, settings.graph.bandwidth_tiers)
    assert gbps.tolist() == [1.0, 8.0]  # 40 ms falls in the ≤100 ms tier; 8 was measured
    assert measured.tolist() == [False, True]
    far = _links().assign(latency_p50_ms=[150.0, 15.0], beta_gbps=np.nan)
    assert link_bandwidth_gbps(far, settings.graph.bandwidth_tiers)[0].tolist() == [0.3, 2.0]


def test_graph_forms_agree(settings: Settings) -> None:
    fleet = build_fleet_graph(
        _inventory(), _links(), settings.hardware, settings.graph.bandwidth_tiers, "abc"
    )
    data = fleet.data
    assert data.x.shape == (3, len(NODE_FEATURES))
    assert data.edge_attr.shape == (4, len(EDGE_FEATURES))  # two links, both directions
    assert data.node_id.tolist() == [10, 11, 12]
    assert sorted(fleet.graph.edges) == [(10, 11), (10, 12)]
    assert fleet.graph.edges[10, 11]["bandwidth_measured"] is False
    has_location = data.x[:, NODE_FEATURES.index("has_location")].tolist()
    assert has_location == [1.0, 1.0, 0.0]
    assert data.x[:, NODE_FEATURES.index("active")].tolist() == [1.0, 1.0, 0.0]
    # Location as a unit vector: its length is 1 where known.
    loc = data.x[:, 4:7].norm(dim=1)
    assert loc[:2].tolist() == pytest.approx([1.0, 1.0], abs=1e-6)


def test_tensors_alone_match_the_graph_whatever_the_row_order(settings: Settings) -> None:
    tiers = settings.graph.bandwidth_tiers
    fleet = build_fleet_graph(_inventory(), _links(), settings.hardware, tiers, "abc")
    # Rows in another order give the same tensors: machines by node_id, links by (src, dst).
    shuffled = fleet_data(_inventory().iloc[::-1], _links().iloc[::-1], settings.hardware, tiers)
    for key in ("x", "edge_index", "edge_attr", "node_id"):
        assert torch.equal(shuffled[key], fleet.data[key]), key
    assert shuffled.edge_index[:, :2].tolist() == [[0, 0], [1, 2]]  # positions, not node ids


def test_far_apart_node_ids_give_the_same_graph(settings: Settings) -> None:
    # Ids spread far apart take the binary-search path instead of a lookup table.
    tiers = settings.graph.bandwidth_tiers
    dense = fleet_data(_inventory(), _links(), settings.hardware, tiers)
    far = 10**12
    inventory = _inventory().assign(node_id=lambda frame: frame["node_id"] * far)
    links = _links().assign(src=lambda frame: frame["src"] * far, dst=lambda f: f["dst"] * far)
    sparse = fleet_data(inventory, links, settings.hardware, tiers)
    assert torch.equal(sparse.edge_index, dense.edge_index)
    assert torch.equal(sparse.x, dense.x)
    assert sparse.node_id.tolist() == [10 * far, 11 * far, 12 * far]
    with pytest.raises(InputError, match="1 link"):
        fleet_data(inventory, links.assign(dst=[11 * far, 13 * far]), settings.hardware, tiers)


def test_link_to_unknown_machine_is_an_error(settings: Settings) -> None:
    links = _links().assign(dst=[11, 99])
    tiers = settings.graph.bandwidth_tiers
    with pytest.raises(InputError, match="1 link"):  # below the smallest id too
        fleet_data(_inventory(), _links().assign(src=[10, 3]), settings.hardware, tiers)
    with pytest.raises(InputError, match="not in the inventory"):
        build_fleet_graph(_inventory(), links, settings.hardware, tiers, "x")
    with pytest.raises(InputError, match="not in the inventory"):
        fleet_data(_inventory(), links, settings.hardware, tiers)


def test_saved_snapshot_loads_without_pickled_code(tmp_path: Path, settings: Settings) -> None:
    fleet = build_fleet_graph(
        _inventory(), _links(), settings.hardware, settings.graph.bandwidth_tiers, "abc"
    )
    record = save_fleet_graph(fleet, tmp_path, inventory_sha256="def")
    assert record["snapshot"] == "abc" and record["links"] == 2
    assert json.loads((tmp_path / "snapshot.json").read_text())["inventory_sha256"] == "def"
    loaded = load_fleet_data(tmp_path)  # torch.load(weights_only=True) inside
    assert torch.equal(loaded.x, fleet.data.x)
    assert torch.equal(loaded.edge_index, fleet.data.edge_index)
    first = {name: (tmp_path / name).read_bytes() for name in ("fleet.json", "fleet.pt")}
    save_fleet_graph(fleet, tmp_path, inventory_sha256="def")
    # Byte for byte, the tensors too (torch names a saved archive's folder after its file).
    assert {name: (tmp_path / name).read_bytes() for name in first} == first
    assert record["tensors_sha256"] == hashlib.sha256(first["fleet.pt"]).hexdigest()
    # Cut short, the tensors are named, with the way out, not a torch traceback.
    (tmp_path / "fleet.pt").write_bytes(first["fleet.pt"][:200])
    with pytest.raises(InputError, match=r"fleet\.pt: \[graph\.stale\] not readable.*hulk graph"):
        load_fleet_data(tmp_path)


def test_hulk47_graph(hulk47: Path, settings: Settings) -> None:
    imported = import_hulk(hulk47 / "node_feature.csv", hulk47 / "edge.txt")
    fleet = build_fleet_graph(
        imported.inventory,
        imported.links,
        settings.hardware,
        settings.graph.bandwidth_tiers,
        "snap",
    )
    assert fleet.graph.number_of_nodes() == 47
    assert fleet.graph.number_of_edges() == len(imported.links)
    assert fleet.data.edge_index.max().item() == 46
    assert torch.isfinite(fleet.data.x).all() and torch.isfinite(fleet.data.edge_attr).all()


def test_tensors_changed_since_the_graph_step_are_refused(tiny: Path, settings: Settings) -> None:
    from hulk.data_folder import model_graph
    from hulk.stages import graph as stage

    stage.run(tiny, settings.with_data_dir(tiny))
    assert torch.equal(model_graph(tiny, settings).x, load_fleet_data(tiny / "graph").x)
    tensors = tiny / "graph" / "fleet.pt"
    saved = torch.load(tensors, weights_only=True)
    saved["x"] = saved["x"] * 2  # still a readable graph, not the one the step built
    torch.save(saved, tensors)
    with pytest.raises(InputError, match=r"fleet\.pt: \[graph\.stale\] the tensors do not match"):
        model_graph(tiny, settings)
