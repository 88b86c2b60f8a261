"""The pipeline's steps as functions over a data folder.

Each step reads its inputs from files, calls the pure library functions and writes its outputs
atomically. The CLI, the Prefect flows and the DVC stages all call these, so there is one code
path. A step that finds an error raises before writing anything downstream.

Layout of a data folder (DESIGN.md §3):
    machines.csv        inventory
    logs/day=…/         raw latency logs, one partition per UTC day
    quarantine.parquet  raw rows kept out of the link table, with the rule that caught them
    validation/         report.json, validated.json, Great Expectations Data Docs (docs/)
    links.parquet       link table over the window
    graph/              fleet graph snapshot
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hulk import io, schemas
from hulk.errors import InputError
from hulk.findings import Finding, raise_on_errors
from hulk.settings import Settings

Progress = Callable[[int, int], None] | None

VALIDATED = "validated.json"


@dataclass
class StepResult:
    """What a step wrote and what it noticed, for the CLI and flows to report."""

    outputs: dict[str, Path] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def logs_fingerprint(logs_dir: Path, inventory_file: Path) -> str:
    """sha256 over the log files' contents and the inventory: what a validation result is for."""
    digest = hashlib.sha256()
    files = sorted(p for p in logs_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
    for path in [inventory_file, *files]:
        digest.update(
            str(path.relative_to(path.parent if path == inventory_file else logs_dir)).encode()
        )
        digest.update(io.sha256_file(path).encode())
    return digest.hexdigest()


# --- generate ---------------------------------------------------------------------------------


def generate(
    out_dir: Path,
    settings: Settings,
    preset: str | None = None,
    days: int | None = None,
    seed: int | None = None,
    progress: Progress = None,
) -> StepResult:
    from hulk.generate import build_fleet, write_dataset

    gen = settings.generate
    preset = preset or gen.preset
    days = days or gen.days
    seed = settings.seed if seed is None else seed
    inventory = build_fleet(preset, seed, gen)
    parts = write_dataset(out_dir, inventory, seed, gen, days, gen.end_date, progress=progress)
    return StepResult(
        outputs={"inventory": out_dir / schemas.INVENTORY_FILE, "logs": out_dir / schemas.LOGS_DIR},
        summary={"preset": preset, "machines": len(inventory), "days": len(parts), "seed": seed},
    )


# --- import ---------------------------------------------------------------------------------


def import_hulk(
    nodes: Path, edges: Path, out_dir: Path, settings: Settings, now: dt.datetime | None = None
) -> StepResult:
    """Inventory and link table from the paper's published format, validated before writing."""
    from hulk.importer import import_hulk as read_hulk_format
    from hulk.validation import run_validation, validate_inventory, validate_links

    result = read_hulk_format(
        nodes,
        edges,
        default_gpu_count=settings.graph.default_gpu_count,
        validation=settings.validation,
    )
    checked = validate_inventory(result.inventory, str(nodes), settings.validation)
    checked += validate_links(result.links, result.inventory, str(edges), settings.validation)
    raise_on_errors(checked)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.write_csv(out_dir / schemas.INVENTORY_FILE, result.inventory)
    io.write_parquet(out_dir / schemas.LINKS_FILE, result.links)
    io.write_parquet(out_dir / schemas.QUARANTINE_FILE, result.quarantine)
    # The written files go through the same validation as everything else (report, Data Docs);
    # what the importer itself set aside is added to that report.
    report = run_validation(
        out_dir, settings.validation, now or dt.datetime.now(dt.UTC), settings.ingest.window_days
    )
    _add_findings(report.report_path, result.findings)
    return StepResult(
        outputs={
            "inventory": out_dir / schemas.INVENTORY_FILE,
            "links": out_dir / schemas.LINKS_FILE,
            "quarantine": out_dir / schemas.QUARANTINE_FILE,
            "report": report.report_path,
            "docs": report.docs_index,
        },
        findings=result.findings + report.findings,
        summary={
            "machines": len(result.inventory),
            "links": len(result.links),
            "quarantined_rows": len(result.quarantine),
        },
    )


def _add_findings(report_path: Path, findings: list[Finding]) -> None:
    report = json.loads(report_path.read_text())
    report["findings"] = [f.to_dict() for f in findings] + report.get("findings", [])
    counts = report.setdefault("counts", {})
    counts["warnings"] = sum(f["severity"] == "warning" for f in report["findings"])
    counts["errors"] = sum(f["severity"] == "error" for f in report["findings"])
    io.write_text(report_path, json.dumps(report, indent=2, default=str) + "\n")


# --- validate -----------------------------------------------------------------------------------


def validate(
    data_dir: Path, settings: Settings, now: dt.datetime | None = None, progress: Progress = None
) -> StepResult:
    """Validate what data_dir holds; raise on errors; record which logs were validated."""
    from hulk.ingest import window_end_for
    from hulk.validation import run_validation

    now = now or dt.datetime.now(dt.UTC)
    logs_dir = data_dir / schemas.LOGS_DIR
    report = run_validation(
        data_dir,
        settings.validation,
        now,
        settings.ingest.window_days,
        progress=progress,
        probe_bytes=settings.ingest.latency_probe_bytes,
        window_end=window_end_for(logs_dir, now) if logs_dir.exists() else None,
    )
    raise_on_errors(report.findings)
    inventory_file = data_dir / schemas.INVENTORY_FILE
    if logs_dir.exists():
        record = {"logs_fingerprint": logs_fingerprint(logs_dir, inventory_file)}
        io.write_text(data_dir / schemas.VALIDATION_DIR / VALIDATED, json.dumps(record) + "\n")
    return StepResult(
        outputs={"report": report.report_path, "docs": report.docs_index},
        findings=report.findings,
        summary={"quarantined_rows": len(report.quarantine)},
    )


# --- ingest -------------------------------------------------------------------------------------


def ingest(
    logs_dir: Path,
    inventory_file: Path,
    out_dir: Path,
    settings: Settings,
    now: dt.datetime | None = None,
    progress: Progress = None,
) -> StepResult:
    """Link table over the window, leaving out quarantined rows; validated before it is written.

    Reuses the quarantine of a previous `validate` of exactly these logs and inventory; otherwise
    validates the raw logs first, so unvalidated rows never reach the link table.
    """
    from hulk.ingest import link_stats, window_end_for
    from hulk.validation import read_inventory, record_link_validation, validate_logs

    now = now or dt.datetime.now(dt.UTC)
    window_end = window_end_for(logs_dir, now)
    inventory = read_inventory(inventory_file)
    findings: list[Finding] = []
    quarantine = _validated_quarantine(logs_dir, inventory_file, out_dir)
    if quarantine is None:
        checked = validate_logs(
            logs_dir,
            inventory,
            settings.validation,
            now,
            settings.ingest.window_days,
            progress=progress,
            probe_bytes=settings.ingest.latency_probe_bytes,
            window_end=window_end,
        )
        findings += checked.findings
        raise_on_errors(findings)
        quarantine = checked.quarantine
    links = link_stats(
        logs_dir, inventory, settings.ingest, quarantine=quarantine, window_end=window_end
    )
    links_path = out_dir / schemas.LINKS_FILE
    findings += record_link_validation(
        out_dir, links, inventory, links_path, settings.validation, now
    )
    raise_on_errors(findings)
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / schemas.INVENTORY_FILE).resolve() != inventory_file.resolve():
        io.write_csv(out_dir / schemas.INVENTORY_FILE, inventory)
    io.write_parquet(links_path, links)
    return StepResult(
        outputs={"links": links_path},
        findings=findings,
        summary={"links": len(links), "quarantined_rows": len(quarantine)},
    )


