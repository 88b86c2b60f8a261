"""`run_validation`: validate what a data folder holds, write the report, quarantine and docs."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hulk import fileio, schemas
from hulk.data_folder import imported_findings, imported_sources
from hulk.findings import Finding
from hulk.settings import LATENCY_PROBE_BYTES, ValidateSettings
from hulk.validation._common import json_value, utc_timestamp
from hulk.validation._gx import GxSession
from hulk.validation.day_cache import DAYS_DIR
from hulk.validation.inventory import read_inventory, validate_inventory
from hulk.validation.links import read_links, validate_links
from hulk.validation.logs import QUARANTINE_COLUMNS, MapDays, Progress, validate_logs

REPORT_FILE = "report.json"
DOCS_DIR = "docs"


@dataclass
class ValidationReport:
    """What `run_validation` found and wrote."""

    findings: list[Finding]
    quarantine: pd.DataFrame  # raw log rows set aside (QUARANTINE_COLUMNS; empty without logs)
    docs_index: Path  # data_dir/validation/docs/index.html
    report_path: Path  # data_dir/validation/report.json
    quarantine_path: Path | None  # data_dir/quarantine.parquet; None when there were no logs
    suites: dict[str, dict]
    log_batches: int = 0  # log partitions in the window
    log_batches_cached: int = 0  # … of which an earlier run's outcome was reused

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not any(f.severity == "error" for f in self.findings)


def run_validation(
    data_dir: Path,
    settings: ValidateSettings,
    now: dt.datetime,
    window_days: int,
    progress: Progress = None,
    *,
    probe_bytes: int = LATENCY_PROBE_BYTES,
    window_end: dt.datetime | None = None,
    map_days: MapDays = map,
) -> ValidationReport:
    """Validate data_dir's inventory, raw logs (if any) and link table (if any). The findings
    of the `hulk import-hulk` that wrote the link table, while it is unchanged, come first in
    the report: only the import read its source files.

    Writes data_dir/validation/report.json (atomically), data_dir/quarantine.parquet (when
    there are logs and no error finding: a failed run leaves the last good one) and the Great
    Expectations Data Docs under data_dir/validation/docs (a
    file-mode GX project under data_dir/validation/gx that keeps `docs_history_days` days of
    results). Error findings do
    not raise (see hulk.findings.raise_on_errors); a file that cannot be read at all does
    (InputError naming the file and column). `map_days` runs the log partitions (see
    `validate_logs`: `map`, one after another, or an executor's map); the Data Docs get every
    partition's result whichever runs them.
    """
    data_dir = Path(data_dir)
    out_dir = data_dir / schemas.VALIDATION_DIR
    inventory_path = data_dir / schemas.INVENTORY_FILE
    logs_dir = data_dir / schemas.LOGS_DIR
    links_path = data_dir / schemas.LINKS_FILE

    inventory = read_inventory(inventory_path)
    now = utc_timestamp(now).to_pydatetime()
    session = GxSession.project(
        out_dir,
        out_dir / DOCS_DIR,
        now,
        settings.examples,
        history_days=settings.docs_history_days,
    )
    findings = imported_findings(data_dir)
    findings += validate_inventory(inventory, str(inventory_path), settings, session=session)

    quarantine = None
    counts: dict[str, object] = {"machines": len(inventory)}
    window = None
    # Every probe is checked against the inventory: against a broken one the logs' findings
    # would mislead, and a night's partitions take minutes. They wait for a good inventory.
    logs_validated = logs_dir.exists() and not any(f.severity == "error" for f in findings)
    if logs_dir.exists() and not logs_validated:
        findings.append(
            Finding(
                "warning",
                "logs.not_validated",
                str(logs_dir),
                f"the logs were not validated: {inventory_path.name} has errors, and every "
                "probe is checked against it. Fix it and validate again",
            )
        )
    if logs_validated:
        checked = validate_logs(
            logs_dir,
            inventory,
            settings,
            now,
            window_days,
            progress,
            session=session,
            probe_bytes=probe_bytes,
            window_end=window_end,
            map_days=map_days,
            cache_dir=out_dir / DAYS_DIR,
        )
        findings += checked.findings
        quarantine = checked.quarantine
        window = {
            "start": json_value(checked.window_start),
            "end": json_value(checked.window_end),
            "days": window_days,
        }
        counts.update(
            log_batches=checked.batches,
            log_batches_cached=checked.cached_batches,
            log_rows=checked.rows,
            quarantined_rows=len(quarantine),
            quarantined_by_rule=checked.quarantined_by_rule,
        )
    if links_path.exists():
        links = read_links(links_path)
        findings += validate_links(links, inventory, str(links_path), settings, session=session)
        counts["links"] = len(links)

    docs_index = session.build_docs()
    assert docs_index is not None  # a project session always has a docs folder
    severities = Counter(f.severity for f in findings)
    quarantine_path = None
    # A run with errors publishes no quarantine: the last good one (and the record of the logs
    # it belongs to) stays in place, and the report names the problems.
    if quarantine is not None and severities["error"] == 0:
        quarantine_path = data_dir / schemas.QUARANTINE_FILE
        fileio.write_parquet(quarantine_path, quarantine)

    suites = _suites(session, findings, logs_validated, links_path.exists())
    report_path = out_dir / REPORT_FILE
    counts.update(errors=severities["error"], warnings=severities["warning"])
    report = {
        "ok": severities["error"] == 0,
        "data_dir": str(data_dir),
        "now": json_value(now),
        "window": window,
        "inputs": {
            "inventory": str(inventory_path),
            "logs": str(logs_dir) if logs_dir.exists() else None,
            "links": str(links_path) if links_path.exists() else None,
        },
        "outputs": {
            "data_docs": str(docs_index),
            "quarantine": None if quarantine_path is None else str(quarantine_path),
        },
        "counts": counts,
        "suites": suites,
        "findings": [json_value(f.to_dict()) for f in findings],
    }
    fileio.write_text(report_path, json.dumps(report, indent=2, allow_nan=False) + "\n")
    return ValidationReport(
        findings=findings,
        quarantine=quarantine if quarantine is not None else schemas.empty(QUARANTINE_COLUMNS),
        docs_index=docs_index,
        report_path=report_path,
        quarantine_path=quarantine_path,
        suites=suites,
        log_batches=int(counts.get("log_batches", 0)),  # type: ignore[call-overload]
        log_batches_cached=int(counts.get("log_batches_cached", 0)),  # type: ignore[call-overload]
    )


def _suites(
    session: GxSession, findings: list[Finding], has_logs: bool, has_links: bool
) -> dict[str, dict]:
    """Per suite: validated or not, GX success over its batches, Hulk errors and warnings."""
    present = {"inventory": True, "logs": has_logs, "links": has_links}
    out = {}
    for name, validated in present.items():
        record = session.suites.get(f"hulk.{name}")
        mine = [f for f in findings if f.rule.startswith(f"{name}.")]
        errors = sum(f.severity == "error" for f in mine)
        out[name] = {
            "validated": validated,
            "success": validated and errors == 0,
            "gx_success": None if record is None else record.success,
            "batches": 0 if record is None else record.batches,
            "failed_batches": [] if record is None else record.failed_batches,
            "errors": errors,
            "warnings": sum(f.severity == "warning" for f in mine),
        }
    return out


def record_link_validation(
    data_dir: Path,
    links: pd.DataFrame,
    inventory: pd.DataFrame,
    links_path: Path,
    settings: ValidateSettings,
    now: dt.datetime,
) -> list[Finding]:
    """Validate a freshly computed link table and add its results to data_dir's validation.

    Ingest runs after `run_validation` (which needs no link table to quarantine raw rows), so the
    link table's suite is added to the same Great Expectations project and report.json rather
    than re-validating every log partition. Returns the link table's findings.
    """
    data_dir = Path(data_dir)
    out_dir = data_dir / schemas.VALIDATION_DIR
    now = utc_timestamp(now).to_pydatetime()
    session = GxSession.project(out_dir, out_dir / DOCS_DIR, now, settings.examples, fresh=False)
    findings = validate_links(links, inventory, str(links_path), settings, session=session)
    docs_index = session.build_docs()

    report_path = out_dir / REPORT_FILE
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    # The new link table replaces the old one's findings, and an import's (about its files).
    replaced = imported_sources(data_dir)
    kept = [
        f
        for f in report.get("findings", [])
        if not str(f.get("rule", "")).startswith("links.") and f.get("file") not in replaced
    ]
    report["findings"] = kept + [json_value(f.to_dict()) for f in findings]
    report.setdefault("suites", {})["links"] = _suites(session, findings, False, True)["links"]
    severities = Counter(f["severity"] for f in report["findings"])
    counts = report.setdefault("counts", {})
    counts.update(links=len(links), errors=severities["error"], warnings=severities["warning"])
    report.setdefault("inputs", {})["links"] = str(links_path)
    report.setdefault("outputs", {})["data_docs"] = str(docs_index)
    report["ok"] = severities["error"] == 0
    fileio.write_text(report_path, json.dumps(report, indent=2, allow_nan=False) + "\n")
    return findings
