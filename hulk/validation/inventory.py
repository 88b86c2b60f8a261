"""The inventory (machines.csv): reading it with clear errors, and the ``hulk.inventory`` suite.

Errors: a file that is not UTF-8 (`inventory.encoding`, naming the line) or not CSV
(`inventory.readable`), missing or mistyped columns (`inventory.schema`), duplicate ids
(`inventory.unique_node_id`), empty required values (`inventory.missing_value`) and values out of
range (`inventory.compute_capability`, `inventory.gpu_count`, `inventory.memory_gb`,
`inventory.status`, `inventory.coordinates`). Empty lat/lon are filled from the city when it
resolves offline (`hulk.geo.resolve_city`, as `hulk import-hulk` resolves its places); a machine
left without coordinates is only a warning (`inventory.missing_coordinates`): checks that need a
location skip it.

The row rules are defined once (`rules`) and run two ways: by Great Expectations in `hulk
validate` (`validate_inventory`: report and Data Docs) and with pandas wherever the inventory is
read for planning (`check_inventory`, `require_valid_inventory`: same rules, same findings, no
GX start-up).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.errors import InputError
from hulk.findings import Finding, Severity, raise_on_errors
from hulk.settings import ValidateSettings
from hulk.validation._common import encoding_error, finding, frame_records, name_list, plural
from hulk.validation._gx import Check, CheckResult, GxSession, make_check, scratch_session

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation

SUITE = "hulk.inventory"
INTEGER_COLUMNS = [c for c, t in schemas.INVENTORY.items() if t == "int64"]
FLOAT_COLUMNS = [c for c, t in schemas.INVENTORY.items() if t == "float64"]
TEXT_COLUMNS = [c for c, t in schemas.INVENTORY.items() if t == "string"]
# Columns that must hold a value on every row (lat/lon may be empty: location unknown).
REQUIRED = ["compute_capability", "gpu_count", "memory_gb", "status"]


def _repeated_header_names(path: Path) -> list[str]:
    """Header names given more than once (pandas would rename the second "status.1")."""
    with path.open(encoding="utf-8", newline="") as file:
        header = next(csv.reader(file), [])
    names = [name.strip().lstrip("\ufeff") for name in header]
    return sorted({name for name in names if names.count(name) > 1})


def read_inventory(path: str | Path) -> pd.DataFrame:
    """Read machines.csv into schemas.INVENTORY; an InputError names the file, column and line.

    Header names are trimmed; extra columns are kept. A machine whose lat and lon are both
    empty gets its city's coordinates (`resolve_coordinates`, offline), else they stay NaN
    (location unknown); an empty or non-numeric value in another numeric column is an error.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "inventory.exists", "inventory file not found")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except UnicodeDecodeError:
        raise encoding_error(path, "inventory.encoding") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(path, "inventory.readable", f"cannot parse the CSV file: {exc}") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    repeated = _repeated_header_names(path)
    if repeated:
        raise InputError(
            path,
            "inventory.schema",
            f"line 1: column(s) {', '.join(repr(c) for c in repeated)} given more than once "
            "(which is meant?)",
        )
    missing = [c for c in schemas.INVENTORY if c not in raw.columns]
    if missing:
        raise InputError(
            path,
            "inventory.schema",
            f"missing column(s) {', '.join(repr(c) for c in missing)} "
            f"(inventory columns: {', '.join(schemas.INVENTORY)})",
        )
    frame = raw.copy()
    for column in schemas.INVENTORY:
        text = raw[column].str.strip()
        if column in TEXT_COLUMNS:
            frame[column] = text.where(text != "", None).astype("string")
            continue
        numbers = pd.to_numeric(text.where(text != "", None), errors="coerce")
        empty_ok = column in ("lat", "lon")
        bad = (text != "") & numbers.isna()
        if not empty_ok:
            bad |= text == ""
        if column in INTEGER_COLUMNS:
            bad |= numbers.notna() & (numbers != np.round(numbers))
            # Past 64 bits the cast below would wrap (a 20-digit id read as -2**63).
            bad |= numbers.notna() & (numbers.abs() >= 2.0**63)
        if bad.any():
            kind = "an integer" if column in INTEGER_COLUMNS else "a number"
            kind += " of at most 63 bits" if column in INTEGER_COLUMNS else ""
            lines = [f"line {i + 2}: {column}={raw.at[i, column]!r}" for i in raw.index[bad][:5]]
            raise InputError(
                path,
                "inventory.schema",
                f"column {column!r} must be {kind} on every row"
                + (" (or empty)" if empty_ok else "")
                + f": {plural(int(bad.sum()), 'bad value')}",
                lines,
            )
        frame[column] = numbers.astype(schemas.INVENTORY[column])
    return resolve_coordinates(frame)