def _validated_quarantine(
    logs_dir: Path, inventory_file: Path, out_dir: Path
) -> pd.DataFrame | None:
    """The quarantine written by `validate` for these very logs, or None if there is none."""
    record_path = out_dir / schemas.VALIDATION_DIR / VALIDATED
    quarantine_path = out_dir / schemas.QUARANTINE_FILE
    if not (record_path.exists() and quarantine_path.exists()):
        return None
    record = json.loads(record_path.read_text())
    if record.get("logs_fingerprint") != logs_fingerprint(logs_dir, inventory_file):
        return None
    return pd.read_parquet(quarantine_path)


# --- graph --------------------------------------------------------------------------------------


def graph(data_dir: Path, settings: Settings) -> StepResult:
    from hulk.graph import build_fleet_graph, save_fleet_graph, snapshot_id
    from hulk.validation import read_inventory

    inventory_file = data_dir / schemas.INVENTORY_FILE
    links_file = data_dir / schemas.LINKS_FILE
    if not links_file.exists():
        raise InputError(links_file, "links.exists", "no link table: run `hulk ingest` first")
    inventory = read_inventory(inventory_file)
    links = pd.read_parquet(links_file)
    fleet = build_fleet_graph(
        inventory,
        links,
        settings.hardware,
        settings.graph.bandwidth_tiers,
        snapshot=snapshot_id(links_file),
    )
    out_dir = data_dir / schemas.GRAPH_DIR
    record = save_fleet_graph(fleet, out_dir, inventory_sha256=io.sha256_file(inventory_file))
    return StepResult(outputs={"graph": out_dir}, summary=record)
