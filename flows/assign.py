"""The ``assign`` flow: placements for the upcoming jobs, published with a report.

Reads the upcoming jobs (params: assign.jobs_file), loads the champion (assign.strategy auto),
writes ``<run-id>.json`` and replaces ``latest.json`` atomically (hulk.steps.run →
hulk.stages.assign), then attaches the per-job table (machines, stages, seconds per iteration
against Systems A/B/C) as a Prefect table artifact and, with its markdown twin, to MLflow
(hulk.registry.log_placements), and plots it as ``latest.png`` (the evaluate step's plot).

Publishing is the file, the MLflow run and the plot; ``latest.published.json`` (beside
``latest.json``) is written last and names the run whose publication is whole. A run killed in
between (after ``latest.json``, before its run or plot) leaves the record naming an older run:
the next assign run (every 15 minutes, or the nightly's) completes that publication first (its
MLflow run, unless one already exists for that run id, then the plot and the record).

A run refused one of the data folder's locks (`hulk.folder_lock.is_refusal`: another run holds
it past ``scheduler.lock_timeout_s``) is an expected condition, not a crash, and is never
retried: the run logs the one line naming the lock file and its holder and ends ``Failed`` with
it as its message, without a traceback (flows._common.refused); called in-process (a parent
flow, a test), the flow raises the `hulk.errors.InputError`. Refused the ``assign`` lock (the
assign step's), or the ``publish`` lock while completing a publication, the run has written
nothing; refused the ``publish`` lock after its assign step, it leaves its own publication to
the next run, as a run killed there does.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from flows._common import brief, flow_settings, refused, retry_options
from hulk import fileio, registry, steps
from hulk.data_folder import require_folder
from hulk.errors import HulkError, InputError
from hulk.folder_lock import folder_lock, is_refusal
from hulk.placements import LATEST
from hulk.settings import Settings
from hulk.stages import StepResult
from hulk.stages.assign import AssignSummary
from hulk.steps import placements_markdown

ARTIFACT_KEY = "placements"  # the table artifact; the markdown one is ARTIFACT_KEY-report
PUBLISHED = "latest.published.json"  # beside latest.json: the run whose publication is whole


@task(name="assign", cache_policy=NO_CACHE)
def publish(settings: Settings) -> StepResult[AssignSummary]:
    """Place the jobs and publish latest.json (hulk.steps.run("assign"))."""
    return steps.run("assign", settings)


@task(name="log-placements-to-mlflow", cache_policy=NO_CACHE)
def log_to_mlflow(settings: Settings, placements: str, markdown: str) -> str:
    """The published file (and its report) as artifacts of an MLflow assignment run."""
    with tempfile.TemporaryDirectory(prefix="hulk-report-") as tmp:
        report = Path(tmp) / "placements.md"
        report.write_text(markdown, encoding="utf-8")
        return registry.log_placements(settings, placements, {"report/placements.md": report})


def _assignment_run(settings: Settings, run_id: str) -> str | None:
    """The MLflow assignment run of placements run `run_id`, if one was logged whole. Called
    under the publish lock: a run of it not finished was left by a publication that died
    midway (killed), so it is deleted and the run is logged anew, whole."""
    with registry.tracking(settings) as track:
        experiment = track.client.get_experiment_by_name(settings.mlflow.assignment_experiment)
        if experiment is None:
            return None
        runs = track.client.search_runs(
            [experiment.experiment_id],
            filter_string=f"tags.`hulk.placements.run_id` = '{run_id}'",
        )
        whole = [run for run in runs if run.info.status == "FINISHED"]
        for run in runs:
            if run.info.status != "FINISHED":
                track.client.delete_run(run.info.run_id)
    return whole[0].info.run_id if whole else None


def _published_run(settings: Settings) -> str | None:
    """The run id whose publication (file, MLflow run, plot) is whole, per the record."""
    return _published_record(settings).get("run_id")


def _published_record(settings: Settings) -> dict[str, Any]:
    try:
        record = json.loads((settings.assign.placements_dir / PUBLISHED).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _finish(
    settings: Settings,
    placements: Path,
    mlflow_run: str | None = None,
    log: Callable[[Settings, str, str], str] | None = None,
) -> str | None:
    """The rest of publishing `placements` (a ``<run-id>.json``): if it is still the one
    ``latest.json`` holds, ``latest.png`` (its evaluation: a file the fleet cannot read stops
    here); its MLflow run unless given or already logged (with `log`, `log_to_mlflow`'s
    signature; by default that task's function); then the record. Under the data folder's
    publish lock, the MLflow run included: two runs never interleave their plots, and a run
    still being logged is never taken for one a killed publication left. A publication another
    process completed meanwhile is left as it is."""
    doc = json.loads(placements.read_text(encoding="utf-8"))
    run_id = str(doc["run_id"])
    folder = settings.assign.placements_dir
    with folder_lock(settings.data_dir, "publish", settings.scheduler.lock_timeout_s):
        record = _published_record(settings)
        if record.get("run_id") == run_id:  # completed by another run while this one waited
            return record.get("mlflow_run_id")
        latest = folder / LATEST
        current = json.loads(latest.read_text(encoding="utf-8")).get("run_id") == run_id
        plot = latest.with_suffix(".png")
        if current:  # evaluated first: a file the fleet cannot read gets no MLflow run
            steps.run("evaluate", settings, placements_file=placements, plot=plot)
        mlflow_run = mlflow_run or _assignment_run(settings, run_id)
        if mlflow_run is None:
            mlflow_run = (log or log_to_mlflow.fn)(
                settings, str(placements), placements_markdown(doc)
            )
        if not current:
            return mlflow_run  # a newer run published since: its plot and record are its own
        record = {"run_id": run_id, "mlflow_run_id": mlflow_run, "plot": plot.name}
        fileio.write_text(folder / PUBLISHED, json.dumps(record, indent=2) + "\n")
    return mlflow_run


def _logger() -> Any:
    """The task run's logger; outside a run (a direct call) the module's."""
    try:
        return get_run_logger()
    except Exception:
        return logging.getLogger(__name__)


@task(name="complete-last-publication", cache_policy=NO_CACHE)
def complete_last_publication(settings: Settings) -> str | None:
    """Finish publishing the current ``latest.json`` if a killed run left it without its MLflow
    run or plot (the record names another run). Returns that run id, or None. Raises the
    publish lock's refusal (another run publishes): the run goes no further."""
    try:
        latest = json.loads((settings.assign.placements_dir / LATEST).read_text("utf-8"))
        run_id = latest.get("run_id")
    except (OSError, ValueError, AttributeError):  # none yet, or not ours to complete
        return None
    run_file = settings.assign.placements_dir / f"{run_id}.json"
    if not isinstance(run_id, str) or _published_run(settings) == run_id or not run_file.is_file():
        return None
    try:
        _finish(settings, run_file, None)
    except HulkError as exc:  # e.g. made on a fleet that changed since: this run supersedes it
        if is_refusal(exc):
            raise
        _logger().warning("could not complete the publication of %s: %s", run_id, exc)
        return None
    return run_id


def create_placements_artifacts(doc: dict[str, Any], markdown: str) -> dict[str, str]:
    """The placements file `doc` as the run's Prefect artifacts: the per-job table (key
    ``placements``) and its markdown report (``placements-report``). Returns their ids."""
    table = create_table_artifact(
        [row.to_dict() for row in steps.placements_rows(doc)],
        key=ARTIFACT_KEY,
        description=f"Placements {doc['run_id']} ({doc['strategy']}): seconds per iteration "
        "of each job's plan against Systems A, B, C over the whole fleet.",
    )
    report = create_markdown_artifact(markdown, key=f"{ARTIFACT_KEY}-report")
    return {"table": str(table), "report": str(report)}


@flow(name="placements-report", log_prints=True)
def placements_report_flow(params: str = "params.yaml", data_dir: str | None = None) -> dict:
    """The published ``latest.json`` as the assign flow's artifacts, without placing anything:
    shows the current placements in a Prefect UI that has not seen their assign run."""
    settings = flow_settings(params, data_dir)
    latest = settings.assign.placements_dir / LATEST
    try:
        doc = json.loads(latest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HulkError(f"{latest}: no published placements to report ({exc})") from exc
    return create_placements_artifacts(doc, placements_markdown(doc))


@flow(name="assign", log_prints=True)
def assign_flow(
    params: str = "params.yaml", data_dir: str | None = None
) -> dict[str, Any] | State[Any]:
    """Publish placements for the upcoming jobs with the champion model (else the teacher).

    Returns what the run published; a ``Failed`` state when a lock of the data folder cannot
    be taken (module docstring)."""
    settings = flow_settings(params, data_dir)
    try:
        require_folder(settings.data_dir)
    except InputError as exc:  # a mistyped folder: one line, and no folder grown from it
        return refused(exc)
    try:
        return _assign_and_publish(settings)
    except InputError as exc:  # another run holds the folder: expected, not a crash
        if not is_refusal(exc):
            raise
        return refused(exc)


def _assign_and_publish(settings: Settings) -> dict[str, Any]:
    logger = get_run_logger()
    retry = retry_options(settings.flows, retried=True)
    completed = complete_last_publication.with_options(**retry)(settings)
    if completed:
        # The usual cause is no fault: `hulk assign` by hand (or `hulk stage assign`) writes
        # latest.json and leaves its publication to this flow.
        logger.info(
            "published %s, which latest.json held unpublished (an assign run outside this flow, "
            "or one stopped before its publication)",
            completed,
        )
    published = publish.with_options(**retry)(settings)
    placements = str(published.outputs["placements"])
    doc = json.loads(Path(placements).read_text(encoding="utf-8"))
    markdown = placements_markdown(doc)
    artifacts = create_placements_artifacts(doc, markdown)
    # The MLflow run, the plot, then the record: published (the MLflow run is logged under
    # the publish lock, as the log-placements-to-mlflow task, with its retries).
    mlflow_run = _finish(settings, Path(placements), log=log_to_mlflow.with_options(**retry))
    latest = published.outputs.get("latest", "kept: jobs run on the scheduler's placements")
    logger.info("published %s (latest: %s)", placements, latest)
    return {
        **brief(published.summary),
        "placements": placements,
        "mlflow_run_id": mlflow_run,
        "artifacts": artifacts,
    }