def resolve_coordinates(inventory: pd.DataFrame) -> pd.DataFrame:
    """Fill empty lat/lon (both empty) from the city, resolved offline as `hulk import-hulk`
    resolves its places (`hulk.geo.resolve_city`, within the row's country when it has one);
    an empty country is filled too. Cities that do not resolve keep empty coordinates (the
    `inventory.missing_coordinates` warning names them)."""
    if not {"city", "country", "lat", "lon"} <= set(inventory.columns):
        return inventory
    todo = inventory["lat"].isna() & inventory["lon"].isna() & inventory["city"].notna()
    if not todo.any():
        return inventory
    from hulk.geo import Location, resolve_city

    frame = inventory.copy()
    found: dict[tuple[str, str | None], Location | None] = {}
    for i in frame.index[todo.to_numpy()]:
        country = frame.at[i, "country"]
        key = (str(frame.at[i, "city"]), None if pd.isna(country) else str(country))
        if key not in found:
            found[key] = resolve_city(*key)
        place = found[key]
        if place is None:
            continue
        frame.at[i, "lat"], frame.at[i, "lon"] = place.lat, place.lon
        if key[1] is None:
            frame.at[i, "country"] = place.country
    return frame


def schema_problems(frame: pd.DataFrame, schema: dict[str, str]) -> list[str]:
    """Columns of `frame` that are missing or whose dtype cannot hold the schema's type."""
    problems = []
    for column, dtype in schema.items():
        if column not in frame.columns:
            problems.append(f"{column!r} is missing")
            continue
        actual = frame[column].dtype
        if dtype == "int64":
            ok = pd.api.types.is_integer_dtype(actual) and not pd.api.types.is_bool_dtype(actual)
        elif dtype == "float64":
            ok = pd.api.types.is_numeric_dtype(actual) and not pd.api.types.is_bool_dtype(actual)
        elif dtype.startswith("datetime64"):
            ok = pd.api.types.is_datetime64_any_dtype(actual)
        else:
            ok = pd.api.types.is_string_dtype(actual) or pd.api.types.is_object_dtype(actual)
        if not ok:
            problems.append(f"{column!r} is {actual}, expected {dtype}")
    return problems


