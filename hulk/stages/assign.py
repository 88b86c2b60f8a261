"""The assign step: placements for the jobs file on the data folder's fleet (`hulk.assign`;
the champion GNN through `hulk.gnn.model_placements`), written atomically as
``<run-id>.json`` and ``latest.json`` (`hulk.placements`)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hulk import schemas
from hulk.data_folder import load_fleet, require_folder
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.settings import Settings
from hulk.stages import JobRow, StepResult, Summary

if TYPE_CHECKING:
    from hulk.cost import Fleet
    from hulk.placements import JobPlacement
    from hulk.stages.scheduling import QueueBlock


@dataclass(frozen=True)
class AssignSummary(Summary):
    strategy: str
    run_id: str
    jobs: list[JobRow]  # `placement_rows`
    makespan_s: float | None
    queue: QueueBlock | None = None  # the scheduler's figures (`hulk.stages.scheduling`)
    # A, B, C only: running jobs that kept latest.json the scheduler's (0: it was replaced).
    kept_latest: int | None = None

    def to_dict(self) -> dict[str, Any]:
        record = super().to_dict()
        if not self.kept_latest:  # latest.json was replaced, as by every schedule
            del record["kept_latest"]
        return record


def run(
    data_dir: Path,
    settings: Settings,
    jobs_file: Path | None = None,
    strategy: str | None = None,
    out_dir: Path | None = None,
    seed: int | None = None,
    now: dt.datetime | None = None,
) -> StepResult[AssignSummary]:
    """Schedule the jobs on the fleet of `data_dir`; write placements atomically.

    Defaults from params.yaml (``assign:``, ``scheduler:`` and ``seed``). The concurrent
    strategies (``teacher``, ``gnn``) schedule (`hulk.scheduler`, state in the data folder's job
    store, under its assign lock); the whole-fleet systems A, B, C place the jobs file one job
    at a time, without state. Every input is read and checked, and the assignment made, before
    anything is written.
    """
    from hulk import placements as pl
    from hulk.assign import check_strategy, schedule_of

    require_folder(Path(data_dir))  # before any lock: a mistyped --data grows no folder
    started = now or pl.utc_now()
    jobs_file = jobs_file or settings.assign.jobs_file
    strategy = strategy or settings.assign.strategy
    unreachable: list[Finding] = []
    if strategy == "auto":  # the GNN once a champion model is registered, else the teacher
        strategy, unreachable = _auto_strategy(settings)
    check_strategy(strategy)  # a gnn run's own check is loading the champion
    out_dir = out_dir or settings.assign.placements_dir
    seed = settings.seed if seed is None else seed
    from hulk.folder_lock import folder_lock
    from hulk.stages.scheduling import schedule_run

    if schedule_of(strategy) == pl.SEQUENTIAL:
        with folder_lock(data_dir, "assign", settings.scheduler.lock_timeout_s):
            return _whole_fleet(
                data_dir, settings, jobs_file, strategy, out_dir, seed, started, now
            )
    with folder_lock(data_dir, "assign", settings.scheduler.lock_timeout_s):
        # The clock once the lock is ours: a run that waited schedules from when it runs.
        started = now or pl.utc_now()
        result = schedule_run(data_dir, settings, jobs_file, strategy, out_dir, seed, started, now)
    result.findings = [*unreachable, *result.findings]
    return result


def _auto_strategy(settings: Settings) -> tuple[str, list[Finding]]:
    """The GNN once a champion model is registered, else the teacher; the teacher too, with a
    warning, when the tracking server does not answer or the registry database is damaged:
    placements must not wait on MLflow."""
    from hulk.registry import champion_exists

    try:
        return ("gnn" if champion_exists(settings) else "teacher"), []
    except InputError as exc:
        if exc.rule not in ("mlflow.unreachable", "registry.readable"):
            raise
        unreachable = exc.rule == "mlflow.unreachable"
        where = settings.mlflow.tracking_uri if unreachable or exc.path is None else exc.path
        return "teacher", [
            Finding(
                "warning",
                exc.rule,
                where,
                f"{exc.detail}: the champion cannot be read, so the teacher places the jobs",
            )
        ]


def _whole_fleet(
    data_dir: Path,
    settings: Settings,
    jobs_file: Path,
    strategy: str,
    out_dir: Path,
    seed: int,
    started: dt.datetime,
    now: dt.datetime | None,
) -> StepResult[AssignSummary]:
    """Systems A, B, C: the jobs file on the whole fleet, one job after another. A comparison,
    not a schedule: while the job store has running jobs, ``latest.json`` stays the scheduler's
    (what the jobs run on) and only the run's own file is written."""
    from hulk import placements as pl
    from hulk.assign import makespan, place_jobs, schedule_of
    from hulk.jobs import load_jobs
    from hulk.stages.scheduling import running_jobs

    jobs = load_jobs(jobs_file)
    fleet, _, _ = load_fleet(data_dir, settings)
    placed = place_jobs(jobs, fleet, strategy, settings, seed)
    info = pl.fleet_info(fleet, data_dir / schemas.LINKS_FILE, data_dir / schemas.INVENTORY_FILE)
    doc = pl.build_document(
        placed,
        fleet,
        info,
        strategy=strategy,
        schedule=schedule_of(strategy),
        makespan_s=makespan(placed, strategy),
        seed=seed,
        started=started,
        generated_at=now,
    )
    running = running_jobs(data_dir, out_dir)
    path = pl.write_placements(doc, out_dir, publish=not running)
    outputs = {"placements": path} | ({} if running else {"latest": out_dir / pl.LATEST})
    return StepResult(
        outputs=outputs,
        summary=AssignSummary(
            strategy=strategy,
            run_id=path.stem,
            jobs=placement_rows(placed, fleet),
            makespan_s=doc["makespan_s"],
            kept_latest=running,
        ),
    )


