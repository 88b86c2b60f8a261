"""Import the paper's published fleet format: a node file and an edge file.

The format: docs/contracts.md#paper-format.

The node file is a CSV with a header: ``node, City, Capability, Memory`` and optionally
``gpus`` (GPUs per machine; `default_gpu_count` when absent). Header names are trimmed and
matched case-insensitively; unknown extra columns are ignored.

The edge file holds one measured link per row: ``src dst latency_ms`` and optionally a fourth
column, the measured bandwidth in Gbit/s. Fields are separated by whitespace or commas; '#'
starts a comment; blank lines are ignored; a first line such as ``src dst latency_ms`` is taken
for a header. The data are aggregated already, so the link table is built directly:

* one row per unordered pair (src < dst); `samples` is 0 (no probe counts are published) and
  `loss_rate` 0; latency p50 / p95 / mean and `alpha_ms` are the given latency, `beta_gbps` the
  given bandwidth (the mean of the rows that give one; NaN when none); the window is unknown
  (NaT);
* a pair given in both directions gets the mean of the two directions; strongly different
  directions (`asymmetry_ratio` and `asymmetry_min_ms` of the validation settings) are reported
  as the warning ``edges.asymmetric``;
* one direction given several times with different values gets their mean and the warning
  ``edges.conflicting_duplicate``;
* self-loops (``4 4 10``), exact repeats of an earlier row and rows faster than light in fiber
  between the two machines' locations (skipped where a location is unknown) are kept out of
  the link table: they go to the quarantine (file, line, rule, the parsed values and the raw
  text) with the warnings ``edges.self_loop``, ``edges.duplicate`` and
  ``edges.faster_than_light``.

Locations are resolved offline with `hulk.geo.resolve_location`; a location that does not
resolve keeps its trimmed text with empty coordinates and gives the warning
``nodes.unresolved_location`` naming the machines.

Structural problems stop the import with an `InputError` naming the file, the rule and example
lines: a missing or empty file, missing columns, a wrong number of fields, non-numeric or
out-of-range values, duplicate node ids, an edge naming an unknown machine, and a zero or
negative latency, or one above ``validate.max_elapsed_ms`` (as probes: no message waits that
long). Every row is checked before the error is raised, so it lists all the lines
that break the first rule found (first in file order).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.geo import Location, fiber_floor_ms, haversine_km, resolve_location
from hulk.settings import ValidateSettings

# Canonical node-file column -> accepted header names (trimmed, casefolded).
NODE_COLUMNS: dict[str, tuple[str, ...]] = {
    "node": ("node", "node_id", "id"),
    "city": ("city", "location"),
    "capability": ("capability", "compute_capability"),
    "memory": ("memory", "memory_gb"),
}
OPTIONAL_NODE_COLUMNS: dict[str, tuple[str, ...]] = {"gpus": ("gpus", "gpu_count")}
# First fields of an edge-file header line.
EDGE_HEADER_WORDS = frozenset({"src", "source", "from", "u"})

QUARANTINE = {
    "file": "string",
    "line": "int64",
    "rule": "string",
    "src": "int64",
    "dst": "int64",
    "latency_ms": "float64",
    "bandwidth_gbps": "float64",
    "text": "string",
}

_INT = re.compile(r"[+-]?\d+(?:\.0*)?")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# At most this many examples per finding (an InputError keeps them all and shows five).
_FINDING_EXAMPLES = 5
_INT64_LIMIT = 2**63


@dataclass
class ImportResult:
    """What `import_hulk` produced: tables that conform to the schemas, and what was set aside."""

    inventory: pd.DataFrame  # schemas.INVENTORY, sorted by node_id
    links: pd.DataFrame  # schemas.LINKS, one row per unordered pair, sorted by (src, dst)
    findings: list[Finding] = field(default_factory=list)  # warnings: set aside, merged, unresolved
    quarantine: pd.DataFrame = field(default_factory=lambda: schemas.empty(QUARANTINE))


@dataclass(frozen=True)
class _Edge:
    line: int
    src: int
    dst: int
    latency_ms: float
    bandwidth_gbps: float  # NaN when the row has no fourth column
    text: str


class _Problems:
    """Structural problems collected over a whole file; raised as one InputError per file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: dict[str, tuple[str, list[str]]] = {}

    def add(self, rule: str, detail: str, example: str) -> None:
        self.found.setdefault(rule, (detail, []))[1].append(example)

    def raise_first(self) -> None:
        if not self.found:
            return
        (rule, (detail, examples)), *others = self.found.items()
        detail = f"{detail} ({_lines(len(examples))})"
        if others:
            also = ", ".join(f"{other} ({_lines(len(more))})" for other, (_, more) in others)
            detail += f"; also {also}"
        raise InputError(self.path, rule, detail, examples)


