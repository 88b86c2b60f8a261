"""The validate step: Great Expectations over the inventory and the logs of the window
(`hulk.validation`); the quarantine, the report, Data Docs, and a record of which logs were
validated and which quarantine was written for them (the ingest and labels steps reuse the
quarantine only for those very files and only that quarantine). A run with errors writes the
report and Data Docs but leaves the last good quarantine and record alone."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hulk import fileio, schemas
from hulk.data_folder import VALIDATED, validated_record
from hulk.errors import InputError
from hulk.findings import raise_on_errors
from hulk.settings import Settings
from hulk.stages import Progress, StepResult, Summary


@dataclass(frozen=True)
class ValidateSummary(Summary):
    quarantined_rows: int
    days_validated: int = 0  # log partitions validated tonight
    days_cached: int = 0  # … taken from the day cache (validated by an earlier run)


if TYPE_CHECKING:
    from hulk.validation.logs import MapDays


def run(
    data_dir: Path,
    settings: Settings,
    now: dt.datetime | None = None,
    progress: Progress = None,
    map_days: MapDays = map,
) -> StepResult[ValidateSummary]:
    """Validate what data_dir holds; raise on errors; record which logs were validated.

    `map_days(validate_log_day, days)` runs the day partitions: `map` (in this process) or an
    executor's map (the nightly flow's Dask tasks); the outputs are the same either way.
    """
    from hulk.ingest import window_end_for
    from hulk.validation import run_validation

    now = now or dt.datetime.now(dt.UTC)
    logs_dir = data_dir / schemas.LOGS_DIR
    _check_peak_figures(data_dir / schemas.INVENTORY_FILE, settings)
    report = run_validation(
        data_dir,
        settings.validation,
        now,
        settings.ingest.window_days,
        progress=progress,
        probe_bytes=settings.ingest.latency_probe_bytes,
        window_end=window_end_for(logs_dir, now) if logs_dir.exists() else None,
        map_days=map_days,
    )
    raise_on_errors(report.findings)
    inventory_file = data_dir / schemas.INVENTORY_FILE
    if report.quarantine_path is not None:
        record = validated_record(logs_dir, inventory_file, report.quarantine_path, report.findings)
        fileio.write_text(data_dir / schemas.VALIDATION_DIR / VALIDATED, json.dumps(record) + "\n")
    return StepResult(
        outputs={"report": report.report_path, "docs": report.docs_index},
        findings=report.findings,
        summary=ValidateSummary(
            quarantined_rows=len(report.quarantine),
            days_validated=report.log_batches - report.log_batches_cached,
            days_cached=report.log_batches_cached,
        ),
    )


def _check_peak_figures(inventory_file: Path, settings: Settings) -> None:
    """`hulk.hardware.require_peak_figures` on the inventory file, before anything is written,
    so that a folder that would fail at the graph step does not pass validation."""
    from hulk.hardware import require_peak_figures
    from hulk.validation.inventory import read_inventory

    try:
        inventory = read_inventory(inventory_file)
    except InputError:
        return  # run_validation reports it, with the rest
    plausible = settings.validation.compute_capability
    require_peak_figures(
        inventory, inventory_file, settings.hardware, (plausible.low, plausible.high)
    )
