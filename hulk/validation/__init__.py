"""Validation of the inventory, the raw latency logs and the link table (Great Expectations 1.x).

Each file has an expectation suite (``hulk.inventory``, ``hulk.logs``, ``hulk.links``); every
rule that can be phrased as an expectation is one, run by GX on the data (derived columns such as
the fiber-floor latency of a row's two machines are computed with numpy first). Rules that span
the whole window (missing days, machines that stopped reporting, asymmetric pairs, isolated
machines) are computed with pandas on what the batches left.

The functions are pure: they take explicit arguments and return findings
(`hulk.findings.Finding`, rule names such as ``logs.faster_than_light``). They never raise on
error findings (the caller decides, with `hulk.findings.raise_on_errors`), but a file that cannot
be read at all (missing, unparseable, missing or mistyped columns) raises `InputError` at once.

- `validate_inventory(inventory, path, settings)` → findings; `check_inventory` → the same
  findings from the same rules without GX (milliseconds: what planning runs), and
  `require_valid_inventory` raises on their errors
- `validate_logs(logs_dir, inventory, settings, now, window_days, progress)` → `LogValidation`
  (findings, and the quarantined raw rows with the rule and file that caught them); its day
  partitions fan out (`plan_days` → `validate_log_day` on any executor → `merge_days`, same
  result whichever runs them; `map_days=` here and in `run_validation`)
- `validate_links(links, inventory, path, settings)` → findings
- `run_validation(data_dir, settings, now, window_days, progress)` → `ValidationReport`, writing
  validation/report.json, quarantine.parquet and the HTML Data Docs (validation/docs/index.html)
- `record_link_validation(data_dir, links, inventory, links_path, settings, now)` → findings,
  adding a new link table's results to that report and those Data Docs

Each module documents its rules: `hulk.validation.inventory`, `hulk.validation.logs`,
`hulk.validation.links`.
"""

from hulk.validation.inventory import (
    check_inventory,
    read_inventory,
    require_valid_inventory,
    validate_inventory,
)
from hulk.validation.links import read_links, validate_links
from hulk.validation.logs import QUARANTINE_COLUMNS, LogValidation, validate_logs
from hulk.validation.run import ValidationReport, record_link_validation, run_validation

__all__ = [
    "QUARANTINE_COLUMNS",
    "LogValidation",
    "ValidationReport",
    "check_inventory",
    "read_inventory",
    "read_links",
    "record_link_validation",
    "require_valid_inventory",
    "run_validation",
    "validate_inventory",
    "validate_links",
    "validate_logs",
]