def _lines(count: int) -> str:
    return "1 line" if count == 1 else f"{count} lines"


def import_hulk(
    nodes_path: Path,
    edges_path: Path,
    default_gpu_count: int = 8,
    *,
    validation: ValidateSettings | None = None,
) -> ImportResult:
    """Read a fleet in the paper's format: inventory, link table, findings and quarantine.

    `default_gpu_count` is used when the node file has no ``gpus`` column; `validation`
    supplies the asymmetry thresholds (the defaults of `ValidateSettings` when None).
    Raises `InputError` on a structural problem (see the module docstring).
    """
    validation = validation or ValidateSettings()
    inventory, findings = read_nodes(Path(nodes_path), default_gpu_count)
    links, quarantine, edge_findings = read_edges(Path(edges_path), inventory, validation)
    return ImportResult(
        inventory=inventory,
        links=links,
        findings=findings + edge_findings,
        quarantine=quarantine,
    )


def read_nodes(path: Path, default_gpu_count: int = 8) -> tuple[pd.DataFrame, list[Finding]]:
    """The node file alone: inventory (schemas.INVENTORY) and findings (e.g. unresolved places)."""
    return _read_nodes(Path(path), default_gpu_count)


def read_edges(
    path: Path, inventory: pd.DataFrame, validation: ValidateSettings | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[Finding]]:
    """The edge file against an inventory: link table, quarantined rows and findings.

    Also used for links that arrive with new machines (`hulk replan --add-edges`).
    """
    validation = validation or ValidateSettings()
    edges = _read_edges(Path(path), set(inventory["node_id"].tolist()), validation.max_elapsed_ms)
    floors = _fiber_floors(inventory, edges, validation.fiber_km_per_ms)
    return _merge_edges(edges, Path(path), validation, floors)


# --- reading --------------------------------------------------------------------------------


