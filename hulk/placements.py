"""The placements file: the published output of an assignment, written and read.

The contract: docs/contracts.md#placements-file.

One JSON document per run, ``<placements dir>/<run-id>.json``, plus ``latest.json`` replaced
atomically (`write_placements`). Other tools read this shape, so the keys of docs/contracts.md are
never renamed or dropped; this module only *adds* keys:

* top level: ``strategy`` (``gnn`` | ``teacher`` | ``A`` | ``B`` | ``C``), ``seed``, ``schedule``
  (``concurrent``: placed jobs run side by side on disjoint machines; ``sequential``: a
  whole-fleet system runs one job at a time) and, after ``hulk replan``, ``replan`` (the run it
  was re-planned from, the failed and added machines, what moved);
* per job: ``layout`` (``pipeline``: ``replicas`` of pipeline stages; ``tensor``: System C's
  tensor parallelism over ``nodes``, which has no stages, so ``replicas`` is empty), ``spec``
  (the job's jobs-file mapping, so the file can be evaluated and re-planned without the jobs
  file) and, in a sequential schedule, ``run_order`` (1 = runs first);
* ``fleet.inventory``: sha256 of the inventory file when the fleet came from one.

``model`` is null for strategies without a model (everything but ``gnn``). ``run_id`` is the
UTC start time and a short hash of the inputs (fleet snapshot, jobs, strategy, seed, model):
``2026-11-21T02-00-00Z-1a2b3c``. Numbers are JSON-safe: a non-finite time is ``null``.

Every job's entry carries the baselines (Systems A, B, C over the *whole* fleet:
docs/design.md#baselines) whatever its status, since they do not depend on the placement;
``estimate`` (the plan's cost and ``lower_bound_s`` = work / Σ F over the job's machines) is
null for jobs without machines.

`read_placements` checks a file strictly: its shape with pydantic models (`_DocumentRecord`, one
`_JobRecord` per job; strict types that fail with the rule they break), then the rules across
fields (structure, coverage, machines, memory). It raises one `InputError` naming the file, the
job and the field for every problem found (the first in the message, all as examples):

====================== =====================================================================
rule                    what is wrong
====================== =====================================================================
placements.readable     missing file, not UTF-8, not JSON, NaN/Infinity in the JSON
placements.schema       ``schema`` is not ``hulk.placements/v1``
placements.missing_key  a required key is absent
placements.wrong_type   a value of the wrong type (a bool is not a number, 2.0 is not an id)
placements.bad_value    a status, layout or schedule outside its set; a negative time
placements.unknown_job  a job without ``spec`` that is neither given nor a preset
placements.bad_spec     a ``spec`` that the jobs file rules reject or that names another job
placements.duplicate_job  two entries for one job
placements.structure    placed without machines; queued/infeasible with machines; ``nodes``
                        not the machines of the stages
placements.coverage     a replica that does not cover ``[0, layers)`` exactly once, in order
placements.unknown_node  a node id that is not in the fleet
placements.node_shared  a machine serving two jobs (or two stages of one job)
placements.memory       a stage (or a tensor-parallel share) that does not fit its machine
====================== =====================================================================

Activity and reachability are *not* reading rules: they change with the fleet, and the cost
model reports them (`hulk evaluate` shows an infeasible estimate with its reason).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, cast

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from hulk import fileio
from hulk.cost import MEMORY_SLACK, Cost, Fleet, Plan, Stage
from hulk.errors import InputError
from hulk.jobs import GB, PRESET_JOBS, Job, job_to_dict, parse_jobs

SCHEMA = "hulk.placements/v1"
LATEST = "latest.json"

PLACED, QUEUED, INFEASIBLE = "placed", "queued", "infeasible"
STATUSES = (PLACED, QUEUED, INFEASIBLE)
PIPELINE, TENSOR = "pipeline", "tensor"
LAYOUTS = (PIPELINE, TENSOR)
CONCURRENT, SEQUENTIAL = "concurrent", "sequential"
SCHEDULES = (CONCURRENT, SEQUENTIAL)
SYSTEM_NAMES = ("A", "B", "C")
_TIMES = ("iteration_s", "compute_s", "comm_s")
_RUN_ID_HASH = 6  # hex digits of the inputs' hash in a run id


# --- in memory --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobPlacement:
    """Where one job runs, on one fleet: machines are fleet INDICES (as in `hulk.cost`).

    ``nodes`` are the job's machines (for a pipeline layout: the plan's stages, replica by
    replica; for the tensor layout: every machine of the tensor-parallel group). ``estimate``
    is the plan's cost on that fleet; ``baselines`` Systems A, B, C over the whole fleet.
    """

    job: Job
    status: str
    reason: str | None = None
    nodes: tuple[int, ...] = ()
    plan: Plan | None = None
    estimate: Cost | None = None
    lower_bound_s: float | None = None
    baselines: Mapping[str, Cost] = field(default_factory=dict)
    layout: str = PIPELINE
    run_order: int | None = None

    def node_ids(self, fleet: Fleet) -> list[int]:
        return [fleet.node_id(i) for i in self.nodes]

    @property
    def shape(self) -> str:
        """``D×S`` (replicas × stages per replica; ``S`` a range when replicas differ), or
        ``TP×n`` for the tensor layout, or ``-`` without machines."""
        if self.layout == TENSOR and self.nodes:
            return f"TP×{len(self.nodes)}"
        if self.plan is None or not self.plan.replicas:
            return "-"
        depths = sorted({len(replica) for replica in self.plan.replicas})
        stages = str(depths[0]) if len(depths) == 1 else f"{depths[0]}–{depths[-1]}"
        return f"{self.plan.data_parallel}×{stages}"


@dataclass(frozen=True)
class FleetInfo:
    """The contract's ``fleet`` block: machine count, direct links, link-table snapshot."""

    nodes: int
    links: int
    snapshot: str
    inventory: str | None = None  # sha256 of the inventory file, when there is one

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "nodes": self.nodes,
            "links": self.links,
            "snapshot": self.snapshot,
        }
        if self.inventory is not None:
            record["inventory"] = self.inventory
        return record


