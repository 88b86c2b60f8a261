"""The evaluate step: the cost table of a placements file on the data folder's fleet against
Systems A, B, C (`hulk.evaluate`), and its plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hulk import fileio, schemas
from hulk.data_folder import load_fleet
from hulk.findings import Finding
from hulk.settings import Settings
from hulk.stages import BASELINE_SYSTEMS, EvaluatedRow, StepResult, Summary

if TYPE_CHECKING:
    from hulk.cost import Cost
    from hulk.evaluate import Evaluation


@dataclass(frozen=True)
class EvaluateSummary(Summary):
    run_id: str | None
    strategy: str | None
    schedule: str
    jobs: list[EvaluatedRow]  # `evaluated_rows`
    makespan_s: float | None
    # Whether the file is the data folder's latest.json, which the step's metrics describe
    # (not whether the assign flow has published it to MLflow: latest.published.json says so).
    is_latest: bool = True


def run(
    data_dir: Path,
    settings: Settings,
    placements_file: Path | None = None,
    plot: Path | None = None,
) -> StepResult[EvaluateSummary]:
    """Cost table of `placements_file` on the fleet of `data_dir`, and a PNG plot at `plot`.

    Without `placements_file` it is the published ``latest.json`` and the plot goes beside it
    (``latest.png``, the step's output); a file named by the caller gets a plot only when
    `plot` is given, so reading a file never writes next to it; the step's metrics (the
    published plan's) stay as they were for any file but the published one."""
    from hulk.assign import changed_fleet_frames, earlier_failures
    from hulk.cost import Fleet
    from hulk.evaluate import evaluate as evaluate_file
    from hulk.evaluate import plot_costs
    from hulk.folder_lock import folder_lock
    from hulk.placements import LATEST
    from hulk.placements_read import read_placements

    published_file = settings.assign.placements_dir / LATEST
    if placements_file is None:
        placements_file = published_file
        plot = plot or placements_file.with_suffix(".png")
    fleet, inventory, links = load_fleet(data_dir, settings)
    checked = read_placements(placements_file, fleet)
    failed = earlier_failures(checked.doc, fleet)
    if failed:  # a re-planned file: its fleet no longer has the failed machines
        fleet = Fleet.from_frames(
            *changed_fleet_frames(inventory, links, failed),
            settings.hardware,
            settings.graph.bandwidth_tiers,
            settings.cost,
        )
        checked = read_placements(placements_file, fleet)
    evaluation = evaluate_file(checked, fleet)
    findings = [
        Finding("warning", "evaluate.estimate", str(placements_file), note)
        for note in evaluation.notes
    ]
    snapshot = checked.doc.get("fleet", {}).get("snapshot")
    links_sha = fileio.sha256_file(data_dir / schemas.LINKS_FILE)
    if snapshot != links_sha and "replan" not in checked.doc:
        findings.append(
            Finding(
                "warning",
                "evaluate.snapshot",
                str(placements_file),
                f"the file was made on link table {str(snapshot)[:12]}…, the data folder holds "
                f"{links_sha[:12]}…: figures are recomputed on the data folder's fleet",
            )
        )
    if plot is not None:
        # Named by its run, so the published plot is the same whether the assign flow drew it
        # from <run-id>.json or the evaluate step from latest.json.
        run_id = checked.doc.get("run_id")
        name = f"{run_id}.json" if run_id else placements_file.name
        title = f"{name}: seconds per iteration"
        if plot.resolve() == published_file.with_suffix(".png").resolve():
            # The published plot: never drawn while a publication draws it (its record
            # vouches for the plot it drew).
            timeout = settings.scheduler.lock_timeout_s
            with folder_lock(data_dir, "publish", timeout, nested=True):
                plot_costs(evaluation, plot, title=title)
        else:
            plot_costs(evaluation, plot, title=title)
    return StepResult(
        outputs={} if plot is None else {"plot": plot},
        findings=findings,
        summary=EvaluateSummary(
            run_id=checked.doc.get("run_id"),
            strategy=evaluation.strategy,
            schedule=evaluation.schedule,
            jobs=evaluated_rows(evaluation),
            makespan_s=evaluation.makespan_s,
            is_latest=placements_file.resolve() == published_file.resolve(),
        ),
    )


def evaluated_rows(evaluation: Evaluation) -> list[EvaluatedRow]:
    """Per job of the evaluation: the plan's seconds and parts, the lower bound and Systems A,
    B, C (None for what is infinite or unknown), for the CLI's tables and the metrics."""
    from hulk.placements import json_safe

    def seconds(cost: Cost | None) -> float | None:
        return None if cost is None else json_safe(cost.iteration_s)

    found = []
    for job in evaluation.jobs:
        parts = job.estimate if job.estimate is not None and job.estimate.feasible else None
        found.append(
            EvaluatedRow(
                job=job.job,
                status=job.status,
                machines=json_safe(job.node_ids),
                shape=job.shape,
                iteration_s=seconds(job.estimate),
                lower_bound_s=json_safe(job.lower_bound_s),
                reason=job.reason or (job.estimate.reason if job.estimate else None),
                compute_s=json_safe(parts.compute_s) if parts else None,
                comm_s=json_safe(parts.comm_s) if parts else None,
                baselines_s={name: seconds(job.baselines.get(name)) for name in BASELINE_SYSTEMS},
            )
        )
    return found
