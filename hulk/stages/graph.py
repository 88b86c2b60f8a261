"""The graph step: the fleet graph snapshot of the data folder (`hulk.graph`): the tensors the
model reads at assignment, the networkx form and the snapshot record; then the caches the next
assign run reads, for this fleet (`hulk.stages.assign_caches`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.settings import Settings
from hulk.stages import StepResult, Summary


@dataclass(frozen=True)
class GraphSummary(Summary):
    """The snapshot record (DATA/graph/snapshot.json), field for field."""

    snapshot: str
    inventory_sha256: str
    features_sha256: str
    tensors_sha256: str
    nodes: int
    links: int
    active_nodes: int
    connected_components: int
    files: dict[str, str]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> GraphSummary:
        return cls(**record)


def run(data_dir: Path, settings: Settings) -> StepResult[GraphSummary]:
    """Write DATA/graph/ from the inventory and the link table; its record as the summary."""
    from hulk.data_folder import load_frames
    from hulk.graph import build_fleet_graph, features_sha256, save_fleet_graph, snapshot_id
    from hulk.stages.assign_caches import warm_assign_caches

    inventory_file = data_dir / schemas.INVENTORY_FILE
    links_file = data_dir / schemas.LINKS_FILE
    inventory, links = load_frames(data_dir, settings)
    try:
        fleet = build_fleet_graph(
            inventory,
            links,
            settings.hardware,
            settings.graph.bandwidth_tiers,
            snapshot=snapshot_id(links_file),
        )
    except InputError as exc:  # the file it concerns, when the library could not name it
        if exc.path is not None:
            raise
        about = links_file if exc.rule.startswith("links.") else inventory_file
        raise InputError(about, exc.rule, exc.detail, exc.examples) from None
    out_dir = data_dir / schemas.GRAPH_DIR
    features = features_sha256(settings.hardware, settings.graph.bandwidth_tiers)
    record = save_fleet_graph(
        fleet, out_dir, inventory_sha256=fileio.sha256_file(inventory_file), features=features
    )
    # The first assign run on this fleet then finds the caches it would otherwise build.
    warmed, findings = warm_assign_caches(data_dir, settings)
    outputs = {"graph": out_dir}
    if warmed is not None:
        kept = {"fleet_cache": warmed.fleet_cache, "baseline_cache": warmed.baseline_cache}
        outputs.update({name: path for name, path in kept.items() if path is not None})
    return StepResult(GraphSummary.from_record(record), outputs=outputs, findings=findings)