@dataclass(frozen=True)
class InventoryRule:
    """One rule on the inventory's rows, defined once and evaluated two ways: as a Great
    Expectations expectation (`checks`: `hulk validate`, its report and Data Docs) and with
    pandas (`offending`: `check_inventory`, what planning runs before it trusts the file,
    in milliseconds where a GX run costs seconds). Both skip empty values, as GX does, except
    the ``not_null`` kind, which is about them."""

    rule: str
    severity: Severity
    column: str
    kind: Literal["unique", "not_null", "between", "in_set"]
    low: float | None = None
    high: float | None = None
    strict_low: bool = False  # low itself breaks the rule
    values: tuple[str, ...] = ()  # the allowed values of an ``in_set`` rule

    def expectation(self) -> Expectation:
        import great_expectations.expectations as gxe

        if self.kind == "unique":
            return gxe.ExpectColumnValuesToBeUnique(column=self.column)
        if self.kind == "not_null":
            return gxe.ExpectColumnValuesToNotBeNull(column=self.column)
        if self.kind == "in_set":
            return gxe.ExpectColumnValuesToBeInSet(column=self.column, value_set=list(self.values))
        bounds: dict[str, Any] = {}
        if self.low is not None:
            bounds["min_value"] = self.low
        if self.high is not None:
            bounds["max_value"] = self.high
        if self.strict_low:
            bounds["strict_min"] = True
        return gxe.ExpectColumnValuesToBeBetween(column=self.column, **bounds)

    def offending(self, frame: pd.DataFrame) -> np.ndarray:
        """Row positions (int64) of `frame` that break the rule, as GX reports them."""
        column = frame[self.column]
        if self.kind == "not_null":
            bad = column.isna()
        elif self.kind == "unique":
            bad = column.notna() & column.duplicated(keep=False)
        elif self.kind == "in_set":
            bad = column.notna() & ~column.isin(self.values)
        else:
            values = pd.to_numeric(column, errors="coerce")
            bad = pd.Series(False, index=frame.index)
            if self.low is not None:
                bad |= values <= self.low if self.strict_low else values < self.low
            if self.high is not None:
                bad |= values > self.high
            bad &= values.notna()
        return np.flatnonzero(bad.fillna(False).to_numpy(dtype=bool)).astype("int64")


# A machine's memory at most (GB): a petabyte, far beyond any server, and finite (`inf` is no
# memory figure: the planner's arithmetic would turn it into NaN).
MAX_MEMORY_GB = 1_000_000.0


def rules(settings: ValidateSettings) -> list[InventoryRule]:
    """The inventory's row rules, in the suite's order (after the column check)."""
    low, high = settings.compute_capability.low, settings.compute_capability.high
    return [
        InventoryRule("inventory.unique_node_id", "error", "node_id", "unique"),
        *(InventoryRule("inventory.missing_value", "error", c, "not_null") for c in REQUIRED),
        InventoryRule(
            "inventory.compute_capability", "error", "compute_capability", "between", low, high
        ),
        InventoryRule("inventory.gpu_count", "error", "gpu_count", "between", low=1),
        InventoryRule(
            "inventory.memory_gb", "error", "memory_gb", "between", 0, MAX_MEMORY_GB, True
        ),
        InventoryRule(
            "inventory.status", "error", "status", "in_set", values=schemas.MACHINE_STATUSES
        ),
        InventoryRule("inventory.coordinates", "error", "lat", "between", -90, 90),
        InventoryRule("inventory.coordinates", "error", "lon", "between", -180, 180),
        InventoryRule("inventory.missing_coordinates", "warning", "lat", "not_null"),
        InventoryRule("inventory.missing_coordinates", "warning", "lon", "not_null"),
    ]


def checks(settings: ValidateSettings) -> list[Check]:
    """The expectations of the inventory suite: the column check, then `rules`."""
    import great_expectations.expectations as gxe

    return [
        make_check(
            "inventory.schema",
            "error",
            gxe.ExpectTableColumnsToMatchSet(column_set=list(schemas.INVENTORY), exact_match=False),
        ),
        *(make_check(r.rule, r.severity, r.expectation()) for r in rules(settings)),
    ]


_MESSAGES = {
    "inventory.unique_node_id": "node_id must be unique; duplicated ids: {ids}",
    "inventory.missing_value": "empty compute_capability, gpu_count, memory_gb or status "
    "on machine(s) {ids}",
    "inventory.compute_capability": "compute_capability outside the plausible range "
    "[{low:g}, {high:g}] on machine(s) {ids}",
    "inventory.gpu_count": "gpu_count must be at least 1; machine(s) {ids}",
    "inventory.memory_gb": f"memory_gb must be positive and at most {MAX_MEMORY_GB:,.0f}; "
    "machine(s) {ids}",
    "inventory.status": f"status must be one of {', '.join(schemas.MACHINE_STATUSES)}; "
    "machine(s) {ids}",
    "inventory.coordinates": "lat must lie in [-90, 90] and lon in [-180, 180]; machine(s) {ids}",
    "inventory.missing_coordinates": "no coordinates for machine(s) {ids} (lat or lon empty, "
    "and not found from the city offline): checks that need a location (faster than light) "
    "skip them",
}


