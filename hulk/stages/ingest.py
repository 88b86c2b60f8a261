"""The ingest step: the link table over the rolling window (`hulk.ingest.link_stats`, DuckDB),
without the quarantined rows, validated (suite ``hulk.links``) before it is written."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from hulk import fileio, schemas
from hulk.data_folder import VALIDATED, validated_quarantine, validated_record
from hulk.findings import Finding, raise_on_errors
from hulk.settings import Settings
from hulk.stages import Progress, StepResult, Summary


@dataclass(frozen=True)
class IngestSummary(Summary):
    links: int
    quarantined_rows: int


def run(
    data_dir: Path,
    settings: Settings,
    logs_dir: Path | None = None,
    inventory_file: Path | None = None,
    now: dt.datetime | None = None,
    progress: Progress = None,
) -> StepResult[IngestSummary]:
    """Write DATA/links.parquet from `logs_dir` and `inventory_file` (default: the data
    folder's own; another inventory is copied into the data folder).

    Reuses the quarantine of a previous validate step of exactly these logs and inventory;
    otherwise validates the raw logs first, so unvalidated rows never reach the link table.
    """
    from hulk.ingest import link_stats, window_end_for
    from hulk.validation import (
        read_inventory,
        record_link_validation,
        require_valid_inventory,
        validate_logs,
    )

    logs_dir = logs_dir or data_dir / schemas.LOGS_DIR
    inventory_file = inventory_file or data_dir / schemas.INVENTORY_FILE
    now = now or dt.datetime.now(dt.UTC)
    window_end = window_end_for(logs_dir, now)
    inventory = read_inventory(inventory_file)
    require_valid_inventory(inventory, inventory_file, settings.validation)
    findings: list[Finding] = []
    quarantine = validated_quarantine(logs_dir, inventory_file, data_dir)
    validated_here = quarantine is None
    logs_findings: list[Finding] = []
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
        logs_findings = checked.findings
        raise_on_errors(findings)
        quarantine = checked.quarantine
    links = link_stats(
        logs_dir, inventory, settings.ingest, quarantine=quarantine, window_end=window_end
    )
    links_path = data_dir / schemas.LINKS_FILE
    findings += record_link_validation(
        data_dir, links, inventory, links_path, settings.validation, now
    )
    raise_on_errors(findings)
    data_dir.mkdir(parents=True, exist_ok=True)
    if (data_dir / schemas.INVENTORY_FILE).resolve() != inventory_file.resolve():
        fileio.write_csv(data_dir / schemas.INVENTORY_FILE, inventory)
    outputs = {"links": links_path}
    if validated_here:
        # The rows left out of the link table, kept as `hulk validate` keeps them, and the
        # record that lets the next ingest of these very logs reuse them (and tells the assign
        # runs which machines went silent).
        outputs["quarantine"] = data_dir / schemas.QUARANTINE_FILE
        fileio.write_parquet(outputs["quarantine"], quarantine)
        record = validated_record(logs_dir, inventory_file, outputs["quarantine"], logs_findings)
        fileio.write_text(data_dir / schemas.VALIDATION_DIR / VALIDATED, json.dumps(record) + "\n")
    fileio.write_parquet(links_path, links)
    return StepResult(
        outputs=outputs,
        findings=findings,
        summary=IngestSummary(links=len(links), quarantined_rows=len(quarantine)),
    )
