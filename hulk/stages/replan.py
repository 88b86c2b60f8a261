"""`hulk replan`: a placements file re-planned after machines fail or join (`hulk.assign.replan`),
written as new ``<run-id>.json`` and ``latest.json`` with a record of what moved."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hulk import fileio, schemas
from hulk.data_folder import load_fleet
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.settings import Settings
from hulk.stages import JobRow, StepResult, Summary
from hulk.stages.assign import placement_rows

if TYPE_CHECKING:
    from hulk.assign import Move


@dataclass(frozen=True)
class ReplanSummary(Summary):
    strategy: str
    run_id: str
    replanned_from: str | None  # the run id of the placements re-planned
    moves: list[Move]  # per job that changed (`to_dict`: the metrics' and the file's form)
    jobs: list[JobRow]  # `placement_rows` on the changed fleet
    makespan_s: float | None
    # Running jobs of the job store that kept latest.json the scheduler's (0: it was replaced).
    kept_latest: int = 0

    def to_dict(self) -> dict[str, Any]:
        record = {
            "strategy": self.strategy,
            "run_id": self.run_id,
            "from": self.replanned_from,
            "moves": [move.to_dict() for move in self.moves],
            "jobs": [row.to_dict() for row in self.jobs],
            "makespan_s": self.makespan_s,
        }
        if self.kept_latest:
            record["kept_latest"] = self.kept_latest
        return record


def run(
    data_dir: Path,
    settings: Settings,
    placements_file: Path | None = None,
    failed: list[int] | None = None,
    add_nodes: Path | None = None,
    add_edges: Path | None = None,
    out_dir: Path | None = None,
    seed: int | None = None,
    now: dt.datetime | None = None,
) -> StepResult[ReplanSummary]:
    """Re-plan a placements file after machines fail (`failed` node ids) or are added.

    The fleet before is the data folder's; the fleet after drops the failed machines and their
    links and adds `add_nodes` / `add_edges` (paper format, like `hulk import-hulk`). Machines
    lost in earlier re-plans of the same chain (``replan.failed`` of the file) stay lost: a
    fresh `assign` brings repaired machines back. The new placements go to `out_dir` (default:
    the placements file's folder) as ``<run-id>.json`` and ``latest.json`` — but while the
    data folder's job store has running jobs, ``latest.json`` stays the scheduler's (what they
    run on; assign runs re-plan failed machines themselves) and only the run's file is written.
    Everything is checked before anything is written.
    """
    from hulk import placements as pl
    from hulk.assign import (
        changed_fleet_frames,
        check_failed,
        earlier_failures,
        makespan,
        schedule_of,
    )
    from hulk.assign import replan as replan_jobs
    from hulk.cost import Fleet
    from hulk.folder_lock import folder_lock
    from hulk.placements_read import read_placements
    from hulk.stages.scheduling import running_jobs

    if not failed and add_nodes is None and add_edges is None:
        raise InputError(
            None,
            "replan.nothing",
            "nothing to re-plan: give the failed machines (--fail N,…) or the added ones "
            "(--add-nodes FILE --add-edges FILE)",
        )
    started = now or pl.utc_now()
    placements_file = placements_file or settings.assign.placements_dir / pl.LATEST
    out_dir = out_dir or placements_file.parent
    fleet_before, inventory, links = load_fleet(data_dir, settings)
    before = read_placements(placements_file, fleet_before)
    failed_now = check_failed(fleet_before, failed or [])
    lost_before = earlier_failures(before.doc, fleet_before)
    failed = sorted(set(failed_now) | set(lost_before))
    added_nodes, added_links, findings = read_growth(add_nodes, add_edges, inventory, settings)
    again = sorted(set(failed_now) & set(lost_before))
    if again:
        findings.append(
            Finding(
                "warning",
                "replan.already_failed",
                str(placements_file),
                f"--fail: machine(s) {again} were already lost earlier in this chain of re-plans",
            )
        )
    made_on = before.doc.get("fleet", {}).get("inventory")
    holds = fileio.sha256_file(data_dir / schemas.INVENTORY_FILE)
    if isinstance(made_on, str) and made_on != holds:
        findings.append(
            Finding(
                "warning",
                "replan.inventory",
                str(placements_file),
                f"the file was made on inventory {made_on[:12]}…, the data folder holds "
                f"{holds[:12]}…: its machines are read by node id on the data folder's fleet, "
                "which may be another fleet",
            )
        )
    inventory_after, links_after = changed_fleet_frames(
        inventory, links, failed, added_nodes, added_links, source=add_nodes or add_edges
    )
    fleet_after = Fleet.from_frames(
        inventory_after,
        links_after,
        settings.hardware,
        settings.graph.bandwidth_tiers,
        settings.cost,
    )
    strategy = before.strategy or "teacher"
    seed = seed if seed is not None else before.doc.get("seed", settings.seed)
    if not isinstance(seed, int) or isinstance(seed, bool):
        seed = settings.seed
    new, moved = replan_jobs(
        before.placements, fleet_before, fleet_after, failed, strategy, settings, seed
    )
    snapshot = fileio.sha256_file(data_dir / schemas.LINKS_FILE)
    if add_edges is not None:
        snapshot = hashlib.sha256(
            f"{snapshot}+{fileio.sha256_file(add_edges)}".encode()
        ).hexdigest()
    # The inventory read is the data folder's (added machines are the file's own records).
    info = pl.fleet_info(
        fleet_after, inventory_file=data_dir / schemas.INVENTORY_FILE, snapshot=snapshot
    )
    moves = [m.to_dict() for m in moved]
    record = {
        "from": before.doc.get("run_id"),
        "failed": failed,
        "failed_now": failed_now,
        "added_nodes": [] if added_nodes is None else sorted(added_nodes["node_id"].tolist()),
        "moves": moves,
    }
    doc = pl.build_document(
        new,
        fleet_after,
        info,
        strategy=strategy,
        schedule=schedule_of(strategy),
        makespan_s=makespan(new, strategy),
        seed=seed,
        started=started,
        generated_at=now,
        model=before.doc.get("model"),
        extra={"replan": record},
    )
    # The published placements are the assign lock's (`hulk.folder_lock`): whether jobs run,
    # and latest.json with them, are read and written while no assign run is writing them.
    with folder_lock(data_dir, "assign", settings.scheduler.lock_timeout_s, holder="replan run"):
        running = running_jobs(data_dir, out_dir)
        path = pl.write_placements(doc, out_dir, publish=not running)
    return StepResult(
        outputs={"placements": path} | ({} if running else {"latest": out_dir / pl.LATEST}),
        findings=findings,
        summary=ReplanSummary(
            strategy=strategy,
            run_id=doc["run_id"],
            replanned_from=before.doc.get("run_id"),
            moves=list(moved),
            jobs=placement_rows(new, fleet_after),
            makespan_s=doc["makespan_s"],
            kept_latest=running,
        ),
    )


def read_growth(
    nodes: Path | None, edges: Path | None, inventory: pd.DataFrame, settings: Settings
) -> tuple[pd.DataFrame | None, pd.DataFrame | None, list[Finding]]:
    """Added machines and links in the paper's format (as `hulk import-hulk` reads them)."""
    from hulk.hardware import require_peak_figures
    from hulk.importer import read_edges, read_nodes

    added: pd.DataFrame | None = None
    findings: list[Finding] = []
    if nodes is not None:
        added, findings = read_nodes(nodes, settings.graph.default_gpu_count)
        require_peak_figures(added, nodes, settings.hardware)
        clash = sorted(set(added["node_id"]) & set(inventory["node_id"]))
        if clash:
            raise InputError(
                nodes,
                "replan.duplicate_node",
                f"--add-nodes: node id(s) {clash} are already machines of the fleet",
            )
    if edges is None:
        return added, None, findings
    everyone = pd.concat([inventory, added]) if added is not None else inventory
    links, _, edge_findings = read_edges(edges, everyone, settings.validation)
    return added, links, findings + edge_findings
