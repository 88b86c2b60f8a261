"""The assign step: placements for the jobs file on the data folder's fleet (`hulk.assign`;
the champion GNN through `hulk.gnn.model_placements`), written atomically as
``<run-id>.json`` and ``latest.json`` (`hulk.placements`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hulk import schemas
from hulk.data_folder import load_fleet, model_graph
from hulk.settings import Settings
from hulk.stages import StepResult, Summary

if TYPE_CHECKING:
    from hulk.cost import Fleet
    from hulk.jobs import Job
    from hulk.placements import JobPlacement


@dataclass(frozen=True)
class AssignSummary(Summary):
    strategy: str
    run_id: str
    jobs: list[dict[str, Any]]  # `placement_rows`
    makespan_s: float | None


def run(
    data_dir: Path,
    settings: Settings,
    jobs_file: Path | None = None,
    strategy: str | None = None,
    out_dir: Path | None = None,
    seed: int | None = None,
    now: dt.datetime | None = None,
) -> StepResult[AssignSummary]:
    """Place the jobs of `jobs_file` on the fleet of `data_dir`; write placements atomically.

    Defaults from params.yaml (``assign:`` and ``seed``). Every input is read and checked, and
    the assignment made, before anything is written.
    """
    from hulk import placements as pl
    from hulk.assign import check_strategy, makespan, place_jobs, schedule_of
    from hulk.jobs import load_jobs

    started = now or pl.utc_now()
    jobs_file = jobs_file or settings.assign.jobs_file
    strategy = strategy or settings.assign.strategy
    if strategy == "auto":  # the GNN once a champion model is registered, else the teacher
        from hulk.registry import champion_exists

        strategy = "gnn" if champion_exists(settings) else "teacher"
    if strategy != "gnn":  # the GNN's own check is loading the champion
        check_strategy(strategy)
    out_dir = out_dir or settings.assign.placements_dir
    seed = settings.seed if seed is None else seed
    jobs = load_jobs(jobs_file)
    fleet, inventory, links = load_fleet(data_dir, settings)
    model_record = None
    if strategy == "gnn":
        placed, model_record = champion_placements(
            data_dir, jobs, fleet, inventory, links, settings, seed
        )
    else:
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
        model=model_record,
    )
    path = pl.write_placements(doc, out_dir)
    return StepResult(
        outputs={"placements": path, "latest": out_dir / pl.LATEST},
        summary=AssignSummary(
            strategy=strategy,
            run_id=doc["run_id"],
            jobs=placement_rows(placed, fleet),
            makespan_s=doc["makespan_s"],
        ),
    )


def champion_placements(
    data_dir: Path,
    jobs: Sequence[Job],
    fleet: Fleet,
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    settings: Settings,
    seed: int,
) -> tuple[list[JobPlacement], dict[str, Any]]:
    """The champion GNN + Algorithm 1 + planner; the teacher's plan when the quick check fails.

    Returns the placements and the placements file's ``model`` record (name, version, alias,
    and ``fallback``: why the teacher's plan was used instead, or null).
    """
    from hulk.gnn import model_placements
    from hulk.model import model_from_state
    from hulk.registry import load_model_files

    state_dict, config, version = load_model_files(settings, alias="champion")
    model = model_from_state(config, state_dict)
    graph = model_graph(data_dir, settings)
    placements, fallback = model_placements(
        model, jobs, fleet, inventory, links, settings, seed, graph=graph
    )
    record = {
        "name": version.name,
        "version": str(version.version),
        "alias": version.alias,
        "fallback": fallback,
    }
    return placements, record


def placement_rows(placements: Sequence[JobPlacement], fleet: Fleet) -> list[dict[str, Any]]:
    """Per job: status, machines (node ids), shape, iteration time, lower bound, reason (the
    CLI's placements table and the assign metrics)."""
    return [
        {
            "job": p.job.name,
            "status": p.status,
            "machines": p.node_ids(fleet),
            "shape": p.shape,
            "iteration_s": p.estimate.iteration_s if p.estimate else None,
            "lower_bound_s": p.lower_bound_s,
            "reason": p.reason,
        }
        for p in placements
    ]