@dataclass
class Champion:
    """The champion GNN for one run: its placements-file ``model`` record (name, version,
    alias, ``fallback``: null until a run falls back to the teacher) and the model, built from
    its files when first asked for (`model`). A run whose jobs keep their machines never asks:
    it then imports no torch or PyG, most of such a run's time."""

    record: dict[str, Any]
    _build: Callable[[], Any]
    _model: Any = None

    def model(self) -> Any:
        """The model, in eval mode (built on the first call)."""
        if self._model is None:
            self._model = self._build()
        return self._model


def load_champion(settings: Settings) -> Champion:
    """The champion of the registry: its version resolved and its files checked now (so that a
    missing or corrupt champion stops the run at once), the weights read when the model is
    first asked for. From a registry only MLflow can read, everything is read now (the files
    are downloaded to a temporary folder)."""
    from hulk.registry import load_model_files, local_model_files, unfit_version

    def build(config: dict[str, Any], state_dict: dict[str, Any]) -> Any:
        from hulk.model import model_from_state

        try:
            return model_from_state(config, state_dict)
        except ValueError as exc:
            raise unfit_version(version, exc) from None

    load: Callable[[], Any]
    files = local_model_files(settings, alias="champion")
    if files is None:
        state_dict, config, version = load_model_files(settings, alias="champion")
        load = functools.partial(build, config, state_dict)
    else:
        checked, version = files, files.info

        def read_and_build() -> Any:
            state_dict, config = checked.read()
            return build(config, state_dict)

        load = read_and_build

    record = {
        "name": version.name,
        "version": str(version.version),
        "alias": version.alias,
        "fallback": None,
    }
    return Champion(record, load)


def placement_rows(placements: Sequence[JobPlacement], fleet: Fleet) -> list[JobRow]:
    """Per job: status, machines (node ids), shape, iteration time, lower bound, reason (the
    CLI's placements table and the assign metrics)."""
    return [
        JobRow(
            job=p.job.name,
            status=p.status,
            machines=p.node_ids(fleet),
            shape=p.shape,
            iteration_s=p.estimate.iteration_s if p.estimate else None,
            lower_bound_s=p.lower_bound_s,
            reason=p.reason,
        )
        for p in placements
    ]