def _read_lines(path: Path, kind: str) -> list[str]:
    """The file's lines (any line ending), or an InputError for a missing or unreadable file."""
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise InputError(path, f"{kind}.missing_file", f"the {kind} file {what}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        detail = f"the {kind} file is not UTF-8 text (byte {exc.start}: {exc.reason})"
        raise InputError(path, f"{kind}.encoding", detail) from None
    except OSError as exc:
        raise InputError(
            path, f"{kind}.unreadable", f"cannot read the {kind} file: {exc}"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _content(lines: Iterable[str], inline_comments: bool) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the lines that are neither blank nor comments."""
    for number, line in enumerate(lines, start=1):
        body = line.split("#", 1)[0] if inline_comments else line
        if body.strip() and not body.lstrip().startswith("#"):
            yield number, body.strip()


def _parse_int(text: str) -> int | None:
    text = text.strip()
    return int(text.split(".")[0]) if _INT.fullmatch(text) else None


def _parse_float(text: str) -> float | None:
    text = text.strip()
    if not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None  # "1e999" overflows to inf


def _example(number: int, line: str, why: str) -> str:
    """One offending line for an InputError, e.g. "line 7: '0 1 -3' (latency -3 ms)"."""
    shown = line if len(line) <= 120 else line[:117] + "..."
    return f"line {number}: {shown!r} ({why})"


# --- nodes ----------------------------------------------------------------------------------


def _csv_fields(path: Path, number: int, line: str) -> list[str]:
    """One CSV line split into fields; InputError for what the csv module cannot read."""
    try:
        return next(csv.reader([line]))
    except csv.Error as exc:
        example = _example(number, line, str(exc))
        raise InputError(path, "nodes.csv_syntax", "not a readable CSV line", [example]) from None


def _header_columns(path: Path, number: int, line: str) -> dict[str, int]:
    """Canonical column -> position in the header; InputError when a column is missing."""
    names = [name.strip().casefold() for name in _csv_fields(path, number, line)]
    wanted = {**NODE_COLUMNS, **OPTIONAL_NODE_COLUMNS}
    positions: dict[str, int] = {}
    for column, accepted in wanted.items():
        hits = [i for i, name in enumerate(names) if name in accepted]
        if len(hits) > 1:
            detail = f"column {column!r} appears {len(hits)} times in the header"
            raise InputError(path, "nodes.duplicate_columns", detail, [f"line {number}: {line!r}"])
        if hits:
            positions[column] = hits[0]
    missing = [column for column in NODE_COLUMNS if column not in positions]
    if missing:
        expected = ", ".join(NODE_COLUMNS)
        detail = f"missing column(s) {', '.join(missing)}; the header needs {expected} (+ gpus)"
        raise InputError(path, "nodes.missing_columns", detail, [f"line {number}: {line!r}"])
    return positions


def _read_nodes(path: Path, default_gpu_count: int) -> tuple[pd.DataFrame, list[Finding]]:
    rows = list(_content(_read_lines(path, "nodes"), inline_comments=False))
    if not rows:
        raise InputError(path, "nodes.empty_file", "the node file has no header and no machines")
    header_number, header = rows[0]
    columns = _header_columns(path, header_number, header)
    width = len(_csv_fields(path, header_number, header))
    if len(rows) == 1:
        raise InputError(
            path,
            "nodes.empty_file",
            "the node file has a header but no machines",
            [f"line {header_number}: {header!r}"],
        )

    problems = _Problems(path)
    records: list[dict] = []
    first_line: dict[int, int] = {}
    for number, line in rows[1:]:
        fields = _csv_fields(path, number, line)
        if len(fields) != width:
            problems.add(
                "nodes.field_count",
                f"rows must have {width} fields like the header",
                _example(number, line, f"{len(fields)} fields"),
            )
            continue
        node = _parse_int(fields[columns["node"]])
        capability = _parse_float(fields[columns["capability"]])
        memory = _parse_float(fields[columns["memory"]])
        gpus = _parse_int(fields[columns["gpus"]]) if "gpus" in columns else default_gpu_count
        values = {"node": node, "Capability": capability, "Memory": memory, "gpus": gpus}
        bad = [name for name, value in values.items() if value is None]
        if bad:
            problems.add(
                "nodes.non_numeric",
                "node and gpus must be integers, Capability and Memory numbers",
                _example(number, line, f"{', '.join(bad)} not a number"),
            )
            continue
        assert node is not None and gpus is not None  # `bad` is empty
        assert capability is not None and memory is not None
        out_of_range = [] if 0 <= node < _INT64_LIMIT else [f"node {node} not in [0, 2**63)"]
        for name, value in (("Capability", capability), ("Memory", memory), ("gpus", gpus)):
            if value <= 0:
                out_of_range.append(f"{name} {value:g} <= 0")
        if gpus >= _INT64_LIMIT:
            out_of_range.append(f"gpus {gpus} too large")
        if out_of_range:
            problems.add(
                "nodes.out_of_range",
                "node ids must be in [0, 2**63); Capability, Memory and gpus > 0",
                _example(number, line, "; ".join(out_of_range)),
            )
            continue
        if node in first_line:
            problems.add(
                "nodes.duplicate_id",
                "node ids must be unique",
                _example(number, line, f"node {node} is already on line {first_line[node]}"),
            )
            continue
        first_line[node] = number
        records.append(
            {
                "node_id": node,
                "text": fields[columns["city"]],
                "compute_capability": capability,
                "gpu_count": gpus,
                "memory_gb": memory,
            }
        )
    problems.raise_first()
    return _inventory(records, path)


def _inventory(records: list[dict], path: Path) -> tuple[pd.DataFrame, list[Finding]]:
    """Resolve the locations and build the inventory; warn about those that do not resolve."""
    resolved: dict[str, Location | None] = {}
    unresolved: dict[str, list[int]] = {}
    for record in records:
        text = record.pop("text").strip()
        if text not in resolved:
            resolved[text] = resolve_location(text)
        place = resolved[text]
        if place is None:
            unresolved.setdefault(text, []).append(record["node_id"])
            record.update(city=text, country=pd.NA, lat=math.nan, lon=math.nan)
        else:
            record.update(city=place.name, country=place.country, lat=place.lat, lon=place.lon)
        record["status"] = schemas.STATUS_ACTIVE
    findings = [
        Finding(
            severity="warning",
            rule="nodes.unresolved_location",
            file=str(path),
            message=(
                f"location {text!r} of machine(s) {_id_list(ids)} is not a known city, region or "
                "country; its coordinates are left empty"
            ),
            count=len(ids),
            examples=[{"location": text, "node_ids": ids[:20]}],
        )
        for text, ids in unresolved.items()
    ]
    frame = pd.DataFrame(records, columns=list(schemas.INVENTORY))
    frame = schemas.conform(frame, schemas.INVENTORY)
    return frame.sort_values("node_id", kind="stable").reset_index(drop=True), findings


def _id_list(ids: list[int], limit: int = 10) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


# --- edges ----------------------------------------------------------------------------------


def _edge_fields(body: str) -> list[str]:
    """Split an edge row on commas (if any) or whitespace; a trailing empty field is dropped."""
    if "," in body:
        fields = [part.strip() for part in body.split(",")]
        return fields[:-1] if len(fields) > 3 and fields[-1] == "" else fields
    return body.split()


def _read_edges(path: Path, known: set[int], max_latency_ms: float) -> list[_Edge]:
    rows = list(_content(_read_lines(path, "edges"), inline_comments=True))
    if rows and _edge_fields(rows[0][1])[0].casefold() in EDGE_HEADER_WORDS:
        rows = rows[1:]
    if not rows:
        raise InputError(path, "edges.empty_file", "the edge file has no edge rows")

    problems = _Problems(path)
    edges: list[_Edge] = []
    for number, line in rows:
        fields = _edge_fields(line)
        if len(fields) not in (3, 4):
            problems.add(
                "edges.field_count",
                "edge rows are 'src dst latency_ms [bandwidth_gbps]'",
                _example(number, line, f"{len(fields)} fields"),
            )
            continue
        src, dst = _parse_int(fields[0]), _parse_int(fields[1])
        latency = _parse_float(fields[2])
        bandwidth = _parse_float(fields[3]) if len(fields) == 4 else math.nan
        values = {"src": src, "dst": dst, "latency_ms": latency, "bandwidth_gbps": bandwidth}
        bad = [name for name, value in values.items() if value is None]
        if bad:
            problems.add(
                "edges.non_numeric",
                "src and dst must be integers, latency_ms and bandwidth_gbps numbers",
                _example(number, line, f"{', '.join(bad)} not a number"),
            )
            continue
        assert src is not None and dst is not None and latency is not None  # `bad` is empty
        assert bandwidth is not None
        if latency <= 0:
            problems.add(
                "edges.non_positive_latency",
                "latency_ms must be > 0",
                _example(number, line, f"latency {latency:g} ms"),
            )
            continue
        if latency > max_latency_ms:  # as probes are: no message waits that long
            problems.add(
                "edges.latency_too_large",
                f"latency_ms must be at most validate.max_elapsed_ms ({max_latency_ms:g} ms)",
                _example(number, line, f"latency {latency:g} ms"),
            )
            continue
        if bandwidth <= 0:
            problems.add(
                "edges.non_positive_bandwidth",
                "bandwidth_gbps must be > 0",
                _example(number, line, f"bandwidth {bandwidth:g} Gbit/s"),
            )
            continue
        unknown = [str(node) for node in (src, dst) if node not in known]
        if unknown:
            problems.add(
                "edges.unknown_node",
                "edges must name machines of the node file",
                _example(number, line, f"no machine {' or '.join(dict.fromkeys(unknown))}"),
            )
            continue
        edges.append(_Edge(number, src, dst, latency, bandwidth, line))
    problems.raise_first()
    return edges


def _fiber_floors(inventory: pd.DataFrame, edges: list[_Edge], km_per_ms: float) -> np.ndarray:
    """Fastest physically possible one-way time per edge row; NaN where a location is unknown."""
    if not edges:
        return np.zeros(0)
    where = inventory.set_index("node_id")[["lat", "lon"]].astype(float)
    src = where.reindex([edge.src for edge in edges]).to_numpy()
    dst = where.reindex([edge.dst for edge in edges]).to_numpy()
    return fiber_floor_ms(haversine_km(src[:, 0], src[:, 1], dst[:, 0], dst[:, 1]), km_per_ms)


def _merge_edges(
    edges: list[_Edge], path: Path, validation: ValidateSettings, floors: np.ndarray
) -> tuple[pd.DataFrame, pd.DataFrame, list[Finding]]:
    """Link table (one row per unordered pair), quarantine and findings from the edge rows.

    `floors` holds each row's fiber-floor time: a row faster than light is an impossible
    measurement and is quarantined like a self-loop, not merged into the link.
    """
    quarantined: list[tuple[_Edge, str]] = []
    seen: dict[tuple, _Edge] = {}
    # (low, high) -> {direction (src, dst): distinct rows}
    pairs: dict[tuple[int, int], dict[tuple[int, int], list[_Edge]]] = {}
    for edge, floor in zip(edges, floors, strict=True):
        if edge.src == edge.dst:
            quarantined.append((edge, "edges.self_loop"))
            continue
        if edge.latency_ms < floor:
            quarantined.append((edge, "edges.faster_than_light"))
            continue
        bandwidth = None if math.isnan(edge.bandwidth_gbps) else edge.bandwidth_gbps
        key = (edge.src, edge.dst, edge.latency_ms, bandwidth)
        if key in seen:
            quarantined.append((edge, "edges.duplicate"))
            continue
        seen[key] = edge
        pair = (min(edge.src, edge.dst), max(edge.src, edge.dst))
        pairs.setdefault(pair, {}).setdefault((edge.src, edge.dst), []).append(edge)

    conflicts: list[dict] = []
    asymmetric: list[dict] = []
    records: list[dict] = []
    for (low, high), directions in sorted(pairs.items()):
        means: dict[tuple[int, int], float] = {}
        for direction, rows in directions.items():
            means[direction] = float(np.mean([row.latency_ms for row in rows]))
            if len(rows) > 1:
                conflicts.append(
                    {
                        "src": direction[0],
                        "dst": direction[1],
                        "lines": [row.line for row in rows],
                        "latency_ms": [row.latency_ms for row in rows],
                        "merged_ms": means[direction],
                    }
                )
        latency = float(np.mean(list(means.values())))
        if len(means) == 2:
            forward, reverse = means[(low, high)], means[(high, low)]
            slow, fast = max(forward, reverse), min(forward, reverse)
            if (
                slow >= validation.asymmetry_ratio * fast
                and slow - fast >= validation.asymmetry_min_ms
            ):
                asymmetric.append(
                    {
                        "src": low,
                        "dst": high,
                        "lines": [row.line for rows in directions.values() for row in rows],
                        "forward_ms": forward,
                        "reverse_ms": reverse,
                        "merged_ms": latency,
                    }
                )
        bandwidths = [row.bandwidth_gbps for rows in directions.values() for row in rows]
        measured = [value for value in bandwidths if not math.isnan(value)]
        records.append(
            {
                "src": low,
                "dst": high,
                "samples": 0,
                "loss_rate": 0.0,
                "latency_p50_ms": latency,
                "latency_p95_ms": latency,
                "latency_mean_ms": latency,
                "alpha_ms": latency,
                "beta_gbps": float(np.mean(measured)) if measured else math.nan,
            }
        )

    links = pd.DataFrame(records, columns=list(schemas.LINKS)[:-2])
    for column in ("window_start", "window_end"):  # published aggregates carry no window
        links[column] = pd.Series(pd.NaT, index=links.index, dtype=schemas.LINKS[column])
    links = schemas.conform(links, schemas.LINKS)
    quarantine = _quarantine_frame(quarantined, path)
    findings = _edge_findings(quarantined, conflicts, asymmetric, path, validation)
    return links, quarantine, findings


def _quarantine_frame(quarantined: list[tuple[_Edge, str]], path: Path) -> pd.DataFrame:
    if not quarantined:
        return schemas.empty(QUARANTINE)
    frame = pd.DataFrame(
        [
            {
                "file": str(path),
                "line": edge.line,
                "rule": rule,
                "src": edge.src,
                "dst": edge.dst,
                "latency_ms": edge.latency_ms,
                "bandwidth_gbps": edge.bandwidth_gbps,
                "text": edge.text,
            }
            for edge, rule in quarantined
        ]
    )
    return schemas.conform(frame, QUARANTINE)


def _edge_findings(
    quarantined: list[tuple[_Edge, str]],
    conflicts: list[dict],
    asymmetric: list[dict],
    path: Path,
    validation: ValidateSettings,
) -> list[Finding]:
    findings: list[Finding] = []

    def row(edge: _Edge) -> dict:
        return {"line": edge.line, "src": edge.src, "dst": edge.dst, "latency_ms": edge.latency_ms}

    for rule, what in (
        ("edges.self_loop", "self-loop row(s) (a machine linked to itself)"),
        ("edges.duplicate", "row(s) repeating an earlier row exactly"),
        (
            "edges.faster_than_light",
            "row(s) faster than light in fiber between the two machines' locations",
        ),
    ):
        hits = [edge for edge, hit in quarantined if hit == rule]
        if hits:
            lines = ", ".join(str(edge.line) for edge in hits[:10])
            findings.append(
                Finding(
                    severity="warning",
                    rule=rule,
                    file=str(path),
                    message=f"{len(hits)} {what} quarantined (line {lines})",
                    count=len(hits),
                    examples=[row(edge) for edge in hits[:_FINDING_EXAMPLES]],
                )
            )
    if conflicts:
        first = conflicts[0]
        values = " vs ".join(f"{value:g}" for value in first["latency_ms"])
        findings.append(
            Finding(
                severity="warning",
                rule="edges.conflicting_duplicate",
                file=str(path),
                message=(
                    f"{len(conflicts)} direction(s) given more than once with different values,"
                    f" e.g. {first['src']}->{first['dst']}: {values} ms (lines "
                    f"{', '.join(map(str, first['lines']))}); the link uses their mean"
                ),
                count=len(conflicts),
                examples=conflicts[:_FINDING_EXAMPLES],
            )
        )
    if asymmetric:
        first = asymmetric[0]
        findings.append(
            Finding(
                severity="warning",
                rule="edges.asymmetric",
                file=str(path),
                message=(
                    f"{len(asymmetric)} pair(s) given in both directions with strongly different "
                    f"latencies (>= {validation.asymmetry_ratio:g}x and >= "
                    f"{validation.asymmetry_min_ms:g} ms apart), e.g. "
                    f"{first['src']}-{first['dst']}: {first['forward_ms']:g} vs "
                    f"{first['reverse_ms']:g} ms (lines "
                    f"{', '.join(map(str, first['lines']))}); the link uses the mean "
                    f"{first['merged_ms']:g} ms"
                ),
                count=len(asymmetric),
                examples=asymmetric[:_FINDING_EXAMPLES],
            )
        )
    return findings
