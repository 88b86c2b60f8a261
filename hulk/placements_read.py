"""Reading a placements file back (`hulk.placements` writes it): every rule checked.

The contract: docs/contracts.md#placements-file.

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
placements.bad_value    a status, layout or schedule outside its set; a negative time; a
                        scheduler's ``start_at`` / ``finish_at`` that is no UTC time
                        ``YYYY-MM-DDTHH:MM:SSZ``, or a finish before the start
placements.unknown_job  a job without ``spec`` that is neither given nor a preset
placements.bad_spec     a ``spec`` that the jobs file rules reject or that names another job
placements.duplicate_job  two entries for one job
placements.structure    placed without machines; queued/infeasible with machines; ``nodes``
                        not the machines of the stages
placements.coverage     a replica that does not cover ``[0, layers)`` exactly once, in order
placements.unknown_node  a node id that is not in the fleet
placements.added_machines  machines a re-plan added (``replan.added_nodes``) and a job uses,
                        that the fleet lacks
placements.node_shared  a machine serving two jobs (or two stages of one job)
placements.memory       a stage (or a tensor-parallel share) that does not fit its machine
====================== =====================================================================

Activity and reachability are *not* reading rules: they change with the fleet, and the cost
model reports them (`hulk evaluate` shows an infeasible estimate with its reason).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hulk.cost import MEMORY_SLACK, Cost, Fleet, Plan, Stage
from hulk.errors import InputError
from hulk.jobs import GB, PRESET_JOBS, Job, parse_jobs
from hulk.placements import (
    CONCURRENT,
    INFEASIBLE,
    LAYOUTS,
    PIPELINE,
    PLACED,
    SCHEDULES,
    SCHEMA,
    STATUSES,
    SYSTEM_NAMES,
    TENSOR,
    JobPlacement,
)


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


def _utc_or_null(value: object) -> object:
    """A scheduler's time: ``YYYY-MM-DDTHH:MM:SSZ`` (as written), or null."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _wrong_type("str or null", value)
    if not _UTC_TIME.fullmatch(value):
        raise _bad_value(f"{value!r} is not a UTC time YYYY-MM-DDTHH:MM:SSZ")
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _bad_value(f"{value!r} is not a UTC time YYYY-MM-DDTHH:MM:SSZ") from None
    return value


_UTC_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
UtcOrNull = Annotated[str | None, PlainValidator(_utc_or_null)]
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
    # The scheduler's estimates (its runs only).
    start_at: UtcOrNull = None
    finish_at: UtcOrNull = None

    @model_validator(mode="after")
    def _finish_not_before_start(self) -> _JobRecord:
        # Same format, so the text orders as the time.
        if self.start_at and self.finish_at and self.finish_at < self.start_at:
            raise _bad_value(f"finish_at {self.finish_at} is before start_at {self.start_at}")
        return self


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
    added = _added_elsewhere(raw, fleet)
    if added and any(rule == "placements.unknown_node" for rule, _ in problems.found):
        raise InputError(
            path,
            "placements.added_machines",
            f"re-planned with machine(s) {added} added (`hulk replan --add-nodes`) that this "
            "fleet lacks: read it on a fleet that has them (their rows in the inventory, their "
            "links in the link table)",
            [detail for _, detail in problems.found],
        )
    problems.raise_any()
    return PlacementsFile(path, raw, placements)


def _added_elsewhere(raw: Mapping[str, Any], fleet: Fleet) -> list[int]:
    """The machines a re-plan added (``replan.added_nodes``) that `fleet` does not list."""
    record = raw.get("replan")
    added = record.get("added_nodes") if isinstance(record, dict) else None
    if not isinstance(added, list):
        return []
    known = set(fleet.node_ids.tolist())
    return sorted({n for n in added if isinstance(n, int) and n not in known})


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
