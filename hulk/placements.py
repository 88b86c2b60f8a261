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
UTC start time and a short hash of the inputs (fleet snapshot, jobs, strategy, seed, model, and
the ``replan`` record or the ``queue`` block without its ``scheduling_s``, the only figure that
depends on the machine's speed): ``2026-11-21T02-00-00Z-1a2b3c``. Numbers are JSON-safe: a
non-finite time is ``null``.

Every job's entry carries the baselines (Systems A, B, C over the *whole* fleet:
docs/design.md#baselines) whatever its status, since they do not depend on the placement;
``estimate`` (the plan's cost and ``lower_bound_s`` = work / Σ F over the job's machines) is
null for jobs without machines.

Reading and checking a file: `hulk.placements_read`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hulk import fileio
from hulk.cost import Cost, Fleet, Plan
from hulk.jobs import Job, job_to_dict

SCHEMA = "hulk.placements/v1"
LATEST = "latest.json"

PLACED, QUEUED, INFEASIBLE = "placed", "queued", "infeasible"
STATUSES = (PLACED, QUEUED, INFEASIBLE)
PIPELINE, TENSOR = "pipeline", "tensor"
LAYOUTS = (PIPELINE, TENSOR)
CONCURRENT, SEQUENTIAL = "concurrent", "sequential"
SCHEDULES = (CONCURRENT, SEQUENTIAL)
SYSTEM_NAMES = ("A", "B", "C")
ESTIMATE_TIMES = ("iteration_s", "compute_s", "comm_s")
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


# A run's own file: ``<run-id>.json`` (not latest.json, nor the publication record beside it);
# a second run of the same id (`write_placements`) has the suffix ``-2``, ``-3``, ….
RUN_FILE = re.compile(
    r"(?P<run>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z-[0-9a-f]+)(?:-(?P<suffix>\d+))?\.json"
)


def run_files(placements_dir: Path) -> list[Path]:
    """The run files of a placements folder, oldest first: run ids sort by time, and a run id's
    suffixed files come after it, in the order they were written."""
    found = []
    for path in placements_dir.glob("*.json"):
        match = RUN_FILE.fullmatch(path.name)
        if match:
            found.append((match["run"], int(match["suffix"] or 1), path))
    return [path for _, _, path in sorted(found)]


def make_run_id(started: dt.datetime, inputs: Mapping[str, Any]) -> str:
    """``YYYY-MM-DDTHH-MM-SSZ-xxxxxx``: the UTC start time and a short hash of `inputs`."""
    canonical = json.dumps(json_safe(inputs), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:_RUN_ID_HASH]
    return f"{_utc(started):%Y-%m-%dT%H-%M-%SZ}-{digest}"


def estimate_record(placement: JobPlacement) -> dict[str, Any] | None:
    """The contract's ``estimate`` (null without machines or a cost)."""
    if placement.estimate is None or not placement.nodes:
        return None
    record = {key: getattr(placement.estimate, key) for key in ESTIMATE_TIMES}
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
    hashed = dict(extra or {})
    if isinstance(hashed.get("queue"), Mapping):  # the time a run took is no input of it
        hashed["queue"] = {k: v for k, v in hashed["queue"].items() if k != "scheduling_s"}
    inputs = {
        "fleet": info.to_dict(),
        "jobs": [job["spec"] for job in jobs],
        "strategy": strategy,
        "seed": seed,
        "model": model,
        "extra": hashed,
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


def write_placements(doc: Mapping[str, Any], out_dir: str | Path, publish: bool = True) -> Path:
    """Write ``out_dir/<run_id>.json``, then (with `publish`) replace ``out_dir/latest.json``;
    both atomically (`staged_placements` with nothing else to do). Returns the run's file."""
    with staged_placements(doc, out_dir, publish) as path:
        return path


@contextmanager
def staged_placements(
    doc: Mapping[str, Any], out_dir: str | Path, publish: bool = True
) -> Iterator[Path]:
    """Write the run's file ``out_dir/<run_id>.json`` and (with `publish`) ``latest.json`` as
    temporaries beside them and yield the run file's path; when the block succeeds, rename
    the run's file into place, then ``latest.json``. A block that fails leaves the folder as it
    was, so a scheduling run commits its job store inside the block and publishes only what the
    store holds.

    A run id already taken in `out_dir` (two runs in the same second on the same inputs) gets
    the first free suffix ``-2``, ``-3``, … in the file and its name, so no run's file replaces
    another's (callers serialise runs with the data folder's assign lock). The text is produced
    before anything is written, so a document that cannot be serialised (NaN, infinity) leaves
    the folder as it was."""
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
    # The run's file is renamed first (the inner block ends first): latest.json never names a
    # run whose file is not there.
    latest = fileio.atomic_path(out_dir / LATEST) if publish else nullcontext(None)
    with latest as latest_tmp, fileio.atomic_path(path) as run_tmp:
        run_tmp.write_text(text, encoding="utf-8")
        if latest_tmp is not None:
            latest_tmp.write_text(text, encoding="utf-8")
        yield path
    # Every run file has a name of its own: a killed run's temporary is swept here.
    fileio.sweep_stale_temporaries(out_dir, ".*.json.*.tmp")