def validate_inventory(
    inventory: pd.DataFrame,
    path: str,
    settings: ValidateSettings,
    *,
    session: GxSession | None = None,
) -> list[Finding]:
    """Check an inventory frame (schemas.INVENTORY) with the ``hulk.inventory`` GX suite;
    returns findings, never raises on them.

    `session` is the Great Expectations session to validate through (an in-memory one when
    None); `path` names the file in the findings.
    """
    schema = _schema_finding(inventory, path)
    if schema is not None:
        return [schema]
    frame = inventory.reset_index(drop=True)
    batch = Path(path).name or path
    if session is None:  # nothing keeps the GX result: this thread's scratch session
        scratch = scratch_session(SUITE, settings, settings.examples)
        results = scratch.validate(SUITE, lambda: checks(settings), frame, batch, keep=False)
    else:
        results = session.validate(SUITE, lambda: checks(settings), frame, batch)
    return _findings(results, frame, path, settings)


def check_inventory(
    inventory: pd.DataFrame, path: str, settings: ValidateSettings
) -> list[Finding]:
    """The same findings as `validate_inventory` (the same `rules`, messages and examples),
    evaluated with pandas instead of Great Expectations: no report, no Data Docs, and fast
    enough for every assign run."""
    schema = _schema_finding(inventory, path)
    if schema is not None:
        return [schema]
    frame = inventory.reset_index(drop=True)
    results = []
    for rule in rules(settings):
        rows = rule.offending(frame)
        results.append(CheckResult(rule.rule, rule.severity, len(rows) == 0, len(rows), rows))
    return _findings(results, frame, path, settings)


def require_valid_inventory(
    inventory: pd.DataFrame, path: str | Path, settings: ValidateSettings
) -> None:
    """Refuse an inventory that breaks an error rule (`check_inventory`): an `InputError`
    naming the file, the rule and the machines, before anything is planned or written.
    Warnings (machines without coordinates) do not stop planning."""
    raise_on_errors(check_inventory(inventory, str(path), settings))


def _schema_finding(inventory: pd.DataFrame, path: str) -> Finding | None:
    problems = schema_problems(inventory, schemas.INVENTORY)
    if not problems:
        return None
    return finding(
        "error",
        "inventory.schema",
        path,
        "the inventory does not have the expected columns: " + "; ".join(problems),
        count=len(problems),
    )


def _findings(
    results: list[CheckResult], frame: pd.DataFrame, path: str, settings: ValidateSettings
) -> list[Finding]:
    by_rule: dict[str, tuple[Severity, set[int]]] = {}
    for result in results:
        if result.success or result.rule == "inventory.schema":
            continue
        severity, rows = by_rule.setdefault(result.rule, (result.severity, set()))
        rows.update(result.unexpected_index.tolist())
    found = []
    for rule, (severity, rows) in by_rule.items():
        ordered = sorted(rows)
        bad = frame.iloc[ordered]
        ids = bad["node_id"].tolist()
        if rule == "inventory.unique_node_id":
            ids = sorted(set(ids))
        message = _MESSAGES[rule].format(
            ids=name_list(ids),
            low=settings.compute_capability.low,
            high=settings.compute_capability.high,
        )
        examples = [
            {"row": i, **row}
            for i, row in zip(ordered, frame_records(bad, settings.examples), strict=False)
        ]
        found.append(finding(severity, rule, path, message, len(ordered), examples))
    return found
