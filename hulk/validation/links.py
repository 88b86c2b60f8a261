"""The link table (links.parquet, schemas.LINKS): reading it, and the ``hulk.links`` suite.

Errors: missing or mistyped columns (`links.schema`), self-loops (`links.self_loop`), pairs not
stored as src < dst (`links.unordered_pair`), a pair twice (`links.unique_pair`), machines not in
the inventory (`links.unknown_machine`), loss_rate outside [0, 1] (`links.loss_rate`), a negative
sample count (`links.samples`; imported aggregates have 0), latencies missing or not positive
(`links.latency`), p50 above p95 (`links.latency_order`), a bandwidth that is given but not
positive (`links.beta`), and a window that ends before it starts (`links.window`).
Warnings: a median latency faster than light in fiber between the two machines
(`links.faster_than_light`; machines without coordinates are skipped), and an active machine
without any link (`links.isolated_machine`: one added to the inventory before its first probes,
or one whose probes all failed). Assign runs drain it until a link measures it
(`assign.drained_unmeasured`); the night goes on for the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hulk import schemas
from hulk.errors import InputError
from hulk.findings import Finding, Severity
from hulk.parquet_columns import LINK_RULES, checked_schema
from hulk.settings import ValidateSettings
from hulk.validation._common import Machines, finding, frame_records, name_list, plural
from hulk.validation._gx import Check, CheckResult, GxSession, make_check, scratch_session
from hulk.validation.inventory import schema_problems

SUITE = "hulk.links"


def read_links(path: str | Path) -> pd.DataFrame:
    """Read links.parquet in schemas.LINKS types; an InputError names the file and column."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "links.exists", "link table not found")
    checked_schema(path, LINK_RULES, "links")
    try:
        frame = pq.read_table(path, columns=list(schemas.LINKS)).to_pandas()
    except (pa.ArrowException, OSError) as exc:
        raise InputError(path, "links.readable", f"not a readable Parquet file: {exc}") from None
    for column, dtype in schemas.LINKS.items():
        if dtype == "int64" and frame[column].isna().any():
            raise InputError(path, "links.schema", f"column {column!r} has empty values")
        if dtype.startswith("datetime64"):
            values = pd.to_datetime(frame[column], utc=True)
            frame[column] = values.dt.as_unit("us")
        else:
            frame[column] = frame[column].astype(dtype)
    return frame


def checks() -> list[Check]:
    """The expectations of the link-table suite."""
    import great_expectations.expectations as gxe

    between = gxe.ExpectColumnValuesToBeBetween
    not_null = gxe.ExpectColumnValuesToNotBeNull
    a_above_b = gxe.ExpectColumnPairValuesAToBeGreaterThanB
    columns = gxe.ExpectTableColumnsToMatchSet(column_set=list(schemas.LINKS), exact_match=False)
    made = [
        make_check("links.schema", "error", columns),
        make_check(
            "links.src_lt_dst",
            "error",
            a_above_b(column_A="dst", column_B="src", description="one row per pair: src < dst"),
        ),
        make_check(
            "links.unique_pair",
            "error",
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["src", "dst"]),
        ),
    ]
    for end in ("src", "dst"):
        described = f"every {end} is in the inventory ({end}_row: its inventory row, or -1)"
        made.append(
            make_check(
                "links.unknown_machine",
                "error",
                between(column=f"{end}_row", min_value=0, description=described),
            )
        )
    made += [
        make_check("links.loss_rate", "error", not_null(column="loss_rate")),
        make_check(
            "links.loss_rate", "error", between(column="loss_rate", min_value=0, max_value=1)
        ),
        make_check("links.samples", "error", between(column="samples", min_value=0)),
        make_check("links.latency", "error", not_null(column="latency_p50_ms")),
        make_check("links.latency", "error", not_null(column="latency_p95_ms")),
    ]
    for column in ("latency_p50_ms", "latency_p95_ms", "latency_mean_ms"):
        positive = between(column=column, min_value=0, strict_min=True)
        made.append(make_check("links.latency", "error", positive))
    skip_missing: dict[str, Any] = {"or_equal": True, "ignore_row_if": "either_value_is_missing"}
    made += [
        make_check(
            "links.latency_order",
            "error",
            a_above_b(column_A="latency_p95_ms", column_B="latency_p50_ms", **skip_missing),
        ),
        make_check(
            "links.beta", "error", between(column="beta_gbps", min_value=0, strict_min=True)
        ),
        make_check(
            "links.window",
            "error",
            a_above_b(column_A="window_end", column_B="window_start", **skip_missing),
        ),
        make_check(
            "links.faster_than_light",
            "warning",
            a_above_b(
                column_A="latency_p50_ms",
                column_B="fiber_floor_ms",
                description="the median latency is at least the great-circle distance over "
                "light in fiber",
                **skip_missing,
            ),
        ),
    ]
    return made


