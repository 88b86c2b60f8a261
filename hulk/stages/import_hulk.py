"""`hulk import-hulk`: a fleet in the paper's published format (node and edge files) as a data
folder's inventory, link table and quarantine, validated before anything is written."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.findings import raise_on_errors
from hulk.settings import Settings
from hulk.stages import StepResult, Summary


@dataclass(frozen=True)
class ImportSummary(Summary):
    machines: int
    links: int
    quarantined_rows: int


def run(
    nodes: Path, edges: Path, out_dir: Path, settings: Settings, now: dt.datetime | None = None
) -> StepResult[ImportSummary]:
    """Inventory and link table from the paper's published format, validated before writing."""
    from hulk.data_folder import IMPORTED, holds_logs, imported_record
    from hulk.hardware import require_peak_figures
    from hulk.importer import import_hulk as read_hulk_format
    from hulk.stages.generate import write_demo_jobs
    from hulk.validation import run_validation, validate_inventory, validate_links
    from hulk.validation._common import json_value

    if holds_logs(out_dir):
        # A folder with logs is read from its logs: the imported fleet would be refused
        # against them (their machines are not its machines) at the next validation.
        raise InputError(
            out_dir / schemas.LOGS_DIR,
            "import.has_logs",
            "the folder holds raw latency logs, which a data folder's fleet is read from: "
            "import into a new folder (--out DIR), or move logs/ away first",
        )
    result = read_hulk_format(
        nodes,
        edges,
        default_gpu_count=settings.graph.default_gpu_count,
        validation=settings.validation,
    )
    checked = validate_inventory(result.inventory, str(nodes), settings.validation)
    checked += validate_links(result.links, result.inventory, str(edges), settings.validation)
    raise_on_errors(checked)
    require_peak_figures(result.inventory, nodes, settings.hardware)
    out_dir.mkdir(parents=True, exist_ok=True)
    fileio.write_csv(out_dir / schemas.INVENTORY_FILE, result.inventory)
    fileio.write_parquet(out_dir / schemas.LINKS_FILE, result.links)
    fileio.write_parquet(out_dir / schemas.QUARANTINE_FILE, result.quarantine)
    # The written files go through the same validation as everything else (report, Data Docs).
    # What the importer itself set aside is recorded beside the link table, so that this and
    # every later validation of the folder report it while the link table is the imported one.
    record = imported_record(nodes, edges, out_dir / schemas.LINKS_FILE, result.findings)
    text = json.dumps(json_value(record), indent=2, allow_nan=False)  # as report.json's findings
    fileio.write_text(out_dir / schemas.VALIDATION_DIR / IMPORTED, text + "\n")
    report = run_validation(
        out_dir, settings.validation, now or dt.datetime.now(dt.UTC), settings.ingest.window_days
    )
    outputs = {
        "inventory": out_dir / schemas.INVENTORY_FILE,
        "links": out_dir / schemas.LINKS_FILE,
        "quarantine": out_dir / schemas.QUARANTINE_FILE,
        "report": report.report_path,
        "docs": report.docs_index,
    }
    if write_demo_jobs(out_dir, settings.assign.jobs_file):  # a new folder has jobs to place
        outputs["jobs"] = settings.assign.jobs_file
    return StepResult(
        outputs=outputs,
        findings=report.findings,
        summary=ImportSummary(
            machines=len(result.inventory),
            links=len(result.links),
            quarantined_rows=len(result.quarantine),
        ),
    )