def direct_links(fleet: Fleet) -> int:
    """Measured (not relayed) links between distinct machines: what the fleet was built from."""
    if fleet.sites is not None:
        return fleet.sites.measured_pairs
    off_diagonal = np.isfinite(np.asarray(fleet.latency_s)) & ~np.asarray(fleet.relayed)
    np.fill_diagonal(off_diagonal, False)
    return int(off_diagonal.sum() // 2)


def fleet_snapshot(fleet: Fleet) -> str:
    """sha256 of a fleet's machines and effective links, for fleets not read from one file."""
    digest = hashlib.sha256()
    for array in (fleet.node_ids, fleet.compute_flops, fleet.memory_bytes, fleet.active):
        digest.update(np.ascontiguousarray(array).tobytes())
    if fleet.sites is not None:  # the site model's tables, not n² gathered pairs
        digest.update(fleet.sites.digest())
    else:
        for pairs in (fleet.latency_s, fleet.bandwidth_Bps):
            digest.update(np.ascontiguousarray(pairs).tobytes())
    return digest.hexdigest()


def fleet_info(
    fleet: Fleet,
    links_file: str | Path | None = None,
    inventory_file: str | Path | None = None,
    snapshot: str | None = None,
) -> FleetInfo:
    """The ``fleet`` block: snapshot = sha256 of `links_file` (else `snapshot`, else a hash of
    the fleet's arrays); ``links`` = direct links of the fleet."""
    if snapshot is None:
        snapshot = fileio.sha256_file(links_file) if links_file else fleet_snapshot(fleet)
    inventory = fileio.sha256_file(inventory_file) if inventory_file else None
    return FleetInfo(fleet.n, direct_links(fleet), snapshot, inventory)


# --- writing ----------------------------------------------------------------------------------


def json_safe(value: Any) -> Any:
    """`value` with numpy scalars as Python numbers and non-finite floats as None."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _utc(moment: dt.datetime) -> dt.datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def make_run_id(started: dt.datetime, inputs: Mapping[str, Any]) -> str:
    """``YYYY-MM-DDTHH-MM-SSZ-xxxxxx``: the UTC start time and a short hash of `inputs`."""
    canonical = json.dumps(json_safe(inputs), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:_RUN_ID_HASH]
    return f"{_utc(started):%Y-%m-%dT%H-%M-%SZ}-{digest}"


def estimate_record(placement: JobPlacement) -> dict[str, Any] | None:
    """The contract's ``estimate`` (null without machines or a cost)."""
    if placement.estimate is None or not placement.nodes:
        return None
    record = {key: getattr(placement.estimate, key) for key in _TIMES}
    record["lower_bound_s"] = placement.lower_bound_s
    return json_safe(record)


def job_record(placement: JobPlacement, fleet: Fleet) -> dict[str, Any]:
    """One ``jobs[]`` entry of the placements document."""
    record: dict[str, Any] = {
        "job": placement.job.name,
        "status": placement.status,
        "reason": placement.reason,
        "nodes": placement.node_ids(fleet),
        "replicas": (
            placement.plan.to_records(fleet)
            if placement.plan is not None and placement.layout == PIPELINE
            else []
        ),
        "estimate": estimate_record(placement),
        "baselines": {
            name: json_safe(cost.to_dict()) for name, cost in sorted(placement.baselines.items())
        },
        "layout": placement.layout,
        "spec": job_to_dict(placement.job),
    }
    if placement.run_order is not None:
        record["run_order"] = placement.run_order
    return record


def build_document(
    placements: Sequence[JobPlacement],
    fleet: Fleet,
    info: FleetInfo,
    *,
    strategy: str,
    schedule: str,
    makespan_s: float | None,
    seed: int | None,
    started: dt.datetime | None = None,
    generated_at: dt.datetime | None = None,
    model: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    job_extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The placements document (docs/contracts.md) for `placements` on `fleet`.

    `started` (default: now) names the run; `generated_at` (default: now) is when the document
    was produced. `extra` adds top-level keys (e.g. ``replan``, ``queue``); `job_extra` adds
    keys to the entry of the job it names (e.g. the scheduler's ``start_at``).
    """
    generated_at = _utc(generated_at or utc_now())
    started = _utc(started or generated_at)
    jobs = [{**job_record(p, fleet), **(job_extra or {}).get(p.job.name, {})} for p in placements]
    inputs = {
        "fleet": info.to_dict(),
        "jobs": [job["spec"] for job in jobs],
        "strategy": strategy,
        "seed": seed,
        "model": model,
        "extra": extra or {},
    }
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": make_run_id(started, inputs),
        "generated_at": f"{generated_at:%Y-%m-%dT%H:%M:%SZ}",
        "model": dict(model) if model is not None else None,
        "fleet": info.to_dict(),
        "jobs": jobs,
        "makespan_s": makespan_s,
        "strategy": strategy,
        "schedule": schedule,
        "seed": seed,
    }
    if extra:
        doc.update(extra)
    return json_safe(doc)


def dumps(doc: Mapping[str, Any]) -> str:
    """The document as JSON text; `ValueError` when it holds NaN or infinity."""
    return json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_placements(doc: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write ``out_dir/<run_id>.json``, then replace ``out_dir/latest.json``; both atomically.

    A run id already taken in `out_dir` (two runs in the same second on the same inputs) gets
    the first free suffix ``-2``, ``-3``, … in the file and its name, so no run's file replaces
    another's (callers serialise runs with the data folder's assign lock). The text is produced
    before anything is written, so a document that cannot be serialised (NaN, infinity) leaves
    the folder as it was; a failure while writing either file leaves the previous
    ``latest.json`` in place. Returns the run's file.
    """
    out_dir = Path(out_dir)
    run_id = doc.get("run_id")
    if not isinstance(run_id, str) or not run_id or "/" in run_id or run_id.startswith("."):
        raise ValueError(f"bad run_id {run_id!r}")
    unique, suffix = run_id, 1
    while (out_dir / f"{unique}.json").exists():
        suffix += 1
        unique = f"{run_id}-{suffix}"
    if unique != run_id:
        doc = {**doc, "run_id": unique}
    text = dumps(doc)
    path = out_dir / f"{unique}.json"
    fileio.write_text(path, text)
    fileio.write_text(out_dir / LATEST, text)
    return path


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacementsFile:
    """A placements file that passed `read_placements`: the raw document and parsed jobs."""

    path: Path
    doc: dict[str, Any]
    placements: list[JobPlacement]

    @property
    def strategy(self) -> str | None:
        value = self.doc.get("strategy")
        return value if isinstance(value, str) else None

    @property
    def schedule(self) -> str:
        value = self.doc.get("schedule")
        return value if value in SCHEDULES else CONCURRENT


class _Problems:
    """Problems of one file, raised together as one InputError (first rule in the message)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: list[tuple[str, str]] = []

    def add(self, rule: str, detail: str) -> None:
        self.found.append((rule, detail))

    def raise_any(self) -> None:
        if not self.found:
            return
        rule, first = self.found[0]
        more = f" (and {len(self.found) - 1} more)" if len(self.found) > 1 else ""
        raise InputError(self.path, rule, first + more, [detail for _, detail in self.found])


class _Checker:
    """The problems of one part of the document (a job), each under its label and field."""

    def __init__(self, problems: _Problems, where: str) -> None:
        self.problems = problems
        self.where = where
        self.ok = True

    def bad(self, rule: str, key: str, detail: str) -> None:
        self.ok = False
        self.problems.add(rule, f"{self.where}field {key!r}: {detail}")


# --- the file's shape as pydantic models -------------------------------------------------------
#
# Types are strict as the contract says (a bool is not a number, 2.0 is not an id): each field
# type checks its value itself and fails with the rule it breaks, so every problem of a file is
# reported under its rule, job and field (`_add_errors`). Keys the models do not name are kept:
# the contract only ever adds keys.


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _got(value: object) -> str:
    """What a value is, for a message: ``null``, ``int 3``, ``str '10'``."""
    return "null" if value is None else f"{type(value).__name__} {value!r:.60}"


def _wrong_type(kind: str, value: object) -> PydanticCustomError:
    detail = f"expected {kind}, got {_got(value)}"
    return PydanticCustomError("placements.wrong_type", "{detail}", {"detail": detail})


def _bad_value(detail: str) -> PydanticCustomError:
    return PydanticCustomError("placements.bad_value", "{detail}", {"detail": detail})


def _strict(kind: str, accepts: Callable[[object], bool], nullable: bool = False) -> Any:
    """A value `accepts` takes as it is (or null when `nullable`), else placements.wrong_type."""

    def check(value: object) -> object:
        if value is None and nullable:
            return None
        if not accepts(value):
            raise _wrong_type(kind + (" or null" if nullable else ""), value)
        return value

    return PlainValidator(check)


def _one_of(choices: tuple[str, ...]) -> Any:
    """A string among `choices`, else placements.bad_value."""

    def check(value: object) -> str:
        if not isinstance(value, str):
            raise _wrong_type("str", value)
        if value not in choices:
            raise _bad_value(f"{value!r} is not one of {choices}")
        return value

    return PlainValidator(check)


def _seconds(value: object) -> float | int | None:
    """A non-negative time or null (null reads as infinity: not finite when written)."""
    if value is None:
        return None
    if not _is_number(value):
        raise _wrong_type("number or null", value)
    assert isinstance(value, int | float)
    if value < 0:
        raise _bad_value(f"a time must not be negative (got {value})")
    return value


def _node_ids(value: object) -> list[int]:
    if not isinstance(value, list):
        raise _wrong_type("list", value)
    bad = [n for n in value if not _is_int(n)]
    if bad:
        detail = f"node ids must be integers (got {bad[:3]})"
        raise PydanticCustomError("placements.wrong_type", "{detail}", {"detail": detail})
    return value


def _object_or_null(value: object) -> object:
    if value is not None and not isinstance(value, dict):
        raise _wrong_type("dict or null", value)
    return value


def _object(value: object) -> object:
    if not isinstance(value, dict):
        raise _wrong_type("dict", value)
    return value


def _has_stages(stages: list[_StageRecord]) -> list[_StageRecord]:
    if not stages:
        raise PydanticCustomError("placements.coverage", "a replica needs stages")
    return stages


Text = Annotated[str, _strict("str", lambda v: isinstance(v, str))]
TextOrNull = Annotated[str | None, _strict("str", lambda v: isinstance(v, str), nullable=True)]
Id = Annotated[int, _strict("int", _is_int)]
IdOrNull = Annotated[int | None, _strict("int", _is_int, nullable=True)]
Flag = Annotated[bool, _strict("bool", lambda v: isinstance(v, bool))]
ObjectOrNull = Annotated[
    dict[str, Any] | None, _strict("dict", lambda v: isinstance(v, dict), nullable=True)
]
Seconds = Annotated[float | int | None, PlainValidator(_seconds)]


class _Record(BaseModel):
    """A mapping of the placements file: the keys it must have; other keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)


class _StageRecord(_Record):
    node: Id
    layer_start: Id
    layer_end: Id


class _ReplicaRecord(_Record):
    stages: Annotated[list[_StageRecord], AfterValidator(_has_stages)]


class _EstimateRecord(_Record):
    iteration_s: Seconds
    compute_s: Seconds
    comm_s: Seconds
    lower_bound_s: Seconds


class _BaselineRecord(_Record):
    iteration_s: Seconds
    compute_s: Seconds
    comm_s: Seconds
    feasible: Flag
    reason: TextOrNull = None


class _BaselinesRecord(BaseModel):
    """Systems A, B, C by name; any other key is a bad value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Absent: None; present, an object (null is a wrong type).
    A: Annotated[_BaselineRecord | None, BeforeValidator(_object)] = None
    B: Annotated[_BaselineRecord | None, BeforeValidator(_object)] = None
    C: Annotated[_BaselineRecord | None, BeforeValidator(_object)] = None


class _JobRecord(_Record):
    job: Text
    status: Annotated[str, _one_of(STATUSES)]
    reason: TextOrNull
    nodes: Annotated[list[int], PlainValidator(_node_ids)]
    replicas: list[_ReplicaRecord]
    estimate: Annotated[_EstimateRecord | None, BeforeValidator(_object_or_null)]
    baselines: _BaselinesRecord
    layout: Annotated[str, _one_of(LAYOUTS)] = PIPELINE
    # Absent: the jobs given or the presets (an explicit null is a wrong type).
    spec: Annotated[dict[str, Any] | None, _strict("dict", lambda v: isinstance(v, dict))] = None
    run_order: IdOrNull = None


class _FleetRecord(_Record):
    nodes: Id
    links: Id
    snapshot: Text


class _DocumentRecord(_Record):
    """The top level (``schema`` is checked first: without it nothing else can be trusted);
    each entry of ``jobs`` is read as a `_JobRecord` on its own."""

    run_id: Text
    generated_at: Text
    model: ObjectOrNull
    makespan_s: Seconds
    # Optional keys: absent is None, an explicit null is a wrong type.
    schedule: Annotated[str | None, _one_of(SCHEDULES)] = None
    strategy: Annotated[str | None, _strict("str", lambda v: isinstance(v, str))] = None
    fleet: _FleetRecord
    jobs: Annotated[list[Any], _strict("list", lambda v: isinstance(v, list))]


def _add_errors(problems: _Problems, error: ValidationError, where: str = "") -> None:
    """Each error of a model as a problem: its rule, then ``<where>[<container>, ]field 'key'``
    and what is wrong (list positions after the key as ``[i]``)."""
    for item in error.errors():
        kind = item["type"]
        value = item.get("input")
        if kind.startswith("placements."):  # raised by the field types above
            rule, message = kind, item["msg"]
        elif kind == "missing":
            rule, message = "placements.missing_key", "missing"
        elif kind == "extra_forbidden":  # the one closed mapping: baselines
            rule, message = "placements.bad_value", f"not one of {SYSTEM_NAMES}"
        else:  # a mapping or list where the value is something else
            wanted = "list" if kind == "list_type" else "an object"
            rule, message = "placements.wrong_type", f"expected {wanted}, got {_got(value)}"
        loc = list(item["loc"])
        keys = [i for i, part in enumerate(loc) if isinstance(part, str)]
        if not keys:  # the whole mapping is of the wrong type
            problems.add(rule, f"{where.removesuffix(', ')}: {message}")
            continue
        last = keys[-1]
        container, field, positions = loc[:last], str(loc[last]), loc[last + 1 :]
        if kind == "extra_forbidden":  # the key itself is wrong: name it with its mapping
            container, field = [], ".".join(str(part) for part in loc)
        inside = _path(container)
        field += _path(positions)
        text = f"{where}{inside + ', ' if inside else ''}field {field!r}"
        problems.add(rule, f"{text}: {message}")


def _path(parts: Sequence[int | str]) -> str:
    """``replicas[0].stages[1]`` from ('replicas', 0, 'stages', 1)."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON-safe (write null)")


def _load_json(path: Path) -> object:
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise InputError(path, "placements.readable", f"the placements file {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise InputError(path, "placements.readable", f"not UTF-8 text: {exc.reason}") from None
    except ValueError as exc:
        raise InputError(path, "placements.readable", f"not valid JSON: {exc}") from None


def read_placements(
    path: str | Path, fleet: Fleet, jobs: Sequence[Job] | Mapping[str, Job] | None = None
) -> PlacementsFile:
    """Read and strictly check a placements file against `fleet` (rules: module docstring).

    A job's sizes come from its ``spec``; without one, from `jobs` (by name), else the presets.
    """
    path = Path(path)
    known = jobs if isinstance(jobs, Mapping) else {job.name: job for job in jobs or ()}
    raw = _load_json(path)
    problems = _Problems(path)
    if not isinstance(raw, dict):
        raise InputError(path, "placements.wrong_type", "expected a JSON object at the top level")
    schema = raw.get("schema")
    if "schema" not in raw:
        raise InputError(path, "placements.missing_key", "field 'schema': missing")
    if schema != SCHEMA:
        raise InputError(
            path, "placements.schema", f"field 'schema' is {schema!r}, expected {SCHEMA!r}"
        )
    entries: list[Any] = []
    try:
        entries = _DocumentRecord.model_validate(raw).jobs
    except ValidationError as error:
        _add_errors(problems, error)
        if isinstance(raw.get("jobs"), list):
            entries = raw["jobs"]

    placements: list[JobPlacement] = []
    owner: dict[int, str] = {}  # node id -> job using it
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        placement = _read_job(problems, index, entry, fleet, known, owner, seen)
        if placement is not None:
            placements.append(placement)
    problems.raise_any()
    return PlacementsFile(path, raw, placements)


def _job_label(index: int, entry: object) -> str:
    name = entry.get("job") if isinstance(entry, dict) else None
    return f"job {index + 1}" + (f" ({name!r})" if isinstance(name, str) else "")


def _read_job(
    problems: _Problems,
    index: int,
    entry: object,
    fleet: Fleet,
    known: Mapping[str, Job],
    owner: dict[int, str],
    seen: set[str],
) -> JobPlacement | None:
    label = _job_label(index, entry)
    name = entry.get("job") if isinstance(entry, dict) else None
    duplicate = isinstance(name, str) and name in seen  # a problem whatever else is wrong
    if isinstance(name, str):
        seen.add(name)
    try:
        record = _JobRecord.model_validate(entry)
    except ValidationError as error:
        _add_errors(problems, error, f"{label}, ")
        if duplicate:
            problems.add(
                "placements.duplicate_job",
                f"{label}, field 'job': {name!r} appears more than once",
            )
        return None
    check = _Checker(problems, f"{label}, ")
    if (
        record.status == INFEASIBLE
        and record.reason is None
        and "reason" in record.model_fields_set
    ):
        check.bad("placements.missing_key", "reason", "an infeasible job must say why")
    if duplicate:
        check.bad("placements.duplicate_job", "job", f"{record.job!r} appears more than once")
    job = _job_of(check, record.job, record.spec, known)
    if not check.ok or job is None:
        return None
    node_ids = list(record.nodes)
    stages = [
        [{"node": s.node, "layer_start": s.layer_start, "layer_end": s.layer_end} for s in r.stages]
        for r in record.replicas
    ]
    _check_structure(check, record.status, record.layout, node_ids, stages)
    if check.ok:
        _check_coverage(check, stages, job)
    plan = _check_machines(check, job, record.layout, node_ids, stages, fleet, owner)
    if not check.ok:
        return None
    indices = tuple(int(i) for i in fleet.index_of(node_ids)) if node_ids else ()
    estimate = record.estimate
    lower = estimate.lower_bound_s if estimate else None
    return JobPlacement(
        job=job,
        status=record.status,
        reason=record.reason,
        nodes=indices,
        plan=plan,
        estimate=_cost(estimate, True, None) if estimate else None,
        lower_bound_s=math.inf if estimate and lower is None else lower,
        baselines=_baselines(cast(dict, entry)["baselines"], record.baselines),
        layout=record.layout,
        run_order=record.run_order,
    )


def _check_structure(
    check: _Checker, status: str | None, layout: str, node_ids: list[int], stages: list
) -> None:
    """Machines only for placed jobs; `nodes` are exactly the stages' machines."""
    if status == PLACED and not node_ids:
        check.bad("placements.structure", "nodes", "a placed job needs machines")
    if status != PLACED and (node_ids or stages):
        check.bad("placements.structure", "nodes", f"a {status} job holds no machines")
    if layout == TENSOR and stages:
        check.bad("placements.structure", "replicas", "the tensor layout has no stages")
    if layout == PIPELINE and status == PLACED and not stages:
        check.bad("placements.structure", "replicas", "a placed pipeline job needs replicas")
    stage_ids = [stage["node"] for replica in stages for stage in replica]
    if layout == PIPELINE and stage_ids != node_ids and sorted(stage_ids) != sorted(node_ids):
        check.bad(
            "placements.structure",
            "nodes",
            f"{node_ids} are not the machines of the stages {stage_ids}",
        )


def _check_coverage(check: _Checker, stages: list, job: Job) -> None:
    """Every replica covers [0, layers) once, in order."""
    for r, replica in enumerate(stages):
        expected = 0
        for k, stage in enumerate(replica):
            start, end = stage["layer_start"], stage["layer_end"]
            if start != expected or end <= start:
                check.bad(
                    "placements.coverage",
                    f"replicas[{r}].stages[{k}]",
                    f"layers [{start}, {end}) do not continue from layer {expected} "
                    f"(each replica must cover [0, {job.layers}) exactly once, in order)",
                )
                break
            expected = end
        else:
            if expected != job.layers:
                check.bad(
                    "placements.coverage",
                    f"replicas[{r}]",
                    f"covers [0, {expected}), expected [0, {job.layers})",
                )


def _check_machines(
    check: _Checker,
    job: Job,
    layout: str,
    node_ids: list[int],
    stages: list,
    fleet: Fleet,
    owner: dict[int, str],
) -> Plan | None:
    """Machines known to the fleet, one job each, with the memory their layers need; the
    pipeline layout's plan (None for the tensor layout, or when a check failed)."""
    fleet_ids = set(fleet.node_ids.tolist())
    unknown = [n for n in node_ids if n not in fleet_ids]
    if unknown:
        check.bad("placements.unknown_node", "nodes", f"node id(s) {unknown} are not in the fleet")
        return None
    for node in node_ids:
        if node in owner:
            where = "another stage of this job" if owner[node] == job.name else repr(owner[node])
            check.bad("placements.node_shared", "nodes", f"machine {node} also serves {where}")
        owner[node] = job.name
    if not check.ok:
        return None
    indices = tuple(int(i) for i in fleet.index_of(node_ids)) if node_ids else ()
    plan = None
    if layout == PIPELINE and stages:
        plan = Plan(
            tuple(
                tuple(
                    Stage(int(fleet.index_of(s["node"])[0]), s["layer_start"], s["layer_end"])
                    for s in replica
                )
                for replica in stages
            )
        )
        _check_memory_pipeline(check, job, fleet, plan)
    elif layout == TENSOR and indices:
        share = job.min_memory_bytes / len(indices)
        for i in indices:
            if share > fleet.memory_bytes[i] * MEMORY_SLACK:
                check.bad(
                    "placements.memory",
                    "nodes",
                    f"machine {fleet.node_id(i)} has {fleet.memory_bytes[i] / GB:.1f} GB, its "
                    f"tensor-parallel share needs {share / GB:.1f} GB",
                )
    return plan


def _check_memory_pipeline(check: _Checker, job: Job, fleet: Fleet, plan: Plan) -> None:
    for r, replica in enumerate(plan.replicas):
        for k, stage in enumerate(replica):
            need = job.min_memory_bytes * stage.layers / job.layers
            have = fleet.memory_bytes[stage.node]
            if need > have * MEMORY_SLACK:
                check.bad(
                    "placements.memory",
                    f"replicas[{r}].stages[{k}]",
                    f"layers [{stage.layer_start}, {stage.layer_end}) need {need / GB:.1f} GB, "
                    f"machine {fleet.node_id(stage.node)} has {have / GB:.1f} GB",
                )


def _job_of(
    check: _Checker, name: str | None, spec: dict | None, known: Mapping[str, Job]
) -> Job | None:
    if name is None:
        return None
    if spec is not None:
        try:
            (job,) = parse_jobs({"jobs": [spec]})
        except InputError as exc:
            check.bad("placements.bad_spec", "spec", exc.detail)
            return None
        if job.name != name:
            check.bad("placements.bad_spec", "spec", f"describes {job.name!r}, not {name!r}")
            return None
        return job
    if name in known:
        return known[name]
    if name in PRESET_JOBS:
        return PRESET_JOBS[name]
    check.bad(
        "placements.unknown_job",
        "job",
        f"{name!r} has no 'spec' and is neither in the jobs given nor a preset",
    )
    return None


def _cost(record: _EstimateRecord | _BaselineRecord, feasible: bool, reason: str | None) -> Cost:
    times = (record.iteration_s, record.compute_s, record.comm_s)
    iteration_s, compute_s, comm_s = (math.inf if t is None else float(t) for t in times)
    return Cost(iteration_s, compute_s, comm_s, feasible=feasible, reason=reason)


def _baselines(raw: Mapping[str, Any], record: _BaselinesRecord) -> dict[str, Cost]:
    """The systems' costs in the file's order."""
    systems: dict[str, Cost] = {}
    for name in raw:
        system: _BaselineRecord = getattr(record, name)
        systems[name] = _cost(system, system.feasible, system.reason)
    return systems