_MESSAGES = {
    "links.self_loop": "self-loops (src == dst) in the link table",
    "links.unordered_pair": "pairs not stored as src < dst",
    "links.unique_pair": "pairs listed more than once",
    "links.unknown_machine": "links name machine(s) that are not in the inventory: {ids}",
    "links.loss_rate": "loss_rate is empty or outside [0, 1]",
    "links.samples": "negative sample counts",
    "links.latency": "latency p50/p95 empty, or a latency that is not positive",
    "links.latency_order": "latency_p50_ms above latency_p95_ms",
    "links.beta": "beta_gbps given but not positive",
    "links.window": "window_end before window_start",
    "links.faster_than_light": "median latency faster than light in fiber between the two "
    "machines' locations",
}


def validate_links(
    links: pd.DataFrame,
    inventory: pd.DataFrame,
    path: str,
    settings: ValidateSettings,
    *,
    session: GxSession | None = None,
) -> list[Finding]:
    """Check a link table (schemas.LINKS) against the inventory; returns findings, never raises.

    `session` is the Great Expectations session to validate through (in memory when None).
    """
    problems = schema_problems(links, schemas.LINKS)
    if problems:
        return [
            finding(
                "error",
                "links.schema",
                path,
                "the link table does not have the expected columns: " + "; ".join(problems),
                count=len(problems),
            )
        ]
    machines = Machines.from_inventory(inventory)
    frame = links.reset_index(drop=True).copy()
    src_row = machines.positions(frame["src"].to_numpy())
    dst_row = machines.positions(frame["dst"].to_numpy())
    frame["src_row"], frame["dst_row"] = src_row, dst_row
    frame["fiber_floor_ms"] = machines.floor_ms(src_row, dst_row, settings.fiber_km_per_ms)
    found: list[Finding] = []
    if len(frame):
        batch = Path(path).name or path
        if session is None:  # nothing keeps the GX result: this thread's scratch session
            scratch = scratch_session(SUITE, None, settings.examples)  # no settings in it
            results = scratch.validate(SUITE, checks, frame, batch, keep=False)
        else:
            results = session.validate(SUITE, checks, frame, batch)
        found += _row_findings(results, frame, path, settings)
    found += _isolated(frame, machines, path, settings)
    return found


def _row_findings(
    results: list[CheckResult], frame: pd.DataFrame, path: str, settings: ValidateSettings
) -> list[Finding]:
    by_rule: dict[str, tuple[Severity, set[int]]] = {}
    for result in results:
        if result.success or result.rule == "links.schema":
            continue
        rows = result.unexpected_index
        if result.rule == "links.src_lt_dst":
            loop = (frame["src"].to_numpy() == frame["dst"].to_numpy())[rows]
            by_rule.setdefault("links.self_loop", ("error", set()))[1].update(rows[loop].tolist())
            by_rule.setdefault("links.unordered_pair", ("error", set()))[1].update(
                rows[~loop].tolist()
            )
            continue
        by_rule.setdefault(result.rule, (result.severity, set()))[1].update(rows.tolist())
    found = []
    for rule in _MESSAGES:
        if rule not in by_rule or not by_rule[rule][1]:
            continue
        severity, picked = by_rule[rule]
        ordered = sorted(picked)
        bad = frame.iloc[ordered]
        columns = list(schemas.LINKS)
        if rule == "links.faster_than_light":
            columns.append("fiber_floor_ms")
        examples = [
            {"row": i, **row}
            for i, row in zip(ordered, frame_records(bad[columns], settings.examples), strict=False)
        ]
        ids = sorted(
            set(bad["src"][bad["src_row"] < 0].tolist())
            | set(bad["dst"][bad["dst_row"] < 0].tolist())
        )
        pairs = name_list(f"{s}-{d}" for s, d in zip(bad["src"], bad["dst"], strict=True))
        message = f"{plural(len(ordered), 'link')} ({pairs}): {_MESSAGES[rule]}"
        message = message.format(ids=name_list(ids))
        found.append(finding(severity, rule, path, message, len(ordered), examples))
    return found


def _isolated(
    frame: pd.DataFrame, machines: Machines, path: str, settings: ValidateSettings
) -> list[Finding]:
    """Active machines that no link touches: drained by assign runs until one measures them."""
    linked = np.union1d(frame["src"].to_numpy(dtype="int64"), frame["dst"].to_numpy(dtype="int64"))
    lonely = np.flatnonzero(machines.active & ~np.isin(machines.ids, linked))
    if len(lonely) == 0:
        return []
    ids = machines.ids[lonely].tolist()
    examples = [
        {"node_id": int(machines.ids[i]), "city": machines.city[i]}
        for i in lonely[: settings.examples]
    ]
    message = (
        f"{plural(len(ids), 'active machine')} without any link (no successful probe to or from "
        f"any other machine in the window), drained for assign runs until one is measured: "
        f"{name_list(ids)}"
    )
    return [finding("warning", "links.isolated_machine", path, message, len(ids), examples)]
